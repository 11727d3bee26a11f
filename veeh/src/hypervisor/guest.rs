//! What the VEEH asks of the guest itself: a clean shutdown (the guest
//! agent's `guest-shutdown`, else the ACPI power button) and its clock set
//! after it was paused (the guest agent's `guest-set-time`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use virt::sys;

use super::{is_no_domain, Hypervisor};

/// How long libvirt waits for the guest agent's answer, in seconds (its
/// default is to wait for ever).
const AGENT_TIMEOUT_S: i32 = 5;

/// How often a shutdown request is made again while the guest has not shut
/// down (Nova's libvirt driver: `SHUTDOWN_RETRY_INTERVAL`, 10 s).
pub const SHUTDOWN_RETRY: Duration = Duration::from_secs(10);

/// Whether the guest's clock was set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestClock {
    /// Set to this host's time through the guest agent.
    Set,
    /// Not set, with libvirt's reason (most often: the guest runs no agent,
    /// so its clock stays behind by the time it was paused or saved).
    NotSet(String),
}

impl Hypervisor {
    /// Asks the guest to shut down (libvirt's default: the guest agent if
    /// one answers, else the ACPI power button), again every
    /// [`SHUTDOWN_RETRY`] as Nova does (a guest still booting when asked
    /// has no one listening yet); after `timeout` the domain is destroyed.
    /// A paused guest could not act on the request: it runs again first.
    /// Returns true when the guest shut down by itself.
    pub fn shutdown(&self, vee_id: &str, timeout: Duration) -> Result<bool> {
        self.on_domain("shutdown", vee_id, |d| {
            if matches!(d.state()?.0, virt::enumutil::Enum::Known(virt::domain::DomainState::Paused)) {
                d.resume()?;
            }
            Ok(())
        })?;
        let start = Instant::now();
        let mut asked: Option<Instant> = None;
        while start.elapsed() < timeout {
            if asked.is_none_or(|t| t.elapsed() >= SHUTDOWN_RETRY) {
                // Gone meanwhile: the check below says so.
                let _ = self.on_domain("shutdown", vee_id, |d| {
                    let _ = d.shutdown();
                    Ok(())
                });
                asked = Some(Instant::now());
            }
            if self.state(vee_id)?.is_none() {
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        self.destroy(vee_id)?;
        Ok(false)
    }

    /// Sets the guest's clock to this host's (`virDomainSetTime` through the
    /// guest agent, as Nova does after a resume): a restored, resumed or
    /// migrated guest's clock is otherwise behind by the time it was paused.
    /// Errors: only when the domain is gone; a guest without an agent is
    /// [`GuestClock::NotSet`].
    pub fn sync_guest_time(&self, vee_id: &str) -> Result<GuestClock> {
        let r = self.on_domain("sync_guest_time", vee_id, |d| {
            // SAFETY: a valid domain handle for the call's duration.
            unsafe { sys::virDomainAgentSetResponseTimeout(d.as_ptr(), AGENT_TIMEOUT_S, 0) };
            let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
            d.set_time(now.as_secs() as i64, now.subsec_nanos() as i32, 0)?;
            Ok(())
        });
        match r {
            Ok(()) => Ok(GuestClock::Set),
            Err(e) if is_no_domain(&e) => Err(e),
            Err(e) => Ok(GuestClock::NotSet(format!("{e:#}"))),
        }
    }
}
