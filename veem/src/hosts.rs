//! The site's VEEHs: VHI clients, heartbeats and failure detection.
//!
//! Every `heartbeat_interval` the VEEM asks VEEHs for HostInfo: each of
//! them on a small site, the next of them in turn on a large one
//! ([`pacing`]: at most `max_heartbeats_per_second`); a host
//! that misses `heartbeat_miss_limit` heartbeats in a row is declared failed
//! and its VEEs go to recovery. A failed host that answers again comes back
//! up (empty: its VEEs were recovered elsewhere). A VEEH that answers as
//! another host or for another site (a port clash, a wrong endpoint) does
//! not count as an answer: the VEEM never acts on a host it cannot tell is
//! the one configured.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Result};
use interfaces::vhi::HostInfo;

use crate::config::HostEntry;
use crate::ports::{within, Clock, HostVhi};

pub use crate::domain::Health;

pub mod pacing;

struct HostConn {
    entry: HostEntry,
    vhi: Arc<HostVhi>,
    health: Health,
    info: Option<HostInfo>,
    /// Why its last answer was not its own (logged once per change).
    impostor: Option<String>,
    /// A host of this site before this VEEM started (the planner's records
    /// have it): silence counts against it from the start (issue 13 R3).
    known: bool,
    /// Why its last heartbeat got no answer (`None` once it answers).
    last_error: Option<String>,
}

/// The site's hosts: their VHI ports and health.
pub struct HostPool {
    hosts: Mutex<HashMap<String, HostConn>>,
    order: Vec<String>,
    site_id: String,
    /// The heartbeats' timeouts run on it.
    clock: Arc<dyn Clock>,
}

impl HostPool {
    /// The configured hosts `entries` of site `site_id`, each with its port
    /// in `ports`. Errors: a host without a port.
    pub fn new(site_id: &str, entries: &[HostEntry], ports: &HashMap<String, Arc<HostVhi>>, clock: Arc<dyn Clock>) -> Result<Self> {
        let mut hosts = HashMap::new();
        for e in entries {
            let vhi = ports.get(&e.name).ok_or_else(|| anyhow!("host {}: no VHI port", e.name))?.clone();
            hosts.insert(
                e.name.clone(),
                HostConn {
                    entry: e.clone(),
                    vhi,
                    health: Health::Unknown,
                    info: None,
                    impostor: None,
                    known: false,
                    last_error: None,
                },
            );
        }
        Ok(Self {
            hosts: Mutex::new(hosts),
            order: entries.iter().map(|e| e.name.clone()).collect(),
            site_id: site_id.to_string(),
            clock,
        })
    }

    /// Why `reply` is not host `name`'s of this site, if it is not.
    fn impostor(&self, name: &str, reply: &HostInfo) -> Option<String> {
        (reply.host != name || reply.site_id != self.site_id).then(|| {
            format!(
                "its endpoint answers as host {:?} of site {:?}, not as host {name:?} of site {:?}",
                reply.host, reply.site_id, self.site_id
            )
        })
    }

    /// Host `name`'s HostInfo (2 s timeout). Errors: an unknown host, no
    /// answer in time, or the VHI's error.
    async fn ask_info(&self, name: &str) -> Result<HostInfo> {
        let c = self.vhi(name)?;
        let mut req = tonic::Request::new(interfaces::vhi::GetHostInfoRequest {});
        req.set_timeout(Duration::from_secs(2));
        Ok(within(&*self.clock, Duration::from_secs(3), c.get_host_info(req))
            .await
            .ok_or_else(|| anyhow!("host {name} does not answer"))?
            .map_err(|e| match std::error::Error::source(&e) {
                // A transport error's message alone says "transport error".
                Some(why) => anyhow!("host {name}: {}: {}", e.message(), interfaces::error::chain(why)),
                None => anyhow!("host {name}: {}", e.message()),
            })?
            .into_inner())
    }

    /// Asks host `name` who it is (HostInfo, 2 s timeout). Errors when it
    /// does not answer or answers as another host or for another site.
    pub async fn identify(&self, name: &str) -> Result<()> {
        let reply = self.ask_info(name).await?;
        match self.impostor(name, &reply) {
            Some(why) => Err(anyhow!("host {name}: {why}")),
            None => Ok(()),
        }
    }

    /// Host names in configuration order.
    pub fn names(&self) -> Vec<String> {
        self.order.clone()
    }

    /// Host `name` as the workflows call it ([`crate::ports::host::Host`]).
    /// Errors: an unknown host, as a call that found nothing
    /// ([`Failure::NotFound`](crate::ports::call::Failure::NotFound)).
    pub fn host(&self, name: &str) -> Result<crate::ports::host::Host, crate::ports::call::CallError> {
        self.vhi(name).map(crate::ports::host::Host::new)
    }

    /// The VHI of host `name`. Errors: as [`Hosts::host`].
    pub fn vhi(&self, name: &str) -> Result<Arc<HostVhi>, crate::ports::call::CallError> {
        let hosts = self.hosts.lock().unwrap();
        let h = hosts.get(name).ok_or_else(|| crate::ports::call::CallError {
            failure: crate::ports::call::Failure::NotFound,
            message: format!("unknown host {name:?}"),
        })?;
        Ok(h.vhi.clone())
    }

    pub fn health(&self, name: &str) -> Health {
        self.hosts.lock().unwrap().get(name).map(|h| h.health).unwrap_or(Health::Unknown)
    }

    pub fn info(&self, name: &str) -> Option<HostInfo> {
        self.hosts.lock().unwrap().get(name).and_then(|h| h.info.clone())
    }

    /// The `domains_generation` of host `name`'s last HostInfo (0: not
    /// heard from, or a VEEH that keeps none).
    pub fn domains_generation(&self, name: &str) -> u64 {
        self.hosts
            .lock()
            .unwrap()
            .get(name)
            .and_then(|h| h.info.as_ref())
            .map_or(0, |i| i.domains_generation)
    }

    /// Whether host `name` reads memory states in `format`, as its last
    /// host info lists (a host not heard from yet, or of a version that
    /// lists none, reads sequential ones only).
    pub fn reads(&self, name: &str, format: interfaces::vhi::SaveFormat) -> bool {
        self.info(name).and_then(|i| i.profile).unwrap_or_default().reads(format)
    }

    /// Why host `name`'s last heartbeat got no answer (`None`: it
    /// answered, or was not asked yet).
    pub fn last_error(&self, name: &str) -> Option<String> {
        self.hosts.lock().unwrap().get(name).and_then(|h| h.last_error.clone())
    }

    pub fn region(&self, name: &str) -> Option<String> {
        self.hosts.lock().unwrap().get(name).and_then(|h| h.entry.region.clone())
    }

    /// Marks `name` as a host the site had before this VEEM started: if it
    /// never answers now, it misses heartbeats and fails like one that
    /// stopped answering, so that its VEEs are recovered. (A host never
    /// seen stays [`Health::Unknown`]: nothing ran there.)
    pub fn mark_known(&self, name: &str) {
        if let Some(h) = self.hosts.lock().unwrap().get_mut(name) {
            h.known = true;
        }
    }

    /// One heartbeat to `name` (2 s timeout). Returns the new health and,
    /// when it changed to Failed or to Up, says so.
    /// A failed heartbeat is logged when its reason changes (kept in
    /// [`HostPool::last_error`]).
    pub async fn heartbeat(&self, name: &str, miss_limit: u32) -> (Health, Option<HostInfo>) {
        let (reply, error) = match self.ask_info(name).await {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        };
        let impostor = reply.as_ref().and_then(|r| self.impostor(name, r));
        let reply = reply.filter(|_| impostor.is_none());
        let mut hosts = self.hosts.lock().unwrap();
        let Some(h) = hosts.get_mut(name) else {
            return (Health::Unknown, None);
        };
        if error != h.last_error {
            match &error {
                Some(why) => tracing::warn!(host = %name, endpoint = %h.entry.endpoint, "no heartbeat answer: {why}"),
                None => tracing::info!(host = %name, "answers heartbeats again"),
            }
            h.last_error = error;
        }
        if impostor != h.impostor {
            if let Some(why) = &impostor {
                tracing::error!(host = %name, endpoint = %h.entry.endpoint, "{why}: not an answer; nothing is done on it");
            }
            h.impostor = impostor;
        }
        h.health = match (&reply, h.health) {
            (Some(_), _) => Health::Up,
            (None, Health::Failed) => Health::Failed,
            (None, Health::Up) => Health::Missing(1).escalate(miss_limit),
            (None, Health::Missing(n)) => Health::Missing(n + 1).escalate(miss_limit),
            (None, Health::Unknown) if h.known => Health::Missing(1).escalate(miss_limit),
            (None, Health::Unknown) => Health::Unknown,
        };
        if let Some(i) = &reply {
            h.info = Some(i.clone());
        }
        (h.health, reply)
    }
}

impl Health {
    fn escalate(self, limit: u32) -> Health {
        match self {
            Health::Missing(n) if n >= limit => Health::Failed,
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_host_fails_after_the_miss_limit() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let port: Arc<HostVhi> = Arc::new(crate::ports::GrpcHost::new("h", "http://127.0.0.1:9", None, true, None).unwrap());
            let entry = HostEntry {
                name: "h".into(),
                endpoint: "http://127.0.0.1:9".into(),
                region: None,
            };
            let pool = HostPool::new(
                "site-a",
                &[entry],
                &HashMap::from([("h".to_string(), port)]),
                std::sync::Arc::new(crate::ports::SystemClock),
            )
            .unwrap();
            // Never answered: stays Unknown (not failed) however long.
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Unknown);
            // Why, with the transport's own reason (not "transport error" alone).
            let why = pool.last_error("h").unwrap();
            assert!(why.contains("Connection refused"), "{why}");
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Unknown);
            // Unless the site had it before: then it fails as any other.
            pool.mark_known("h");
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Missing(1));
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Failed);
            pool.hosts.lock().unwrap().get_mut("h").unwrap().health = Health::Up;
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Missing(1));
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Failed);
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Failed);
        });
    }
}
