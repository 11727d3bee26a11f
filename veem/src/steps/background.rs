//! Displacing a background VEE (H §3.2.2, §4: background VEEs give way
//! to stronger reservations; issue 37: a leaf Deploy, recovery and
//! remapping share).

use std::ops::Deref;
use std::sync::Arc;

use interfaces::vhi::{CheckpointRequest, DestroyRequest};

use crate::core::Core;
use crate::model::{Location, VeeState};
use crate::steps::checkpoints::{Checkpoints, Origin};

/// Background VEEs displaced to make room (H §4). A leaf Deploy, recovery and remapping share. Calls the core and the checkpoints.
pub struct Background {
    core: Arc<Core>,
    pub(crate) checkpoints: Arc<Checkpoints>,
}

impl Deref for Background {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Background {
    pub fn new(core: Arc<Core>, checkpoints: Arc<Checkpoints>) -> Self {
        Self { core, checkpoints }
    }

    /// Displaces a background VEE to make room for a stronger reservation
    /// (H §4: background VEEs give way during a recovery): its whole state
    /// is saved as a checkpoint and its domain stopped, so that the host's
    /// memory and vCPUs are really free; the VEE is `suspended` and placed
    /// nowhere until `resume_displaced` (the scheduler, `lifecycle`) finds it room again. When
    /// the checkpoint fails the domain is destroyed anyway (a background VEE
    /// has no guarantee) and it resumes from its last checkpoint, or its
    /// images.
    pub async fn preempt_background(&self, vee_id: &str) {
        let _g = self.lock_vee(vee_id).await;
        let Ok(mut v) = self.vee(vee_id) else { return };
        let mut saved = "no state saved".to_string();
        if let (Location::Host(h), true) = (v.location.clone(), v.state.is_live()) {
            if let Ok(c) = self.hosts.host(&h) {
                let req = CheckpointRequest {
                    vee_id: vee_id.into(),
                    stop_after: true,
                };
                match c.checkpoint(req).await {
                    Ok(rec) => match self
                        .checkpoints
                        .record_checkpoint(&mut v, &rec, &format!("on {h}, displaced"), Origin::Here)
                        .await
                    {
                        Ok(cp) => saved = format!("saved as checkpoint {}", cp.id),
                        Err(e) => tracing::warn!(vee = %vee_id, error = %format!("{e:#}"), "cannot record the displaced VEE's checkpoint"),
                    },
                    Err(e) => tracing::warn!(vee = %vee_id, host = %h, error = %e.message(), "cannot save a displaced background VEE"),
                }
                let destroy = DestroyRequest {
                    vee_id: vee_id.into(),
                    remove: true,
                };
                if let Err(e) = c.destroy(destroy).await {
                    tracing::warn!(vee = %vee_id, host = %h, error = %e.message(), "cannot remove a displaced background VEE");
                }
            }
        }
        v.location = Location::Nowhere;
        let why = format!("background VEE displaced to make room ({saved}); resumes when capacity returns");
        if let Err(e) = self.transition(&mut v, VeeState::Suspended, why) {
            tracing::warn!(vee = %vee_id, error = %format!("{e:#}"), "cannot record the displacement");
        }
    }
}
