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
//! - A resize rule watches its metric the same way (thresholds held for
//!   `for`, cooldown) and makes every instance one `step` larger or
//!   smaller within its `min` and `max` ([`decide_resize`]): vertical
//!   elasticity, beside the count.

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
        let (Rule::Metric { min, max, .. }, Some((t, name))) = (rule, Thresholds::of(rule)) else {
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
        match t.crossed(st, name, metric(name), now_ms) {
            Some((Way::Up, why)) if current < *max => {
                grow.get_or_insert(Decision {
                    from: current,
                    to: current + 1,
                    rule: i,
                    why,
                });
            }
            Some((Way::Down, why)) if current > (*min).max(floor_n) => {
                shrink.get_or_insert(Decision {
                    from: current,
                    to: current - 1,
                    rule: i,
                    why,
                });
            }
            _ => {}
        }
    }
    grow.or(shrink)
}

/// Which way a metric crossed its thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Above `scale_out_above` for `for`: one more instance, or larger.
    Up,
    /// Below `scale_in_below` for `for`: one fewer, or smaller.
    Down,
}

/// A metric or resize rule's thresholds and periods.
struct Thresholds {
    above: Option<f64>,
    below: Option<f64>,
    sustained: std::time::Duration,
    cooldown: std::time::Duration,
}

impl Thresholds {
    /// The thresholds of a metric or resize rule, with its metric's name.
    fn of(rule: &Rule) -> Option<(Thresholds, &str)> {
        match rule {
            Rule::Metric {
                metric,
                scale_out_above,
                scale_in_below,
                sustained,
                cooldown,
                ..
            }
            | Rule::Resize {
                metric,
                scale_out_above,
                scale_in_below,
                sustained,
                cooldown,
                ..
            } => Some((
                Thresholds {
                    above: *scale_out_above,
                    below: *scale_in_below,
                    sustained: *sustained,
                    cooldown: *cooldown,
                },
                metric,
            )),
            Rule::Schedule { .. } => None,
        }
    }

    /// Updates the waits of `st` with `value` of metric `name` at
    /// `now_ms`; the way it crossed a threshold for long enough, outside
    /// the cooldown, with why (naming the value).
    fn crossed(&self, st: &mut RuleState, name: &str, value: Option<f64>, now_ms: i64) -> Option<(Way, String)> {
        let above = matches!((value, self.above), (Some(v), Some(t)) if v > t);
        let below = matches!((value, self.below), (Some(v), Some(t)) if v < t);
        st.above_since_ms = if above { st.above_since_ms.or(Some(now_ms)) } else { None };
        st.below_since_ms = if below { st.below_since_ms.or(Some(now_ms)) } else { None };
        let cooling = st.last_change_ms.is_some_and(|t| now_ms - t < self.cooldown.as_millis() as i64);
        let held = |since: Option<i64>| since.is_some_and(|s| now_ms - s >= self.sustained.as_millis() as i64);
        let (v, for_s) = (value.unwrap_or_default(), self.sustained.as_secs());
        if cooling {
            None
        } else if held(st.above_since_ms) {
            Some((
                Way::Up,
                format!("{name} {v:.3} above {} for {for_s}s", self.above.unwrap_or_default()),
            ))
        } else if held(st.below_since_ms) {
            Some((
                Way::Down,
                format!("{name} {v:.3} below {} for {for_s}s", self.below.unwrap_or_default()),
            ))
        } else {
            None
        }
    }
}

/// A resize one round decides: every instance one `step` of `resource`
/// larger (`Way::Up`) or smaller, within `min` and `max`, because of rule
/// `rule`, for the reason `why`.
#[derive(Clone, Debug, PartialEq)]
pub struct ResizeDecision {
    pub rule: usize,
    pub way: Way,
    pub resource: interfaces::manifest::elasticity::Resource,
    pub step: u32,
    pub min: u32,
    pub max: u32,
    pub why: String,
}

impl ResizeDecision {
    /// The size an instance of size `size` gets: one step up or down,
    /// within the rule's `min` and `max`.
    pub fn size_for(&self, size: u64) -> u64 {
        let (min, max, step) = (u64::from(self.min), u64::from(self.max), u64::from(self.step));
        match self.way {
            Way::Up => size.saturating_add(step).min(max).max(size),
            Way::Down => size.saturating_sub(step).max(min).min(size),
        }
    }
}

/// Decides the resize rules among `rules` for one component (as
/// [`decide`] does the metric rules: `states`, `metric` averaged over its
/// live instances, `now`); the first rule whose metric crossed a
/// threshold for long enough, outside its cooldown. The caller applies it
/// to each instance ([`ResizeDecision::size_for`]) and calls [`changed`].
pub fn decide_resize(
    rules: &[(usize, &Rule)],
    states: &mut HashMap<usize, RuleState>,
    metric: impl Fn(&str) -> Option<f64>,
    now: DateTime<Utc>,
) -> Option<ResizeDecision> {
    let now_ms = now.timestamp_millis();
    for &(i, rule) in rules {
        let (
            Rule::Resize {
                resource, min, max, step, ..
            },
            Some((t, name)),
        ) = (rule, Thresholds::of(rule))
        else {
            continue;
        };
        if let Some((way, why)) = t.crossed(states.entry(i).or_default(), name, metric(name), now_ms) {
            return Some(ResizeDecision {
                rule: i,
                way,
                resource: *resource,
                step: *step,
                min: *min,
                max: *max,
                why,
            });
        }
    }
    None
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
            Rule::Metric { .. } | Rule::Resize { .. } => None,
        })
        .max_by_key(|&(i, _, at)| (at, std::cmp::Reverse(i)))
}

#[cfg(test)]
mod tests;
