//! The VEEH's Prometheus metrics (`[metrics]` in its configuration,
//! served by `interfaces::metrics`): every family in the table of
//! docs/operator-guide.md ("A VEE host"), which a test below checks
//! against what [`HostMetrics::register`] adds, and the process's own (`process_*`). The label values are fixed sets:
//! operations are this crate's names, states libvirt's, mapped.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// A libvirt operation, by this crate's name for it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub call: &'static str,
}

/// A domain state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: &'static str,
}

/// How a restore read its memory state: `cached` (the host's cached part,
/// as QEMU wrote it), `streamed` (through a FIFO while its chunks were
/// read) or `file` (written to a file first).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestoreLabels {
    pub memory: &'static str,
}

/// The VEEH's metrics; cheap to clone (each is shared).
#[derive(Clone, Debug)]
pub struct HostMetrics {
    /// Seconds a libvirt operation took, failed ones included (1 ms to
    /// about 65 s in powers of 4).
    pub libvirt_calls: Family<CallLabels, Histogram>,
    /// This VEEH's domains by state, as its state watch last saw them.
    pub domains: Family<StateLabels, Gauge>,
    /// Checkpoints answered (usable) whose OCI artifact is still being
    /// written to the repository.
    pub artifacts_pending: Gauge,
    /// Checkpoint parts (a checkpoint's or a restore's) answered and still
    /// being kept in the host's cache (synced and described).
    pub cache_pending: Gauge,
    /// Bytes checkpoints sent to the repository: the chunks it lacked and
    /// the indexes (whole parts at a registry site).
    pub checkpoint_sent: Counter,
    /// Bytes restores fetched from the repository (0 for a restore from
    /// chunks this host keeps).
    pub restore_fetched: Counter,
    /// Restores made, by how their memory state was read.
    pub restores: Family<RestoreLabels, Counter>,
}

impl Default for HostMetrics {
    fn default() -> Self {
        // Every kind of restore listed from the start, at 0.
        let restores: Family<RestoreLabels, Counter> = Family::default();
        for memory in ["cached", "streamed", "file"] {
            let _ = restores.get_or_create(&RestoreLabels { memory });
        }
        Self {
            libvirt_calls: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 4.0, 9))),
            domains: Family::default(),
            artifacts_pending: Gauge::default(),
            cache_pending: Gauge::default(),
            checkpoint_sent: Counter::default(),
            restore_fetched: Counter::default(),
            restores,
        }
    }
}

impl HostMetrics {
    /// Records that libvirt operation `call` took `took`.
    pub fn libvirt_call(&self, call: &'static str, took: Duration) {
        self.libvirt_calls.get_or_create(&CallLabels { call }).observe(took.as_secs_f64());
    }

    /// Sets the domain counts from the states of this VEEH's domains, by
    /// name (`DomainState::name`; every state listed, 0 when none is in
    /// it; a name not listed counts as `other`).
    pub fn set_domains<'a>(&self, states: impl IntoIterator<Item = &'a str>) {
        let mut counts = [0i64; STATES.len()];
        for s in states {
            counts[STATES.iter().position(|k| *k == s).unwrap_or(STATES.len() - 1)] += 1;
        }
        for (i, state) in STATES.iter().enumerate() {
            self.domains.get_or_create(&StateLabels { state }).set(counts[i]);
        }
    }

    /// Registers these metrics in `r` (prefixed `veeh_` by the caller).
    pub fn register(&self, r: &mut Registry) {
        r.register_with_unit(
            "libvirt_call_duration",
            "Time a libvirt operation took, failed ones included",
            Unit::Seconds,
            self.libvirt_calls.clone(),
        );
        r.register("domains", "Domains of this VEEH by state", self.domains.clone());
        r.register(
            "checkpoint_artifacts_pending",
            "Checkpoints answered whose OCI artifact is still being written",
            self.artifacts_pending.clone(),
        );
        r.register(
            "checkpoint_cache_pending",
            "Checkpoint parts answered and still being kept in the host's cache",
            self.cache_pending.clone(),
        );
        r.register_with_unit(
            "checkpoint_sent",
            "Bytes checkpoints sent to the repository",
            Unit::Bytes,
            self.checkpoint_sent.clone(),
        );
        r.register_with_unit(
            "restore_fetched",
            "Bytes restores fetched from the repository",
            Unit::Bytes,
            self.restore_fetched.clone(),
        );
        r.register(
            "restores",
            "Restores made, by how their memory state was read",
            self.restores.clone(),
        );
    }
}

const STATES: [&str; 5] = ["running", "paused", "shutoff", "crashed", "other"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_are_counted_by_state_every_state_listed() {
        let m = HostMetrics::default();
        m.set_domains(["running", "running", "paused", "pmsuspended"]);
        let mut r = Registry::default();
        m.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for line in [
            "domains{state=\"running\"} 2",
            "domains{state=\"paused\"} 1",
            "domains{state=\"shutoff\"} 0",
            "domains{state=\"other\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
        m.set_domains([]);
        text.clear();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(text.contains("domains{state=\"running\"} 0"), "{text}");
    }

    /// The operator guide's table of the VEEH's metrics is what a scrape
    /// shows: every family registered, with its type and labels.
    #[test]
    fn the_operator_guides_veeh_metrics_are_the_registered_ones() {
        let m = HostMetrics::default();
        m.libvirt_call("create", Duration::from_millis(20));
        m.set_domains(["running"]);
        let mut r = Registry::default();
        m.register(r.sub_registry_with_prefix("veeh"));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operator-guide.md");
        interfaces::metrics::reference::check(&doc, "### A VEE host (`veeh_`)", &text);
    }
}
