//! The event log as the VMI reads it: a history read of a large log reads
//! a page, never the whole tree.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use tonic::Request;

use interfaces::vmi::vmi_service_server::VmiService as _;
use interfaces::vmi::{ListEventsRequest, WatchEventsRequest};

use super::*;
use crate::sim::FakeSite;
use crate::store::{Engine, MemoryEngine, Store, Tree, Visit};

const TOKENS: &str = "[[tokens]]\ntoken = \"operator-token\"\nrole = \"operator\"\n";

fn as_<T>(token: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

/// A memory engine that counts the records its scans hand out (each one a
/// deserialisation for the store above it).
#[derive(Default)]
struct Counting {
    inner: MemoryEngine,
    read: AtomicUsize,
}

impl Engine for Counting {
    fn get(&self, t: Tree, key: &[u8]) -> crate::store::Result<Option<Vec<u8>>> {
        self.inner.get(t, key)
    }
    fn scan(&self, t: Tree, f: Visit) -> crate::store::Result<()> {
        self.inner.scan(t, &mut |k, v| {
            self.read.fetch_add(1, Ordering::SeqCst);
            f(k, v)
        })
    }
    fn revision(&self) -> crate::store::Result<crate::store::Revision> {
        self.inner.revision()
    }
    fn commit(
        &self,
        writes: Vec<(Tree, Vec<u8>, Option<Vec<u8>>)>,
        unchanged: &[crate::store::Unchanged],
    ) -> crate::store::Result<crate::store::Revision> {
        self.inner.commit(writes, unchanged)
    }
    fn insert_new(&self, t: Tree, key: &[u8], value: Vec<u8>) -> crate::store::Result<bool> {
        self.inner.insert_new(t, key, value)
    }
    fn next_id(&self) -> crate::store::Result<u64> {
        self.inner.next_id()
    }
    fn scan_from(&self, t: Tree, start: &[u8], limit: usize, f: Visit) -> crate::store::Result<()> {
        self.inner.scan_from(t, start, limit, &mut |k, v| {
            self.read.fetch_add(1, Ordering::SeqCst);
            f(k, v)
        })
    }
    fn scan_back(&self, t: Tree, limit: usize, f: Visit) -> crate::store::Result<()> {
        self.inner.scan_back(t, limit, &mut |k, v| {
            self.read.fetch_add(1, Ordering::SeqCst);
            f(k, v)
        })
    }
    fn count(&self, t: Tree) -> crate::store::Result<u64> {
        self.inner.count(t)
    }
    fn remove_before(&self, t: Tree, end: &[u8]) -> crate::store::Result<crate::store::Revision> {
        self.inner.remove_before(t, end)
    }
}

/// A site over a counting engine, with `n` events in its log.
fn site_with_events(n: usize) -> (FakeSite, Arc<Counting>) {
    let engine = Arc::new(Counting::default());
    let store = Store::on(engine.clone(), "counting").unwrap();
    let site = FakeSite::start_on("site-a", &["h1"], TOKENS, store);
    for i in 0..n {
        site.veem.core.event("v", "s", "test", format!("event {i}"));
    }
    engine.read.store(0, Ordering::SeqCst);
    (site, engine)
}

#[tokio::test]
async fn a_history_read_of_a_large_log_reads_a_page_not_the_log() {
    let (site, engine) = site_with_events(10_000);
    let vmi = VmiService::handler(site.veem.clone());
    let watch = WatchEventsRequest {
        service_id: String::new(),
        history_only: true,
    };
    let events: Vec<_> = vmi
        .watch_events(as_("operator-token", watch))
        .await
        .unwrap()
        .into_inner()
        .collect()
        .await;
    let read = engine.read.load(Ordering::SeqCst);
    assert!(read <= 2_000, "{read} stored events read for one history read");
    assert!(!events.is_empty() && events.len() <= 1_000, "{} events", events.len());
    let last = events.last().unwrap().as_ref().unwrap();
    assert_eq!(last.detail, "event 9999", "the newest page, oldest first");
}

/// ListEvents pages through a log of more than a page: each page reads at
/// most what it returns and one more, the pages follow one another
/// without gap or repeat, and `after_seq` (an Event's `seq`) goes on from
/// there.
#[tokio::test]
async fn list_events_pages_from_a_token_or_a_seq_without_gaps_or_repeats() {
    let (site, engine) = site_with_events(2_500);
    let vmi = VmiService::handler(site.veem.clone());
    let (mut seqs, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        engine.read.store(0, Ordering::SeqCst);
        let req = ListEventsRequest {
            page_size: 1_000,
            page_token: token.clone(),
            ..Default::default()
        };
        let page = vmi.list_events(as_("operator-token", req)).await.unwrap().into_inner();
        assert!(engine.read.load(Ordering::SeqCst) <= 1_001, "a page reads a page");
        seqs.extend(page.events.iter().map(|e| e.seq));
        pages += 1;
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!((pages, seqs.len()), (3, 2_500));
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order, each once");
    let after = ListEventsRequest {
        after_seq: seqs[2_489],
        ..Default::default()
    };
    let rest = vmi.list_events(as_("operator-token", after)).await.unwrap().into_inner();
    let got: Vec<u64> = rest.events.iter().map(|e| e.seq).collect();
    assert_eq!((got.as_slice(), rest.next_page_token.as_str()), (&seqs[2_490..], ""));
    let latest = ListEventsRequest {
        page_size: 3,
        latest: true,
        ..Default::default()
    };
    let newest = vmi.list_events(as_("operator-token", latest)).await.unwrap().into_inner();
    let details: Vec<&str> = newest.events.iter().map(|e| e.detail.as_str()).collect();
    assert_eq!(details, ["event 2497", "event 2498", "event 2499"], "the newest, oldest first");
    // Malformed requests name the field.
    for (req, field) in [
        (
            ListEventsRequest {
                page_token: "zz".into(),
                ..Default::default()
            },
            "page_token",
        ),
        (
            ListEventsRequest {
                page_size: -1,
                ..Default::default()
            },
            "page_size",
        ),
        (
            ListEventsRequest {
                page_token: token.clone(),
                after_seq: 3,
                ..Default::default()
            },
            "after_seq",
        ),
        (
            ListEventsRequest {
                latest: true,
                after_seq: 3,
                ..Default::default()
            },
            "latest",
        ),
    ] {
        let e = vmi.list_events(as_("operator-token", req)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains(&format!("field `{field}`")), "{e:?}");
    }
}

/// A provider pages through a log it sees little of: each call reads a
/// bounded number of stored events, and the pages still hold exactly its
/// own events.
#[tokio::test]
async fn a_provider_pages_through_its_own_events_reading_a_bound_each_call() {
    let tokens = format!("{TOKENS}[[tokens]]\ntoken = \"provider-token\"\nrole = \"provider\"\nname = \"acme\"\n");
    let engine = Arc::new(Counting::default());
    let site = FakeSite::start_on("site-a", &["h1"], &tokens, Store::on(engine.clone(), "counting").unwrap());
    let vee = site.running_service(crate::sim::STANDARD).remove(0);
    let svc = site.veem.core.vee(&vee).unwrap().service_id;
    for i in 0..5_000 {
        let (v, s) = if i % 1_000 == 0 {
            (vee.as_str(), svc.as_str())
        } else {
            ("other", "other-service")
        };
        site.veem.core.event(v, s, "test", format!("event {i}"));
    }
    let vmi = VmiService::handler(site.veem.clone());
    let (mut mine, mut token, mut calls) = (Vec::new(), String::new(), 0);
    loop {
        engine.read.store(0, Ordering::SeqCst);
        let req = ListEventsRequest {
            page_token: token.clone(),
            ..Default::default()
        };
        let page = vmi.list_events(as_("provider-token", req)).await.unwrap().into_inner();
        assert!(engine.read.load(Ordering::SeqCst) <= READ_AT_MOST + 1);
        mine.extend(page.events.into_iter().filter(|e| e.kind == "test").map(|e| e.detail));
        calls += 1;
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(mine, ["event 0", "event 1000", "event 2000", "event 3000", "event 4000"]);
    assert!(calls >= 3, "{calls} calls");
}
