//! Named metrics, after Cloud Hypervisor's `performance-metrics`: each
//! measurement has a snake_case name ending in its variant (the guest's
//! memory, a scale), a unit, its samples with their min/median/max, and
//! the baseline measured in the same run (the raw tool, its samples) with
//! the ratio of the medians. `scripts/bench` tags each with its section,
//! adds the machine and versions, and prints the table from them
//! (`scripts/lib/bench-results`).

use serde_json::{json, Value};

/// Min, median and max of `v` (zeros when empty).
pub fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    if s.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let m = s.len() / 2;
    let median = if s.len() % 2 == 1 { s[m] } else { (s[m - 1] + s[m]) / 2.0 };
    (s[0], median, s[s.len() - 1])
}

/// `x` rounded to 3 decimals.
pub fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Seconds as milliseconds.
pub fn ms(secs: &[f64]) -> Vec<f64> {
    secs.iter().map(|s| s * 1000.0).collect()
}

fn sampled(v: &[f64]) -> Value {
    let (min, median, max) = stats(v);
    json!({
        "iterations": v.len(),
        "min": r3(min),
        "median": r3(median),
        "max": r3(max),
        "samples": v.iter().map(|x| r3(*x)).collect::<Vec<_>>(),
    })
}

/// The named metric `name` in `unit` (samples already in it; `what` says
/// in words what was measured) next to `baseline`: the raw tool's command
/// and its samples in the same unit, or none.
pub fn metric(name: &str, unit: &str, what: &str, ours: &[f64], baseline: Option<(&str, &[f64])>) -> Value {
    let mut m = sampled(ours);
    m["name"] = json!(name);
    m["unit"] = json!(unit);
    m["description"] = json!(what);
    let (mut base, mut ratio) = (Value::Null, Value::Null);
    if let Some((tool, b)) = baseline {
        base = sampled(b);
        base["tool"] = json!(tool);
        let (bm, om) = (stats(b).1, stats(ours).1);
        if bm > 0.0 {
            ratio = json!(r3(om / bm));
        }
    }
    m["baseline"] = base;
    m["ratio"] = ratio;
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metric_has_its_stats_its_baselines_and_the_ratio_of_the_medians() {
        let m = metric("x_ms", "ms", "x", &[3.0, 1.0, 2.0], Some(("raw", &[4.0, 4.0])));
        assert_eq!(
            (m["min"].as_f64(), m["median"].as_f64(), m["max"].as_f64()),
            (Some(1.0), Some(2.0), Some(3.0))
        );
        assert_eq!(m["iterations"], 3);
        assert_eq!(m["baseline"]["tool"], "raw");
        assert_eq!(m["baseline"]["median"].as_f64(), Some(4.0));
        assert_eq!(m["ratio"].as_f64(), Some(0.5));
        let none = metric("y", "s", "y", &[1.0], None);
        assert!(none["baseline"].is_null() && none["ratio"].is_null());
    }
}
