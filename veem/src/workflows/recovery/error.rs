//! Why a recovery step did not bring a VEE back, or could not keep its
//! records: what the loops log and what decides whether a restore is tried
//! again on the same host.

use crate::core::RecordError;
use crate::planner::PlanError;
use crate::ports::call::{CallError, Failure};
use crate::steps::checkpoints::CheckpointError;
use crate::store::StoreError;
use crate::workflows::migration::MigrationError;

/// A recovery's failure: a restore a host did not do, or records that
/// could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// No such VEE, a change its state table forbids, or its records could
    /// not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The planner knows no such host or VEE.
    #[error("planner: {0}")]
    Planner(#[from] PlanError),
    /// The VEE's checkpoint could not be looked up or read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Host `host` did not restore it, or (without a checkpoint) boot it:
    /// it refused, or did not answer (shown as the call's failure: the
    /// attempts' list names the host).
    #[error("{call}")]
    Host { host: String, call: CallError },
    /// The proposals the failure made stale could not be closed.
    #[error(transparent)]
    Proposals(#[from] MigrationError),
    /// A VEE's recovery task ended without an answer (it panicked).
    #[error("a recovery task ended without an answer: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl From<StoreError> for RecoveryError {
    fn from(e: StoreError) -> Self {
        RecoveryError::Record(e.into())
    }
}

impl RecoveryError {
    /// Whether the host refuses the restore whatever the retry (its VEEH
    /// refuses: a checkpoint of another compatibility profile, a domain of
    /// the VEE already there), not for a passing cause.
    pub fn refused_for_good(&self) -> bool {
        matches!(self, RecoveryError::Host { call, .. } if call.failure == Failure::Refused)
    }
}
