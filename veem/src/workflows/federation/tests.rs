//! Federation against in-process peers: a second VEEM over its own fake
//! VEEHs answers the VMI peer calls with its real handlers (roles and
//! framework agreement checked), or a peer that never answers.

use crate::model::{Location, MigrationState, VeeState};
use crate::sim::{FakeSite, STANDARD};
use crate::workflows::migration::{Dest, Proposer};

/// Site A's agreement with site B, and B's with A (each names the other's
/// token; B admits A's VEEs).
const A_PEERS_WITH_B: &str = "[[peers]]\nsite_id = \"site-b\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"a-to-b-token\"\n\
    [peers.agreement]\nprice_per_vee_hour = 0.1\n";
const B_TRUSTS_A: &str = "[[tokens]]\ntoken = \"a-to-b-token\"\nrole = \"peer\"\nname = \"site-a\"\n\
    [[peers]]\nsite_id = \"site-a\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"b-to-a-token\"\n\
    [peers.agreement]\nprice_per_vee_hour = 0.1\n";

/// A service whose SLA lets its VEEs go to peer sites.
fn federated() -> String {
    STANDARD.replace("penalty_per_hour = 36.0", "penalty_per_hour = 36.0\nmigration = \"federation\"")
}

/// Sites A (host a1, one running VEE) and B (host b1) with `b_config`;
/// A reaches B in process.
async fn two_sites(b_config: &str) -> (FakeSite, FakeSite, String) {
    let a = FakeSite::start_site("site-a", &["a1"], A_PEERS_WITH_B);
    let b = FakeSite::start_site("site-b", &["b1"], b_config);
    a.peer_with(&b, "a-to-b-token");
    let vee = a.running_service(&federated()).remove(0);
    (a, b, vee)
}

async fn migrate_to_b(a: &FakeSite, vee: &str) -> crate::model::MigrationRec {
    let m = a
        .veem
        .migration
        .propose(vee, Dest::Site("site-b".into()), "maintenance", Proposer::Operator)
        .unwrap();
    a.veem.migration.approve(&m.id, "operator").unwrap();
    a.finished(&m.id).await
}

#[tokio::test]
async fn a_cross_site_live_migration_hands_the_vee_to_the_peer() {
    let (a, b, vee) = two_sites(B_TRUSTS_A).await;
    let m = migrate_to_b(&a, &vee).await;
    assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
    let at_a = a.veem.core.vee(&vee).unwrap();
    assert_eq!((at_a.state, at_a.location), (VeeState::Running, Location::Site("site-b".into())));
    let at_b = b.veem.core.vee(&vee).unwrap();
    assert_eq!((at_b.state, at_b.for_peer.as_deref()), (VeeState::Running, Some("site-a")));
    assert!(b.host("b1").runs(&vee) && !a.host("a1").runs(&vee));
    assert!(
        a.veem.core.planner().placement(&vee).is_none(),
        "site A holds no local reservation for it"
    );
    // B committed the reservation, the service and the VEE together (A
    // lets go of B's VEEM first: one process opens a database at a time).
    a.peers.0.lock().unwrap().clear();
    let b = b.restart();
    assert_eq!(b.veem.core.planner().placement(&vee).unwrap().host, "b1");
    let service = b.veem.core.vee(&vee).unwrap().service_id;
    assert_eq!(b.veem.core.service(&service).unwrap().vees, vec![vee]);
}

#[tokio::test]
async fn a_peer_without_an_agreement_refuses_and_the_vee_stays_home() {
    // B knows A's token but has no framework agreement with it.
    let tokens_only = "[[tokens]]\ntoken = \"a-to-b-token\"\nrole = \"peer\"\nname = \"site-a\"\n";
    let (a, b, vee) = two_sites(tokens_only).await;
    let m = migrate_to_b(&a, &vee).await;
    assert_eq!(m.state, MigrationState::Failed);
    assert!(m.detail.contains("no framework agreement with site-a"), "{}", m.detail);
    let v = a.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host("a1".into())));
    assert!(a.host("a1").runs(&vee));
    assert!(b.veem.core.vee(&vee).is_err(), "nothing recorded at the peer");
    assert!(b.host("b1").calls().is_empty());
}

#[tokio::test]
async fn a_peer_that_does_not_answer_fails_the_migration_and_the_vee_stays_home() {
    let a = FakeSite::start_site("site-a", &["a1"], A_PEERS_WITH_B);
    let vee = a.running_service(&federated()).remove(0);
    let m = migrate_to_b(&a, &vee).await;
    assert_eq!(m.state, MigrationState::Failed);
    assert!(m.detail.contains("does not answer"), "{}", m.detail);
    let v = a.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host("a1".into())));
    assert!(a.host("a1").runs(&vee));
    assert!(!a.host("a1").calls().iter().any(|c| c.starts_with("migrate_out")));
}

#[tokio::test]
async fn a_peer_with_the_wrong_token_is_refused_by_the_peers_roles() {
    let (a, b, vee) = two_sites(B_TRUSTS_A).await;
    a.peer_with(&b, "not-a-token-b-knows");
    let m = migrate_to_b(&a, &vee).await;
    assert_eq!(m.state, MigrationState::Failed);
    assert!(m.detail.contains("unknown token"), "{}", m.detail);
    assert_eq!(a.veem.core.vee(&vee).unwrap().location, Location::Host("a1".into()));
}

#[tokio::test]
async fn a_silent_peers_vee_is_recovered_at_home_and_its_copy_fenced_when_the_peer_answers_again() {
    let a = FakeSite::start_site("site-a", &["a1"], &format!("heartbeat_miss_limit = 2\n{A_PEERS_WITH_B}"));
    let b = FakeSite::start_site("site-b", &["b1"], B_TRUSTS_A);
    a.peer_with(&b, "a-to-b-token");
    let vee = a.running_service(&federated()).remove(0);
    assert_eq!(migrate_to_b(&a, &vee).await.state, MigrationState::Done);
    // Site B goes silent: two rounds without an answer and A restores the
    // VEE at home from its checkpoint.
    a.peers.0.lock().unwrap().remove("site-b");
    let mut misses = Default::default();
    a.veem.peer_watch.watch_round(&mut misses).await;
    assert_eq!(
        a.veem.core.vee(&vee).unwrap().location,
        Location::Site("site-b".into()),
        "one miss is not enough"
    );
    a.veem.peer_watch.watch_round(&mut misses).await;
    crate::sim::eventually("recovered at home", || {
        let v = a.veem.core.vee(&vee).unwrap();
        (v.state, v.location) == (VeeState::Running, Location::Host("a1".into()))
    })
    .await;
    assert!(a.host("a1").runs(&vee));
    // B answers again: its copy is destroyed, and only A's runs.
    assert!(b.host("b1").runs(&vee), "B never knew");
    a.peer_with(&b, "a-to-b-token");
    a.veem.peer_watch.watch_round(&mut misses).await;
    assert!(!b.host("b1").runs(&vee), "B's copy is fenced: {:?}", b.host("b1").calls());
    assert!(a.host("a1").runs(&vee));
}

#[tokio::test]
async fn a_vee_on_service_networks_never_goes_to_a_peer_without_an_agreed_overlay() {
    let a = FakeSite::start_site("site-a", &["a1"], A_PEERS_WITH_B);
    let b = FakeSite::start_site("site-b", &["b1"], B_TRUSTS_A);
    a.peer_with(&b, "a-to-b-token");
    let networked = federated().replace("disk_gib = 1\n", "disk_gib = 1\nnetworks = [\"backend\"]\n")
        + "[[network]]\nname = \"backend\"\nkind = \"internal\"\n";
    let vee = a.running_service(&networked).remove(0);
    let e = format!(
        "{:#}",
        a.veem
            .migration
            .propose(&vee, Dest::Site("site-b".into()), "maintenance", Proposer::Operator)
            .unwrap_err()
    );
    assert!(e.contains("to_site") && e.contains("no overlay"), "{e}");
    // Nor when its host fails and no local host is left: the peer is not asked.
    let e = format!("{:#}", a.veem.federation.recover_at_peer(&vee, None).await.unwrap_err());
    assert!(e.contains("service networks"), "{e}");
    assert!(b.veem.core.vees().is_empty(), "site B got the VEE");
    assert!(!b.host("b1").calls().iter().any(|c| c.contains(&vee)), "{:?}", b.host("b1").calls());
}

#[tokio::test]
async fn a_vee_comes_home_twice() {
    // A second homecoming found the first one's planner service still
    // there ("already admitted") and the VEE stayed at the peer.
    let (a, _b, vee) = two_sites(B_TRUSTS_A).await;
    for round in 0..2 {
        assert_eq!(migrate_to_b(&a, &vee).await.state, MigrationState::Done, "round {round}: out");
        let m = a.finished(&home(&a, &vee)).await;
        assert_eq!(m.state, MigrationState::Done, "round {round}: home: {}", m.detail);
        assert_eq!(a.veem.core.vee(&vee).unwrap().location, Location::Host("a1".into()));
    }
}

/// A peer site records the send it runs for the primary with its VEE's
/// move to migrating, in one write: a VEEM killed mid-send leaves the next
/// leader both, which finishes the send where the VEE left rather than
/// restore a second copy of it (the chaos run, issue 52).
#[tokio::test]
async fn a_send_for_the_primary_is_recorded_before_the_vee_leaves() {
    let (a, b, vee) = two_sites(B_TRUSTS_A).await;
    assert_eq!(migrate_to_b(&a, &vee).await.state, MigrationState::Done);
    b.host("b1").script.lock().unwrap().migrate_out_ms = 300;
    let m = home(&a, &vee);
    crate::sim::eventually("B's copy migrating", || {
        b.veem.core.vee(&vee).is_ok_and(|v| v.state == crate::model::VeeState::Migrating)
    })
    .await;
    let sends: Vec<crate::model::MigrationRec> = b.veem.core.store.list(crate::store::Tree::Migrations).unwrap();
    assert!(
        sends.iter().any(|s| s.vee_id == vee && s.state == MigrationState::Running),
        "B's send is not recorded while it runs: {sends:?}"
    );
    assert_eq!(a.finished(&m).await.state, MigrationState::Done);
}

/// Site A's operator brings `vee` home to host a1: the migration's ID,
/// approved (not waited for).
fn home(a: &FakeSite, vee: &str) -> String {
    let m = a
        .veem
        .migration
        .propose(vee, Dest::Host("a1".into()), "home", Proposer::Operator)
        .unwrap();
    a.veem.migration.approve(&m.id, "operator").unwrap();
    m.id
}

#[tokio::test]
async fn a_peers_usage_records_are_checked_against_where_the_vee_ran() {
    let (a, _b, vee) = two_sites(B_TRUSTS_A).await;
    let service = a.veem.core.vee(&vee).unwrap().service_id;
    let arrived = a.veem.core.clock.now();
    assert_eq!(migrate_to_b(&a, &vee).await.state, MigrationState::Done);
    let record = |id: &str, start: i64, end: i64, cpu: f64| interfaces::vmi::UsageRecord {
        record_id: id.into(),
        abc_id: service.clone(),
        vee_id: vee.clone(),
        site_chain: vec!["site-b".into()],
        start_time: interfaces::time::timestamp_s(start),
        end_time: interfaces::time::timestamp_s(end),
        cpu_seconds: cpu,
        memory_mib_seconds: 512.0 * 3.0,
        disk_bytes: 0,
        net_bytes: 0,
        kpis: vec![],
        component: String::new(),
    };
    let now = a.veem.core.clock.now();
    let mut bad = vec![
        record("nan", now, now + 3, f64::NAN),
        record("huge", now, now + 3, 1e15),
        record("negative", now, now + 3, -1.0),
        record("backwards", now + 3, now, 1.0),
        record("before-it-came", arrived - 3600, arrived - 3500, 1.0),
        record("from-the-future", now + 3600, now + 3603, 1.0),
        interfaces::vmi::UsageRecord {
            vee_id: uuid::Uuid::new_v4().to_string(),
            ..record("not-ours", now, now + 3, 1.0)
        },
        interfaces::vmi::UsageRecord {
            abc_id: "another-service".into(),
            ..record("wrong-service", now, now + 3, 1.0)
        },
        interfaces::vmi::UsageRecord {
            site_chain: vec!["site-c".into()],
            ..record("relayed", now, now + 3, 1.0)
        },
    ];
    let mut m = record("mem", now, now + 3, 1.0);
    m.memory_mib_seconds = f64::INFINITY;
    bad.push(m);
    // More KPIs than a VEE may report.
    let kpi = |name: &str, value: f64| interfaces::vhi::Kpi {
        name: name.into(),
        value,
        time: interfaces::time::timestamp_ms(now * 1000),
    };
    bad.push(interfaces::vmi::UsageRecord {
        kpis: (0..17).map(|i| kpi(&format!("k{i}"), 1.0)).collect(),
        ..record("kpis", now, now + 3, 1.0)
    });
    let n = bad.len() as u32;
    let mut records = bad;
    // The good one carries its guest's KPIs: the valid ones become the
    // VEE's metrics here, beside its CPU utilization over the interval.
    records.push(interfaces::vmi::UsageRecord {
        kpis: vec![kpi("active_sessions", 7.0), kpi("Bad", 1.0), kpi("queue", f64::NAN)],
        ..record("good", now, now + 3, 2.5)
    });
    let batch = interfaces::vmi::PushUsageRequest {
        from_site: "site-b".into(),
        records,
    };
    let reply = a.veem.accounting.receive_usage("site-b", pushed(&batch)).unwrap();
    assert_eq!((reply.accepted, reply.duplicates, reply.refused), (1, 0, n), "{:?}", reply.reasons);
    for (id, why) in [
        ("nan", "cpu_seconds"),
        ("huge", "more than 1 vCPUs"),
        ("before-it-came", "did not run at site-b"),
        ("not-ours", "no VEE"),
        ("relayed", "site_chain"),
        ("mem", "memory_mib_seconds"),
        ("kpis", "field `kpis`"),
    ] {
        assert!(
            reply.reasons.iter().any(|r| r.contains(&format!("{id:?}")) && r.contains(why)),
            "{id}: {:?}",
            reply.reasons
        );
    }
    let sample = a.veem.accounting.samples.latest(&vee).expect("the VEE's metrics from site-b");
    assert_eq!(sample.at_ms, (now + 3) * 1000);
    let names: Vec<&String> = sample.values.keys().collect();
    assert_eq!(names, ["active_sessions", "cpu_utilization", "memory_used"]);
    assert_eq!(sample.values["active_sessions"], 7.0);
    assert!((sample.values["cpu_utilization"] - 2.5 / 3.0).abs() < 1e-9);
    // Sent again: the good one is a duplicate; reads of the usage work.
    let again = a.veem.accounting.receive_usage("site-b", pushed(&batch)).unwrap();
    assert_eq!((again.accepted, again.duplicates, again.refused), (0, 1, n));
    // Home again: the stay at B is closed; B may still account for it,
    // not for later.
    let m = a
        .veem
        .migration
        .propose(&vee, Dest::Host("a1".into()), "home", Proposer::Operator)
        .unwrap();
    a.veem.migration.approve(&m.id, "operator").unwrap();
    assert_eq!(a.finished(&m.id).await.state, MigrationState::Done);
    let stays = a.veem.core.vee(&vee).unwrap().stays;
    assert_eq!(stays.len(), 1);
    let left = stays[0].until_unix.expect("closed");
    let later = interfaces::vmi::PushUsageRequest {
        from_site: "site-b".into(),
        records: vec![record("late", now + 1, now + 4, 1.0), record("after", left + 600, left + 603, 1.0)],
    };
    let reply = a.veem.accounting.receive_usage("site-b", pushed(&later)).unwrap();
    assert_eq!((reply.accepted, reply.refused), (1, 1), "{:?}", reply.reasons);
    let report = a.veem.accounting.usage_report(&service).unwrap();
    assert_eq!(report.records.len(), 2);
    assert_eq!(report.records[0].site_chain, ["site-b", "site-a"]);
}

/// What a peer site meters of a primary's VEE goes back to the primary
/// once: it waits in the outbox while the primary cannot be reached, and
/// leaves it when the primary has it.
#[tokio::test]
async fn usage_metered_for_a_primary_is_pushed_once_and_waits_while_the_primary_is_away() {
    let a_trusts_b = "[[tokens]]\ntoken = \"b-to-a-token\"\nrole = \"peer\"\nname = \"site-b\"\n";
    let a = FakeSite::start_site("site-a", &["a1"], &format!("{A_PEERS_WITH_B}{a_trusts_b}"));
    let b = FakeSite::start_site("site-b", &["b1"], B_TRUSTS_A);
    a.peer_with(&b, "a-to-b-token");
    let vee = a.running_service(&federated()).remove(0);
    assert_eq!(migrate_to_b(&a, &vee).await.state, MigrationState::Done);
    let outbox = |site: &FakeSite| {
        let mut keys = Vec::new();
        site.veem
            .core
            .store
            .scan(crate::store::Tree::UsageOutbox, |k, _| {
                keys.push(k.to_string());
                Ok(())
            })
            .unwrap();
        keys
    };
    // B meters the VEE twice (one record) while it cannot reach A.
    let mut last = crate::workflows::accounting::LastMeters::default();
    b.veem.accounting.round(&mut last).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    b.veem.accounting.round(&mut last).await;
    assert_eq!(outbox(&b).len(), 1, "the record waits for site A");
    b.peer_with(&a, "b-to-a-token");
    b.veem.accounting.push_usage().await.unwrap();
    assert_eq!(outbox(&b), Vec::<String>::new(), "sent");
    b.veem.accounting.push_usage().await.unwrap();
    let service = a.veem.core.vee(&vee).unwrap().service_id;
    let report = a.veem.accounting.usage_report(&service).unwrap();
    assert_eq!(report.records.len(), 1);
    assert_eq!(report.records[0].site_chain, ["site-b", "site-a"]);
}

mod networks;
mod replication;
mod trespass;

#[tokio::test]
async fn a_site_level_affinity_set_moves_to_the_peer_together() {
    let a = FakeSite::start_site("site-a", &["a1"], A_PEERS_WITH_B);
    let b = FakeSite::start_site("site-b", &["b1"], B_TRUSTS_A);
    a.peer_with(&b, "a-to-b-token");
    let m = federated().replace("disk_gib = 1\n", "disk_gib = 1\ninstances = 2\n")
        + "[[constraint]]\nkind = \"affinity\"\nlevel = \"site\"\nscope = \"instance\"\ncomponents = [\"vm\"]\n";
    let vees = a.running_service(&m);
    let p = a
        .veem
        .migration
        .propose(&vees[1], Dest::Site("site-b".into()), "maintenance", Proposer::Operator)
        .unwrap();
    assert_eq!(p.set.len(), 2, "{p:?}");
    a.veem.migration.approve(&p.id, "operator").unwrap();
    for id in &p.set {
        let m = a.finished(id).await;
        assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
    }
    for v in &vees {
        assert_eq!(a.veem.core.vee(v).unwrap().location, Location::Site("site-b".into()), "{v}");
        assert!(b.host("b1").runs(v));
    }
}

/// The records of a PushUsage as the VMI server hands them on.
fn pushed(b: &interfaces::vmi::PushUsageRequest) -> Vec<Result<crate::model::UsageRec, (String, String)>> {
    b.records.iter().cloned().map(crate::wire::peer::pushed_usage).collect()
}
