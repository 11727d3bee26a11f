//! The latest metrics of each VEE metered here, which elasticity rules
//! watch (issue 40, item 2): the hypervisor-measured ones of
//! `vee_manifest::elasticity::HYPERVISOR_METRICS`, from two metering
//! rounds' counters. Kept in memory: a VEEM that restarts has samples
//! again after two rounds.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// One VEE's metrics at one time: name -> value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// When it was measured (ms since the Unix epoch).
    pub at_ms: i64,
    pub values: BTreeMap<String, f64>,
}

/// The latest [`Sample`] of each VEE.
#[derive(Default)]
pub struct Samples {
    by_vee: Mutex<HashMap<String, Kept>>,
}

/// A VEE's metrics as a round measures them: (name, value), the names of
/// the hypervisor metrics not allocated (a round measures 25,000 VEEs at
/// 100,000); a name given twice counts once, the last given.
pub type Values = Vec<(Cow<'static, str>, f64)>;

/// A [`Sample`] as [`Samples`] keeps it: its values in one allocation,
/// in name order, the names of the hypervisor metrics not copied (at
/// 100,000 VEEs a map per VEE took tens of MiB).
struct Kept {
    at_ms: i64,
    values: Box<[(Cow<'static, str>, f64)]>,
}

impl Kept {
    fn of<K: Into<Cow<'static, str>>>(at_ms: i64, values: impl IntoIterator<Item = (K, f64)>) -> Self {
        use interfaces::manifest::elasticity::HYPERVISOR_METRICS;
        let mut values: Vec<(Cow<'static, str>, f64)> = values
            .into_iter()
            .map(|(k, v)| {
                let k = k.into();
                match HYPERVISOR_METRICS.iter().find(|m| **m == k) {
                    Some(m) => (Cow::Borrowed(*m), v),
                    None => (k, v),
                }
            })
            .collect();
        // By name, the last given of a name first, then one of each.
        values.reverse();
        values.sort_by(|a, b| a.0.cmp(&b.0));
        values.dedup_by(|a, b| a.0 == b.0);
        Self {
            at_ms,
            values: values.into_boxed_slice(),
        }
    }

    fn get(&self, name: &str) -> Option<f64> {
        self.values
            .binary_search_by(|(k, _)| k.as_ref().cmp(name))
            .ok()
            .map(|i| self.values[i].1)
    }

    fn sample(&self) -> Sample {
        Sample {
            at_ms: self.at_ms,
            values: self.values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }
}

/// A VEE's counters at one metering round (cumulative, as the VEEH's Stats
/// gives them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Counters {
    pub at_ms: i64,
    /// CPU seconds.
    pub cpu: f64,
    pub disk_read: u64,
    pub disk_write: u64,
    pub net_rx: u64,
    pub net_tx: u64,
}

/// A VEE's counters at its latest metering round and the host they were
/// read on: what the next round's usage record starts from. Kept in the
/// `meters` tree, so that a VEEM that takes over meters on from the
/// previous leader's last round and no interval goes unrecorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Meter {
    pub host: String,
    pub counters: Counters,
}

impl Samples {
    /// Keeps `values` (name, value) measured at `at_ms` as VEE `vee`'s
    /// latest.
    pub fn record<K: Into<Cow<'static, str>>>(&self, vee: &str, at_ms: i64, values: impl IntoIterator<Item = (K, f64)>) {
        let kept = Kept::of(at_ms, values);
        let mut by_vee = self.by_vee.lock().unwrap();
        match by_vee.get_mut(vee) {
            Some(k) => *k = kept,
            None => {
                by_vee.insert(vee.to_string(), kept);
            }
        }
    }

    /// VEE `vee`'s latest sample.
    pub fn latest(&self, vee: &str) -> Option<Sample> {
        self.by_vee.lock().unwrap().get(vee).map(Kept::sample)
    }

    /// The average of metric `name` over the samples of `vees` measured at
    /// `fresh_since_ms` or later; `None` when none has one.
    pub fn average<'a>(&self, vees: impl IntoIterator<Item = &'a str>, name: &str, fresh_since_ms: i64) -> Option<f64> {
        let by_vee = self.by_vee.lock().unwrap();
        let values: Vec<f64> = vees
            .into_iter()
            .filter_map(|v| by_vee.get(v))
            .filter(|s| s.at_ms >= fresh_since_ms)
            .filter_map(|s| s.get(name))
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }
}

/// The hypervisor metrics between two rounds' counters of a VEE of
/// `vcpus` vCPUs using `memory_mib` MiB now: CPU utilization (CPU time
/// over wall time per vCPU, 0 to 1), memory used (MiB) and bytes per
/// second; `None` when no time passed or the counters began again (the
/// VEE restarted elsewhere).
pub(crate) fn hypervisor_metrics(prev: &Counters, now: &Counters, vcpus: u32, memory_mib: u64) -> Option<Values> {
    if now.at_ms <= prev.at_ms || now.cpu < prev.cpu {
        return None;
    }
    let secs = (now.at_ms - prev.at_ms) as f64 / 1000.0;
    let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
    let metrics = [
        (
            "cpu_utilization",
            ((now.cpu - prev.cpu) / secs / f64::from(vcpus.max(1))).clamp(0.0, 1.0),
        ),
        ("memory_used", memory_mib as f64),
        ("net_rx_bytes_per_s", rate(now.net_rx, prev.net_rx)),
        ("net_tx_bytes_per_s", rate(now.net_tx, prev.net_tx)),
        ("disk_read_bytes_per_s", rate(now.disk_read, prev.disk_read)),
        ("disk_write_bytes_per_s", rate(now.disk_write, prev.disk_write)),
    ];
    Some(metrics.into_iter().map(|(k, v)| (Cow::Borrowed(k), v)).collect())
}

/// Whether `name` is a KPI's (not a hypervisor metric's) and `value` a
/// finite number.
pub fn kpi_ok(name: &str, value: f64) -> bool {
    use interfaces::manifest::elasticity::{is_kpi_name, HYPERVISOR_METRICS};
    is_kpi_name(name) && !HYPERVISOR_METRICS.contains(&name) && value.is_finite()
}

/// The most KPIs taken from one VEE.
pub const MAX_KPIS: usize = 16;

/// Adds the KPIs a VEEH or a peer reported (`kpis`) to `values`: those
/// whose name is a KPI's (not a hypervisor metric's) and whose value is
/// finite, at most [`MAX_KPIS`]; the rest are dropped, counted in the log.
pub fn add_kpis(values: &mut Values, kpis: &[interfaces::vhi::Kpi]) {
    let mut taken = 0;
    for k in kpis {
        if taken < MAX_KPIS && kpi_ok(&k.name, k.value) {
            values.push((Cow::Owned(k.name.clone()), k.value));
            taken += 1;
        }
    }
    if taken < kpis.len() {
        tracing::info!(dropped = kpis.len() - taken, "KPIs dropped (names, values not finite, too many)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilization_and_rates_between_two_rounds_averaged_over_fresh_samples() {
        let prev = Counters {
            at_ms: 10_000,
            cpu: 5.0,
            net_rx: 1000,
            ..Default::default()
        };
        let now = Counters {
            at_ms: 20_000,
            cpu: 15.0,
            net_rx: 6000,
            ..Default::default()
        };
        let m = hypervisor_metrics(&prev, &now, 2, 128).unwrap();
        let get = |name: &str| m.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        assert_eq!(
            (get("cpu_utilization"), get("net_rx_bytes_per_s"), get("memory_used")),
            (Some(0.5), Some(500.0), Some(128.0))
        );
        assert!(hypervisor_metrics(&now, &prev, 2, 128).is_none(), "counters that began again");
        let s = Samples::default();
        s.record("a", 20_000, m.clone());
        s.record("b", 20_000, [("cpu_utilization", 1.0)]);
        s.record("c", 1_000, [("cpu_utilization".to_string(), 0.0)]);
        assert_eq!(s.average(["a", "b", "c"], "cpu_utilization", 15_000), Some(0.75));
        assert_eq!(s.average(["c"], "cpu_utilization", 15_000), None, "stale");
        assert_eq!(s.average(["a"], "active_sessions", 0), None);
        s.record("d", 20_000, [("queue", 1.0), ("cpu_utilization", 0.5), ("queue", 2.0)]);
        assert_eq!(
            s.latest("d").unwrap().values,
            [("cpu_utilization".to_string(), 0.5), ("queue".to_string(), 2.0)].into(),
            "a name given twice: the last"
        );
    }

    #[test]
    fn reported_kpis_are_checked() {
        let kpi = |name: &str, value: f64| interfaces::vhi::Kpi {
            name: name.into(),
            value,
            time: None,
        };
        let mut values: Values = vec![("cpu_utilization".into(), 0.5)];
        let reported = [
            kpi("active_sessions", 7.0),
            kpi("cpu_utilization", 1.0),
            kpi("Bad", 1.0),
            kpi("queue", f64::NAN),
        ];
        add_kpis(&mut values, &reported);
        assert_eq!(values.len(), 2);
        let s = Samples::default();
        s.record("v", 1, values.clone());
        let kept = s.latest("v").unwrap().values;
        assert_eq!(
            (kept["active_sessions"], kept["cpu_utilization"]),
            (7.0, 0.5),
            "a KPI never overrides a metric"
        );
        let many: Vec<_> = (0..40).map(|i| kpi(&format!("k{i}"), 1.0)).collect();
        add_kpis(&mut values, &many);
        assert_eq!(values.len(), 2 + MAX_KPIS);
    }
}
