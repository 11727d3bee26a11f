//! Property tests of the planner's invariants: after any sequence of
//! admissions, releases, failures, remaps and moves no host is overcommitted
//! in any slot; a request that is not accepted changes nothing; instance-
//! scope anti-affinity never puts two instances on one host; a plan made
//! before other operations either still holds and is applied or is stale
//! and changes nothing (Nomad's plan applier); a snapshot
//! taken before an operation is left as it was, whichever of the two the
//! operation ran on.

use std::collections::HashSet;

use proptest::prelude::*;
use vee_manifest::{ConstraintKind, ConstraintLevel, ConstraintScope, GuaranteeLevel};

use super::tests::{anti, fingerprint, request};
use super::*;

#[derive(Debug, Clone)]
enum Op {
    Admit {
        comps: Vec<(usize, u64, u32)>,
        start: u32,
        len: u32,
        guarantee: usize,
        anti: bool,
        dry_run: bool,
    },
    Release(usize),
    Fail {
        host: usize,
        now: u32,
        interval: u32,
    },
    Up(usize),
    Move {
        vee: usize,
        host: usize,
        from: u32,
    },
    Forget(u32),
    /// `n` more instances of `c0` of a service, from slot `from`.
    ScaleOut {
        service: usize,
        n: usize,
        from: u32,
    },
    /// The last instance of `c0` of a service released.
    ScaleIn(usize),
    Resize {
        vee: usize,
        vcpus: u32,
        memory_mib: u64,
        from: u32,
    },
}

const GUARANTEES: [GuaranteeLevel; 5] = [
    GuaranteeLevel::Background,
    GuaranteeLevel::Legacy,
    GuaranteeLevel::Standard,
    GuaranteeLevel::Enhanced,
    GuaranteeLevel::Full,
];

fn op() -> impl Strategy<Value = Op> {
    let comp = (1usize..=3, 1u64..=8, 1u32..=2).prop_map(|(n, m, c)| (n, m * 128, c));
    prop_oneof![
        6 => (prop::collection::vec(comp, 1..=2), 0u32..40, 1u32..30, 0usize..5, any::<bool>(), any::<bool>())
            .prop_map(|(comps, start, len, guarantee, anti, dry_run)| Op::Admit { comps, start, len, guarantee, anti, dry_run }),
        2 => (0usize..16).prop_map(Op::Release),
        1 => (0usize..4, 0u32..40, 1u32..20).prop_map(|(host, now, interval)| Op::Fail { host, now, interval }),
        1 => (0usize..4).prop_map(Op::Up),
        2 => (0usize..64, 0usize..4, 0u32..40).prop_map(|(vee, host, from)| Op::Move { vee, host, from }),
        1 => (0u32..40).prop_map(Op::Forget),
        3 => (0usize..16, 1usize..=2, 0u32..40).prop_map(|(service, n, from)| Op::ScaleOut { service, n, from }),
        1 => (0usize..16).prop_map(Op::ScaleIn),
        2 => (0usize..64, 1u32..=3, 1u64..=12, 0u32..40)
            .prop_map(|(vee, vcpus, m, from)| Op::Resize { vee, vcpus, memory_mib: m * 128, from }),
    ]
}

fn fresh() -> Planner {
    let mut p = Planner::new(PlannerConfig {
        counter_offer_horizon_slots: 60,
        counter_offer_max_tries: 16,
        ..PlannerConfig::default()
    });
    for (i, mib) in [1024u64, 2048, 512, 1536].into_iter().enumerate() {
        p.add_host(HostSpec::new(
            format!("h{i}"),
            Resources::new(4, mib, 100),
            if i < 3 { "s1" } else { "s2" },
            "r1",
        ))
        .unwrap();
    }
    p
}

/// Every instance-scope host-level anti-affinity holds among the VEEs that
/// hold a reservation.
fn anti_affinity_holds(p: &Planner) -> Result<(), String> {
    for id in p.service_ids() {
        let svc = p.service(id).unwrap();
        for c in svc
            .constraints
            .iter()
            .filter(|c| c.kind == ConstraintKind::AntiAffinity && c.scope == ConstraintScope::Instance && c.level == ConstraintLevel::Host)
        {
            let mut seen = HashSet::new();
            for comp in svc.components.iter().filter(|x| c.components.contains(&x.name)) {
                for v in &comp.vees {
                    if let Some(r) = p.reservation(v) {
                        if !seen.insert(r.host) {
                            return Err(format!("service {id}: two instances on host {}", p.host_name(r.host)));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut p = fresh();
    // What a store that writes only the changes holds (planner_store).
    let mut written: HashMap<String, PlannerEntry> = p.entries().into_iter().collect();
    p.take_changes();
    let mut services: Vec<String> = Vec::new();
    let mut vees: Vec<String> = Vec::new();
    // A plan held over to a later admission (see Op::Admit).
    let mut held: Option<AdmissionPlan> = None;
    for (n, op) in ops.into_iter().enumerate() {
        // A snapshot before the operation; every other operation runs on
        // the snapshot and the planner is the copy left behind.
        let mut other = p.snapshot();
        if n % 2 == 1 {
            std::mem::swap(&mut p, &mut other);
        }
        let (other_was, other_revision) = (fingerprint(&other), other.revision());
        match op {
            Op::Admit {
                comps,
                start,
                len,
                guarantee,
                anti: with_anti,
                dry_run,
            } => {
                let id = format!("s{n}");
                let spec: Vec<(String, usize, Resources)> = comps
                    .iter()
                    .enumerate()
                    .map(|(i, (k, m, c))| (format!("c{i}"), *k, Resources::new(*c, *m, 1)))
                    .collect();
                let spec_ref: Vec<(&str, usize, Resources)> = spec.iter().map(|(a, b, c)| (a.as_str(), *b, *c)).collect();
                let window = SlotRange::starting_at(start, len);
                let mut r = request(&id, GUARANTEES[guarantee], window, &spec_ref);
                if with_anti {
                    r.constraints = vec![anti(ConstraintLevel::Host, ConstraintScope::Instance, &["c0"])];
                }
                if r.guarantee == GuaranteeLevel::Full && start % 2 == 0 {
                    r.peer_spare = PeerSpare::Offered { site: "peer".into() };
                }
                // A plan made at an earlier admission (of another service:
                // another Deploy that waited), applied now, after whatever
                // came between: it holds and its service is admitted, or it
                // is stale and changes nothing; the invariants are checked
                // below either way.
                if !dry_run {
                    if let Some(plan) = held.take() {
                        let was = fingerprint(&p);
                        let (sid, placed) = (plan.admitted.service.clone(), plan.admitted.placements.clone());
                        match p.apply(plan) {
                            Ok(_) => {
                                services.push(sid);
                                vees.extend(placed.into_iter().map(|x| x.vee));
                            }
                            Err(_) => prop_assert_eq!(fingerprint(&p), was, "a stale plan changed the planner"),
                        }
                    }
                    let mut later = r.clone();
                    later.service_id = format!("x{n}");
                    for c in &mut later.components {
                        for v in &mut c.vees {
                            *v = format!("x{v}");
                        }
                    }
                    held = p.plan_admission(&later).ok();
                }
                let before = fingerprint(&p);
                // The same admission as a plan, on a snapshot: it reserves
                // nothing, and applied it gives what admit gives.
                let mut copy = p.snapshot();
                let revision = copy.revision();
                let plan = copy.plan_admission(&r);
                prop_assert_eq!(fingerprint(&copy), before.clone());
                prop_assert_eq!(copy.revision(), revision);
                let out = if dry_run { p.negotiate(&r) } else { p.admit(&r) };
                match (&plan, &out) {
                    (Ok(plan), Admission::Accepted(a)) => {
                        prop_assert_eq!(&plan.admitted, a);
                        if !dry_run {
                            let mut entries: Vec<(String, Option<PlannerEntry>)> = plan.entries();
                            entries.sort_by(|x, y| x.0.cmp(&y.0));
                            entries.dedup_by(|later, earlier| later.0 == earlier.0);
                            copy.apply(plan.clone()).unwrap();
                            prop_assert_eq!(fingerprint(&copy), fingerprint(&p));
                            copy.check_invariants().map_err(TestCaseError::fail)?;
                            let mut changes = copy.take_changes();
                            changes.sort_by(|x, y| x.0.cmp(&y.0));
                            prop_assert_eq!(changes, entries, "the plan's entries are what applying it changes");
                        }
                    }
                    (Err(other), _) => prop_assert_eq!(&**other, &out),
                    (Ok(_), other) => prop_assert!(false, "planned an acceptance, admit answered {:?}", other),
                }
                match &out {
                    Admission::Accepted(a) if !dry_run => {
                        prop_assert_eq!(a.placements.len(), r.vee_count());
                        for pl in &a.placements {
                            prop_assert_eq!(pl.range, window);
                            prop_assert_eq!(p.placement(&pl.vee), Some(pl.clone()));
                        }
                        for (pl, sp) in a.placements.iter().zip(&a.spares) {
                            prop_assert_ne!(&pl.host, &sp.host);
                        }
                        if with_anti {
                            let hosts: HashSet<_> = a.placements.iter().filter(|x| x.component == "c0").map(|x| &x.host).collect();
                            prop_assert_eq!(hosts.len(), comps[0].0);
                        }
                        services.push(id);
                        vees.extend(a.placements.iter().map(|x| x.vee.clone()));
                    }
                    _ => prop_assert_eq!(fingerprint(&p), before, "{:?} changed the planner", out),
                }
            }
            Op::Release(i) => {
                if !services.is_empty() {
                    let id = services.remove(i % services.len());
                    p.release_service(&id).unwrap();
                }
            }
            Op::Fail { host, now, interval } => {
                let name = format!("h{host}");
                p.set_host_down(&name, now, interval).unwrap();
                p.recover_host(&name, now).unwrap();
                p.remap(&name, now, interval).unwrap();
            }
            Op::Up(host) => p.set_host_up(&format!("h{host}")).unwrap(),
            Op::Move { vee, host, from } => {
                if !vees.is_empty() {
                    let v = &vees[vee % vees.len()];
                    let before = fingerprint(&p);
                    if p.move_vee(v, &format!("h{host}"), from).is_err() {
                        prop_assert_eq!(fingerprint(&p), before, "a failed move changed the planner");
                    }
                }
            }
            Op::Forget(now) => {
                p.forget_before(now);
            }
            Op::ScaleOut { service, n: k, from } => {
                if !services.is_empty() {
                    let id = services[service % services.len()].clone();
                    let new: Vec<String> = (0..k).map(|i| format!("{id}-c0-x{n}-{i}")).collect();
                    let offered = PeerSpare::Offered { site: "peer".into() };
                    let before = fingerprint(&p);
                    let planned = p.plan_scale_out(&id, "c0", &new, from, &offered);
                    prop_assert_eq!(fingerprint(&p), before.clone(), "planning a scale-out reserved something");
                    if let Ok(plan) = planned {
                        let mut entries: Vec<(String, Option<PlannerEntry>)> = plan.entries();
                        entries.sort_by(|x, y| x.0.cmp(&y.0));
                        entries.dedup_by(|later, earlier| later.0 == earlier.0);
                        let admitted = p.apply(plan).unwrap();
                        let svc = p.service(&id).unwrap().clone();
                        prop_assert_eq!(admitted.placements.len(), k);
                        for pl in &admitted.placements {
                            prop_assert!(svc.component_of(&pl.vee).is_some_and(|c| c.name == "c0"));
                            prop_assert_eq!(p.placement(&pl.vee), Some(pl.clone()));
                            prop_assert_eq!(pl.range.end, svc.window.end);
                        }
                        // The guarantee level's reservations, as at admission.
                        match svc.guarantee {
                            GuaranteeLevel::Enhanced => {
                                for pl in &admitted.placements {
                                    let spare = p.spare(&pl.vee).map(|r| p.host_name(r.host).to_string());
                                    prop_assert!(spare.is_some_and(|h| h != pl.host), "enhanced: a spare on another host");
                                }
                            }
                            GuaranteeLevel::Full => prop_assert_eq!(admitted.peer_spares.len(), k),
                            _ => prop_assert!(admitted.spares.is_empty() && admitted.peer_spares.is_empty()),
                        }
                        let mut changes = p.take_changes();
                        changes.sort_by(|x, y| x.0.cmp(&y.0));
                        for (key, e) in &changes {
                            match e {
                                Some(e) => written.insert(key.clone(), e.clone()),
                                None => written.remove(key),
                            };
                        }
                        // Background VEEs displaced go as entries too.
                        let keys = |v: &[(String, Option<PlannerEntry>)]| v.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
                        prop_assert_eq!(keys(&changes), keys(&entries), "the plan's entries are what applying it changes");
                        vees.extend(admitted.placements.iter().map(|x| x.vee.clone()));
                    }
                }
            }
            Op::Resize {
                vee,
                vcpus,
                memory_mib,
                from,
            } => {
                if !vees.is_empty() {
                    let v = vees[vee % vees.len()].clone();
                    let before = fingerprint(&p);
                    match p.resize_vee(&v, vcpus, memory_mib, from) {
                        Ok(_) => {
                            let r = p.reservation(&v).unwrap();
                            prop_assert_eq!((r.resources.vcpus, r.resources.memory_mib), (vcpus, memory_mib));
                        }
                        Err(_) => prop_assert_eq!(fingerprint(&p), before, "a refused resize changes nothing"),
                    }
                }
            }
            Op::ScaleIn(service) => {
                if !services.is_empty() {
                    let id = &services[service % services.len()];
                    let last = p
                        .service(id)
                        .and_then(|s| s.components.iter().find(|c| c.name == "c0")?.vees.last().cloned());
                    if let Some(v) = last {
                        p.release_vee(&v).unwrap();
                        prop_assert!(p.reservation(&v).is_none() && p.spare(&v).is_none());
                    }
                }
            }
        }
        if let Err(e) = p.check_invariants() {
            return Err(TestCaseError::fail(format!("after op {n}: {e}")));
        }
        prop_assert_eq!(fingerprint(&other), other_was, "after op {}: the change reached the other copy", n);
        prop_assert_eq!(other.revision(), other_revision);
        prop_assert!(
            other.take_changes().is_empty(),
            "after op {}: a snapshot with changes of its own",
            n
        );
        if let Err(e) = other.check_invariants() {
            return Err(TestCaseError::fail(format!("after op {n}, the other copy: {e}")));
        }
        if let Err(e) = anti_affinity_holds(&p) {
            return Err(TestCaseError::fail(format!("after op {n}: {e}")));
        }
        for (key, e) in p.take_changes() {
            match e {
                Some(e) => written.insert(key, e),
                None => written.remove(&key),
            };
        }
        let reread = Planner::from_parts(p.header(), written.values().cloned());
        prop_assert_eq!(
            fingerprint(&reread),
            fingerprint(&p),
            "after op {}: the changes written do not add up to the planner",
            n
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_under_any_sequence(ops in prop::collection::vec(op(), 1..30)) {
        run(ops)?;
    }

    #[test]
    fn usage_map_matches_a_slot_array(ops in prop::collection::vec((0u32..50, 1u32..20, 1u64..100, any::<bool>()), 1..40)) {
        let mut map = UsageMap::new();
        let mut slots = vec![0u64; 80];
        let mut added: Vec<(SlotRange, u64)> = Vec::new();
        for (start, len, mib, remove) in ops {
            if remove && !added.is_empty() {
                let (range, m) = added.remove(start as usize % added.len());
                map.sub(range, &Resources::new(0, m, 0));
                for s in range.start..range.end { slots[s as usize] -= m; }
            } else {
                let range = SlotRange::starting_at(start, len);
                map.add(range, &Resources::new(0, mib, 0));
                for s in range.start..range.end { slots[s as usize] += mib; }
                added.push((range, mib));
            }
            for (s, v) in slots.iter().enumerate() {
                prop_assert_eq!(map.at(s as u32).memory_mib, *v);
            }
            let q = SlotRange::new(start, start + len);
            let max = (q.start..q.end).map(|s| slots[s as usize]).max().unwrap_or(0);
            prop_assert_eq!(map.max_in(q).memory_mib, max);
            prop_assert_eq!(map.peak().memory_mib, *slots.iter().max().unwrap());
        }
        for (range, m) in added { map.sub(range, &Resources::new(0, m, 0)); }
        prop_assert!(map.is_empty());
    }
}
