//! Checkpoints in chunks between two sites' repositories (two real
//! servers, as tests/peers.rs): a replicated index sends only the chunks
//! the peer lacks, then the index, and the peer site reads them through
//! it; an index pulled through by digest brings its missing chunks, so a
//! restore at the other site finds every one.

mod common;

use common::chunks::{assemble, chunk, push_checkpoint, SITE_B_CONFIG, SITE_B_TOKEN};
use common::{Options, Repo, SITE_TOKEN};
use interfaces::BlobId;

/// Site A's repository with `b` as its peer `site-b` (site A's token
/// there).
fn site_a(b: &Repo) -> Repo {
    Repo::start_with(Options {
        extra_config: format!("[[peers]]\nname = \"site-b\"\nurl = {:?}\ntoken = {SITE_TOKEN:?}\n", b.url),
        ..Default::default()
    })
}

/// A free loopback address for a metrics listener.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// A counter's value in the scrape of `metrics`.
async fn counter(metrics: &str, name: &str) -> u64 {
    let text = reqwest::get(format!("http://{metrics}/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} not in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replicated_index_sends_only_the_chunks_the_peer_lacks_and_the_peer_site_reads_them() {
    let metrics = free_addr();
    let b = Repo::start_with(Options {
        extra_config: format!("{SITE_B_CONFIG}[metrics]\nlisten = \"{metrics}\"\n"),
        ..Default::default()
    });
    let a = site_a(&b);
    let site = a.client_with(Some(SITE_TOKEN));
    const CHUNK: usize = 64 * 1024;
    let c: Vec<Vec<u8>> = (0..11).map(|n| chunk(n, CHUNK)).collect();
    let first: Vec<&[u8]> = c[..10].iter().map(Vec::as_slice).collect();
    // The second checkpoint: the same memory but its fourth chunk.
    let mut second = first.clone();
    second[3] = &c[10];
    let (i1, _) = push_checkpoint(&site, &first).await;
    let (i2, sent) = push_checkpoint(&site, &second).await;
    assert_eq!(sent, 1);

    let received = counter(&metrics, "image_repo_received_bytes_total").await;
    assert_eq!(received, 0);
    site.replicate(&i1, "site-b").await.unwrap();
    let after_first = counter(&metrics, "image_repo_received_bytes_total").await;
    let index_bytes = b.client().head(&i1).await.unwrap().unwrap().size;
    assert_eq!(after_first, 10 * CHUNK as u64 + index_bytes);
    site.replicate(&i2, "site-b").await.unwrap();
    let second_sent = counter(&metrics, "image_repo_received_bytes_total").await - after_first;
    // One chunk and the index: not the 640 KiB of the checkpoint.
    let i2_bytes = b.client().head(&i2).await.unwrap().unwrap().size;
    eprintln!(
        "second index replicated: {second_sent} bytes received at the peer for a {} byte checkpoint ({i2_bytes} of index)",
        10 * CHUNK
    );
    assert_eq!(second_sent, CHUNK as u64 + i2_bytes);
    assert_eq!(
        counter(&metrics, "image_repo_deduplicated_bytes_total").await,
        9 * CHUNK as u64,
        "the peer's `missing` found nine chunks"
    );
    // Site B reads both checkpoints at its repository through the indexes.
    let site_b = b.client_with(Some(SITE_B_TOKEN));
    assemble(&site_b, b.scratch(), &i1, &first).await;
    assemble(&site_b, b.scratch(), &i2, &second).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_index_pulled_through_from_a_peer_brings_its_missing_chunks() {
    let mut b = Repo::start();
    let a = site_a(&b);
    let c: Vec<Vec<u8>> = (0..6).map(|n| chunk(n, 10_000 + n as usize)).collect();
    let parts: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
    // Site A already holds two of the chunks (an older checkpoint).
    let site = a.client_with(Some(SITE_TOKEN));
    let (older, _) = push_checkpoint(&site, &parts[..2]).await;
    // The checkpoint was taken while the VEE ran at site B's hosts.
    let (index, _) = push_checkpoint(&b.client_with(Some(SITE_TOKEN)), &parts).await;
    assert!(site.head(&index).await.unwrap().is_some(), "pulled through by digest");
    let mut expected: Vec<String> = c.iter().map(|x| BlobId::of(x)).chain([index.clone(), older]).map(|id| id.hex().to_string()).collect();
    expected.sort();
    assert_eq!(a.blob_files(), expected);
    // Only the four it lacked came from the peer.
    assert!(a.log().contains("pulled=4"), "{}", a.log());
    // The restore at site A finds every chunk there, with B gone.
    b.kill();
    assemble(&site, a.scratch(), &index, &parts).await;
}
