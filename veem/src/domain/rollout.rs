//! A rolling image update's course (issue 40, item 4; DESIGN.md §13):
//! rolling -> done (every instance runs the new image and answers) |
//! failed (an instance did not: it went back to the old image, and so
//! stayed every instance not yet replaced). A VEEM that restarts while a
//! rollout is rolling goes on with it (the instances not yet on the new
//! image).

use serde::{Deserialize, Serialize};

use super::StateMachine;

/// The state of a rollout (stored as its lowercase name, the same text
/// the VMI shows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutState {
    /// Instances are being replaced.
    Rolling,
    /// Every instance runs the new image.
    Done,
    /// Stopped at an instance that did not come up on the new image.
    Failed,
}

/// Every state, for tables and tests.
pub const ALL: [RolloutState; 3] = [RolloutState::Rolling, RolloutState::Done, RolloutState::Failed];

impl RolloutState {
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutState::Rolling => "rolling",
            RolloutState::Done => "done",
            RolloutState::Failed => "failed",
        }
    }
}

impl StateMachine for RolloutState {
    const MACHINE: &'static str = "rollout";

    fn name(self) -> &'static str {
        self.as_str()
    }

    /// | from | to |
    /// |---|---|
    /// | rolling | done, failed |
    /// | done, failed | — (a new rollout, or a rollback, is a new record) |
    fn can_become(self, to: RolloutState) -> bool {
        matches!((self, to), (RolloutState::Rolling, RolloutState::Done | RolloutState::Failed))
    }
}

/// The latest rollout of one component of a service (stored under
/// `SERVICE/COMPONENT` in the `rollouts` tree; format 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutRec {
    /// The record's format: 1.
    pub format: u32,
    pub service_id: String,
    pub component: String,
    /// The image the instances ran before (a content ID or a registry
    /// image by digest).
    pub from_image: String,
    /// The image they get.
    pub to_image: String,
    /// Instances replaced at once (at least 1).
    pub max_unavailable: u32,
    /// It undoes the rollout before it (`veem update --rollback`).
    pub rollback: bool,
    pub state: RolloutState,
    /// VEEs replaced so far, in order.
    pub replaced: Vec<String>,
    /// The live instances when it started.
    pub instances: u32,
    /// How long each replaced instance may take to run and answer (s).
    pub ready_timeout_s: u64,
    /// Why it failed; what happened to the instance that failed.
    pub reason: String,
    pub started_ms: i64,
    /// When it ended (done or failed).
    pub ended_ms: Option<i64>,
}

/// The format of a [`RolloutRec`] this version writes.
pub const ROLLOUT_FORMAT: u32 = 1;

impl RolloutRec {
    /// Its key in the `rollouts` tree.
    pub fn key(service_id: &str, component: &str) -> String {
        format!("{service_id}/{component}")
    }

    /// Moves the rollout to state `to` if its transition table allows it.
    pub fn advance(&mut self, to: RolloutState) -> Result<(), super::InvalidTransition> {
        self.state = self.state.transition(&RolloutRec::key(&self.service_id, &self.component), to)?;
        Ok(())
    }

    /// The image new instances of the component get: the new one unless
    /// the rollout failed.
    pub fn current_image(&self) -> &str {
        match self.state {
            RolloutState::Failed => &self.from_image,
            RolloutState::Rolling | RolloutState::Done => &self.to_image,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_rolling_rollout_ends_and_only_once() {
        for from in ALL {
            for to in ALL {
                let allowed = from == RolloutState::Rolling && to != RolloutState::Rolling;
                assert_eq!(from.can_become(to), allowed, "{from:?} -> {to:?}");
            }
        }
        let json = serde_json::to_string(&RolloutState::Rolling).unwrap();
        assert_eq!(json, "\"rolling\"");
    }
}
