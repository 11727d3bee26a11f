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

use std::time::Duration;

use interfaces::vhi::VeeState;

use super::Migration;
use crate::domain::migration::Dest;

/// How long a migration in flight at the hypervisor is waited for.
const ARRIVAL: Duration = Duration::from_secs(60);

impl Migration {
    /// Whether VEE `vee_id`, whose send to `dest` failed, runs there
    /// anyway (see the module doc). A destination site is not asked: its
    /// own VEEM aborts or completes what it prepared.
    pub(super) async fn arrived(&self, dest: &Dest, vee_id: &str) -> bool {
        let Dest::Host(h) = dest else { return false };
        let started = tokio::time::Instant::now();
        loop {
            let Ok(c) = self.hosts.vhi(h) else { return false };
            let state = match crate::ports::domains(&*c).await {
                Ok(ds) => ds.into_iter().find(|d| d.vee_id == vee_id).map(|d| d.state()),
                Err(_) => return false,
            };
            match state {
                Some(VeeState::Running) => return true,
                Some(VeeState::Paused) if started.elapsed() < ARRIVAL => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                _ => return false,
            }
        }
    }
}
