//! A VEE stopped for good, wherever it runs: on a host here (the guest shut
//! down, its domain destroyed, its reservation and a peer's spare for it
//! released) or at a peer site (the stop forwarded, the spare kept for it
//! there released). What a provider's stop, an undeploy, a scale-in and
//! the scheduler's closing window share.

use std::ops::Deref;
use std::sync::Arc;

use interfaces::vhi::DestroyRequest;

use crate::core::{Core, RecordError};
use crate::domain::Action;
use crate::model::{Location, VeeRec, VeeState};
use crate::ports::call::CallError;
use crate::steps::abroad::{Abroad, AbroadError};
use crate::steps::boot::Boot;
use crate::steps::networks::Networks;
use crate::steps::spares::Spares;
use crate::store::StoreError;

/// Why a VEE was not stopped. Each variant's status is in
/// `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum StopError {
    /// No such VEE, or its record could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Its host could not destroy the domain (or is not one of this
    /// site's).
    #[error("{host}: {call}")]
    Host { host: String, call: CallError },
    /// The peer site running it refused, or could not be called.
    #[error(transparent)]
    Abroad(#[from] AbroadError),
    /// The reservation's release could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Stopping VEEs (see the module doc). Calls the core, booting (the clean
/// shutdown), the networks, spares and actions abroad.
pub struct Stop {
    core: Arc<Core>,
    abroad: Arc<Abroad>,
    boot: Arc<Boot>,
    networks: Arc<Networks>,
    spares: Arc<Spares>,
}

impl Deref for Stop {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Stop {
    pub fn new(core: Arc<Core>, abroad: Arc<Abroad>, boot: Arc<Boot>, networks: Arc<Networks>, spares: Arc<Spares>) -> Self {
        Self {
            core,
            abroad,
            boot,
            networks,
            spares,
        }
    }

    /// Stops VEE `vee_id` (the VMI's VeeAction STOP) and returns its
    /// record: at the peer site that runs it, forwarded (then its anchor
    /// here and the spare kept for it may go), else [`Stop::stop_here`].
    /// Errors: a VEE not found, the peer's refusal, a store error.
    pub async fn stop(&self, vee_id: &str) -> Result<VeeRec, StopError> {
        if let Location::Site(site) = self.vee(vee_id)?.location {
            self.abroad.forward_action(&site, vee_id, Action::Stop, "").await?;
            let v = self.vee(vee_id)?;
            // No longer abroad: an anchor here may go, and so does the
            // spare kept for it.
            self.networks.sync_networks(&v.service_id).await;
            self.spares.release_spare_of_stopped_abroad(vee_id).await?;
            return Ok(v);
        }
        self.stop_here(vee_id).await?;
        Ok(self.vee(vee_id)?)
    }

    /// Stops a VEE placed here (or nowhere) and releases its reservation:
    /// the guest is asked to shut down (guest agent or ACPI power button)
    /// and its domain destroyed after `stop_timeout` if it has not; the
    /// `stopped` event says which; the VEE ends `terminated`. Errors: the
    /// host's refusal to destroy the domain, a store error.
    pub async fn stop_here(&self, vee_id: &str) -> Result<(), StopError> {
        let _g = self.lock_vee(vee_id).await;
        let mut v = self.vee(vee_id)?;
        let mut how = String::new();
        if let Location::Host(h) = &v.location {
            let failed = |call| StopError::Host { host: h.clone(), call };
            how = self.boot.shut_down(h, vee_id).await.map_err(failed)?;
            self.hosts
                .host(h)
                .map_err(failed)?
                .destroy(DestroyRequest {
                    vee_id: vee_id.into(),
                    remove: true,
                })
                .await
                .map_err(failed)?;
        }
        if v.state != VeeState::Stopped {
            self.transition(&mut v, VeeState::Stopped, how)?;
        }
        let spare = self.spares.spare_site(vee_id);
        let _ = self.planner.lock().unwrap().release_vee(vee_id);
        self.spares.release_peer_spare_of(vee_id, spare).await;
        self.persist_planner()?;
        v.location = Location::Nowhere;
        Ok(self.transition(&mut v, VeeState::Terminated, "")?)
    }
}
