//! Future reservations of a failed host, as the running VEEM applies VRM
//! (V §4.4-4.6, Fig. 7; the planner's side is `crate::planner::remap`).
//!
//! While a host is down, in every heartbeat round (so at least once per
//! slot) the VEEM recomputes the remapping interval from the current load,
//! the failed host's load weighted by ζ and the average booking profile b̄
//! learnt from the admissions it has seen, with `[recovery] remap_eta` and
//! `remap_zeta`; the reservations on the host that start within the
//! interval are moved to other hosts, in the planner and in the VEE
//! records (a VEE that has not started yet starts on its new host), and
//! background VEEs they displace give way. Until its VEEH answers again
//! the failed host takes no new reservation: it is blocked for the whole
//! planning horizon, renewed each round.

use std::ops::Deref;
use std::sync::Arc;


use crate::core::Core;
use crate::model::{Location, VeeState};
use crate::planner::{PlanError, RemapParams, RemapReport};
use crate::steps::background::Background;
use crate::steps::windows::Windows;

/// Why a remapping round did not run: the planner does not know the host
/// (or its parameters are out of range), or the records could not be
/// written.
#[derive(Debug, thiserror::Error)]
pub enum RemapError {
    #[error("planner: {0}")]
    Planner(#[from] PlanError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// VRM applied while a host is down (see the module doc); owns the booking profile Deploy's admissions teach it. Calls the core, the windows and the background displacement.
pub struct Remapping {
    core: Arc<Core>,
    pub(crate) windows: Arc<Windows>,
    pub(crate) background: Arc<Background>,
    /// VRM's average booking profile b̄ (V §4.6), learnt from the
    /// admissions since the VEEM started ([`Remapping::record_booking`]).
    booking: std::sync::Mutex<crate::planner::BookingProfile>,
    /// The reservations it moved off failed hosts since the VEEM started:
    /// VEE -> the failed host (what the web console's timeline marks).
    moved: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Deref for Remapping {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Remapping {
    pub fn new(core: Arc<Core>, windows: Arc<Windows>, background: Arc<Background>) -> Self {
        let mut booking = crate::planner::BookingProfile::new(windows.horizon_slots());
        booking.observe_from(core.now_slot());
        Self {
            core,
            windows,
            background,
            booking: std::sync::Mutex::new(booking),
            moved: Default::default(),
        }
    }

    /// The failed host each VEE's reservation was moved off, for those
    /// this VEEM moved since it started.
    pub fn moved_off(&self) -> std::collections::HashMap<String, String> {
        self.moved.lock().unwrap().clone()
    }

    /// Teaches the booking profile an admission at the current slot over
    /// `window`, of `share` of the site's capacity (Deploy).
    pub fn record_booking(&self, window: crate::planner::SlotRange, share: f64) {
        self.booking.lock().unwrap().record(self.now_slot(), window, share);
    }
}

impl Remapping {
    /// VRM's parameters from the configuration, looking one planning
    /// horizon ahead.
    pub fn remap_params(&self) -> RemapParams {
        RemapParams {
            eta: self.cfg.recovery.remap_eta,
            zeta: self.cfg.recovery.remap_zeta,
            lookahead_slots: self.windows.horizon_slots(),
        }
    }

    /// One VRM step for failed host `host` at the current slot: blocks it
    /// for new reservations over the planning horizon, remaps what starts
    /// within the remapping interval and records where each VEE now goes.
    /// Returns the interval (slots) and the planner's report.
    pub async fn remap_failed_host(self: &Arc<Self>, host: &str) -> Result<(u32, RemapReport), RemapError> {
        let now = self.now_slot();
        let params = self.remap_params();
        let booking = self.booking.lock().unwrap().average(now);
        let (interval, report) = {
            let mut p = self.planner.lock().unwrap();
            let interval = p.remapping_interval(host, now, &params, &booking)?;
            p.set_host_down(host, now, self.windows.horizon_slots())?;
            let report = p.remap(host, now, interval)?;
            (interval, report)
        };
        self.persist_planner()?;
        for (key, placement) in report.remapped.iter().filter(|(k, _)| !k.spare) {
            let _g = self.lock_vee(&key.vee).await;
            let Ok(mut v) = self.vee(&key.vee) else { continue };
            // Only a VEE that has not started: one that ran there is the
            // recovery's.
            if v.state == VeeState::Admitted && v.location == Location::Host(host.to_string()) {
                v.location = Location::Host(placement.host.clone());
                self.save_vee(&v)?;
                self.moved.lock().unwrap().insert(v.id.clone(), host.to_string());
                self.event(
                    &v.id,
                    &v.service_id,
                    "remapped",
                    format!(
                        "its reservation moves from failed host {host} to {} (VRM interval {interval} slots)",
                        placement.host
                    ),
                );
            }
        }
        for id in &report.preempted {
            self.background.preempt_background(id).await;
        }
        if !report.remapped.is_empty() || !report.kept.is_empty() {
            tracing::info!(
                host,
                interval,
                remapped = report.remapped.len(),
                kept = report.kept.len(),
                "VRM remapping of future reservations"
            );
        }
        Ok((interval, report))
    }
}

#[cfg(test)]
mod tests;
