//! Why federation did not do what it was asked: a VEE not sent to a peer
//! site ([`SendError`]), not recovered at one ([`PeerRecoveryError`]), or
//! a primary site's VEE not taken here ([`IncomingError`]).

use crate::core::RecordError;
use crate::error::VeemError;
use crate::ports::call::CallError;
use crate::steps::boot::BootError;
use crate::steps::checkpoints::{BlobError, CheckpointError};
use crate::store::StoreError;

/// Why a primary site's VEE was not taken here, adopted or let go (VMI
/// PrepareIncoming, CompleteIncoming, AbortIncoming). Each variant's
/// status is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum IncomingError {
    /// A request field: `primary_site`, `vee_id`, `service_id`, the spec.
    #[error(transparent)]
    Request(#[from] VeemError),
    /// The framework agreement with the primary does not admit it.
    #[error(transparent)]
    Agreement(#[from] crate::peers::AgreementRefusal),
    /// The VEE is on service networks and the agreement has no overlay.
    #[error("VEE {vee} is on service networks and the framework agreement with {from} has no overlay ([peers.overlay]) to stretch them here")]
    NoOverlay { vee: String, from: String },
    /// The VEE runs here already.
    #[error("VEE {vee} is already here")]
    AlreadyHere { vee: String },
    /// This site's planner has no room for it.
    #[error("site {site} cannot admit VEE {vee}: {reasons}")]
    NoRoom { site: String, vee: String, reasons: String },
    /// No such VEE here, a change its state table forbids, or its records
    /// could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Its host refused or did not answer.
    #[error("{host}: {}", .call.message)]
    Host { host: String, call: CallError },
    /// It was booted here and did not start.
    #[error(transparent)]
    Boot(#[from] BootError),
    /// It arrived, but does not run.
    #[error("VEE {vee} arrived but is {state}")]
    NotRunning { vee: String, state: String },
    /// The incoming VEE has no host here.
    #[error("incoming VEE {vee} has no host")]
    NoHost { vee: String },
}

impl From<StoreError> for IncomingError {
    fn from(e: StoreError) -> Self {
        IncomingError::Record(e.into())
    }
}

/// Why a VEE was not sent to a peer site (booted, restored or prepared
/// for a live migration there).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The VEE is on service networks and the agreement has no overlay.
    #[error("VEE {vee} is on service networks and the framework agreement with {site} has no overlay ([peers.overlay]) to stretch them there")]
    NoOverlay { vee: String, site: String },
    /// Its images or checkpoint could not be shared with or copied to the
    /// peer.
    #[error(transparent)]
    Blobs(#[from] BlobError),
    /// The peer refused it or did not answer (or is not a peer): its
    /// message.
    #[error("{}", .call.message)]
    Peer { site: String, call: CallError },
}

/// Why a VEE was not recovered at a peer site.
#[derive(Debug, thiserror::Error)]
pub enum PeerRecoveryError {
    /// No such VEE, a change its state table forbids, or its records (or
    /// the planner's) could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Its checkpoint could not be looked up or read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// No peer site's framework agreement admits it.
    #[error("VEE {vee}: no local host can take it and no peer site's framework agreement admits it")]
    NoPeer { vee: String },
    /// Every peer that might took it refused it: each refusal.
    #[error("VEE {vee}: no local host can take it; {refusals}")]
    Refused { vee: String, refusals: String },
}

impl From<StoreError> for PeerRecoveryError {
    fn from(e: StoreError) -> Self {
        PeerRecoveryError::Record(e.into())
    }
}
