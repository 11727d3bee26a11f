//! Unit tests of resizing an admitted VEE in place (issue 40, item 5).

use vee_manifest::GuaranteeLevel;

use super::tests::{accepted, fingerprint, planner, request, res, W};
use super::*;

/// Growth needs room on its host from now on; shrinking always fits;
/// a refusal names the host and the slot and changes nothing.
#[test]
fn a_vee_grows_where_its_host_has_room_and_shrinks_anywhere() {
    // Two hosts of 4 vCPUs and 1024 MiB; packing puts both VEEs on h0.
    let mut p = planner(2, 1024, RankPolicy::Packing);
    let a = accepted(p.admit(&request("s", GuaranteeLevel::Standard, W, &[("web", 2, res(1, 256))])));
    let (v0, v1) = (a.placements[0].vee.clone(), a.placements[1].vee.clone());
    assert_eq!(a.placements[0].host, a.placements[1].host);
    let old = p.resize_vee(&v0, 2, 768, 10).unwrap();
    assert_eq!(old, res(1, 256));
    let r = p.reservation(&v0).unwrap();
    assert_eq!((r.resources, r.range), (res(2, 768), SlotRange::new(10, W.end)));
    p.check_invariants().unwrap();
    // 768 + 256 = 1024: full. One MiB more for either is refused.
    let before = fingerprint(&p);
    let e = p.resize_vee(&v1, 1, 257, 10).unwrap_err().to_string();
    assert!(
        e.contains(&v1) && e.contains("h0") && e.contains("no room for") && e.contains("slot 10"),
        "{e}"
    );
    assert_eq!(fingerprint(&p), before, "a refusal changes nothing");
    // Shrinking fits, and frees the room for the other.
    p.resize_vee(&v0, 1, 128, 20).unwrap();
    p.resize_vee(&v1, 1, 512, 20).unwrap();
    p.check_invariants().unwrap();
    let e = p.resize_vee("nope", 1, 128, 20).unwrap_err();
    assert!(matches!(e, PlanError::UnknownVee(_)), "{e}");
    assert!(matches!(p.resize_vee(&v1, 0, 128, 20).unwrap_err(), PlanError::Invalid(_)));
}

/// The enhanced guarantee: the spare grows with its VEE, and needs the
/// room on its own host too.
#[test]
fn an_enhanced_vee_grows_only_if_its_spare_can() {
    let mut p = planner(2, 1024, RankPolicy::Packing);
    let a = accepted(p.admit(&request("s", GuaranteeLevel::Enhanced, W, &[("web", 1, res(1, 256))])));
    let v = a.placements[0].vee.clone();
    let spare_host = p.spare(&v).unwrap().host;
    assert_ne!(spare_host, p.reservation(&v).unwrap().host);
    p.resize_vee(&v, 1, 512, 0).unwrap();
    assert_eq!(p.spare(&v).unwrap().resources, res(1, 512));
    // Fill the spare's host: the VEE may no longer grow.
    let filler = request("f", GuaranteeLevel::Standard, W, &[("x", 1, res(1, 512))]);
    accepted(p.admit(&filler));
    let before = fingerprint(&p);
    let e = p.resize_vee(&v, 1, 1024, 0).unwrap_err().to_string();
    assert!(e.contains("no room for"), "{e}");
    assert_eq!(fingerprint(&p), before);
    p.check_invariants().unwrap();
}
