//! A checkpoint a peer takes of a primary's VEE counts at the primary only
//! once its copy is in the primary's own repository (issue 55): the peer
//! answers before it copies, and the primary keeps the record `awaiting`
//! (not restored from) until its repository holds the blobs.

use std::sync::atomic::Ordering;

use super::*;
use crate::domain::{Action, Replication};
use crate::model::CheckpointRec;
use crate::sim::eventually;
use crate::store::Tree;

fn replication(site: &FakeSite, id: &str) -> Replication {
    site.checkpoint_replication(id).state
}

#[tokio::test]
async fn the_primary_restores_a_peers_checkpoint_only_once_its_repository_holds_it() {
    let (a, b, vee) = two_sites(&format!("replicate_checkpoints = true\n{B_TRUSTS_A}")).await;
    assert_eq!(migrate_to_b(&a, &vee).await.state, MigrationState::Done);
    let before = a.veem.checkpoints.checkpoint_of(&vee, None).unwrap().unwrap().id;
    // A's repository takes a pin only of what it holds; B's copy to A is
    // refused for now.
    a.repo.strict_pins.store(true, Ordering::SeqCst);
    b.replicates_to(&a);
    b.repo.refuse_replication.store(true, Ordering::SeqCst);
    a.veem
        .lifecycle
        .vee_action(&vee, Action::Checkpoint, "")
        .await
        .expect("B answers before its copy at A is made");
    let taken = a.veem.core.vee(&vee).unwrap().latest_checkpoint.unwrap();
    assert_ne!(taken, before);
    assert_eq!(replication(&a, &taken), Replication::Awaiting);
    assert!(matches!(
        replication(&b, &taken),
        Replication::LocalOnly | Replication::Replicating | Replication::Failed
    ));
    // Not used at A: the latest it may restore is the one before.
    assert_eq!(a.veem.checkpoints.checkpoint_of(&vee, None).unwrap().unwrap().id, before);
    let e = a.veem.checkpoints.checkpoint_of(&vee, Some(&taken)).unwrap_err();
    assert!(format!("{e:#}").contains("not in this site's repository yet"), "{e:#}");
    // A looks for it in its repository: not there.
    a.veem.checkpoints.replicator.pass().await.unwrap();
    eventually("looked for once", || {
        let c: CheckpointRec = a.veem.core.store.get(Tree::Checkpoints, &taken).unwrap().unwrap();
        c.replication.attempts == 1 && c.replication.retry_at_ms.is_some()
    })
    .await;
    assert_eq!(replication(&a, &taken), Replication::Awaiting);
    // B's retry copies it to A's repository; A finds it at its next look.
    eventually("B's attempt failed", || replication(&b, &taken) == Replication::Failed).await;
    b.repo.refuse_replication.store(false, Ordering::SeqCst);
    b.clock.advance_ms(5_000);
    b.veem.checkpoints.replicator.pass().await.unwrap();
    eventually("replicated at B", || replication(&b, &taken) == Replication::Replicated).await;
    a.clock.advance_ms(5_000);
    a.veem.checkpoints.replicator.pass().await.unwrap();
    eventually("found at A", || replication(&a, &taken) == Replication::Replicated).await;
    assert_eq!(a.veem.checkpoints.checkpoint_of(&vee, None).unwrap().unwrap().id, taken);
}
