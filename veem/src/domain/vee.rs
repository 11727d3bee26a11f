//! A VEE's life (DESIGN.md §4): pending -> admitted -> deploying -> running
//! <-> suspended; running -> checkpointing -> running; running -> migrating
//! -> running; running -> failed -> recovering -> running; any -> stopped
//! -> terminated; rejected.

use serde::{Deserialize, Serialize};

use super::StateMachine;

/// The state of a VEE as the VEEM records it (stored as its kebab-case
/// name, the same text the VMI shows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VeeState {
    /// Submitted, not yet admitted.
    Pending,
    /// Has a reservation; waits for its window or its deployment.
    Admitted,
    /// Its host is preparing and starting it.
    Deploying,
    Running,
    Suspended,
    /// A whole-VM checkpoint is being taken; the guest goes on.
    Checkpointing,
    /// Live-migrating to another host or site.
    Migrating,
    /// Lost (its host or site failed, its deployment failed); waits for
    /// recovery, or was not recovered.
    Failed,
    /// Being restored from a checkpoint (or restarted) somewhere.
    Recovering,
    Stopped,
    /// Gone for good (stopped, or handed to another site).
    Terminated,
    /// Refused at admission.
    Rejected,
}

/// Every state, for tables and tests.
pub const ALL: [VeeState; 12] = [
    VeeState::Pending,
    VeeState::Admitted,
    VeeState::Deploying,
    VeeState::Running,
    VeeState::Suspended,
    VeeState::Checkpointing,
    VeeState::Migrating,
    VeeState::Failed,
    VeeState::Recovering,
    VeeState::Stopped,
    VeeState::Terminated,
    VeeState::Rejected,
];

impl VeeState {
    pub fn as_str(self) -> &'static str {
        match self {
            VeeState::Pending => "pending",
            VeeState::Admitted => "admitted",
            VeeState::Deploying => "deploying",
            VeeState::Running => "running",
            VeeState::Suspended => "suspended",
            VeeState::Checkpointing => "checkpointing",
            VeeState::Migrating => "migrating",
            VeeState::Failed => "failed",
            VeeState::Recovering => "recovering",
            VeeState::Stopped => "stopped",
            VeeState::Terminated => "terminated",
            VeeState::Rejected => "rejected",
        }
    }

    /// States in which the VEE should be running somewhere.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            VeeState::Running | VeeState::Checkpointing | VeeState::Migrating | VeeState::Suspended
        )
    }
}

impl StateMachine for VeeState {
    const MACHINE: &'static str = "VEE";

    fn name(self) -> &'static str {
        self.as_str()
    }

    /// The transition table: whether a VEE in state `self` may go to `to`.
    ///
    /// | from | to |
    /// |---|---|
    /// | pending | admitted, rejected |
    /// | admitted | deploying, running (found running), suspended (background displaced), migrating / recovering (arriving from a peer), failed, stopped |
    /// | deploying | running, failed, suspended, stopped |
    /// | running | suspended, checkpointing, migrating, recovering (rolled back to a checkpoint), failed, stopped, terminated (ended at a peer), deploying (booted again from another image: a rolling update) |
    /// | suspended | running, recovering, failed, stopped |
    /// | checkpointing | running, failed, stopped |
    /// | migrating | running, recovering (restored on arrival), terminated (left for another site), failed, stopped |
    /// | failed | recovering, stopped |
    /// | recovering | running, failed, suspended (a displaced background VEE's resume failed: it waits again), stopped |
    /// | stopped | terminated |
    /// | terminated, rejected | — |
    fn can_become(self, to: VeeState) -> bool {
        use VeeState::*;
        matches!(
            (self, to),
            (Pending, Admitted | Rejected)
                | (
                    Admitted,
                    Deploying | Running | Suspended | Migrating | Recovering | Failed | Stopped
                )
                | (Deploying, Running | Failed | Suspended | Stopped)
                | (
                    Running,
                    Suspended | Checkpointing | Migrating | Recovering | Failed | Stopped | Terminated | Deploying
                )
                | (Suspended, Running | Recovering | Failed | Stopped)
                | (Checkpointing, Running | Failed | Stopped)
                | (Migrating, Running | Recovering | Terminated | Failed | Stopped)
                | (Failed, Recovering | Stopped)
                | (Recovering, Running | Failed | Suspended | Stopped)
                | (Stopped, Terminated)
        )
    }
}

/// An action on a VEE (the VMI's VeeAction), asked by a provider, an
/// operator or the VEE's primary site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Stop,
    Suspend,
    Resume,
    /// A checkpoint of the whole VM, recorded as its latest.
    Checkpoint,
    /// A restore from a named checkpoint, or the latest.
    Restore,
    /// A VEE that runs at a peer site brought back home.
    Withdraw,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole table, row by row: what each state may become.
    #[test]
    fn the_transition_table() {
        use VeeState::*;
        let allowed: [(VeeState, &[VeeState]); 12] = [
            (Pending, &[Admitted, Rejected]),
            (Admitted, &[Deploying, Running, Suspended, Migrating, Recovering, Failed, Stopped]),
            (Deploying, &[Running, Failed, Suspended, Stopped]),
            (
                Running,
                &[
                    Suspended,
                    Checkpointing,
                    Migrating,
                    Recovering,
                    Failed,
                    Stopped,
                    Terminated,
                    Deploying,
                ],
            ),
            (Suspended, &[Running, Recovering, Failed, Stopped]),
            (Checkpointing, &[Running, Failed, Stopped]),
            (Migrating, &[Running, Recovering, Terminated, Failed, Stopped]),
            (Failed, &[Recovering, Stopped]),
            (Recovering, &[Running, Failed, Suspended, Stopped]),
            (Stopped, &[Terminated]),
            (Terminated, &[]),
            (Rejected, &[]),
        ];
        for (from, tos) in allowed {
            for to in ALL {
                assert_eq!(from.can_become(to), tos.contains(&to), "{from:?} -> {to:?}");
                assert_eq!(from.transition("v", to).is_ok(), tos.contains(&to));
            }
        }
    }

    #[test]
    fn an_invalid_transition_names_the_vee_and_both_states() {
        let e = VeeState::Terminated.transition("v-1", VeeState::Running).unwrap_err();
        assert_eq!(e.to_string(), "VEE v-1: terminated -> running is not a valid transition");
    }

    #[test]
    fn names_match_the_stored_form() {
        for s in ALL {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.as_str()));
        }
    }
}
