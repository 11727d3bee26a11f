//! A VEEH as the workflows call it: one method per VHI call that changes or
//! reads a VEE, taking the VHI's request message (a value: the VEE's one
//! description is the VHI's `VeeSpec`) and answering the VHI's answer, its
//! failure a
//! [`HostCallError`] the workflows act on by kind. The one conversion from
//! and to gRPC (`tonic::Request`, `tonic::Status`) at this boundary, so
//! that no workflow builds a transport request or reads a status code.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use interfaces::vhi;
use tonic::{Code, Request, Response, Status};

use super::HostVhi;

/// What kind of failure a VEEH's call ended in, as a workflow acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFailure {
    /// The host has no such VEE, domain or checkpoint (NOT_FOUND).
    NotFound,
    /// The host will not do it in the state things are in: the VEE's
    /// state, a profile or save format it cannot run (FAILED_PRECONDITION).
    Refused,
    /// The request is not one the host accepts (INVALID_ARGUMENT,
    /// OUT_OF_RANGE).
    Invalid,
    /// What the call would make exists already (ALREADY_EXISTS).
    Exists,
    /// The host does not know the call: an older VEEH (UNIMPLEMENTED).
    Unsupported,
    /// The host did not answer, or not in time (UNAVAILABLE,
    /// DEADLINE_EXCEEDED, CANCELLED).
    Unreachable,
    /// The host does not take this VEEM's calls: its credentials, or an
    /// older leader's epoch (PERMISSION_DENIED, UNAUTHENTICATED).
    Denied,
    /// The host is busy or out of room for it now (RESOURCE_EXHAUSTED,
    /// ABORTED).
    Busy,
    /// Anything else the host failed with (INTERNAL, UNKNOWN, DATA_LOSS).
    Failed,
}

impl std::fmt::Display for HostFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HostFailure::NotFound => "not found",
            HostFailure::Refused => "refused",
            HostFailure::Invalid => "invalid",
            HostFailure::Exists => "exists already",
            HostFailure::Unsupported => "not supported by the host",
            HostFailure::Unreachable => "the host did not answer",
            HostFailure::Denied => "denied",
            HostFailure::Busy => "busy",
            HostFailure::Failed => "failed",
        })
    }
}

/// A VEEH's call that failed: its kind and the host's message, shown as
/// `not found: <message>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{failure}: {message}")]
pub struct HostCallError {
    pub failure: HostFailure,
    pub message: String,
}

impl HostCallError {
    /// Whether the host has no such VEE or domain.
    pub fn is_not_found(&self) -> bool {
        self.failure == HostFailure::NotFound
    }

    /// The host's message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<Status> for HostCallError {
    fn from(s: Status) -> Self {
        let failure = match s.code() {
            Code::NotFound => HostFailure::NotFound,
            Code::FailedPrecondition => HostFailure::Refused,
            Code::InvalidArgument | Code::OutOfRange => HostFailure::Invalid,
            Code::AlreadyExists => HostFailure::Exists,
            Code::Unimplemented => HostFailure::Unsupported,
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => HostFailure::Unreachable,
            Code::PermissionDenied | Code::Unauthenticated => HostFailure::Denied,
            Code::ResourceExhausted | Code::Aborted => HostFailure::Busy,
            Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss => HostFailure::Failed,
        };
        HostCallError {
            failure,
            message: s.message().to_string(),
        }
    }
}

/// A VEEH's answer, or why it failed.
pub type HostResult<T> = Result<T, HostCallError>;

/// A VEEH's stream of answers (a migration's progress).
pub type HostStream<T> = Pin<Box<dyn Stream<Item = HostResult<T>> + Send>>;

/// One VEEH of the site (see the module doc).
#[derive(Clone)]
pub struct Host(Arc<HostVhi>);

fn answer<T>(r: Result<Response<T>, Status>) -> HostResult<T> {
    r.map(Response::into_inner).map_err(HostCallError::from)
}

impl Host {
    pub fn new(vhi: Arc<HostVhi>) -> Self {
        Host(vhi)
    }

    /// Pulls the VEE's images and writes its seed (VHI Prepare).
    pub async fn prepare(&self, r: vhi::PrepareRequest) -> HostResult<vhi::PrepareResponse> {
        answer(self.0.prepare(Request::new(r)).await)
    }

    /// Defines the VEE's domain (VHI Create).
    pub async fn create(&self, r: vhi::CreateRequest) -> HostResult<vhi::VeeStatus> {
        answer(self.0.create(Request::new(r)).await)
    }

    /// Starts the VEE (VHI Start).
    pub async fn start(&self, r: vhi::StartRequest) -> HostResult<vhi::VeeStatus> {
        answer(self.0.start(Request::new(r)).await)
    }

    /// Shuts the VEE down cleanly within its timeout (VHI Shutdown).
    pub async fn shutdown(&self, r: vhi::ShutdownRequest) -> HostResult<vhi::ShutdownResponse> {
        answer(self.0.shutdown(Request::new(r)).await)
    }

    /// Destroys the VEE's domain, and its files when asked (VHI Destroy).
    pub async fn destroy(&self, r: vhi::DestroyRequest) -> HostResult<vhi::VeeStatus> {
        answer(self.0.destroy(Request::new(r)).await)
    }

    /// Pauses the VEE (VHI Suspend).
    pub async fn suspend(&self, r: vhi::SuspendRequest) -> HostResult<vhi::VeeStatus> {
        answer(self.0.suspend(Request::new(r)).await)
    }

    /// Resumes the VEE (VHI Resume).
    pub async fn resume(&self, r: vhi::ResumeRequest) -> HostResult<vhi::VeeStatus> {
        answer(self.0.resume(Request::new(r)).await)
    }

    /// Checkpoints the VEE into the site's repository (VHI Checkpoint).
    pub async fn checkpoint(&self, r: vhi::CheckpointRequest) -> HostResult<vhi::CheckpointRecord> {
        answer(self.0.checkpoint(Request::new(r)).await)
    }

    /// Restores a VEE from a checkpoint (VHI Restore).
    pub async fn restore(&self, r: vhi::RestoreRequest) -> HostResult<vhi::VeeStatus> {
        answer(self.0.restore(Request::new(r)).await)
    }

    /// Makes ready to take a VEE arriving (VHI PrepareIncoming).
    pub async fn prepare_incoming(&self, r: vhi::PrepareIncomingRequest) -> HostResult<vhi::IncomingTarget> {
        answer(self.0.prepare_incoming(Request::new(r)).await)
    }

    /// The VEE arrived: the host runs it from now on (VHI
    /// CompleteIncoming).
    pub async fn complete_incoming(&self, r: vhi::CompleteIncomingRequest) -> HostResult<vhi::VeeStatus> {
        answer(self.0.complete_incoming(Request::new(r)).await)
    }

    /// Drops what was prepared for an arriving VEE (VHI AbortIncoming).
    pub async fn abort_incoming(&self, r: vhi::AbortIncomingRequest) -> HostResult<vhi::VeeStatus> {
        answer(self.0.abort_incoming(Request::new(r)).await)
    }

    /// Sends the VEE live to its destination (VHI MigrateOut): its
    /// progress, ending with the last phase or a failure.
    pub async fn migrate_out(&self, r: vhi::MigrateOutRequest) -> HostResult<HostStream<vhi::MigrationProgress>> {
        let stream = answer(self.0.migrate_out(Request::new(r)).await)?;
        Ok(Box::pin(stream.map(|p| p.map_err(HostCallError::from))))
    }

    /// A VEE's counters (VHI Stats).
    pub async fn stats(&self, r: vhi::StatsRequest) -> HostResult<vhi::VeeStats> {
        answer(self.0.stats(Request::new(r)).await)
    }

    /// Every VEE's counters on the host (VHI ListStats, pages of up to
    /// 1,000).
    pub async fn all_stats(&self) -> HostResult<Vec<vhi::VeeStats>> {
        let call = |page_token| {
            let r = vhi::ListStatsRequest {
                page_size: 1000,
                page_token,
            };
            self.0.list_stats(Request::new(r))
        };
        interfaces::pages::all(call, |r| (r.stats, r.next_page_token))
            .await
            .map_err(HostCallError::from)
    }

    /// A service network's member table on this host (VHI UpdateNetwork).
    pub async fn update_network(&self, r: vhi::UpdateNetworkRequest) -> HostResult<vhi::UpdateNetworkResponse> {
        answer(self.0.update_network(Request::new(r)).await)
    }

    /// Whether the VEE answers on a port (VHI Probe).
    pub async fn probe(&self, r: vhi::ProbeRequest) -> HostResult<vhi::ProbeResponse> {
        answer(self.0.probe(Request::new(r)).await)
    }

    /// Resizes a running VEE (VHI Resize).
    pub async fn resize(&self, r: vhi::ResizeRequest) -> HostResult<vhi::VeeStatus> {
        answer(self.0.resize(Request::new(r)).await)
    }

    /// Every domain the host runs for itself (VHI ListDomains, every page).
    pub async fn domains(&self) -> HostResult<Vec<vhi::DomainInfo>> {
        super::domains(&*self.0).await.map_err(HostCallError::from)
    }
}
