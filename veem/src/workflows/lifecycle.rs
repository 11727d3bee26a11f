//! VEE actions (stop, suspend, resume, checkpoint, restore), the checkpoint
//! schedule and the window scheduler.

use std::ops::Deref;
use std::sync::Arc;

use anyhow::anyhow;
use interfaces::vhi::{self, CheckpointRequest, DestroyRequest, RestoreRequest};

use crate::core::{Core, RecordError};
use crate::domain::Action;
use crate::model::{CheckpointRec, Location, VeeRec, VeeState};
use crate::ports::call::CallError;
use crate::steps::abroad::{Abroad, AbroadError};
use crate::steps::boot::Boot;
use crate::steps::checkpoints::{CheckpointError, Checkpoints, Origin};
use crate::steps::networks::Networks;
use crate::steps::sla::Sla;
use crate::steps::spares::Spares;
use crate::steps::stop::{Stop, StopError};
use crate::steps::windows::Windows;
use crate::workflows::migration::{Migration, WithdrawError};
use crate::workflows::recovery::Recovery;

/// Why an action on a VEE (VMI VeeAction) or an undeploy did not happen
/// (in full). Each variant's status is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// No such VEE or service, a change its state table forbids, or its
    /// record could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The VEE does not run on a host here: `at` says where it is.
    #[error("VEE {vee} {at}")]
    NotHere { vee: String, at: String },
    /// A checkpoint of a VEE that is not running.
    #[error("VEE {vee} is {state}, not running")]
    NotRunning { vee: String, state: &'static str },
    /// Its host could not do it (`what`: suspend, resume, checkpoint,
    /// destroy, restore).
    #[error("{what} of {vee} on {host}: {}", .call.message)]
    Host {
        what: &'static str,
        vee: String,
        host: String,
        call: CallError,
    },
    /// No checkpoint to restore from, or not the one named.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The peer site running it refused, or could not be called.
    #[error(transparent)]
    Abroad(#[from] AbroadError),
    /// The VEE was not stopped.
    #[error(transparent)]
    Stop(#[from] StopError),
    /// The VEE was not given back to its primary site.
    #[error(transparent)]
    Withdraw(#[from] WithdrawError),
    /// An undeploy: VEEs that could not be stopped, each named with its
    /// reason (the others were).
    #[error("service {service}: {failed} of {of} VEEs not stopped: {reasons}")]
    NotStopped {
        service: String,
        failed: usize,
        of: usize,
        reasons: String,
    },
}

impl From<crate::store::StoreError> for ActionError {
    fn from(e: crate::store::StoreError) -> Self {
        ActionError::Record(e.into())
    }
}

/// A VEE's life after admission (see the module doc): actions (stop, suspend, resume, checkpoint, restore, undeploy) and the scheduler's round. Calls the core, the steps (actions abroad, booting, checkpoint records, networks, the SLA, spares, stopping, windows), migration and recovery.
pub struct Lifecycle {
    pub(crate) core: Arc<Core>,
    pub(crate) boot: Arc<Boot>,
    pub(crate) checkpoints: Arc<Checkpoints>,
    pub(crate) abroad: Arc<Abroad>,
    pub(crate) migration: Arc<Migration>,
    pub(crate) networks: Arc<Networks>,
    pub(crate) recovery: Arc<Recovery>,
    pub(crate) sla: Arc<Sla>,
    pub(crate) spares: Arc<Spares>,
    pub(crate) stop: Arc<Stop>,
    pub(crate) windows: Arc<Windows>,
}

impl Deref for Lifecycle {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Lifecycle {
    /// The host a VEE runs on, or an error saying where it is instead.
    fn local_host(v: &VeeRec) -> Result<String, ActionError> {
        let at = match &v.location {
            Location::Host(h) => return Ok(h.clone()),
            Location::Site(s) => format!("runs at site {s}"),
            Location::Nowhere => "is not placed".to_string(),
        };
        Err(ActionError::NotHere { vee: v.id.clone(), at })
    }

    /// Applies an action on a VEE (the VMI's VeeAction): stop | suspend | resume | checkpoint |
    /// restore (`checkpoint_id` empty = latest valid) | withdraw (operator of
    /// a site running the VEE for a peer: give it back, see
    /// [`Migration::withdraw`](crate::workflows::migration::Migration::withdraw)).
    pub async fn vee_action(self: &Arc<Self>, vee_id: &str, action: Action, checkpoint_id: &str) -> Result<VeeRec, ActionError> {
        // A stop is the stop step's, here or abroad.
        if let (Location::Site(site), false) = (self.vee(vee_id)?.location, action == Action::Stop) {
            self.abroad.forward_action(&site, vee_id, action, checkpoint_id).await?;
            return Ok(self.vee(vee_id)?);
        }
        match action {
            Action::Stop => return Ok(self.stop.stop(vee_id).await?),
            Action::Suspend | Action::Resume => {
                let _g = self.lock_vee(vee_id).await;
                let mut v = self.vee(vee_id)?;
                let host = Self::local_host(&v)?;
                let what = if action == Action::Suspend { "suspend" } else { "resume" };
                let failed = |call| ActionError::Host {
                    what,
                    vee: vee_id.into(),
                    host: host.clone(),
                    call,
                };
                let c = self.hosts.host(&host).map_err(failed)?;
                let id = vee_id.to_string();
                if action == Action::Suspend {
                    c.suspend(vhi::SuspendRequest { vee_id: id }).await.map_err(failed)?;
                    self.transition(&mut v, VeeState::Suspended, "")?;
                } else {
                    c.resume(vhi::ResumeRequest { vee_id: id }).await.map_err(failed)?;
                    self.transition(&mut v, VeeState::Running, "")?;
                }
            }
            Action::Checkpoint => {
                self.checkpoint_vee(vee_id).await?;
            }
            Action::Restore => {
                self.restore_vee(vee_id, (!checkpoint_id.is_empty()).then_some(checkpoint_id))
                    .await?
            }
            Action::Withdraw => self.migration.withdraw(vee_id).await?,
        }
        Ok(self.vee(vee_id)?)
    }

    /// Undeploys service `service_id`: stops each of its VEEs that is not
    /// terminated yet (as VeeAction Stop: locally, or at the peer site that
    /// runs it), all at once, and returns the service. Errors, naming each
    /// VEE that could not be stopped, after the others were.
    pub async fn undeploy(self: &Arc<Self>, service_id: &str) -> Result<crate::model::ServiceRec, ActionError> {
        let service = self.service(service_id)?;
        let live = self.vees_where(|v| {
            v.service_id == service_id && !matches!(v.state, VeeState::Pending | VeeState::Terminated | VeeState::Rejected)
        });
        let stops = live
            .iter()
            .map(|v| async move { (v.id.clone(), self.vee_action(&v.id, Action::Stop, "").await) });
        let failed: Vec<String> = futures::future::join_all(stops)
            .await
            .into_iter()
            .filter_map(|(id, r)| r.err().map(|e| format!("VEE {id}: {e:#}")))
            .collect();
        if !failed.is_empty() {
            return Err(ActionError::NotStopped {
                service: service_id.into(),
                failed: failed.len(),
                of: live.len(),
                reasons: failed.join("; "),
            });
        }
        Ok(service)
    }

    /// Takes a whole-VM checkpoint of a running VEE (H §4.4) and records it;
    /// its blobs are pinned in the image repository.
    pub async fn checkpoint_vee(&self, vee_id: &str) -> Result<CheckpointRec, ActionError> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        if v.state != VeeState::Running {
            return Err(ActionError::NotRunning {
                vee: vee_id.into(),
                state: v.state.as_str(),
            });
        }
        let host = Self::local_host(&v)?;
        let failed = |call| ActionError::Host {
            what: "checkpoint",
            vee: vee_id.into(),
            host: host.clone(),
            call,
        };
        self.transition(&mut v, VeeState::Checkpointing, format!("on {host}"))?;
        fail::fail_point!("checkpoint-after-transition");
        let started = self.clock.now_ms();
        let r = match self.hosts.host(&host) {
            Ok(c) => {
                c.checkpoint(CheckpointRequest {
                    vee_id: vee_id.into(),
                    stop_after: false,
                })
                .await
            }
            Err(e) => Err(e),
        };
        let rec = match r {
            Ok(r) => r,
            Err(e) => {
                self.transition(&mut v, VeeState::Running, format!("checkpoint failed: {}", e.message()))?;
                return Err(failed(e));
            }
        };
        fail::fail_point!("checkpoint-after-vhi");
        let took_s = self.clock.since_ms(started) as f64 / 1000.0;
        self.measured_checkpoint_cost(&mut v, took_s);
        let downtime_s = interfaces::time::ms_of_duration(&rec.downtime) as f64 / 1000.0;
        self.metrics.checkpoint(took_s, downtime_s, rec.memory_bytes + rec.disk_bytes);
        let cp = self
            .checkpoints
            .record_checkpoint(&mut v, &rec, &format!("on {host}"), Origin::Here)
            .await?;
        self.transition(&mut v, VeeState::Running, "")?;
        Ok(cp)
    }

    /// Takes a checkpoint's measured cost `cost_s` into VEE `v`'s smoothed
    /// cost and, when its SLA's interval is `auto`, recomputes the interval
    /// from it (H eq. 3.12-3.16 over its window; an event says so when it
    /// changed). The caller saves `v`.
    fn measured_checkpoint_cost(&self, v: &mut VeeRec, cost_s: f64) {
        let cost = smoothed_cost(v.checkpoint_cost_s, cost_s);
        v.checkpoint_cost_s = Some(cost);
        let Some(terms) = self.terms_of(&v.service_id) else {
            return;
        };
        if terms.sla.checkpoint_interval != interfaces::manifest::CheckpointInterval::Auto {
            return;
        }
        let run_time_s = (v.window_end_unix - v.window_start_unix).max(1) as u64;
        let interval = crate::domain::terms::checkpoint_interval(&terms.sla, run_time_s, cost);
        if interval != v.checkpoint_interval_s {
            let text = |i: Option<u64>| i.map_or("none".to_string(), |s| format!("{s} s"));
            self.event(
                &v.id,
                &v.service_id,
                "checkpoint-interval",
                format!(
                    "{} -> {} (measured cost {cost:.2} s)",
                    text(v.checkpoint_interval_s),
                    text(interval)
                ),
            );
            v.checkpoint_interval_s = interval;
        }
    }

    /// Rolls a VEE back to a checkpoint on its current host.
    pub async fn restore_vee(&self, vee_id: &str, checkpoint_id: Option<&str>) -> Result<(), ActionError> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        let host = Self::local_host(&v)?;
        let cp = self
            .checkpoints
            .checkpoint_of(vee_id, checkpoint_id)?
            .ok_or_else(|| CheckpointError::None { vee: vee_id.into() })?;
        let failed = |what| {
            let host = host.clone();
            move |call| ActionError::Host {
                what,
                vee: vee_id.into(),
                host,
                call,
            }
        };
        let record = CheckpointError::record_of(&cp)?;
        let c = self.hosts.host(&host).map_err(failed("restore"))?;
        c.destroy(DestroyRequest {
            vee_id: vee_id.into(),
            remove: false,
        })
        .await
        .map_err(failed("destroy"))?;
        fail::fail_point!("restore-after-destroy");
        self.transition(&mut v, VeeState::Recovering, format!("restore {} on {host}", cp.id))?;
        // A checkpoint from before a rolling update brings its image back.
        if let Some(image) = cp.image().filter(|i| *i != v.image) {
            v.image = image;
            self.save_vee(&v)?;
        }
        c.restore(RestoreRequest {
            spec: Some(self.networks.spec_of(&v)),
            checkpoint: Some(record),
            fence_owner: String::new(),
        })
        .await
        .map_err(failed("restore"))?;
        self.transition(&mut v, VeeState::Running, format!("restored {} on {host}", cp.id))?;
        self.networks.sync_networks(&v.service_id).await;
        Ok(())
    }

    /// Resumes displaced background VEEs for which the planner finds free
    /// capacity for the rest of their window
    /// ([`Planner::resume_background`]): each is restored from its latest
    /// checkpoint (or restarted from its images) on the host found, in a
    /// task of its own. A restore that fails gives the capacity back and
    /// leaves the VEE displaced, to be tried again. Returns how many were
    /// started.
    ///
    /// [`Planner::resume_background`]: crate::planner::Planner::resume_background
    pub fn resume_displaced(self: &Arc<Self>) -> usize {
        let now = self.clock.now();
        let mut started = 0;
        for v in self.displaced_vees().into_iter().filter(|v| v.window_end_unix > now) {
            if !self.try_busy(&v.id) {
                continue;
            }
            let range = self.slots.covering(now, v.window_end_unix + self.windows.tail_s(&v));
            // The format of the state it resumes from: the planner places
            // it on none of the hosts that cannot read it.
            let format = self
                .checkpoints
                .checkpoint_of(&v.id, None)
                .ok()
                .flatten()
                .and_then(|cp| cp.record().ok())
                .map_or(interfaces::vhi::SaveFormat::Sequential, |r| r.save_format());
            let unreadable: Vec<String> = self.hosts.names().into_iter().filter(|h| !self.hosts.reads(h, format)).collect();
            let unreadable: Vec<&str> = unreadable.iter().map(String::as_str).collect();
            let placed = {
                let mut p = self.planner.lock().unwrap();
                match p.resume_background(&v.id, range, &unreadable) {
                    // Only onto a host that answers now.
                    Ok(at) if self.hosts.health(&at.host) != crate::domain::Health::Up => {
                        let _ = p.displace_background(&v.id);
                        Err(anyhow!("host {} does not answer", at.host))
                    }
                    r => r.map_err(anyhow::Error::from),
                }
            };
            let host = match placed.and_then(|p| Ok(self.persist_planner().map(|_| p.host)?)) {
                Ok(h) => h,
                Err(e) => {
                    tracing::debug!(vee = %v.id, error = %format!("{e:#}"), "displaced VEE: no room yet");
                    self.unbusy(&v.id);
                    continue;
                }
            };
            started += 1;
            let veem = self.clone();
            self.spawn(async move {
                if let Err(e) = veem.recovery.recover_vee_on(&v.id, "", &host, None).await {
                    tracing::warn!(vee = %v.id, %host, error = %format!("{e:#}"), "displaced VEE not resumed; tried again later");
                    veem.recovery.clean_failed_attempt(&v.id, &host).await;
                    let _ = veem.planner.lock().unwrap().displace_background(&v.id);
                    let _ = veem.persist_planner();
                    if let Ok(mut v) = veem.vee(&v.id) {
                        v.location = Location::Nowhere;
                        let _ = veem.transition(&mut v, VeeState::Suspended, format!("resume on {host} failed: {e:#}"));
                    }
                }
                veem.unbusy(&v.id);
            });
        }
        started
    }

    /// One scheduler round (every second): starts VEEs whose window
    /// opened, takes the checkpoints that are due, stops VEEs whose window
    /// closed, resumes displaced background VEEs that have room again (each
    /// in a task of its own), and records the SLA terms broken meanwhile
    /// ([`Lifecycle::sla_round`]).
    pub(crate) fn scheduler_round(self: &Arc<Self>) {
        self.resume_displaced();
        if let Err(e) = self.spares.lapse_spares() {
            tracing::warn!(error = %format!("{e:#}"), "lapsing unconfirmed spares");
        }
        if let Err(e) = self.sla.sla_round() {
            tracing::warn!(error = %format!("{e:#}"), "SLA round");
        }
        let (now, ms) = (self.clock.now(), self.clock.now_ms());
        for v in self.due_vees(ms).into_iter().filter(|v| due(v, now, ms).is_some()) {
            match due(&v, now, ms) {
                // Not onto a host that has failed: VRM moves its reservation
                // first (crate::remapping).
                Some(Due::Deploy) if v.host().is_some_and(|h| self.hosts.health(h) == crate::domain::Health::Failed) => {}
                Some(Due::Deploy) => self.boot.spawn_deploy(&v.id),
                Some(Due::Stop) => {
                    let veem = self.clone();
                    self.spawn(async move {
                        if let Err(e) = veem.stop.stop_here(&v.id).await {
                            tracing::warn!(vee = %v.id, error = %format!("{e:#}"), "stop at the window's end failed; tried again later");
                        }
                    });
                }
                Some(Due::Checkpoint) if self.try_busy(&v.id) => {
                    let veem = self.clone();
                    self.spawn(async move {
                        let r = match &v.location {
                            Location::Site(s) => veem.abroad.forward_action(s, &v.id, Action::Checkpoint, "").await.map_err(ActionError::from),
                            _ => veem.checkpoint_vee(&v.id).await.map(|_| ()),
                        };
                        if let Err(e) = r {
                            tracing::warn!(vee = %v.id, error = %format!("{e:#}"), "scheduled checkpoint failed");
                        }
                        veem.unbusy(&v.id);
                    });
                }
                _ => {}
            }
        }
    }
}

/// What the scheduler owes a VEE now.
pub(crate) enum Due {
    /// Its window opened: deploy it on its planned host.
    Deploy,
    /// Its window closed: stop it.
    Stop,
    /// Its checkpoint period (seconds) has passed since the last one. A VEE
    /// at a peer site is checkpointed there, on this site's schedule.
    Checkpoint,
}

/// What is due for `v` at `now` (Unix seconds; `now_ms` the same in ms).
pub(crate) fn due(v: &VeeRec, now: i64, now_ms: i64) -> Option<Due> {
    match v.state {
        VeeState::Admitted if v.deploy_due(now) && v.host().is_some() => Some(Due::Deploy),
        VeeState::Running if v.window_end_unix <= now && v.host().is_some() => Some(Due::Stop),
        VeeState::Running if v.for_peer.is_none() => {
            let every = v.checkpoint_interval_s?;
            let last = v.checkpointed_ms();
            (now_ms - last >= every as i64 * 1000).then_some(Due::Checkpoint)
        }
        _ => None,
    }
}

/// Weight of the newest measurement in a VEE's checkpoint cost (an
/// exponentially weighted moving average: one slow checkpoint moves it by
/// a third of the difference, and it follows a lasting change within a few
/// checkpoints).
pub const COST_SMOOTHING: f64 = 1.0 / 3.0;

/// The smoothed checkpoint cost after a measurement of `sample_s` (s):
/// the sample itself for the first one, else `previous` moved
/// [`COST_SMOOTHING`] of the way to it.
pub fn smoothed_cost(previous: Option<f64>, sample_s: f64) -> f64 {
    let sample = if sample_s.is_finite() { sample_s.max(0.001) } else { 0.001 };
    match previous {
        Some(c) if c.is_finite() => c + COST_SMOOTHING * (sample - c),
        _ => sample,
    }
}

#[cfg(test)]
mod tests;
