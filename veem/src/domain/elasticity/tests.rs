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
        resize: None,
        step: None,
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
        resize: None,
        step: None,
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

/// A resize rule: memory from 128 MiB up to 512 by 128, on memory_used.
fn resize_rule() -> ElasticityRule {
    ElasticityRule {
        resize: Some(interfaces::manifest::elasticity::Resource::Memory),
        step: Some(128),
        min: Some(128),
        max: Some(512),
        metric: Some("memory_used".into()),
        scale_out_above: Some(100.0),
        scale_in_below: Some(30.0),
        ..metric_rule(1, 1, 0.0, 0.0, 20, 60)
    }
}

#[test]
fn a_resize_rule_steps_each_instance_within_its_bounds_after_for_and_cooldown() {
    let all = rules(&[resize_rule(), metric_rule(1, 3, 0.7, 0.2, 20, 60)]);
    let indexed: Vec<(usize, &Rule)> = all.iter().enumerate().collect();
    let mut states = HashMap::new();
    let t0 = at(10, 0, 0);
    let mut size = 128u64;
    let mut steps = vec![];
    // memory_used 120 MiB (above 100) for 5 minutes; cpu idle-ish (0.5).
    for s in (0..300).step_by(10) {
        let t = t0 + chrono::Duration::seconds(s);
        let metric = |name: &str| Some(if name == "memory_used" { 120.0 } else { 0.5 });
        if let Some(d) = decide_resize(&indexed, &mut states, metric, t) {
            assert_eq!((d.rule, d.way), (0, Way::Up));
            assert!(d.why.contains("memory_used 120.000 above 100"), "{}", d.why);
            size = d.size_for(size);
            steps.push((s, size));
            changed(&mut states, d.rule, t.timestamp_millis());
        }
        // The metric rule's count does not move (0.5 is between its thresholds).
        assert_eq!(decide(&indexed, &mut states, 1, metric, t), None);
    }
    // After `for` (20 s), then once per cooldown (60 s), up to the max.
    assert_eq!(steps, [(20, 256), (80, 384), (140, 512), (200, 512), (260, 512)]);
    // Down: one step at a time, never below min.
    let d = ResizeDecision {
        rule: 0,
        way: Way::Down,
        resource: interfaces::manifest::elasticity::Resource::Memory,
        step: 128,
        min: 128,
        max: 512,
        why: String::new(),
    };
    assert_eq!((d.size_for(512), d.size_for(200), d.size_for(128)), (384, 128, 128));
    // An instance already beyond the bounds is never moved the other way.
    assert_eq!(ResizeDecision { way: Way::Up, ..d.clone() }.size_for(1024), 1024);
    assert_eq!(d.size_for(64), 64);
}
