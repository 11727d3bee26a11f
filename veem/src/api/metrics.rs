//! The VEEM's metrics listener (`[metrics]`): what `crate::metrics` counts
//! as the VEEM works, and gauges read from the site's state at each scrape
//! (the VEE records, the planner's current slot, the hosts' health), over
//! `interfaces::metrics` (`/metrics`, `/healthz`, `/readyz`).
//!
//! Every family, with its type and labels, is in the table of
//! docs/operator-guide.md ("The VEE manager"), which a test checks against
//! a scrape.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use interfaces::metrics::{Exporter, MetricsConfig, Readiness};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::front::Acting;
use crate::manager::Veem;
use crate::metrics::{HostLabels, VeemMetrics};

/// A VEE state and guarantee level.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VeeLabels {
    state: &'static str,
    guarantee: String,
}

/// A live VEE.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VeeIdLabels {
    vee: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The gauges read at each scrape.
#[derive(Clone, Default)]
struct SiteGauges {
    leader: Gauge,
    vees: Family<VeeLabels, Gauge>,
    host_up: Family<HostLabels, Gauge>,
    vcpus: Family<HostLabels, Gauge>,
    reserved_vcpus: Family<HostLabels, Gauge>,
    free_vcpus: Family<HostLabels, Gauge>,
    memory: Family<HostLabels, Gauge>,
    reserved_memory: Family<HostLabels, Gauge>,
    free_memory: Family<HostLabels, Gauge>,
    host_vees: Family<HostLabels, Gauge>,
    last_downtime: Family<VeeIdLabels, FloatGauge>,
}

impl SiteGauges {
    fn register(&self, r: &mut Registry) {
        r.register("leader", "1 when this VEEM acts for its site", self.leader.clone());
        r.register("vees", "VEEs of the site by state and guarantee level", self.vees.clone());
        r.register("host_up", "1 when the host answers its heartbeats", self.host_up.clone());
        r.register("host_vcpus", "vCPUs the host offers", self.vcpus.clone());
        r.register(
            "host_reserved_vcpus",
            "vCPUs reserved on the host in the current slot",
            self.reserved_vcpus.clone(),
        );
        r.register(
            "host_free_vcpus",
            "vCPUs of the host not reserved in the current slot",
            self.free_vcpus.clone(),
        );
        r.register_with_unit("host_memory", "Memory the host offers", Unit::Bytes, self.memory.clone());
        r.register_with_unit(
            "host_reserved_memory",
            "Memory reserved on the host in the current slot",
            Unit::Bytes,
            self.reserved_memory.clone(),
        );
        r.register_with_unit(
            "host_free_memory",
            "Memory of the host not reserved in the current slot",
            Unit::Bytes,
            self.free_memory.clone(),
        );
        r.register("host_vees", "Live VEEs placed on the host", self.host_vees.clone());
        r.register_with_unit(
            "last_migration_downtime",
            "The downtime of a live VEE's last migration",
            Unit::Seconds,
            self.last_downtime.clone(),
        );
    }

    /// Reads the gauges from `veem` (none: no site gauges).
    fn refresh(&self, veem: Option<&Veem>, metrics: &VeemMetrics) {
        for f in [
            &self.vees as &dyn Clear,
            &self.host_up,
            &self.vcpus,
            &self.reserved_vcpus,
            &self.free_vcpus,
            &self.memory,
            &self.reserved_memory,
            &self.free_memory,
            &self.host_vees,
            &self.last_downtime,
        ] {
            f.clear_all();
        }
        self.leader.set(i64::from(veem.is_some()));
        let Some(veem) = veem else { return };
        let mut counts: BTreeMap<(&'static str, String), i64> = BTreeMap::new();
        let mut live = std::collections::HashSet::new();
        for v in veem.core.vees_where(|_| true) {
            *counts.entry((v.state.as_str(), v.guarantee.to_string())).or_default() += 1;
            if v.state.is_live() {
                live.insert(v.id);
            }
        }
        for ((state, guarantee), n) in counts {
            self.vees.get_or_create(&VeeLabels { state, guarantee }).set(n);
        }
        const MIB: i64 = 1 << 20;
        for h in super::server::host_status(veem) {
            let l = HostLabels { host: h.name.clone() };
            let up = h.health == interfaces::vmi::HostHealth::Up as i32;
            self.host_up.get_or_create(&l).set(i64::from(up));
            let (cap, used) = (i64::from(h.vcpus), i64::from(h.used_vcpus));
            self.vcpus.get_or_create(&l).set(cap);
            self.reserved_vcpus.get_or_create(&l).set(used);
            self.free_vcpus.get_or_create(&l).set((cap - used).max(0));
            let (cap, used) = (h.memory_mib as i64 * MIB, h.used_memory_mib as i64 * MIB);
            self.memory.get_or_create(&l).set(cap);
            self.reserved_memory.get_or_create(&l).set(used);
            self.free_memory.get_or_create(&l).set((cap - used).max(0));
            self.host_vees.get_or_create(&l).set(i64::from(h.vees));
        }
        for (vee, downtime) in metrics.last_downtimes(|id| live.contains(id)) {
            self.last_downtime.get_or_create(&VeeIdLabels { vee }).set(downtime);
        }
    }
}

/// A family cleared before each scrape's values are set (so that a host
/// or state gone is not reported with its last value).
trait Clear {
    fn clear_all(&self);
}

impl<L: Clone + std::hash::Hash + Eq, M> Clear for Family<L, M> {
    fn clear_all(&self) {
        self.clear();
    }
}

/// The exporter of the VEEM's metrics under `cfg`: `metrics` (kept by the
/// daemon across leadership terms) and the gauges of whichever VEEM
/// `acting` names; ready when that VEEM's front serves. Errors: `cfg`'s
/// token digest is malformed.
pub fn exporter(cfg: &MetricsConfig, metrics: Arc<VeemMetrics>, acting: Acting) -> anyhow::Result<Exporter> {
    let gauges = SiteGauges::default();
    let register = |r: &mut Registry| {
        metrics.register(r);
        gauges.register(r);
    };
    let (read, counted, site) = (acting.clone(), metrics.clone(), gauges.clone());
    let refresh = Arc::new(move || site.refresh(read.get().as_ref().map(|(v, _)| &**v), &counted));
    let ready: Readiness = Arc::new(move || match acting.get() {
        Some((_, front)) => front.readiness(),
        None => Err("no VEEM acts for the site here yet (starting, or standing by)".into()),
    });
    Ok(Exporter::new(cfg, "veem", register, Some(refresh), ready)?)
}

#[cfg(test)]
mod tests;
