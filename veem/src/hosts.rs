//! The site's VEEHs: VHI clients, heartbeats and failure detection.
//!
//! Every `heartbeat_interval` the VEEM asks each VEEH for HostInfo; a host
//! that misses `heartbeat_miss_limit` heartbeats in a row is declared failed
//! and its VEEs go to recovery. A failed host that answers again comes back
//! up (empty: its VEEs were recovered elsewhere).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, Result};
use interfaces::vhi::vhi_client::VhiClient;
use interfaces::vhi::HostInfoReply;
use tonic::transport::{Channel, Endpoint};

use crate::config::HostEntry;

/// Liveness of a host as the VEEM sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Never answered yet.
    Unknown,
    Up,
    /// Missed this many heartbeats in a row (below the limit).
    Missing(u32),
    Failed,
}

struct HostConn {
    entry: HostEntry,
    channel: Channel,
    health: Health,
    info: Option<HostInfoReply>,
}

/// VHI connections to the site's hosts.
pub struct HostPool {
    hosts: Mutex<HashMap<String, HostConn>>,
    order: Vec<String>,
}

impl HostPool {
    /// Lazy channels to every configured host (nothing is dialled yet).
    pub fn new(entries: &[HostEntry]) -> Result<Self> {
        let mut hosts = HashMap::new();
        for e in entries {
            let channel = Endpoint::from_shared(e.endpoint.clone())
                .map_err(|err| anyhow!("host {}: endpoint {:?}: {err}", e.name, e.endpoint))?
                .connect_timeout(Duration::from_secs(2))
                .timeout(Duration::from_secs(600))
                .connect_lazy();
            hosts.insert(
                e.name.clone(),
                HostConn {
                    entry: e.clone(),
                    channel,
                    health: Health::Unknown,
                    info: None,
                },
            );
        }
        Ok(Self {
            hosts: Mutex::new(hosts),
            order: entries.iter().map(|e| e.name.clone()).collect(),
        })
    }

    /// Host names in configuration order.
    pub fn names(&self) -> Vec<String> {
        self.order.clone()
    }

    /// A VHI client of host `name`.
    pub fn client(&self, name: &str) -> Result<VhiClient<Channel>> {
        let hosts = self.hosts.lock().unwrap();
        let h = hosts.get(name).ok_or_else(|| anyhow!("unknown host {name:?}"))?;
        Ok(VhiClient::new(h.channel.clone()))
    }

    pub fn health(&self, name: &str) -> Health {
        self.hosts.lock().unwrap().get(name).map(|h| h.health).unwrap_or(Health::Unknown)
    }

    pub fn info(&self, name: &str) -> Option<HostInfoReply> {
        self.hosts.lock().unwrap().get(name).and_then(|h| h.info.clone())
    }

    pub fn region(&self, name: &str) -> Option<String> {
        self.hosts.lock().unwrap().get(name).and_then(|h| h.entry.region.clone())
    }

    /// One heartbeat to `name` (2 s timeout). Returns the new health and,
    /// when it changed to Failed or to Up, says so.
    pub async fn heartbeat(&self, name: &str, miss_limit: u32) -> (Health, Option<HostInfoReply>) {
        let client = self.client(name);
        let reply = match client {
            Ok(mut c) => {
                let mut req = tonic::Request::new(interfaces::vhi::Empty {});
                req.set_timeout(Duration::from_secs(2));
                tokio::time::timeout(Duration::from_secs(3), c.host_info(req))
                    .await
                    .ok()
                    .and_then(|r| r.ok())
                    .map(|r| r.into_inner())
            }
            Err(_) => None,
        };
        let mut hosts = self.hosts.lock().unwrap();
        let Some(h) = hosts.get_mut(name) else {
            return (Health::Unknown, None);
        };
        h.health = match (&reply, h.health) {
            (Some(_), _) => Health::Up,
            (None, Health::Failed) => Health::Failed,
            (None, Health::Up) => Health::Missing(1).escalate(miss_limit),
            (None, Health::Missing(n)) => Health::Missing(n + 1).escalate(miss_limit),
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

impl Health {
    /// `unknown`, `up`, `missing N heartbeats` or `failed`.
    pub fn text(self) -> String {
        match self {
            Health::Unknown => "unknown".into(),
            Health::Up => "up".into(),
            Health::Missing(n) => format!("missing {n} heartbeats"),
            Health::Failed => "failed".into(),
        }
    }
}

impl crate::manager::Veem {
    /// Every VEEH of the site, in configuration order: health, the capacity
    /// it offers (vCPUs, MiB, GiB), what the planner reserves on it in the
    /// current slot, the VEEs placed on it and its accelerator. A host that
    /// never answered shows zero capacity.
    pub fn host_status(&self) -> Vec<interfaces::vmi::HostStatus> {
        let now = self.now_slot();
        let placed = self.vees_where(|v| v.host().is_some() && v.state.is_live());
        let p = self.planner.lock().unwrap();
        self.hosts
            .names()
            .into_iter()
            .map(|h| {
                let cap = p.host(&h).map(|s| s.capacity).unwrap_or_default();
                let used = p.host_usage(&h, now).unwrap_or_default();
                interfaces::vmi::HostStatus {
                    health: self.hosts.health(&h).text(),
                    vcpus: cap.vcpus,
                    memory_mib: cap.memory_mib,
                    disk_gib: cap.disk_gib,
                    used_vcpus: used.vcpus,
                    used_memory_mib: used.memory_mib,
                    used_disk_gib: used.disk_gib,
                    vees: placed.iter().filter(|v| v.host() == Some(h.as_str())).count() as u32,
                    accel: p.host(&h).map(|s| s.profile.accel.clone()).unwrap_or_default(),
                    name: h,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_host_fails_after_the_miss_limit() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let pool = HostPool::new(&[HostEntry {
                name: "h".into(),
                endpoint: "http://127.0.0.1:9".into(),
                region: None,
            }])
            .unwrap();
            // Never answered: stays Unknown (not failed) however long.
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Unknown);
            pool.hosts.lock().unwrap().get_mut("h").unwrap().health = Health::Up;
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Missing(1));
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Failed);
            assert_eq!(pool.heartbeat("h", 2).await.0, Health::Failed);
        });
    }
}
