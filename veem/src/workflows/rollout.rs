//! Rolling image updates (issue 40, item 4; DESIGN.md §13): `veem update
//! SERVICE COMPONENT --image ID` replaces the component's instances with
//! the new image `max_unavailable` at a time, lowest index first, in place:
//! each keeps its VEE ID, index, name, addresses (MACs too), host and
//! reservation (the image changes nothing the planner reserves, so the
//! placement, affinity and guarantee level's spares stay as admitted).
//!
//! One instance: its guest is shut down cleanly and its domain removed
//! (VHI Shutdown, Destroy), it is booted from the new image (Prepare,
//! Create, Start: a fresh disk overlay, as a new instance), and the
//! rollout waits until it runs and answers on each TCP port its NICs
//! declare (VHI Probe, from its host) before the next. An instance that
//! does not boot or answer within the rollout's `ready_timeout` goes back
//! to the old image, the rollout stops (failed, with the reason) and the
//! instances not replaced yet stay on the old image. `--rollback` is a new
//! rollout from the image the last one gave to the one it replaced.
//!
//! The checkpoints of the component's VEEs are all kept while a rollout
//! rolls (`checkpoints_kept` waits for its end), so that an instance can
//! be restored to its old image and state by hand (`veem restore VEE
//! CHECKPOINT`); recovery restores only checkpoints of a VEE's current
//! image. Instances running at a peer site are not replaced: a rollout
//! with one is refused (withdraw it first). No scaling while a rollout
//! rolls (refused with the reason). A VEEM that restarts goes on with a
//! rolling rollout ([`Rollouts::resume_all`]): an instance it had booted
//! on the new image is only waited for; one it had begun to replace (left
//! deploying, its old domain perhaps removed, reconcile leaving it to the
//! rollout) is booted on the new image.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use interfaces::vhi::{DestroyRequest, ProbeRequest};

use crate::core::{Core, RecordError};
use crate::domain::rollout::{RolloutRec, RolloutState, ROLLOUT_FORMAT};
use crate::error::VeemError;
use crate::model::{Location, VeeRec, VeeState};
use crate::steps::boot::Boot;
use crate::steps::checkpoints::Checkpoints;
use crate::store::{StoreError, Tree};
use crate::workflows::deploy::Deploy;
use crate::workflows::scaling::{live, Scaling};

/// How long a replaced instance may take to run and answer when the
/// request does not say (s).
pub const DEFAULT_READY_TIMEOUT_S: u64 = 300;
/// The longest `ready_timeout` a request may ask for (s).
pub const MAX_READY_TIMEOUT_S: u64 = 3600;

/// What a rolling update is asked to do.
#[derive(Clone, Debug, Default)]
pub struct UpdateRequest {
    pub service_id: String,
    pub component: String,
    /// The new image (empty with `rollback`).
    pub image: String,
    /// Instances replaced at once; 0 = 1.
    pub max_unavailable: u32,
    /// Undo the component's last rollout instead.
    pub rollback: bool,
    /// How long each replaced instance may take to run and answer (s); 0 =
    /// [`DEFAULT_READY_TIMEOUT_S`].
    pub ready_timeout_s: u64,
}

/// Why a rolling update did not start: nothing changed. Each variant's
/// status is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// A request field: `service_id` (run here for a peer), `component`,
    /// `image`, `ready_timeout`, `rollback`.
    #[error(transparent)]
    Request(#[from] VeemError),
    /// No such service, or its records could not be read.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A rollout of the component rolls already.
    #[error("a rollout of {component} to {to_image} is under way ({replaced} of {instances} replaced)")]
    Rolling {
        component: String,
        to_image: String,
        replaced: usize,
        instances: u32,
    },
    /// An instance does not run here: at a peer site, or stopped half-way
    /// (withdraw it, or wait).
    #[error("instance {instance} ({vee}) is {state} {place}: every instance must run at this site (withdraw it, or wait)")]
    NotHere {
        instance: u32,
        vee: String,
        state: &'static str,
        place: &'static str,
    },
    /// The rollout's record could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// See the module documentation. Calls the core, booting, checkpoint
/// records, Deploy (the new image checked as a manifest's) and scaling
/// (its per-service lock: a rollout starts when no scaling runs).
pub struct Rollouts {
    pub(crate) core: Arc<Core>,
    pub(crate) boot: Arc<Boot>,
    pub(crate) checkpoints: Arc<Checkpoints>,
    pub(crate) deploy: Arc<Deploy>,
    pub(crate) scaling: Arc<Scaling>,
}

impl Deref for Rollouts {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Rollouts {
    /// Starts a rolling update (see the module documentation) and returns
    /// its record, rolling; the instances are replaced in the background.
    /// Errors: NotFound (service); InvalidArgument naming the field
    /// (`component`, `image`: not one the provider may use,
    /// `max_unavailable`, `ready_timeout`, `rollback`: nothing to roll
    /// back); FailedPrecondition: a rollout of the component rolls, an
    /// instance is not running here (at a peer site, stopped half-way).
    pub async fn update(self: &Arc<Self>, r: UpdateRequest) -> Result<RolloutRec, UpdateError> {
        let lock = interfaces::locks::entry(&mut self.scaling.locks.lock().unwrap(), &r.service_id);
        let _no_scaling = lock.lock().await;
        let svc = self.service(&r.service_id)?;
        if svc.for_peer.is_some() {
            return Err(VeemError::field("service_id", "is run here for a peer site: update it at its primary site").into());
        }
        if r.ready_timeout_s > MAX_READY_TIMEOUT_S {
            return Err(VeemError::field("ready_timeout", format!("{} s is more than {MAX_READY_TIMEOUT_S} s", r.ready_timeout_s)).into());
        }
        let last = self.rollout(&r.service_id, &r.component)?;
        if let Some(l) = last.as_ref().filter(|l| l.state == RolloutState::Rolling) {
            return Err(UpdateError::Rolling {
                component: l.component.clone(),
                to_image: l.to_image.clone(),
                replaced: l.replaced.len(),
                instances: l.instances,
            });
        }
        let mut current: Vec<VeeRec> = self.vees_where(|v| v.service_id == r.service_id && v.component == r.component && live(v));
        current.sort_by_key(|v| v.instance);
        let Some(first) = current.first() else {
            return Err(VeemError::field("component", format!("service {} has no live instance of {:?}", r.service_id, r.component)).into());
        };
        if let Some(v) = current
            .iter()
            .find(|v| !matches!(v.location, Location::Host(_)) || v.state != VeeState::Running)
        {
            return Err(UpdateError::NotHere {
                instance: v.instance,
                vee: v.id.clone(),
                state: v.state.as_str(),
                place: match &v.location {
                    Location::Site(_) => "at a peer site",
                    _ => "here",
                },
            });
        }
        let from_image = first.image.clone();
        let to_image = match (r.rollback, last) {
            (true, Some(l)) => l.from_image,
            (true, None) => return Err(VeemError::field("rollback", format!("component {} was never updated", r.component)).into()),
            (false, _) if r.image.is_empty() => return Err(VeemError::field("image", "is required (or ask for a rollback)").into()),
            (false, _) => self
                .deploy
                .checked_image(&r.image, &svc.provider)
                .await
                .map_err(|e| VeemError::field("image", e))?,
        };
        if current.iter().all(|v| v.image == to_image) {
            return Err(VeemError::field("image", format!("every instance of {} runs {to_image} already", r.component)).into());
        }
        let rec = RolloutRec {
            format: ROLLOUT_FORMAT,
            service_id: r.service_id.clone(),
            component: r.component.clone(),
            from_image,
            to_image,
            max_unavailable: r.max_unavailable.max(1),
            rollback: r.rollback,
            state: RolloutState::Rolling,
            replaced: vec![],
            instances: current.len() as u32,
            reason: String::new(),
            started_ms: self.clock.now_ms(),
            ended_ms: None,
            ready_timeout_s: if r.ready_timeout_s == 0 {
                DEFAULT_READY_TIMEOUT_S
            } else {
                r.ready_timeout_s
            },
        };
        self.store
            .put(Tree::Rollouts, &RolloutRec::key(&rec.service_id, &rec.component), &rec)?;
        self.event(
            "",
            &rec.service_id,
            "rollout",
            format!(
                "{} {}: {} -> {}, {} at a time",
                if rec.rollback { "rollback of" } else { "update of" },
                rec.component,
                rec.from_image,
                rec.to_image,
                rec.max_unavailable
            ),
        );
        self.spawn_run(&rec);
        Ok(rec)
    }

    /// Goes on with every rolling rollout (a VEEM start).
    pub fn resume_all(self: &Arc<Self>) {
        match self.store.list::<RolloutRec>(Tree::Rollouts) {
            Ok(all) => all
                .iter()
                .filter(|r| r.state == RolloutState::Rolling)
                .for_each(|r| self.spawn_run(r)),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "cannot read the rollouts"),
        }
    }

    fn spawn_run(self: &Arc<Self>, rec: &RolloutRec) {
        let (this, service, component) = (self.clone(), rec.service_id.clone(), rec.component.clone());
        self.spawn(async move {
            if let Err(e) = this.run(&service, &component).await {
                tracing::warn!(service = %service, component = %component, error = %format!("{e:#}"), "rollout stopped");
            }
        });
    }

    /// Replaces the rollout's instances batch by batch until none is left
    /// (done) or one fails (failed).
    async fn run(&self, service_id: &str, component: &str) -> Result<()> {
        let key = RolloutRec::key(service_id, component);
        loop {
            let Some(mut rec) = self.rollout(service_id, component)? else {
                return Ok(());
            };
            if rec.state != RolloutState::Rolling {
                return Ok(());
            }
            let mut todo: Vec<VeeRec> =
                self.vees_where(|v| v.service_id == service_id && v.component == component && live(v) && !rec.replaced.contains(&v.id));
            todo.sort_by_key(|v| v.instance);
            if todo.is_empty() {
                rec.advance(RolloutState::Done)?;
                rec.ended_ms = Some(self.clock.now_ms());
                // The event before the record: whoever sees it done finds
                // the event too.
                self.event(
                    "",
                    service_id,
                    "rollout-done",
                    format!("{component}: {} instances on {}", rec.replaced.len(), rec.to_image),
                );
                self.store.put(Tree::Rollouts, &key, &rec)?;
                for id in &rec.replaced {
                    self.checkpoints.forget_old_checkpoints(id).await;
                }
                return Ok(());
            }
            todo.truncate(rec.max_unavailable as usize);
            let results = futures::future::join_all(todo.iter().map(|v| self.replace(&v.id, &rec))).await;
            let mut failed = Vec::new();
            for (v, r) in todo.iter().zip(results) {
                match r {
                    Ok(()) => rec.replaced.push(v.id.clone()),
                    Err(e) => failed.push(format!("instance {} ({}): {e:#}", v.instance, v.id)),
                }
            }
            if !failed.is_empty() {
                rec.advance(RolloutState::Failed)?;
                rec.ended_ms = Some(self.clock.now_ms());
                rec.reason = failed.join("; ");
                self.event("", service_id, "rollout-failed", format!("{component}: {}", rec.reason));
            }
            self.store.put(Tree::Rollouts, &key, &rec)?;
        }
    }

    /// Replaces one instance (see the module documentation); on a failure
    /// it goes back to the rollout's old image and the error says why and
    /// how it ended.
    async fn replace(&self, vee_id: &str, rec: &RolloutRec) -> Result<()> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        let Location::Host(host) = v.location.clone() else {
            bail!("it no longer runs at this site");
        };
        // Booted on the new image before a restart: only its answer is due.
        // Deploying: its replacement a restart cut short (its old domain
        // may be gone already), booted on the new image now.
        if !(v.image == rec.to_image && v.state == VeeState::Running) {
            if !matches!(v.state, VeeState::Running | VeeState::Deploying) {
                bail!("it is {}, not running", v.state.as_str());
            }
            if let Err(e) = self.boot_image(&mut v, &host, &rec.to_image, rec).await {
                let back = self.boot_back(&mut v, &host, rec).await;
                bail!("{e:#}; {back}");
            }
        }
        if let Err(e) = self.ready(&v, &host, Duration::from_secs(rec.ready_timeout_s)).await {
            let back = self.boot_back(&mut v, &host, rec).await;
            bail!("{e:#}; {back}");
        }
        self.event(
            vee_id,
            &v.service_id,
            "replaced",
            format!("{} instance {} on {host}: {}", v.component, v.instance, rec.to_image),
        );
        Ok(())
    }

    /// Boots `v` again on `host` from `image`: a clean shutdown, its domain
    /// and files removed, then as a new instance. Leaves it running, or
    /// deploying after an error.
    async fn boot_image(&self, v: &mut VeeRec, host: &str, image: &str, rec: &RolloutRec) -> Result<()> {
        let c = self.hosts.host(host)?;
        if v.state == VeeState::Running {
            self.transition(v, VeeState::Deploying, format!("rolling update on {host}: {} -> {image}", v.image))?;
        }
        let how = self.boot.shut_down(host, &v.id).await?;
        tracing::info!(vee = %v.id, "before a rolling update: {how}");
        let vee_id = v.id.clone();
        match c.destroy(DestroyRequest { vee_id, remove: true }).await {
            Err(e) if !e.is_not_found() => bail!("removing its domain: {}", e.message()),
            _ => {}
        }
        fail::fail_point!("rollout-after-destroy");
        v.image = image.to_string();
        v.image_since_ms = Some(self.clock.now_ms());
        self.save_vee(v)?;
        fail::fail_point!("rollout-after-image");
        self.boot.boot_on(host, v).await?;
        let how = if image == rec.to_image { "rolling update" } else { "rolled back" };
        Ok(self.transition(v, VeeState::Running, format!("{how} on {host}: {image}"))?)
    }

    /// `v` booted from the rollout's old image again; says how that went
    /// (a VEE that does not boot on it either is failed, for recovery).
    async fn boot_back(&self, v: &mut VeeRec, host: &str, rec: &RolloutRec) -> String {
        match self.boot_image(v, host, &rec.from_image, rec).await {
            Ok(()) => format!("it runs {} again", rec.from_image),
            Err(e) => {
                let _ = self.transition(v, VeeState::Failed, format!("rolled back on {host}: {e:#}"));
                format!("it did not boot on {} either ({e:#}): failed", rec.from_image)
            }
        }
    }

    /// Waits until `v` answers on every TCP port its NICs declare (VHI
    /// Probe from `host`, every second) for at most `timeout`; at once
    /// when it declares none. Errors: a port still silent, with the last
    /// answer.
    async fn ready(&self, v: &VeeRec, host: &str, timeout: Duration) -> Result<()> {
        let started = self.clock.now_ms();
        let c = self.hosts.host(host)?;
        for port in v.nics.iter().flat_map(|n| n.ports.iter().copied()) {
            loop {
                let r = c
                    .probe(ProbeRequest {
                        vee_id: v.id.clone(),
                        port: port.into(),
                        timeout: interfaces::time::duration_s(2),
                    })
                    .await;
                let why = match r {
                    Ok(a) if a.answered => break,
                    Ok(a) => a.detail,
                    Err(e) => e.message().to_string(),
                };
                if self.clock.since_ms(started) >= timeout.as_millis() as u64 {
                    bail!("port {port} did not answer within {} s: {why}", timeout.as_secs());
                }
                self.clock.sleep(Duration::from_secs(1)).await;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
