//! The VMI gRPC server (tonic) with bearer-token roles: a service provider
//! sees and acts on its own services only; the operator sees everything and
//! decides migrations; a peer site may call only the peer operations (and
//! act on the VEEs this site runs for it). Served over TLS (`[tls]`), a
//! peer's call must also come with that peer's client certificate
//! (`interfaces::tls::PeerCa`): its token alone is not enough.

// Handlers return tonic's `Status` as their error, as tonic's service
// traits require; it is large, and that is tonic's choice to make.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use anyhow::Context as _;
use futures::Stream;
use interfaces::pages;
use interfaces::tls::PeerCa;
use interfaces::vmi;
use interfaces::vmi::vmi_service_server::{VmiService as Vmi, VmiServiceServer};
use interfaces::vmi::*;
use tonic::{Request, Response, Status};

use crate::api::status::status;
use crate::api::visibility::redact;
use crate::config::Role;
use crate::domain::Action;
use crate::manager::Veem;
use crate::model::{MigrationRec, ServiceRec};
use crate::wire::peer as wire;
use info::migration_info;

pub struct VmiService {
    veem: Arc<Veem>,
    /// Each peer's CA by site ID, when the VMI is served over TLS: a call
    /// with a peer's token must show a certificate of that peer.
    peer_cas: Option<HashMap<String, PeerCa>>,
}

impl VmiService {
    /// The VMI server of `veem`: with `[tls]` in its configuration, peers'
    /// calls need their certificates. Errors: a peer's `ca` cannot be read
    /// or is missing.
    pub fn new(veem: Arc<Veem>) -> anyhow::Result<VmiServiceServer<Self>> {
        Ok(VmiServiceServer::new(Self::checked(veem)?))
    }

    /// The handlers of [`VmiService::new`] without the gRPC server (the
    /// REST routes call them).
    pub fn checked(veem: Arc<Veem>) -> anyhow::Result<Self> {
        let peer_cas = match &veem.core.cfg.tls {
            None => None,
            Some(_) => Some(
                veem.core
                    .cfg
                    .peers
                    .iter()
                    .map(|p| {
                        let ca = p
                            .ca
                            .as_ref()
                            .ok_or_else(|| anyhow::anyhow!("peer {}: the VMI is served over TLS and the peer has no `ca`", p.site_id))?;
                        Ok((p.site_id.clone(), PeerCa::load(ca)?))
                    })
                    .collect::<anyhow::Result<_>>()?,
            ),
        };
        Ok(Self { veem, peer_cas })
    }

    /// The handlers without the server and without TLS (in-process peers
    /// in tests).
    pub fn handler(veem: Arc<Veem>) -> Self {
        Self { veem, peer_cas: None }
    }
}

type R<T> = Result<Response<T>, Status>;
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn ok<T, E: crate::api::status::Coded>(r: Result<T, E>) -> R<T> {
    r.map(Response::new).map_err(status)
}

#[tonic::async_trait]
impl Vmi for VmiService {
    async fn negotiate(&self, r: Request<NegotiateRequest>) -> R<NegotiateResponse> {
        let role = self.user(&r)?;
        let redactor = self.redactor(&role);
        let offer = self.veem.deploy.negotiate(&role, &r.get_ref().manifest_toml).await;
        Ok(Response::new(NegotiateResponse {
            verdict: vmi::Verdict::from(offer.verdict) as i32,
            reasons: offer.reasons.iter().map(|r| redact(redactor.as_ref(), r)).collect(),
            earliest_start: offer.window.and_then(|(start, _)| interfaces::time::timestamp_s(start)),
            earliest_end: offer.window.and_then(|(_, end)| interfaces::time::timestamp_s(end)),
        }))
    }

    async fn deploy(&self, r: Request<DeployRequest>) -> R<ServiceInfo> {
        let role = self.user(&r)?;
        let r = r.get_ref();
        let s = self
            .veem
            .deploy
            .deploy_request(&role, &r.manifest_toml, &r.request_id)
            .await
            .map_err(|e| self.refusal(&role, e))?;
        Ok(Response::new(self.service_info(&role, &s)))
    }

    async fn get_service(&self, r: Request<GetServiceRequest>) -> R<ServiceInfo> {
        let role = self.user(&r)?;
        let s = self.visible_service(&role, &r.get_ref().service_id)?;
        Ok(Response::new(self.service_info(&role, &s)))
    }

    // The calls that change something run once per request ID
    // (`replies`: metadata `vee-request-id`).
    async fn extend_service(&self, r: Request<ExtendServiceRequest>) -> R<ServiceInfo> {
        let role = self.user(&r)?;
        self.once("ExtendService", &role, r, |r| async {
            let req = r.into_inner();
            self.visible_service(&role, &req.service_id)?;
            if req.until.is_none() {
                return Err(Status::invalid_argument("field `until` is required"));
            }
            let s = self
                .veem
                .windows
                .extend_window(&req.service_id, interfaces::time::s_of(&req.until))
                .await
                .map_err(|e| self.refusal(&role, e))?;
            Ok(Response::new(self.service_info(&role, &s)))
        })
        .await
    }

    async fn scale_component(&self, r: Request<ScaleComponentRequest>) -> R<ServiceInfo> {
        let role = self.user(&r)?;
        self.once("ScaleComponent", &role, r, |r| async {
            let req = r.into_inner();
            self.visible_service(&role, &req.service_id)?;
            let s = self
                .veem
                .scaling
                .scale(&req.service_id, &req.component, req.instances)
                .await
                .map_err(|e| self.refusal(&role, e))?;
            Ok(Response::new(self.service_info(&role, &s)))
        })
        .await
    }

    async fn update_component(&self, r: Request<UpdateComponentRequest>) -> R<Rollout> {
        let role = self.user(&r)?;
        self.once("UpdateComponent", &role, r, |r| async {
            let req = r.into_inner();
            self.visible_service(&role, &req.service_id)?;
            let rec = self
                .veem
                .rollouts
                .update(crate::workflows::rollout::UpdateRequest {
                    service_id: req.service_id,
                    component: req.component,
                    image: req.image,
                    max_unavailable: req.max_unavailable,
                    rollback: req.rollback,
                    ready_timeout_s: interfaces::time::s_of_duration(&req.ready_timeout),
                })
                .await
                .map_err(|e| self.refusal(&role, e))?;
            Ok(Response::new(crate::wire::rollout(&rec)))
        })
        .await
    }

    async fn resize_vee(&self, r: Request<ResizeVeeRequest>) -> R<VeeInfo> {
        let role = self.user(&r)?;
        self.once("ResizeVee", &role, r, |r| async {
            let req = r.into_inner();
            self.visible_vee(&role, &req.vee_id)?;
            let (vcpus, memory_mib) = ((req.vcpus > 0).then_some(req.vcpus), (req.memory_mib > 0).then_some(req.memory_mib));
            let v = self
                .veem
                .resizing
                .resize(&req.vee_id, vcpus, memory_mib)
                .await
                .map_err(|e| self.refusal(&role, e))?;
            Ok(Response::new(self.vee_info(&role, &v)))
        })
        .await
    }

    async fn get_rollout(&self, r: Request<GetRolloutRequest>) -> R<Rollout> {
        let role = self.user(&r)?;
        let req = r.into_inner();
        self.visible_service(&role, &req.service_id)?;
        let rec = self
            .veem
            .rollouts
            .rollout(&req.service_id, &req.component)
            .map_err(|e| self.refusal(&role, e))?
            .ok_or_else(|| {
                Status::not_found(format!(
                    "component {:?} of service {} was never updated",
                    req.component, req.service_id
                ))
            })?;
        Ok(Response::new(crate::wire::rollout(&rec)))
    }

    async fn delete_service(&self, r: Request<DeleteServiceRequest>) -> R<ServiceInfo> {
        let role = self.user(&r)?;
        self.once("DeleteService", &role, r, |r| async {
            let id = &r.into_inner().service_id;
            self.visible_service(&role, id)?;
            let s = self.veem.lifecycle.undeploy(id).await.map_err(|e| self.refusal(&role, e))?;
            Ok(Response::new(self.service_info(&role, &s)))
        })
        .await
    }

    async fn list_services(&self, r: Request<ListServicesRequest>) -> R<ListServicesResponse> {
        let role = self.user(&r)?;
        let r = r.get_ref();
        // The page's records alone, read in key (service ID) order.
        let read = |after: Option<&str>, n: usize| {
            let mut page = Vec::new();
            self.veem
                .core
                .store
                .scan_after(crate::store::Tree::Services, after, |key, raw| {
                    let s: ServiceRec = serde_json::from_slice(raw).with_context(|| format!("services record {key}"))?;
                    if roles::sees(&role, &s) {
                        page.push(s);
                    }
                    Ok(page.len() < n)
                })
                .map_err(status)?;
            Ok(page)
        };
        let (page, next_page_token) = pages::page_read(|s: &ServiceRec| s.id.clone(), r.page_size, &r.page_token, read)?;
        let services = page.iter().map(|s| self.service_info(&role, s)).collect();
        Ok(Response::new(ListServicesResponse { services, next_page_token }))
    }

    async fn list_vees(&self, r: Request<ListVeesRequest>) -> R<ListVeesResponse> {
        let role = self.user(&r)?;
        let r = r.get_ref();
        let id = &r.service_id;
        let vees = if id.is_empty() {
            self.veem
                .core
                .vees()
                .iter()
                .filter(|v| self.visible_service(&role, &v.service_id).is_ok())
                .map(|v| self.vee_info(&role, v))
                .collect()
        } else {
            self.service_info(&role, &self.visible_service(&role, id)?).vees
        };
        // A service's VEEs together, by component and instance.
        let key = |v: &VeeInfo| format!("{}/{}/{:010}/{}", v.service_id, v.component, v.instance, v.vee_id);
        let (vees, next_page_token) = pages::page(vees, key, r.page_size, &r.page_token)?;
        Ok(Response::new(ListVeesResponse { vees, next_page_token }))
    }

    async fn get_vee(&self, r: Request<GetVeeRequest>) -> R<VeeInfo> {
        let role = self.caller(&r)?;
        let v = self.visible_vee(&role, &r.get_ref().vee_id)?;
        let mut info = self.vee_info(&role, &v);
        self.latest_checkpoint_replication(&role, &mut info, &v)?;
        Ok(Response::new(info))
    }

    async fn vee_action(&self, r: Request<VeeActionRequest>) -> R<VeeInfo> {
        let role = self.caller(&r)?;
        let action = crate::wire::action("action", r.get_ref().action).map_err(status)?;
        if action == Action::Withdraw {
            self.operator(&r)?;
        }
        self.once("VeeAction", &role, r, |r| async {
            let req = r.into_inner();
            self.visible_vee(&role, &req.vee_id)?;
            let v = self
                .veem
                .lifecycle
                .vee_action(&req.vee_id, action, &req.checkpoint_id)
                .await
                .map_err(|e| self.refusal(&role, e))?;
            let mut info = self.vee_info(&role, &v);
            self.latest_checkpoint_replication(&role, &mut info, &v)?;
            // The primary site records a checkpoint taken here for its
            // VEE, and learns how far its copy there got.
            if matches!(role, Role::Peer(_)) && action == Action::Checkpoint {
                let cp = self.veem.checkpoints.checkpoint_of(&v.id, None).map_err(status)?;
                info.checkpoint_record = cp
                    .as_ref()
                    .map(crate::steps::checkpoints::CheckpointError::record_of)
                    .transpose()
                    .map_err(status)?;
                if let Some(c) = &cp {
                    info.latest_checkpoint_replication = vmi::CheckpointReplication::from(c.replication.state) as i32;
                }
            }
            Ok(Response::new(info))
        })
        .await
    }

    /// See [`VmiService::propose`].
    async fn migrate(&self, r: Request<MigrateRequest>) -> R<MigrationInfo> {
        let role = self.user(&r)?;
        self.once("Migrate", &role, r, |r| self.propose(&role, r.into_inner())).await
    }

    async fn approve_migration(&self, r: Request<ApproveMigrationRequest>) -> R<MigrationInfo> {
        let by = self.operator(&r)?;
        self.once("ApproveMigration", &Role::Operator, r, |r| async move {
            ok(self
                .veem
                .migration
                .approve(&r.get_ref().migration_id, &by)
                .map(|m| migration_info(&m, None)))
        })
        .await
    }

    async fn reject_migration(&self, r: Request<RejectMigrationRequest>) -> R<MigrationInfo> {
        let by = self.operator(&r)?;
        self.once("RejectMigration", &Role::Operator, r, |r| async move {
            let req = r.into_inner();
            ok(self
                .veem
                .migration
                .reject(&req.migration_id, &by, &req.reason)
                .map(|m| migration_info(&m, None)))
        })
        .await
    }

    async fn drain(&self, r: Request<DrainRequest>) -> R<DrainResponse> {
        self.operator(&r)?;
        self.once("Drain", &Role::Operator, r, |r| async move {
            ok(self.veem.migration.drain(&r.get_ref().host).map(|l| DrainResponse {
                migrations: l.iter().map(|m| migration_info(m, None)).collect(),
            }))
        })
        .await
    }

    async fn list_migrations(&self, r: Request<ListMigrationsRequest>) -> R<ListMigrationsResponse> {
        let role = self.user(&r)?;
        let all: Vec<MigrationRec> = self.veem.core.store.list(crate::store::Tree::Migrations).map_err(status)?;
        let redactor = self.redactor(&role);
        let migrations: Vec<MigrationInfo> = all
            .iter()
            .filter(|m| self.visible_vee(&role, &m.vee_id).is_ok())
            .map(|m| migration_info(m, redactor.as_ref()))
            .collect();
        // Oldest first: the creation time (ms, zero-padded) sorts as text.
        let key = |m: &MigrationInfo| format!("{:020}/{}", interfaces::time::ms_of(&m.create_time).max(0), m.migration_id);
        let r = r.get_ref();
        let (migrations, next_page_token) = pages::page(migrations, key, r.page_size, &r.page_token)?;
        Ok(Response::new(ListMigrationsResponse {
            migrations,
            next_page_token,
        }))
    }

    async fn list_hosts(&self, r: Request<ListHostsRequest>) -> R<ListHostsResponse> {
        self.operator(&r)?;
        let r = r.get_ref();
        let (hosts, next_page_token) = pages::page(self.host_status(), |h| h.name.clone(), r.page_size, &r.page_token)?;
        Ok(Response::new(ListHostsResponse { hosts, next_page_token }))
    }

    async fn list_usage_limits(&self, r: Request<ListUsageLimitsRequest>) -> R<ListUsageLimitsResponse> {
        let role = self.caller(&r)?;
        let limits: Vec<UsageLimitInfo> = self
            .veem
            .accounting
            .usage_limits(|consumer| match &role {
                Role::Operator => true,
                Role::Provider(name) | Role::Peer(name) => name == consumer,
            })
            .into_iter()
            .map(info::usage_limit_info)
            .collect();
        let r = r.get_ref();
        let (limits, next_page_token) = pages::page(limits, |l| l.consumer.clone(), r.page_size, &r.page_token)?;
        Ok(Response::new(ListUsageLimitsResponse { limits, next_page_token }))
    }

    type AttachConsoleStream = BoxStream<AttachConsoleResponse>;
    async fn attach_console(&self, r: Request<tonic::Streaming<AttachConsoleRequest>>) -> R<Self::AttachConsoleStream> {
        Ok(Response::new(self.console(r).await?))
    }

    type WatchEventsStream = BoxStream<Event>;
    async fn watch_events(&self, r: Request<WatchEventsRequest>) -> R<Self::WatchEventsStream> {
        Ok(Response::new(self.watch(r)?))
    }

    async fn list_events(&self, r: Request<ListEventsRequest>) -> R<ListEventsResponse> {
        let role = self.caller(&r)?;
        self.events_page(&role, r.get_ref()).map(Response::new)
    }

    async fn get_usage(&self, r: Request<GetUsageRequest>) -> R<UsageReport> {
        let role = self.user(&r)?;
        self.visible_service(&role, &r.get_ref().service_id)?;
        let redactor = self.redactor(&role);
        let service_id = r.get_ref().service_id.clone();
        ok(self.veem.accounting.usage_report(&service_id).map(|u| {
            let mut u = info::usage_report(&service_id, u);
            for rec in &mut u.records {
                rec.component = self.veem.core.vee(&rec.vee_id).map(|v| v.component).unwrap_or_default();
            }
            if let Some(r) = &redactor {
                for rec in &mut u.records {
                    rec.site_chain.clear();
                }
                for v in &mut u.violations {
                    v.term = r.text(&v.term);
                }
            }
            u
        }))
    }

    async fn prepare_incoming(&self, r: Request<PrepareIncomingRequest>) -> R<interfaces::vhi::IncomingTarget> {
        let site = self.peer(&r)?;
        let incoming = wire::incoming_vee(r.into_inner()).map_err(status)?;
        ok(self.veem.federation.accept_incoming(&site, incoming).await)
    }

    async fn complete_incoming(&self, r: Request<CompleteIncomingRequest>) -> R<VeeInfo> {
        let site = self.peer(&r)?;
        let role = Role::Peer(site);
        self.visible_vee(&role, &r.get_ref().vee_id)?;
        let v = self.veem.federation.complete_incoming(&r.get_ref().vee_id).await.map_err(status)?;
        Ok(Response::new(self.vee_info(&role, &v)))
    }

    async fn abort_incoming(&self, r: Request<AbortIncomingRequest>) -> R<AbortIncomingResponse> {
        let site = self.peer(&r)?;
        self.visible_vee(&Role::Peer(site), &r.get_ref().vee_id)?;
        ok(self
            .veem
            .federation
            .abort_incoming(&r.get_ref().vee_id)
            .await
            .map(|_| AbortIncomingResponse {}))
    }

    async fn update_network(&self, r: Request<UpdateNetworkRequest>) -> R<UpdateNetworkResponse> {
        let site = self.peer(&r)?;
        let network = r
            .into_inner()
            .network
            .ok_or_else(|| Status::invalid_argument("field `network` is required"))?;
        ok(self
            .veem
            .networks
            .primary_network_changed(&site, network)
            .await
            .map(|_| UpdateNetworkResponse {}))
    }

    async fn withdraw(&self, r: Request<WithdrawRequest>) -> R<WithdrawResponse> {
        let site = self.peer(&r)?;
        ok(self
            .veem
            .migration
            .withdrawn(&site, &r.get_ref().vee_id)
            .map(|_| WithdrawResponse {}))
    }

    async fn reserve_spare(&self, r: Request<ReserveSpareRequest>) -> R<ReserveSpareResponse> {
        let site = self.peer(&r)?;
        let spare = wire::spare_request(r.into_inner()).map_err(status)?;
        ok(self.veem.spares.hold_spare(&site, &spare).map(wire::spare_held))
    }

    async fn confirm_spare(&self, r: Request<ConfirmSpareRequest>) -> R<ConfirmSpareResponse> {
        let site = self.peer(&r)?;
        ok(self
            .veem
            .spares
            .confirm_spare(&site, &r.get_ref().vee_id)
            .map(|_| ConfirmSpareResponse {}))
    }

    async fn release_spare(&self, r: Request<ReleaseSpareRequest>) -> R<ReleaseSpareResponse> {
        let site = self.peer(&r)?;
        ok(self
            .veem
            .spares
            .release_spare(&site, &r.get_ref().vee_id)
            .map(|_| ReleaseSpareResponse {}))
    }

    async fn send_vee(&self, r: Request<SendVeeRequest>) -> R<MigrationInfo> {
        let site = self.peer(&r)?;
        let req = r.into_inner();
        let target = req.target.ok_or_else(|| Status::invalid_argument("field `target` is required"))?;
        let r = self.redactor(&Role::Peer(site.clone()));
        ok(self
            .veem
            .migration
            .send_vee(&site, &req.vee_id, target)
            .await
            .map(|m| migration_info(&m, r.as_ref())))
    }

    async fn push_usage(&self, r: Request<PushUsageRequest>) -> R<PushUsageResponse> {
        let site = self.peer(&r)?;
        let batch = r.into_inner();
        if batch.from_site != site {
            return Err(Status::permission_denied(format!(
                "field `from_site`: {:?} is not the calling site {site:?}",
                batch.from_site
            )));
        }
        let records = batch.records.into_iter().map(wire::pushed_usage).collect();
        ok(self.veem.accounting.receive_usage(&site, records).map(wire::usage_receipt))
    }
}

mod console;
mod events;
mod info;
pub mod replies;
pub(crate) use console::MAX_INPUT as CONSOLE_MAX_INPUT;
pub(crate) use info::host_status;

/// An attached console's answers, as the VMI streams them.
pub(crate) type ConsoleStream = BoxStream<AttachConsoleResponse>;
mod roles;
#[cfg(test)]
mod tests;
