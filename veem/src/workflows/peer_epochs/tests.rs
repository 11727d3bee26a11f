use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::sim::FakeSite;

const PEER: &str = "[[tokens]]\ntoken = \"b-to-a-token\"\nrole = \"peer\"\nname = \"site-b\"\n\
    [[peers]]\nsite_id = \"site-b\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"a-to-b-token\"\n\
    [peers.agreement]\nprice_per_vee_hour = 0.1\n";

fn fenced(r: Result<i64, EpochError>) -> Option<Fenced> {
    match r {
        Err(EpochError::Fenced(f)) => Some(f),
        _ => None,
    }
}

fn stored(site: &FakeSite) -> Option<i64> {
    site.veem.core.store.get(Tree::Meta, "peer-epoch/site-b").unwrap()
}

/// Calls of the peer's old and new leaders racing each other: the epoch
/// stored never goes back, and a call admitted is never older than one
/// already stored (a read, compare and write without a condition let an
/// old epoch be written last).
#[tokio::test(flavor = "multi_thread")]
async fn racing_calls_never_store_an_older_epoch() {
    let site = FakeSite::start(&["h1"], PEER).await;
    let epochs = site.veem.peer_epochs.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (store, stop) = (site.veem.core.store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seen = 0;
            while !stop.load(Ordering::Relaxed) {
                let now: i64 = store.get(Tree::Meta, "peer-epoch/site-b").unwrap().unwrap_or(0);
                assert!(now >= seen, "the stored epoch went back from {seen} to {now}");
                seen = now;
            }
        })
    };
    let start = Arc::new(std::sync::Barrier::new(8));
    let callers: Vec<_> = (0..8)
        .map(|t| {
            let (epochs, start) = (epochs.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for e in (1..=10000).map(|i| i * 8 - t) {
                    let _ = epochs.admit("site-b", Some(e));
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    assert_eq!(stored(&site), Some(80000));
}

#[tokio::test]
async fn a_call_without_an_epoch_is_refused_once_the_peer_has_shown_one() {
    let site = FakeSite::start(&["h1"], PEER).await;
    let epochs = &site.veem.peer_epochs;
    assert_eq!(epochs.admit("site-b", None).unwrap(), 0, "a peer on the embedded store has none");
    assert_eq!(epochs.admit("site-b", Some(3)).unwrap(), 3);
    assert_eq!(
        fenced(epochs.admit("site-b", None)),
        Some(Fenced::Unstamped {
            site: "site-b".into(),
            newest: 3
        })
    );
    assert_eq!(
        fenced(epochs.admit("site-b", Some(2))),
        Some(Fenced::Older {
            site: "site-b".into(),
            epoch: 2,
            newest: 3
        })
    );
    assert_eq!(epochs.admit("site-b", Some(3)).unwrap(), 3, "the newest passes");
}

#[tokio::test]
async fn a_grace_takes_calls_without_an_epoch_for_a_while_after_the_first() {
    let with_grace = PEER.replace("[peers.agreement]", "epochless_grace = \"10m\"\n[peers.agreement]");
    let site = FakeSite::start(&["h1"], &with_grace).await;
    let epochs = &site.veem.peer_epochs;
    epochs.admit("site-b", Some(1)).unwrap();
    site.clock.advance_ms(9 * 60_000);
    assert_eq!(epochs.admit("site-b", None).unwrap(), 0, "within the grace");
    site.clock.advance_ms(2 * 60_000);
    assert!(fenced(epochs.admit("site-b", None)).is_some(), "after it");
}

#[tokio::test]
async fn a_stream_admitted_under_an_epoch_ends_when_a_newer_one_is_admitted() {
    let site = FakeSite::start(&["h1"], PEER).await;
    let epochs = &site.veem.peer_epochs;
    epochs.admit("site-b", Some(4)).unwrap();
    let ends = tokio::spawn(epochs.superseded("site-b", 4));
    epochs.admit("site-b", Some(4)).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!ends.is_finished(), "the same epoch again");
    epochs.admit("site-b", Some(5)).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), ends)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_forgotten_epoch_lets_a_rebuilt_peers_leader_in() {
    let site = FakeSite::start(&["h1"], PEER).await;
    let epochs = &site.veem.peer_epochs;
    epochs.admit("site-b", Some(900)).unwrap();
    assert!(fenced(epochs.admit("site-b", Some(2))).is_some(), "a rebuilt cluster's epoch");
    assert_eq!(forget(&site.veem.core.store, "site-b").unwrap(), Some(900));
    assert_eq!(epochs.admit("site-b", Some(2)).unwrap(), 2);
    assert_eq!(stored(&site), Some(2));
    assert_eq!(forget(&site.veem.core.store, "site-c").unwrap(), None);
}
