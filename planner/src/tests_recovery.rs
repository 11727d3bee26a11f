//! Unit tests of recovery placement and VRM remapping.

use vee_manifest::{ConstraintLevel, ConstraintScope, GuaranteeLevel, MigrationPolicy};

use super::tests::{anti, planner, request, res};
use super::*;

const W: SlotRange = SlotRange { start: 0, end: 100 };

fn admit(p: &mut Planner, r: &ServiceRequest) -> Admitted {
    match p.admit(r) {
        Admission::Accepted(a) => a,
        other => panic!("{other:?}"),
    }
}

fn step<'a>(report: &'a RecoveryReport, vee: &str) -> &'a RecoveryStep {
    report
        .steps
        .iter()
        .find(|s| s.vee == vee)
        .unwrap_or_else(|| panic!("no step for {vee}: {report:?}"))
}

#[test]
fn restarts_on_a_free_local_host_honouring_anti_affinity() {
    let mut p = planner(3, 1024, RankPolicy::Packing);
    let mut r = request("s", GuaranteeLevel::Standard, W, &[("db", 2, res(1, 512))]);
    r.constraints = vec![anti(ConstraintLevel::Host, ConstraintScope::Instance, &["db"])];
    admit(&mut p, &r);
    let failed = p.placement("s-db-0").unwrap().host;
    let sibling = p.placement("s-db-1").unwrap().host;
    p.set_host_down(&failed, 30, 5).unwrap();
    let report = p.recover_host(&failed, 30).unwrap();
    let s = step(&report, "s-db-0");
    let RecoveryTarget::Host { host } = &s.target else {
        panic!("{s:?}")
    };
    assert_ne!(host, &sibling, "anti-affinity with the surviving instance");
    assert_ne!(host, &failed);
    assert_eq!(s.range, SlotRange::new(30, 100));
    assert_eq!(p.placement("s-db-0").unwrap().range, SlotRange::new(30, 100));
    assert_eq!(p.host_usage(&failed, 50).unwrap(), Resources::ZERO);
    p.check_invariants().unwrap();
}

#[test]
fn suspends_background_vees_to_make_room() {
    let mut p = planner(2, 1024, RankPolicy::Packing);
    admit(&mut p, &request("s", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 1024))]));
    admit(&mut p, &request("bg", GuaranteeLevel::Background, W, &[("batch", 2, res(1, 512))]));
    assert_eq!(p.placement("s-vm-0").unwrap().host, "h0");
    p.set_host_down("h0", 10, 5).unwrap();
    let report = p.recover_host("h0", 10).unwrap();
    let s = step(&report, "s-vm-0");
    assert_eq!(s.target, RecoveryTarget::Host { host: "h1".into() });
    assert_eq!(s.preempted.len(), 2, "{s:?}");
    p.check_invariants().unwrap();
}

#[test]
fn enhanced_uses_its_spare_and_looks_for_a_new_one() {
    let mut p = planner(3, 1024, RankPolicy::Packing);
    let a = admit(&mut p, &request("e", GuaranteeLevel::Enhanced, W, &[("vm", 1, res(1, 512))]));
    let (home, spare) = (a.placements[0].host.clone(), a.spares[0].host.clone());
    p.set_host_down(&home, 20, 5).unwrap();
    let report = p.recover_host(&home, 20).unwrap();
    assert_eq!(step(&report, "e-vm-0").target, RecoveryTarget::Spare { host: spare.clone() });
    assert_eq!(report.spares_moved.len(), 1);
    let new_spare = p.spare("e-vm-0").unwrap();
    assert_ne!(p.host_name(new_spare.host), spare);
    assert_ne!(p.host_name(new_spare.host), home);
    assert_eq!(new_spare.range, SlotRange::new(20, 100));
    p.check_invariants().unwrap();
}

#[test]
fn the_guarantee_decides_what_happens_without_local_room() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    admit(&mut p, &request("l", GuaranteeLevel::Legacy, W, &[("vm", 1, res(1, 256))]));
    let mut std_fed = request("s", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))]);
    std_fed.migration = MigrationPolicy::Federation;
    admit(&mut p, &std_fed);
    admit(&mut p, &request("n", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))]));
    let mut full = request("f", GuaranteeLevel::Full, W, &[("vm", 1, res(1, 256))]);
    full.migration = MigrationPolicy::Federation;
    full.peer_spare = PeerSpare::Offered { site: "peer".into() };
    admit(&mut p, &full);
    p.set_host_down("h0", 5, 5).unwrap();
    let report = p.recover_host("h0", 5).unwrap();
    // Most valuable first.
    assert_eq!(report.steps[0].vee, "f-vm-0");
    assert_eq!(step(&report, "f-vm-0").target, RecoveryTarget::PeerSpare { site: "peer".into() });
    assert!(p.reservation("f-vm-0").is_none());
    assert_eq!(step(&report, "s-vm-0").target, RecoveryTarget::NeedsPeer);
    assert!(matches!(&step(&report, "n-vm-0").target, RecoveryTarget::Unplaced { reason } if reason.contains("forbids peer")));
    assert!(matches!(&step(&report, "l-vm-0").target, RecoveryTarget::Unplaced { reason } if reason.contains("legacy")));
    // Unplaced VEEs keep their reservation so a later call can retry.
    assert_eq!(p.placement("l-vm-0").unwrap().host, "h0");
    p.add_host(HostSpec::new("h1", Resources::new(4, 1024, 100), "s1", "r1")).unwrap();
    let report = p.recover_host("h0", 6).unwrap();
    assert!(
        report.steps.iter().all(|s| matches!(s.target, RecoveryTarget::Host { .. })),
        "{report:?}"
    );
    p.check_invariants().unwrap();
}

#[test]
fn spares_on_the_failed_host_move_elsewhere() {
    let mut p = planner(3, 1024, RankPolicy::Packing);
    let a = admit(&mut p, &request("e", GuaranteeLevel::Enhanced, W, &[("vm", 1, res(1, 512))]));
    let spare_host = a.spares[0].host.clone();
    p.set_host_down(&spare_host, 10, 5).unwrap();
    let report = p.recover_host(&spare_host, 10).unwrap();
    assert!(report.steps.is_empty());
    assert_eq!(report.spares_moved.len(), 1);
    let moved = &report.spares_moved[0];
    assert_ne!(moved.host, spare_host);
    assert_ne!(moved.host, a.placements[0].host);
    p.check_invariants().unwrap();
}

#[test]
fn remaps_only_reservations_starting_within_the_interval() {
    let mut p = planner(2, 1024, RankPolicy::Packing);
    for (id, start) in [("a", 5), ("b", 15), ("c", 40)] {
        admit(
            &mut p,
            &request(
                id,
                GuaranteeLevel::Standard,
                SlotRange::new(start, start + 10),
                &[("vm", 1, res(1, 1024))],
            ),
        );
        assert_eq!(p.placement(&format!("{id}-vm-0")).unwrap().host, "h0");
    }
    let keys = p.reservations_to_remap("h0", 5, 20).unwrap();
    let vees: Vec<_> = keys.iter().map(|k| k.vee.as_str()).collect();
    assert_eq!(vees, vec!["a-vm-0", "b-vm-0"]);
    p.set_host_down("h0", 5, 20).unwrap();
    let report = p.remap("h0", 5, 20).unwrap();
    assert_eq!(report.remapped.len(), 2);
    assert!(report.remapped.iter().all(|(_, pl)| pl.host == "h1"));
    assert_eq!(p.placement("c-vm-0").unwrap().host, "h0", "outside the interval: stays for now");
    // Later, c enters the interval, but h1 is taken in [40, 50)? No: a and
    // b ended by then, so it moves too.
    let report = p.remap("h0", 30, 20).unwrap();
    assert_eq!(report.remapped.len(), 1);
    p.check_invariants().unwrap();
}

#[test]
fn remap_keeps_what_finds_no_other_host() {
    let mut p = planner(1, 1024, RankPolicy::Packing);
    admit(
        &mut p,
        &request("a", GuaranteeLevel::Standard, SlotRange::new(5, 10), &[("vm", 1, res(1, 512))]),
    );
    let report = p.remap("h0", 0, 10).unwrap();
    assert_eq!(
        report.kept,
        vec![ReservationKey {
            vee: "a-vm-0".into(),
            spare: false
        }]
    );
    assert_eq!(p.placement("a-vm-0").unwrap().host, "h0");
}

#[test]
fn remapping_interval_follows_the_weighted_load_profile() {
    // Two hosts of 1000 MiB; the failed one holds 500 MiB in [0, 100).
    let mut p = Planner::new(PlannerConfig::default());
    for h in ["h0", "h1"] {
        p.add_host(HostSpec::new(h, Resources::new(100, 1000, 100), "s", "r")).unwrap();
    }
    admit(&mut p, &request("a", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 500))]));
    let failed = p.placement("a-vm-0").unwrap().host;
    let params = |eta| RemapParams {
        eta,
        zeta: 2.0,
        lookahead_slots: 200,
    };
    // l̂ = (0 + 2·500) / 2000 = 0.5 in slots < 100.
    assert_eq!(p.remapping_interval(&failed, 0, &params(0.4), &[]).unwrap(), 99);
    assert_eq!(p.remapping_interval(&failed, 50, &params(0.4), &[]).unwrap(), 49);
    assert_eq!(p.remapping_interval(&failed, 0, &params(0.6), &[]).unwrap(), 1);
    // The average booking profile adds 0.2 for the next 10 slots.
    assert_eq!(p.remapping_interval(&failed, 0, &params(0.6), &[0.2; 10]).unwrap(), 10);
    assert!(p
        .remapping_interval(&failed, 0, &RemapParams { zeta: 0.5, ..params(0.5) }, &[])
        .is_err());
}

#[test]
fn recover_elsewhere_avoids_the_hosts_that_failed_the_recovery() {
    let mut p = planner(4, 1024, RankPolicy::Packing);
    admit(&mut p, &request("s", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 512))]));
    let failed = p.placement("s-vm-0").unwrap().host;
    p.set_host_down(&failed, 10, 5).unwrap();
    let report = p.recover_host(&failed, 10).unwrap();
    let RecoveryTarget::Host { host: first } = step(&report, "s-vm-0").target.clone() else {
        panic!("{report:?}")
    };
    // The restore on `first` failed: the next host is neither it nor the failed one.
    let s = p.recover_elsewhere("s-vm-0", 10, &[&failed]).unwrap();
    let RecoveryTarget::Host { host: second } = s.target.clone() else {
        panic!("{s:?}")
    };
    assert!(second != first && second != failed, "{first} {second} {failed}");
    assert_eq!(p.placement("s-vm-0").unwrap().host, second);
    assert_eq!(p.host_usage(&first, 20).unwrap(), Resources::ZERO, "the reservation left {first}");
    let s = p.recover_elsewhere("s-vm-0", 10, &[&failed, &first]).unwrap();
    let RecoveryTarget::Host { host: third } = s.target.clone() else {
        panic!("{s:?}")
    };
    assert!(![&first, &second, &failed].contains(&&third));
    // Every other host failed too: site policy, no peer, so it is unplaced.
    let s = p.recover_elsewhere("s-vm-0", 10, &[&failed, &first, &second]).unwrap();
    assert!(matches!(s.target, RecoveryTarget::Unplaced { .. }), "{s:?}");
    assert!(p.recover_elsewhere("nope", 10, &[]).is_err());
    p.check_invariants().unwrap();
}

#[test]
fn a_vee_is_pinned_to_its_hosts_profile_and_recovered_only_on_a_compatible_host() {
    let profile = |machine: &str| Profile {
        arch: "x86_64".into(),
        machine: machine.into(),
        ..Profile::default()
    };
    let mut p = Planner::new(PlannerConfig::default());
    for (name, machine) in [("h0", "pc-i440fx-7.2"), ("h1", "pc-q35-8.2"), ("h2", "pc-i440fx-7.2")] {
        p.add_host(HostSpec::new(name, Resources::new(4, 1024, 100), "s1", "r1").with_profile(profile(machine)))
            .unwrap();
    }
    admit(&mut p, &request("s", GuaranteeLevel::Standard, W, &[("vm", 1, res(1, 256))]));
    assert_eq!(p.placement("s-vm-0").unwrap().host, "h0");
    let pinned = p.service("s").unwrap().components[0].profile.clone();
    assert_eq!(pinned, Some(profile("pc-i440fx-7.2")));
    p.set_host_down("h0", 10, 5).unwrap();
    let report = p.recover_host("h0", 10).unwrap();
    assert_eq!(
        step(&report, "s-vm-0").target,
        RecoveryTarget::Host { host: "h2".into() },
        "not h1, whose machine type differs"
    );
    // A move to the other machine type is refused with the reason.
    let e = p.move_vee("s-vm-0", "h1", 11).unwrap_err();
    assert!(e.to_string().contains("compatibility profile"), "{e}");
    p.check_invariants().unwrap();
}
