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
    let at_a = a.veem.vee(&vee).unwrap();
    assert_eq!((at_a.state, at_a.location), (VeeState::Running, Location::Site("site-b".into())));
    let at_b = b.veem.vee(&vee).unwrap();
    assert_eq!((at_b.state, at_b.for_peer.as_deref()), (VeeState::Running, Some("site-a")));
    assert!(b.host("b1").runs(&vee) && !a.host("a1").runs(&vee));
    assert!(
        a.veem.planner().placement(&vee).is_none(),
        "site A holds no local reservation for it"
    );
    // B committed the reservation, the service and the VEE together (A
    // lets go of B's VEEM first: one process opens a database at a time).
    a.peers.0.lock().unwrap().clear();
    let b = b.restart();
    assert_eq!(b.veem.planner().placement(&vee).unwrap().host, "b1");
    let service = b.veem.vee(&vee).unwrap().service_id;
    assert_eq!(b.veem.service(&service).unwrap().vees, vec![vee]);
}

#[tokio::test]
async fn a_peer_without_an_agreement_refuses_and_the_vee_stays_home() {
    // B knows A's token but has no framework agreement with it.
    let tokens_only = "[[tokens]]\ntoken = \"a-to-b-token\"\nrole = \"peer\"\nname = \"site-a\"\n";
    let (a, b, vee) = two_sites(tokens_only).await;
    let m = migrate_to_b(&a, &vee).await;
    assert_eq!(m.state, MigrationState::Failed);
    assert!(m.detail.contains("no framework agreement with site-a"), "{}", m.detail);
    let v = a.veem.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host("a1".into())));
    assert!(a.host("a1").runs(&vee));
    assert!(b.veem.vee(&vee).is_err(), "nothing recorded at the peer");
    assert!(b.host("b1").calls().is_empty());
}

#[tokio::test]
async fn a_peer_that_does_not_answer_fails_the_migration_and_the_vee_stays_home() {
    let a = FakeSite::start_site("site-a", &["a1"], A_PEERS_WITH_B);
    let vee = a.running_service(&federated()).remove(0);
    let m = migrate_to_b(&a, &vee).await;
    assert_eq!(m.state, MigrationState::Failed);
    assert!(m.detail.contains("does not answer"), "{}", m.detail);
    let v = a.veem.vee(&vee).unwrap();
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
    assert_eq!(a.veem.vee(&vee).unwrap().location, Location::Host("a1".into()));
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
        a.veem.vee(&vee).unwrap().location,
        Location::Site("site-b".into()),
        "one miss is not enough"
    );
    a.veem.peer_watch.watch_round(&mut misses).await;
    crate::sim::eventually("recovered at home", || {
        let v = a.veem.vee(&vee).unwrap();
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
    assert!(b.veem.vees().unwrap().is_empty(), "site B got the VEE");
    assert!(!b.host("b1").calls().iter().any(|c| c.contains(&vee)), "{:?}", b.host("b1").calls());
}

#[tokio::test]
async fn a_vee_comes_home_twice() {
    // A second homecoming found the first one's planner service still
    // there ("already admitted") and the VEE stayed at the peer.
    let (a, _b, vee) = two_sites(B_TRUSTS_A).await;
    for round in 0..2 {
        assert_eq!(migrate_to_b(&a, &vee).await.state, MigrationState::Done, "round {round}: out");
        let m = a
            .veem
            .migration
            .propose(&vee, Dest::Host("a1".into()), "home", Proposer::Operator)
            .unwrap();
        a.veem.migration.approve(&m.id, "operator").unwrap();
        let m = a.finished(&m.id).await;
        assert_eq!(m.state, MigrationState::Done, "round {round}: home: {}", m.detail);
        assert_eq!(a.veem.vee(&vee).unwrap().location, Location::Host("a1".into()));
    }
}

#[tokio::test]
async fn a_peers_usage_records_are_checked_against_where_the_vee_ran() {
    let (a, _b, vee) = two_sites(B_TRUSTS_A).await;
    let service = a.veem.vee(&vee).unwrap().service_id;
    let arrived = a.veem.clock.now();
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
    };
    let now = a.veem.clock.now();
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
    let n = bad.len() as u32;
    let mut records = bad;
    records.push(record("good", now, now + 3, 2.5));
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
    ] {
        assert!(
            reply.reasons.iter().any(|r| r.contains(&format!("{id:?}")) && r.contains(why)),
            "{id}: {:?}",
            reply.reasons
        );
    }
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
    let stays = a.veem.vee(&vee).unwrap().stays;
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
            .store
            .scan(crate::store::Tree::UsageOutbox, |k, _| {
                keys.push(k.to_string());
                Ok(())
            })
            .unwrap();
        keys
    };
    // B meters the VEE twice (one record) while it cannot reach A.
    let mut last = std::collections::HashMap::new();
    b.veem.accounting.round(&mut last).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    b.veem.accounting.round(&mut last).await;
    assert_eq!(outbox(&b).len(), 1, "the record waits for site A");
    b.peer_with(&a, "b-to-a-token");
    b.veem.accounting.push_usage().await.unwrap();
    assert_eq!(outbox(&b), Vec::<String>::new(), "sent");
    b.veem.accounting.push_usage().await.unwrap();
    let service = a.veem.vee(&vee).unwrap().service_id;
    let report = a.veem.accounting.usage_report(&service).unwrap();
    assert_eq!(report.records.len(), 1);
    assert_eq!(report.records[0].site_chain, ["site-b", "site-a"]);
}

mod networks {
    //! A VEE on service networks goes to a peer site only over an agreed
    //! overlay; its networks are stretched there (the peer's host gets the
    //! primary's member tables on the agreed port), the primary's hosts
    //! send its frames and its external address there, and a refusal
    //! leaves nothing stretched.
    use super::*;
    use crate::config::Role;
    use crate::sim::eventually;

    const IMAGE: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";
    const OVERLAY_B: &str = "[peers.overlay]\nvtep = \"198.51.100.2\"\nport = 4790\n";
    const OVERLAY_A: &str = "[peers.overlay]\nvtep = \"198.51.100.1\"\nport = 4790\n";
    const POOLS: &str = "[networks]\npool = \"10.240.0.0/23\"\nexternal_pool = \"192.0.2.0/29\"\n";

    /// `vm` x2 on `backend` and the external `public`, movable to peers.
    fn networked() -> String {
        federated().replace(
            "disk_gib = 1\n",
            "disk_gib = 1\ninstances = 2\nnetworks = [\"backend\", \"public\"]\n",
        ) + "[[network]]\nname = \"backend\"\nkind = \"internal\"\n\
               [[network]]\nname = \"public\"\nkind = \"external\"\nports = [80]\n"
    }

    /// Site A (a1, a2; `a_overlay`: its agreed overlay with B) running the
    /// networked service, site B (b1); the VEE to move (`vm-1`) and the
    /// host of the other.
    async fn sites(a_overlay: &str) -> (FakeSite, FakeSite, String, String) {
        let a = FakeSite::start_site("site-a", &["a1", "a2"], &format!("{A_PEERS_WITH_B}{a_overlay}{POOLS}"));
        let b = FakeSite::start_site("site-b", &["b1"], &format!("{B_TRUSTS_A}{OVERLAY_A}"));
        a.peer_with(&b, "a-to-b-token");
        a.repo.blobs.lock().unwrap().insert(IMAGE.into());
        for h in &a.hosts {
            a.veem.hosts.heartbeat(&h.name, 3).await;
        }
        let svc = a.veem.deploy.deploy(&Role::Provider("acme".into()), &networked()).await.unwrap();
        for id in &svc.vees {
            eventually("running", || a.veem.vee(id).unwrap().state == VeeState::Running).await;
        }
        let vees: Vec<_> = svc.vees.iter().map(|id| a.veem.vee(id).unwrap()).collect();
        let moving = vees.iter().find(|v| v.instance == 1).unwrap().id.clone();
        let other = vees.iter().find(|v| v.instance == 0).unwrap().host().unwrap().to_string();
        (a, b, moving, other)
    }

    /// `networked()` with its two instances on different hosts.
    fn apart() -> String {
        networked() + "[[constraint]]\nkind = \"anti-affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"vm\"]\n"
    }

    /// Site A with one host (a1) and B (b1, refusing VEEs if `b_refuses`):
    /// `apart()` cannot run whole at A. Deploys it; the result.
    async fn one_host_at_a(b_refuses: bool) -> (FakeSite, FakeSite, anyhow::Result<crate::model::ServiceRec>) {
        let a = FakeSite::start_site("site-a", &["a1"], &format!("{A_PEERS_WITH_B}{OVERLAY_B}{POOLS}"));
        let b = FakeSite::start_site("site-b", &["b1"], &format!("{B_TRUSTS_A}{OVERLAY_A}"));
        a.peer_with(&b, "a-to-b-token");
        a.repo.blobs.lock().unwrap().insert(IMAGE.into());
        a.veem.hosts.heartbeat("a1", 3).await;
        if b_refuses {
            b.host("b1").fail("Prepare", tonic::Code::ResourceExhausted, "no room");
        }
        let svc = a.veem.deploy.deploy(&Role::Provider("acme".into()), &apart()).await;
        (a, b, svc)
    }

    #[tokio::test]
    async fn a_remote_placement_a_crash_cut_short_is_taken_back_from_the_peer() {
        use crate::store::Tree;
        use crate::workflows::intents::Intent;
        let (a, b, svc) = one_host_at_a(false).await;
        let svc = svc.unwrap();
        let intents = |a: &FakeSite| a.veem.store.list::<Intent>(Tree::Intents).unwrap();
        assert!(intents(&a).is_empty(), "the admission's commit ends its intent");
        let at_b = svc
            .vees
            .iter()
            .map(|id| a.veem.vee(id).unwrap())
            .find(|v| v.location == Location::Site("site-b".into()))
            .unwrap();
        assert!(b.veem.vee(&at_b.id).is_ok());
        // As a VEEM killed after B booted the VEE and before its commit
        // leaves it: the intent, naming a VEE B runs and one it never got.
        a.veem
            .intents
            .begin_intent(&Intent::RemotePlacement {
                service_id: "cut-short".into(),
                vees: vec![at_b.id.clone(), "never-placed".into()],
                created_ms: 0,
            })
            .unwrap();
        assert_eq!(a.veem.intents.undo_intents().await.unwrap(), 0);
        assert!(b.veem.vee(&at_b.id).is_err(), "B took it back");
        assert!(
            b.host("b1")
                .calls()
                .iter()
                .any(|c| c.starts_with("destroy") && c.contains(&at_b.id)),
            "{:?}",
            b.host("b1").calls()
        );
        assert!(intents(&a).is_empty());
    }

    #[tokio::test]
    async fn a_service_placed_in_part_at_a_peer_has_its_networks_stretched_there() {
        let (a, b, svc) = one_host_at_a(false).await;
        let svc = svc.unwrap();
        assert_eq!(svc.networks.len(), 2);
        let vees: Vec<_> = svc.vees.iter().map(|id| a.veem.vee(id).unwrap()).collect();
        let (vm0, vm1) = (&vees[0], &vees[1]);
        assert_eq!((vm1.state, &vm1.location), (VeeState::Running, &Location::Site("site-b".into())));
        eventually("vm-0 running", || a.veem.vee(&vm0.id).unwrap().state == VeeState::Running).await;
        // B's host booted vm-1 on the primary's networks: its NICs as
        // assigned at A, the primary's tables (vm-0 behind a1's VTEP), on
        // the agreed port, without the external address.
        let spec = b.host("b1").spec(&vm1.id).expect("b1 booted vm-1");
        assert_eq!(spec.nics.len(), 2);
        for (nic, rec) in spec.nics.iter().zip(&vm1.nics) {
            assert_eq!(
                (nic.vni, nic.mac.as_str(), nic.address.as_str()),
                (rec.vni, rec.mac.as_str(), rec.address.to_string().as_str())
            );
            assert_eq!(nic.overlay_port, 4790);
            assert!(nic.external_address.is_empty());
            let at_a1 = nic.members.iter().find(|m| m.name == "vm-0").expect("vm-0 in the table");
            assert_eq!(at_a1.vtep, a.host("a1").vtep());
        }
        assert_eq!(b.veem.vee(&vm1.id).unwrap().nics[0].primary_members.len(), 2);
        // a1 sends vm-1's frames and its external address to B.
        let script = a.host("a1").script.clone();
        eventually("a1's tables", || {
            script.lock().unwrap().networks.get(&101).is_some_and(|t| t.len() == 2)
        })
        .await;
        let script = script.lock().unwrap();
        let public = script.networks[&101].iter().find(|m| m.name == "vm-1").unwrap().clone();
        assert_eq!((public.vtep.as_str(), public.vtep_port), ("198.51.100.2", 4790));
        assert_eq!(public.external_address, vm1.nics[1].external.unwrap().to_string());
        assert_eq!(script.stretched_to[&100].len(), 1);
    }

    #[tokio::test]
    async fn a_service_whose_peer_refuses_its_part_is_refused_whole_and_leaves_nothing() {
        let (a, b, svc) = one_host_at_a(true).await;
        let e = format!("{:#}", svc.unwrap_err());
        assert!(e.contains("no peer site takes the other 1") && e.contains("no room"), "{e}");
        assert!(a.veem.vees().unwrap().is_empty(), "site A recorded {:?}", a.veem.vees().unwrap());
        assert!(a.veem.networks.networks_taken().unwrap().subnets.is_empty());
        assert!(
            a.host("a1").calls().iter().all(|c| !c.starts_with("prepare")),
            "{:?}",
            a.host("a1").calls()
        );
        assert!(b.veem.vees().unwrap().is_empty(), "site B keeps {:?}", b.veem.vees().unwrap());
        // The same service deploys once B has room.
        b.host("b1").script.lock().unwrap().failing.clear();
        let svc = a.veem.deploy.deploy(&Role::Provider("acme".into()), &apart()).await.unwrap();
        assert_eq!(svc.vees.len(), 2);
    }

    #[tokio::test]
    async fn a_live_migration_to_a_peer_stretches_the_networks_there() {
        let (a, b, vee, other) = sites(OVERLAY_B).await;
        let m = migrate_to_b(&a, &vee).await;
        assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
        // The peer's host: the primary's tables, on the agreed port, no
        // external address (it stays at the primary).
        let spec = b.host("b1").spec(&vee).expect("b1 prepared the VEE");
        let v = a.veem.vee(&vee).unwrap();
        for (nic, rec) in spec.nics.iter().zip(&v.nics) {
            assert_eq!((nic.vni, nic.mac.as_str(), nic.overlay_port), (rec.vni, rec.mac.as_str(), 4790));
            assert_eq!(nic.members.len(), 2, "the primary's table: {:?}", nic.members);
            assert!(nic.external_address.is_empty() && nic.ports.is_empty());
        }
        // The primary's host of the other VEE: the moved one behind B's
        // VTEP and port, its external address forwarded there.
        let host = a.host(&other);
        let script = host.script.lock().unwrap();
        let moved = |vni: u32| script.networks[&vni].iter().find(|m| m.name == "vm-1").cloned().unwrap();
        let (backend, public) = (moved(100), moved(101));
        assert_eq!((backend.vtep.as_str(), backend.vtep_port), ("198.51.100.2", 4790));
        assert!(backend.external_address.is_empty());
        assert_eq!(
            (public.external_address.as_str(), public.ports.as_slice()),
            ("192.0.2.2", &[80][..])
        );
        let to_b = &script.stretched_to[&100];
        assert_eq!(
            to_b.iter().map(|v| (v.address.as_str(), v.port)).collect::<Vec<_>>(),
            [("198.51.100.2", 4790)]
        );
    }

    #[tokio::test]
    async fn a_vee_restored_at_a_peer_from_a_checkpoint_is_on_its_networks_there() {
        use interfaces::vhi::CheckpointRecord;
        let (a, b, vee, other) = sites(OVERLAY_B).await;
        let host = a.veem.vee(&vee).unwrap().host().unwrap().to_string();
        let cp = crate::model::CheckpointRec::new(&CheckpointRecord {
            checkpoint_id: uuid::Uuid::new_v4().to_string(),
            vee_id: vee.clone(),
            memory_blob: format!("sha256:{}", "1".repeat(64)),
            take_time: interfaces::time::timestamp_ms(chrono::Utc::now().timestamp_millis()),
            host,
            ..Default::default()
        });
        a.veem.store.put(crate::store::Tree::Checkpoints, &cp.id, &cp).unwrap();
        // Its host failed and no host here can take it.
        a.veem.federation.recover_at_peer(&vee, None).await.unwrap();
        let v = a.veem.vee(&vee).unwrap();
        assert_eq!((v.state, &v.location), (VeeState::Running, &Location::Site("site-b".into())));
        assert!(
            b.host("b1").calls().contains(&format!("restore {vee} fence=")),
            "{:?}",
            b.host("b1").calls()
        );
        let spec = b.host("b1").spec(&vee).unwrap();
        for (nic, rec) in spec.nics.iter().zip(&v.nics) {
            assert_eq!((nic.mac.as_str(), nic.overlay_port), (rec.mac.as_str(), 4790));
            let vm0 = nic.members.iter().find(|m| m.name == "vm-0").unwrap();
            assert_eq!(vm0.vtep, a.host(&other).vtep());
        }
        let table = a.host(&other).script.lock().unwrap().networks[&100].clone();
        let vm1 = table.iter().find(|m| m.name == "vm-1").unwrap();
        assert_eq!((vm1.vtep.as_str(), vm1.vtep_port), ("198.51.100.2", 4790));
    }

    #[tokio::test]
    async fn a_peer_that_refuses_leaves_nothing_stretched() {
        let (a, b, vee, other) = sites(OVERLAY_B).await;
        b.host("b1").fail("PrepareIncoming", tonic::Code::ResourceExhausted, "no room");
        let m = migrate_to_b(&a, &vee).await;
        assert_eq!(m.state, MigrationState::Failed);
        let v = a.veem.vee(&vee).unwrap();
        assert_eq!(v.state, VeeState::Running);
        assert!(matches!(v.location, Location::Host(_)));
        let script = a.host(&other).script.clone();
        let script = script.lock().unwrap();
        assert!(script.stretched_to[&100].is_empty(), "still stretched: {:?}", script.stretched_to);
        assert!(script.networks[&100]
            .iter()
            .all(|m| m.vtep_port == 0 && m.external_address.is_empty()));
    }

    #[tokio::test]
    async fn with_every_vee_abroad_a_host_here_anchors_the_networks_until_one_comes_home() {
        let (a, _b, vm1, _) = sites(OVERLAY_B).await;
        let service = a.veem.vee(&vm1).unwrap().service_id;
        let vm0 = a.veem.service(&service).unwrap().vees.into_iter().find(|v| v != &vm1).unwrap();
        let anchored = |h: &str| a.host(h).script.lock().unwrap().anchored.get(&100).copied();
        assert_eq!(migrate_to_b(&a, &vm1).await.state, MigrationState::Done);
        assert_ne!(anchored("a1"), Some(true), "vm-0 still runs here: no anchor");
        assert_ne!(anchored("a2"), Some(true));
        assert_eq!(migrate_to_b(&a, &vm0).await.state, MigrationState::Done);
        // All abroad: the first host up keeps the home part.
        assert_eq!((anchored("a1"), anchored("a2")), (Some(true), None));
        assert_eq!(a.veem.service(&service).unwrap().anchor.as_deref(), Some("a1"));
        // vm-0 comes home to a2: a1 lets the network go.
        let m = a
            .veem
            .migration
            .propose(&vm0, Dest::Host("a2".into()), "home", Proposer::Operator)
            .unwrap();
        a.veem.migration.approve(&m.id, "operator").unwrap();
        assert_eq!(a.finished(&m.id).await.state, MigrationState::Done);
        assert_eq!((anchored("a1"), anchored("a2")), (Some(false), Some(false)));
        assert_eq!(a.veem.service(&service).unwrap().anchor, None);
    }

    #[tokio::test]
    async fn a_silent_peers_copy_is_cut_off_the_overlay_before_the_vee_runs_here_again() {
        let (a, _b, vee, other) = sites(OVERLAY_B).await;
        assert_eq!(migrate_to_b(&a, &vee).await.state, MigrationState::Done);
        let host = a.host(&other);
        let before = host.calls().len();
        // Site B went silent; site A recovers the VEE at home.
        a.veem.peer_watch.recover_from_peer(&vee, "site-b").await.unwrap();
        let v = a.veem.vee(&vee).unwrap();
        assert_eq!(v.state, VeeState::Running, "recovered at home");
        // The first update after the silence already drops site B: the
        // VEEM sends it before it asks any host to run the VEE again.
        let after: Vec<String> = host.calls()[before..].to_vec();
        let update = after.iter().position(|c| c.starts_with("update_network vb100")).expect("an update");
        assert_eq!(after[update], "update_network vb100 to=", "{after:?}");
        if v.host() == Some(other.as_str()) {
            let run = after.iter().position(|c| c.contains(&vee) && !c.starts_with("update")).unwrap();
            assert!(update < run, "{after:?}");
        }
        let table = host.script.lock().unwrap().networks[&100].clone();
        let m = table.iter().find(|m| m.name == "vm-1").unwrap();
        assert!(m.vtep_port == 0 && m.vtep != "198.51.100.2", "{m:?}");
    }

    #[tokio::test]
    async fn a_peer_running_a_vee_of_the_service_learns_the_primarys_table_changes() {
        let (a, b, vm1, other) = sites(OVERLAY_B).await;
        assert_eq!(migrate_to_b(&a, &vm1).await.state, MigrationState::Done);
        // vm-0 moves between site A's hosts: its VTEP changes.
        let service = a.veem.vee(&vm1).unwrap().service_id;
        let vm0 = a.veem.service(&service).unwrap().vees.into_iter().find(|v| v != &vm1).unwrap();
        let to = if other == "a1" { "a2" } else { "a1" };
        let m = a
            .veem
            .migration
            .propose(&vm0, Dest::Host(to.into()), "maintenance", Proposer::Operator)
            .unwrap();
        a.veem.migration.approve(&m.id, "operator").unwrap();
        assert_eq!(a.finished(&m.id).await.state, MigrationState::Done);
        let vtep = a.host(to).vtep();
        let at_b = b.host("b1").script.lock().unwrap().networks[&100].clone();
        let vm0_there = at_b.iter().find(|m| m.name == "vm-0").expect("vm-0 in B's table");
        assert_eq!(vm0_there.vtep, vtep, "B's host sends vm-0's frames to its new host");
        let kept = b.veem.vee(&vm1).unwrap();
        assert_eq!(kept.nics[0].primary_members, at_b, "B's record keeps the table for later specs");
    }
}

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
        assert_eq!(a.veem.vee(v).unwrap().location, Location::Site("site-b".into()), "{v}");
        assert!(b.host("b1").runs(v));
    }
}

/// The records of a PushUsage as the VMI server hands them on.
fn pushed(b: &interfaces::vmi::PushUsageRequest) -> Vec<Result<crate::model::UsageRec, (String, String)>> {
    b.records.iter().cloned().map(crate::wire::peer::pushed_usage).collect()
}
