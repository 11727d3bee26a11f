//! Planner at scale: services of 4 VEEs (1 vCPU, 1 GiB, 10 GiB each) with
//! host anti-affinity of instance scope (every VEE of a service on its own
//! host), admitted one by one into a planner of identical hosts (32 vCPUs,
//! 128 GiB, 2 TB) over one day of 60 s slots.

use std::time::Instant;

use interfaces::manifest::{Constraint, ConstraintKind, ConstraintLevel, ConstraintScope, GuaranteeLevel, MigrationPolicy};
use serde_json::{json, Value};
use veem::planner::{ComponentRequest, HostSpec, Padding, PeerSpare, Planner, PlannerConfig, Resources, ServiceRequest, SlotRange};

const VEES_PER_SERVICE: usize = 4;

fn request(s: usize) -> ServiceRequest {
    let id = format!("s{s}");
    ServiceRequest {
        service_id: id.clone(),
        consumer: "bench".into(),
        guarantee: GuaranteeLevel::Standard,
        migration: MigrationPolicy::Site,
        window: SlotRange::starting_at(0, 1440),
        components: vec![ComponentRequest {
            name: "vm".into(),
            resources: Resources::new(1, 1024, 10),
            profile: None,
            vees: (0..VEES_PER_SERVICE).map(|i| format!("{id}-vm-{i}")).collect(),
        }],
        constraints: vec![Constraint {
            kind: ConstraintKind::AntiAffinity,
            level: ConstraintLevel::Host,
            scope: ConstraintScope::Instance,
            components: vec!["vm".into()],
        }],
        peer_spare: PeerSpare::NotAsked,
        padding: Padding::NONE,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// VmRSS of this process in MiB.
pub fn rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Admits `vees / 4` services into a planner of `hosts` hosts; returns the
/// measurements and the planner (alive, for the memory reading).
fn scenario(hosts: usize, vees: usize) -> (Value, Planner) {
    let mut p = Planner::new(PlannerConfig::default());
    let t = Instant::now();
    for i in 0..hosts {
        p.add_host(HostSpec::new(
            format!("h{i}"),
            Resources::new(32, 128 * 1024, 2000),
            "site-a",
            "region-1",
        ))
        .expect("add host");
    }
    let add_hosts_s = t.elapsed().as_secs_f64();
    let services = vees / VEES_PER_SERVICE;
    let reqs: Vec<ServiceRequest> = (0..services).map(request).collect();
    let mut lat_us = Vec::with_capacity(services);
    let (mut accepted, mut placed) = (0usize, 0usize);
    let t0 = Instant::now();
    for r in &reqs {
        let t = Instant::now();
        let out = p.admit(r);
        lat_us.push(t.elapsed().as_secs_f64() * 1e6);
        if let veem::planner::Admission::Accepted(a) = &out {
            accepted += 1;
            placed += a.placements.len();
        }
    }
    let total_s = t0.elapsed().as_secs_f64();
    lat_us.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = lat_us.iter().sum::<f64>() / lat_us.len().max(1) as f64;
    let out = json!({
        "hosts": hosts,
        "vees": vees,
        "services": services,
        "vees_per_service": VEES_PER_SERVICE,
        "constraint": "host anti-affinity, instance scope",
        "accepted_services": accepted,
        "placed_vees": placed,
        "reservations": p.reservation_count(),
        "add_hosts_s": round3(add_hosts_s),
        "admission_total_s": round3(total_s),
        "admission_p50_us": round1(percentile(&lat_us, 50.0)),
        "admission_p99_us": round1(percentile(&lat_us, 99.0)),
        "admission_max_us": round1(lat_us.last().copied().unwrap_or(0.0)),
        "admission_mean_us": round1(mean),
        "placements_per_s": (placed as f64 / total_s).round(),
        "services_per_s": (accepted as f64 / total_s).round(),
    });
    (out, p)
}

/// What planning on a snapshot costs at the planner's size: a snapshot
/// (`snapshot_us`, median of 101), and a service of 4 VEEs planned on a
/// fresh snapshot each time (`plan_on_snapshot_us`, median of 101: the
/// copies its changes make included), as a Deploy plans.
fn snapshots(p: &mut Planner) -> Value {
    p.take_changes();
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let taken: Vec<f64> = (0..101)
        .map(|_| {
            let t = Instant::now();
            let s = p.snapshot();
            let us = t.elapsed().as_secs_f64() * 1e6;
            drop(s);
            us
        })
        .collect();
    let planned: Vec<f64> = (0..101)
        .map(|i| {
            let t = Instant::now();
            let plan = p.snapshot().plan_admission(&request(1_000_000 + i));
            let us = t.elapsed().as_secs_f64() * 1e6;
            assert!(plan.is_ok(), "a service fits at 100,000 VEEs");
            us
        })
        .collect();
    json!({
        "snapshot_us": round1(median(taken)),
        "plan_on_snapshot_us": round1(median(planned)),
    })
}

pub(crate) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn run() -> Value {
    let rss_start = rss_mib();
    eprintln!("planner: 1,000 hosts / 10,000 VEEs");
    let (small, p) = scenario(1_000, 10_000);
    drop(p);
    eprintln!("planner: {small}");
    eprintln!("planner: 10,000 hosts / 100,000 VEEs");
    let (large, mut p) = scenario(10_000, 100_000);
    let rss = rss_mib();
    eprintln!("planner: {large}; VmRSS {rss:.1} MiB");
    let reservations = p.reservation_count();
    let snapshots = snapshots(&mut p);
    eprintln!("planner: snapshots at 100,000 VEEs: {snapshots}");
    drop(p);
    json!({
        "hosts_1k_vees_10k": small,
        "hosts_10k_vees_100k": large,
        "snapshot_100k": snapshots,
        "rss_mib_after_100k_vees": round1(rss),
        "rss_mib_at_start": round1(rss_start),
        "reservations_held_at_rss": reservations,
    })
}
