//! What a service's manifest promises and asks of the site, parsed once at
//! admission and kept in the service's record: its SLA (`[sla]`: guarantee
//! level, checkpoint interval, outages covered, migration policy, downtime
//! bound, penalty, window) and its affinity / anti-affinity constraints
//! (`[[constraint]]`, E PIII §II). The workflows read these, never the
//! manifest's text again.

use interfaces::manifest::{Constraint, Manifest, Sla};
use serde::{Deserialize, Serialize};

/// A service's SLA and constraints (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceTerms {
    pub sla: Sla,
    #[serde(default)]
    pub constraints: Vec<Constraint>,
}

impl ServiceTerms {
    /// The terms of manifest `m`.
    pub fn of(m: &Manifest) -> Self {
        Self {
            sla: m.sla.clone(),
            constraints: m.constraints.clone(),
        }
    }
}
