//! A checkpoint of a VEE run for a peer is usable at once and copied to
//! the primary's repository after its answer (issue 55): `local-only`
//! then `replicated`; a refused copy retried after its wait, the
//! checkpoint kept meanwhile; a copy a restart cut short taken up again.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::domain::{Replication, ReplicationRec};
use crate::model::CheckpointRec;
use crate::ports::Clock;
use crate::sim::{eventually, FakeSite, STANDARD};
use crate::store::Tree;

/// Site B, which copies checkpoints to primaries, running one VEE for
/// site A.
fn site_b() -> (FakeSite, String) {
    let site = FakeSite::start_site("site-b", &["b1"], "replicate_checkpoints = true\n");
    let vee = site.running_service(STANDARD).remove(0);
    let mut v = site.veem.core.vee(&vee).unwrap();
    v.for_peer = Some("site-a".into());
    site.veem.core.save_vee(&v).unwrap();
    (site, vee)
}

fn record(site: &FakeSite, id: &str) -> ReplicationRec {
    site.checkpoint_replication(id)
}

fn unsettled(site: &FakeSite) -> Vec<String> {
    site.veem.core.store.list::<String>(Tree::Replications).unwrap()
}

fn replicated(site: &FakeSite) -> Vec<String> {
    let shares = site.repo.shares.lock().unwrap();
    shares.iter().filter(|s| s.starts_with("replicate ")).cloned().collect()
}

#[tokio::test]
async fn the_checkpoint_answers_before_its_copy_at_the_primary_and_is_replicated_after() {
    let (site, vee) = site_b();
    // A slow copy: the checkpoint does not wait for it.
    site.repo.hold_replication.store(true, Ordering::SeqCst);
    let cp = tokio::time::timeout(Duration::from_secs(5), site.veem.lifecycle.checkpoint_vee(&vee))
        .await
        .expect("the checkpoint answers without waiting for its copy")
        .unwrap();
    let r = record(&site, &cp.id);
    assert!(matches!(r.state, Replication::LocalOnly | Replication::Replicating), "{r:?}");
    assert_eq!(r.site, "site-a");
    assert_eq!(unsettled(&site), vec![vee.clone()], "listed until it is settled");
    assert!(replicated(&site).is_empty());
    // Usable here at once.
    assert_eq!(site.veem.checkpoints.checkpoint_of(&vee, None).unwrap().unwrap().id, cp.id);
    site.repo.hold_replication.store(false, Ordering::SeqCst);
    eventually("replicated", || record(&site, &cp.id).state == Replication::Replicated).await;
    assert_eq!(
        replicated(&site),
        [
            format!("replicate sha256:{} site-a", "2".repeat(64)),
            format!("replicate sha256:{} site-a", "3".repeat(64))
        ]
    );
    assert!(unsettled(&site).is_empty());
    assert!(
        site.events(&vee).iter().any(|e| e.starts_with("checkpoint-replicated: ")),
        "{:?}",
        site.events(&vee)
    );
}

#[tokio::test]
async fn a_refused_copy_is_retried_after_its_wait_and_the_checkpoint_is_kept_meanwhile() {
    let (site, vee) = site_b();
    site.repo.refuse_replication.store(true, Ordering::SeqCst);
    let cp = site
        .veem
        .lifecycle
        .checkpoint_vee(&vee)
        .await
        .expect("a refused copy does not fail the checkpoint");
    eventually("failed", || record(&site, &cp.id).state == Replication::Failed).await;
    let r = record(&site, &cp.id);
    assert_eq!(
        (r.attempts, r.retry_at_ms.map(|t| t - site.clock.now_ms() > 4_000)),
        (1, Some(true)),
        "{r:?}"
    );
    assert!(r.error.contains("refused"), "{r:?}");
    assert_eq!(site.veem.core.vee(&vee).unwrap().latest_checkpoint.as_deref(), Some(cp.id.as_str()));
    assert_eq!(
        site.veem.checkpoints.checkpoint_of(&vee, None).unwrap().unwrap().id,
        cp.id,
        "still usable here"
    );
    // Not before its wait.
    site.repo.refuse_replication.store(false, Ordering::SeqCst);
    site.veem.checkpoints.replicator.pass().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!((record(&site, &cp.id).attempts, replicated(&site).len()), (1, 0));
    site.clock.advance_ms(5_000);
    site.veem.checkpoints.replicator.pass().await.unwrap();
    eventually("replicated", || record(&site, &cp.id).state == Replication::Replicated).await;
    assert_eq!(record(&site, &cp.id).attempts, 2);
    assert!(unsettled(&site).is_empty());
}

#[tokio::test]
async fn a_copy_a_restart_cut_short_is_taken_up_again_by_the_next_veem() {
    let (site, vee) = site_b();
    // As a VEEM that died mid-copy leaves it.
    let rec = interfaces::vhi::CheckpointRecord {
        checkpoint_id: "c-cut".into(),
        vee_id: vee.clone(),
        memory_blob: format!("sha256:{}", "4".repeat(64)),
        take_time: interfaces::time::timestamp_ms(site.clock.now_ms()),
        ..Default::default()
    };
    let mut replication = ReplicationRec::new(Replication::LocalOnly, "site-a", site.clock.now_ms());
    replication.start("c-cut").unwrap();
    let cp = CheckpointRec::with_replication(&rec, replication);
    site.veem.core.store.put(Tree::Checkpoints, &cp.id, &cp).unwrap();
    site.veem.core.store.put(Tree::Replications, &cp.id, &vee).unwrap();
    let site = site.restart();
    site.veem.checkpoints.replicator.pass().await.unwrap();
    eventually("replicated", || record(&site, "c-cut").state == Replication::Replicated).await;
    assert_eq!(replicated(&site), [format!("replicate sha256:{} site-a", "4".repeat(64))]);
    assert_eq!(record(&site, "c-cut").attempts, 2);
}

#[tokio::test]
async fn without_replication_a_checkpoint_for_a_peer_needs_no_copy() {
    let site = FakeSite::start_site("site-b", &["b1"], "");
    let vee = site.running_service(STANDARD).remove(0);
    let mut v = site.veem.core.vee(&vee).unwrap();
    v.for_peer = Some("site-a".into());
    site.veem.core.save_vee(&v).unwrap();
    let cp = site.veem.lifecycle.checkpoint_vee(&vee).await.unwrap();
    assert_eq!(record(&site, &cp.id).state, Replication::NotNeeded);
    assert!(unsettled(&site).is_empty() && replicated(&site).is_empty());
}
