//! What one VEEM asks of a peer VEEM under their framework agreement, and
//! what it hears back (E PII §II-A, Ch 3.4; DESIGN.md §7), as domain
//! values: the [`crate::ports::Peer`] port speaks these, the workflows
//! build and read them, and `wire::peer` alone turns them into the VMI's
//! messages and back (at the client's end and at the server's).
//!
//! A VEE's description stays the VHI's `VeeSpec` (ARCHITECTURE.md, "One
//! VEE description"), and so do a checkpoint record and a host's incoming
//! target: those are the VEEHs' words, which both sites hand on as they are.

use interfaces::manifest::GuaranteeLevel;
use interfaces::vhi;

use super::{MigrationState, VeeState};

/// A VEE handed to a peer site (the VMI's PrepareIncoming).
#[derive(Clone, Debug, PartialEq)]
pub struct IncomingVee {
    /// The VEE as its hosts run it (with the member tables of its
    /// networks).
    pub spec: vhi::VeeSpec,
    /// The site that admitted the VEE's service and keeps its records.
    pub primary_site: String,
    /// The VEE's guarantee level (the peer admits it under the agreement's
    /// levels).
    pub guarantee: GuaranteeLevel,
    /// How the peer takes it.
    pub how: Incoming,
}

/// How a peer site is to take a VEE.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// Boot it from its images (remote placement).
    Boot,
    /// Restore it from this checkpoint record (recovery at a peer site).
    Restore(Box<vhi::CheckpointRecord>),
    /// Prepare a VEEH to receive a live migration.
    Migration,
}

/// What a peer says of a VEE it runs for this site (the VMI's VeeInfo, the
/// parts a primary site acts on). A peer's word is checked, never trusted:
/// the workflows decide what to make of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RemoteVee {
    /// Its state there; `None` when the peer left it unset or sent one
    /// this version does not know.
    pub state: Option<VeeState>,
    /// The checkpoint the call took there (a forwarded checkpoint).
    pub checkpoint: Option<vhi::CheckpointRecord>,
    /// How far that checkpoint's copy at this site got; `None` when the
    /// peer left it unset (a version before this field, which replicated
    /// before it answered).
    pub checkpoint_replication: Option<super::Replication>,
}

/// Spare capacity asked of a peer for a full-guarantee VEE (the VMI's
/// ReserveSpare): vCPUs, MiB and GiB over Unix seconds
/// `[start_unix, end_unix)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpareRequest {
    pub vee_id: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub disk_gib: u64,
    pub start_unix: i64,
    pub end_unix: i64,
}

/// How a live migration a peer ran for this site ended (the VMI's SendVee
/// answer).
#[derive(Clone, Debug, PartialEq)]
pub enum MigrationOutcome {
    /// The VEE arrived: start to end and the guest's pause, in ms.
    Done { total_ms: u64, downtime_ms: u64 },
    /// It did not: the peer's state for it and its words.
    NotDone { state: Option<MigrationState>, detail: String },
}

/// The answer to usage records pushed to their primary site (the VMI's
/// PushUsage): how many were stored, seen before and refused, with a
/// reason for each refusal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageReceipt {
    pub accepted: u32,
    pub duplicates: u32,
    pub refused: u32,
    pub reasons: Vec<String>,
}
