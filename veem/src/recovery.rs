//! Recovery from a host failure (H §4; DESIGN.md §6 "Recovery order"; V
//! Fig. 7 for future reservations).
//!
//! The planner picks, for every VEE the failed host ran, a new place in the
//! order of H §4: its enhanced spare, another local host, a host freed by
//! suspending background VEEs, a peer site. The VEEM then restores each VEE
//! from its latest valid checkpoint there (VEEs without one, such as legacy
//! ones, restart from their images). What cannot be kept is recorded as an
//! SLA violation with the manifest's penalty. Reservations that start later
//! are remapped with VRM's remapping interval.

use std::sync::Arc;

use anyhow::Result;
use interfaces::vhi::RestoreRequest;

use crate::manager::Veem;
use crate::model::{Location, VeeState, ViolationRec};
use crate::planner::{RecoveryTarget, RemapParams};
use crate::store::Tree;

impl Veem {
    /// Handles the failure of `host`: recovers its VEEs, remaps future
    /// reservations within the remapping interval.
    pub async fn recover_host(self: &Arc<Self>, host: &str) -> Result<()> {
        let now = self.now_slot();
        let report = {
            let mut p = self.planner.lock().unwrap();
            let interval = p.remapping_interval(host, now, &RemapParams::default(), &[]).unwrap_or(1);
            p.set_host_down(host, now, interval)?;
            let report = p.recover_host(host, now)?;
            if let Ok(r) = p.remap(host, now, interval) {
                tracing::info!(
                    host,
                    interval,
                    remapped = r.remapped.len(),
                    kept = r.kept.len(),
                    "VRM remapping of future reservations"
                );
            }
            report
        };
        self.persist_planner()?;
        self.event("", "", "host-failed", format!("{host}: {} VEEs to recover", report.steps.len()));
        for id in report.steps.iter().flat_map(|s| s.preempted.iter()) {
            self.preempt_background(id).await;
        }
        for step in report.steps {
            // A VEE being received by a migration never ran here: the
            // migration fails at its source, where it keeps running.
            if let Ok(v) = self.vee(&step.vee) {
                if v.state == VeeState::Migrating && v.for_peer.is_some() {
                    self.drop_incoming(&v.id).await;
                    continue;
                }
            }
            let target = match &step.target {
                RecoveryTarget::Spare { host } | RecoveryTarget::Host { host } => Some(host.clone()),
                _ => None,
            };
            let why = format!("host {host} failed");
            let result = match target {
                Some(to) => self.recover_vee_on(&step.vee, &why, &to).await,
                None => {
                    let why = match &step.target {
                        RecoveryTarget::Unplaced { reason } => reason.clone(),
                        RecoveryTarget::NeedsPeer | RecoveryTarget::PeerSpare { .. } => self
                            .recover_at_peer(&step.vee, None)
                            .await
                            .err()
                            .map(|e| format!("{e:#}"))
                            .unwrap_or_default(),
                        _ => String::new(),
                    };
                    if why.is_empty() {
                        Ok(())
                    } else {
                        Err(anyhow::anyhow!(why))
                    }
                }
            };
            if let Err(e) = result {
                self.record_unrecovered(&step.vee, &why, &format!("{e:#}"))?;
            }
        }
        Ok(())
    }

    /// Restores (or, without a checkpoint, restarts) on local host `to` a
    /// VEE lost because `why` (e.g. "host a1 failed").
    pub(crate) async fn recover_vee_on(&self, vee_id: &str, why: &str, to: &str) -> Result<()> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        if !v.state.is_live() && v.state != VeeState::Failed && v.state != VeeState::Deploying {
            return Ok(());
        }
        self.transition(&mut v, VeeState::Failed, why.to_string())?;
        self.transition(&mut v, VeeState::Recovering, format!("to {to}"))?;
        v.location = Location::Host(to.to_string());
        self.save_vee(&v)?;
        let mut c = self.hosts.client(to)?;
        match self.checkpoint_of(vee_id, None)? {
            Some(cp) => {
                c.restore(RestoreRequest {
                    spec: Some(v.spec()),
                    checkpoint: Some(cp.record()?),
                })
                .await?;
                self.transition(&mut v, VeeState::Running, format!("restored from checkpoint {} on {to}", cp.id))
            }
            None => {
                self.boot_on(to, &v).await?;
                self.transition(
                    &mut v,
                    VeeState::Running,
                    format!("restarted from its images on {to} (no checkpoint)"),
                )
            }
        }
    }

    /// Records a VEE lost because `lost` (e.g. "host a1 failed") that could
    /// not be recovered because `why`, with the manifest's penalty for the
    /// rest of its window.
    pub(crate) fn record_unrecovered(&self, vee_id: &str, lost: &str, why: &str) -> Result<()> {
        let mut v = self.vee(vee_id)?;
        let svc = self.service(&v.service_id)?;
        let start = chrono::Utc::now().timestamp();
        let end = v.window_end_unix.max(start);
        let penalty = svc.penalty_per_hour * (end - start) as f64 / 3600.0;
        let viol = ViolationRec {
            id: uuid::Uuid::new_v4().to_string(),
            service_id: svc.id.clone(),
            vee_id: vee_id.into(),
            term: format!("availability: {lost} and the VEE could not be recovered ({why})"),
            start_unix: start,
            end_unix: end,
            penalty,
        };
        self.store.put(Tree::Violations, &viol.id, &viol)?;
        self.event(vee_id, &svc.id, "sla-violation", format!("{} (penalty {penalty:.2})", viol.term));
        self.transition(&mut v, VeeState::Failed, why.to_string())
    }
}
