//! Unit tests of the planner across its modules.

use vee_manifest::{Constraint, ConstraintKind, ConstraintLevel, ConstraintScope, GuaranteeLevel, Manifest, MigrationPolicy};

use super::*;

pub(super) fn res(vcpus: u32, mib: u64) -> Resources {
    Resources::new(vcpus, mib, 1)
}

/// A planner with `n` hosts `h0..` of 4 vCPUs, `mib` MiB, 100 GiB, site
/// "s1", region "r1".
pub(super) fn planner(n: usize, mib: u64, rank: RankPolicy) -> Planner {
    let mut p = Planner::new(PlannerConfig {
        rank,
        ..PlannerConfig::default()
    });
    for i in 0..n {
        p.add_host(HostSpec::new(format!("h{i}"), Resources::new(4, mib, 100), "s1", "r1"))
            .unwrap();
    }
    p
}

/// A request for service `id` with components (name, instances, resources).
pub(super) fn request(id: &str, g: GuaranteeLevel, window: SlotRange, comps: &[(&str, usize, Resources)]) -> ServiceRequest {
    ServiceRequest {
        service_id: id.into(),
        consumer: "acme".into(),
        guarantee: g,
        migration: MigrationPolicy::Site,
        window,
        components: comps
            .iter()
            .map(|(n, k, r)| ComponentRequest {
                name: n.to_string(),
                resources: *r,
                profile: None,
                vees: (0..*k).map(|i| format!("{id}-{n}-{i}")).collect(),
            })
            .collect(),
        constraints: Vec::new(),
        peer_spare: PeerSpare::NotAsked,
        padding: crate::Padding::NONE,
    }
}

pub(super) fn anti(level: ConstraintLevel, scope: ConstraintScope, comps: &[&str]) -> Constraint {
    Constraint {
        kind: ConstraintKind::AntiAffinity,
        level,
        scope,
        components: comps.iter().map(|s| s.to_string()).collect(),
    }
}

/// Everything persisted, in a canonical order: equal iff the planner's
/// state is equal.
pub(super) fn fingerprint(p: &Planner) -> String {
    let mut prim: Vec<_> = p.p.primaries.values().map(|r| format!("{r:?}")).collect();
    let mut spares: Vec<_> = p.p.spares.values().map(|r| format!("{r:?}")).collect();
    let mut peer: Vec<_> = p.p.peer_spares.values().map(|r| format!("{r:?}")).collect();
    let mut svcs: Vec<_> = p.p.services.values().map(|s| format!("{s:?}")).collect();
    prim.sort();
    spares.sort();
    peer.sort();
    svcs.sort();
    format!("{prim:?}{spares:?}{peer:?}{svcs:?}{:?}", p.p.hosts)
}

pub(super) fn accepted(a: Admission) -> Admitted {
    match a {
        Admission::Accepted(x) => x,
        other => panic!("expected acceptance, got {other:?}"),
    }
}

fn hosts_of(a: &Admitted) -> Vec<String> {
    a.placements.iter().map(|p| p.host.clone()).collect()
}

pub(super) const W: SlotRange = SlotRange { start: 0, end: 60 };

#[test]
fn admits_a_service_and_reserves_every_slot() {
    let mut p = planner(2, 1024, RankPolicy::Packing);
    let a = accepted(p.admit(&request(
        "s",
        GuaranteeLevel::Standard,
        W,
        &[("db", 2, res(1, 256)), ("web", 1, res(1, 128))],
    )));
    assert_eq!(a.placements.len(), 3);
    assert!(a.placements.iter().all(|x| x.range == W));
    assert_eq!(p.reservation_count(), 3);
    assert_eq!(
        p.host_usage("h0", 0).unwrap().memory_mib + p.host_usage("h1", 0).unwrap().memory_mib,
        640
    );
    assert_eq!(p.host_usage("h0", 60).unwrap(), Resources::ZERO);
    p.check_invariants().unwrap();
}

#[test]
fn packing_fills_one_host_striping_spreads() {
    let mut p = planner(3, 1024, RankPolicy::Packing);
    for i in 0..4 {
        let a = accepted(p.admit(&request(&format!("s{i}"), GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))])));
        assert_eq!(hosts_of(&a), vec!["h0"], "packing: most loaded host first");
    }
    let a = accepted(p.admit(&request("s9", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))])));
    assert_eq!(hosts_of(&a), vec!["h1"], "h0 is full");

    let mut p = planner(3, 1024, RankPolicy::Striping);
    let mut used = Vec::new();
    for i in 0..3 {
        let a = accepted(p.admit(&request(&format!("s{i}"), GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))])));
        used.extend(hosts_of(&a));
    }
    used.sort();
    assert_eq!(used, vec!["h0", "h1", "h2"], "striping: least loaded host first");
}

#[test]
fn load_aware_prefers_the_lowest_measured_load() {
    let mut p = planner(3, 1024, RankPolicy::LoadAware);
    p.set_measured_load("h0", 0.9).unwrap();
    p.set_measured_load("h1", 0.1).unwrap();
    p.set_measured_load("h2", 0.5).unwrap();
    let a = accepted(p.admit(&request("s", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))])));
    assert_eq!(hosts_of(&a), vec!["h1"]);
    p.set_measured_load("h1", 0.95).unwrap();
    let a = accepted(p.admit(&request("t", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))])));
    assert_eq!(hosts_of(&a), vec!["h2"]);
}

#[test]
fn slow_path_finds_room_in_a_window_the_peak_hides() {
    // h0 is full in [0, 10) only; a request for [10, 20) still fits there.
    let mut p = planner(1, 1024, RankPolicy::Packing);
    accepted(p.admit(&request(
        "a",
        GuaranteeLevel::Standard,
        SlotRange::new(0, 10),
        &[("vm", 1, res(4, 1024))],
    )));
    let a = accepted(p.admit(&request(
        "b",
        GuaranteeLevel::Standard,
        SlotRange::new(10, 20),
        &[("vm", 1, res(4, 1024))],
    )));
    assert_eq!(hosts_of(&a), vec!["h0"]);
    p.check_invariants().unwrap();
}

#[test]
fn admission_is_atomic() {
    let mut p = planner(2, 1024, RankPolicy::Packing);
    accepted(p.admit(&request("a", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 512))])));
    let before = fingerprint(&p);
    // 3 × 768 MiB: two fit (h1 and nothing else... h0 has 512 free), the third never.
    let r = request("b", GuaranteeLevel::Standard, W, &[("big", 3, res(1, 768))]);
    let out = p.admit(&r);
    assert!(!out.is_accepted(), "{out:?}");
    assert_eq!(fingerprint(&p), before, "a rejected admission changes nothing");
    assert_eq!(p.reservation_count(), 1);
    p.check_invariants().unwrap();
}

#[test]
fn negotiate_reserves_nothing() {
    let p = planner(2, 1024, RankPolicy::Packing);
    let before = fingerprint(&p);
    let out = p.negotiate(&request("a", GuaranteeLevel::Enhanced, W, &[("vm", 2, res(1, 256))]));
    assert!(out.is_accepted(), "{out:?}");
    assert_eq!(fingerprint(&p), before);
    assert!(p.service("a").is_none());
}

#[test]
fn counter_offer_with_the_earliest_feasible_start() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    accepted(p.admit(&request(
        "a",
        GuaranteeLevel::Standard,
        SlotRange::new(0, 10),
        &[("vm", 1, res(1, 1024))],
    )));
    accepted(p.admit(&request(
        "b",
        GuaranteeLevel::Standard,
        SlotRange::new(12, 30),
        &[("vm", 1, res(1, 600))],
    )));
    let before = fingerprint(&p);
    // 512 MiB for 5 slots from slot 5: [10, 15) collides with b at 12,
    // so the earliest start is 30.
    let out = p.admit(&request(
        "c",
        GuaranteeLevel::Standard,
        SlotRange::new(5, 10),
        &[("vm", 1, res(1, 512))],
    ));
    match &out {
        Admission::CounterOffer { window, reasons } => {
            assert_eq!(*window, SlotRange::new(30, 35));
            assert!(reasons[0].contains("component vm instance 0"), "{reasons:?}");
        }
        other => panic!("expected a counter-offer, got {other:?}"),
    }
    assert_eq!(fingerprint(&p), before);
    // With 400 MiB the gap [10, 15) is fine: 400 + 600 <= 1024.
    let out = p.admit(&request(
        "d",
        GuaranteeLevel::Standard,
        SlotRange::new(5, 10),
        &[("vm", 1, res(1, 400))],
    ));
    assert!(
        matches!(out, Admission::CounterOffer { window, .. } if window == SlotRange::new(10, 15)),
        "{out:?}"
    );
}

#[test]
fn rejects_what_no_host_can_hold_with_the_reason() {
    let mut p = planner(2, 128, RankPolicy::Packing);
    let out = p.admit(&request("s", GuaranteeLevel::Standard, W, &[("db", 1, res(1, 256))]));
    match out {
        Admission::Rejected { reasons, .. } => {
            assert_eq!(reasons, vec!["component db: needs 256 MiB, largest host has 128 MiB".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    let out = p.admit(&request("s", GuaranteeLevel::Standard, W, &[("db", 1, res(8, 64))]));
    assert!(out.reasons()[0].contains("needs 8 vCPUs, largest host has 4"), "{out:?}");
}

#[test]
fn anti_affinity_instance_scope_puts_every_instance_on_its_own_host() {
    let mut p = planner(3, 4096, RankPolicy::Packing);
    let mut r = request("s", GuaranteeLevel::Standard, W, &[("db", 3, res(1, 256))]);
    r.constraints = vec![anti(ConstraintLevel::Host, ConstraintScope::Instance, &["db"])];
    let mut hosts = hosts_of(&accepted(p.admit(&r)));
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 3);

    let mut r = request("t", GuaranteeLevel::Standard, W, &[("db", 4, res(1, 256))]);
    r.constraints = vec![anti(ConstraintLevel::Host, ConstraintScope::Instance, &["db"])];
    let out = p.admit(&r);
    assert!(matches!(out, Admission::Rejected { .. }), "{out:?}");
    assert!(out.reasons()[0].contains("needs 4 distinct hosts, only 3"), "{out:?}");
}

#[test]
fn anti_affinity_type_scope_separates_types_only() {
    let mut p = planner(2, 4096, RankPolicy::Packing);
    let mut r = request("s", GuaranteeLevel::Standard, W, &[("db", 2, res(1, 256)), ("web", 2, res(1, 128))]);
    r.constraints = vec![anti(ConstraintLevel::Host, ConstraintScope::Type, &["db", "web"])];
    let a = accepted(p.admit(&r));
    let host_of = |c: &str| -> Vec<String> { a.placements.iter().filter(|x| x.component == c).map(|x| x.host.clone()).collect() };
    let (db, web) = (host_of("db"), host_of("web"));
    assert_eq!(db[0], db[1], "packing keeps both db instances together");
    assert_eq!(web[0], web[1]);
    assert_ne!(db[0], web[0]);
}

#[test]
fn affinity_keeps_components_together() {
    let mut p = planner(3, 4096, RankPolicy::Striping);
    let mut r = request(
        "s",
        GuaranteeLevel::Standard,
        W,
        &[("app", 2, res(1, 256)), ("cache", 1, res(1, 128))],
    );
    r.constraints = vec![Constraint {
        kind: ConstraintKind::Affinity,
        ..anti(ConstraintLevel::Host, ConstraintScope::Type, &["app", "cache"])
    }];
    let mut hosts = hosts_of(&accepted(p.admit(&r)));
    hosts.dedup();
    assert_eq!(hosts.len(), 1, "striping would spread them otherwise");
}

#[test]
fn site_level_anti_affinity_uses_site_labels_or_asks_for_remote_placement() {
    let mut p = planner(3, 4096, RankPolicy::Packing);
    let mut r = request("s", GuaranteeLevel::Standard, W, &[("db", 2, res(1, 256))]);
    r.constraints = vec![anti(ConstraintLevel::Site, ConstraintScope::Instance, &["db"])];
    match p.admit(&r) {
        Admission::Rejected { reasons, remote } => {
            assert!(reasons[0].contains("needs remote placement"), "{reasons:?}");
            assert_eq!(remote.len(), 1);
            assert_eq!(remote[0].level, ConstraintLevel::Site);
            assert_eq!(remote[0].vees, vec!["s-db-1".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    p.add_host(HostSpec::new("far", Resources::new(4, 4096, 100), "s2", "r1")).unwrap();
    let a = accepted(p.admit(&r));
    let mut hosts = hosts_of(&a);
    hosts.sort();
    assert_eq!(hosts, vec!["far", "h0"]);
}

#[test]
fn background_runs_in_gaps_and_is_displaced_by_sla_bound_vees() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    accepted(p.admit(&request("bg", GuaranteeLevel::Background, W, &[("batch", 2, res(1, 512))])));
    // Background never displaces anything.
    let out = p.admit(&request("bg2", GuaranteeLevel::Background, W, &[("batch", 1, res(1, 512))]));
    assert!(!out.is_accepted());
    // A standard VEE displaces one background VEE.
    let a = accepted(p.admit(&request(
        "s",
        GuaranteeLevel::Standard,
        SlotRange::new(10, 20),
        &[("vm", 1, res(1, 400))],
    )));
    assert_eq!(a.preempted.len(), 1, "{a:?}");
    let victim = &a.preempted[0];
    assert!(p.reservation(victim).is_none());
    assert_eq!(p.service_of(victim).as_deref(), Some("bg"));
    p.check_invariants().unwrap();
    // It comes back in a gap: not while the standard VEE and the other
    // background VEE hold the host, but after.
    assert!(p.resume_background(victim, SlotRange::new(10, 20), &[]).is_err());
    p.release_service("s").unwrap();
    let back = p.resume_background(victim, W, &[]).unwrap();
    assert_eq!(back.host, "h0");
    p.check_invariants().unwrap();
}

#[test]
fn enhanced_keeps_a_spare_on_another_host() {
    let mut p = planner(1, 4096, RankPolicy::Packing);
    let out = p.admit(&request("e", GuaranteeLevel::Enhanced, W, &[("vm", 1, res(1, 256))]));
    assert!(out.reasons().iter().any(|r| r.contains("spare")), "{out:?}");
    p.add_host(HostSpec::new("h1", Resources::new(4, 4096, 100), "s1", "r1")).unwrap();
    let a = accepted(p.admit(&request("e", GuaranteeLevel::Enhanced, W, &[("vm", 2, res(1, 256))])));
    assert_eq!(a.spares.len(), 2);
    for (v, s) in a.placements.iter().zip(&a.spares) {
        assert_eq!(v.vee, s.vee);
        assert_ne!(v.host, s.host);
    }
    assert_eq!(
        p.host_usage("h0", 0).unwrap().memory_mib + p.host_usage("h1", 0).unwrap().memory_mib,
        1024
    );
    p.check_invariants().unwrap();
}

#[test]
fn a_hosts_reservations_are_listed_with_its_spares_until_they_end() {
    let mut p = planner(2, 4096, RankPolicy::Packing);
    let a = accepted(p.admit(&request("e", GuaranteeLevel::Enhanced, W, &[("vm", 1, res(1, 256))])));
    let (vee_host, spare_host) = (a.placements[0].host.clone(), a.spares[0].host.clone());
    let on = |h: &str, from| {
        p.reservations_on(h, from)
            .unwrap()
            .iter()
            .map(|r| (r.vee.clone(), r.spare))
            .collect::<Vec<_>>()
    };
    let vee = a.placements[0].vee.clone();
    assert_eq!(on(&vee_host, 0), [(vee.clone(), false)]);
    assert_eq!(on(&spare_host, 0), [(vee, true)]);
    assert!(on(&vee_host, W.end).is_empty(), "ended by then");
    assert!(p.reservations_on("nope", 0).is_err());
}

#[test]
fn full_needs_a_peer_spare() {
    let mut p = planner(1, 4096, RankPolicy::Packing);
    let mut r = request("f", GuaranteeLevel::Full, W, &[("vm", 1, res(1, 256))]);
    r.migration = MigrationPolicy::Federation;
    let before = fingerprint(&p);
    match p.admit(&r) {
        Admission::NeedsPeerSpare { spares } => {
            assert_eq!(spares.len(), 1);
            assert_eq!(spares[0].resources, res(1, 256));
            assert_eq!(spares[0].site, None);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fingerprint(&p), before);
    r.peer_spare = PeerSpare::NoneOffered;
    assert!(matches!(p.admit(&r), Admission::Rejected { .. }));
    r.peer_spare = PeerSpare::Offered { site: "site-b".into() };
    let a = accepted(p.admit(&r));
    assert_eq!(a.peer_spares[0].site.as_deref(), Some("site-b"));
    assert_eq!(p.peer_spare("f-vm-0").unwrap().site.as_deref(), Some("site-b"));
}

#[test]
fn compatibility_profile_filters_hosts() {
    let mut p = planner(1, 4096, RankPolicy::Packing);
    let tcg = Profile {
        arch: "x86_64".into(),
        accel: "tcg".into(),
        ..Profile::default()
    };
    p.add_host(HostSpec::new("t", Resources::new(4, 4096, 100), "s1", "r1").with_profile(tcg.clone()))
        .unwrap();
    let mut r = request("s", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))]);
    r.components[0].profile = Some(tcg);
    assert_eq!(hosts_of(&accepted(p.admit(&r))), vec!["t"]);
    let mut r = request("u", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))]);
    r.components[0].profile = Some(Profile {
        arch: "aarch64".into(),
        ..Profile::default()
    });
    assert!(p.admit(&r).reasons()[0].contains("compatibility profile"));
}

#[test]
fn usage_limits_filter_admission() {
    let mut p = planner(4, 4096, RankPolicy::Packing);
    p.set_usage_limit(
        "acme",
        UsageLimit::Fixed {
            limit: Resources::new(100, 1000, 1000),
        },
    );
    accepted(p.admit(&request("a", GuaranteeLevel::Standard, W, &[("vm", 3, res(1, 256))])));
    let out = p.admit(&request("b", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))]));
    assert!(out.reasons()[0].contains("usage SLA of consumer \"acme\""), "{out:?}");
    // Another window is fine: the limit is on what is held at once.
    accepted(p.admit(&request(
        "c",
        GuaranteeLevel::Standard,
        SlotRange::new(60, 70),
        &[("vm", 1, res(1, 256))],
    )));
    assert_eq!(p.consumer_held("acme", W), Resources::new(3, 768, 3));
}

#[test]
fn release_and_move() {
    let mut p = planner(2, 1024, RankPolicy::Packing);
    let mut r = request("s", GuaranteeLevel::Standard, W, &[("db", 2, res(1, 512))]);
    r.constraints = vec![anti(ConstraintLevel::Host, ConstraintScope::Instance, &["db"])];
    accepted(p.admit(&r));
    let h1 = p.placement("s-db-1").unwrap().host;
    let other = if h1 == "h0" { "h1" } else { "h0" };
    let e = p.move_vee("s-db-1", other, 10).unwrap_err();
    assert!(e.to_string().contains("anti-affinity"), "{e}");
    p.add_host(HostSpec::new("h2", Resources::new(4, 256, 100), "s1", "r1")).unwrap();
    let e = p.move_vee("s-db-1", "h2", 10).unwrap_err();
    assert!(e.to_string().contains("free in slot 10"), "{e}");
    p.add_host(HostSpec::new("h3", Resources::new(4, 1024, 100), "s1", "r1")).unwrap();
    let moved = p.move_vee("s-db-1", "h3", 10).unwrap();
    assert_eq!(moved.range, SlotRange::new(10, 60));
    assert_eq!(p.host_usage(&h1, 10).unwrap(), Resources::ZERO);
    p.check_invariants().unwrap();
    assert_eq!(p.release_service("s").unwrap().len(), 2);
    assert_eq!(p.reservation_count(), 0);
    assert!(p.remove_host("h3").is_ok());
    assert!(p.release_service("s").is_err());
    p.check_invariants().unwrap();
}

#[test]
fn down_hosts_are_blocked_for_the_interval_only() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    p.set_host_down("h0", 0, 10).unwrap();
    let out = p.admit(&request(
        "s",
        GuaranteeLevel::Standard,
        SlotRange::new(5, 8),
        &[("vm", 1, res(1, 256))],
    ));
    assert!(
        matches!(out, Admission::CounterOffer { window, .. } if window == SlotRange::new(10, 13)),
        "{out:?}"
    );
    accepted(p.admit(&request(
        "s",
        GuaranteeLevel::Standard,
        SlotRange::new(10, 13),
        &[("vm", 1, res(1, 256))],
    )));
    p.set_host_up("h0").unwrap();
    accepted(p.admit(&request(
        "t",
        GuaranteeLevel::Standard,
        SlotRange::new(0, 5),
        &[("vm", 1, res(1, 256))],
    )));
}

#[test]
fn serde_round_trip_rebuilds_the_same_planner() {
    let mut p = planner(3, 2048, RankPolicy::Packing);
    accepted(p.admit(&request("e", GuaranteeLevel::Enhanced, W, &[("vm", 2, res(1, 256))])));
    accepted(p.admit(&request("b", GuaranteeLevel::Background, W, &[("vm", 1, res(1, 256))])));
    p.set_usage_limit(
        "acme",
        UsageLimit::Extensible {
            limit: Resources::new(64, 65536, 1000),
        },
    );
    let json = serde_json::to_string(&p).unwrap();
    let parts = Planner::from_parts(p.header(), p.entries().into_iter().map(|(_, e)| e));
    assert_eq!(fingerprint(&p), fingerprint(&parts), "header and entries hold the whole planner");
    let mut q: Planner = serde_json::from_str(&json).unwrap();
    q.check_invariants().unwrap();
    assert_eq!(fingerprint(&p), fingerprint(&q));
    let r = request("n", GuaranteeLevel::Standard, W, &[("vm", 3, res(2, 512))]);
    assert_eq!(p.admit(&r), q.admit(&r));
}

#[test]
fn forget_before_drops_finished_reservations() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    accepted(p.admit(&request(
        "a",
        GuaranteeLevel::Standard,
        SlotRange::new(0, 10),
        &[("vm", 1, res(1, 256))],
    )));
    accepted(p.admit(&request(
        "b",
        GuaranteeLevel::Standard,
        SlotRange::new(5, 20),
        &[("vm", 1, res(1, 256))],
    )));
    let gone = p.forget_before(10);
    assert_eq!(
        gone,
        vec![ReservationKey {
            vee: "a-vm-0".into(),
            spare: false
        }]
    );
    assert_eq!(p.host_usage("h0", 10).unwrap().memory_mib, 256);
    p.check_invariants().unwrap();
}

#[test]
fn request_from_the_example_manifest() {
    let m = Manifest::from_toml(include_str!("../../configs/manifests/example.toml")).unwrap();
    let clock = SlotClock::new(0, 60);
    let start = m.sla.window.unwrap().start.timestamp();
    let r = ServiceRequest::from_manifest("svc1", &m, &clock, start - 3600, 10);
    assert_eq!(r.window.len(), 12 * 60);
    assert_eq!(r.window.start, clock.slot_at(start));
    assert_eq!(r.vee_count(), 5);
    assert_eq!(r.components[0].vees, vec!["svc1-db-0", "svc1-db-1"]);
    assert_eq!(r.total_resources(), Resources::new(5, 2 * 256 + 3 * 128, 5));
    let mut p = planner(3, 1024, RankPolicy::Striping);
    let a = accepted(p.admit(&r));
    let db: Vec<_> = a
        .placements
        .iter()
        .filter(|x| x.component == "db")
        .map(|x| x.host.clone())
        .collect();
    assert_ne!(db[0], db[1], "anti-affinity of the example");
    // No window: from now for the default length.
    let minimal = Manifest::from_toml(include_str!("../../configs/manifests/minimal.toml")).unwrap();
    let r = ServiceRequest::from_manifest("svc2", &minimal, &clock, 600, 10);
    assert_eq!(r.window, SlotRange::new(10, 20));
}

#[test]
fn rejects_malformed_requests() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    accepted(p.admit(&request("a", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))])));
    assert!(p
        .admit(&request("a", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))]))
        .reasons()[0]
        .contains("already admitted"));
    assert!(p
        .admit(&request(
            "b",
            GuaranteeLevel::Standard,
            SlotRange::new(5, 5),
            &[("vm", 1, res(1, 256))]
        ))
        .reasons()[0]
        .contains("empty"));
    let mut r = request("c", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))]);
    r.constraints = vec![anti(ConstraintLevel::Host, ConstraintScope::Instance, &["nope"])];
    assert!(p.admit(&r).reasons()[0].contains("unknown component"));
}
