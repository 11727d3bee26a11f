//! Recovery from a host failure (H §4; DESIGN.md §6 "Recovery order"; V
//! Fig. 7 for future reservations).
//!
//! The planner picks, for every VEE the failed host ran, a new place in the
//! order of H §4: its enhanced spare, another local host, a host freed by
//! suspending background VEEs, a peer site. The VEEM then restores each VEE
//! from its latest valid checkpoint there (VEEs without one, such as legacy
//! ones, restart from their images). Reservations that start later are
//! remapped with VRM's remapping interval (`crate::remapping`).
//!
//! The VEEs come back side by side (`parallel`): each VEE's recovery below
//! is a task of its own in the core's task set (which a stop drains), and
//! they start in the planner's priority order (guarantee level `full`,
//! then `enhanced`, then the rest, each in the planner's order). A
//! destination host runs at most `[recovery] parallel_per_host` restores at
//! once (default: half its reported vCPUs; `slots`), every attempt on it
//! waiting for a place, first asked first served, and giving its place back
//! before any backoff; a VEE beyond the bound queues. What two recoveries
//! share is kept as before: the planner picks each next host under its
//! lock (no host is booked twice), each VEE has its lock and its own list
//! of hosts that failed it.
//!
//! A restore that fails is not the end of the VEE (a lookup race, a
//! repository hiccup, a host that refuses): it is retried with backoff on
//! the same host (`[recovery] attempts_per_host`, `backoff`; not when the
//! host refuses the checkpoint's compatibility profile), then on the
//! next host the planner offers (excluding every host that failed this
//! recovery), then, where the guarantee level and the migration policy
//! allow, at a peer site under its framework agreement. Only when every
//! option is exhausted, or the outage budget (`[recovery] budget`) is
//! spent, is the VEE recorded unrecovered: an SLA violation with the
//! manifest's penalty whose text lists every attempt and its reason, as the
//! `recovery-attempt` events did while it went on.

use std::ops::Deref;
use std::sync::Arc;

use interfaces::vhi::{DestroyRequest, RestoreRequest};
use tokio::sync::OwnedSemaphorePermit;

use crate::core::Core;
use crate::model::{Location, VeeRec, VeeState, ViolationRec};
use crate::planner::{RecoveryStep, RecoveryTarget};
use crate::steps::background::Background;
use crate::steps::boot::Boot;
use crate::steps::checkpoints::{CheckpointError, Checkpoints};
use crate::steps::networks::Networks;
use crate::steps::sla::Sla;
use crate::steps::windows::Windows;
use crate::store::{Tree, Writes};
use crate::workflows::federation::Federation;
use crate::workflows::migration::Migration;
use crate::workflows::remapping::Remapping;

mod error;
mod parallel;
mod slots;

pub use error::RecoveryError;

pub(crate) use slots::RestoreSlots;

/// One failed try to bring a VEE back: where, and why it failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// A host name, `peer sites`, or `planner` when no place was found.
    pub place: String,
    pub error: String,
}

/// "1. a3: …; 2. a2: …", for the violation's text.
fn attempts_text(attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}. {}: {}", i + 1, a.place, a.error))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Recovery from a host failure (see the module doc): the failed host's VEEs restored from their checkpoints on the next place, retried, at a peer, or recorded unrecovered. Calls the core, background displacement, booting, checkpoint records, federation, migration, networks, remapping, the SLA and windows.
pub struct Recovery {
    pub(crate) core: Arc<Core>,
    pub(crate) background: Arc<Background>,
    pub(crate) boot: Arc<Boot>,
    pub(crate) checkpoints: Arc<Checkpoints>,
    pub(crate) federation: Arc<Federation>,
    pub(crate) migration: Arc<Migration>,
    pub(crate) networks: Arc<Networks>,
    pub(crate) remapping: Arc<Remapping>,
    pub(crate) sla: Arc<Sla>,
    pub(crate) windows: Arc<Windows>,
    /// The restore places of each destination host
    /// (`[recovery] parallel_per_host`).
    pub(crate) slots: RestoreSlots,
}

impl Deref for Recovery {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Recovery {
    /// Handles the failure of `host`: recovers its VEEs, remaps future
    /// reservations within the remapping interval.
    pub async fn recover_host(self: &Arc<Self>, host: &str) -> Result<(), RecoveryError> {
        let started = self.clock.now_ms();
        // The host's VEEs are locked before the plan is made: nothing moves
        // them meanwhile, and no other write sees the plan before the VEEs
        // are failed with it.
        let mut ids: Vec<String> = self.vees_where(|v| v.host() == Some(host)).into_iter().map(|v| v.id).collect();
        ids.sort_unstable();
        let mut guards = Vec::with_capacity(ids.len());
        for id in &ids {
            guards.push(self.lock_vee(id).await);
        }
        let now = self.now_slot();
        let report = {
            let mut p = self.planner.lock().unwrap();
            p.set_host_down(host, now, self.windows.horizon_slots())?;
            p.recover_host(host, now)?
        };
        // All of the host's VEEs are down from now on (until each is
        // restored), and a copy the host still has when it answers
        // again is stale: they are failed in the same commit as the
        // planner's recovery plan, so that a crash cannot keep the plan and
        // lose the failure (or the reverse).
        // A VEE the plan has on the host that its record does not (being
        // deployed there) is locked too.
        for step in &report.steps {
            if !ids.contains(&step.vee) {
                guards.push(self.lock_vee(&step.vee).await);
                ids.push(step.vee.clone());
            }
        }
        let mut down: Vec<VeeRec> = report
            .steps
            .iter()
            .filter_map(|s| self.vee(&s.vee).ok())
            .filter(|v| v.state.is_live() && v.state != VeeState::Migrating)
            .collect();
        self.event("", "", "host-failed", format!("{host}: {} VEEs to recover", report.steps.len()));
        let why = format!("host {host} failed");
        // An outage of each (counted against the SLA's max_outages, timed
        // for its max_downtime_ms).
        let now_ms = self.clock.now_ms();
        for v in &mut down {
            v.outages += 1;
            v.down_since_ms = Some(now_ms);
        }
        let mut changes: Vec<(&mut VeeRec, Vec<(VeeState, String)>)> =
            down.iter_mut().map(|v| (v, vec![(VeeState::Failed, why.clone())])).collect();
        self.commit_transitions(&mut changes, Writes::default())?;
        drop(guards);
        for id in report.steps.iter().flat_map(|s| s.preempted.iter()) {
            self.background.preempt_background(id).await;
        }
        let recovered = self.recover_all(host, report.steps, started).await;
        // Reservations that start soon follow (VRM), and again each round
        // while the host stays down (`crate::loops`).
        if let Err(e) = self.remapping.remap_failed_host(host).await {
            tracing::warn!(host, error = %format!("{e:#}"), "VRM remapping");
        }
        // Proposals made before the failure (moves off this host, moves to
        // it) have lost their premise.
        self.migration.close_stale_proposals()?;
        recovered
    }

    /// Brings back one VEE of failed host `failed`, starting at the
    /// planner's first choice `step` (see the module doc for the order of
    /// attempts). The outage budget counts from `since_ms` (the clock's
    /// milliseconds). `place`: a restore place on the first choice's host
    /// for the first attempt, taken in priority order; every other attempt
    /// on a local host waits for one of its own. Errors only when the
    /// records cannot be written.
    async fn recover_vee(&self, failed: &str, step: RecoveryStep, since_ms: i64, mut place: Option<OwnedSemaphorePermit>) -> Result<(), RecoveryError> {
        let vee = step.vee.clone();
        let why = format!("host {failed} failed");
        let per_host = self.cfg.recovery.per_host();
        let deadline = since_ms.saturating_add(self.cfg.recovery.budget.as_millis() as i64);
        let mut attempts: Vec<Attempt> = Vec::new();
        let mut tried: Vec<String> = vec![failed.to_string()];
        let mut target = step.target;
        let exhausted = 'places: loop {
            let host = match target {
                RecoveryTarget::Spare { host } | RecoveryTarget::Host { host } => host,
                RecoveryTarget::NeedsPeer | RecoveryTarget::PeerSpare { .. } => {
                    match self.federation.recover_at_peer(&vee, None).await {
                        Ok(()) => return Ok(()),
                        Err(e) => attempts.push(Attempt {
                            place: "peer sites".into(),
                            error: format!("{e:#}"),
                        }),
                    }
                    break 'places "no local host or peer site can take it";
                }
                RecoveryTarget::Unplaced { reason } => {
                    attempts.push(Attempt {
                        place: "planner".into(),
                        error: reason,
                    });
                    break 'places "no other place for it";
                }
            };
            for n in 1..=per_host.attempts {
                let held = match place.take() {
                    Some(p) => Some(p),
                    None => self.restore_place(&host).await,
                };
                let restored = self.recover_vee_on(&vee, &why, &host, Some(failed)).await;
                // Given back at once: not held through a backoff.
                drop(held);
                match restored {
                    Ok(()) => {
                        if !attempts.is_empty() {
                            self.recovery_event(&vee, format!("recovered on {host} after {} failed attempts", attempts.len()));
                        }
                        return Ok(());
                    }
                    Err(e) => {
                        let error = format!("{e:#}");
                        self.recovery_event(&vee, format!("attempt {} on {host} failed: {error}", attempts.len() + 1));
                        attempts.push(Attempt {
                            place: host.clone(),
                            error,
                        });
                        // A host that refuses the checkpoint (its compatibility
                        // profile differs, H §4.4) refuses it again: the next
                        // compatible host is tried at once.
                        if e.refused_for_good() {
                            break;
                        }
                    }
                }
                if n < per_host.attempts {
                    let wait = per_host.backoff(n);
                    if self.clock.now_ms().saturating_add(wait.as_millis() as i64) >= deadline {
                        self.clean_failed_attempt(&vee, &host).await;
                        break 'places "the outage budget is spent";
                    }
                    self.clock.sleep(wait).await;
                }
            }
            // Whatever the failed attempts left on that host goes, so that
            // the VEE never runs twice.
            self.clean_failed_attempt(&vee, &host).await;
            tried.push(host);
            if self.clock.now_ms() >= deadline {
                break 'places "the outage budget is spent";
            }
            let next = {
                let excluded: Vec<&str> = tried.iter().map(String::as_str).collect();
                let mut p = self.planner.lock().unwrap();
                p.recover_elsewhere(&vee, self.now_slot(), &excluded)
            };
            self.persist_planner()?;
            match next {
                Ok(next) => {
                    for id in &next.preempted {
                        self.background.preempt_background(id).await;
                    }
                    target = next.target;
                }
                Err(e) => {
                    attempts.push(Attempt {
                        place: "planner".into(),
                        error: e.to_string(),
                    });
                    break 'places "no other place for it";
                }
            }
        };
        let text = format!("{exhausted}; attempts: {}", attempts_text(&attempts));
        Ok(self.record_unrecovered(&vee, &why, &text)?)
    }

    fn recovery_event(&self, vee_id: &str, detail: String) {
        let service = self.vee(vee_id).map(|v| v.service_id).unwrap_or_default();
        self.event(vee_id, &service, "recovery-attempt", detail);
    }

    /// Best effort: destroys what failed restores of `vee_id` may have left
    /// on `host` (a domain whose reply was lost, the VEE's files).
    pub(crate) async fn clean_failed_attempt(&self, vee_id: &str, host: &str) {
        let Ok(c) = self.hosts.host(host) else { return };
        let req = DestroyRequest {
            vee_id: vee_id.into(),
            remove: true,
        };
        if let Err(e) = c.destroy(req).await {
            tracing::warn!(vee = %vee_id, %host, error = %e.message(), "cannot clean up after failed restores");
        }
    }

    /// Restores (or, without a checkpoint, restarts) on local host `to` a
    /// VEE lost because `why` (e.g. "host a1 failed"), or a displaced
    /// background VEE (`suspended`, placed nowhere; `why` unused). `fence`
    /// is the failed VEEH whose copy, if `to`'s libvirtd still holds it, is
    /// destroyed first. Called again for a VEE already `recovering` (a
    /// retry).
    pub(crate) async fn recover_vee_on(&self, vee_id: &str, why: &str, to: &str, fence: Option<&str>) -> Result<(), RecoveryError> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        let retry = v.state == VeeState::Recovering;
        if !v.state.is_live() && !retry && v.state != VeeState::Failed && v.state != VeeState::Deploying {
            return Ok(());
        }
        if retry {
            if v.location != Location::Host(to.to_string()) {
                self.event(vee_id, &v.service_id, "recovery-attempt", format!("trying {to}"));
            }
            v.location = Location::Host(to.to_string());
            self.save_vee(&v)?;
        } else {
            // Failed (if it was not yet), recovering, and where to: one write.
            let mut steps = Vec::new();
            if v.state != VeeState::Failed && !v.is_displaced() {
                steps.push((VeeState::Failed, why.to_string()));
            }
            steps.push((VeeState::Recovering, format!("to {to}")));
            v.location = Location::Host(to.to_string());
            self.commit_transitions(&mut [(&mut v, steps)], Writes::default())?;
        }
        fail::fail_point!("recovery-before-restore");
        let how = match self.checkpoints.checkpoint_of(vee_id, None)? {
            Some(cp) => {
                let req = RestoreRequest {
                    spec: Some(self.networks.spec_of(&v)),
                    checkpoint: Some(CheckpointError::record_of(&cp)?),
                    fence_owner: fence.unwrap_or_default().to_string(),
                };
                async { self.hosts.host(to)?.restore(req).await }
                    .await
                    .map_err(|call| RecoveryError::Host { host: to.into(), call })?;
                format!("restored from checkpoint {} on {to}", cp.id)
            }
            None => {
                self.boot
                    .boot_on(to, &v)
                    .await
                    .map_err(|call| RecoveryError::Host { host: to.into(), call })?;
                format!("restarted from its images on {to} (no checkpoint)")
            }
        };
        // Running again, and what the outage broke of its SLA: one write.
        let down_since = v.down_since_ms.take();
        let viols = match down_since {
            Some(down) => self.sla.outage_violations(&v, (down, self.clock.now_ms())),
            None => Vec::new(),
        };
        let mut w = Writes::default();
        crate::steps::sla::Sla::put_violations(&mut w, &viols)?;
        let restored = self.transition_committing(&mut v, VeeState::Running, how, w);
        if restored.is_ok() {
            self.sla.violation_events(&viols);
            if let Some(down) = down_since {
                self.metrics.recovery(self.clock.since_ms(down) as f64 / 1000.0);
            }
        }
        self.networks.sync_networks(&v.service_id).await;
        Ok(restored?)
    }

    /// Records a VEE lost because `lost` (e.g. "host a1 failed") that could
    /// not be recovered because `why`, with the manifest's penalty for the
    /// rest of its window; its reservation is released.
    pub(crate) fn record_unrecovered(&self, vee_id: &str, lost: &str, why: &str) -> Result<(), crate::core::RecordError> {
        let mut v = self.vee(vee_id)?;
        let svc = self.service(&v.service_id)?;
        let start = self.clock.now();
        let end = v.window_end_unix.max(start);
        let viol = ViolationRec::over(
            uuid::Uuid::new_v4().to_string(),
            &svc.id,
            vee_id,
            format!("availability: {lost} and the VEE could not be recovered ({why})"),
            (start * 1000, end * 1000),
            svc.penalty_per_hour,
        );
        // It runs nowhere now: its reservation goes (kept, VRM would move
        // it onto another host each round of the failure's slot, displacing
        // background VEEs for a VEE that will not run). The release, the
        // violation and the VEE's failure: one write.
        let _ = self.planner.lock().unwrap().release_vee(vee_id);
        let mut w = Writes::default();
        w.put(Tree::Violations, &viol.id, &viol)?;
        if v.state == VeeState::Failed {
            self.planner_store.save_with(&self.planner, w)?;
        } else {
            self.transition_committing(&mut v, VeeState::Failed, why.to_string(), w)?;
        }
        self.sla.violation_events(std::slice::from_ref(&viol));
        Ok(())
    }
}

#[cfg(test)]
mod tests;
