//! Metering (see the parent module): each VEE's counters read from its
//! VEEH every `usage_interval` and a usage record written from the
//! previous round's, kept in the `meters` tree so that a VEEM that takes
//! over meters on without a gap. A host's round is two values
//! ([`super::rounds`]): its VEEs' records and their counters.

// foldhash rather than SipHash: a round hashes each of its VEEs' IDs several
// times (`LastMeters`).
use foldhash::{HashMap, HashSet};
use std::sync::Arc;

use interfaces::vhi;

use super::rounds::{self, HostMeters, HostRound, RoundEntry};
use super::{metrics, Accounting, Last, LastMeters};
use crate::model::{Location, UsageRec, VeeRec, VeeState};
use crate::ports::call::Failure;
use crate::ports::host::Host;
use crate::store::{StoreError, Tree, Writes};

/// Hosts whose records and meters one commit writes.
const COMMIT_HOSTS: usize = 10;

/// A VEE metering reads: its record as the round found it (shared with
/// the record cache, not copied) and the host it runs on.
struct Metered {
    rec: Arc<VeeRec>,
}

impl Metered {
    fn id(&self) -> &str {
        &self.rec.id
    }

    fn host(&self) -> &str {
        match &self.rec.location {
            Location::Host(h) => h,
            _ => "",
        }
    }
}

/// The Stats of `vees` on the host behind `c`, by VEE ID: one ListStats
/// (a page of up to 1,000 at a time); from a VEEH before it (UNIMPLEMENTED),
/// one Stats per VEE, all at once. A VEE whose Stats did not come is not
/// in the map (metered next round); a host that cannot be asked gives none.
async fn host_stats<'a>(c: &Host, vees: &[&'a Metered]) -> HashMap<&'a str, vhi::VeeStats> {
    match c.all_stats().await {
        Ok(all) => {
            let mut by_id: HashMap<String, vhi::VeeStats> = all.into_iter().map(|s| (s.vee_id.clone(), s)).collect();
            vees.iter().filter_map(|v| Some((v.id(), by_id.remove(v.id())?))).collect()
        }
        Err(e) if e.failure == Failure::Unsupported => {
            let each = futures::future::join_all(vees.iter().map(|v| {
                c.stats(vhi::StatsRequest {
                    vee_id: v.id().to_string(),
                })
            }))
            .await;
            vees.iter()
                .zip(each)
                .filter_map(|(v, s)| Some((v.id(), s.ok()?)))
                .collect()
        }
        Err(_) => HashMap::default(),
    }
}

impl Accounting {
    /// Meters each VEE running on a configured host: a usage record from
    /// its previous round's counters (`last`, or the `meters` tree after
    /// a takeover or a restart) to now, written with the new counters in
    /// one commit per [`COMMIT_HOSTS`] hosts (each host's VEEs' Stats read
    /// in one ListStats, `host_stats`). No record when the VEE's counters began
    /// again (it restarted, or moved to another host); the meters of VEEs
    /// no longer running are dropped, so a VEE started again is not
    /// charged for the time it was stopped.
    ///
    /// Only the hosts in `only` are asked, when given (a paced round): the
    /// VEEs on them are read from the by-host index, not every record, and
    /// the others' meters stay as they are. Meters of VEEs gone from a host
    /// in turn go with that turn; the rest (a VEE's own meter of a VEEM
    /// before host rounds, a host no longer configured) in a `sweep`, once
    /// per cycle over the hosts (and in every round of all hosts).
    pub(super) async fn meter_round(&self, last: &mut LastMeters, only: Option<&HashSet<String>>, sweep: bool) -> Result<(), StoreError> {
        // Only what runs on a configured host.
        let hosts: HashSet<String> = self.hosts.names().into_iter().collect();
        // The host a VEE runs on, if it runs on one.
        fn running_on(v: &VeeRec) -> Option<&String> {
            match &v.location {
                Location::Host(h) if matches!(v.state, VeeState::Running | VeeState::Checkpointing) => Some(h),
                _ => None,
            }
        }
        // The host a VEE is metered on: it runs there and the host is configured.
        fn metered_on<'v>(v: &'v VeeRec, hosts: &HashSet<String>) -> Option<&'v String> {
            running_on(v).filter(|h| hosts.contains(*h))
        }
        let metered: Vec<Metered> = match only {
            // The turn's configured hosts, each looked up once (not once
            // per VEE): the by-host index gives the VEEs placed on them.
            Some(turn) => {
                let on = turn.iter().map(String::as_str).filter(|h| hosts.contains(*h));
                self.vees_on_hosts_map(on, |v| running_on(v).map(|_| Metered { rec: v.clone() }))
            }
            None => self.vees_map(|v| metered_on(v, &hosts).map(|_| Metered { rec: Arc::new(v.clone()) })),
        };
        // Host by host: its VEEs' Stats asked at once; every host's
        // records and meters written in one commit.
        let mut by_host: std::collections::BTreeMap<&str, Vec<&Metered>> = Default::default();
        for v in &metered {
            by_host.entry(v.host()).or_default().push(v);
        }
        let round_ms = self.clock.now_ms();
        let (mut w, mut batched) = (Writes::default(), 0);
        // The meters written by the commit under way, by host: kept once
        // it is done.
        let mut written: Vec<(&str, rounds::Vees)> = Vec::new();
        for (h, vees) in by_host {
            let Ok(c) = self.hosts.host(h) else { continue };
            let mut stats = host_stats(&c, &vees).await;
            // The host's meters as the last round here or elsewhere (a
            // VEEM before this one) wrote them: read once, when a VEE has
            // none here.
            let stored = if vees.iter().any(|v| last.get(h, v.id()).is_none()) {
                match self.store.get_raw(Tree::Meters, &rounds::meters_key(h))? {
                    Some(raw) => HostMeters::decode(h, &raw)?,
                    None => HostMeters::default(),
                }
            } else {
                HostMeters::default()
            };
            let mut own = Vec::new();
            let mut kept = HostMeters {
                format: rounds::ROUND_FORMAT,
                ..Default::default()
            };
            for v in vees {
                let prev = last.get(h, v.id());
                let Some(s) = stats.remove(v.id()) else {
                    // No counters this round: its last ones on this host
                    // stay the start of its next record.
                    if let Some(counters) = prev {
                        kept.vees.insert(v.id().to_string(), counters);
                    }
                    continue;
                };
                let prev = match prev {
                    Some(counters) => Some(counters),
                    None => match stored.counters(v.id()) {
                        Some(counters) => Some(counters),
                        // A per-VEE meter of a VEEM before host rounds.
                        None => self
                            .store
                            .get::<Last>(Tree::Meters, v.id())?
                            .filter(|m| m.host == h)
                            .map(|m| m.counters),
                    },
                };
                let (counters, rec) = self.meter(&v.rec, s, prev);
                if let Some(rec) = rec {
                    match &v.rec.for_peer {
                        // A record of a VEE run for a peer goes to its
                        // outbox in the same write, one value of its own.
                        Some(primary) => {
                            w.put(Tree::Usage, &rec.record_id, &rec)?;
                            w.put(Tree::UsageOutbox, &rec.record_id, primary)?;
                        }
                        None => own.push(RoundEntry::of(rec)),
                    }
                }
                kept.vees.insert(v.id().to_string(), counters);
            }
            if !own.is_empty() {
                let round = HostRound {
                    format: rounds::ROUND_FORMAT,
                    site_id: self.cfg.site_id.clone(),
                    records: own,
                };
                w.put(Tree::Usage, &rounds::round_key(h, round_ms), &round)?;
            }
            w.put(Tree::Meters, &rounds::meters_key(h), &kept)?;
            written.push((h, kept.vees));
            batched += 1;
            // Kept once written: a commit that fails leaves the next round
            // to meter from the last counters written. A commit per
            // `COMMIT_HOSTS` hosts: one flush for several, and batches
            // that stay small in the store (one for a whole round of 50
            // hosts held some 70 MiB more at 100,000 VEEs).
            if batched == COMMIT_HOSTS {
                self.store.commit(std::mem::take(&mut w))?;
                last.0.extend(written.drain(..).map(|(h, vees)| (h.to_string(), vees)));
                batched = 0;
            }
        }
        if !w.is_empty() {
            self.store.commit(w)?;
        }
        last.0.extend(written.into_iter().map(|(h, vees)| (h.to_string(), vees)));
        let mut gone = Writes::default();
        let metered_hosts: HashSet<&str> = metered.iter().map(Metered::host).collect();
        match only {
            Some(turn) if !sweep => {
                // A turn: the meters of hosts in turn that meter nothing
                // now (each metered host's were replaced as a whole).
                for h in turn.iter().filter(|h| !metered_hosts.contains(h.as_str())) {
                    last.0.remove(h.as_str());
                    let key = rounds::meters_key(h);
                    if self.store.get_raw(Tree::Meters, &key)?.is_some() {
                        gone.remove(Tree::Meters, &key);
                    }
                }
            }
            _ => {
                // The meters of VEEs no longer metered here: a host's whose
                // VEEs none are, a VEE's own (before host rounds) once it is
                // in its host's (it has a meter in `last`: written there)
                // or no longer metered. Which VEEs are metered anywhere,
                // and where: this round's when it asked every host, else
                // (a paced sweep) from every record.
                let everywhere: Vec<(String, String)> = match only {
                    Some(_) => self.vees_map(|v| metered_on(v, &hosts).map(|h| (v.id.clone(), h.clone()))),
                    None => metered.iter().map(|v| (v.id().to_string(), v.host().to_string())).collect(),
                };
                let on: HashSet<(&str, &str)> = everywhere.iter().map(|(id, h)| (h.as_str(), id.as_str())).collect();
                let ids: HashSet<&str> = everywhere.iter().map(|(id, _)| id.as_str()).collect();
                let metered_hosts: HashSet<String> = everywhere.iter().map(|(_, h)| rounds::meters_key(h)).collect();
                last.0.retain(|h, vees| {
                    vees.retain(|id, _| on.contains(&(h.as_str(), id.as_str())));
                    !vees.is_empty()
                });
                self.store.scan(Tree::Meters, |key, _| {
                    let keep = match key.strip_prefix(rounds::METERS_PREFIX) {
                        Some(_) => metered_hosts.contains(key),
                        None => ids.contains(key) && !last.has(key),
                    };
                    if !keep {
                        gone.remove(Tree::Meters, key);
                    }
                    Ok(())
                })?;
            }
        }
        if !gone.is_empty() {
            self.store.commit(gone)?;
        }
        Ok(())
    }

    /// VEE `v`'s counters from its Stats `s`, and its usage record since
    /// its previous counters on the same host `prev` when its counters went
    /// on from them. Its metrics are kept as its latest sample.
    fn meter(&self, v: &VeeRec, s: vhi::VeeStats, prev: Option<metrics::Counters>) -> (metrics::Counters, Option<UsageRec>) {
        let now = metrics::Counters {
            at_ms: interfaces::time::ms_of(&s.time),
            cpu: s.cpu_seconds,
            disk_read: s.disk_read_bytes,
            disk_write: s.disk_write_bytes,
            net_rx: s.net_rx_bytes,
            net_tx: s.net_tx_bytes,
        };
        // Moved or restarted (counters began again): no record.
        let values = prev.and_then(|p| Some(p).zip(metrics::hypervisor_metrics(&p, &now, v.vcpus, s.memory_mib)));
        let Some((prev, mut values)) = values else {
            return (now, None);
        };
        metrics::add_kpis(&mut values, &s.kpis);
        // A VEE run for a peer: its KPIs go to its primary with its usage.
        let kpis = match &v.for_peer {
            Some(_) => s
                .kpis
                .iter()
                .filter(|k| values.iter().any(|(name, value)| *name == k.name && *value == k.value))
                .map(|k| (k.name.clone(), (k.value, interfaces::time::ms_of(&k.time))))
                .collect(),
            None => Default::default(),
        };
        self.samples.record(&v.id, now.at_ms, values);
        let secs = (now.at_ms - prev.at_ms) as f64 / 1000.0;
        let rec = UsageRec {
            // One value of its own (run for a peer) has a UUID; a host
            // round's entry gets its ID from the round's key.
            record_id: if v.for_peer.is_some() {
                uuid::Uuid::new_v4().to_string()
            } else {
                String::new()
            },
            abc_id: v.service_id.clone(),
            vee_id: v.id.clone(),
            site_chain: vec![self.cfg.site_id.clone()],
            start_unix: prev.at_ms / 1000,
            end_unix: now.at_ms / 1000,
            cpu_seconds: now.cpu - prev.cpu,
            memory_mib_seconds: s.memory_mib as f64 * secs,
            disk_bytes: (now.disk_read + now.disk_write).saturating_sub(prev.disk_read + prev.disk_write),
            net_bytes: (now.net_rx + now.net_tx).saturating_sub(prev.net_rx + prev.net_tx),
            sent: v.for_peer.is_none(),
            kpis,
        };
        (now, Some(rec))
    }
}

#[cfg(test)]
mod tests;
