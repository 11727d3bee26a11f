//! Negotiation, admission and deployment of service manifests
//! (DESIGN.md §5-6; H §3.4: planning-based admission).
//!
//! A manifest is parsed and validated (errors name the field), its image IDs
//! are checked against the image repository, then the planner answers
//! accept, counter-offer or reject. Negotiate never reserves anything;
//! Deploy reserves atomically and records the service and its VEEs before
//! any VEEH is called, so a VEEM killed mid-deploy resumes from its records
//! without duplicating a VEE.
//!
//! Deploy is a plan (Nomad's scheduler: plan on a snapshot, commit, retry):
//! the planner plans the admission on its state as it is and reserves
//! nothing ([`crate::planner::plan`]); the networks are assigned and VEEs
//! that do not fit are placed at peer sites; then the plan's planner
//! entries, the service and its VEEs are written in one commit and the
//! plan applied to the live planner ([`Core::commit_admission_plan`](crate::core::Core::commit_admission_plan)). When
//! the planner changed in between (another admission, a recovery), nothing
//! is written, what went to peers is taken back, and Deploy plans again,
//! at most [`PLAN_ATTEMPTS`](crate::core::PLAN_ATTEMPTS) times (then ABORTED). Nothing is ever undone in
//! the planner by hand.

use std::ops::Deref;
use std::sync::Arc;

use interfaces::manifest::{Component, Manifest};

use crate::config::Role;
use crate::core::{Core, PLAN_ATTEMPTS};
use crate::model::{Location, ServiceRec, VeeRec, VeeState};
use crate::planner::{Admission, AdmissionPlan, Admitted, PeerSpare, ServiceRequest, Stale};
use crate::store::StoreError;
use crate::steps::background::Background;
use crate::steps::boot::Boot;
use crate::steps::intents::Intent;
use crate::steps::intents::Intents;
use crate::steps::networks::{AssignError, Networks};
use crate::steps::spares::Spares;
use crate::steps::windows::Windows;
use crate::workflows::federation::Federation;
use crate::workflows::remapping::Remapping;

/// Why a manifest is refused before planning: the field and the reason.
pub struct Refusal(pub Vec<String>);

/// What one Deploy committed: the service, its VEEs, what the planner
/// admitted here (`None`: all of it at peer sites) and whether VEEs went to
/// peer sites.
struct Deployed {
    svc: ServiceRec,
    vees: Vec<VeeRec>,
    admitted: Option<Admitted>,
    remote: bool,
}

/// A VEE that did not fit at this site: (component, instance, VEE ID).
type LeftOver = (String, u32, String);

/// Every VEE of `req`: (component, instance, VEE ID).
fn all_vees(req: &ServiceRequest) -> Vec<LeftOver> {
    req.components
        .iter()
        .flat_map(|c| c.vees.iter().enumerate().map(move |(i, v)| (c.name.clone(), i as u32, v.clone())))
        .collect()
}

/// Sorts `vees` by component and instance; returns their IDs in that order.
fn sorted_ids(vees: &mut [VeeRec]) -> Vec<String> {
    vees.sort_by(|a, b| (&a.component, a.instance).cmp(&(&b.component, b.instance)));
    vees.iter().map(|v| v.id.clone()).collect()
}

/// Negotiate and Deploy (see the module doc): a manifest checked, planned, committed with its records and booted. Calls the core, background displacement, booting, federation, intents, networks, remapping, spares and windows.
pub struct Deploy {
    pub(crate) core: Arc<Core>,
    /// Serialises Deploys with the same request ID ([`request`]).
    pub(crate) request_locks: std::sync::Mutex<interfaces::locks::LockMap>,
    pub(crate) background: Arc<Background>,
    pub(crate) boot: Arc<Boot>,
    pub(crate) federation: Arc<Federation>,
    pub(crate) intents: Arc<Intents>,
    pub(crate) networks: Arc<Networks>,
    pub(crate) remapping: Arc<Remapping>,
    pub(crate) spares: Arc<Spares>,
    pub(crate) windows: Arc<Windows>,
}

impl Deref for Deploy {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Deploy {
    /// Deploy: admits atomically, records the service and its VEEs, and
    /// starts them in the background (VEEs whose window starts later wait
    /// for it). A service the site cannot take whole, whose SLA allows
    /// peer sites, is admitted in part here and the rest placed at peers
    /// (or all of it there): its networks are assigned first, so that the
    /// VEEs at peers are on them (stretched there, E PIII §II). Errors
    /// carry the reasons; a refused manifest changes no state.
    pub async fn deploy(self: &Arc<Self>, caller: &Role, toml: &str) -> Result<ServiceRec, DeployError> {
        self.deploy_request(caller, toml, "").await
    }

    /// [`Deploy::deploy`], idempotent under `request_id` (non-empty): a
    /// Deploy the caller already made with this ID and manifest answers
    /// the service it made ([`request`]). Errors: as Deploy's; InvalidArgument
    /// for a malformed ID; AlreadyExists for an ID used with another manifest.
    pub async fn deploy_request(self: &Arc<Self>, caller: &Role, toml: &str, request_id: &str) -> Result<ServiceRec, DeployError> {
        let started = self.clock.now_ms();
        let answer = self.deploy_answer(caller, toml, request_id).await;
        let verdict = match &answer {
            Ok(_) => "admitted",
            Err(e) if e.unanswered() => "error",
            Err(_) => "refused",
        };
        self.metrics.admission(verdict, self.clock.since_ms(started) as f64 / 1000.0);
        answer
    }

    async fn deploy_answer(self: &Arc<Self>, caller: &Role, toml: &str, request_id: &str) -> Result<ServiceRec, DeployError> {
        if request_id.is_empty() {
            return self.deploy_once(caller, toml, None).await;
        }
        let request = request::RequestKey::new(caller, request_id)?;
        let _one_at_a_time = self.lock_request(&request).await;
        if let Some(svc) = self.requested(&request, toml)? {
            return Ok(svc);
        }
        self.deploy_once(caller, toml, Some(&request)).await
    }

    async fn deploy_once(
        self: &Arc<Self>,
        caller: &Role,
        toml: &str,
        request: Option<&request::RequestKey>,
    ) -> Result<ServiceRec, DeployError> {
        let m = match self.check_manifest(caller, toml).await {
            Ok(m) => m,
            Err(Refusal(reasons)) => return Err(crate::error::VeemError::ManifestRefused(reasons).into()),
        };
        let service_id = uuid::Uuid::new_v4().to_string();
        let mut req = self.request(&m, &service_id);
        // The full guarantee: spares held at a peer first (crate::spares).
        let mut spare_site = None;
        let mut stale = None;
        for attempt in 1..=PLAN_ATTEMPTS {
            // Planned on a snapshot, the planner's lock held only to take
            // it: the commit refuses a plan the planner moved past.
            let snapshot = self.planner.lock().unwrap().snapshot();
            let mut verdict = snapshot.plan_admission(&req);
            let needs = match (&verdict, &spare_site) {
                (Err(no), None) => match &**no {
                    Admission::NeedsPeerSpare { spares } => Some(spares.clone()),
                    _ => None,
                },
                _ => None,
            };
            if let Some(needs) = needs {
                let site = self
                    .spares
                    .reserve_peer_spares(&needs, None)
                    .await
                    .map_err(|reasons| DeployError::rejected(crate::steps::spares::NO_SPARE, &reasons))?;
                req.peer_spare = PeerSpare::Offered { site: site.clone() };
                spare_site = Some((site, needs.iter().map(|n| n.vee.clone()).collect::<Vec<_>>()));
                let snapshot = self.planner.lock().unwrap().snapshot();
                verdict = snapshot.plan_admission(&req);
            }
            let planned = self.deploy_planned(caller, toml, &m, &req, verdict, request).await;
            match planned {
                Ok(Ok(deployed)) => {
                    // The peer keeps the spares now.
                    if let Some((site, spared)) = &spare_site {
                        self.spares.settle_peer_spares(site, spared, true).await;
                    }
                    fail::fail_point!("deploy-after-commit");
                    self.start_deployed(&req, &deployed).await;
                    return Ok(deployed.svc);
                }
                Ok(Err(s)) => {
                    tracing::info!(service = %service_id, attempt, "{s}");
                    stale = Some(s);
                }
                Err(e) => {
                    // A hold left unconfirmed lapses at the peer by itself;
                    // released now, it is free at once.
                    if let Some((site, spared)) = &spare_site {
                        self.spares.settle_peer_spares(site, spared, false).await;
                    }
                    return Err(e);
                }
            }
        }
        if let Some((site, spared)) = &spare_site {
            self.spares.settle_peer_spares(site, spared, false).await;
        }
        Err(DeployError::Contended {
            attempts: PLAN_ATTEMPTS,
            last: stale.expect("every attempt was stale"),
        })
    }

    /// One attempt of Deploy on `verdict`, the plan of `req` made on the
    /// planner as it was: the records, networks and remote placements of
    /// what it admits, then one commit of the plan and the records, then
    /// the plan applied to the live planner ([`Core::commit_admission_plan`](crate::core::Core::commit_admission_plan)).
    /// `Ok(Err(Stale))` when the planner changed since the plan (what this
    /// attempt did at peer sites is undone; nothing here was written).
    async fn deploy_planned(
        self: &Arc<Self>,
        caller: &Role,
        toml: &str,
        m: &Manifest,
        req: &ServiceRequest,
        verdict: Result<AdmissionPlan, Box<Admission>>,
        request: Option<&request::RequestKey>,
    ) -> Result<Result<Deployed, Stale>, DeployError> {
        let service_id = &req.service_id;
        let federate = m.sla.migration.allows_peer_site() && !self.cfg.peers.is_empty();
        // What is admitted here, what goes to peer sites, and, when none of
        // it fits here, why.
        let (plan, remote, refused) = match verdict {
            Ok(plan) => (Some(plan), vec![], None),
            Err(other) if federate => match self.plan_in_part(req) {
                Some((plan, rest)) => (Some(plan), rest, None),
                None => {
                    tracing::info!(service = %service_id, reasons = ?other.reasons(), "local admission failed; trying peer sites");
                    (None, all_vees(req), Some(self.reply(req, *other)))
                }
            },
            Err(other) => {
                let r = self.reply(req, *other);
                return Err(DeployError::rejected(r.verdict.to_string(), &r.reasons));
            }
        };
        let admitted = plan.as_ref().map(|p| &p.admitted);
        let for_peer = match caller {
            Role::Peer(site) => Some(site.clone()),
            _ => None,
        };
        let (mut svc, mut vees) = self.admission_records(m, toml, req, admitted, for_peer);
        let end = self
            .slots
            .start_of(req.service_window(admitted.map_or(req.window, |a| a.window)).end);
        for (component, instance, vee_id) in &remote {
            let c = m.component(component).expect("a request's component is the manifest's");
            vees.push(VeeRec {
                state: VeeState::Deploying,
                for_peer: svc.for_peer.clone(),
                ..VeeRec::of_manifest(m, c, *instance, vee_id, service_id, (self.clock.now(), end), self.clock.now_ms())
            });
        }
        svc.vees = sorted_ids(&mut vees);
        // Networks, remote placements and records, then the VEEHs here: a
        // crash from the commit on resumes.
        let one_at_a_time = self.networks.ipam.lock().await;
        self.networks
            .assign_networks(&one_at_a_time, m, &mut svc, &mut vees)
            .map_err(|e| match e {
                AssignError::Ipam(e) => DeployError::Networks(e),
                AssignError::Store(e) => DeployError::Store(e),
            })?;
        // VEEs placed at peers: an intent first (the peers boot them before
        // the commit here), ended by the commit.
        let intent = (!remote.is_empty()).then(|| Intent::RemotePlacement {
            service_id: svc.id.clone(),
            vees: remote.iter().map(|(_, _, v)| v.clone()).collect(),
            created_ms: self.clock.now_ms(),
        });
        if let Some(intent) = &intent {
            self.intents.begin_intent(intent)?;
            let placed = match self.federation.place_remote(&svc, &mut vees).await {
                Ok(placed) => placed,
                Err(e) => {
                    self.federation.unplace_remote(&vees).await;
                    self.intents.drop_intent(intent)?;
                    return Err(e.into());
                }
            };
            if let Err(why) = placed {
                self.intents.drop_intent(intent)?;
                match refused {
                    Some(r) => return Err(DeployError::rejected(r.verdict.to_string(), &[r.reasons.join("; "), why])),
                    None => {
                        return Err(DeployError::Rejected {
                            verdict: "reject".into(),
                            reasons: format!(
                                "{} VEEs fit at site {} and no peer site takes the other {}: {why}",
                                vees.len() - remote.len(),
                                self.cfg.site_id,
                                remote.len()
                            ),
                        })
                    }
                }
            }
            fail::fail_point!("deploy-after-remote-placement");
        }
        let mut with = match request {
            Some(r) => r.record(&svc.id, toml, self.clock.now_ms())?,
            None => Default::default(),
        };
        if let Some(intent) = &intent {
            crate::steps::intents::Intents::end_intent(&mut with, intent);
        }
        let committed = match plan {
            Some(plan) => self.commit_admission_plan(plan, &svc, &vees, with).map(|r| r.map(Some)),
            None => self.commit_admission_with(&svc, &vees, with).map(|()| Ok(None)),
        };
        let admitted = match committed {
            Ok(Ok(admitted)) => admitted,
            Ok(Err(stale)) => {
                self.unplace_remote_intent(&vees, intent.as_ref()).await?;
                return Ok(Err(stale));
            }
            Err(e) => {
                self.unplace_remote_intent(&vees, intent.as_ref()).await?;
                return Err(e.into());
            }
        };
        Ok(Ok(Deployed {
            svc,
            vees,
            admitted,
            remote: intent.is_some(),
        }))
    }

    /// Takes back what an attempt placed at peer sites under `intent`.
    async fn unplace_remote_intent(&self, vees: &[VeeRec], intent: Option<&Intent>) -> Result<(), StoreError> {
        if let Some(intent) = intent {
            self.federation.unplace_remote(vees).await;
            self.intents.drop_intent(intent)?;
        }
        Ok(())
    }

    /// After Deploy's commit: the booking profile learns the admission,
    /// events, background VEEs it displaced suspended, and the VEEs due
    /// now started in the background.
    async fn start_deployed(self: &Arc<Self>, req: &ServiceRequest, d: &Deployed) {
        if let Some(a) = &d.admitted {
            // What arrives, for how far ahead: VRM's booking profile.
            let share = {
                let p = self.planner.lock().unwrap();
                p.site_share(&req.total_resources()) * a.placements.len() as f64 / req.vee_count().max(1) as f64
            };
            self.remapping.record_booking(a.window, share);
        }
        self.federation.placed_remotely(&d.vees);
        if d.remote {
            // VEEs at peers: their networks' home part is here (anchored
            // when none runs here).
            self.networks.sync_networks(&d.svc.id).await;
        }
        for v in d.vees.iter().filter(|v| v.host().is_some()) {
            self.event(&v.id, &d.svc.id, "admitted", format!("on {}", v.host().unwrap_or("?")));
        }
        for id in d.admitted.iter().flat_map(|a| &a.preempted) {
            let veem = self.clone();
            let id = id.clone();
            self.spawn(async move { veem.background.preempt_background(&id).await });
        }
        for v in d.vees.iter().filter(|v| v.host().is_some()) {
            if v.deploy_due(self.clock.now()) {
                self.boot.spawn_deploy(&v.id);
            }
        }
    }

    /// The records Deploy writes for `admitted` (request `req` of manifest
    /// `m`, whose text is `toml`): the service, and one admitted VEE per
    /// placement, on its host, over the admitted window (Unix seconds, from
    /// now at the earliest), run for `for_peer` if set; sorted by component
    /// and instance. Without an admission (all of the service goes to peer
    /// sites), the service alone.
    pub fn admission_records(
        &self,
        m: &Manifest,
        toml: &str,
        req: &ServiceRequest,
        admitted: Option<&Admitted>,
        for_peer: Option<String>,
    ) -> (ServiceRec, Vec<VeeRec>) {
        let clock = self.slots;
        let window = req.service_window(admitted.map_or(req.window, |a| a.window));
        let window = (clock.start_of(window.start).max(self.clock.now()), clock.start_of(window.end));
        let lead = clock.duration_of(req.padding.before).as_secs() as i64;
        let mut vees: Vec<VeeRec> = admitted
            .iter()
            .flat_map(|a| &a.placements)
            .map(|p| {
                let comp = m.component(&p.component).expect("placement of a manifest component");
                let instance = req
                    .components
                    .iter()
                    .find(|c| c.name == p.component)
                    .and_then(|c| c.vees.iter().position(|v| v == &p.vee))
                    .unwrap_or(0) as u32;
                VeeRec {
                    location: Location::Host(p.host.clone()),
                    for_peer: for_peer.clone(),
                    init_lead_s: lead,
                    ..VeeRec::of_manifest(m, comp, instance, &p.vee, &req.service_id, window, self.clock.now_ms())
                }
            })
            .collect();
        let svc = ServiceRec {
            id: req.service_id.clone(),
            name: m.service.name.clone(),
            provider: m.service.provider.clone(),
            manifest_toml: toml.to_string(),
            terms: Some(crate::domain::ServiceTerms::of(m)),
            guarantee: m.sla.guarantee,
            penalty_per_hour: m.sla.penalty_per_hour,
            created_ms: self.clock.now_ms(),
            vees: sorted_ids(&mut vees),
            for_peer,
            networks: vec![],
            anchor: None,
        };
        (svc, vees)
    }

    /// Plans the largest prefix of the request's VEEs that fits at this
    /// site; returns the plan and the VEEs left over `(component, instance,
    /// VEE ID)` for peer sites. `None` if not even one VEE fits. Reserves
    /// nothing.
    fn plan_in_part(&self, req: &ServiceRequest) -> Option<(AdmissionPlan, Vec<LeftOver>)> {
        let all = all_vees(req);
        let snapshot = self.planner.lock().unwrap().snapshot();
        for k in (1..all.len()).rev() {
            let keep: std::collections::HashSet<&String> = all[..k].iter().map(|x| &x.2).collect();
            let mut sub = req.clone();
            for c in &mut sub.components {
                c.vees.retain(|v| keep.contains(v));
            }
            sub.components.retain(|c| !c.vees.is_empty());
            if let Ok(plan) = snapshot.plan_admission(&sub) {
                return Some((plan, all[k..].to_vec()));
            }
        }
        None
    }
}

impl VeeRec {
    /// The record of instance `instance` of component `c` of manifest `m`,
    /// admitted for the window `(start, end)` in Unix seconds: resources
    /// (vCPUs, MiB, GiB), image IDs and the SLA terms (guarantee, migration
    /// policy, checkpoint period over the window, max downtime); not placed
    /// yet (`Location::Nowhere`), not run for a peer.
    pub fn of_manifest(
        m: &Manifest,
        c: &Component,
        instance: u32,
        vee_id: &str,
        service_id: &str,
        (start, end): (i64, i64),
        now_ms: i64,
    ) -> VeeRec {
        VeeRec {
            id: vee_id.into(),
            service_id: service_id.into(),
            component: c.name.clone(),
            instance,
            vcpus: c.vcpus,
            memory_mib: c.memory_mib,
            max_vcpus: c.vcpu_limit(),
            max_memory_mib: c.memory_limit_mib(),
            disk_gib: c.disk_gib,
            image: c.image.to_string(),
            kernel: c.kernel.as_ref().map(|k| k.to_string()).unwrap_or_default(),
            initrd: c.initrd.as_ref().map(|k| k.to_string()).unwrap_or_default(),
            cmdline: c.cmdline.clone().unwrap_or_default(),
            cloud_init: (c.user_data.is_some() || !c.ssh_authorized_keys.is_empty()).then(|| interfaces::vhi::CloudInit {
                hostname: crate::steps::networks::host_name(&c.name, instance),
                user_data: c.user_data.clone().unwrap_or_default(),
                ssh_authorized_keys: c.ssh_authorized_keys.clone(),
            }),
            state: VeeState::Admitted,
            location: Location::Nowhere,
            checkpoint_interval_s: crate::domain::terms::checkpoint_interval(
                &m.sla,
                (end - start).max(1) as u64,
                crate::domain::terms::DEFAULT_CHECKPOINT_COST_S,
            ),
            last_checkpoint_ms: None,
            latest_checkpoint: None,
            guarantee: m.sla.guarantee,
            migration_policy: m.sla.migration,
            max_downtime_ms: m.sla.max_downtime_ms.unwrap_or(0),
            window_start_unix: start,
            window_end_unix: end,
            updated_ms: now_ms,
            for_peer: None,
            // Assigned with the admission (`networks`).
            nics: vec![],
            stays: vec![],
            outages: 0,
            down_since_ms: None,
            image_since_ms: None,
            checkpoint_cost_s: None,
            open_ended: m.sla.window.is_none(),
            init_lead_s: 0,
        }
    }
}

mod error;
mod negotiate;
pub mod request;

pub use error::DeployError;

#[cfg(test)]
mod tests;
