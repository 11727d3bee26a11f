//! Plain serde mirrors of the VMI replies, as the CLI prints them: the same
//! fields as the protobuf messages, with unix timestamps turned into RFC3339
//! strings (`null` when the server left them at 0) and the field renamed
//! without its unit suffix (`updated_unix_ms` -> `updated`).

use chrono::{DateTime, SecondsFormat};
use interfaces::vmi;
use serde::Serialize;

/// Serializes an empty string as `null`: the JSON of the CLI has no `""`
/// for an absent value.
fn empty_as_null<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    if v.is_empty() {
        s.serialize_none()
    } else {
        s.serialize_str(v)
    }
}

/// RFC3339 (UTC, `Z`) of a unix time in seconds; `None` for 0 or out of range.
pub fn rfc3339_secs(unix: i64) -> Option<String> {
    if unix == 0 {
        return None;
    }
    DateTime::from_timestamp(unix, 0).map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
}

/// RFC3339 (UTC, `Z`, milliseconds) of a unix time in milliseconds; `None`
/// for 0 or out of range.
pub fn rfc3339_ms(unix_ms: i64) -> Option<String> {
    if unix_ms == 0 {
        return None;
    }
    DateTime::from_timestamp_millis(unix_ms).map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// Reply of Negotiate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Negotiation {
    /// `accept`, `counter-offer` or `reject`.
    pub verdict: vmi::Verdict,
    /// Why (each a sentence from the planner).
    pub reasons: Vec<String>,
    /// Counter-offer: earliest feasible start.
    pub earliest_start: Option<String>,
    /// Counter-offer: end of the earliest feasible window.
    pub earliest_end: Option<String>,
}

impl From<&vmi::NegotiateResponse> for Negotiation {
    fn from(r: &vmi::NegotiateResponse) -> Self {
        Self {
            verdict: r.verdict(),
            reasons: r.reasons.clone(),
            earliest_start: rfc3339_secs(interfaces::time::s_of(&r.earliest_start)),
            earliest_end: rfc3339_secs(interfaces::time::s_of(&r.earliest_end)),
        }
    }
}

/// A VEE (VeeInfo).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Vee {
    pub vee_id: String,
    pub service_id: String,
    pub component: String,
    pub instance: u32,
    pub state: vmi::VeeState,
    /// As the server gives it: `local (HOST)`, `local` or `remote (SITE)`.
    pub location: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    /// The most vCPUs and MiB a resize may give it.
    pub max_vcpus: u32,
    pub max_memory_mib: u64,
    #[serde(serialize_with = "empty_as_null")]
    pub latest_checkpoint: String,
    /// Where its latest checkpoint is held (`local-only`, `replicated`,
    /// ...: `crate::domain::Replication`); `None` when the server did not
    /// say (lists, providers, an older server).
    pub latest_checkpoint_replication: Option<String>,
    pub updated: Option<String>,
    /// Its NICs in guest order (eth0, eth1, ...).
    pub nics: Vec<Nic>,
    /// The image it boots from.
    pub image: String,
}

/// One NIC of a VEE on a service network.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Nic {
    pub network: String,
    pub mac: String,
    /// With the prefix: `10.240.3.5/24`.
    pub address: String,
    pub gateway: String,
    /// External networks only.
    pub external_address: Option<String>,
    pub ports: Vec<u32>,
}

impl From<&interfaces::vhi::Nic> for Nic {
    fn from(n: &interfaces::vhi::Nic) -> Self {
        Self {
            network: n.network.clone(),
            mac: n.mac.clone(),
            address: n.address.clone(),
            gateway: n.gateway.clone(),
            external_address: (!n.external_address.is_empty()).then(|| n.external_address.clone()),
            ports: n.ports.clone(),
        }
    }
}

impl From<&vmi::VeeInfo> for Vee {
    fn from(v: &vmi::VeeInfo) -> Self {
        Self {
            vee_id: v.vee_id.clone(),
            service_id: v.service_id.clone(),
            component: v.component.clone(),
            instance: v.instance,
            state: v.state(),
            location: v.location.clone(),
            vcpus: v.vcpus,
            memory_mib: v.memory_mib,
            max_vcpus: v.max_vcpus,
            max_memory_mib: v.max_memory_mib,
            latest_checkpoint: v.latest_checkpoint.clone(),
            latest_checkpoint_replication: match v.latest_checkpoint_replication() {
                vmi::CheckpointReplication::Unspecified => None,
                r => Some(r.to_string()),
            },
            updated: rfc3339_ms(interfaces::time::ms_of(&v.update_time)),
            nics: v.nics.iter().map(Nic::from).collect(),
            image: v.image.clone(),
        }
    }
}

/// A service (ServiceInfo) with its VEEs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Service {
    pub service_id: String,
    pub name: String,
    pub provider: String,
    pub state: vmi::ServiceState,
    pub guarantee: vmi::GuaranteeLevel,
    pub vees: Vec<Vee>,
}

impl From<&vmi::ServiceInfo> for Service {
    fn from(s: &vmi::ServiceInfo) -> Self {
        Self {
            service_id: s.service_id.clone(),
            name: s.name.clone(),
            provider: s.provider.clone(),
            state: s.state(),
            guarantee: s.guarantee(),
            vees: s.vees.iter().map(Vee::from).collect(),
        }
    }
}

/// A rolling image update of a component (Rollout).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rollout {
    pub service_id: String,
    pub component: String,
    pub from_image: String,
    pub to_image: String,
    pub max_unavailable: u32,
    pub rollback: bool,
    pub state: vmi::RolloutState,
    /// VEE IDs replaced so far, in order.
    pub replaced: Vec<String>,
    /// Live instances when it started.
    pub instances: u32,
    #[serde(serialize_with = "empty_as_null")]
    pub reason: String,
    pub started: Option<String>,
    pub ended: Option<String>,
}

impl From<&vmi::Rollout> for Rollout {
    fn from(r: &vmi::Rollout) -> Self {
        Self {
            service_id: r.service_id.clone(),
            component: r.component.clone(),
            from_image: r.from_image.clone(),
            to_image: r.to_image.clone(),
            max_unavailable: r.max_unavailable,
            rollback: r.rollback,
            state: r.state(),
            replaced: r.replaced.clone(),
            instances: r.instances,
            reason: r.reason.clone(),
            started: rfc3339_ms(interfaces::time::ms_of(&r.start_time)),
            ended: r.end_time.as_ref().and_then(|_| rfc3339_ms(interfaces::time::ms_of(&r.end_time))),
        }
    }
}

/// A migration or migration proposal (MigrationInfo).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Migration {
    pub migration_id: String,
    pub vee_id: String,
    pub from: String,
    pub to: String,
    #[serde(serialize_with = "empty_as_null")]
    pub reason: String,
    pub state: vmi::MigrationState,
    #[serde(serialize_with = "empty_as_null")]
    pub decided_by: String,
    #[serde(serialize_with = "empty_as_null")]
    pub detail: String,
    pub total_ms: u64,
    pub downtime_ms: u64,
    pub created: Option<String>,
}

impl From<&vmi::MigrationInfo> for Migration {
    fn from(m: &vmi::MigrationInfo) -> Self {
        Self {
            migration_id: m.migration_id.clone(),
            vee_id: m.vee_id.clone(),
            from: m.source.clone(),
            to: m.destination.clone(),
            reason: m.reason.clone(),
            state: m.state(),
            decided_by: m.decided_by.clone(),
            detail: m.detail.clone(),
            total_ms: interfaces::time::ms_of_duration(&m.total),
            downtime_ms: interfaces::time::ms_of_duration(&m.downtime),
            created: rfc3339_ms(interfaces::time::ms_of(&m.create_time)),
        }
    }
}

/// One event of WatchEvents or ListEvents.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub at: Option<String>,
    #[serde(serialize_with = "empty_as_null")]
    pub service_id: String,
    #[serde(serialize_with = "empty_as_null")]
    pub vee_id: String,
    pub kind: String,
    #[serde(serialize_with = "empty_as_null")]
    pub detail: String,
    /// Its place in the site's log: `veem events --after`, ListEvents'
    /// `after_seq` (0: not stored).
    pub seq: u64,
}

impl From<&vmi::Event> for Event {
    fn from(e: &vmi::Event) -> Self {
        Self {
            at: rfc3339_ms(interfaces::time::ms_of(&e.time)),
            service_id: e.service_id.clone(),
            vee_id: e.vee_id.clone(),
            kind: e.kind.clone(),
            detail: e.detail.clone(),
            seq: e.seq,
        }
    }
}

/// One usage record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageRecord {
    pub record_id: String,
    pub abc_id: String,
    pub vee_id: String,
    /// The VEE's component (its manifest's name).
    pub component: String,
    /// Executing site first; each hop appends its own.
    pub site_chain: Vec<String>,
    pub start: Option<String>,
    pub end: Option<String>,
    pub cpu_seconds: f64,
    pub memory_mib_seconds: f64,
    pub disk_bytes: u64,
    pub net_bytes: u64,
}

impl From<&vmi::UsageRecord> for UsageRecord {
    fn from(r: &vmi::UsageRecord) -> Self {
        Self {
            record_id: r.record_id.clone(),
            abc_id: r.abc_id.clone(),
            vee_id: r.vee_id.clone(),
            component: r.component.clone(),
            site_chain: r.site_chain.clone(),
            start: rfc3339_secs(interfaces::time::s_of(&r.start_time)),
            end: rfc3339_secs(interfaces::time::s_of(&r.end_time)),
            cpu_seconds: r.cpu_seconds,
            memory_mib_seconds: r.memory_mib_seconds,
            disk_bytes: r.disk_bytes,
            net_bytes: r.net_bytes,
        }
    }
}

/// One SLA violation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlaViolation {
    pub vee_id: String,
    pub term: String,
    pub start: Option<String>,
    pub end: Option<String>,
    pub penalty: f64,
}

impl From<&vmi::SlaViolation> for SlaViolation {
    fn from(v: &vmi::SlaViolation) -> Self {
        Self {
            vee_id: v.vee_id.clone(),
            term: v.term.clone(),
            start: rfc3339_secs(interfaces::time::s_of(&v.start_time)),
            end: rfc3339_secs(interfaces::time::s_of(&v.end_time)),
            penalty: v.penalty,
        }
    }
}

/// Sums over a usage report (computed by the CLI).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UsageTotals {
    pub cpu_seconds: f64,
    pub memory_mib_seconds: f64,
    pub disk_bytes: u64,
    pub net_bytes: u64,
    pub penalty: f64,
}

/// Reply of GetUsage, with totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Usage {
    pub service_id: String,
    pub records: Vec<UsageRecord>,
    pub violations: Vec<SlaViolation>,
    pub totals: UsageTotals,
}

impl From<&vmi::UsageReport> for Usage {
    fn from(u: &vmi::UsageReport) -> Self {
        let mut totals = UsageTotals::default();
        for r in &u.records {
            totals.cpu_seconds += r.cpu_seconds;
            totals.memory_mib_seconds += r.memory_mib_seconds;
            totals.disk_bytes = totals.disk_bytes.saturating_add(r.disk_bytes);
            totals.net_bytes = totals.net_bytes.saturating_add(r.net_bytes);
        }
        // Summing an empty f64 iterator gives -0.0 (printed "-0.00"): start at 0.
        totals.penalty = u.violations.iter().fold(0.0, |sum, v| sum + v.penalty);
        Self {
            service_id: u.service_id.clone(),
            records: u.records.iter().map(UsageRecord::from).collect(),
            violations: u.violations.iter().map(SlaViolation::from).collect(),
            totals,
        }
    }
}

/// The sums of the usage records of one group (`usage --group-by`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageGroup {
    /// The VEE ID, the component, the executing site, or the hour's or
    /// day's start (RFC 3339).
    pub key: String,
    pub records: usize,
    /// The metered time of the records, in hours (instance-hours: every
    /// instance that ran, scaled-in ones too).
    pub instance_hours: f64,
    pub cpu_seconds: f64,
    pub memory_mib_seconds: f64,
    pub disk_bytes: u64,
    pub net_bytes: u64,
}

/// What usage records are summed by (`veem usage --group-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    Vee,
    Component,
    Site,
    Hour,
    Day,
}

/// `records` summed per `by` (a record belongs to the hour or day it
/// starts in), in key order.
pub fn usage_groups(records: &[vmi::UsageRecord], by: GroupBy) -> Vec<UsageGroup> {
    let mut groups: std::collections::BTreeMap<String, UsageGroup> = Default::default();
    for r in records {
        let start = interfaces::time::s_of(&r.start_time);
        let key = match by {
            GroupBy::Vee => r.vee_id.clone(),
            GroupBy::Component => r.component.clone(),
            GroupBy::Site => r.site_chain.first().cloned().unwrap_or_default(),
            GroupBy::Hour => rfc3339_secs(start - start.rem_euclid(3600)).unwrap_or_default(),
            GroupBy::Day => rfc3339_secs(start - start.rem_euclid(86_400)).unwrap_or_default(),
        };
        let g = groups.entry(key.clone()).or_insert(UsageGroup {
            key,
            records: 0,
            instance_hours: 0.0,
            cpu_seconds: 0.0,
            memory_mib_seconds: 0.0,
            disk_bytes: 0,
            net_bytes: 0,
        });
        g.records += 1;
        g.instance_hours += (interfaces::time::s_of(&r.end_time) - start).max(0) as f64 / 3600.0;
        g.cpu_seconds += r.cpu_seconds;
        g.memory_mib_seconds += r.memory_mib_seconds;
        g.disk_bytes += r.disk_bytes;
        g.net_bytes += r.net_bytes;
    }
    groups.into_values().collect()
}
