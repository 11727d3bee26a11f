//! Why a migration did not do what it was asked: not proposed, decided or
//! sent on ([`MigrationError`], the VMI's calls), or, once under way, not
//! moved ([`RunError`]; the leg a host or site did not do, [`LegError`]).

use super::arrival::NotTaken;
use crate::core::RecordError;
use crate::domain::InvalidTransition;
use crate::error::VeemError;
use crate::model::MigrationState;
use crate::ports::call::CallError;
use crate::store::StoreError;
use crate::workflows::federation::SendError;

/// Why a migration was not proposed, decided or sent on (VMI Migrate,
/// ApproveMigration, RejectMigration, Drain, Withdraw at the primary,
/// SendVee at a peer): nothing changed. Each variant's status is in
/// `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// A request field (`to_host`, `to_site`, `to`, `reason`, `host`), or
    /// no migration with that ID.
    #[error(transparent)]
    Request(#[from] VeemError),
    /// No such VEE, or its record could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The site declines: the VEE's state or migration policy, an open
    /// migration of it (or of its affinity set), the destination's room
    /// or constraints, a decision already taken (the reason says which).
    #[error("{0}")]
    Refused(String),
    /// A migration record's state table forbids the change.
    #[error(transparent)]
    Transition(#[from] InvalidTransition),
    /// The migration's records could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}


/// A leg of a migration a host or site did not do (prepare, send,
/// complete, abort): who, and its answer.
#[derive(Debug, thiserror::Error)]
pub enum LegError {
    /// A host or peer site refused, did not answer, or is not known.
    #[error("{who}: {}", .call.message)]
    Call { who: String, call: CallError },
    /// The source host failed while it sent the VEE (missed heartbeats).
    #[error("{src}: the source host failed during the migration (missed heartbeats)")]
    SourceFailed { src: String },
    /// The source host or site reports that the migration failed.
    #[error("{who}: {detail}")]
    Failed { who: String, detail: String },
    /// Not a destination this site can send to or complete at (the reason
    /// says why).
    #[error("{0}")]
    NotADestination(String),
    /// The VEE could not be sent to the peer site.
    #[error(transparent)]
    Send(#[from] SendError),
}

impl LegError {
    /// [`LegError::Call`] of `who` (a host or `site S`).
    pub(crate) fn call(who: impl Into<String>) -> impl FnOnce(CallError) -> LegError {
        let who = who.into();
        move |call| LegError::Call { who, call }
    }
}

/// Why a migration under way (or cut short, being settled) did not move
/// its VEE: its records, its state, or the leg that failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The migration or its VEE could not be read or written, or their
    /// state tables forbid the change; or the site cannot take a VEE
    /// coming home (its refusal).
    #[error(transparent)]
    Records(#[from] MigrationError),
    /// It is not approved (any more): decided or run by another task.
    #[error("migration {id} is {state}")]
    NotApproved { id: String, state: MigrationState },
    /// Its VEE does not run (any more): the migration failed.
    #[error("VEE is {state}, not running")]
    VeeNotRunning { state: String },
    /// The destination did not prepare: nothing moved.
    #[error("destination refused: {0}")]
    Prepare(LegError),
    /// The source did not send the VEE, or the destination did not
    /// complete it: the VEE stays where it was.
    #[error(transparent)]
    Leg(#[from] LegError),
    /// Sent, not taken: left for the leader to settle.
    #[error(transparent)]
    NotTaken(#[from] NotTaken),
}

impl From<StoreError> for RunError {
    fn from(e: StoreError) -> Self {
        RunError::Records(e.into())
    }
}

impl From<RecordError> for RunError {
    fn from(e: RecordError) -> Self {
        RunError::Records(e.into())
    }
}

impl From<InvalidTransition> for RunError {
    fn from(e: InvalidTransition) -> Self {
        RunError::Records(e.into())
    }
}
