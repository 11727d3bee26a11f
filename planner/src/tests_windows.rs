//! Unit tests of extending an admitted service's window, and of the padding
//! a window is reserved with.

use vee_manifest::GuaranteeLevel;

use super::tests::{fingerprint, planner, request, res};
use super::*;

fn admit(p: &mut Planner, r: &ServiceRequest) -> Admitted {
    match p.admit(r) {
        Admission::Accepted(a) => a,
        other => panic!("not admitted: {other:?}"),
    }
}

#[test]
fn an_extension_keeps_each_vee_on_its_host_for_the_added_slots() {
    let mut p = planner(2, 1024, RankPolicy::Packing);
    let a = admit(
        &mut p,
        &request("s", GuaranteeLevel::Enhanced, SlotRange::new(0, 10), &[("vm", 2, res(2, 256))]),
    );
    let hosts: Vec<String> = a.placements.iter().map(|pl| pl.host.clone()).collect();
    assert_eq!(p.extend_service("s", 30).unwrap(), SlotRange::new(0, 30));
    for (pl, h) in a.placements.iter().zip(&hosts) {
        let r = p.reservation(&pl.vee).unwrap();
        assert_eq!((p.host_name(r.host), r.range), (h.as_str(), SlotRange::new(0, 30)));
        assert_eq!(p.spare(&pl.vee).unwrap().range.end, 30, "its spare goes on too");
    }
    assert_eq!(p.service("s").unwrap().window, SlotRange::new(0, 30));
    p.check_invariants().unwrap();
    // Not later than the end: refused.
    assert!(matches!(p.extend_service("s", 30), Err(PlanError::Invalid(_))));
    assert!(matches!(p.extend_service("nope", 40), Err(PlanError::UnknownService(_))));
}

#[test]
fn an_extension_into_capacity_promised_to_another_changes_nothing() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    admit(
        &mut p,
        &request("s", GuaranteeLevel::Standard, SlotRange::new(0, 10), &[("vm", 1, res(3, 256))]),
    );
    // Slots 20.. of the only host are promised to another service.
    admit(
        &mut p,
        &request("later", GuaranteeLevel::Standard, SlotRange::new(20, 40), &[("vm", 1, res(2, 256))]),
    );
    let before = fingerprint(&p);
    let e = p.extend_service("s", 30).unwrap_err();
    match &e {
        PlanError::Infeasible { vee, host, reason } => {
            assert_eq!((vee.as_str(), host.as_str()), ("s-vm-0", "h0"));
            assert!(reason.contains("slot 20"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fingerprint(&p), before, "nothing changed");
    // Up to where the other begins, it fits.
    assert_eq!(p.extend_service("s", 20).unwrap(), SlotRange::new(0, 20));
    p.check_invariants().unwrap();
}

#[test]
fn padding_holds_slots_around_a_window_but_never_before_now() {
    let pad = Padding { before: 2, after: 1 };
    let (r, applied) = pad.apply(SlotRange::new(10, 20), 0);
    assert_eq!((r, applied), (SlotRange::new(8, 21), pad));
    assert_eq!(applied.window_of(r), SlotRange::new(10, 20));
    // A window starting now: its VEEs start at once, nothing is reserved
    // in the past.
    let (r, applied) = pad.apply(SlotRange::new(10, 20), 10);
    assert_eq!((r, applied), (SlotRange::new(10, 21), Padding { before: 0, after: 1 }));
    assert_eq!(applied.window_of(r), SlotRange::new(10, 20));
    // One slot of lead left before now.
    let (r, _) = pad.apply(SlotRange::new(10, 20), 9);
    assert_eq!(r, SlotRange::new(9, 21));
}
