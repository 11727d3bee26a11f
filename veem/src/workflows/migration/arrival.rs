//! Whether a VEE whose send failed arrived at its destination anyway.
//!
//! The send of a migration can fail on the caller's side only: the
//! source's VEEM (a peer site's, for a VEE coming home) or VEEH went away
//! mid-call, while the hypervisor finished the live migration (a VEEH runs
//! every call that changes a domain to its end, and libvirt resumes the
//! domain at the destination once it has it all). Aborting the destination
//! then would destroy the only copy of the VEE, whose source has already
//! let it go. So before it aborts, a migration asks its destination host
//! what it runs: a domain that runs there is the VEE, arrived (completed,
//! not aborted); a paused one is still arriving (asked again); none, or a
//! host that does not answer, is a migration that failed.
//!
//! The other way round, a send that succeeded leaves the VEE at its
//! destination only: its completion is retried while the destination is
//! away (a peer site's takeover, a VEEH restarting), and a destination that
//! does not take it within [`COMPLETION`] leaves the migration running
//! ([`NotTaken`]), for the leader to settle (`settle`), never recorded failed
//! with the VEE "staying" at a source that no longer runs it (the source
//! site then started a second copy: the chaos run, issue 52).

use std::time::Duration;

use interfaces::retry::RetryPolicy;
use interfaces::vhi::VeeState;

use super::Migration;
use crate::domain::migration::Dest;

/// How long a migration in flight at the hypervisor is waited for.
const ARRIVAL: Duration = Duration::from_secs(60);
/// How long, and how often, a destination is asked to complete a VEE sent
/// to it: 15 times, 2 s apart.
const COMPLETION: (u32, Duration) = (15, Duration::from_secs(2));

/// A VEE sent whose destination did not take it (see the module doc):
/// the migration stays running, the VEE migrating.
#[derive(Debug, thiserror::Error)]
#[error("the VEE left its source but its destination did not take it: {0}; the leader settles the migration from where the VEE is (every usage_interval)")]
pub struct NotTaken(pub String);

impl Migration {
    /// Completes VEE `vee_id`, sent, at `dest`, retried as
    /// [`COMPLETION`] says (a destination site that will not complete it
    /// again but runs it counts as completed). Errors: [`NotTaken`].
    pub(super) async fn complete_after_send(&self, dest: &Dest, vee_id: &str) -> Result<(), NotTaken> {
        let (attempts, wait) = COMPLETION;
        crate::ports::retry(&*self.clock, RetryPolicy::fixed(attempts, wait), || self.completed_at(dest, vee_id))
            .await
            .map_err(|e| NotTaken(e.to_string()))
    }

    /// Whether VEE `vee_id`, whose send to `dest` failed, runs there
    /// anyway (see the module doc). A destination site is not asked: its
    /// own VEEM aborts or completes what it prepared.
    pub(super) async fn arrived(&self, dest: &Dest, vee_id: &str) -> bool {
        let Dest::Host(h) = dest else { return false };
        let started = self.clock.now_ms();
        loop {
            let Ok(c) = self.hosts.host(h) else { return false };
            let state = match c.domains().await {
                Ok(ds) => ds.into_iter().find(|d| d.vee_id == vee_id).map(|d| d.state()),
                Err(_) => return false,
            };
            match state {
                Some(VeeState::Running) => return true,
                Some(VeeState::Paused) if self.clock.since_ms(started) < ARRIVAL.as_millis() as u64 => {
                    self.clock.sleep(Duration::from_secs(1)).await;
                }
                _ => return false,
            }
        }
    }
}
