//! Fake peer sites: other VEEMs of this process answering with their real
//! VMI handlers, or a peer that never answers.

// tonic's handlers return its large `Status` as their error.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use interfaces::vhi::IncomingTarget;
use interfaces::vmi;
use tonic::{Request, Status};

use crate::config::PeerEntry;
use crate::ports::{Peer, PeerDirectory};

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
    async fn prepare_incoming(&self, _: vmi::PrepareIncomingRequest) -> Result<IncomingTarget, Status> {
        silent()
    }
    async fn complete_incoming(&self, _: &str) -> Result<vmi::VeeInfo, Status> {
        silent()
    }
    async fn abort_incoming(&self, _: &str) -> Result<(), Status> {
        silent()
    }
    async fn withdraw(&self, _: &str) -> Result<(), Status> {
        silent()
    }
    async fn send_vee(&self, _: vmi::SendVeeRequest) -> Result<vmi::MigrationInfo, Status> {
        silent()
    }
    async fn push_usage(&self, _: vmi::PushUsageRequest) -> Result<vmi::PushUsageResponse, Status> {
        silent()
    }
    async fn get_vee(&self, _: &str) -> Result<vmi::VeeInfo, Status> {
        silent()
    }
    async fn vee_action(&self, _: vmi::VeeActionRequest) -> Result<vmi::VeeInfo, Status> {
        silent()
    }
    async fn update_network(&self, _: interfaces::vhi::NetworkUpdate) -> Result<(), Status> {
        silent()
    }
    async fn reserve_spare(&self, _: vmi::ReserveSpareRequest) -> Result<vmi::ReserveSpareResponse, Status> {
        silent()
    }
    async fn confirm_spare(&self, _: &str) -> Result<(), Status> {
        silent()
    }
    async fn release_spare(&self, _: &str) -> Result<(), Status> {
        silent()
    }
}

/// Another VEEM of this process as a peer: its real VMI handlers, called
/// with the bearer token of the agreement (so its roles are checked).
pub struct LocalPeer {
    pub svc: crate::api::server::VmiService,
    pub token: String,
}

impl LocalPeer {
    fn req<T>(&self, m: T) -> Request<T> {
        let mut r = Request::new(m);
        r.metadata_mut()
            .insert("authorization", format!("Bearer {}", self.token).parse().unwrap());
        r
    }
}

#[tonic::async_trait]
impl Peer for LocalPeer {
    async fn prepare_incoming(&self, r: vmi::PrepareIncomingRequest) -> Result<IncomingTarget, Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        Ok(self.svc.prepare_incoming(self.req(r)).await?.into_inner())
    }
    async fn complete_incoming(&self, id: &str) -> Result<vmi::VeeInfo, Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        Ok(self
            .svc
            .complete_incoming(self.req(vmi::CompleteIncomingRequest { vee_id: id.into() }))
            .await?
            .into_inner())
    }
    async fn abort_incoming(&self, id: &str) -> Result<(), Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        self.svc
            .abort_incoming(self.req(vmi::AbortIncomingRequest { vee_id: id.into() }))
            .await
            .map(|_| ())
    }
    async fn withdraw(&self, id: &str) -> Result<(), Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        self.svc
            .withdraw(self.req(vmi::WithdrawRequest { vee_id: id.into() }))
            .await
            .map(|_| ())
    }
    async fn send_vee(&self, r: vmi::SendVeeRequest) -> Result<vmi::MigrationInfo, Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        Ok(self.svc.send_vee(self.req(r)).await?.into_inner())
    }
    async fn push_usage(&self, b: vmi::PushUsageRequest) -> Result<vmi::PushUsageResponse, Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        Ok(self.svc.push_usage(self.req(b)).await?.into_inner())
    }
    async fn get_vee(&self, id: &str) -> Result<vmi::VeeInfo, Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        Ok(self
            .svc
            .get_vee(self.req(vmi::GetVeeRequest { vee_id: id.into() }))
            .await?
            .into_inner())
    }
    async fn vee_action(&self, r: vmi::VeeActionRequest) -> Result<vmi::VeeInfo, Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        Ok(self.svc.vee_action(self.req(r)).await?.into_inner())
    }
    async fn update_network(&self, u: interfaces::vhi::NetworkUpdate) -> Result<(), Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        self.svc
            .update_network(self.req(vmi::UpdateNetworkRequest { network: Some(u) }))
            .await
            .map(|_| ())
    }
    async fn reserve_spare(&self, r: vmi::ReserveSpareRequest) -> Result<vmi::ReserveSpareResponse, Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        Ok(self.svc.reserve_spare(self.req(r)).await?.into_inner())
    }
    async fn confirm_spare(&self, id: &str) -> Result<(), Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        self.svc
            .confirm_spare(self.req(vmi::ConfirmSpareRequest { vee_id: id.into() }))
            .await
            .map(|_| ())
    }
    async fn release_spare(&self, id: &str) -> Result<(), Status> {
        use vmi::vmi_service_server::VmiService as Vmi;
        self.svc
            .release_spare(self.req(vmi::ReleaseSpareRequest { vee_id: id.into() }))
            .await
            .map(|_| ())
    }
}
