//! The rule engine on a virtual clock: sustained thresholds, hysteresis,
//! cooldown, min and max, schedules, and a flapping metric that never
//! moves the count.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use interfaces::manifest::elasticity::{rules, ElasticityRule, Rule};

use super::*;

fn metric_rule(min: u32, max: u32, out: f64, inn: f64, for_s: u64, cooldown_s: u64) -> ElasticityRule {
    ElasticityRule {
        component: "web".into(),
        min: Some(min),
        max: Some(max),
        metric: Some("cpu_utilization".into()),
        scale_out_above: Some(out),
        scale_in_below: Some(inn),
        sustained: Some(Duration::from_secs(for_s)),
        cooldown: Some(Duration::from_secs(cooldown_s)),
        schedule: None,
        instances: None,
    }
}

fn schedule_rule(pattern: &str, instances: u32) -> ElasticityRule {
    ElasticityRule {
        component: "web".into(),
        min: None,
        max: None,
        metric: None,
        scale_out_above: None,
        scale_in_below: None,
        sustained: None,
        cooldown: None,
        schedule: Some(pattern.into()),
        instances: Some(instances),
    }
}

/// Monday 2026-11-23 at `h:m:s` UTC, plus `plus_s` seconds.
fn at(h: u32, m: u32, plus_s: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, h, m, 0).unwrap() + chrono::Duration::seconds(plus_s)
}

/// A site of one component: the count, the rules' memory, and rounds every
/// `period_s` on the virtual clock applying each decision at once.
struct Sim {
    rules: Vec<Rule>,
    states: HashMap<usize, RuleState>,
    count: u32,
    decisions: Vec<(i64, Decision)>,
}

impl Sim {
    fn new(raw: &[ElasticityRule], count: u32) -> Self {
        Self {
            rules: rules(raw),
            states: HashMap::new(),
            count,
            decisions: vec![],
        }
    }

    /// One round at `t` with the metric `v`.
    fn round(&mut self, t: DateTime<Utc>, v: Option<f64>) -> Option<Decision> {
        let indexed: Vec<(usize, &Rule)> = self.rules.iter().enumerate().collect();
        let d = decide(&indexed, &mut self.states, self.count, |_| v, t)?;
        changed(&mut self.states, d.rule, t.timestamp_millis());
        self.count = d.to;
        self.decisions.push((t.timestamp(), d.clone()));
        Some(d)
    }

    /// Rounds every `period_s` from `from` for `len_s`, the metric `v(s)`
    /// at `s` seconds in.
    fn run(&mut self, from: DateTime<Utc>, len_s: i64, period_s: i64, v: impl Fn(i64) -> Option<f64>) {
        for s in (0..len_s).step_by(period_s as usize) {
            self.round(from + chrono::Duration::seconds(s), v(s));
        }
    }
}

#[test]
fn a_threshold_must_hold_for_its_period_then_cooldown_spaces_the_changes() {
    let mut sim = Sim::new(&[metric_rule(1, 3, 0.7, 0.2, 60, 120)], 1);
    let t0 = at(10, 0, 0);
    // Above for 50 s: nothing.
    sim.run(t0, 60, 10, |_| Some(0.9));
    assert!(sim.decisions.is_empty());
    // At 60 s held: one more.
    let d = sim.round(t0 + chrono::Duration::seconds(60), Some(0.9)).unwrap();
    assert_eq!((d.from, d.to, d.rule), (1, 2, 0));
    assert!(d.why.contains("cpu_utilization 0.900 above 0.7 for 60s"), "{}", d.why);
    // Still above: the next one waits for the cooldown (120 s), not for `for` alone.
    sim.run(t0 + chrono::Duration::seconds(70), 300, 10, |_| Some(0.9));
    let times: Vec<i64> = sim.decisions.iter().map(|(t, _)| t - t0.timestamp()).collect();
    assert_eq!(times, [60, 180], "cooldown 120 s after the first");
    // And never past max.
    assert_eq!(sim.count, 3);
}

#[test]
fn below_the_low_threshold_it_shrinks_to_min_and_no_further() {
    let mut sim = Sim::new(&[metric_rule(1, 4, 0.7, 0.2, 30, 0)], 3);
    sim.run(at(10, 0, 0), 600, 10, |_| Some(0.05));
    assert_eq!(sim.count, 1);
    assert_eq!(sim.decisions.len(), 2);
    assert!(sim.decisions[0].1.why.contains("below 0.2"));
}

#[test]
fn a_flapping_metric_never_moves_the_count() {
    let mut sim = Sim::new(&[metric_rule(1, 4, 0.7, 0.2, 30, 60)], 2);
    // Above and below in turn every 20 s, for an hour; in the band too.
    sim.run(at(10, 0, 0), 3600, 10, |s| Some([0.9, 0.9, 0.1, 0.1, 0.5][(s / 10 % 5) as usize]));
    assert!(sim.decisions.is_empty(), "{:?}", sim.decisions);
    // No samples: no change either.
    sim.run(at(11, 0, 0), 600, 10, |_| None);
    assert!(sim.decisions.is_empty());
    assert_eq!(sim.count, 2);
}

#[test]
fn min_and_max_hold_whatever_the_metric_says() {
    let mut sim = Sim::new(&[metric_rule(2, 3, 0.7, 0.2, 60, 0)], 1);
    let d = sim.round(at(10, 0, 0), None).unwrap();
    assert_eq!((d.to, d.why.contains("min 2")), (2, true));
    sim.count = 5;
    let d = sim.round(at(10, 1, 0), Some(0.9)).unwrap();
    assert_eq!((d.to, d.why.contains("max 3")), (3, true));
}

#[test]
fn a_schedule_raises_the_count_at_its_time_and_holds_it_as_a_floor() {
    let raw = [
        metric_rule(1, 4, 0.7, 0.2, 30, 0),
        schedule_rule("0 8 * * 1-5", 3),
        schedule_rule("0 20 * * 1-5", 1),
    ];
    let mut sim = Sim::new(&raw, 1);
    // Before 08:00 the 20:00 (Friday's) floor of 1 holds.
    sim.run(at(7, 50, 0), 600, 10, |_| Some(0.5));
    assert!(sim.decisions.is_empty());
    // At 08:00: three.
    let d = sim.round(at(8, 0, 0), Some(0.5)).unwrap();
    assert_eq!((d.to, d.rule), (3, 1));
    assert!(d.why.contains("scheduled"), "{}", d.why);
    // An idle metric does not take it under the floor during the day...
    sim.run(at(8, 0, 10), 3600, 10, |_| Some(0.0));
    assert_eq!(sim.count, 3);
    // ... but it does after 20:00.
    sim.run(at(20, 0, 0), 600, 10, |_| Some(0.0));
    assert_eq!(sim.count, 1);
}
