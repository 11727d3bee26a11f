//! What the VEEM measures as it works, for Prometheus (`[metrics]` in its
//! configuration; the listener is `interfaces::metrics`, the gauges read
//! from the site's state at each scrape are `api::metrics`'s). One value
//! per VEEM process, kept across leadership terms (the daemon hands it to
//! each term's core through [`crate::ports::Ports`]).
//!
//! Every metric here, its unit and labels (all label values come from
//! fixed sets or the configuration: host and peer names, never a
//! request's input; `vee` names live VEEs only):
//!
//! | metric | type | unit | labels |
//! |---|---|---|---|
//! | `veem_admissions_total` | counter | deploys | `verdict`: `admitted`, `refused`, `error` |
//! | `veem_admission_duration_seconds` | histogram | seconds | — (a Deploy, from its call to its answer) |
//! | `veem_negotiations_total` | counter | negotiations | `verdict`: `accept`, `counter-offer`, `reject` |
//! | `veem_checkpoint_duration_seconds` | histogram | seconds | — (the VHI call, the guest's pause included) |
//! | `veem_checkpoint_downtime_seconds` | histogram | seconds | — (the guest paused) |
//! | `veem_checkpoint_size_bytes` | histogram | bytes | — (memory and disk overlay) |
//! | `veem_migrations_total` | counter | migrations | `kind`: `in_site`, `cross_site`; `outcome`: `done`, `failed` |
//! | `veem_migration_duration_seconds` | histogram | seconds | `kind` |
//! | `veem_migration_downtime_seconds` | histogram | seconds | `kind` |
//! | `veem_recovery_duration_seconds` | histogram | seconds | — (a failed host's VEE, from its failure to running again) |
//! | `veem_sla_violations_total` | counter | violations | `term`: the SLA term (`downtime`, `availability`, `checkpoint`, `start`, ...) |
//! | `veem_sla_penalties_total` | counter | the manifests' penalty unit | — |
//! | `veem_host_heartbeat_misses_total` | counter | heartbeats | `host` |
//! | `veem_peer_call_duration_seconds` | histogram | seconds | `peer`: a configured peer site; `call`: the VMI call |
//! | `veem_checkpoint_replications_total` | counter | attempts | `outcome`: `replicated` (a copy made where a peer needs it, or at the primary a peer's checkpoint found in its repository), `failed` (an attempt failed; retried), `given-up` (the last attempt failed) |
//! | `veem_checkpoint_replication_duration_seconds` | histogram | seconds | — (from the checkpoint's record, usable where taken, to its copy made) |
//! | `veem_checkpoints_unsettled` | gauge | checkpoints | `state`: `local-only`, `replicating`, `failed`, `awaiting` (as the last replication pass saw them) |
//!
//! The gauges of `api::metrics`: `veem_vees` (`state`, `guarantee`),
//! `veem_host_vcpus`, `veem_host_reserved_vcpus`, `veem_host_memory_bytes`,
//! `veem_host_reserved_memory_bytes`, `veem_host_reservations` (`host`),
//! `veem_host_up` (`host`), `veem_last_migration_downtime_seconds`
//! (`vee`), `veem_leader` (1 when this VEEM leads its site).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// A verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub verdict: &'static str,
}

/// A migration's kind and outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MigrationLabels {
    pub kind: &'static str,
    pub outcome: &'static str,
}

/// A migration's kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// An SLA term.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TermLabels {
    pub term: String,
}

/// A configured host.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    pub host: String,
}

/// An outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

/// A checkpoint's replication state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: &'static str,
}

/// A call to a configured peer site.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerCallLabels {
    pub peer: String,
    pub call: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds, 10 ms to about 45 min in powers of 3.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 3.0, 12))
}

/// Bytes, 1 MiB to 64 GiB in powers of 4.
fn bytes() -> Histogram {
    Histogram::new(exponential_buckets((1u64 << 20) as f64, 4.0, 9))
}

/// The VEEM's counters and histograms (see the module doc).
#[derive(Debug)]
pub struct VeemMetrics {
    admissions: Family<VerdictLabels, Counter>,
    admission_duration: Histogram,
    negotiations: Family<VerdictLabels, Counter>,
    checkpoint_duration: Histogram,
    checkpoint_downtime: Histogram,
    checkpoint_size: Histogram,
    migrations: Family<MigrationLabels, Counter>,
    migration_duration: Histograms<KindLabels>,
    migration_downtime: Histograms<KindLabels>,
    recovery_duration: Histogram,
    violations: Family<TermLabels, Counter>,
    penalties: Counter<f64, AtomicU64>,
    heartbeat_misses: Family<HostLabels, Counter>,
    peer_calls: Histograms<PeerCallLabels>,
    replications: Family<OutcomeLabels, Counter>,
    replication_duration: Histogram,
    unsettled: Family<StateLabels, Gauge>,
    /// The downtime of each VEE's last migration here, seconds (the
    /// gauge keeps those of live VEEs).
    last_downtime: Mutex<HashMap<String, f64>>,
}

impl Default for VeemMetrics {
    fn default() -> Self {
        Self {
            admissions: Family::default(),
            admission_duration: seconds(),
            negotiations: Family::default(),
            checkpoint_duration: seconds(),
            checkpoint_downtime: seconds(),
            checkpoint_size: bytes(),
            migrations: Family::default(),
            migration_duration: Family::new_with_constructor(seconds),
            migration_downtime: Family::new_with_constructor(seconds),
            recovery_duration: seconds(),
            violations: Family::default(),
            penalties: Counter::default(),
            heartbeat_misses: Family::default(),
            peer_calls: Family::new_with_constructor(seconds),
            replications: Family::default(),
            replication_duration: seconds(),
            unsettled: Family::default(),
            last_downtime: Mutex::default(),
        }
    }
}

impl VeemMetrics {
    /// A Deploy answered with `verdict` (`admitted`, `refused`, `error`)
    /// after `took_s` seconds.
    pub fn admission(&self, verdict: &'static str, took_s: f64) {
        self.admissions.get_or_create(&VerdictLabels { verdict }).inc();
        self.admission_duration.observe(took_s);
    }

    /// A Negotiate answered with `verdict` (`accept`, `counter-offer`,
    /// `reject`).
    pub fn negotiation(&self, verdict: &'static str) {
        self.negotiations.get_or_create(&VerdictLabels { verdict }).inc();
    }

    /// A checkpoint taken in `took_s` seconds, the guest paused
    /// `downtime_s`, of `size` bytes.
    pub fn checkpoint(&self, took_s: f64, downtime_s: f64, size: u64) {
        self.checkpoint_duration.observe(took_s);
        self.checkpoint_downtime.observe(downtime_s);
        self.checkpoint_size.observe(size as f64);
    }

    /// A migration of VEE `vee` ended: `done` or not, in-site or not,
    /// after `total_s` seconds of which the guest was paused `downtime_s`
    /// (both observed only when it was done).
    pub fn migration(&self, vee: &str, in_site: bool, done: bool, total_s: f64, downtime_s: f64) {
        let kind = if in_site { "in_site" } else { "cross_site" };
        let outcome = if done { "done" } else { "failed" };
        self.migrations.get_or_create(&MigrationLabels { kind, outcome }).inc();
        if done {
            self.migration_duration.get_or_create(&KindLabels { kind }).observe(total_s);
            self.migration_downtime.get_or_create(&KindLabels { kind }).observe(downtime_s);
            self.last_downtime.lock().unwrap().insert(vee.to_string(), downtime_s);
        }
    }

    /// A failed host's VEE runs again `took_s` seconds after the failure.
    pub fn recovery(&self, took_s: f64) {
        self.recovery_duration.observe(took_s);
    }

    /// An SLA violation of `term` with `penalty`.
    pub fn violation(&self, term: &str, penalty: f64) {
        self.violations.get_or_create(&TermLabels { term: term.to_string() }).inc();
        if penalty.is_finite() && penalty > 0.0 {
            self.penalties.inc_by(penalty);
        }
    }

    /// Host `host` missed a heartbeat.
    pub fn heartbeat_missed(&self, host: &str) {
        self.heartbeat_misses.get_or_create(&HostLabels { host: host.to_string() }).inc();
    }

    /// VMI call `call` to peer site `peer` took `took_s` seconds.
    pub fn peer_call(&self, peer: &str, call: &'static str, took_s: f64) {
        self.peer_calls
            .get_or_create(&PeerCallLabels {
                peer: peer.to_string(),
                call,
            })
            .observe(took_s);
    }

    /// An attempt at a checkpoint's replication ended with `outcome`
    /// (`replicated`, `failed`, `given-up`), `took_s` seconds after the
    /// checkpoint was recorded (observed when given).
    pub fn checkpoint_replication(&self, outcome: &'static str, took_s: Option<f64>) {
        self.replications.get_or_create(&OutcomeLabels { outcome }).inc();
        if let Some(s) = took_s {
            self.replication_duration.observe(s);
        }
    }

    /// The checkpoints not settled, `count` of each state (the gauge
    /// shows each unsettled state, 0 included).
    pub fn checkpoints_unsettled(&self, count: impl Fn(crate::domain::Replication) -> i64) {
        use crate::domain::Replication::*;
        for state in [LocalOnly, Replicating, Failed, Awaiting] {
            self.unsettled
                .get_or_create(&StateLabels { state: state.as_str() })
                .set(count(state));
        }
    }

    /// The downtime (seconds) of the last migration of each VEE that
    /// `live` keeps; the others are forgotten.
    pub fn last_downtimes(&self, live: impl Fn(&str) -> bool) -> Vec<(String, f64)> {
        let mut m = self.last_downtime.lock().unwrap();
        m.retain(|vee, _| live(vee));
        m.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Registers these metrics in `r` (prefixed `veem_` by the caller).
    pub fn register(&self, r: &mut Registry) {
        r.register("admissions", "Deploys answered, by verdict", self.admissions.clone());
        r.register_with_unit(
            "admission_duration",
            "Time a Deploy took to answer",
            Unit::Seconds,
            self.admission_duration.clone(),
        );
        r.register("negotiations", "Negotiations answered, by verdict", self.negotiations.clone());
        r.register_with_unit(
            "checkpoint_duration",
            "Time a checkpoint took",
            Unit::Seconds,
            self.checkpoint_duration.clone(),
        );
        r.register_with_unit(
            "checkpoint_downtime",
            "Time a checkpoint paused its guest",
            Unit::Seconds,
            self.checkpoint_downtime.clone(),
        );
        r.register_with_unit("checkpoint_size", "Size of a checkpoint", Unit::Bytes, self.checkpoint_size.clone());
        r.register("migrations", "Migrations ended, by kind and outcome", self.migrations.clone());
        r.register_with_unit(
            "migration_duration",
            "Time a migration took, start to end",
            Unit::Seconds,
            self.migration_duration.clone(),
        );
        r.register_with_unit(
            "migration_downtime",
            "Time a migration paused its guest",
            Unit::Seconds,
            self.migration_downtime.clone(),
        );
        r.register_with_unit(
            "recovery_duration",
            "Time from a host's failure to its VEE running again",
            Unit::Seconds,
            self.recovery_duration.clone(),
        );
        r.register("sla_violations", "SLA violations recorded, by term", self.violations.clone());
        r.register("sla_penalties", "Penalties of the SLA violations recorded", self.penalties.clone());
        r.register(
            "host_heartbeat_misses",
            "Heartbeats a host did not answer",
            self.heartbeat_misses.clone(),
        );
        r.register_with_unit(
            "peer_call_duration",
            "Time a VMI call to a peer site took, failed ones included",
            Unit::Seconds,
            self.peer_calls.clone(),
        );
        r.register(
            "checkpoint_replications",
            "Attempts at copying a checkpoint where a peer site needs it, by outcome",
            self.replications.clone(),
        );
        r.register_with_unit(
            "checkpoint_replication_duration",
            "Time from a checkpoint's record to its copy made where a peer site needs it",
            Unit::Seconds,
            self.replication_duration.clone(),
        );
        r.register(
            "checkpoints_unsettled",
            "Checkpoints whose copy a peer site needs is not made yet, by replication state",
            self.unsettled.clone(),
        );
    }
}
