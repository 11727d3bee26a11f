//! What a service's manifest promises and asks of the site, parsed once at
//! admission and kept in the service's record: its SLA (`[sla]`: guarantee
//! level, checkpoint interval, outages covered, migration policy, downtime
//! bound, penalty, window) and its affinity / anti-affinity constraints
//! (`[[constraint]]`, E PIII §II). The workflows read these, never the
//! manifest's text again.

use crate::planner::{checkpoint_plan, CheckpointPlan};
use interfaces::manifest::{CheckpointInterval, Constraint, Manifest, Sla};
use serde::{Deserialize, Serialize};

/// Planned run time assumed for a service without a window, for the
/// checkpoint count (s).
pub const DEFAULT_RUN_TIME_S: u64 = 3600;
/// Checkpoint cost assumed before one was measured (s); H eq. 3.16's `c`.
pub const DEFAULT_CHECKPOINT_COST_S: f64 = 5.0;

/// A service's SLA and constraints (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceTerms {
    pub sla: Sla,
    #[serde(default)]
    pub constraints: Vec<Constraint>,
    /// Its `[[elasticity]]` rules as written (`vee_manifest::elasticity::rules`
    /// checks them for the rule loop).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elasticity: Vec<interfaces::manifest::elasticity::ElasticityRule>,
}

impl ServiceTerms {
    /// The terms of manifest `m`.
    pub fn of(m: &Manifest) -> Self {
        Self {
            sla: m.sla.clone(),
            constraints: m.constraints.clone(),
            elasticity: m.elasticity.clone(),
        }
    }
}

/// Checkpoint period in seconds of the VEEs under SLA `sla` (explicit, or
/// the optimal count over the planned run time for checkpoint cost
/// `checkpoint_cost_s`: H eq. 3.12-3.16). Before a VEE's first checkpoint
/// the cost is [`DEFAULT_CHECKPOINT_COST_S`]; then it is the measured one.
pub fn checkpoint_interval(sla: &Sla, run_time_s: u64, checkpoint_cost_s: f64) -> Option<u64> {
    if let CheckpointInterval::Every(d) = &sla.checkpoint_interval {
        return Some(d.as_secs().max(1));
    }
    match checkpoint_plan(sla, run_time_s.min(DEFAULT_RUN_TIME_S * 24) as f64, checkpoint_cost_s) {
        CheckpointPlan::None => None,
        CheckpointPlan::Every { interval, .. } => Some(interval.as_secs().max(1)),
    }
}
