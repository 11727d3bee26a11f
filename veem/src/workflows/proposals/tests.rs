//! Unit tests of the proposal decisions, on a real planner, no daemons.

use interfaces::manifest::{Constraint, ConstraintKind, ConstraintLevel, ConstraintScope, GuaranteeLevel, MigrationPolicy};

use super::*;
use crate::planner::{Admission, ComponentRequest, HostSpec, PeerSpare, PlannerConfig, ServiceRequest, SlotRange};

const NOW: i64 = 10_000_000;

/// A site of hosts `h0..h{n-1}` (8 vCPUs, 1024 MiB, 100 GiB each), all up.
struct Site {
    planner: Planner,
    snap: Snapshot,
}

impl Site {
    fn new(n: usize) -> Self {
        let mut planner = Planner::new(PlannerConfig::default());
        let mut hosts = Vec::new();
        for i in 0..n {
            let name = format!("h{i}");
            planner
                .add_host(HostSpec::new(&name, Resources::new(8, 1024, 100), "s1", "r1"))
                .unwrap();
            hosts.push(HostView {
                name,
                health: Health::Up,
                capacity: Resources::new(8, 1024, 100),
                used: Resources::ZERO,
            });
        }
        let snap = Snapshot {
            now_ms: NOW,
            hosts,
            settle_s: 60,
            ..Snapshot::default()
        };
        Site { planner, snap }
    }

    /// Admits service `svc` (one component, `mib` MiB per VEE, host
    /// anti-affinity between its instances when `anti`) and places each
    /// VEE on its host; the VEEs run there since an hour.
    fn service(&mut self, svc: &str, mib: u64, anti: bool, vees: &[(&str, &str)]) {
        let constraints = if anti {
            vec![Constraint {
                kind: ConstraintKind::AntiAffinity,
                level: ConstraintLevel::Host,
                scope: ConstraintScope::Instance,
                components: vec!["web".into()],
            }]
        } else {
            vec![]
        };
        let req = ServiceRequest {
            service_id: svc.into(),
            consumer: "acme".into(),
            guarantee: GuaranteeLevel::Standard,
            migration: MigrationPolicy::Site,
            window: SlotRange::new(0, 100_000),
            components: vec![ComponentRequest {
                name: "web".into(),
                resources: Resources::new(1, mib, 1),
                profile: None,
                vees: vees.iter().map(|(v, _)| v.to_string()).collect(),
            }],
            constraints,
            peer_spare: PeerSpare::NotAsked,
            padding: crate::planner::Padding::NONE,
        };
        let Admission::Accepted(a) = self.planner.admit(&req) else {
            panic!("service {svc} not admitted")
        };
        for (vee, host) in vees {
            let now_on = &a.placements.iter().find(|p| p.vee == *vee).unwrap().host;
            if now_on != host {
                self.planner
                    .move_vee(vee, host, 0)
                    .unwrap_or_else(|e| panic!("place {vee} on {host}: {e}"));
            }
            self.snap.vees.push(VeeView {
                id: vee.to_string(),
                state: VeeState::Running,
                location: Location::Host(host.to_string()),
                migratable: true,
                checkpoint_interval_s: None,
                last_checkpoint_ms: None,
                on_host_since_ms: NOW - 3_600_000,
            });
        }
        for h in &mut self.snap.hosts {
            h.used = self.planner.host_usage(&h.name, 0).unwrap();
        }
    }

    fn vee(&mut self, id: &str) -> &mut VeeView {
        self.snap.vees.iter_mut().find(|v| v.id == id).unwrap()
    }

    fn health(&mut self, host: &str, health: Health) {
        self.snap.hosts.iter_mut().find(|h| h.name == host).unwrap().health = health;
    }

    /// One pass on a copy of the planner: (VEE, target, reason) triples.
    fn plan(&self) -> Vec<(String, String, &'static str)> {
        let source = std::sync::Mutex::new(self.planner.clone());
        plan(
            &self.snap,
            &mut PlannerMover {
                source: &source,
                copy: None,
                now: 0,
            },
        )
        .into_iter()
        .map(|p| (p.vee_id, p.to, p.reason.as_str()))
        .collect()
    }

    /// Marks the pass's proposals open, as `propose` would record them.
    fn open_all(&mut self) {
        for (vee, to, reason) in self.plan() {
            let from = self
                .snap
                .vees
                .iter()
                .find(|v| v.id == vee)
                .and_then(|v| occupies(v).map(str::to_string));
            self.snap.open.push(OpenMove {
                vee_id: vee,
                from,
                to: Some(to),
                reason: reason.into(),
            });
        }
    }
}

fn p(vee: &str, to: &str, reason: &'static str) -> (String, String, &'static str) {
    (vee.into(), to.into(), reason)
}

#[test]
fn failure_risk_moves_every_running_vee_off_a_missing_host() {
    let mut s = Site::new(3);
    // 512 MiB each: h1 has room for one more after c.
    s.service("s1", 512, false, &[("a", "h0"), ("b", "h0")]);
    s.service("s2", 512, false, &[("c", "h1")]);
    assert!(s.plan().is_empty(), "all hosts up: nothing to propose");
    s.health("h0", Health::Missing(1));
    // Each to the first host in configuration order the planner accepts,
    // counting the moves of the same pass.
    assert_eq!(s.plan(), vec![p("a", "h1", "failure-risk"), p("b", "h2", "failure-risk")]);
    s.health("h0", Health::Missing(2));
    assert_eq!(s.plan().len(), 2);
    // Failed: recovery's business, not a proposal; unknown: never answered.
    for h in [Health::Failed, Health::Unknown] {
        s.health("h0", h);
        assert!(s.plan().is_empty(), "{h:?}");
    }
}

#[test]
fn failure_risk_never_targets_a_host_that_is_not_up() {
    let mut s = Site::new(3);
    s.service("s1", 128, false, &[("a", "h0")]);
    s.health("h0", Health::Missing(1));
    s.health("h1", Health::Missing(1));
    assert_eq!(s.plan(), vec![p("a", "h2", "failure-risk")]);
    s.health("h2", Health::Unknown);
    assert!(s.plan().is_empty(), "no host up to take it");
}

#[test]
fn sla_at_risk_needs_no_checkpoint_on_the_host_for_twice_the_interval() {
    let mut s = Site::new(3);
    s.service(
        "s1",
        128,
        false,
        &[
            ("late", "h0"),
            ("fresh", "h0"),
            ("never", "h0"),
            ("arrived", "h0"),
            ("no-interval", "h0"),
        ],
    );
    for id in ["late", "fresh", "never", "arrived"] {
        s.vee(id).checkpoint_interval_s = Some(60);
    }
    s.vee("late").last_checkpoint_ms = Some(NOW - 121_000);
    s.vee("fresh").last_checkpoint_ms = Some(NOW - 119_000);
    // Never checkpointed, on its host for an hour: at risk.
    // Old checkpoint, but on its host for only 100 s: not yet.
    s.vee("arrived").last_checkpoint_ms = Some(NOW - 3_000_000);
    s.vee("arrived").on_host_since_ms = NOW - 100_000;
    assert_eq!(s.plan(), vec![p("late", "h1", "sla-at-risk"), p("never", "h1", "sla-at-risk")]);
}

#[test]
fn sla_at_risk_avoids_hosts_where_checkpoints_fail_too() {
    let mut s = Site::new(3);
    s.service("s1", 128, false, &[("x", "h0"), ("y", "h1")]);
    for id in ["x", "y"] {
        s.vee(id).checkpoint_interval_s = Some(60);
        s.vee(id).last_checkpoint_ms = Some(NOW - 600_000);
    }
    assert_eq!(s.plan(), vec![p("x", "h2", "sla-at-risk"), p("y", "h2", "sla-at-risk")]);
    s.health("h2", Health::Missing(1));
    assert!(s.plan().is_empty(), "every up host has failing checkpoints");
}

#[test]
fn no_second_proposal_while_one_is_open_nor_after_a_rejection() {
    let mut s = Site::new(3);
    s.service("s1", 128, false, &[("a", "h0"), ("b", "h0")]);
    s.health("h0", Health::Missing(1));
    s.snap.open.push(OpenMove {
        vee_id: "a".into(),
        from: Some("h0".into()),
        to: Some("h2".into()),
        reason: "maintenance".into(),
    });
    assert_eq!(s.plan(), vec![p("b", "h1", "failure-risk")]);
    s.open_all();
    assert!(s.plan().is_empty(), "every VEE has an open proposal");
    // Rejected failure-risk for b: held; a's drain is done.
    s.snap.open.clear();
    s.snap.held.insert(("b".into(), Reason::FailureRisk));
    assert_eq!(s.plan(), vec![p("a", "h1", "failure-risk")]);
}

#[test]
fn nothing_for_remote_non_running_or_unmovable_vees() {
    let mut s = Site::new(2);
    s.service(
        "s1",
        128,
        false,
        &[("susp", "h0"), ("cp", "h0"), ("mig", "h0"), ("pinned", "h0"), ("remote", "h0")],
    );
    s.vee("susp").state = VeeState::Suspended;
    s.vee("cp").state = VeeState::Checkpointing;
    s.vee("mig").state = VeeState::Migrating;
    s.vee("pinned").migratable = false;
    s.vee("remote").location = Location::Site("site-b".into());
    for v in &mut s.snap.vees {
        v.checkpoint_interval_s = Some(1);
        v.last_checkpoint_ms = Some(0);
    }
    s.snap.consolidation = true;
    s.health("h0", Health::Missing(1));
    assert!(s.plan().is_empty(), "{:?}", s.plan());
    s.health("h0", Health::Up);
    assert!(s.plan().is_empty(), "{:?}", s.plan());
}

#[test]
fn consolidation_empties_the_least_loaded_host_onto_the_most_loaded() {
    let mut s = Site::new(4);
    s.service("s1", 128, false, &[("a", "h0")]);
    s.service("s2", 128, false, &[("b", "h1"), ("c", "h1")]);
    s.service("s3", 128, false, &[("d", "h2")]);
    assert!(s.plan().is_empty(), "consolidation is off by default");
    s.snap.consolidation = true;
    // h0 and h2 tie (one VEE each): configuration order; h3 is empty and
    // never a target; one source per pass.
    assert_eq!(s.plan(), vec![p("a", "h1", "consolidation")]);
    // While it is open, no other consolidation starts.
    s.open_all();
    assert!(s.plan().is_empty());
    // Done: a is on h1. Next pass: h2 goes, onto h1.
    s.snap.open.clear();
    s.planner.move_vee("a", "h1", 0).unwrap();
    s.vee("a").location = Location::Host("h1".into());
    assert_eq!(s.plan(), vec![p("d", "h1", "consolidation")]);
    s.planner.move_vee("d", "h1", 0).unwrap();
    s.vee("d").location = Location::Host("h1".into());
    assert!(s.plan().is_empty(), "one non-empty host left: nothing moves back");
}

#[test]
fn consolidation_respects_constraints() {
    let mut s = Site::new(2);
    s.snap.consolidation = true;
    // x and y are anti-affine: neither may join the other.
    s.service("s1", 128, true, &[("x", "h0"), ("y", "h1")]);
    assert!(s.plan().is_empty(), "{:?}", s.plan());
}

#[test]
fn consolidation_moves_all_of_a_host_or_nothing() {
    let mut s = Site::new(2);
    s.snap.consolidation = true;
    // h0: 768 MiB in two VEEs, h1: 768 MiB in two: a fits onto h1, b then
    // does not; c fits nowhere.
    s.service("s1", 128, false, &[("a", "h0")]);
    s.service("s2", 640, false, &[("b", "h0")]);
    s.service("s3", 512, false, &[("c", "h1")]);
    s.service("s4", 256, false, &[("d", "h1")]);
    let source = std::sync::Mutex::new(s.planner.clone());
    let mut mover = PlannerMover {
        source: &source,
        copy: None,
        now: 0,
    };
    assert!(plan(&s.snap, &mut mover).is_empty());
    assert!(mover.copy.is_none(), "a's trial move is not kept");
}

#[test]
fn consolidation_waits_until_vees_settled_on_their_host() {
    let mut s = Site::new(2);
    s.snap.consolidation = true;
    s.service("s1", 128, false, &[("a", "h0")]);
    s.service("s2", 128, false, &[("b", "h1")]);
    s.vee("a").on_host_since_ms = NOW - 59_000;
    // a is not settled (60 s): h0 stays; h1 goes instead.
    assert_eq!(s.plan(), vec![p("b", "h0", "consolidation")]);
    s.vee("b").on_host_since_ms = NOW - 1_000;
    assert!(s.plan().is_empty());
    s.vee("a").on_host_since_ms = NOW - 60_000;
    assert_eq!(s.plan(), vec![p("a", "h1", "consolidation")]);
}

#[test]
fn consolidation_never_targets_a_host_being_emptied() {
    let mut s = Site::new(3);
    s.snap.consolidation = true;
    s.service("s1", 128, false, &[("a", "h0")]);
    s.service("s2", 128, false, &[("b", "h1"), ("c", "h1")]);
    s.service("s3", 128, false, &[("d", "h2"), ("e", "h2"), ("f", "h2")]);
    // An operator drains h2: f's proposal is open (h2 -> h1).
    s.snap.open.push(OpenMove {
        vee_id: "f".into(),
        from: Some("h2".into()),
        to: Some("h1".into()),
        reason: "maintenance".into(),
    });
    // h1 is the drain's target, so not a source; h0 goes, onto h1, not
    // onto the most loaded h2.
    assert_eq!(s.plan(), vec![p("a", "h1", "consolidation")]);
}

#[test]
fn planner_copied_only_when_a_move_is_tried() {
    let mut s = Site::new(2);
    s.service("s1", 128, false, &[("a", "h0")]);
    let source = std::sync::Mutex::new(s.planner.clone());
    let mut mover = PlannerMover {
        source: &source,
        copy: None,
        now: 0,
    };
    assert!(plan(&s.snap, &mut mover).is_empty());
    assert!(mover.copy.is_none());
    s.health("h0", Health::Missing(1));
    assert_eq!(plan(&s.snap, &mut mover).len(), 1);
    assert_eq!(
        mover.copy.unwrap().host_usage("h1", 0).unwrap(),
        Resources::new(1, 128, 1),
        "the accepted move is kept"
    );
}

fn rec(vee: &str, reason: &str, state: &str, created_ms: i64) -> MigrationRec {
    MigrationRec {
        id: format!("{vee}-{state}"),
        vee_id: vee.into(),
        from: "host:h0".into(),
        to: Dest::Host("h1".into()),
        reason: reason.into(),
        state: serde_json::from_value(serde_json::Value::String(state.into())).unwrap(),
        decided_by: String::new(),
        detail: String::new(),
        total_ms: 0,
        downtime_ms: 0,
        created_ms,
        set: vec![],
    }
}

#[test]
fn open_moves_and_holds_from_the_records() {
    let records = vec![
        rec("a", "maintenance", "proposed", NOW),
        rec("b", "consolidation", "running", NOW),
        rec("c", "failure-risk", "rejected", NOW - 599_000),
        rec("d", "consolidation", "failed", NOW - 10_000),
        rec("e", "sla-at-risk", "rejected", NOW - 600_000),
        rec("f", "maintenance", "rejected", NOW),
        rec("g", "consolidation", "done", NOW),
    ];
    let (open, held) = open_and_held(records, NOW, 600);
    assert_eq!(open.iter().map(|m| m.vee_id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!((open[0].from.as_deref(), open[0].to.as_deref()), (Some("h0"), Some("h1")));
    // e: held 600 s, over; f: an operator's reason, not the planner's.
    assert_eq!(
        held,
        BTreeSet::from([("c".to_string(), Reason::FailureRisk), ("d".to_string(), Reason::Consolidation)])
    );
}

/// The VEEM's snapshot holds only the VEEs a pass may decide on (without
/// consolidation: those overdue or on a host missing heartbeats), yet
/// keeps since when each live VEE has been on its host, pass after pass.
#[tokio::test]
async fn the_snapshot_views_only_the_vees_a_pass_may_move() {
    let site = crate::sim::FakeSite::start(&["a1", "a2"], "").await;
    let ids = site.running_service(&crate::sim::STANDARD.replace("disk_gib = 1", "disk_gib = 1\ninstances = 3"));
    assert_eq!(ids.len(), 3);
    let now = crate::ports::Clock::now_ms(&*site.clock);
    // One VEE is checkpointed every minute, last an hour ago.
    let mut v = site.veem.core.vee(&ids[0]).unwrap();
    v.checkpoint_interval_s = Some(60);
    v.last_checkpoint_ms = Some(now - 3_600_000);
    site.veem.core.save_vee(&v).unwrap();
    let snap = site.veem.proposals.proposal_snapshot().unwrap();
    assert!(snap.vees.is_empty(), "{:?}", snap.vees);
    // Once it has been on its host for more than twice its interval
    // without a checkpoint, it is in the snapshot, and only it: the time
    // it was first seen there is kept across passes.
    site.clock.advance_ms(121_000);
    let snap = site.veem.proposals.proposal_snapshot().unwrap();
    assert_eq!(snap.vees.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(), vec![ids[0].as_str()]);
    assert!(overdue(&snap.vees[0], snap.now_ms));
}
