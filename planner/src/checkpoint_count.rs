//! Optimal checkpoint count (H §3.4, eq. 3.12-3.16).
//!
//! With planned run time t, checkpoint cost c and n outages to cover, the
//! expected run time with x checkpoints is (eq. 3.12)
//! `f(x) = t + x·c + n·t / (x + 1)`; its minimum is at
//! `x₁ = -1 + sqrt(n·t / c)` (eq. 3.16), and the optimal whole count is
//! `ceil(x₁)` (H: t = 3600 s, c = 120 s, n = 2 gives 7). The x checkpoints
//! cut the run into x + 1 equal parts, so the interval is `t / (x + 1)`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use vee_manifest::{CheckpointInterval, Sla};

/// Optimal number of checkpoints, `ceil(-1 + sqrt(n·t/c))`, at least 0
/// (H eq. 3.16). `run_time_s` = t (s), `checkpoint_cost_s` = c (s, > 0),
/// `outages` = n (n_ro_max). No outages, no run time, or a checkpoint
/// costing nothing meaningful (c <= 0 or not finite) gives 0.
pub fn optimal_checkpoints(run_time_s: f64, checkpoint_cost_s: f64, outages: u32) -> u32 {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if outages == 0 || !positive(run_time_s) || !positive(checkpoint_cost_s) {
        return 0;
    }
    let x1 = -1.0 + (f64::from(outages) * run_time_s / checkpoint_cost_s).sqrt();
    // Round off floating-point noise before ceil (sqrt(16) - 1 must be 3).
    let x = (x1 * 1e9).round() / 1e9;
    x.ceil().clamp(0.0, f64::from(u32::MAX)) as u32
}

/// Expected run time in s with `checkpoints` checkpoints (H eq. 3.12):
/// `t + x·c + n·t/(x+1)`.
pub fn expected_run_time_s(run_time_s: f64, checkpoint_cost_s: f64, outages: u32, checkpoints: u32) -> f64 {
    let x = f64::from(checkpoints);
    run_time_s + x * checkpoint_cost_s + f64::from(outages) * run_time_s / (x + 1.0)
}

/// Interval between checkpoints in s for the optimal count: `t / (x + 1)`;
/// `None` when no checkpoint is worth taking.
pub fn checkpoint_interval_s(run_time_s: f64, checkpoint_cost_s: f64, outages: u32) -> Option<f64> {
    let x = optimal_checkpoints(run_time_s, checkpoint_cost_s, outages);
    (x > 0).then(|| run_time_s / f64::from(x + 1))
}

/// When to checkpoint a VEE.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum CheckpointPlan {
    /// No periodic checkpoints (legacy and background with `auto`, or no
    /// checkpoint worth taking).
    None,
    /// Every `interval`; `count` checkpoints over the planned run time.
    Every {
        /// Time between checkpoints.
        interval: Duration,
        /// Checkpoints over the planned run time.
        count: u32,
    },
}

/// The checkpoint plan of a VEE under `sla`, with planned run time
/// `run_time_s` and checkpoint cost `checkpoint_cost_s` (both s).
///
/// An explicit `checkpoint_interval` is honoured at every level (H §3.4:
/// "the requesting customer is also able to negotiate on a given
/// checkpointing frequency, despite of the chosen level of guarantee").
/// `auto` gives the optimal count for standard, enhanced and full, and no
/// checkpoints for legacy and background (H §3.2.2: no fault tolerance).
pub fn checkpoint_plan(sla: &Sla, run_time_s: f64, checkpoint_cost_s: f64) -> CheckpointPlan {
    match sla.checkpoint_interval {
        CheckpointInterval::Every(interval) => {
            let secs = interval.as_secs_f64();
            // Checkpoints at interval, 2·interval, ... strictly before the end.
            let count = if secs > 0.0 && run_time_s > 0.0 {
                ((run_time_s / secs).ceil() as u32).saturating_sub(1)
            } else {
                0
            };
            CheckpointPlan::Every { interval, count }
        }
        CheckpointInterval::Auto if sla.guarantee.checkpoints_by_default() => {
            match checkpoint_interval_s(run_time_s, checkpoint_cost_s, sla.max_outages) {
                Some(s) => CheckpointPlan::Every {
                    interval: Duration::from_secs_f64(s),
                    count: optimal_checkpoints(run_time_s, checkpoint_cost_s, sla.max_outages),
                },
                None => CheckpointPlan::None,
            }
        }
        CheckpointInterval::Auto => CheckpointPlan::None,
    }
}

#[cfg(test)]
mod tests {
    use vee_manifest::{GuaranteeLevel, MigrationPolicy};

    use super::*;

    #[test]
    fn hovestadt_example_gives_seven() {
        // H: t = 3600 s, c = 120 s, n = 2 -> x1 = -1 + sqrt(60) = 6.75 -> 7.
        assert_eq!(optimal_checkpoints(3600.0, 120.0, 2), 7);
        // f(7) = 3600 + 7*120 + 2*3600/8 = 5340 s.
        assert_eq!(expected_run_time_s(3600.0, 120.0, 2, 7), 5340.0);
        assert_eq!(checkpoint_interval_s(3600.0, 120.0, 2), Some(450.0));
        // "approximately four checkpoints in the case of one expected outage".
        assert_eq!(optimal_checkpoints(3600.0, 120.0, 1), 5);
        assert!((-1.0 + 30f64.sqrt() - 4.477).abs() < 1e-3);
    }

    #[test]
    fn the_count_minimises_expected_run_time_among_integers_at_or_above_x1() {
        for (t, c, n) in [(3600.0, 120.0, 2), (7200.0, 30.0, 3), (600.0, 60.0, 1), (86400.0, 10.0, 5)] {
            let x = optimal_checkpoints(t, c, n);
            let f = |x| expected_run_time_s(t, c, n, x);
            assert!(f(x) <= f(x + 1), "{t} {c} {n}");
            assert!(x == 0 || f(x) <= f(x - 1) + c, "{t} {c} {n}");
        }
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(optimal_checkpoints(3600.0, 120.0, 0), 0);
        assert_eq!(optimal_checkpoints(0.0, 120.0, 2), 0);
        assert_eq!(optimal_checkpoints(3600.0, 0.0, 2), 0);
        assert_eq!(optimal_checkpoints(f64::NAN, 1.0, 2), 0);
        // n·t/c <= 1: no checkpoint helps.
        assert_eq!(optimal_checkpoints(100.0, 200.0, 1), 0);
        assert_eq!(checkpoint_interval_s(100.0, 200.0, 1), None);
        // Exact square: sqrt(16) - 1 = 3.
        assert_eq!(optimal_checkpoints(1600.0, 100.0, 1), 3);
    }

    fn sla(guarantee: GuaranteeLevel, interval: CheckpointInterval) -> Sla {
        Sla {
            guarantee,
            checkpoint_interval: interval,
            max_outages: 2,
            migration: MigrationPolicy::Site,
            max_downtime_ms: None,
            penalty_per_hour: 0.0,
            window: None,
        }
    }

    #[test]
    fn plans_follow_the_guarantee_level() {
        let auto = CheckpointInterval::Auto;
        assert_eq!(
            checkpoint_plan(&sla(GuaranteeLevel::Standard, auto), 3600.0, 120.0),
            CheckpointPlan::Every {
                interval: Duration::from_secs(450),
                count: 7
            }
        );
        assert_eq!(
            checkpoint_plan(&sla(GuaranteeLevel::Legacy, auto), 3600.0, 120.0),
            CheckpointPlan::None
        );
        assert_eq!(
            checkpoint_plan(&sla(GuaranteeLevel::Background, auto), 3600.0, 120.0),
            CheckpointPlan::None
        );
        let every = CheckpointInterval::Every(Duration::from_secs(600));
        assert_eq!(
            checkpoint_plan(&sla(GuaranteeLevel::Legacy, every), 3600.0, 120.0),
            CheckpointPlan::Every {
                interval: Duration::from_secs(600),
                count: 5
            }
        );
    }
}
