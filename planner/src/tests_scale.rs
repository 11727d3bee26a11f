//! Scale check (ignored by default; run in release):
//! `cargo test -p veem --release --lib scale -- --ignored --nocapture`.

use std::time::Instant;

use vee_manifest::{ConstraintLevel, ConstraintScope, GuaranteeLevel};

use super::tests::{anti, request};
use super::*;

fn run(rank: RankPolicy, same_window: bool, hosts: usize) {
    let mut p = Planner::new(PlannerConfig {
        rank,
        ..PlannerConfig::default()
    });
    for i in 0..hosts {
        p.add_host(HostSpec::new(format!("h{i}"), Resources::new(32, 128 * 1024, 2000), "s1", "r1"))
            .unwrap();
    }
    // Deterministic pseudo-random numbers.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let t0 = Instant::now();
    let (mut accepted, mut other) = (0, 0);
    let (mut times, mut counts) = ([0f64; 3], [0u32; 3]);
    for s in 0..25_000 {
        let (start, len) = if same_window {
            (0, 1440)
        } else {
            (rnd(1440) as u32, 60 + rnd(1380) as u32)
        };
        let mib = 1024 * (1 + rnd(4));
        let g = if rnd(10) == 0 {
            GuaranteeLevel::Background
        } else {
            GuaranteeLevel::Standard
        };
        let mut r = request(
            &format!("s{s}"),
            g,
            SlotRange::starting_at(start, len),
            &[("vm", 4, Resources::new(1, mib, 10))],
        );
        if rnd(4) == 0 {
            r.constraints = vec![anti(ConstraintLevel::Host, ConstraintScope::Instance, &["vm"])];
        }
        let t = Instant::now();
        let out = p.admit(&r);
        let kind = match &out {
            Admission::Accepted(_) => 0,
            Admission::CounterOffer { .. } => 1,
            _ => 2,
        };
        times[kind] += t.elapsed().as_secs_f64();
        counts[kind] += 1;
        if out.is_accepted() {
            accepted += 1
        } else {
            other += 1
        }
    }
    let admit = t0.elapsed();
    eprintln!("accepted / counter-offer / rejected: {counts:?} taking {times:?} s");
    let t1 = Instant::now();
    let report = p.recover_host("h0", 100).unwrap();
    let remap = p.remap("h1", 100, 60).unwrap();
    eprintln!(
        "{rank:?} {hosts} hosts, same_window={same_window}: {accepted} services accepted, {other} not, {} VEEs, admission {:?} ({:.1} µs/service); \
         recover {} VEEs + remap {} in {:?}",
        p.reservation_count(),
        admit,
        admit.as_secs_f64() * 1e6 / 25_000.0,
        report.steps.len(),
        remap.remapped.len(),
        t1.elapsed()
    );
    let t2 = Instant::now();
    let json = serde_json::to_vec(&p).unwrap();
    let q: Planner = serde_json::from_slice(&json).unwrap();
    eprintln!("serde: {} bytes, round trip {:?}", json.len(), t2.elapsed());
    assert_eq!(q.reservation_count(), p.reservation_count());
}

#[test]
#[ignore]
fn scale_10k_hosts_100k_vees() {
    for rank in [RankPolicy::Packing, RankPolicy::Striping, RankPolicy::LoadAware] {
        for same in [true, false] {
            run(rank, same, 10_000);
        }
    }
}

/// Far more demand than capacity: most requests get counter-offers or
/// rejections, each searching forward over candidate starts.
#[test]
#[ignore]
fn scale_saturated() {
    for same in [true, false] {
        run(RankPolicy::Packing, same, 1_000);
    }
}
