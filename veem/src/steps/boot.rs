//! Booting a VEE on a host (issue 37: a leaf several workflows share):
//! VHI Prepare (images pulled by ID, the overlay), Create, Start, with the
//! VEE's spec and its networks' member tables; an admitted VEE deployed on
//! its planned host (idempotent: one its host already runs is only marked
//! running), in the background when the scheduler finds it due.

use std::ops::Deref;
use std::sync::Arc;

use interfaces::vhi;

use crate::core::{Core, RecordError};
use crate::model::{VeeRec, VeeState};
use crate::ports::call::CallError;
use crate::steps::networks::Networks;

/// Why an admitted VEE was not booted on its host (it is `failed` then).
/// Each variant's status is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// No such VEE, a change its state table forbids, or its record could
    /// not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The VEE has no planned host.
    #[error("VEE {vee} has no host")]
    NoHost { vee: String },
    /// Its host could not prepare, create or start it.
    #[error("{host}: {call}")]
    Host { host: String, call: CallError },
}

/// Boots admitted VEEs on their hosts: a leaf Deploy, the scheduler, recovery, incoming VEEs and reconcile share. Calls the core and the networks.
pub struct Boot {
    core: Arc<Core>,
    pub(crate) networks: Arc<Networks>,
}

impl Deref for Boot {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Boot {
    pub fn new(core: Arc<Core>, networks: Arc<Networks>) -> Self {
        Self { core, networks }
    }

    /// Starts deploying `vee_id` in the background.
    pub fn spawn_deploy(self: &Arc<Self>, vee_id: &str) {
        if !self.try_busy(vee_id) {
            return;
        }
        let veem = self.clone();
        let id = vee_id.to_string();
        self.spawn(async move {
            if let Err(e) = veem.deploy_vee(&id).await {
                tracing::warn!(vee = %id, error = %format!("{e:#}"), "deploy failed");
            }
            veem.unbusy(&id);
        });
    }

    /// Boots VEE `v` from its images on `host`: VHI Prepare (pull images,
    /// create the overlay), Create, Start.
    pub async fn boot_on(&self, host: &str, v: &VeeRec) -> Result<(), CallError> {
        let c = self.hosts.host(host)?;
        let spec = self.networks.spec_of(v);
        c.prepare(vhi::PrepareRequest { spec: Some(spec.clone()) }).await?;
        c.create(vhi::CreateRequest { spec: Some(spec) }).await?;
        c.start(vhi::StartRequest { vee_id: v.id.clone() }).await?;
        Ok(())
    }

    /// Asks the guest of `vee_id` on `host` to shut down (VHI Shutdown:
    /// the guest agent or ACPI; the domain destroyed after `stop_timeout`
    /// if it has not) and says how it went: a clean shutdown, a power-off
    /// and why, or no domain. The caller removes the domain. Errors: the
    /// host is not one of the site's.
    pub async fn shut_down(&self, host: &str, vee_id: &str) -> Result<String, CallError> {
        let c = self.hosts.host(host)?;
        let timeout_s = self.cfg.stop_timeout.as_secs().max(1);
        let r = c
            .shutdown(vhi::ShutdownRequest {
                vee_id: vee_id.into(),
                timeout: interfaces::time::duration_s(timeout_s),
            })
            .await;
        Ok(match r {
            Ok(r) if r.clean => "the guest shut down".into(),
            Ok(_) => format!("powered off: the guest did not shut down within stop_timeout ({timeout_s}s)"),
            Err(e) if e.is_not_found() => "its domain was already gone".into(),
            Err(e) => format!("powered off: shutdown failed: {}", e.message),
        })
    }

    /// Prepares, creates and starts one admitted VEE on its planned host.
    /// Idempotent: a VEE already running there is only marked running.
    pub async fn deploy_vee(&self, vee_id: &str) -> Result<(), BootError> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        if !matches!(v.state, VeeState::Admitted | VeeState::Deploying) {
            return Ok(());
        }
        let Some(host) = v.host().map(str::to_string) else {
            return Err(BootError::NoHost { vee: vee_id.into() });
        };
        if v.state == VeeState::Admitted {
            self.transition(&mut v, VeeState::Deploying, format!("on {host}"))?;
        }
        let result = self.boot_on(&host, &v).await;
        let result = match result {
            // Whatever failed, a VEE its host runs is running.
            Err(e) => match self.hosts.host(&host).map_err(|call| BootError::Host { host: host.clone(), call })?.domains().await {
                Ok(l)
                    if l.iter()
                        .any(|d| d.vee_id == vee_id && d.state() == interfaces::vhi::VeeState::Running) =>
                {
                    Ok(())
                }
                _ => Err(e),
            },
            ok => ok,
        };
        match result {
            Ok(()) => {
                self.transition(&mut v, VeeState::Running, format!("on {host}"))?;
                self.networks.sync_networks(&v.service_id).await;
                Ok(())
            }
            Err(call) => {
                self.transition(&mut v, VeeState::Failed, format!("deploy on {host}: {call}"))?;
                Err(BootError::Host { host, call })
            }
        }
    }
}
