//! A VEEH as the workflows call it: one method per VHI call that changes or
//! reads a VEE, taking the VHI's request message (a value: the VEE's one
//! description is the VHI's `VeeSpec`) and answering the VHI's answer, its
//! failure a [`CallError`] the workflows act on by kind. The one conversion
//! from and to gRPC (`tonic::Request`, `tonic::Status`) at this boundary,
//! so that no workflow builds a transport request or reads a status code.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use interfaces::vhi;
use tonic::{Request, Response, Status};

use super::call::CallError;
use super::HostVhi;

/// A VEEH's answer, or why it failed.
pub type HostResult<T> = Result<T, CallError>;

/// A VEEH's stream of answers (a migration's progress).
pub type HostStream<T> = Pin<Box<dyn Stream<Item = HostResult<T>> + Send>>;

/// One VEEH of the site (see the module doc).
#[derive(Clone)]
pub struct Host(Arc<HostVhi>);

fn answer<T>(r: Result<Response<T>, Status>) -> HostResult<T> {
    r.map(Response::into_inner).map_err(CallError::from)
}

impl Host {
    /// The workflows' face of VEEH port `vhi`.
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
        Ok(Box::pin(stream.map(|p| p.map_err(CallError::from))))
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
            .map_err(CallError::from)
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
        super::domains(&*self.0).await.map_err(CallError::from)
    }
}
