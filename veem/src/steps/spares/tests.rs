//! The full guarantee against an in-process peer: spares held, confirmed,
//! released, lapsed, refused with the reason, and used after a failure.

use super::*;
use crate::model::{Location, VeeState};
use crate::ports::Clock;
use crate::sim::{eventually, FakeSite, STANDARD};

const A_PEERS_WITH_B: &str = "[[peers]]\nsite_id = \"site-b\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"a-to-b-token\"\n\
    [peers.agreement]\nprice_per_vee_hour = 0.1\n";

/// B's agreement with A: A's token, and the levels B admits.
fn b_trusts_a(levels: &str) -> String {
    format!(
        "[[tokens]]\ntoken = \"a-to-b-token\"\nrole = \"peer\"\nname = \"site-a\"\n\
         [[peers]]\nsite_id = \"site-a\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"b-to-a-token\"\n\
         [peers.agreement]\nprice_per_vee_hour = 0.1\nguarantee_levels = [{levels}]\n"
    )
}

fn full() -> String {
    STANDARD.replace("guarantee = \"standard\"", "guarantee = \"full\"\nmigration = \"federation\"")
}

fn pair(levels: &str) -> (FakeSite, FakeSite) {
    let a = FakeSite::start_site("site-a", &["a1"], A_PEERS_WITH_B);
    let b = FakeSite::start_site("site-b", &["b1"], &b_trusts_a(levels));
    a.peer_with(&b, "a-to-b-token");
    for s in [&a, &b] {
        s.repo.blobs.lock().unwrap().insert(format!("sha256:{}", "5".repeat(64)));
    }
    (a, b)
}

fn held(b: &FakeSite) -> Vec<HeldSpare> {
    b.veem.core.store.list(Tree::Spares).unwrap()
}

async fn deploy_full(a: &FakeSite) -> anyhow::Result<String> {
    let provider = crate::config::Role::Provider("acme".into());
    let svc = a.veem.deploy.deploy(&provider, &full()).await?;
    let vee = svc.vees[0].clone();
    eventually("the full VEE runs", || a.veem.core.vee(&vee).unwrap().state == VeeState::Running).await;
    Ok(vee)
}

#[tokio::test]
async fn a_full_vee_holds_a_spare_at_a_peer_until_it_stops() {
    let (a, b) = pair("\"full\", \"standard\"");
    let vee = deploy_full(&a).await.unwrap();
    assert_eq!(a.veem.spares.spare_site(&vee).as_deref(), Some("site-b"));
    let h = held(&b);
    assert_eq!(h.len(), 1);
    assert_eq!(
        (h[0].vee_id.as_str(), h[0].primary.as_str(), h[0].confirmed),
        (vee.as_str(), "site-a", true)
    );
    let r = b.veem.core.planner().reservation(&spare_id(&vee)).unwrap().clone();
    assert_eq!(r.resources, Resources::new(1, 512, 1));
    // Its VEE stops: the spare goes.
    a.veem.stop.stop_here(&vee).await.unwrap();
    assert!(held(&b).is_empty());
    assert!(b.veem.core.planner().reservation(&spare_id(&vee)).is_none());
}

#[tokio::test]
async fn a_full_manifest_no_peer_holds_a_spare_for_is_refused_with_the_reason() {
    let (a, b) = pair("\"standard\"");
    let e = format!("{:#}", deploy_full(&a).await.unwrap_err());
    assert!(
        e.contains("guarantee full needs spare capacity at a peer site and none holds it")
            && e.contains("site-b refused a spare: the framework agreement with site-a does not admit guarantee full"),
        "{e}"
    );
    assert!(a
        .veem
        .core
        .store
        .list::<crate::model::ServiceRec>(Tree::Services)
        .unwrap()
        .is_empty());
    assert!(held(&b).is_empty());
}

#[tokio::test]
async fn an_unconfirmed_hold_lapses() {
    let (_a, b) = pair("");
    let now = b.clock.now();
    let vee = uuid::Uuid::new_v4().to_string();
    let r = SpareRequest {
        vee_id: vee.clone(),
        vcpus: 1,
        memory_mib: 512,
        disk_gib: 1,
        start_unix: now,
        end_unix: now + 3600,
    };
    b.veem.spares.hold_spare("site-a", &r).unwrap();
    let e = b.veem.spares.hold_spare("site-a", &r).unwrap_err();
    assert!(e.to_string().contains("held here already"), "{e}");
    assert_eq!(b.veem.spares.lapse_spares().unwrap(), 0);
    b.clock.advance_ms((HOLD_SECONDS + 1) * 1000);
    assert_eq!(b.veem.spares.lapse_spares().unwrap(), 1);
    assert!(held(&b).is_empty() && b.veem.core.planner().reservation(&spare_id(&vee)).is_none());
}

#[tokio::test]
async fn with_no_local_room_a_failed_full_vee_is_restored_into_its_spare_at_the_peer() {
    let (a, b) = pair("");
    let vee = deploy_full(&a).await.unwrap();
    a.veem.lifecycle.checkpoint_vee(&vee).await.unwrap();
    // a1 is site A's only host.
    a.veem.recovery.recover_host("a1").await.unwrap();
    let v = a.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.location.clone()), (VeeState::Running, Location::Site("site-b".into())));
    assert!(b.host("b1").runs(&vee));
    assert!(held(&b).is_empty(), "the spare made room for it");
    assert!(b.veem.core.planner().reservation(&spare_id(&vee)).is_none());
    assert!(b.veem.core.planner().reservation(&vee).is_some());
    let at_b = b.veem.core.store.events().unwrap();
    assert!(
        at_b.iter().any(|e| e.vee_id == vee && e.detail.contains("arrives into its spare")),
        "{at_b:?}"
    );
}

#[tokio::test]
async fn an_arrival_the_peer_cannot_admit_leaves_its_spare_held() {
    let (a, b) = pair("\"full\", \"standard\"");
    let vee = deploy_full(&a).await.unwrap();
    // The VEE arrives larger than any host of B (b1 has 4096 MiB).
    let mut spec = a.veem.networks.spec_of(&a.veem.core.vee(&vee).unwrap());
    spec.memory_mib = 8192;
    let req = crate::domain::peer::IncomingVee {
        spec,
        primary_site: "site-a".into(),
        guarantee: GuaranteeLevel::Full,
        how: crate::domain::peer::Incoming::Boot,
    };
    let e = format!("{:#}", b.veem.federation.accept_incoming("site-a", req).await.unwrap_err());
    assert!(e.contains("cannot admit VEE"), "{e}");
    let h = held(&b);
    assert_eq!((h.len(), h[0].confirmed), (1, true), "the spare is still held: {h:?}");
    assert!(b.veem.core.planner().reservation(&spare_id(&vee)).is_some());
    assert!(b.veem.core.planner().reservation(&vee).is_none());
}

/// Sites A (host a1), B (b1, the cheaper agreement: spares go there first)
/// and C (c1), each of B and C admitting A's `full` VEEs.
fn trio() -> (FakeSite, FakeSite, FakeSite) {
    let a_peers = format!(
        "{A_PEERS_WITH_B}[[peers]]\nsite_id = \"site-c\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"a-to-c-token\"\n\
         [peers.agreement]\nprice_per_vee_hour = 0.2\n"
    );
    let a = FakeSite::start_site("site-a", &["a1"], &a_peers);
    let b = FakeSite::start_site("site-b", &["b1"], &b_trusts_a("\"full\", \"standard\""));
    let c_trusts_a = b_trusts_a("\"full\", \"standard\"").replace("a-to-b-token", "a-to-c-token");
    let c = FakeSite::start_site("site-c", &["c1"], &c_trusts_a);
    a.peer_with(&b, "a-to-b-token");
    a.peer_with(&c, "a-to-c-token");
    for s in [&a, &b, &c] {
        s.repo.blobs.lock().unwrap().insert(format!("sha256:{}", "5".repeat(64)));
    }
    (a, b, c)
}

#[tokio::test]
async fn a_vee_restored_into_its_spare_gets_a_new_spare_at_another_peer() {
    let (a, b, c) = trio();
    let vee = deploy_full(&a).await.unwrap();
    assert_eq!(a.veem.spares.spare_site(&vee).as_deref(), Some("site-b"));
    a.veem.lifecycle.checkpoint_vee(&vee).await.unwrap();
    a.veem.recovery.recover_host("a1").await.unwrap();
    assert_eq!(a.veem.core.vee(&vee).unwrap().location, Location::Site("site-b".into()));
    assert!(held(&b).is_empty(), "B's spare made room for it");
    // The full guarantee is kept: C holds the new spare, confirmed.
    assert_eq!(a.veem.spares.spare_site(&vee).as_deref(), Some("site-c"));
    let h = held(&c);
    assert_eq!((h.len(), h[0].vee_id.as_str(), h[0].confirmed), (1, vee.as_str(), true));
    assert!(c.veem.core.planner().reservation(&spare_id(&vee)).is_some());
    let ev = a.veem.core.store.events().unwrap();
    assert!(
        ev.iter()
            .any(|e| e.vee_id == vee && e.detail == "its spare at site-b was used; site-c holds a new one"),
        "{ev:?}"
    );
}

#[tokio::test]
async fn a_vee_migrated_to_another_peer_keeps_its_spare_until_it_stops() {
    let (a, b, c) = trio();
    let vee = deploy_full(&a).await.unwrap();
    let m = a
        .veem
        .migration
        .propose(
            &vee,
            crate::workflows::migration::Dest::Site("site-c".into()),
            "maintenance",
            crate::workflows::migration::Proposer::Operator,
        )
        .unwrap();
    a.veem.migration.approve(&m.id, "operator").unwrap();
    let m = a.finished(&m.id).await;
    assert_eq!(m.state, crate::model::MigrationState::Done, "{}", m.detail);
    assert!(c.host("c1").runs(&vee));
    // Still protected by B's spare, and A still knows it.
    assert_eq!(a.veem.spares.spare_site(&vee).as_deref(), Some("site-b"));
    assert_eq!(held(&b).len(), 1);
    // Stopped (wherever it runs), the spare goes.
    a.veem.lifecycle.vee_action(&vee, crate::domain::Action::Stop, "").await.unwrap();
    eventually("B's spare is released", || held(&b).is_empty()).await;
    assert!(b.veem.core.planner().reservation(&spare_id(&vee)).is_none());
}
