//! The VEEM's state machines (DESIGN.md §4): a VEE's life, a migration's
//! course and a service's overall state; and the domain's small values
//! that several layers share: a host's health, a proposal's reason, a
//! service's terms (its SLA and constraints, parsed once). Each is an enum with a transition
//! table; a state change the table does not allow is an
//! [`InvalidTransition`], never a silent overwrite (the model: Cloud
//! Hypervisor's `VmState::valid_transition`).

pub mod elasticity;
pub mod health;
pub mod migration;
pub mod offer;
pub mod peer;
pub mod rate;
pub mod reason;
pub mod replication;
pub mod rollout;
pub mod service;
pub mod terms;
pub mod vee;

pub use health::Health;
pub use migration::MigrationState;
pub use offer::{Offer, Verdict};
pub use reason::Reason;
pub use replication::{Replication, ReplicationRec};
pub use service::ServiceState;
pub use terms::ServiceTerms;
pub use vee::{Action, VeeState};

/// A state machine: its states' names and its transition table.
pub trait StateMachine: Copy {
    /// The machine's name in errors: `VEE`, `migration`.
    const MACHINE: &'static str;

    /// The state's name, as stored and shown.
    fn name(self) -> &'static str;

    /// The transition table: whether `self` may become `to`.
    fn can_become(self, to: Self) -> bool;

    /// `to` if the table allows it from `self`, for the machine with ID
    /// `id`; otherwise [`InvalidTransition`].
    fn transition(self, id: &str, to: Self) -> Result<Self, InvalidTransition> {
        if self.can_become(to) {
            Ok(to)
        } else {
            Err(InvalidTransition {
                machine: Self::MACHINE,
                id: id.to_string(),
                from: self.name(),
                to: to.name(),
            })
        }
    }
}

/// A state change that the machine's transition table does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{machine} {id}: {from} -> {to} is not a valid transition")]
pub struct InvalidTransition {
    /// `VEE` or `migration`.
    pub machine: &'static str,
    /// The VEE's or migration's ID.
    pub id: String,
    pub from: &'static str,
    pub to: &'static str,
}
