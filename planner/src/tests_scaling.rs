//! Unit tests of scaling an admitted service out (issue 40): new
//! instances planned like a Deploy's, against the instances already
//! placed.

use vee_manifest::{ConstraintLevel, ConstraintScope, GuaranteeLevel};

use super::tests::{accepted, anti, fingerprint, planner, request, res, W};
use super::*;

fn ids(service: &str, from: usize, n: usize) -> Vec<String> {
    (from..from + n).map(|i| format!("{service}-web-{i}")).collect()
}

/// Instance-scope anti-affinity holds against the instances there: the
/// third instance on three hosts goes to the free one, a fourth is
/// refused with the reason and changes nothing.
#[test]
fn new_instances_keep_anti_affinity_with_those_placed() {
    let mut p = planner(3, 4096, RankPolicy::Packing);
    let mut r = request("s", GuaranteeLevel::Standard, W, &[("web", 2, res(1, 256))]);
    r.constraints = vec![anti(ConstraintLevel::Host, ConstraintScope::Instance, &["web"])];
    let a = accepted(p.admit(&r));
    let used: Vec<String> = a.placements.iter().map(|x| x.host.clone()).collect();
    let plan = p.plan_scale_out("s", "web", &ids("s", 2, 1), 10, &PeerSpare::NotAsked).unwrap();
    let new_host = plan.admitted.placements[0].host.clone();
    assert!(!used.contains(&new_host), "{new_host} already runs an instance");
    // From slot 10 (now) to the window's end.
    assert_eq!(plan.admitted.placements[0].range, SlotRange::new(10, W.end));
    p.apply(plan).unwrap();
    assert_eq!(p.service("s").unwrap().components[0].vees, ids("s", 0, 3));
    let before = fingerprint(&p);
    let refused = p.plan_scale_out("s", "web", &ids("s", 3, 1), 10, &PeerSpare::NotAsked).unwrap_err();
    let why = refused.reasons().join("; ");
    assert!(why.contains("new instance 1 of 1") && why.contains("no host can take it"), "{why}");
    assert_eq!(fingerprint(&p), before);
    p.check_invariants().unwrap();
}

/// All or nothing: two instances of which only one fits add neither.
#[test]
fn a_scale_out_is_all_or_nothing_and_names_what_does_not_fit() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    accepted(p.admit(&request("s", GuaranteeLevel::Standard, W, &[("web", 1, res(1, 400))])));
    let before = fingerprint(&p);
    let e = p.plan_scale_out("s", "web", &ids("s", 1, 2), 0, &PeerSpare::NotAsked).unwrap_err();
    assert!(e.reasons().join("").contains("new instance 2 of 2"), "{e:?}");
    assert_eq!(fingerprint(&p), before);
    // Unknown service or component, a VEE ID in use: named.
    for (svc, comp, vees, why) in [
        ("nope", "web", ids("nope", 1, 1), "not admitted"),
        ("s", "db", ids("s", 1, 1), "no component \"db\""),
        ("s", "web", ids("s", 0, 1), "not unique"),
    ] {
        let e = p.plan_scale_out(svc, comp, &vees, 0, &PeerSpare::NotAsked).unwrap_err();
        assert!(e.reasons().join("").contains(why), "{why}: {e:?}");
    }
}

/// The enhanced guarantee: each new instance gets its spare on another
/// host; the full guarantee asks for peer spares first.
#[test]
fn new_instances_get_the_guarantee_levels_spares() {
    let mut p = planner(2, 2048, RankPolicy::Packing);
    accepted(p.admit(&request("e", GuaranteeLevel::Enhanced, W, &[("web", 1, res(1, 256))])));
    let plan = p.plan_scale_out("e", "web", &ids("e", 1, 1), 0, &PeerSpare::NotAsked).unwrap();
    let (at, spare) = (&plan.admitted.placements[0], &plan.admitted.spares[0]);
    assert_ne!(at.host, spare.host);
    p.apply(plan).unwrap();
    assert!(p.spare("e-web-1").is_some());

    let mut full = request("f", GuaranteeLevel::Full, W, &[("web", 1, res(1, 256))]);
    full.peer_spare = PeerSpare::Offered { site: "b".into() };
    accepted(p.admit(&full));
    match *p.plan_scale_out("f", "web", &ids("f", 1, 1), 0, &PeerSpare::NotAsked).unwrap_err() {
        Admission::NeedsPeerSpare { spares } => assert_eq!(spares[0].vee, "f-web-1"),
        other => panic!("{other:?}"),
    }
    let offered = PeerSpare::Offered { site: "b".into() };
    let plan = p.plan_scale_out("f", "web", &ids("f", 1, 1), 0, &offered).unwrap();
    assert_eq!(plan.admitted.peer_spares[0].site.as_deref(), Some("b"));
    p.apply(plan).unwrap();
    assert!(p.peer_spare("f-web-1").is_some());
    p.check_invariants().unwrap();
}

/// The consumer's usage SLA counts the new instances.
#[test]
fn the_usage_sla_counts_new_instances() {
    let mut p = planner(2, 4096, RankPolicy::Packing);
    p.set_usage_limit(
        "acme",
        UsageLimit::Fixed {
            limit: Resources::new(8, 600, 100),
        },
    );
    accepted(p.admit(&request("s", GuaranteeLevel::Standard, W, &[("web", 2, res(1, 256))])));
    let e = p.plan_scale_out("s", "web", &ids("s", 2, 1), 0, &PeerSpare::NotAsked).unwrap_err();
    assert!(e.reasons().join("").contains("usage SLA"), "{e:?}");
}

/// Two scale-outs of one service planned together: the first applies,
/// the second read the service's record as it was and is stale. So is
/// one planned before an instance moved (its anti-affinity was decided
/// by where the instances ran).
#[test]
fn two_scale_outs_of_one_service_planned_together_do_not_both_apply() {
    let mut p = planner(3, 4096, RankPolicy::Packing);
    accepted(p.admit(&request("s", GuaranteeLevel::Standard, W, &[("web", 1, res(1, 256))])));
    let first = p.plan_scale_out("s", "web", &ids("s", 1, 1), 10, &PeerSpare::NotAsked).unwrap();
    let second = p.plan_scale_out("s", "web", &ids("s", 1, 1), 10, &PeerSpare::NotAsked).unwrap();
    p.apply(first).unwrap();
    let stale = p.apply(second).unwrap_err();
    assert!(stale.why.contains("service s"), "{stale}");
    assert_eq!(p.service("s").unwrap().components[0].vees, ids("s", 0, 2));
    p.check_invariants().unwrap();
    let mut r = request("t", GuaranteeLevel::Standard, W, &[("web", 1, res(1, 256))]);
    r.constraints = vec![anti(ConstraintLevel::Host, ConstraintScope::Instance, &["web"])];
    let placed = accepted(p.admit(&r)).placements[0].host.clone();
    let plan = p.plan_scale_out("t", "web", &ids("t", 1, 1), 10, &PeerSpare::NotAsked).unwrap();
    let planned = plan.admitted.placements[0].host.clone();
    assert_ne!(planned, placed);
    p.move_vee("t-web-0", &planned, 10).unwrap();
    let stale = p.apply(plan).unwrap_err();
    assert!(stale.why.contains("service t"), "{stale}");
    p.check_invariants().unwrap();
}
