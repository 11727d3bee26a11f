//! A VEE that runs at a peer site, acted on from its primary: the action
//! forwarded over the VMI (VeeAction) and the peer's answer checked before
//! it changes the record (E §3.4; DESIGN.md §7).

use std::ops::Deref;
use std::sync::Arc;

use crate::core::{Core, RecordError};
use crate::domain::{Action, StateMachine};
use crate::ports::call::CallError;
use crate::steps::checkpoints::{Checkpoints, Origin};

/// Why an action forwarded to a peer site did not happen, or was not
/// recorded here. Each variant's status is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum AbroadError {
    /// The peer site refused, or could not be called.
    #[error("site {site}: {}", .call.message)]
    Peer { site: String, call: CallError },
    /// The VEE's record (or its checkpoint's) could not be read or written.
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// Actions on VEEs at peer sites (see the module doc). Calls the core, its
/// peers and checkpoint records.
pub struct Abroad {
    core: Arc<Core>,
    checkpoints: Arc<Checkpoints>,
}

impl Deref for Abroad {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Abroad {
    pub fn new(core: Arc<Core>, checkpoints: Arc<Checkpoints>) -> Self {
        Self { core, checkpoints }
    }

    /// Forwards `action` on VEE `vee_id`, which runs at peer `site`
    /// (`checkpoint_id` for a restore, empty for the latest); a checkpoint
    /// taken there is recorded here too, so that it can be restored at any
    /// site (both pull its blobs by ID: B §2; DESIGN.md §7). The peer's
    /// new state is taken when the VEE can make that change, ignored with a
    /// warning when not. Errors: the peer's refusal, naming the site; the
    /// records'.
    pub async fn forward_action(&self, site: &str, vee_id: &str, action: Action, checkpoint_id: &str) -> Result<(), AbroadError> {
        let peer_failed = |call| AbroadError::Peer { site: site.into(), call };
        let info = self
            .peer(site)
            .map_err(peer_failed)?
            .vee_action(vee_id, action, checkpoint_id)
            .await
            .map_err(peer_failed)?;
        let mut v = self.vee(vee_id)?;
        if let Some(rec) = info.checkpoint.as_ref().filter(|_| action == Action::Checkpoint) {
            self.checkpoints
                .record_checkpoint(
                    &mut v,
                    rec,
                    &format!("at {site}"),
                    Origin::Peer {
                        site: site.to_string(),
                        replication: info.checkpoint_replication,
                    },
                )
                .await?;
        }
        match info.state {
            Some(state) if state == v.state => {}
            Some(state) if v.state.can_become(state) => self.transition(&mut v, state, format!("at {site}"))?,
            // A peer's word is checked, not trusted.
            other => {
                tracing::warn!(vee = %vee_id, %site, from = v.state.as_str(), to = ?other.map(|s| s.as_str()), "peer reports a state change the VEE cannot make; ignored")
            }
        }
        Ok(())
    }
}
