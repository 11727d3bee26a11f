//! The planner's persisted state split into keyed entries, so that a store
//! can rewrite only what changed: a small header (configuration, hosts,
//! interned profiles, sites and regions, usage SLAs) and one entry per
//! reservation, peer spare and service. The planner notes the key of every
//! entry it changes; [`Planner::take_changes`] hands them out.
//! [`Planner::from_parts`] rebuilds the planner from header and entries
//! exactly as deserializing the whole planner does.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::capacity::{HostRecord, Profile};
use super::keys::{peer_spare_key, reservation_key, service_key};
use super::request::SpareNeed;
use super::reservations::{Reservation, ServiceRecord};
use super::usage_limits::{ConsumerUsage, UsageLimit};
use super::{Persisted, Planner, PlannerConfig};

/// Everything persisted but the per-VEE and per-service entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannerHeader {
    config: PlannerConfig,
    hosts: Vec<HostRecord>,
    profiles: Vec<Profile>,
    sites: Vec<String>,
    regions: Vec<String>,
    usage_limits: HashMap<String, UsageLimit>,
    consumer_usage: HashMap<String, ConsumerUsage>,
}

/// One persisted entry; the key of each variant is given with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum PlannerEntry {
    /// A VEE's own reservation; key `p/<VEE ID>`.
    Primary(Reservation),
    /// The local spare protecting a VEE (enhanced); key `s/<VEE ID>`.
    Spare(Reservation),
    /// The spare a peer site holds for a VEE (full); key `x/<VEE ID>`.
    PeerSpare(SpareNeed),
    /// An admitted service; key `v/<service ID>`.
    Service(ServiceRecord),
}

impl Planner {
    /// The entries changed since the last call, each with its key: its
    /// current value, or `None` when it is gone. Cost: the changes only.
    pub fn take_changes(&mut self) -> Vec<(String, Option<PlannerEntry>)> {
        let mut keys = std::mem::take(&mut self.d.changed);
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter()
            .map(|k| {
                let e = self.entry(&k);
                (k, e)
            })
            .collect()
    }

    /// Notes every entry as changed (for a store that must write them all,
    /// or again after a failed write of `keys`).
    pub fn mark_changed(&mut self, keys: Option<Vec<String>>) {
        match keys {
            Some(k) => self.d.changed.extend(k),
            None => {
                let all = self.entries().into_iter().map(|(k, _)| k);
                self.d.changed.extend(all);
            }
        }
    }

    /// The current entry under `key`.
    fn entry(&self, key: &str) -> Option<PlannerEntry> {
        let (kind, id) = key.split_once('/')?;
        let p = &self.p;
        match kind {
            "p" => p.primaries.get(id).cloned().map(PlannerEntry::Primary),
            "s" => p.spares.get(id).cloned().map(PlannerEntry::Spare),
            "x" => p.peer_spares.get(id).cloned().map(PlannerEntry::PeerSpare),
            "v" => p.services.get(id).cloned().map(PlannerEntry::Service),
            _ => None,
        }
    }

    /// A copy of the header.
    pub fn header(&self) -> PlannerHeader {
        let p = &self.p;
        PlannerHeader {
            config: p.config.clone(),
            hosts: p.hosts.to_vec(),
            profiles: p.profiles.clone(),
            sites: p.sites.clone(),
            regions: p.regions.clone(),
            usage_limits: p.usage_limits.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            consumer_usage: p.consumer_usage.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        }
    }

    /// Copies of every entry with its key, in no particular order (all of
    /// them: for tests and a first write; saves use [`Planner::take_changes`]).
    pub fn entries(&self) -> Vec<(String, PlannerEntry)> {
        let p = &self.p;
        let mut out = Vec::with_capacity(p.primaries.len() + p.spares.len() + p.peer_spares.len() + p.services.len());
        for (v, r) in &p.primaries {
            out.push((reservation_key(v, false), PlannerEntry::Primary(r.clone())));
        }
        for (v, r) in &p.spares {
            out.push((reservation_key(v, true), PlannerEntry::Spare(r.clone())));
        }
        for (v, s) in &p.peer_spares {
            out.push((peer_spare_key(v), PlannerEntry::PeerSpare(s.clone())));
        }
        for (id, s) in &p.services {
            out.push((service_key(id), PlannerEntry::Service(s.clone())));
        }
        out
    }

    /// Rebuilds a planner from its header and entries (keys are not needed:
    /// every entry carries its VEE or service ID).
    pub fn from_parts(header: PlannerHeader, entries: impl IntoIterator<Item = PlannerEntry>) -> Planner {
        let mut p = Persisted {
            config: header.config,
            hosts: std::sync::Arc::new(header.hosts),
            profiles: header.profiles,
            sites: header.sites,
            regions: header.regions,
            usage_limits: header.usage_limits.into_iter().collect(),
            consumer_usage: header.consumer_usage.into_iter().collect(),
            ..Persisted::default()
        };
        for e in entries {
            match e {
                PlannerEntry::Primary(r) => {
                    p.primaries.insert(r.vee.clone(), r);
                }
                PlannerEntry::Spare(r) => {
                    p.spares.insert(r.vee.clone(), r);
                }
                PlannerEntry::PeerSpare(s) => {
                    p.peer_spares.insert(s.vee.clone(), s);
                }
                PlannerEntry::Service(s) => {
                    p.services.insert(s.id.clone(), s);
                }
            }
        }
        Planner::rebuild(p)
    }
}
