//! VEEs coming home from a peer site: the operator's withdraw, the home
//! host that keeps the VEE's host anti-affinity, the local reservation it
//! gets back, and the peer's side of the move (SendVee) (see the parent
//! module for the migration itself).

use std::sync::Arc;

use interfaces::vhi::IncomingTarget;

use super::{Migration, MigrationError};
use super::{Dest, Proposer};
use crate::model::{Location, MigrationRec, MigrationState, VeeState};
use crate::store::Tree;

/// Why a VEE run here for a peer was not given back. Each variant's
/// status is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum WithdrawError {
    /// No such VEE.
    #[error(transparent)]
    Record(#[from] crate::core::RecordError),
    /// The VEE does not run here for a peer site.
    #[error("VEE {vee} does not run here for a peer site: nothing to withdraw")]
    NotForPeer { vee: String },
    /// Its primary site refused, or could not be called.
    #[error("site {site}: {}", .call.message)]
    Primary {
        site: String,
        call: crate::ports::call::CallError,
    },
}

impl Migration {
    /// Reserves local capacity on `host` for a VEE coming home from a peer
    /// site (a one-VEE reservation under the planner service `home-<id>`;
    /// one left from an earlier homecoming, emptied when the VEE left
    /// again, is replaced).
    pub(crate) fn reserve_home(&self, v: &crate::model::VeeRec, host: &str) -> Result<(), MigrationError> {
        use crate::planner::{Admission, ComponentRequest, PeerSpare, Resources, ServiceRequest, SlotRange};
        let clock = self.slots;
        let now = self.now_slot();
        let mut p = self.planner.lock().unwrap();
        let end = clock.slot_ceil(v.window_end_unix.max(self.clock.now() + 60));
        let req = ServiceRequest {
            service_id: format!("home-{}", v.id),
            consumer: v.service_id.clone(),
            guarantee: v.guarantee,
            migration: interfaces::manifest::MigrationPolicy::Federation,
            window: SlotRange::new(now, end.max(now + 1)),
            components: vec![ComponentRequest {
                name: v.component.clone(),
                resources: Resources::new(v.vcpus, v.memory_mib, v.disk_gib),
                profile: None,
                vees: vec![v.id.clone()],
            }],
            constraints: vec![],
            peer_spare: PeerSpare::NoneOffered,
            padding: crate::planner::Padding::NONE,
        };
        // The VEE is at a peer: it holds no local reservation, and an
        // earlier homecoming's service holds nothing of it any more.
        let _ = p.release_service(&req.service_id);
        match p.admit(&req) {
            Admission::Accepted(a) => {
                if a.placements[0].host != host {
                    if let Err(e) = p.move_vee(&v.id, host, now) {
                        let _ = p.release_service(&req.service_id);
                        refuse!("host {host} cannot take VEE {}: {e}", v.id);
                    }
                }
                Ok(())
            }
            other => refuse!(
                "site {} cannot take VEE {} back: {}",
                self.cfg.site_id,
                v.id,
                other.reasons().join("; ")
            ),
        }
    }

    /// A peer site withdraws a VEE it runs for this site: the VEE migrates
    /// home to the host [`Migration::home_host`] picks, without waiting for an
    /// operator. Errors when the VEE does not run at `site` or no local host
    /// can take it.
    pub fn withdrawn(self: &Arc<Self>, site: &str, vee_id: &str) -> Result<MigrationRec, MigrationError> {
        let v = self.vee(vee_id)?;
        if v.location != Location::Site(site.to_string()) {
            refuse!("VEE {vee_id} does not run at {site}");
        }
        let Some(host) = self.home_host(&v) else {
            refuse!("no local host can take VEE {vee_id} back from {site}");
        };
        let mut m = self.propose(
            vee_id,
            Dest::Host(host),
            &format!("withdrawn by {site}"),
            Proposer::PeerSite(site.into()),
        )?;
        if m.state == MigrationState::Proposed {
            m = self.approve(&m.id, &format!("withdrawal by {site}"))?;
        }
        self.event(vee_id, &v.service_id, "withdrawn", format!("{site} gives it back; migrating home"));
        Ok(m)
    }

    /// The operator of the site running VEE `vee_id` for a peer gives it
    /// back to its primary site (Withdraw); the primary site migrates it
    /// away. Errors when the VEE does not run here for a peer, or the
    /// primary site refuses.
    pub async fn withdraw(&self, vee_id: &str) -> Result<(), WithdrawError> {
        let v = self.vee(vee_id)?;
        let Some(primary) = v.for_peer.clone() else {
            return Err(WithdrawError::NotForPeer { vee: vee_id.into() });
        };
        let refused = |call| WithdrawError::Primary {
            site: primary.clone(),
            call,
        };
        self.peer(&primary).map_err(refused)?.withdraw(vee_id).await.map_err(refused)?;
        self.event(vee_id, &v.service_id, "withdrawn", format!("given back to {primary}"));
        Ok(())
    }

    /// The up host of this site that can take VEE `v` now (capacity, and
    /// host-level anti-affinity with the other VEEs of its service), in
    /// configuration order; `None` when there is none.
    pub fn home_host(&self, v: &crate::model::VeeRec) -> Option<String> {
        let apart = self.anti_affine_hosts(v);
        let now = self.now_slot();
        let p = self.planner.lock().unwrap();
        self.hosts.names().into_iter().filter(|h| !apart.contains(h)).find(|h| {
            p.host_down(h).is_none()
                && p.host(h).is_some_and(|hs| {
                    let used = p.host_usage(h, now).unwrap_or_default();
                    crate::planner::Resources::new(v.vcpus, v.memory_mib, v.disk_gib).fits_in(&hs.capacity.saturating_sub(&used))
                })
        })
    }

    /// Hosts that run a VEE of `v`'s service that the manifest's host-level
    /// anti-affinity keeps apart from `v` (E PIII §II scopes: `instance`
    /// covers every pair, `type` only different listed components).
    fn anti_affine_hosts(&self, v: &crate::model::VeeRec) -> Vec<String> {
        use interfaces::manifest::{ConstraintKind, ConstraintLevel, ConstraintScope};
        let Some(terms) = self.terms_of(&v.service_id) else {
            return vec![];
        };
        let vees = self.vees_where(|o| o.service_id == v.service_id);
        let mut out = Vec::new();
        for c in terms
            .constraints
            .iter()
            .filter(|c| c.kind == ConstraintKind::AntiAffinity && c.level == ConstraintLevel::Host)
        {
            if !c.components.contains(&v.component) {
                continue;
            }
            for other in vees
                .iter()
                .filter(|o| o.service_id == v.service_id && o.id != v.id && o.state.is_live())
            {
                let covered =
                    c.components.contains(&other.component) && (c.scope == ConstraintScope::Instance || other.component != v.component);
                if let (true, Some(h)) = (covered, other.host()) {
                    out.push(h.to_string());
                }
            }
        }
        out
    }

    /// Peer side of SendVee: the primary site `from` asks this site to
    /// live-migrate the VEE it runs for it to `target`.
    pub async fn send_vee(&self, from: &str, vee_id: &str, target: IncomingTarget) -> Result<MigrationRec, MigrationError> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        if v.for_peer.as_deref() != Some(from) {
            refuse!("VEE {vee_id} does not run here for {from}");
        }
        let Some(src) = v.host().map(str::to_string) else {
            refuse!("VEE {vee_id} has no host here");
        };
        let mut m = MigrationRec {
            id: uuid::Uuid::new_v4().to_string(),
            vee_id: vee_id.into(),
            from: format!("host:{src}"),
            to: Dest::ForPrimary(from.into()),
            reason: format!("requested by primary site {from}"),
            state: MigrationState::Running,
            decided_by: from.into(),
            detail: String::new(),
            total_ms: 0,
            downtime_ms: 0,
            created_ms: self.clock.now_ms(),
            set: vec![],
        };
        // The VEE migrating and its migration running: one write, so that
        // the next leader finds both after a crash (reconcile completes it
        // where the VEE left, keeps it where it did not).
        self.transition_committing(
            &mut v,
            VeeState::Migrating,
            "sent on by the primary site",
            super::migration_write(&m)?,
        )?;
        match self.migrate_out(&src, vee_id, target, v.max_downtime_ms, &mut m).await {
            Ok((t, d)) => {
                m.advance(MigrationState::Done)?;
                m.total_ms = t;
                m.downtime_ms = d;
                let _ = self.planner.lock().unwrap().release_service(vee_id);
                self.persist_planner()?;
                v.location = Location::Nowhere;
                self.transition(&mut v, VeeState::Terminated, "left for another site")?;
            }
            // The send failed on the caller's side, maybe only there (the
            // source VEEH went away mid-call while libvirt finished the
            // migration): the VEE stays here only if its source still runs
            // it. Gone from it, or the source not answering, the migration
            // stays running for the leader to settle from where the VEE is
            // (`settle`), never "staying" at a source that let it go.
            Err(e) if self.still_at_source(&src, vee_id).await => {
                m.advance(MigrationState::Failed)?;
                m.detail = format!("{e:#}");
                self.transition(&mut v, VeeState::Running, "send failed; stays here")?;
            }
            Err(e) => {
                m.detail = format!("{e:#}; the VEE is not at its source: the leader settles the migration from where it is");
                tracing::warn!(vee = %vee_id, host = %src, error = %format!("{e:#}"), "the send failed and the VEE is not known at its source: left for the settle pass");
            }
        }
        self.store.put(Tree::Migrations, &m.id, &m)?;
        Ok(m)
    }

    /// Whether host `src` runs the domain of `vee_id` and is not sending
    /// it (`migrating_out`: its VEEH's migration may still finish, as
    /// settling a migration a restart cut short also waits for), asked up
    /// to five times a second apart (a VEEH restarting); `false` when it
    /// does not, sends it still, or does not answer.
    async fn still_at_source(&self, src: &str, vee_id: &str) -> bool {
        for _ in 0..5 {
            if let Ok(c) = self.hosts.host(src) {
                if let Ok(list) = c.domains().await {
                    return list.iter().any(|d| d.vee_id == vee_id && !d.migrating_out);
                }
            }
            self.clock.sleep(std::time::Duration::from_secs(1)).await;
        }
        false
    }
}
