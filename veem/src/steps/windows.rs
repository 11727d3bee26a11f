//! Service windows after admission (H §3.4 advance reservations).
//!
//! A manifest's `[sla] window` is explicit: its VEEs start at its start
//! and stop at its end (the scheduler, `crate::lifecycle`). A manifest
//! without one is open-ended: the planner reserves `planning_horizon` from
//! admission and the VEEM renews the reservation while the service runs,
//! whenever less than half of the horizon is left ([`Windows::renew_windows`]).
//! A window can be extended after admission ([`Windows::extend_window`],
//! VMI `ExtendService`, `veem extend`), admitted only if the planner keeps
//! every VEE where it is for the added time.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;


use interfaces::manifest::Sla;

use crate::core::{Core, RecordError};
use crate::domain::terms::{checkpoint_interval, DEFAULT_CHECKPOINT_COST_S};
use crate::model::{ServiceRec, VeeRec};
use crate::planner::{Padding, PlanError};
use crate::store::Writes;

/// Why a service's window was not extended (VMI ExtendService): nothing
/// changed. Each variant's status is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    /// No such service, or its records could not be read or written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// None of its VEEs is live or admitted (FailedPrecondition).
    #[error("service {service} has no VEE whose window could be extended")]
    NothingLive { service: String },
    /// The planner cannot keep a VEE on its host over the added slots, or
    /// the end is not after the window's (FailedPrecondition).
    #[error("the window of service {service} cannot end at {until_unix}: {reason}")]
    NoRoom { service: String, until_unix: i64, reason: PlanError },
}

/// Service windows after admission (see the module doc): the padding a reservation holds, open-ended services renewed, windows extended. Calls only the core.
pub struct Windows {
    core: Arc<Core>,
    /// Open-ended services whose last window renewal the planner refused
    /// (its event was sent).
    renewal_refused: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Deref for Windows {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Windows {
    pub fn new(core: Arc<Core>) -> Self {
        Self {
            core,
            renewal_refused: Default::default(),
        }
    }
}

impl Windows {
    /// The planning horizon in slots (`planning_horizon`).
    pub fn horizon_slots(&self) -> u32 {
        self.slots.slots_for(self.cfg.planning_horizon)
    }

    /// The overheads a reservation under SLA `sla` holds beyond its window
    /// ([`Padding`], H eq. 3.7): `init_overhead` before; after, the
    /// `stop_timeout` and, when its VEEs are checkpointed, one
    /// checkpoint's cost (`checkpoint_cost_s`: measured, or
    /// [`DEFAULT_CHECKPOINT_COST_S`] before the first). Whole slots.
    pub fn padding(&self, sla: &Sla, checkpoint_cost_s: Option<f64>) -> Padding {
        let checkpoints = checkpoint_interval(sla, self.cfg.planning_horizon.as_secs(), DEFAULT_CHECKPOINT_COST_S).is_some();
        let cp = if checkpoints {
            Duration::from_secs_f64(checkpoint_cost_s.unwrap_or(DEFAULT_CHECKPOINT_COST_S).max(0.0))
        } else {
            Duration::ZERO
        };
        Padding {
            before: self.slots.slots_for(self.cfg.init_overhead),
            after: self.slots.slots_for(self.cfg.stop_timeout + cp),
        }
    }

    /// The padding after the window of VEE `v` (its service's manifest,
    /// its measured checkpoint cost), in seconds.
    pub fn tail_s(&self, v: &VeeRec) -> i64 {
        let after = self
            .terms_of(&v.service_id)
            .map_or(0, |t| self.padding(&t.sla, v.checkpoint_cost_s).after);
        self.slots.duration_of(after).as_secs() as i64
    }

    /// Extends the window of service `service_id` to end at `until_unix`
    /// (Unix s, rounded up to a slot boundary): every reservation that ran
    /// to the old end runs to the new one (and its padding, [`Windows::padding`])
    /// on the same host, and the VEEs'
    /// records say so (one write). Errors, changing nothing, when the
    /// service is unknown, `until_unix` is not after its end, or the
    /// planner cannot keep a VEE on its host over the added slots (its
    /// reason).
    pub async fn extend_window(&self, service_id: &str, until_unix: i64) -> Result<ServiceRec, WindowError> {
        let svc = self.service(service_id)?;
        let mut ids = svc.vees.clone();
        ids.sort_unstable();
        let mut guards = Vec::with_capacity(ids.len());
        for id in &ids {
            guards.push(self.lock_vee(id).await);
        }
        let mut vees: Vec<VeeRec> = ids
            .iter()
            .filter_map(|id| self.vee(id).ok())
            .filter(|v| v.state.is_live() || v.state == crate::model::VeeState::Admitted)
            .collect();
        if vees.is_empty() {
            return Err(WindowError::NothingLive {
                service: service_id.into(),
            });
        }
        // The reservations end the padding after the window (the largest
        // measured checkpoint cost of its VEEs).
        let cost = vees.iter().filter_map(|v| v.checkpoint_cost_s).reduce(f64::max);
        let after = self.terms_of(service_id).map_or(0, |t| self.padding(&t.sla, cost).after);
        let end = self.slots.slot_ceil(until_unix).saturating_add(after);
        let window = {
            let mut p = self.planner.lock().unwrap();
            p.extend_service(service_id, end).map_err(|reason| WindowError::NoRoom {
                service: service_id.into(),
                until_unix,
                reason,
            })?
        };
        let end_unix = self.slots.start_of(window.end.saturating_sub(after));
        for v in &mut vees {
            v.window_end_unix = end_unix;
        }
        let mut changes: Vec<(&mut VeeRec, Vec<_>)> = vees.iter_mut().map(|v| (v, Vec::new())).collect();
        self.commit_transitions(&mut changes, Writes::default())?;
        drop(guards);
        let text = chrono::DateTime::from_timestamp(end_unix, 0).map_or(end_unix.to_string(), |t| t.to_rfc3339());
        self.event("", service_id, "window", format!("extended to {text}"));
        Ok(self.service(service_id)?)
    }

    /// Renews the reservation of every open-ended service this site runs
    /// (its VEEs live, here or placed by it at peers) that has less than
    /// half of the planning horizon left: to a horizon from now. A renewal
    /// the planner refuses (the capacity is promised to others from the
    /// current end on) is an event and is tried again each round; if the
    /// end comes first, the VEEs stop there like those of an explicit
    /// window. Returns the services renewed.
    pub async fn renew_windows(&self) -> Vec<String> {
        let now = self.clock.now();
        let horizon = self.cfg.planning_horizon.as_secs() as i64;
        let mut ends: BTreeMap<String, i64> = BTreeMap::new();
        // The VEE of a service whose window ends first is the first due.
        for v in self
            .due_vees(now * 1000)
            .into_iter()
            .filter(|v| v.open_ended && v.state.is_live() && v.host().is_some())
        {
            let e = ends.entry(v.service_id.clone()).or_insert(i64::MAX);
            *e = (*e).min(v.window_end_unix);
        }
        let mut renewed = Vec::new();
        for (service, end) in ends {
            if end - now >= horizon / 2 {
                continue;
            }
            match self.extend_window(&service, now + horizon).await {
                Ok(_) => {
                    self.renewal_refused.lock().unwrap().remove(&service);
                    renewed.push(service);
                }
                Err(e) => {
                    if self.renewal_refused.lock().unwrap().insert(service.clone()) {
                        self.event("", &service, "window", format!("renewal refused: {e:#}"));
                    }
                }
            }
        }
        renewed
    }
}

#[cfg(test)]
mod tests;
