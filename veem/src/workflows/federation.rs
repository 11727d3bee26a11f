//! Federation with peer sites over the VMI (E PII §II-A, Ch 3.4; DESIGN.md
//! §7). A VEE keeps its ID everywhere; the primary site records only the
//! site a VEE runs at, never the host there.
//!
//! Primary side: remote placement of VEEs the site cannot admit, forwarding
//! of actions on remote VEEs (checkpoints taken there are recorded here
//! too), recovery at a peer site from a checkpoint. Peer side: admission of
//! incoming VEEs under the framework agreement (PrepareIncoming: boot,
//! restore from a checkpoint, or receive a migration), completion, abort
//! and fencing, and sending a VEE on (SendVee). Watching the peers:
//! [`workflows::peer_watch`](crate::workflows::peer_watch).

use std::ops::Deref;
use std::sync::Arc;

use interfaces::manifest::{GuaranteeLevel, MigrationPolicy};
use interfaces::vhi;
use interfaces::vhi::IncomingTarget;

use crate::core::Core;
use crate::domain::{InvalidTransition, StateMachine};
use crate::domain::peer::{Incoming, IncomingVee};
use crate::error::VeemError;
use crate::model::{Location, ServiceRec, VeeRec, VeeState};
use crate::peers;
use crate::planner::{Admission, ComponentRequest, PeerSpare, Resources, ServiceRequest, SlotRange};
use crate::steps::boot::Boot;
use crate::steps::checkpoints::{CheckpointError, Checkpoints, Origin};
use crate::steps::networks::Networks;
use crate::steps::site_constraints::SiteConstraints;
use crate::steps::spares::Spares;
use crate::steps::windows::Windows;
use crate::store::{Tree, Writes};

mod error;

pub use error::{IncomingError, PeerRecoveryError, SendError};

/// Peer sites as this site's primary and as their host (see the module doc): remote placement, incoming VEEs, actions forwarded, recovery at a peer. Calls the core, the networks, site constraints, spares, windows, booting and checkpoint records.
pub struct Federation {
    core: Arc<Core>,
    pub(crate) networks: Arc<Networks>,
    pub(crate) site_constraints: Arc<SiteConstraints>,
    pub(crate) spares: Arc<Spares>,
    pub(crate) windows: Arc<Windows>,
    pub(crate) boot: Arc<Boot>,
    pub(crate) checkpoints: Arc<Checkpoints>,
}

impl Deref for Federation {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Federation {
    pub fn new(
        core: Arc<Core>,
        networks: Arc<Networks>,
        site_constraints: Arc<SiteConstraints>,
        spares: Arc<Spares>,
        windows: Arc<Windows>,
        boot: Arc<Boot>,
        checkpoints: Arc<Checkpoints>,
    ) -> Self {
        Self {
            core,
            networks,
            site_constraints,
            spares,
            windows,
            boot,
            checkpoints,
        }
    }
}

impl Federation {
    /// Places the VEEs of `vees` (all records of service `svc`, not yet
    /// committed) that have no location at peer sites, cheapest agreement
    /// first; each peer applies its own admission and may refuse. A VEE on
    /// service networks goes with the member tables of `vees` (the others
    /// here on their planned hosts), so the peer stretches the networks to
    /// it. Records each placed VEE as running at its peer, or returns
    /// `Ok(Err(why))` (and nothing left at any peer) when some VEE finds no
    /// peer; `why` names each peer's refusal.
    pub async fn place_remote(&self, svc: &ServiceRec, vees: &mut [VeeRec]) -> Result<Result<(), String>, InvalidTransition> {
        self.place_remote_among(svc, vees, &[]).await
    }

    /// [`Federation::place_remote`] of `new` (more instances of a service
    /// that runs: a scale-out) beside `others`, its VEEs already placed
    /// (the site-level constraints and member tables count them); on a
    /// refusal only `new` is taken back.
    pub async fn place_remote_among(
        &self,
        svc: &ServiceRec,
        new: &mut [VeeRec],
        others: &[VeeRec],
    ) -> Result<Result<(), String>, InvalidTransition> {
        let constraints = svc.terms.as_ref().map(|t| t.constraints.clone()).unwrap_or_default();
        for i in 0..new.len() {
            if new[i].location != Location::Nowhere {
                continue;
            }
            let (c_vcpus, c_mem, guarantee) = (new[i].vcpus, new[i].memory_mib, new[i].guarantee);
            let mut refusals: Vec<String> = Vec::new();
            let all: Vec<VeeRec> = others.iter().chain(new.iter()).cloned().collect();
            for p in peers::candidates(&self.cfg, c_vcpus, c_mem, guarantee) {
                if let Some(why) = self.site_constraints.site_refusal(&new[i], &p.site_id, &all, &constraints) {
                    refusals.push(format!("not {}: {why}", p.site_id));
                    continue;
                }
                let spec = self.networks.spec_among(&new[i], svc, &all);
                match self.send_incoming(&p.site_id, &new[i], Incoming::Boot, spec).await {
                    Ok(_) => {
                        let v = &mut new[i];
                        v.location = Location::Site(p.site_id.clone());
                        // Its stay there starts now (the peer meters it
                        // from now), not at the commit.
                        v.stays = v.stays_after(None, self.clock.now());
                        v.state = v.state.transition(&v.id, VeeState::Running)?;
                        break;
                    }
                    Err(e) => refusals.push(format!("{} refused: {e:#}", p.site_id)),
                }
            }
            if new[i].location == Location::Nowhere {
                self.unplace_remote(new).await;
                let why = if refusals.is_empty() {
                    "no peer site's framework agreement admits it".to_string()
                } else {
                    refusals.join("; ")
                };
                tracing::warn!(vee = %new[i].id, %why, "no peer site took the VEE");
                return Ok(Err(why));
            }
        }
        Ok(Ok(()))
    }

    /// Takes back the VEEs of `vees` placed at peer sites by a placement
    /// that is not committed (the peers destroy them; best effort).
    pub(crate) async fn unplace_remote(&self, vees: &[VeeRec]) {
        for v in vees {
            if let Location::Site(s) = &v.location {
                let aborted = match self.peer(s) {
                    Ok(p) => p.abort_incoming(&v.id).await.map_err(|e| e.message().to_string()),
                    Err(e) => Err(format!("{e:#}")),
                };
                if let Err(e) = aborted {
                    tracing::warn!(vee = %v.id, site = %s, error = %e, "a VEE placed at a peer site was not taken back");
                }
                self.networks.stretch(v, None).await;
            }
        }
    }

    /// The `placed-remotely` event of each VEE of `vees` placed at a peer
    /// site (once its records are committed).
    pub(crate) fn placed_remotely(&self, vees: &[VeeRec]) {
        for v in vees {
            if let Location::Site(s) = &v.location {
                self.event(&v.id, &v.service_id, "placed-remotely", format!("at {s}"));
            }
        }
    }

    /// Asks peer `site` to admit VEE `v` (its VHI spec `spec`, with the
    /// member tables of its networks) and to boot it, restore it from a
    /// checkpoint or prepare to receive it by live migration (`how`).
    /// Errors carry the peer's refusal (its admission, agreement or host).
    /// A VEE on service networks goes only to a peer with an agreed overlay
    /// (`[peers.overlay]`): its networks are stretched there first
    /// ([`Networks::stretch`](crate::steps::networks::Networks::stretch); a live migration's caller unstretches them when
    /// it ends, see [`Migration::run_migration`](crate::workflows::migration::Migration::run_migration)).
    pub async fn send_incoming(&self, site: &str, v: &VeeRec, how: Incoming, spec: vhi::VeeSpec) -> Result<IncomingTarget, SendError> {
        if !v.nics.is_empty() && self.networks.overlay(site).is_none() {
            return Err(SendError::NoOverlay {
                vee: v.id.clone(),
                site: site.into(),
            });
        }
        let mut blobs = vec![spec.image.clone(), spec.kernel.clone(), spec.initrd.clone()];
        if let Incoming::Restore(cp) = &how {
            blobs.extend([cp.memory_blob.clone(), cp.disk_blob.clone()]);
            self.checkpoints
                .replicate_blobs(vec![cp.memory_blob.clone(), cp.disk_blob.clone()], site)
                .await?;
        }
        self.checkpoints.share_blobs(blobs, site).await?;
        self.networks.stretch(v, Some(site)).await;
        let incoming = IncomingVee {
            spec,
            primary_site: self.cfg.site_id.clone(),
            guarantee: v.guarantee,
            how,
        };
        let r = match self.peer(site) {
            Ok(p) => p.prepare_incoming(incoming).await,
            Err(e) => Err(e),
        }
        .map_err(|call| SendError::Peer { site: site.into(), call });
        // Refused: not on its way any more. Booted or restored there, it
        // stays "on its way" until the caller records it at the peer; a
        // migration until it ends.
        if r.is_err() {
            self.networks.stretch(v, None).await;
        }
        r
    }

    /// Restores (or, without a checkpoint, restarts) at a peer site a VEE
    /// that no local host can take after a failure (H §4: the peer site is
    /// the last resort before a penalty). Peers are tried cheapest first;
    /// each applies its own admission and checks the checkpoint's
    /// compatibility profile. `skip` is a site not to try (the one that
    /// failed). Errors with every peer's refusal.
    pub async fn recover_at_peer(&self, vee_id: &str, skip: Option<&str>) -> Result<(), PeerRecoveryError> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        let cp = self.checkpoints.checkpoint_of(vee_id, None)?;
        let record = cp.as_ref().map(CheckpointError::record_of).transpose()?;
        if v.state != VeeState::Failed {
            self.transition(&mut v, VeeState::Failed, "its host or site failed")?;
        }
        self.transition(&mut v, VeeState::Recovering, "at a peer site")?;
        let mut refusals = Vec::new();
        let constraints = self.site_constraints.constraints_of(&v);
        let others = self.vees_where(|o| o.service_id == v.service_id);
        // The peer holding its spare (full guarantee) first.
        let spare = self.spares.spare_site(vee_id);
        let mut candidates = peers::candidates(&self.cfg, v.vcpus, v.memory_mib, v.guarantee);
        candidates.sort_by_key(|p| Some(&p.site_id) != spare.as_ref());
        for p in candidates {
            if Some(p.site_id.as_str()) == skip {
                continue;
            }
            if let Some(why) = self.site_constraints.site_refusal(&v, &p.site_id, &others, &constraints) {
                refusals.push(format!("not {}: {why}", p.site_id));
                continue;
            }
            let how = match &record {
                Some(r) => Incoming::Restore(Box::new(r.clone())),
                None => Incoming::Boot,
            };
            match self.send_incoming(&p.site_id, &v, how, self.networks.spec_of(&v)).await {
                Ok(_) => {
                    let used_spare = self.planner.lock().unwrap().release_vee_to_site(vee_id, &p.site_id).ok().flatten();
                    self.persist_planner()?;
                    v.location = Location::Site(p.site_id.clone());
                    let how = match &cp {
                        Some(c) => format!("restored from checkpoint {} at {}", c.id, p.site_id),
                        None => format!("restarted from its images at {} (no checkpoint)", p.site_id),
                    };
                    let r = self.transition(&mut v, VeeState::Running, how);
                    self.networks.sync_networks(&v.service_id).await;
                    if let Some(need) = used_spare {
                        self.spares.replace_used_spare(vee_id, &p.site_id, need).await?;
                    }
                    return Ok(r?);
                }
                Err(e) => refusals.push(format!("{} refused: {e:#}", p.site_id)),
            }
        }
        if refusals.is_empty() {
            return Err(PeerRecoveryError::NoPeer { vee: vee_id.into() });
        }
        Err(PeerRecoveryError::Refused {
            vee: vee_id.into(),
            refusals: refusals.join("; "),
        })
    }

    // ----- peer side -----

    /// Admits an incoming VEE for primary site `from` under the framework
    /// agreement and this site's own planner; boots it, restores it from
    /// its checkpoint or prepares a VEEH to receive it by live migration
    /// (`r.how`).
    pub async fn accept_incoming(self: &Arc<Self>, from: &str, r: IncomingVee) -> Result<IncomingTarget, IncomingError> {
        if r.primary_site != from {
            return Err(VeemError::field("primary_site", format!("{:?} is not the calling site {from:?}", r.primary_site)).into());
        }
        let (spec, guarantee) = (r.spec, r.guarantee);
        peers::admits(&self.cfg, from, spec.vcpus, spec.memory_mib, guarantee)?;
        crate::model::check_uuid("vee_id", &spec.vee_id)?;
        if !spec.nics.is_empty() && self.networks.overlay(from).is_none() {
            return Err(IncomingError::NoOverlay {
                vee: spec.vee_id.clone(),
                from: from.into(),
            });
        }
        // What the peer runs here stays its own: an ID of a local VEE or
        // service (one it learned) does not let it join them.
        if let Ok(existing) = self.vee(&spec.vee_id) {
            if existing.for_peer.as_deref() != Some(from) {
                return Err(VeemError::field("vee_id", format!("{} is not a VEE site {from} runs here", spec.vee_id)).into());
            }
            if existing.state.is_live() || existing.state == VeeState::Migrating {
                return Err(IncomingError::AlreadyHere { vee: spec.vee_id.clone() });
            }
        }
        let known: Option<ServiceRec> = self.store.get(Tree::Services, &spec.service_id)?;
        if known.as_ref().is_some_and(|svc| svc.for_peer.as_deref() != Some(from)) {
            return Err(VeemError::field(
                "service_id",
                format!("{} is not a service site {from} runs here", spec.service_id),
            )
            .into());
        }
        let clock = self.slots;
        let now = self.now_slot();
        let req = ServiceRequest {
            service_id: spec.vee_id.clone(),
            consumer: from.into(),
            guarantee: if guarantee == GuaranteeLevel::Full {
                GuaranteeLevel::Standard
            } else {
                guarantee
            },
            migration: MigrationPolicy::Site,
            window: SlotRange::starting_at(now, self.windows.horizon_slots()),
            components: vec![ComponentRequest {
                name: "vee".into(),
                resources: Resources::new(spec.vcpus, spec.memory_mib, spec.disk_gib),
                profile: None,
                vees: vec![spec.vee_id.clone()],
            }],
            constraints: vec![],
            peer_spare: PeerSpare::NoneOffered,
            padding: crate::planner::Padding::NONE,
        };
        // A full VEE arriving into the spare held for it here: the spare
        // makes room, in the same commit as the VEE's admission (refused,
        // the spare stays held). Here it runs without a further peer spare.
        let (admitted, spare) = match self.spares.admit_into_spare(from, &req) {
            (Admission::Accepted(a), spare) => (a, spare),
            (other, _) => {
                return Err(IncomingError::NoRoom {
                    site: self.cfg.site_id.clone(),
                    vee: spec.vee_id.clone(),
                    reasons: other.reasons().join("; "),
                })
            }
        };
        let host = admitted.placements[0].host.clone();
        let mut svc: ServiceRec = known.unwrap_or(ServiceRec {
            id: spec.service_id.clone(),
            name: format!("for-{from}"),
            provider: from.into(),
            manifest_toml: String::new(),
            terms: None,
            guarantee,
            penalty_per_hour: 0.0,
            created_ms: self.clock.now_ms(),
            vees: vec![],
            for_peer: Some(from.into()),
            networks: vec![],
            anchor: None,
        });
        if !svc.vees.contains(&spec.vee_id) {
            svc.vees.push(spec.vee_id.clone());
        }
        let mut v = VeeRec {
            state: if r.how == Incoming::Migration {
                VeeState::Migrating
            } else {
                VeeState::Admitted
            },
            location: Location::Host(host.clone()),
            guarantee,
            window_start_unix: self.clock.now(),
            window_end_unix: clock.start_of(admitted.window.end),
            for_peer: Some(from.into()),
            ..VeeRec::from_spec(&spec, self.clock.now_ms())?
        };
        // The primary's member tables: this site's host stretches the
        // networks from them (checked by the VEEH before use).
        for (nic, wire) in v.nics.iter_mut().zip(&spec.nics) {
            nic.primary_members = wire.members.clone();
        }
        // The reservation, the service, the VEE and the spare it takes in
        // one commit.
        let mut w = Writes::default();
        if spare {
            w.remove(Tree::Spares, &spec.vee_id);
        }
        self.commit_admission_with(&svc, std::slice::from_ref(&v), w)?;
        if spare {
            self.event(&v.id, &v.service_id, "spare", format!("{from}'s VEE arrives into its spare"));
        }
        self.event(&v.id, &v.service_id, "incoming", format!("from {from} on {host}"));
        let result = async {
            match r.how {
                Incoming::Restore(cp) => {
                    self.restore_incoming(&v.id, &host, *cp).await?;
                    return Ok(IncomingTarget {
                        vee_id: v.id.clone(),
                        ..Default::default()
                    });
                }
                Incoming::Boot => {
                    self.boot.deploy_vee(&v.id).await?;
                    return Ok(IncomingTarget {
                        vee_id: v.id.clone(),
                        ..Default::default()
                    });
                }
                Incoming::Migration => {}
            }
            let failed = |call| IncomingError::Host { host: host.clone(), call };
            self.hosts
                .host(&host)
                .map_err(failed)?
                .prepare_incoming(vhi::PrepareIncomingRequest {
                    spec: Some(self.networks.spec_of(&v)),
                })
                .await
                .map_err(failed)
        }
        .await;
        if result.is_err() {
            self.drop_incoming(&v.id).await;
        }
        result
    }

    /// Forgets an incoming VEE that did not arrive (planner, records).
    pub(crate) async fn drop_incoming(&self, vee_id: &str) {
        let _ = self.planner.lock().unwrap().release_service(vee_id);
        let _ = self.persist_planner();
        if let Ok(v) = self.vee(vee_id) {
            let _ = self.remove_vee(vee_id);
            if let Ok(mut svc) = self.service(&v.service_id) {
                svc.vees.retain(|x| x != vee_id);
                let _ = self.store.put(Tree::Services, &svc.id, &svc);
            }
            self.event(vee_id, &v.service_id, "incoming", "aborted");
        }
    }

    /// The VEE arrived at its VEEH: adopt it. Idempotent: a VEE adopted
    /// already (the primary asks again after its restart) is answered as
    /// it runs.
    pub async fn complete_incoming(&self, vee_id: &str) -> Result<VeeRec, IncomingError> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        let host = v.host().ok_or_else(|| IncomingError::NoHost { vee: vee_id.into() })?.to_string();
        let failed = |call| IncomingError::Host { host: host.clone(), call };
        let st = self
            .hosts
            .host(&host)
            .map_err(failed)?
            .complete_incoming(vhi::CompleteIncomingRequest { vee_id: vee_id.into() })
            .await
            .map_err(failed)?;
        if st.state() != vhi::VeeState::Running {
            return Err(IncomingError::NotRunning {
                vee: vee_id.into(),
                state: format!("{:?}", st.state()),
            });
        }
        if v.state != VeeState::Running {
            self.transition(&mut v, VeeState::Running, format!("migrated in on {host}"))?;
        }
        Ok(v)
    }

    /// Restores an admitted incoming VEE on `host` from checkpoint `cp`
    /// (taken at any site); the VEEH refuses an incompatible profile.
    async fn restore_incoming(&self, vee_id: &str, host: &str, cp: vhi::CheckpointRecord) -> Result<(), IncomingError> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        self.transition(&mut v, VeeState::Recovering, format!("restore {} on {host}", cp.checkpoint_id))?;
        let failed = |call| IncomingError::Host { host: host.into(), call };
        let c = self.hosts.host(host).map_err(failed)?;
        let r = c
            .restore(vhi::RestoreRequest {
                spec: Some(self.networks.spec_of(&v)),
                checkpoint: Some(cp.clone()),
                fence_owner: String::new(),
            })
            .await;
        if let Err(call) = r {
            let _ = c
                .destroy(vhi::DestroyRequest {
                    vee_id: vee_id.into(),
                    remove: true,
                })
                .await;
            return Err(failed(call));
        }
        self.checkpoints
            .record_checkpoint(&mut v, &cp, "restored here", Origin::Primary)
            .await?;
        self.transition(&mut v, VeeState::Running, format!("restored {} on {host}", cp.checkpoint_id))?;
        Ok(())
    }

    /// The primary site no longer wants the VEE here: an incoming
    /// migration is aborted (the VEEH removes what it prepared), or a copy
    /// it recovered elsewhere while this site did not answer is destroyed
    /// (fencing: a VEE never runs in two places).
    pub async fn abort_incoming(&self, vee_id: &str) -> Result<(), IncomingError> {
        let _g = self.lock_vee(vee_id).await;
        let v = self.vee(vee_id)?;
        if let Some(h) = v.host() {
            let failed = |call| IncomingError::Host { host: h.into(), call };
            let c = self.hosts.host(h).map_err(failed)?;
            if v.state == VeeState::Migrating {
                c.abort_incoming(vhi::AbortIncomingRequest { vee_id: vee_id.into() })
                    .await
                    .map_err(failed)?;
            } else {
                c.destroy(vhi::DestroyRequest {
                    vee_id: vee_id.into(),
                    remove: true,
                })
                .await
                .map_err(failed)?;
                tracing::warn!(vee = %vee_id, host = %h, "the primary site took this VEE back: destroyed the copy here");
            }
        }
        drop(_g);
        self.drop_incoming(vee_id).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
