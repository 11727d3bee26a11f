//! Scaling a component of a deployed service by hand (issue 40, item 1;
//! DESIGN.md §13: scaling is admission; E §4.1 SERVICE_ELASTICITY).
//!
//! Growing plans the new instances through the planner like a Deploy
//! ([`crate::planner::Planner::plan_scale_out`]: the service's
//! constraints against the instances already placed, its guarantee level's
//! spares, a full guarantee's spares held at a peer first, the provider's
//! usage SLA), gives them addresses on the service's networks (the lowest
//! free ones, [`ipam::more_nics`]) and commits the plan with their records
//! in one write, planned again when the planner changed meanwhile, as
//! Deploy does; then their hosts' member tables and DNS get them and they
//! boot in the background. All or nothing: a refusal changes nothing and
//! says why. New instances take the lowest indices the live ones leave
//! free (`web-2`), made from the newest record of the component (its
//! image, size and first-boot data as the component has them now).
//!
//! Shrinking stops the highest-indexed live instances as VeeAction STOP
//! does (a clean guest shutdown, reservations, spares and addresses
//! released, at a peer site too), then the member tables lose them.
//! Survivors never change index, name or address. A scale-out this site
//! cannot hold goes to peer sites as Deploy's overflow does, when the
//! service's migration policy allows peer sites and the site has peers
//! (each peer admits or refuses under its framework agreement, site-level
//! constraints counted against the instances already placed); else it is
//! refused with the planner's reasons.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::ops::Deref;
use std::sync::Arc;

use crate::core::{Core, RecordError, PLAN_ATTEMPTS};
use crate::domain::rollout::RolloutState;
use crate::domain::InvalidTransition;
use crate::error::VeemError;
use crate::ipam::{self, IpamError};
use crate::model::{Location, ServiceRec, VeeRec, VeeState};
use crate::planner::{Admission, PeerSpare};
use crate::steps::background::Background;
use crate::steps::boot::Boot;
use crate::steps::intents::{Intent, Intents};
use crate::steps::networks::Networks;
use crate::steps::spares::Spares;
use crate::steps::stop::Stop;
use crate::store::{StoreError, Writes};
use crate::workflows::federation::Federation;

/// Why a scaling did not happen (in full): nothing changed when growing;
/// when shrinking, the instances named were not stopped (the others
/// were). Each variant's status is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    /// A request field: `service_id` (a service run here for a peer),
    /// `component`, `instances`.
    #[error(transparent)]
    Request(#[from] VeemError),
    /// No such service, or its records could not be read or written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A rolling update of the component is under way: scale it once the
    /// rollout ends.
    #[error("component {component} is being updated to {to_image} ({replaced} of {instances} replaced): scale it once the rollout ends")]
    Rolling {
        component: String,
        to_image: String,
        replaced: usize,
        instances: u32,
    },
    /// The site (and its peers) cannot take the new instances: the
    /// planner's reasons, each peer's refusal, a spare no peer holds.
    #[error("reject: {0}")]
    Rejected(String),
    /// The service's networks have no address left for a new instance.
    #[error("reject: {0}")]
    Networks(#[from] IpamError),
    /// The site's plan changed under each attempt: nothing written; ask
    /// again.
    #[error("reject: the site's plan changed under each of {attempts} attempts (other admissions); try again")]
    Contended { attempts: u32 },
    /// The store refused or failed: nothing written.
    #[error("reject: {0}")]
    Store(StoreError),
    /// An instance placed at a peer could not be recorded as running there.
    #[error("reject: {0}")]
    Transition(InvalidTransition),
    /// Shrinking: instances that could not be stopped, each named with
    /// its reason (the others were stopped).
    #[error("{failed} of {of} instances not stopped: {reasons}")]
    NotStopped { failed: usize, of: usize, reasons: String },
}

impl From<StoreError> for ScaleError {
    fn from(e: StoreError) -> Self {
        ScaleError::Store(e)
    }
}

impl From<InvalidTransition> for ScaleError {
    fn from(e: InvalidTransition) -> Self {
        ScaleError::Transition(e)
    }
}

/// The most instances a component may be scaled to (as a manifest's
/// `instances`).
pub const MAX_INSTANCES: u32 = interfaces::manifest::MAX_INSTANCES;

/// See the module documentation. Calls the core, background displacement,
/// booting, stopping, federation (peer placements), intents, networks and
/// spares.
pub struct Scaling {
    pub(crate) core: Arc<Core>,
    /// One scaling of a service at a time.
    pub(crate) locks: std::sync::Mutex<interfaces::locks::LockMap>,
    pub(crate) background: Arc<Background>,
    pub(crate) boot: Arc<Boot>,
    pub(crate) federation: Arc<Federation>,
    pub(crate) intents: Arc<Intents>,
    pub(crate) networks: Arc<Networks>,
    pub(crate) spares: Arc<Spares>,
    pub(crate) stop: Arc<Stop>,
}

impl Deref for Scaling {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

/// Whether `v` is a live instance (admitted and not ended).
pub(crate) fn live(v: &VeeRec) -> bool {
    !matches!(v.state, VeeState::Pending | VeeState::Rejected | VeeState::Terminated)
}

impl Scaling {
    /// Scales component `component` of service `service_id` to `instances`
    /// live instances (see the module documentation); returns the service.
    /// Errors: NotFound (service), InvalidArgument naming `component` or
    /// `instances`; a refusal with the planner's reasons (nothing changed);
    /// a shrink that could not stop an instance, naming it (the others
    /// stopped).
    pub async fn scale(self: &Arc<Self>, service_id: &str, component: &str, instances: u32) -> Result<ServiceRec, ScaleError> {
        let lock = interfaces::locks::entry(&mut self.locks.lock().unwrap(), service_id);
        let _one_at_a_time = lock.lock().await;
        let svc = self.service(service_id)?;
        if svc.for_peer.is_some() {
            return Err(VeemError::field("service_id", "is run here for a peer site: scale it at its primary site").into());
        }
        if instances > MAX_INSTANCES {
            return Err(VeemError::field("instances", format!("{instances} is more than {MAX_INSTANCES}")).into());
        }
        let all = self.vees_where(|v| v.service_id == service_id && v.component == component);
        let Some(mut template) = all.iter().max_by_key(|v| v.updated_ms).cloned() else {
            return Err(VeemError::field("component", format!("service {service_id} has no component {component:?}")).into());
        };
        if let Some(r) = self.rollout(service_id, component)? {
            if r.state == RolloutState::Rolling {
                return Err(ScaleError::Rolling {
                    component: component.into(),
                    to_image: r.to_image,
                    replaced: r.replaced.len(),
                    instances: r.instances,
                });
            }
            // New instances get the image the rollout left the component on.
            template.image = r.current_image().to_string();
        }
        let mut current: Vec<VeeRec> = all.into_iter().filter(live).collect();
        current.sort_by_key(|v| v.instance);
        let have = current.len() as u32;
        if instances > have {
            self.grow(svc, &template, &current, instances - have).await
        } else {
            if instances < have {
                self.shrink(&svc, &current[instances as usize..]).await?;
            }
            Ok(self.service(service_id)?)
        }
    }

    async fn grow(self: &Arc<Self>, mut svc: ServiceRec, template: &VeeRec, current: &[VeeRec], n: u32) -> Result<ServiceRec, ScaleError> {
        let taken: BTreeSet<u32> = current.iter().map(|v| v.instance).collect();
        let indices: Vec<u32> = (0..).filter(|i| !taken.contains(i)).take(n as usize).collect();
        let ids: Vec<String> = indices.iter().map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let mut peer_spare = PeerSpare::NotAsked;
        let mut spare_site: Option<String> = None;
        let settle = |keep: bool, site: Option<String>| {
            let (this, ids) = (self.clone(), ids.clone());
            async move {
                if let Some(site) = site {
                    this.spares.settle_peer_spares(&site, &ids, keep).await;
                }
            }
        };
        for attempt in 1..=PLAN_ATTEMPTS {
            let now = self.now_slot();
            let planned = self
                .planner
                .lock()
                .unwrap()
                .plan_scale_out(&svc.id, &template.component, &ids, now, &peer_spare);
            let plan = match planned {
                Ok(plan) => plan,
                Err(no) => match *no {
                    Admission::NeedsPeerSpare { spares } if spare_site.is_none() => {
                        let site = self
                            .spares
                            .reserve_peer_spares(&spares, None)
                            .await
                            .map_err(|reasons| ScaleError::Rejected(format!("{}: {}", crate::steps::spares::NO_SPARE, reasons.join("; "))))?;
                        peer_spare = PeerSpare::Offered { site: site.clone() };
                        spare_site = Some(site);
                        continue;
                    }
                    other => {
                        settle(false, spare_site).await;
                        let why = format!(
                            "component {} of service {} cannot grow by {n} here: {}",
                            template.component,
                            svc.id,
                            other.reasons().join("; ")
                        );
                        let federate = svc.terms.as_ref().is_some_and(|t| t.sla.migration.allows_peer_site());
                        if federate && !self.cfg.peers.is_empty() {
                            return self.grow_at_peers(svc, template, &indices, &ids, why).await;
                        }
                        return Err(ScaleError::Rejected(why));
                    }
                },
            };
            let one_at_a_time = self.networks.ipam.lock().await;
            let hosts: Vec<Option<String>> = ids
                .iter()
                .map(|id| plan.admitted.placements.iter().find(|p| p.vee == *id).map(|p| p.host.clone()))
                .collect();
            let vees = match self.new_records(&svc, template, &indices, &ids, &hosts) {
                Ok(vees) => vees,
                Err(e) => {
                    drop(one_at_a_time);
                    settle(false, spare_site).await;
                    return Err(e);
                }
            };
            let mut grown = svc.clone();
            grown.vees.extend(vees.iter().map(|v| v.id.clone()));
            match self.commit_admission_plan(plan, &grown, &vees, Default::default()) {
                Ok(Ok(admitted)) => {
                    fail::fail_point!("scale-after-commit");
                    drop(one_at_a_time);
                    settle(true, spare_site).await;
                    for v in &vees {
                        let host = v.host().unwrap_or("?");
                        self.event(
                            &v.id,
                            &svc.id,
                            "scaled-out",
                            format!("{} instance {} on {host}", v.component, v.instance),
                        );
                    }
                    self.networks.sync_networks(&svc.id).await;
                    for id in admitted.preempted {
                        let this = self.clone();
                        self.spawn(async move { this.background.preempt_background(&id).await });
                    }
                    for v in &vees {
                        self.boot.spawn_deploy(&v.id);
                    }
                    return Ok(grown);
                }
                Ok(Err(stale)) => {
                    tracing::info!(service = %svc.id, attempt, "{stale}");
                    svc = self.service(&svc.id)?;
                }
                Err(e) => {
                    drop(one_at_a_time);
                    settle(false, spare_site).await;
                    return Err(e.into());
                }
            }
        }
        settle(false, spare_site).await;
        Err(ScaleError::Contended { attempts: PLAN_ATTEMPTS })
    }

    /// Places the new instances `indices` (VEE IDs `ids`) at peer sites,
    /// as Deploy places what does not fit here (the framework agreements,
    /// cheapest first; each peer admits or refuses), when the planner
    /// refused them here for `why`: their records and addresses, an intent
    /// while the peers boot them, one commit. Errors: no peer takes one
    /// (`why` and each peer's refusal; nothing left anywhere).
    async fn grow_at_peers(
        &self,
        svc: ServiceRec,
        template: &VeeRec,
        indices: &[u32],
        ids: &[String],
        why: String,
    ) -> Result<ServiceRec, ScaleError> {
        let one_at_a_time = self.networks.ipam.lock().await;
        let nowhere = vec![None; ids.len()];
        let mut vees = self.new_records(&svc, template, indices, ids, &nowhere)?;
        let intent = Intent::RemotePlacement {
            service_id: svc.id.clone(),
            vees: ids.to_vec(),
            created_ms: self.clock.now_ms(),
        };
        self.intents.begin_intent(&intent)?;
        let others = self.vees_where(|v| v.service_id == svc.id && live(v));
        let placed = match self.federation.place_remote_among(&svc, &mut vees, &others).await {
            Ok(placed) => placed,
            Err(e) => {
                self.federation.unplace_remote(&vees).await;
                self.intents.drop_intent(&intent)?;
                return Err(e.into());
            }
        };
        if let Err(peers) = placed {
            self.intents.drop_intent(&intent)?;
            return Err(ScaleError::Rejected(format!("{why}; and no peer site takes it: {peers}")));
        }
        let mut grown = svc.clone();
        grown.vees.extend(ids.iter().cloned());
        let mut with = Writes::default();
        Intents::end_intent(&mut with, &intent);
        if let Err(e) = self.commit_admission_with(&grown, &vees, with) {
            self.federation.unplace_remote(&vees).await;
            self.intents.drop_intent(&intent)?;
            return Err(e.into());
        }
        drop(one_at_a_time);
        self.federation.placed_remotely(&vees);
        for v in &vees {
            let site = match &v.location {
                Location::Site(s) => s.as_str(),
                _ => "?",
            };
            let what = format!("{} instance {} at site {site} (full here: {why})", v.component, v.instance);
            self.event(&v.id, &svc.id, "scaled-out", what);
        }
        self.networks.sync_networks(&svc.id).await;
        Ok(grown)
    }

    /// The records of the new instances `indices` (VEE IDs `ids`) on
    /// `hosts` (in order; `None`: to be placed at a peer site, deploying),
    /// made from `template`: admitted over the rest of the service's
    /// window, with NICs on the service's networks.
    fn new_records(
        &self,
        svc: &ServiceRec,
        template: &VeeRec,
        indices: &[u32],
        ids: &[String],
        hosts: &[Option<String>],
    ) -> Result<Vec<VeeRec>, ScaleError> {
        let live_vees = self.vees_where(live);
        let mut used: BTreeSet<Ipv4Addr> = live_vees
            .iter()
            .filter(|v| v.service_id == svc.id)
            .flat_map(|v| v.nics.iter().map(|n| n.address.addr()))
            .collect();
        let mut external = self.networks.networks_taken()?.external;
        let networks: Vec<String> = template.nics.iter().map(|n| n.network.clone()).collect();
        let now = self.clock.now();
        let mut vees = Vec::new();
        for ((instance, id), host) in indices.iter().zip(ids).zip(hosts) {
            let nics = ipam::more_nics(&networks, &svc.networks, &self.cfg.networks, &mut used, &mut external)?;
            let mut cloud_init = template.cloud_init.clone();
            if let Some(c) = &mut cloud_init {
                c.hostname = crate::steps::networks::host_name(&template.component, *instance);
            }
            vees.push(VeeRec {
                id: id.clone(),
                instance: *instance,
                state: if host.is_some() { VeeState::Admitted } else { VeeState::Deploying },
                location: host.clone().map_or(Location::Nowhere, Location::Host),
                window_start_unix: now.max(template.window_start_unix),
                last_checkpoint_ms: None,
                latest_checkpoint: None,
                updated_ms: self.clock.now_ms(),
                for_peer: None,
                nics,
                stays: vec![],
                outages: 0,
                down_since_ms: None,
                image_since_ms: None,
                init_lead_s: 0,
                cloud_init,
                ..template.clone()
            });
        }
        Ok(vees)
    }

    /// Stops `victims` (VeeAction STOP, all at once), then the member
    /// tables lose them. Errors naming each that could not be stopped.
    async fn shrink(&self, svc: &ServiceRec, victims: &[VeeRec]) -> Result<(), ScaleError> {
        let stops = victims.iter().map(|v| async move {
            let r = self.stop.stop(&v.id).await;
            if r.is_ok() {
                self.event(&v.id, &svc.id, "scaled-in", format!("{} instance {}", v.component, v.instance));
            }
            (v.id.clone(), r)
        });
        let failed: Vec<String> = futures::future::join_all(stops)
            .await
            .into_iter()
            .filter_map(|(id, r)| r.err().map(|e| format!("VEE {id}: {e:#}")))
            .collect();
        self.networks.sync_networks(&svc.id).await;
        if !failed.is_empty() {
            return Err(ScaleError::NotStopped {
                failed: failed.len(),
                of: victims.len(),
                reasons: failed.join("; "),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
