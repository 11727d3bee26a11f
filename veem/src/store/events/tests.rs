//! The event log's pages and retention, on the memory engine (the engine
//! contract holds sled and etcd to the same scans).

use std::sync::Arc;

use super::*;
use crate::store::MemoryEngine;

fn store() -> Store {
    Store::on(Arc::new(MemoryEngine::default()), "memory").unwrap()
}

fn append(s: &Store, detail: &str, at_ms: i64) -> u64 {
    let e = EventRec {
        vee_id: "v".into(),
        service_id: "s".into(),
        kind: "test".into(),
        detail: detail.into(),
        at_ms,
        seq: 0,
    };
    s.append_event(&e).unwrap()
}

/// Paging from the `seq` of the last event seen returns the events that
/// follow, each once, also when events are appended between pages.
#[test]
fn paging_from_a_sequence_returns_the_following_events_without_gaps_or_repeats() {
    let s = store();
    let mut appended: Vec<u64> = (0..25).map(|i| append(&s, &format!("e{i}"), i)).collect();
    let (mut seen, mut after, mut pages) = (Vec::new(), 0u64, 0);
    loop {
        let (page, more) = s.events_after(after, 10).unwrap();
        assert!(page.len() <= 10);
        seen.extend(page.iter().map(|e| e.seq));
        after = page.last().map_or(after, |e| e.seq);
        pages += 1;
        if pages == 1 {
            // Appended meanwhile: read on a later page.
            appended.extend((25..28).map(|i| append(&s, &format!("e{i}"), i)));
        }
        if !more {
            break;
        }
    }
    assert_eq!(seen, appended, "every event once, in order");
    assert_eq!(pages, 3);
    let (rest, more) = s.events_after(appended[19], 100).unwrap();
    let details: Vec<&str> = rest.iter().map(|e| e.detail.as_str()).collect();
    assert_eq!((details[0], rest.len(), more), ("e20", 8, false), "from a seq: the events after it");
    assert_eq!(s.events_after(u64::MAX, 10).unwrap().0.len(), 0);
    let latest: Vec<u64> = s.latest_events(3).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(latest, [appended[27], appended[26], appended[25]], "the newest, newest first");
}

/// Retention by count and by age: a pruning leaves at most `keep`
/// events, none older than the cut, the newest ones; across batches.
#[test]
fn pruning_keeps_at_most_keep_events_and_none_older_than_the_cut() {
    let s = store();
    let n = PRUNE_BATCH as i64 * 2 + 500;
    for i in 0..n {
        append(&s, &format!("e{i}"), 1_000 + i);
    }
    assert_eq!(s.prune_events(1_000, 0).unwrap(), n as u64 - 1_000, "by count");
    assert_eq!(s.event_count().unwrap(), 1_000);
    let all = s.events().unwrap();
    assert_eq!(all[0].detail, format!("e{}", n - 1_000), "the newest kept");
    // By age: none before at_ms 1_000 + n - 100.
    let cut = 1_000 + n - 100;
    assert_eq!(s.prune_events(1_000, cut).unwrap(), 900);
    let all = s.events().unwrap();
    assert!(all.len() == 100 && all.iter().all(|e| e.at_ms >= cut), "{}", all.len());
    assert_eq!(s.prune_events(1_000, cut).unwrap(), 0, "nothing more");
}

/// The retention round counts the log once, then keeps the count by its
/// own appends and removals: a round at a full log of 100,000 events does
/// not scan them all again, and still keeps exactly `keep`.
#[test]
fn retention_counts_the_log_once_and_keeps_exactly_keep_after() {
    let engine = Arc::new(crate::sim::ObservedEngine::default());
    let s = Store::on(engine.clone(), "counting").unwrap();
    for i in 0..1_500 {
        append(&s, &format!("e{i}"), 1_000 + i);
    }
    assert_eq!(s.prune_events(1_000, 0).unwrap(), 500);
    for round in 0..3 {
        for i in 0..120 {
            append(&s, &format!("r{round}-{i}"), 5_000 + i);
        }
        assert_eq!(s.prune_events(1_000, 0).unwrap(), 120, "round {round}");
        assert_eq!(s.events().unwrap().len(), 1_000);
    }
    assert_eq!(s.prune_events(1_000, 0).unwrap(), 0);
    assert_eq!(engine.counts(), 1, "the log counted once");
    let all = s.events().unwrap();
    assert_eq!(
        (all[0].detail.as_str(), all[999].detail.as_str()),
        ("e860", "r2-119"),
        "the newest kept"
    );
}
