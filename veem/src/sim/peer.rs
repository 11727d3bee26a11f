//! Fake peer sites: other VEEMs of this process answering with their real
//! VMI server, or a peer that never answers.

// tonic's handlers return its large `Status` as their error.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use interfaces::vhi::IncomingTarget;
use interfaces::vmi::vmi_service_server::VmiServiceServer;
use tonic::service::interceptor::InterceptedService;
use tonic::Status;

use crate::api::server::VmiService;
use crate::config::PeerEntry;
use crate::domain::peer::{IncomingVee, MigrationOutcome, RemoteVee, SpareRequest, UsageReceipt};
use crate::domain::Action;
use crate::model::UsageRec;
use crate::peers::Bearer;
use crate::ports::{ConsoleInput, ConsoleStream, GrpcPeer, Peer, PeerDirectory};

/// Peer sites in the same process: each a [`Peer`] by site ID; a site
/// not registered is silent (every call Unavailable).
#[derive(Clone, Default)]
pub struct FakePeers(pub Arc<Mutex<HashMap<String, Arc<dyn Peer>>>>);

impl PeerDirectory for FakePeers {
    fn connect(&self, entry: &PeerEntry) -> anyhow::Result<Arc<dyn Peer>> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .get(&entry.site_id)
            .cloned()
            .unwrap_or_else(|| Arc::new(SilentPeer)))
    }
}

/// A peer that never answers.
pub struct SilentPeer;

fn silent<T>() -> Result<T, Status> {
    Err(Status::unavailable("peer site does not answer"))
}

#[tonic::async_trait]
impl Peer for SilentPeer {
    async fn prepare_incoming(&self, _: IncomingVee) -> Result<IncomingTarget, Status> {
        silent()
    }
    async fn complete_incoming(&self, _: &str) -> Result<RemoteVee, Status> {
        silent()
    }
    async fn abort_incoming(&self, _: &str) -> Result<(), Status> {
        silent()
    }
    async fn withdraw(&self, _: &str) -> Result<(), Status> {
        silent()
    }
    async fn send_vee(&self, _: &str, _: IncomingTarget) -> Result<MigrationOutcome, Status> {
        silent()
    }
    async fn push_usage(&self, _: &str, _: &[UsageRec]) -> Result<UsageReceipt, Status> {
        silent()
    }
    async fn get_vee(&self, _: &str) -> Result<RemoteVee, Status> {
        silent()
    }
    async fn vee_action(&self, _: &str, _: Action, _: &str) -> Result<RemoteVee, Status> {
        silent()
    }
    async fn update_network(&self, _: interfaces::vhi::NetworkUpdate) -> Result<(), Status> {
        silent()
    }
    async fn reserve_spare(&self, _: &SpareRequest) -> Result<i64, Status> {
        silent()
    }
    async fn confirm_spare(&self, _: &str) -> Result<(), Status> {
        silent()
    }
    async fn release_spare(&self, _: &str) -> Result<(), Status> {
        silent()
    }
    async fn attach_console(&self, _: &str, _: bool, _: ConsoleInput) -> Result<ConsoleStream, Status> {
        silent()
    }
}

/// Another VEEM of this process as a peer: its real VMI server, reached
/// by the same VMI client the network uses ([`GrpcPeer`]: the messages
/// encoded and decoded as on the wire), each call with the bearer token of
/// the agreement (so its roles are checked).
pub type LocalPeer = GrpcPeer<InterceptedService<VmiServiceServer<VmiService>, Bearer>>;

/// [`LocalPeer`] of `svc` (another VEEM's VMI handlers), called with
/// `token`.
pub fn local_peer(svc: VmiService, token: &str) -> LocalPeer {
    GrpcPeer::over(InterceptedService::new(VmiServiceServer::new(svc), Bearer::new(token).unwrap()))
}
