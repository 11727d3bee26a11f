//! What the host does with the guest itself: its clean shutdown, its clock
//! after it was paused, and its first-boot data (the NoCloud seed).

use std::time::Duration;

use anyhow::{Context, Result};
use interfaces::vhi::{self, HostEventKind};

use super::{host_event, Host};
use crate::hypervisor::GuestClock;
use crate::vee_store::VeeRecord;

impl Host {
    /// Asks the guest to shut down; destroys its domain if it has not
    /// within `timeout_s` seconds (at least 1).
    pub async fn shutdown(&self, vee_id: &str, timeout_s: u64) -> Result<vhi::ShutdownResponse> {
        let id = vee_id.to_string();
        let timeout = Duration::from_secs(timeout_s.max(1));
        let clean = self.blocking(move |hv| hv.shutdown(&id, timeout)).await?;
        self.release_networks(vee_id).await?;
        let detail = if clean {
            "the guest shut down".to_string()
        } else {
            format!("destroyed: the guest did not shut down within {}s", timeout.as_secs())
        };
        tracing::info!(vee = %vee_id, clean, "{detail}");
        self.event(vee_id, HostEventKind::Stopped, detail);
        Ok(vhi::ShutdownResponse {
            status: Some(self.status(vee_id).await?),
            clean,
        })
    }

    /// Sets the guest's clock to the host's in the background (the guest
    /// agent's guest-set-time; `after` says what paused it), with an event
    /// and a log line either way.
    pub fn sync_guest_clock(&self, vee_id: &str, after: &'static str) {
        let (hv, events, id) = (self.hv.clone(), self.events.clone(), vee_id.to_string());
        tokio::spawn(async move {
            let vid = id.clone();
            let detail = match tokio::task::spawn_blocking(move || hv.sync_guest_time(&vid)).await {
                Ok(Ok(GuestClock::Set)) => format!("set to the host's time after {after}"),
                Ok(Ok(GuestClock::NotSet(why))) => format!("not set after {after}: {why}"),
                Ok(Err(e)) => format!("not set after {after}: {e:#}"),
                Err(e) => format!("not set after {after}: {e}"),
            };
            tracing::info!(vee = %id, "guest clock {detail}");
            let _ = events.send(host_event(&id, HostEventKind::GuestClock, detail));
        });
    }

    /// Writes `rec`'s NoCloud seed disk, if it has first-boot data
    /// (`crate::seed`).
    pub async fn write_seed(&self, rec: &VeeRecord) -> Result<()> {
        if let Some(c) = rec.cloud_init.clone() {
            let (path, id) = (self.vees.seed(&rec.vee_id), rec.vee_id.clone());
            tokio::task::spawn_blocking(move || crate::seed::write(&path, &id, &c))
                .await?
                .with_context(|| format!("VEE {}: the NoCloud seed (field `cloud_init`)", rec.vee_id))?;
        }
        Ok(())
    }
}
