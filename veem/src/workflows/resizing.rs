//! Vertical elasticity (issue 40, item 5; DESIGN.md §13): a running VEE
//! resized in place, `veem resize VEE --vcpus N --memory MiB` (VMI
//! ResizeVee). Within the maxima its component set at deploy
//! (`max_vcpus`, `max_memory_mib`: the domain is created with them, the
//! extra vCPUs offline and the extra memory held by the virtio balloon),
//! and admitted by the planner like any change: the VEE's reservation (and
//! its enhanced spare) holds the new size on its host from now on, growth
//! only where every slot has room ([`crate::planner::Planner::resize_vee`]).
//! Then the VEEH resizes the domain live (VHI Resize: vCPU hot-plug or
//! unplug, the balloon's target); when it cannot (the machine, or a guest
//! without the driver), the reservation goes back and the error says why.
//! A VEE at a peer site is not resized yet (refused with the reason).

use std::ops::Deref;
use std::sync::Arc;

use interfaces::vhi::ResizeRequest;

use crate::core::{Core, RecordError};
use crate::model::{Location, VeeRec, VeeState};
use crate::planner::PlanError;
use crate::ports::call::CallError;
use crate::store::StoreError;

/// Why a resize did not happen: nothing changed (the reservation given
/// back when the host could not). The VMI's status of each variant is in
/// `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum ResizeError {
    /// A request field out of range: 0, or above the VEE's maximum
    /// (InvalidArgument).
    #[error("field `{field}`: {reason}")]
    Field { field: &'static str, reason: String },
    /// No such VEE, or its record could not be read or written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The VEE runs at a peer site, where it is not resized yet
    /// (FailedPrecondition).
    #[error("VEE {vee} runs at a peer site: it is not resized there yet")]
    Abroad { vee: String },
    /// The VEE is not running (FailedPrecondition).
    #[error("VEE {vee} is {state}, not running here")]
    NotRunning { vee: String, state: &'static str },
    /// The planner finds no room for the growth: the host and slot named
    /// (FailedPrecondition).
    #[error("reject: VEE {vee} cannot be resized: {reason}")]
    NoRoom { vee: String, reason: PlanError },
    /// The host could not resize the domain (the machine, or a guest
    /// without the driver); its failure decides the status.
    #[error("VEE {vee} was not resized on {host}: {}", .call.message)]
    Host { vee: String, host: String, call: CallError },
    /// The store refused or failed the reservation's write.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// See the module documentation. Calls the core only.
pub struct Resizing {
    pub(crate) core: Arc<Core>,
}

impl Deref for Resizing {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Resizing {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    /// Resizes running VEE `vee_id` to `vcpus` vCPUs and `memory_mib` MiB
    /// (`None`: as it is) and returns its record. Errors: NotFound;
    /// InvalidArgument naming `vcpus` or `memory_mib` (0, or above the
    /// VEE's maximum); a refusal (FailedPrecondition) when it is not
    /// running here, the planner finds no room for the growth (the host
    /// and slot named), or the host cannot (its reason), nothing changed.
    pub async fn resize(&self, vee_id: &str, vcpus: Option<u32>, memory_mib: Option<u64>) -> Result<VeeRec, ResizeError> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        let host = match (&v.location, v.state) {
            (Location::Host(h), VeeState::Running) => h.clone(),
            (Location::Site(_), _) => return Err(ResizeError::Abroad { vee: vee_id.into() }),
            _ => {
                return Err(ResizeError::NotRunning {
                    vee: vee_id.into(),
                    state: v.state.as_str(),
                })
            }
        };
        // Records before resizing: their size is their maximum.
        v.max_vcpus = v.max_vcpus.max(v.vcpus);
        v.max_memory_mib = v.max_memory_mib.max(v.memory_mib);
        let (new_vcpus, new_memory) = (vcpus.unwrap_or(v.vcpus), memory_mib.unwrap_or(v.memory_mib));
        check("vcpus", u64::from(new_vcpus), u64::from(v.max_vcpus), "", "max_vcpus")?;
        check("memory_mib", new_memory, v.max_memory_mib, " MiB", "max_memory_mib")?;
        if (new_vcpus, new_memory) == (v.vcpus, v.memory_mib) {
            return Ok(v);
        }
        let now = self.now_slot();
        let planned = self.planner.lock().unwrap().resize_vee(vee_id, new_vcpus, new_memory, now);
        let old = planned.map_err(|reason| ResizeError::NoRoom {
            vee: vee_id.into(),
            reason,
        })?;
        self.persist_planner()?;
        fail::fail_point!("resize-after-reservation");
        let r = match self.hosts.host(&host) {
            Ok(h) => {
                h.resize(ResizeRequest {
                    vee_id: vee_id.into(),
                    vcpus: new_vcpus,
                    memory_mib: new_memory,
                })
                .await
            }
            Err(e) => Err(e),
        };
        if let Err(call) = r {
            // Back to the old size: shrinking always fits.
            let back = self.planner.lock().unwrap().resize_vee(vee_id, old.vcpus, old.memory_mib, now);
            if let Err(b) = back.map_err(anyhow::Error::from).and_then(|_| Ok(self.persist_planner()?)) {
                tracing::warn!(vee = %vee_id, error = %format!("{b:#}"), "cannot give a failed resize's reservation back");
            }
            return Err(ResizeError::Host {
                vee: vee_id.into(),
                host,
                call,
            });
        }
        let what = format!("{} -> {new_vcpus} vCPUs, {} -> {new_memory} MiB on {host}", v.vcpus, v.memory_mib);
        (v.vcpus, v.memory_mib) = (new_vcpus, new_memory);
        self.save_vee(&v)?;
        self.event(vee_id, &v.service_id, "resized", what);
        Ok(v)
    }

    /// After a restart or takeover: a resize the VEEM died in the middle
    /// of (its reservation resized, its record not) is rolled back. Each
    /// running VEE on a host whose reservation's vCPUs or memory differ
    /// from its record gets its reservation back to the record's size
    /// (what it held before) and its domain resized to it (VHI Resize,
    /// the same size again when the host never resized it). Returns how
    /// many were rolled back; each is evented.
    pub async fn roll_back_cut_short(&self) -> usize {
        let mut n = 0;
        // Only those whose reservation differs from their record are
        // copied and locked (at 100,000 VEEs, copying and locking every
        // running one was about 6 % of the start-up's CPU time).
        let running = self.vees_map(|v| (v.state == VeeState::Running && v.host().is_some()).then(|| (v.id.clone(), v.vcpus, v.memory_mib)));
        let differ: Vec<String> = {
            let p = self.planner.lock().unwrap();
            running
                .into_iter()
                .filter(|(id, vcpus, mib)| p.reservation(id).is_some_and(|r| (r.resources.vcpus, r.resources.memory_mib) != (*vcpus, *mib)))
                .map(|(id, _, _)| id)
                .collect()
        };
        for id in differ {
            let _g = self.lock_vee(&id).await;
            let Ok(v) = self.vee(&id) else { continue };
            let Some(host) = v.host().map(str::to_string) else { continue };
            let held = self.planner.lock().unwrap().reservation(&v.id).map(|r| r.resources);
            let Some(held) = held.filter(|h| (h.vcpus, h.memory_mib) != (v.vcpus, v.memory_mib)) else {
                continue;
            };
            let back = self
                .planner
                .lock()
                .unwrap()
                .resize_vee(&v.id, v.vcpus, v.memory_mib, self.now_slot());
            if let Err(e) = back.map_err(anyhow::Error::from).and_then(|_| Ok(self.persist_planner()?)) {
                tracing::warn!(vee = %v.id, error = %format!("{e:#}"), "a resize cut short: its reservation not given back");
                continue;
            }
            let resized = match self.hosts.host(&host) {
                Ok(c) => c
                    .resize(ResizeRequest {
                        vee_id: v.id.clone(),
                        vcpus: v.vcpus,
                        memory_mib: v.memory_mib,
                    })
                    .await
                    .map(|_| ())
                    .map_err(|s| s.message().to_string()),
                Err(e) => Err(e.to_string()),
            };
            let what = format!(
                "a resize cut short by a VEEM restart or takeover: back to {} vCPUs, {} MiB (its reservation held {} vCPUs, {} MiB){}",
                v.vcpus,
                v.memory_mib,
                held.vcpus,
                held.memory_mib,
                resized
                    .err()
                    .map(|e| format!("; {host} did not resize it: {e}"))
                    .unwrap_or_default()
            );
            self.event(&v.id, &v.service_id, "reconcile", what);
            n += 1;
        }
        n
    }
}

/// `value` of request field `field` is 1 to `max` (the VEE's maximum, its
/// component's `limit_field`).
fn check(field: &'static str, value: u64, max: u64, unit: &str, limit_field: &str) -> Result<(), ResizeError> {
    if value == 0 {
        return Err(ResizeError::Field {
            field,
            reason: "must be at least 1".into(),
        });
    }
    if value > max {
        return Err(ResizeError::Field {
            field,
            reason: format!("{value}{unit} is more than this VEE's maximum of {max}{unit} (its component's `{limit_field}`, set at deploy)"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
