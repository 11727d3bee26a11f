//! Metering (see the parent module): each VEE's counters read from its
//! VEEH every `usage_interval` and a usage record written from the
//! previous round's, kept in the `meters` tree so that a VEEM that takes
//! over meters on without a gap.

use std::collections::HashMap;

use anyhow::Result;
use interfaces::vhi;

use super::{metrics, Accounting, Last};
use crate::model::{Location, UsageRec, VeeRec, VeeState};
use crate::store::{Tree, Writes};

/// What metering reads of a VEE record.
struct Metered {
    id: String,
    host: String,
    service_id: String,
    vcpus: u32,
    for_peer: Option<String>,
}

impl Accounting {
    /// Meters each VEE running on a configured host: a usage record from
    /// its previous round's counters (`last`, or the `meters` tree after
    /// a takeover or a restart) to now, written with the new counters in
    /// one commit per host (its VEEs' Stats asked at once). No record when the VEE's counters began again (it
    /// restarted, or moved to another host); the meters of VEEs no longer
    /// running are dropped, so a VEE started again is not charged for the
    /// time it was stopped.
    pub(super) async fn meter_round(&self, last: &mut HashMap<String, Last>) -> Result<()> {
        // Only what runs on a configured host (the copies: those).
        let hosts: std::collections::HashSet<String> = self.hosts.names().into_iter().collect();
        let running = |v: &VeeRec| matches!(v.state, VeeState::Running | VeeState::Checkpointing);
        // What metering reads of each, not copies of the records.
        let metered = self.vees_map(|v| match &v.location {
            Location::Host(h) if running(v) && hosts.contains(h) => Some(Metered {
                id: v.id.clone(),
                host: h.clone(),
                service_id: v.service_id.clone(),
                vcpus: v.vcpus,
                for_peer: v.for_peer.clone(),
            }),
            _ => None,
        });
        // Host by host: its VEEs' Stats asked at once, their records and
        // meters written in one commit.
        let mut by_host: std::collections::BTreeMap<&str, Vec<&Metered>> = Default::default();
        for v in &metered {
            by_host.entry(&v.host).or_default().push(v);
        }
        for (h, vees) in by_host {
            let Ok(c) = self.hosts.vhi(h) else { continue };
            let stats = futures::future::join_all(
                vees.iter()
                    .map(|v| c.stats(tonic::Request::new(vhi::StatsRequest { vee_id: v.id.clone() }))),
            )
            .await;
            let mut w = Writes::default();
            let mut meters = Vec::new();
            for (v, s) in vees.into_iter().zip(stats) {
                let Ok(s) = s else { continue };
                let meter = self.meter(v, h, s.into_inner(), last, &mut w)?;
                meters.push((v.id.clone(), meter));
            }
            // Kept once written: a commit that fails leaves the next round
            // to meter from the last counters written.
            self.store.commit(w)?;
            last.extend(meters);
        }
        // The meters of VEEs no longer metered here.
        let ids: std::collections::HashSet<&str> = metered.iter().map(|v| v.id.as_str()).collect();
        last.retain(|id, _| ids.contains(id.as_str()));
        let mut gone = Writes::default();
        self.store.scan(Tree::Meters, |id, _| {
            if !ids.contains(id) {
                gone.remove(Tree::Meters, id);
            }
            Ok(())
        })?;
        if !gone.is_empty() {
            self.store.commit(gone)?;
        }
        Ok(())
    }

    /// VEE `v`'s meter from its Stats `s` on host `h`, and its usage record
    /// since its previous meter (in `last`, else the `meters` tree) when
    /// its counters went on from there, both put in `w`.
    fn meter(&self, v: &Metered, h: &str, s: vhi::VeeStats, last: &HashMap<String, Last>, w: &mut Writes) -> Result<Last> {
        let now = metrics::Counters {
            at_ms: interfaces::time::ms_of(&s.time),
            cpu: s.cpu_seconds,
            disk_read: s.disk_read_bytes,
            disk_write: s.disk_write_bytes,
            net_rx: s.net_rx_bytes,
            net_tx: s.net_tx_bytes,
        };
        let prev = match last.get(&v.id) {
            Some(m) => Some(m.clone()),
            None => self.store.get::<Last>(Tree::Meters, &v.id)?,
        };
        let meter = Last {
            host: h.to_string(),
            counters: now,
        };
        w.put(Tree::Meters, &v.id, &meter)?;
        // Moved or restarted (counters began again): no record.
        let values = prev
            .filter(|p| p.host == *h)
            .and_then(|p| Some(p.counters).zip(metrics::hypervisor_metrics(&p.counters, &now, v.vcpus, s.memory_mib)));
        if let Some((prev, mut values)) = values {
            metrics::add_kpis(&mut values, &s.kpis);
            // A VEE run for a peer: its KPIs go to its primary with its usage.
            let kpis = match &v.for_peer {
                Some(_) => s
                    .kpis
                    .iter()
                    .filter(|k| values.get(&k.name) == Some(&k.value))
                    .map(|k| (k.name.clone(), (k.value, interfaces::time::ms_of(&k.time))))
                    .collect(),
                None => Default::default(),
            };
            self.samples.record(&v.id, now.at_ms, values);
            let secs = (now.at_ms - prev.at_ms) as f64 / 1000.0;
            let rec = UsageRec {
                record_id: uuid::Uuid::new_v4().to_string(),
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
            // A record of a VEE run for a peer goes to its outbox in
            // the same write.
            w.put(Tree::Usage, &rec.record_id, &rec)?;
            if let Some(primary) = &v.for_peer {
                w.put(Tree::UsageOutbox, &rec.record_id, primary)?;
            }
        }
        Ok(meter)
    }
}
