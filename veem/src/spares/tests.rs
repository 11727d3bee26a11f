//! The full guarantee against an in-process peer: spares held, confirmed,
//! released, lapsed, refused with the reason, and used after a failure.

use super::*;
use crate::fakes::{eventually, FakeSite, STANDARD};
use crate::model::{Location, VeeState};
use crate::ports::Clock;

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
    b.veem.store.list(Tree::Spares).unwrap()
}

async fn deploy_full(a: &FakeSite) -> anyhow::Result<String> {
    let provider = crate::config::Role::Provider("acme".into());
    let svc = a.veem.deploy(&provider, &full()).await?;
    let vee = svc.vees[0].clone();
    eventually("the full VEE runs", || a.veem.vee(&vee).unwrap().state == VeeState::Running).await;
    Ok(vee)
}

#[tokio::test]
async fn a_full_vee_holds_a_spare_at_a_peer_until_it_stops() {
    let (a, b) = pair("\"full\", \"standard\"");
    let vee = deploy_full(&a).await.unwrap();
    assert_eq!(a.veem.spare_site(&vee).as_deref(), Some("site-b"));
    let h = held(&b);
    assert_eq!(h.len(), 1);
    assert_eq!(
        (h[0].vee_id.as_str(), h[0].primary.as_str(), h[0].confirmed),
        (vee.as_str(), "site-a", true)
    );
    let r = b.veem.planner().reservation(&spare_id(&vee)).unwrap().clone();
    assert_eq!(r.resources, Resources::new(1, 512, 1));
    // Its VEE stops: the spare goes.
    a.veem.stop_vee(&vee).await.unwrap();
    assert!(held(&b).is_empty());
    assert!(b.veem.planner().reservation(&spare_id(&vee)).is_none());
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
    assert!(a.veem.store.list::<crate::model::ServiceRec>(Tree::Services).unwrap().is_empty());
    assert!(held(&b).is_empty());
}

#[tokio::test]
async fn an_unconfirmed_hold_lapses() {
    let (_a, b) = pair("");
    let now = b.clock.now();
    let vee = uuid::Uuid::new_v4().to_string();
    let r = vmi::SpareRequest {
        vee_id: vee.clone(),
        vcpus: 1,
        memory_mib: 512,
        disk_gib: 1,
        start_unix: now,
        end_unix: now + 3600,
    };
    b.veem.hold_spare("site-a", r.clone()).unwrap();
    let e = b.veem.hold_spare("site-a", r).unwrap_err();
    assert!(e.to_string().contains("held here already"), "{e}");
    assert_eq!(b.veem.lapse_spares().unwrap(), 0);
    b.clock.advance_ms((HOLD_SECONDS + 1) * 1000);
    assert_eq!(b.veem.lapse_spares().unwrap(), 1);
    assert!(held(&b).is_empty() && b.veem.planner().reservation(&spare_id(&vee)).is_none());
}

#[tokio::test]
async fn with_no_local_room_a_failed_full_vee_is_restored_into_its_spare_at_the_peer() {
    let (a, b) = pair("");
    let vee = deploy_full(&a).await.unwrap();
    a.veem.checkpoint_vee(&vee).await.unwrap();
    // a1 is site A's only host.
    a.veem.recover_host("a1").await.unwrap();
    let v = a.veem.vee(&vee).unwrap();
    assert_eq!((v.state, v.location.clone()), (VeeState::Running, Location::Site("site-b".into())));
    assert!(b.host("b1").runs(&vee));
    assert!(held(&b).is_empty(), "the spare made room for it");
    assert!(b.veem.planner().reservation(&spare_id(&vee)).is_none());
    assert!(b.veem.planner().reservation(&vee).is_some());
    let at_b = b.veem.store.events().unwrap();
    assert!(
        at_b.iter().any(|e| e.vee_id == vee && e.detail.contains("arrives into its spare")),
        "{at_b:?}"
    );
}
