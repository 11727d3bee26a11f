//! VEE actions (stop, suspend, resume, checkpoint, restore), the checkpoint
//! schedule and the window scheduler.

use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use interfaces::vhi::{CheckpointRequest, DestroyRequest, RestoreRequest, ShutdownRequest, VeeRef};
use interfaces::vmi;

use crate::error::VeemError;
use crate::manager::Veem;
use crate::model::{CheckpointRec, Location, VeeRec, VeeState};
use crate::store::Tree;

impl Veem {
    /// The host a VEE runs on, or an error saying where it is instead.
    fn local_host(v: &VeeRec) -> Result<String> {
        match &v.location {
            Location::Host(h) => Ok(h.clone()),
            Location::Site(s) => bail!("VEE {} runs at site {s}", v.id),
            Location::Nowhere => bail!("VEE {} is not placed", v.id),
        }
    }

    /// Applies a VMI VeeAction: stop | suspend | resume | checkpoint |
    /// restore (`checkpoint_id` empty = latest valid) | withdraw (operator of
    /// a site running the VEE for a peer: give it back, see
    /// [`Veem::withdraw`]).
    pub async fn vee_action(self: &Arc<Self>, vee_id: &str, action: vmi::Action, checkpoint_id: &str) -> Result<VeeRec> {
        if let Location::Site(site) = self.vee(vee_id)?.location {
            self.forward_action(&site, vee_id, action, checkpoint_id).await?;
            let v = self.vee(vee_id)?;
            if action == vmi::Action::Stop {
                // No longer abroad: an anchor here may go.
                self.sync_networks(&v.service_id).await;
            }
            return Ok(v);
        }
        match action {
            vmi::Action::Stop => self.stop_vee(vee_id).await?,
            vmi::Action::Suspend | vmi::Action::Resume => {
                let _g = self.lock_vee(vee_id).await;
                let mut v = self.vee(vee_id)?;
                let c = self.hosts.vhi(&Self::local_host(&v)?)?;
                let r = VeeRef { vee_id: vee_id.into() };
                if action == vmi::Action::Suspend {
                    c.suspend(tonic::Request::new(r)).await?;
                    self.transition(&mut v, VeeState::Suspended, "")?;
                } else {
                    c.resume(tonic::Request::new(r)).await?;
                    self.transition(&mut v, VeeState::Running, "")?;
                }
            }
            vmi::Action::Checkpoint => {
                self.checkpoint_vee(vee_id).await?;
            }
            vmi::Action::Restore => {
                self.restore_vee(vee_id, (!checkpoint_id.is_empty()).then_some(checkpoint_id))
                    .await?
            }
            vmi::Action::Withdraw => self.withdraw(vee_id).await?,
            vmi::Action::Unspecified => return Err(VeemError::field("action", "unset").into()),
        }
        self.vee(vee_id)
    }

    /// Stops a VEE (ACPI, then destroy) and releases its reservation.
    pub async fn stop_vee(&self, vee_id: &str) -> Result<()> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        if let Location::Host(h) = &v.location {
            let c = self.hosts.vhi(h)?;
            let _ = c
                .shutdown(tonic::Request::new(ShutdownRequest {
                    vee_id: vee_id.into(),
                    timeout_s: 5,
                }))
                .await;
            c.destroy(tonic::Request::new(DestroyRequest {
                vee_id: vee_id.into(),
                remove: true,
            }))
            .await?;
        }
        if v.state != VeeState::Stopped {
            self.transition(&mut v, VeeState::Stopped, "")?;
        }
        let _ = self.planner.lock().unwrap().release_vee(vee_id);
        self.persist_planner()?;
        v.location = Location::Nowhere;
        self.transition(&mut v, VeeState::Terminated, "")
    }

    /// Takes a whole-VM checkpoint of a running VEE (H §4.4) and records it;
    /// its blobs are pinned in the image repository.
    pub async fn checkpoint_vee(&self, vee_id: &str) -> Result<CheckpointRec> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        if v.state != VeeState::Running {
            bail!("VEE {vee_id} is {}, not running", v.state.as_str());
        }
        let host = Self::local_host(&v)?;
        self.transition(&mut v, VeeState::Checkpointing, format!("on {host}"))?;
        let r = self
            .hosts
            .vhi(&host)?
            .checkpoint(tonic::Request::new(CheckpointRequest {
                vee_id: vee_id.into(),
                stop_after: false,
            }))
            .await;
        let rec = match r {
            Ok(r) => r.into_inner(),
            Err(e) => {
                self.transition(&mut v, VeeState::Running, format!("checkpoint failed: {}", e.message()))?;
                bail!("checkpoint of {vee_id}: {}", e.message());
            }
        };
        let cp = self.record_checkpoint(&mut v, &rec, &format!("on {host}")).await?;
        self.transition(&mut v, VeeState::Running, "")?;
        Ok(cp)
    }

    /// Records checkpoint `rec` of VEE `v` (taken here or `where_` at a
    /// peer site) as its latest, pinning its blobs in the image repository
    /// (and sharing them with the primary site of a VEE run for a peer).
    pub(crate) async fn record_checkpoint(
        &self,
        v: &mut VeeRec,
        rec: &interfaces::vhi::CheckpointRecord,
        where_: &str,
    ) -> Result<CheckpointRec> {
        let cp = CheckpointRec::new(rec);
        if let Some(primary) = &v.for_peer {
            // Taken for a peer: its primary site restores it anywhere.
            if let Err(e) = self
                .share_blobs(vec![rec.memory_blob.clone(), rec.disk_blob.clone()], primary)
                .await
            {
                tracing::warn!(vee = %v.id, %primary, error = %format!("{e:#}"), "cannot share checkpoint blobs with the primary site");
            }
        }
        for blob in [&rec.memory_blob, &rec.disk_blob] {
            if let Ok(id) = blob.parse() {
                if let Err(e) = self.repo.pin(&id, &format!("{}-checkpoint-{}", self.cfg.site_id, cp.id)).await {
                    tracing::warn!(%blob, error = %e, "cannot pin checkpoint blob");
                }
            }
        }
        self.store.put(Tree::Checkpoints, &cp.id, &cp)?;
        v.latest_checkpoint = Some(cp.id.clone());
        v.last_checkpoint_ms = Some(self.clock.now_ms());
        self.save_vee(v)?;
        self.event(
            &v.id,
            &v.service_id,
            "checkpointed",
            format!("{} {where_} ({} ms downtime)", cp.id, rec.downtime_ms),
        );
        Ok(cp)
    }

    /// The latest valid checkpoint of a VEE, or the named one.
    pub fn checkpoint_of(&self, vee_id: &str, id: Option<&str>) -> Result<Option<CheckpointRec>> {
        if let Some(id) = id {
            let cp: CheckpointRec = self
                .store
                .get(Tree::Checkpoints, id)?
                .ok_or_else(|| VeemError::not_found("checkpoint", id))?;
            if cp.vee_id != vee_id {
                bail!("checkpoint {id} is not of VEE {vee_id}");
            }
            return Ok(Some(cp));
        }
        let mut all: Vec<CheckpointRec> = self
            .store
            .list::<CheckpointRec>(Tree::Checkpoints)?
            .into_iter()
            .filter(|c| c.vee_id == vee_id && c.valid)
            .collect();
        all.sort_by_key(|c| c.taken_ms);
        Ok(all.pop())
    }

    /// Rolls a VEE back to a checkpoint on its current host.
    pub async fn restore_vee(&self, vee_id: &str, checkpoint_id: Option<&str>) -> Result<()> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        let host = Self::local_host(&v)?;
        let cp = self
            .checkpoint_of(vee_id, checkpoint_id)?
            .ok_or_else(|| anyhow!("VEE {vee_id} has no checkpoint"))?;
        let c = self.hosts.vhi(&host)?;
        c.destroy(tonic::Request::new(DestroyRequest {
            vee_id: vee_id.into(),
            remove: false,
        }))
        .await?;
        self.transition(&mut v, VeeState::Recovering, format!("restore {} on {host}", cp.id))?;
        c.restore(tonic::Request::new(RestoreRequest {
            spec: Some(self.spec_of(&v)),
            checkpoint: Some(cp.record()?),
            fence_owner: String::new(),
        }))
        .await?;
        self.transition(&mut v, VeeState::Running, format!("restored {} on {host}", cp.id))?;
        self.sync_networks(&v.service_id).await;
        Ok(())
    }

    /// Suspends a background VEE displaced by a stronger reservation.
    pub async fn preempt_background(&self, vee_id: &str) {
        let _g = self.lock_vee(vee_id).await;
        let Ok(mut v) = self.vee(vee_id) else { return };
        if let Location::Host(h) = &v.location {
            if let Ok(c) = self.hosts.vhi(h) {
                let _ = c.suspend(tonic::Request::new(VeeRef { vee_id: vee_id.into() })).await;
            }
        }
        let _ = self.transition(&mut v, VeeState::Suspended, "background VEE displaced to make room");
    }

    /// One scheduler round (every second): starts VEEs whose window
    /// opened, takes the checkpoints that are due, stops VEEs whose window
    /// closed; each in a task of its own.
    pub(crate) fn scheduler_round(self: &Arc<Self>) {
        let (now, ms) = (self.clock.now(), self.clock.now_ms());
        for v in self.vees_where(|v| due(v, now, ms).is_some()) {
            match due(&v, now, ms) {
                Some(Due::Deploy) => self.spawn_deploy(&v.id),
                Some(Due::Stop) => {
                    let veem = self.clone();
                    tokio::spawn(async move { veem.stop_vee(&v.id).await });
                }
                Some(Due::Checkpoint) if self.try_busy(&v.id) => {
                    let veem = self.clone();
                    tokio::spawn(async move {
                        let r = match &v.location {
                            Location::Site(s) => veem.forward_action(s, &v.id, vmi::Action::Checkpoint, "").await,
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
enum Due {
    /// Its window opened: deploy it on its planned host.
    Deploy,
    /// Its window closed: stop it.
    Stop,
    /// Its checkpoint period (seconds) has passed since the last one. A VEE
    /// at a peer site is checkpointed there, on this site's schedule.
    Checkpoint,
}

/// What is due for `v` at `now` (Unix seconds; `now_ms` the same in ms).
fn due(v: &VeeRec, now: i64, now_ms: i64) -> Option<Due> {
    match v.state {
        VeeState::Admitted if v.window_start_unix <= now && v.host().is_some() => Some(Due::Deploy),
        VeeState::Running if v.window_end_unix <= now && v.host().is_some() => Some(Due::Stop),
        VeeState::Running if v.for_peer.is_none() => {
            let every = v.checkpoint_interval_s?;
            let last = v.last_checkpoint_ms.unwrap_or(v.updated_ms);
            (now_ms - last >= every as i64 * 1000).then_some(Due::Checkpoint)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
