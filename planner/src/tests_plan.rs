//! Unit tests of admission as a plan (issue 37, after Nomad's scheduler):
//! a plan made on the planner as it was, applied at the revision it was
//! made at or where it still holds on the fresh state, its entries what
//! applying it changes.

use vee_manifest::GuaranteeLevel;

use super::tests::{accepted, fingerprint, planner, request, res, W};
use super::*;

/// A plan made before another admission is refused, and changes nothing;
/// planned again on the fresh state it is applied (issue 37: Nomad's
/// partial commit, retried).
#[test]
fn a_plan_made_before_another_admission_is_stale_and_planned_again() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    let at = p.revision();
    let first = p
        .plan_admission(&request("a", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 512))]))
        .unwrap();
    let second = p
        .plan_admission(&request("b", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 768))]))
        .unwrap();
    assert_eq!(p.service_ids().count(), 0, "planning reserves nothing");
    p.apply(second).unwrap();
    let before = fingerprint(&p);
    let stale = p.apply(first).unwrap_err();
    assert_eq!(stale.planned, at);
    assert!(stale.now > at);
    assert_eq!(fingerprint(&p), before, "a stale plan changes nothing");
    // On the fresh state the first service no longer fits.
    let again = p.plan_admission(&request("a", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 512))]));
    assert!(!again.unwrap_err().is_accepted());
    p.check_invariants().unwrap();
}

/// A plan that displaces a background VEE removes its reservation when
/// applied, and says so in its entries.
#[test]
fn a_plan_that_displaces_background_removes_its_reservation_when_applied() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    accepted(p.admit(&request("bg", GuaranteeLevel::Background, W, &[("batch", 2, res(1, 512))])));
    p.take_changes();
    let plan = p
        .plan_admission(&request("s", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 400))]))
        .unwrap();
    let victim = plan.admitted.preempted[0].clone();
    assert!(p.reservation(&victim).is_some(), "not displaced by planning");
    assert!(plan.entries().contains(&(format!("p/{victim}"), None)), "{:?}", plan.entries());
    let admitted = p.apply_written(plan).unwrap();
    assert_eq!(admitted.preempted, std::slice::from_ref(&victim));
    assert!(p.reservation(&victim).is_none());
    assert!(p.take_changes().is_empty(), "written by the caller: not noted again");
    p.check_invariants().unwrap();
}

/// A snapshot is the planner as it was: an admission on it reserves
/// nothing in the planner, one on the planner does not reach it, it has
/// no pending changes of its own to save, and each keeps its invariants.
#[test]
fn a_snapshot_and_its_planner_change_apart() {
    let mut p = planner(2, 1024, RankPolicy::Packing);
    accepted(p.admit(&request("a", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 512))])));
    let mut s = p.snapshot();
    assert!(s.take_changes().is_empty(), "nothing of the planner's to save");
    let planner_was = fingerprint(&p);
    accepted(s.admit(&request("b", GuaranteeLevel::Standard, W, &[("vm", 2, res(1, 256))])));
    assert_eq!(fingerprint(&p), planner_was, "the snapshot's admission reached the planner");
    let snapshot_was = fingerprint(&s);
    accepted(p.admit(&request("c", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 768))])));
    assert_eq!(fingerprint(&s), snapshot_was, "the planner's admission reached the snapshot");
    let saved: Vec<String> = p.take_changes().into_iter().map(|(k, _)| k).collect();
    assert!(saved.iter().any(|k| k == "v/c") && !saved.iter().any(|k| k == "v/b"), "{saved:?}");
    p.check_invariants().unwrap();
    s.check_invariants().unwrap();
}

/// Two plans made at the same revision that fit together are both
/// applied (Nomad's plan applier: the second is checked against the
/// fresh state, not refused for its revision); one whose host went down
/// since, or whose host the first filled, is stale, naming why.
#[test]
fn plans_made_together_commit_unless_their_hosts_changed() {
    let mut p = planner(2, 1024, RankPolicy::Striping);
    let a = p
        .plan_admission(&request("a", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 512))]))
        .unwrap();
    let b = p
        .plan_admission(&request("b", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 512))]))
        .unwrap();
    p.apply(a).unwrap();
    p.apply(b).unwrap();
    assert_eq!(p.service_ids().count(), 2);
    p.check_invariants().unwrap();
    // Planned on a full host: the other's room is gone by the time it applies.
    let mut p = planner(1, 1024, RankPolicy::Packing);
    let c = p
        .plan_admission(&request("c", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 768))]))
        .unwrap();
    let d = p
        .plan_admission(&request("d", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 512))]))
        .unwrap();
    p.apply(c).unwrap();
    let before = fingerprint(&p);
    let stale = p.apply(d).unwrap_err();
    assert!(stale.why.contains("host h0 has no room for VEE d-vm-0"), "{stale}");
    assert_eq!(fingerprint(&p), before);
    // Planned on a host that went down since.
    let mut p = planner(2, 1024, RankPolicy::Packing);
    let e = p
        .plan_admission(&request("e", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 512))]))
        .unwrap();
    let host = e.admitted.placements[0].host.clone();
    p.set_host_down(&host, 0, 100).unwrap();
    let stale = p.apply(e).unwrap_err();
    assert!(stale.why.contains(&format!("host {host} is down")), "{stale}");
}
