//! Migration proposals, operator approval and live migration of VEEs
//! between hosts of the site and across sites (DESIGN.md §7; E Ch 3.4;
//! B §2).
//!
//! A proposal names the VEE, where it is, where it should go and why.
//! The site's policy runs some at once (`migration.auto_approve` reasons);
//! the rest wait for an operator's `approve` or `reject`. Running a
//! migration: the destination prepares (a VEEH of this site, or a peer
//! VEEM's PrepareIncoming with its own admission), the source VEEH migrates
//! live with incremental storage copy, the destination completes. On any
//! failure the destination removes what it prepared and the VEE keeps
//! running where it was: a VEE never runs in two places.

use std::ops::Deref;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use futures::StreamExt;
use interfaces::manifest::MigrationPolicy;
use interfaces::retry::RetryPolicy;
use interfaces::vhi::IncomingTarget;
use interfaces::vhi::{self, MigrateOutRequest};

use crate::core::Core;
use crate::domain::peer::MigrationOutcome;
use crate::error::VeemError;
use crate::model::{Location, MigrationRec, MigrationState, VeeState};
use crate::peers;
use crate::store::Tree;
use crate::workflows::federation::Federation;
use crate::workflows::networks::Networks;
use crate::workflows::site_constraints::SiteConstraints;
use crate::workflows::sla::Sla;
use crate::workflows::spares::Spares;

mod affinity;
mod home;

pub use crate::domain::migration::{Dest, Proposer};

fn location_text(l: &Location) -> String {
    match l {
        Location::Host(h) => format!("host:{h}"),
        Location::Site(s) => format!("site:{s}"),
        Location::Nowhere => "nowhere".into(),
    }
}

/// Migrations (see the module doc): proposals, approval, live migration within the site and to peers, homecoming, affinity sets moved as one. Calls the core, federation, networks, site constraints, the SLA and spares.
pub struct Migration {
    core: Arc<Core>,
    pub(crate) federation: Arc<Federation>,
    pub(crate) networks: Arc<Networks>,
    pub(crate) site_constraints: Arc<SiteConstraints>,
    pub(crate) sla: Arc<Sla>,
    pub(crate) spares: Arc<Spares>,
}

impl Deref for Migration {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Migration {
    pub fn new(
        core: Arc<Core>,
        federation: Arc<Federation>,
        networks: Arc<Networks>,
        site_constraints: Arc<SiteConstraints>,
        sla: Arc<Sla>,
        spares: Arc<Spares>,
    ) -> Self {
        Self {
            core,
            federation,
            networks,
            site_constraints,
            sla,
            spares,
        }
    }
}

impl Migration {
    pub fn migration(&self, id: &str) -> Result<MigrationRec> {
        self.store
            .get(Tree::Migrations, id)?
            .ok_or_else(|| VeemError::not_found("migration", id).into())
    }

    fn save_migration(&self, m: &MigrationRec) -> Result<()> {
        self.store.put(Tree::Migrations, &m.id, m)?;
        self.migration_event(m);
        Ok(())
    }

    /// A `migration` event, under the VEE's service so that its provider
    /// follows it too (redacted: `crate::api::visibility`).
    fn migration_event(&self, m: &MigrationRec) {
        let service = self.vee(&m.vee_id).map(|v| v.service_id).unwrap_or_default();
        self.event(
            &m.vee_id,
            &service,
            "migration",
            format!("{} {} -> {}: {}", m.id, m.from, m.to, m.state),
        );
    }

    /// Records a proposal to move `vee_id` to `to`; runs it at once when
    /// the planner proposed it and the site policy auto-approves `reason`
    /// (a caller's reason never does: [`Proposer::may_auto_approve`]).
    /// Errors when the target is unknown or the same place, when the
    /// planner cannot keep the VEE's reservation on the target host for the
    /// rest of its window (capacity in every slot, compatibility profile,
    /// the service's constraints; the planner's reason is in the error),
    /// when the VEE's migration policy forbids it (`none`: never moved;
    /// `site`: no peer sites), or when the VEE already has an open
    /// (proposed, approved or running) migration.
    pub fn propose(self: &Arc<Self>, vee_id: &str, to: Dest, reason: &str, by: Proposer) -> Result<MigrationRec> {
        let v = self.vee(vee_id)?;
        if !matches!(v.state, VeeState::Running) {
            bail!("VEE {vee_id} is {}, only running VEEs migrate", v.state.as_str());
        }
        if v.migration_policy == MigrationPolicy::None {
            bail!("VEE {vee_id}: its SLA's migration policy is \"none\" (never moved)");
        }
        self.close_stale_proposals()?;
        let open = self
            .store
            .list::<MigrationRec>(Tree::Migrations)?
            .into_iter()
            .find(|m| m.vee_id == vee_id && m.state.is_open());
        if let Some(m) = open {
            bail!("VEE {vee_id} already has migration {} ({}, to {})", m.id, m.state, m.to);
        }
        match &to {
            Dest::Host(h) => {
                if !self.hosts.names().contains(h) {
                    return Err(VeemError::field("to_host", format!("{h:?} is not a host of site {}", self.cfg.site_id)).into());
                }
                if v.location == Location::Host(h.clone()) {
                    bail!("VEE {vee_id} already runs on {h}");
                }
                if v.host().is_some() {
                    let now = self.now_slot();
                    let mut plan = self.planner.lock().unwrap().clone();
                    if let Err(e) = plan.move_vee(vee_id, h, now) {
                        let set = self.affinity_set_of(vee_id, &to);
                        if set.len() > 1 {
                            return self.propose_set(&v, set, to, reason, by);
                        }
                        bail!("VEE {vee_id} cannot move to {h}: {e}");
                    }
                }
            }
            Dest::ForPrimary(_) => return Err(VeemError::field("to", "site-of targets are chosen by a primary site").into()),
            Dest::Site(s) => {
                if s != &self.cfg.site_id {
                    peers::peer(&self.cfg, s).map_err(|e| VeemError::field("to_site", e))?;
                    if !v.nics.is_empty() && self.networks.overlay(s).is_none() {
                        return Err(VeemError::field(
                            "to_site",
                            format!(
                                "VEE {vee_id} is on service networks and the framework agreement with {s} has no overlay ([peers.overlay]) to stretch them there"
                            ),
                        )
                        .into());
                    }
                    let others = self.vees_where(|o| o.service_id == v.service_id);
                    if !v.migration_policy.allows_peer_site() {
                        bail!(
                            "VEE {vee_id}: its SLA's migration policy is \"{}\", not federation",
                            v.migration_policy.as_str()
                        );
                    }
                    if let Some(why) = self
                        .site_constraints
                        .site_refusal(&v, s, &others, &self.site_constraints.constraints_of(&v))
                    {
                        let set = self.affinity_set_of(vee_id, &to);
                        if set.len() > 1 {
                            return self.propose_set(&v, set, to, reason, by);
                        }
                        bail!("VEE {vee_id} cannot move to {s}: {why}");
                    }
                }
                if v.location == Location::Site(s.clone()) {
                    bail!("VEE {vee_id} already runs at {s}");
                }
            }
        }
        let auto = by.may_auto_approve() && self.cfg.migration.auto_approve.iter().any(|r| r == reason);
        let mut m = MigrationRec {
            id: uuid::Uuid::new_v4().to_string(),
            vee_id: vee_id.into(),
            from: location_text(&v.location),
            to,
            reason: reason.into(),
            state: MigrationState::Proposed,
            decided_by: String::new(),
            detail: format!("proposed by {by}"),
            total_ms: 0,
            downtime_ms: 0,
            created_ms: self.clock.now_ms(),
            set: vec![],
        };
        self.save_migration(&m)?;
        if auto {
            m.advance(MigrationState::Approved)?;
            m.decided_by = "site policy".into();
            self.save_migration(&m)?;
            self.spawn_migration(&m.id);
        }
        Ok(m)
    }

    /// Proposes moving `vee_id` without naming where: the site picks the
    /// first host not failed, in configuration order, that the planner can keep
    /// the VEE on for the rest of its window ([`Planner::move_vee`]:
    /// capacity in every slot, profile, constraints). This is how a service
    /// provider asks for a move: it never names hosts or sites (location
    /// unawareness, E §3.4). Errors as [`Migration::propose`] does, and when no
    /// other host can take the VEE.
    ///
    /// [`Planner::move_vee`]: crate::planner::Planner::move_vee
    pub fn propose_anywhere(self: &Arc<Self>, vee_id: &str, reason: &str, by: Proposer) -> Result<MigrationRec> {
        let v = self.vee(vee_id)?;
        let Some(from) = v.host() else {
            bail!("VEE {vee_id} does not run on a host of this site; an operator moves it")
        };
        let now = self.now_slot();
        let plan = self.planner.lock().unwrap().clone();
        // The VEE and what host affinity binds to it go together.
        let set = plan.affinity_set(vee_id, interfaces::manifest::ConstraintLevel::Host);
        let to = self
            .hosts
            .names()
            .into_iter()
            .filter(|h| h != from && self.hosts.health(h) != crate::hosts::Health::Failed)
            .find(|h| plan.clone().move_set(&set, h, now).is_ok())
            .ok_or_else(|| anyhow!("VEE {vee_id}: no other host of the site can take it for the rest of its window"))?;
        self.propose(vee_id, Dest::Host(to), reason, by)
    }

    /// Closes the proposals whose premise is gone, each rejected by the
    /// VEEM with the reason: the VEE no longer runs where the proposal
    /// found it (recovered elsewhere, moved, stopped, gone), or the host it
    /// was to go to has failed. Such a proposal would otherwise stay open
    /// and block every later migration of the VEE. Returns how many.
    pub fn close_stale_proposals(&self) -> Result<usize> {
        let mut closed = 0;
        for mut m in self.store.list::<MigrationRec>(Tree::Migrations)? {
            if m.state != MigrationState::Proposed {
                continue;
            }
            let why = match self.vee(&m.vee_id) {
                Err(_) => "the VEE is gone".to_string(),
                Ok(v) if v.state != VeeState::Running => format!("the VEE is {}", v.state.as_str()),
                Ok(v) if location_text(&v.location) != m.from => {
                    format!("the VEE is at {}, not {}", location_text(&v.location), m.from)
                }
                Ok(_) => match &m.to {
                    Dest::Host(h) if self.hosts.health(h) == crate::hosts::Health::Failed => format!("host {h} failed"),
                    _ => continue,
                },
            };
            m.advance(MigrationState::Rejected)?;
            m.decided_by = "veem".into();
            m.detail = format!("closed: its premise is gone ({why})");
            self.save_migration(&m)?;
            self.migration_event(&m);
            closed += 1;
        }
        Ok(closed)
    }

    /// An operator approves a proposal: it runs now. A proposal whose
    /// premise is gone is closed instead ([`Migration::close_stale_proposals`]).
    pub fn approve(self: &Arc<Self>, id: &str, by: &str) -> Result<MigrationRec> {
        self.close_stale_proposals()?;
        let mut m = self.migration(id)?;
        if m.state != MigrationState::Proposed {
            bail!("migration {id} is {}, not proposed ({})", m.state, m.detail);
        }
        if !m.set.is_empty() {
            self.decide_set(&m.set, true, by, "")?;
            self.spawn_set(m.set);
            return self.migration(id);
        }
        m.advance(MigrationState::Approved)?;
        m.decided_by = by.into();
        self.save_migration(&m)?;
        self.spawn_migration(id);
        Ok(m)
    }

    /// An operator rejects a proposal: nothing moves.
    pub fn reject(&self, id: &str, by: &str, reason: &str) -> Result<MigrationRec> {
        if reason.trim().is_empty() {
            return Err(VeemError::field("reason", "say why the migration is rejected").into());
        }
        let mut m = self.migration(id)?;
        if m.state != MigrationState::Proposed {
            bail!("migration {id} is {}, not proposed", m.state);
        }
        if !m.set.is_empty() {
            self.decide_set(&m.set, false, by, reason)?;
            return self.migration(id);
        }
        m.advance(MigrationState::Rejected)?;
        m.decided_by = by.into();
        m.detail = reason.into();
        self.save_migration(&m)?;
        Ok(m)
    }

    /// Operator's drain: proposes moving every running VEE off `host`
    /// (reason `maintenance`), each to the first up host, in configuration
    /// order, where the planner can move it; the moves are tried on one copy
    /// of the planner so that they add up (two VEEs are never sent to a
    /// host with room for one). A VEE that cannot move, or already has an
    /// open migration, is skipped with a warning. Errors when `host` is not
    /// a host of this site.
    pub fn drain(self: &Arc<Self>, host: &str) -> Result<Vec<MigrationRec>> {
        if !self.hosts.names().iter().any(|h| h == host) {
            return Err(VeemError::field("host", format!("{host:?} is not a host of site {}", self.cfg.site_id)).into());
        }
        let targets: Vec<String> = self
            .hosts
            .names()
            .into_iter()
            .filter(|h| h != host && self.hosts.health(h) == crate::hosts::Health::Up)
            .collect();
        let now = self.now_slot();
        let mut plan = self.planner.lock().unwrap().clone();
        let mut out = Vec::new();
        for v in self.vees_where(|v| v.host() == Some(host) && v.state == VeeState::Running) {
            let Some(t) = targets.iter().find(|h| plan.move_vee(&v.id, h, now).is_ok()) else {
                tracing::warn!(vee = %v.id, host, "drain: no other host can take this VEE");
                continue;
            };
            match self.propose(&v.id, Dest::Host(t.clone()), "maintenance", Proposer::Operator) {
                Ok(m) => out.push(m),
                Err(e) => tracing::warn!(vee = %v.id, host, error = %format!("{e:#}"), "drain: not proposed"),
            }
        }
        Ok(out)
    }

    pub fn spawn_migration(self: &Arc<Self>, id: &str) {
        let veem = self.clone();
        let id = id.to_string();
        self.spawn(async move {
            if let Err(e) = veem.run_migration(&id).await {
                tracing::warn!(migration = %id, error = %format!("{e:#}"), "migration failed");
            }
        });
    }

    /// Runs an approved migration to its end (done or failed).
    pub async fn run_migration(&self, id: &str) -> Result<()> {
        let mut m = self.migration(id)?;
        let _g = self.lock_vee(&m.vee_id).await;
        let mut v = self.vee(&m.vee_id)?;
        if m.state != MigrationState::Approved {
            bail!("migration {id} is {}", m.state);
        }
        if v.state != VeeState::Running {
            m.advance(MigrationState::Failed)?;
            m.detail = format!("VEE is {}, not running", v.state.as_str());
            self.save_migration(&m)?;
            bail!("{}", m.detail);
        }
        let dest = m.to.clone();
        // The migration runs and the VEE is migrating: one write.
        m.advance(MigrationState::Running)?;
        self.transition_committing(&mut v, VeeState::Migrating, format!("to {}", m.to), migration_write(&m)?)?;
        let started = self.clock.now_ms();
        // A VEE coming home from a peer site needs a local reservation again.
        let homecoming = matches!((&v.location, &dest), (Location::Site(_), Dest::Host(_)));
        if let (true, Dest::Host(h)) = (homecoming, &dest) {
            if let Err(e) = self.reserve_home(&v, h) {
                m.advance(MigrationState::Failed)?;
                m.detail = format!("{e:#}");
                self.save_migration(&m)?;
                self.transition(&mut v, VeeState::Running, "migration failed; stays where it is")?;
                return Err(e);
            }
        }
        // 1. The destination prepares.
        let prepared: Result<IncomingTarget> = match &dest {
            Dest::Host(h) => {
                async {
                    Ok(self
                        .hosts
                        .vhi(h)?
                        .prepare_incoming(tonic::Request::new(vhi::PrepareIncomingRequest {
                            spec: Some(self.networks.spec_of(&v)),
                        }))
                        .await
                        .map_err(|s| anyhow!("{h}: {}", s.message()))?
                        .into_inner())
                }
                .await
            }
            Dest::Site(s) if s == &self.cfg.site_id => Err(anyhow!("migrating home needs a destination host: use --to-host")),
            Dest::Site(s) => {
                self.federation
                    .send_incoming(s, &v, crate::domain::peer::Incoming::Migration, self.networks.spec_of(&v))
                    .await
            }
            Dest::ForPrimary(s) => Err(anyhow!("site-of:{s} is not a destination this site can choose")),
        };
        let outcome = match prepared {
            Err(e) => Err(e.context("destination refused")),
            Ok(target) => {
                // 2. The source sends the VEE.
                let sent = match v.location.clone() {
                    Location::Host(src) => self.migrate_out(&src, &v.id, target, v.max_downtime_ms, &mut m).await,
                    Location::Site(src) => match self.peer(&src)?.send_vee(&v.id, target).await {
                        Ok(MigrationOutcome::Done { total_ms, downtime_ms }) => Ok((total_ms, downtime_ms)),
                        Ok(MigrationOutcome::NotDone { detail, .. }) => Err(anyhow!("site {src}: {detail}")),
                        Err(s) => Err(anyhow!("site {src}: {}", s.message())),
                    },
                    Location::Nowhere => Err(anyhow!("VEE is not placed")),
                };
                // 3. The destination completes, or removes what it prepared.
                match sent {
                    Ok(times) => self.complete_at(&dest, &v.id).await.map(|_| times),
                    Err(e) => {
                        if let Err(a) = self.abort_at(&dest, &v.id).await {
                            tracing::warn!(error = %a, "destination cleanup failed");
                        }
                        Err(e)
                    }
                }
            }
        };
        // The networks were stretched to the destination site for the
        // switch-over; from now on the VEE's location says where they go.
        if matches!(dest, Dest::Site(_)) {
            self.networks.stretching.lock().unwrap().remove(&v.id);
        }
        match outcome {
            Ok((total_ms, downtime_ms)) => {
                let old = v.location.clone();
                let mut used_spare = None;
                if let (Location::Host(_), Dest::Host(h)) = (&old, &dest) {
                    let now = self.now_slot();
                    // The rest of its affinity set follows (crate::workflows::migration::affinity).
                    let later = self.set_still_to_move(&m);
                    let moved = self.planner.lock().unwrap().move_vee_with(&v.id, h, now, &later);
                    if let Err(e) = moved {
                        tracing::warn!(error = %e, "planner could not move the reservation");
                    }
                } else if let (Location::Host(_), Dest::Site(s)) = (&old, &dest) {
                    used_spare = self
                        .planner
                        .lock()
                        .unwrap()
                        .release_vee_to_site(&v.id, s)
                        .ok()
                        .flatten()
                        .map(|n| (s.clone(), n));
                } else if matches!(old, Location::Host(_)) {
                    let _ = self.planner.lock().unwrap().release_vee(&v.id);
                }
                v.location = match &dest {
                    Dest::Host(h) => Location::Host(h.clone()),
                    Dest::Site(s) | Dest::ForPrimary(s) => Location::Site(s.clone()),
                };
                m.advance(MigrationState::Done)?;
                m.total_ms = if total_ms > 0 { total_ms } else { self.clock.since_ms(started) };
                m.downtime_ms = downtime_ms;
                m.detail = format!("{} ms, {} ms downtime", m.total_ms, downtime_ms);
                // The reservation's move, the VEE, the migration and a
                // downtime beyond the SLA's bound: one commit.
                let viols: Vec<_> = self
                    .sla
                    .downtime_violation(&v, &format!("migration {}", m.id), downtime_ms, self.clock.now_ms())
                    .into_iter()
                    .collect();
                let mut w = migration_write(&m)?;
                crate::workflows::sla::Sla::put_violations(&mut w, &viols)?;
                self.transition_committing(&mut v, VeeState::Running, format!("migrated to {}", m.to), w)?;
                self.migration_event(&m);
                self.sla.violation_events(&viols);
                self.networks.sync_networks(&v.service_id).await;
                if let Some((site, need)) = used_spare {
                    self.spares.replace_used_spare(&v.id, &site, need).await?;
                }
                Ok(())
            }
            Err(e) => {
                if homecoming {
                    let _ = self.planner.lock().unwrap().release_service(&format!("home-{}", v.id));
                }
                m.advance(MigrationState::Failed)?;
                m.detail = format!("{e:#}");
                let stays = format!("migration failed; stays at {}", m.from);
                self.transition_committing(&mut v, VeeState::Running, stays, migration_write(&m)?)?;
                self.migration_event(&m);
                // Unstretched from a destination that never got the VEE.
                self.networks.sync_networks(&v.service_id).await;
                Err(e)
            }
        }
    }

    /// Live-migrates a VEE off local host `src` to `target`, recording
    /// progress in `m.detail`. Returns (total ms, downtime ms). Errors when
    /// the source VEEH reports a failure, or when `src` is declared failed
    /// (missed heartbeats) while the VEEM waits for it: a hung source must
    /// not hold the VEE, whose recovery waits for this migration to end.
    async fn migrate_out(
        &self,
        src: &str,
        vee_id: &str,
        target: vhi::IncomingTarget,
        max_downtime_ms: u64,
        m: &mut MigrationRec,
    ) -> Result<(u64, u64)> {
        let req = MigrateOutRequest {
            vee_id: vee_id.into(),
            target: Some(target),
            max_downtime: interfaces::time::duration_ms(max_downtime_ms),
            bandwidth_mib_s: self.cfg.migration.bandwidth_mib_s,
        };
        let mut stream = self
            .hosts
            .vhi(src)?
            .migrate_out(tonic::Request::new(req))
            .await
            .map_err(|s| anyhow!("{src}: {}", s.message()))?
            .into_inner();
        let mut last = None;
        loop {
            let next = tokio::select! {
                next = stream.next() => next,
                _ = self.clock.sleep(std::time::Duration::from_secs(1)) => {
                    if self.hosts.health(src) == crate::hosts::Health::Failed {
                        bail!("{src}: the source host failed during the migration (missed heartbeats)");
                    }
                    continue;
                }
            };
            let Some(p) = next else { break };
            let p = p.map_err(|s| anyhow!("{src}: {}", s.message()))?;
            if p.phase() == vhi::MigrationPhase::Copying {
                m.detail = format!("copying {} / {} MiB", p.data_processed >> 20, p.data_total >> 20);
                let _ = self.store.put(Tree::Migrations, &m.id, m);
            }
            last = Some(p);
        }
        let p = last.ok_or_else(|| anyhow!("{src}: migration stream ended without a result"))?;
        match p.phase() {
            vhi::MigrationPhase::Done => Ok((
                interfaces::time::ms_of_duration(&p.total),
                interfaces::time::ms_of_duration(&p.downtime),
            )),
            _ => Err(anyhow!("{src}: {}", p.error)),
        }
    }

    pub(crate) async fn complete_at(&self, dest: &Dest, vee_id: &str) -> Result<()> {
        match dest {
            Dest::Host(h) => {
                self.hosts
                    .vhi(h)?
                    .complete_incoming(tonic::Request::new(vhi::CompleteIncomingRequest { vee_id: vee_id.into() }))
                    .await
                    .map_err(|s| anyhow!("{h}: {}", s.message()))?;
            }
            Dest::Site(s) => {
                self.peer(s)?
                    .complete_incoming(vee_id)
                    .await
                    .map_err(|e| anyhow!("{s}: {}", e.message()))?;
            }
            Dest::ForPrimary(s) => bail!("the destination belongs to primary site {s}"),
        }
        Ok(())
    }

    /// Tells the destination to remove what it prepared; retried three
    /// times a second apart (the destination may be busy or restarting).
    pub(crate) async fn abort_at(&self, dest: &Dest, vee_id: &str) -> Result<()> {
        RetryPolicy::fixed(3, std::time::Duration::from_secs(1))
            .run(|| self.abort_once(dest, vee_id))
            .await
    }

    async fn abort_once(&self, dest: &Dest, vee_id: &str) -> Result<()> {
        match dest {
            Dest::Host(h) => {
                self.hosts
                    .vhi(h)?
                    .abort_incoming(tonic::Request::new(vhi::AbortIncomingRequest { vee_id: vee_id.into() }))
                    .await
                    .map_err(|s| anyhow!("{h}: {}", s.message()))?;
            }
            Dest::Site(s) => {
                self.peer(s)?
                    .abort_incoming(vee_id)
                    .await
                    .map_err(|e| anyhow!("{s}: {}", e.message()))?;
            }
            Dest::ForPrimary(s) => bail!("the destination belongs to primary site {s}"),
        }
        Ok(())
    }
}

/// The write of migration record `m` (for a commit with other records).
fn migration_write(m: &MigrationRec) -> Result<crate::store::Writes> {
    let mut w = crate::store::Writes::default();
    w.put(Tree::Migrations, &m.id, m)?;
    Ok(w)
}

#[cfg(test)]
mod tests;
