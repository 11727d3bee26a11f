//! The elasticity rule engine (issue 40, item 2; E §4.1, §4.4; OneFlow's
//! elasticity and scheduled policies): what one round decides for one
//! component of a service from its `[[elasticity]]` rules, its live
//! instances and its metrics. Pure: the time, the metrics and what each
//! rule remembers between rounds ([`RuleState`]) are given, so that a test
//! drives it on a virtual clock.
//!
//! - A scheduled rule sets a floor from each time of its pattern on: the
//!   one whose latest time is the most recent wins (`0 8 * * 1-5` with 3,
//!   `0 20 * * 1-5` with 1: three instances by day, one by night).
//! - A metric rule keeps the count within its `min` and `max`, and moves
//!   it by one instance when its metric stays above `scale_out_above` (or
//!   below `scale_in_below`) for `for`; a value between the thresholds,
//!   or none, starts the wait again (hysteresis: a flapping metric never
//!   moves the count), and after a change the rule waits out `cooldown`.
//! - Growing wins over shrinking; nothing shrinks below the floor.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use interfaces::manifest::elasticity::Rule;

/// What a rule remembers between rounds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleState {
    /// Since when (ms) its metric has been above `scale_out_above`.
    pub above_since_ms: Option<i64>,
    /// Since when (ms) its metric has been below `scale_in_below`.
    pub below_since_ms: Option<i64>,
    /// When (ms) it last changed the count, or tried to (cooldown).
    pub last_change_ms: Option<i64>,
}

/// A change one round decides: the component to `to` instances (from
/// `from`), because of rule `rule` (its index in the manifest's
/// `[[elasticity]]`), for the reason `why` (naming the values).
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub from: u32,
    pub to: u32,
    pub rule: usize,
    pub why: String,
}

/// Decides for one component: `rules` are its rules with their indices,
/// `states` what each remembers (updated: the waits; the caller calls
/// [`changed`] once it acted), `current` its live instances, `metric` the
/// value of a metric or KPI averaged over them (`None`: no sample), `now`
/// the time. `None`: nothing to change.
pub fn decide(
    rules: &[(usize, &Rule)],
    states: &mut HashMap<usize, RuleState>,
    current: u32,
    metric: impl Fn(&str) -> Option<f64>,
    now: DateTime<Utc>,
) -> Option<Decision> {
    let now_ms = now.timestamp_millis();
    let floor = schedule_floor(rules, now);
    if let Some((rule, instances, at)) = floor {
        if current < instances {
            return Some(Decision {
                from: current,
                to: instances,
                rule,
                why: format!("scheduled: at least {instances} instances since {}", at.to_rfc3339()),
            });
        }
    }
    let floor_n = floor.map_or(0, |f| f.1);
    let (mut grow, mut shrink): (Option<Decision>, Option<Decision>) = (None, None);
    for &(i, rule) in rules {
        let Rule::Metric {
            min,
            max,
            metric: name,
            scale_out_above,
            scale_in_below,
            sustained,
            cooldown,
            ..
        } = rule
        else {
            continue;
        };
        let st = states.entry(i).or_default();
        if current < *min {
            grow.get_or_insert(Decision {
                from: current,
                to: *min,
                rule: i,
                why: format!("{current} instances, fewer than the rule's min {min}"),
            });
            continue;
        }
        if current > *max && current > floor_n {
            shrink.get_or_insert(Decision {
                from: current,
                to: (*max).max(floor_n),
                rule: i,
                why: format!("{current} instances, more than the rule's max {max}"),
            });
            continue;
        }
        let value = metric(name);
        let above = matches!((value, scale_out_above), (Some(v), Some(t)) if v > *t);
        let below = matches!((value, scale_in_below), (Some(v), Some(t)) if v < *t);
        st.above_since_ms = if above { st.above_since_ms.or(Some(now_ms)) } else { None };
        st.below_since_ms = if below { st.below_since_ms.or(Some(now_ms)) } else { None };
        let cooling = st.last_change_ms.is_some_and(|t| now_ms - t < cooldown.as_millis() as i64);
        let held = |since: Option<i64>| since.is_some_and(|s| now_ms - s >= sustained.as_millis() as i64);
        let v = value.unwrap_or_default();
        let for_s = sustained.as_secs();
        if held(st.above_since_ms) && !cooling && current < *max {
            grow.get_or_insert(Decision {
                from: current,
                to: current + 1,
                rule: i,
                why: format!("{name} {v:.3} above {} for {for_s}s", scale_out_above.unwrap_or_default()),
            });
        } else if held(st.below_since_ms) && !cooling && current > (*min).max(floor_n) {
            shrink.get_or_insert(Decision {
                from: current,
                to: current - 1,
                rule: i,
                why: format!("{name} {v:.3} below {} for {for_s}s", scale_in_below.unwrap_or_default()),
            });
        }
    }
    grow.or(shrink)
}

/// Notes that rule `rule` changed the count (or tried to) at `now_ms`:
/// its cooldown starts and its waits start again.
pub fn changed(states: &mut HashMap<usize, RuleState>, rule: usize, now_ms: i64) {
    let st = states.entry(rule).or_default();
    st.last_change_ms = Some(now_ms);
    st.above_since_ms = None;
    st.below_since_ms = None;
}

/// The floor the scheduled rules set now: the rule whose latest time is
/// the most recent, its `instances` and that time.
fn schedule_floor(rules: &[(usize, &Rule)], now: DateTime<Utc>) -> Option<(usize, u32, DateTime<Utc>)> {
    rules
        .iter()
        .filter_map(|&(i, r)| match r {
            Rule::Schedule { schedule, instances, .. } => schedule.find_previous_occurrence(&now, true).ok().map(|at| (i, *instances, at)),
            Rule::Metric { .. } => None,
        })
        .max_by_key(|&(i, _, at)| (at, std::cmp::Reverse(i)))
}

#[cfg(test)]
mod tests;
