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
//! running where it was: a VEE never runs in two places. A send that
//! failed on the caller's side while the VEE arrived is completed, not
//! aborted (`arrival`).

use std::ops::Deref;
use std::sync::Arc;

use futures::StreamExt;
use interfaces::retry::RetryPolicy;
use interfaces::vhi::IncomingTarget;
use interfaces::vhi::{self, MigrateOutRequest};

use crate::core::Core;
use crate::domain::peer::MigrationOutcome;
use crate::error::VeemError;
use crate::model::{Location, MigrationRec, MigrationState, VeeRec, VeeState};
use crate::steps::networks::Networks;
use crate::steps::site_constraints::SiteConstraints;
use crate::steps::sla::Sla;
use crate::steps::spares::Spares;
use crate::store::Tree;
use crate::workflows::federation::Federation;

/// Returns [`MigrationError::Refused`] with the formatted reason (in
/// scope in the submodules below).
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err($crate::workflows::migration::MigrationError::Refused(format!($($arg)*)))
    };
}

mod affinity;
mod arrival;
mod decide;
mod error;
mod home;
mod settle;

pub use error::{LegError, MigrationError, RunError};

pub(crate) use settle::Running;

pub use crate::domain::migration::{Dest, Proposer};
pub use home::WithdrawError;

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
    pub fn migration(&self, id: &str) -> Result<MigrationRec, MigrationError> {
        Ok(self
            .store
            .get(Tree::Migrations, id)?
            .ok_or_else(|| VeemError::not_found("migration", id))?)
    }

    fn save_migration(&self, m: &MigrationRec) -> Result<(), crate::store::StoreError> {
        self.store.put(Tree::Migrations, &m.id, m)?;
        self.migration_event(m);
        Ok(())
    }

    /// A `migration` event, under the VEE's service so that its provider
    /// follows it too (redacted: `crate::api::visibility`).
    fn migration_event(&self, m: &MigrationRec) {
        if matches!(m.state, MigrationState::Done | MigrationState::Failed) {
            self.metrics.migration(
                &m.vee_id,
                matches!(m.to, Dest::Host(_)),
                m.state == MigrationState::Done,
                m.total_ms as f64 / 1000.0,
                m.downtime_ms as f64 / 1000.0,
            );
        }
        let service = self.vee(&m.vee_id).map(|v| v.service_id).unwrap_or_default();
        self.event(
            &m.vee_id,
            &service,
            "migration",
            format!("{} {} -> {}: {}", m.id, m.from, m.to, m.state),
        );
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

    /// Starts the approved migrations that no task runs (a VEEM restart
    /// or takeover came between their approval and their start), alone or
    /// as the rest of their affinity set, in the set's order; each checks
    /// that its VEE still runs. Returns how many were started. Errors: the
    /// store's.
    pub(crate) fn resume_approved(self: &Arc<Self>) -> Result<usize, MigrationError> {
        let approved: Vec<MigrationRec> = self
            .store
            .list::<MigrationRec>(Tree::Migrations)?
            .into_iter()
            .filter(|m| m.state == MigrationState::Approved)
            .collect();
        let mut sets_started = std::collections::HashSet::new();
        for m in &approved {
            self.event(&m.vee_id, "", "reconcile", format!("migration {}: approved, started", m.id));
            if m.set.is_empty() {
                self.spawn_migration(&m.id);
            } else if sets_started.insert(m.set.clone()) {
                let rest = m.set.iter().filter(|id| approved.iter().any(|a| &a.id == *id)).cloned().collect();
                self.spawn_set(rest);
            }
        }
        Ok(approved.len())
    }

    /// Runs an approved migration to its end (done or failed).
    pub async fn run_migration(&self, id: &str) -> Result<(), RunError> {
        let mut m = self.migration(id)?;
        let _g = self.lock_vee(&m.vee_id).await;
        let mut v = self.vee(&m.vee_id)?;
        if m.state != MigrationState::Approved {
            return Err(RunError::NotApproved { id: id.into(), state: m.state });
        }
        if v.state != VeeState::Running {
            let e = RunError::VeeNotRunning {
                state: v.state.as_str().into(),
            };
            m.advance(MigrationState::Failed)?;
            m.detail = e.to_string();
            self.save_migration(&m)?;
            return Err(e);
        }
        let dest = m.to.clone();
        // The migration runs and the VEE is migrating: one write.
        m.advance(MigrationState::Running)?;
        self.transition_committing(&mut v, VeeState::Migrating, format!("to {}", m.to), migration_write(&m)?)?;
        fail::fail_point!("migration-after-start");
        let started = self.clock.now_ms();
        // A VEE coming home from a peer site needs a local reservation again.
        let homecoming = matches!((&v.location, &dest), (Location::Site(_), Dest::Host(_)));
        if let (true, Dest::Host(h)) = (homecoming, &dest) {
            if let Err(e) = self.reserve_home(&v, h) {
                m.advance(MigrationState::Failed)?;
                m.detail = format!("{e:#}");
                self.save_migration(&m)?;
                self.transition(&mut v, VeeState::Running, "migration failed; stays where it is")?;
                return Err(e.into());
            }
        }
        // 1. The destination prepares.
        let prepared: Result<IncomingTarget, LegError> = match &dest {
            Dest::Host(h) => {
                async {
                    self.hosts
                        .host(h)?
                        .prepare_incoming(vhi::PrepareIncomingRequest {
                            spec: Some(self.networks.spec_of(&v)),
                        })
                        .await
                }
                .await
                .map_err(LegError::call(h))
            }
            Dest::Site(s) if s == &self.cfg.site_id => Err(LegError::NotADestination(
                "migrating home needs a destination host: use --to-host".into(),
            )),
            Dest::Site(s) => self
                .federation
                .send_incoming(s, &v, crate::domain::peer::Incoming::Migration, self.networks.spec_of(&v))
                .await
                .map_err(LegError::from),
            Dest::ForPrimary(s) => Err(LegError::NotADestination(format!(
                "site-of:{s} is not a destination this site can choose"
            ))),
        };
        let outcome: Result<(u64, u64), RunError> = match prepared {
            Err(e) => Err(RunError::Prepare(e)),
            Ok(target) => {
                fail::fail_point!("migration-after-prepare");
                // 2. The source sends the VEE.
                let sent = match v.location.clone() {
                    Location::Host(src) => self.migrate_out(&src, &v.id, target, v.max_downtime_ms, &mut m).await,
                    Location::Site(src) => {
                        let who = format!("site {src}");
                        match self.peer(&src) {
                            Ok(p) => match p.send_vee(&v.id, target).await {
                                Ok(MigrationOutcome::Done { total_ms, downtime_ms }) => Ok((total_ms, downtime_ms)),
                                Ok(MigrationOutcome::NotDone { detail, .. }) => Err(LegError::Failed { who, detail }),
                                Err(call) => Err(LegError::Call { who, call }),
                            },
                            Err(call) => Err(LegError::Call { who, call }),
                        }
                    }
                    Location::Nowhere => Err(LegError::NotADestination("VEE is not placed".into())),
                };
                // 3. The destination completes, or removes what it prepared.
                if sent.is_ok() {
                    fail::fail_point!("migration-after-send");
                }
                match sent {
                    Ok(times) => {
                        let completed = self.complete_after_send(&dest, &v.id).await.map(|_| times).map_err(RunError::from);
                        if completed.is_ok() {
                            fail::fail_point!("migration-after-complete");
                        }
                        completed
                    }
                    // The caller's side failed; the hypervisor did not
                    // (crate::workflows::migration::arrival).
                    Err(e) if self.arrived(&dest, &v.id).await => {
                        tracing::warn!(vee = %v.id, error = %format!("{e:#}"), "the send failed but the VEE runs at its destination: completed there");
                        self.complete_at(&dest, &v.id).await.map(|_| (0, 0)).map_err(RunError::from)
                    }
                    Err(e) => {
                        if let Err(a) = self.abort_at(&dest, &v.id).await {
                            tracing::warn!(error = %a, "destination cleanup failed");
                        }
                        Err(e.into())
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
                let total_ms = if total_ms > 0 { total_ms } else { self.clock.since_ms(started) };
                Ok(self.record_done(&mut m, &mut v, total_ms, downtime_ms).await?)
            }
            // Sent, not taken: neither where it was nor done; the leader
            // settles it (crate::workflows::migration::settle).
            Err(e @ RunError::NotTaken(_)) => {
                self.event(&v.id, &v.service_id, "migration", format!("{}: {e:#}", m.id));
                Err(e)
            }
            Err(e) => {
                self.record_failed(&mut m, &mut v, format!("{e:#}"), homecoming).await?;
                Err(e)
            }
        }
    }

    /// Records migration `m` of `v` done, the VEE running at `m.to`: its
    /// reservation moved with it (within the site, the rest of its affinity
    /// set following), released (to a peer site) or kept (home from a
    /// peer, reserved when it started), the VEE, the migration and a
    /// downtime beyond the SLA's bound in one commit; then its networks
    /// follow it and a peer spare it used is replaced. The caller holds
    /// the VEE's lock. Errors: the store's.
    pub(crate) async fn record_done(&self, m: &mut MigrationRec, v: &mut VeeRec, total_ms: u64, downtime_ms: u64) -> Result<(), MigrationError> {
        let dest = m.to.clone();
        let old = v.location.clone();
        let mut used_spare = None;
        if let (Location::Host(_), Dest::Host(h)) = (&old, &dest) {
            let now = self.now_slot();
            // The rest of its affinity set follows (crate::workflows::migration::affinity).
            let later = self.set_still_to_move(m);
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
        m.total_ms = total_ms;
        m.downtime_ms = downtime_ms;
        m.detail = format!("{} ms, {} ms downtime", m.total_ms, downtime_ms);
        // The reservation's move, the VEE, the migration and a
        // downtime beyond the SLA's bound: one commit.
        let viols: Vec<_> = self
            .sla
            .downtime_violation(v, &format!("migration {}", m.id), downtime_ms, self.clock.now_ms())
            .into_iter()
            .collect();
        let mut w = migration_write(m)?;
        crate::steps::sla::Sla::put_violations(&mut w, &viols)?;
        let steps = running_again(v, format!("migrated to {}", m.to));
        self.commit_transitions(&mut [(v, steps)], w)?;
        self.migration_event(m);
        self.sla.violation_events(&viols);
        self.networks.sync_networks(&v.service_id).await;
        if let Some((site, need)) = used_spare {
            self.spares.replace_used_spare(&v.id, &site, need).await?;
        }
        Ok(())
    }

    /// Records migration `m` of `v` failed because `detail`: the VEE runs
    /// on where it was (a homecoming's local reservation released), the
    /// VEE and the migration in one commit; its networks unstretched from
    /// a destination that never got it. The caller holds the VEE's lock.
    /// Errors: the store's.
    pub(crate) async fn record_failed(&self, m: &mut MigrationRec, v: &mut VeeRec, detail: String, homecoming: bool) -> Result<(), MigrationError> {
        if homecoming {
            let _ = self.planner.lock().unwrap().release_service(&format!("home-{}", v.id));
        }
        m.advance(MigrationState::Failed)?;
        m.detail = detail;
        let steps = running_again(v, format!("migration failed; stays at {}", m.from));
        self.commit_transitions(&mut [(v, steps)], migration_write(m)?)?;
        self.migration_event(m);
        self.networks.sync_networks(&v.service_id).await;
        Ok(())
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
    ) -> Result<(u64, u64), LegError> {
        let req = MigrateOutRequest {
            vee_id: vee_id.into(),
            target: Some(target),
            max_downtime: interfaces::time::duration_ms(max_downtime_ms),
            bandwidth_mib_s: self.cfg.migration.bandwidth_mib_s,
        };
        let mut stream = async { self.hosts.host(src)?.migrate_out(req).await }
            .await
            .map_err(LegError::call(src))?;
        let mut last = None;
        loop {
            let next = tokio::select! {
                next = stream.next() => next,
                _ = self.clock.sleep(std::time::Duration::from_secs(1)) => {
                    if self.hosts.health(src) == crate::hosts::Health::Failed {
                        return Err(LegError::SourceFailed { src: src.into() });
                    }
                    continue;
                }
            };
            let Some(p) = next else { break };
            let p = p.map_err(LegError::call(src))?;
            if p.phase() == vhi::MigrationPhase::Copying {
                m.detail = format!("copying {} / {} MiB", p.data_processed >> 20, p.data_total >> 20);
                let _ = self.store.put(Tree::Migrations, &m.id, m);
            }
            last = Some(p);
        }
        let p = last.ok_or_else(|| LegError::Failed {
            who: src.into(),
            detail: "migration stream ended without a result".into(),
        })?;
        match p.phase() {
            vhi::MigrationPhase::Done => Ok((
                interfaces::time::ms_of_duration(&p.total),
                interfaces::time::ms_of_duration(&p.downtime),
            )),
            _ => Err(LegError::Failed {
                who: src.into(),
                detail: p.error,
            }),
        }
    }

    pub(crate) async fn complete_at(&self, dest: &Dest, vee_id: &str) -> Result<(), LegError> {
        match dest {
            Dest::Host(h) => async {
                self.hosts
                    .host(h)?
                    .complete_incoming(vhi::CompleteIncomingRequest { vee_id: vee_id.into() })
                    .await
            }
            .await
            .map(drop)
            .map_err(LegError::call(h)),
            Dest::Site(s) => async { self.peer(s)?.complete_incoming(vee_id).await }
                .await
                .map(drop)
                .map_err(LegError::call(s)),
            Dest::ForPrimary(s) => Err(LegError::NotADestination(format!("the destination belongs to primary site {s}"))),
        }
    }

    /// Tells the destination to remove what it prepared; retried three
    /// times a second apart (the destination may be busy or restarting).
    pub(crate) async fn abort_at(&self, dest: &Dest, vee_id: &str) -> Result<(), LegError> {
        let policy = RetryPolicy::fixed(3, std::time::Duration::from_secs(1));
        crate::ports::retry(&*self.clock, policy, || self.abort_once(dest, vee_id)).await
    }

    async fn abort_once(&self, dest: &Dest, vee_id: &str) -> Result<(), LegError> {
        match dest {
            Dest::Host(h) => async {
                self.hosts
                    .host(h)?
                    .abort_incoming(vhi::AbortIncomingRequest { vee_id: vee_id.into() })
                    .await
            }
            .await
            .map(drop)
            .map_err(LegError::call(h)),
            Dest::Site(s) => async { self.peer(s)?.abort_incoming(vee_id).await }
                .await
                .map(drop)
                .map_err(LegError::call(s)),
            Dest::ForPrimary(s) => Err(LegError::NotADestination(format!("the destination belongs to primary site {s}"))),
        }
    }
}

/// The step that makes a migrating VEE `v` running again (none for a VEE
/// in another state: a migration a restart cut short may find it so).
fn running_again(v: &VeeRec, detail: String) -> Vec<(VeeState, String)> {
    if v.state == VeeState::Migrating {
        vec![(VeeState::Running, detail)]
    } else {
        vec![]
    }
}

/// The write of migration record `m` (for a commit with other records).
fn migration_write(m: &MigrationRec) -> Result<crate::store::Writes, crate::store::StoreError> {
    let mut w = crate::store::Writes::default();
    w.put(Tree::Migrations, &m.id, m)?;
    Ok(w)
}

#[cfg(test)]
mod tests;
