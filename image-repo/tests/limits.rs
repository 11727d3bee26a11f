//! The repository under slow, idle, too many and parallel clients (issue
//! 13, R7), and over TLS: each limit is a real server process and real
//! sockets.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{content, Options, Repo, TOKEN};
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::BlobId;

fn with(extra: &str) -> Repo {
    Repo::start_with(Options {
        extra_config: extra.into(),
        ..Default::default()
    })
}

/// Reads what the server sends until it closes or `timeout` passes.
fn read_all(tcp: &mut TcpStream, timeout: Duration) -> (String, bool) {
    tcp.set_read_timeout(Some(timeout)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into(), true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into(), false),
        }
    }
}

fn health(repo: &Repo) -> String {
    let mut tcp = TcpStream::connect(&repo.addr).unwrap();
    write!(tcp, "GET /v1/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").unwrap();
    read_all(&mut tcp, Duration::from_secs(5)).0
}

#[test]
fn one_connection_over_the_limit_is_answered_503_and_the_rest_are_served() {
    let repo = with("max_connections = 4\n");
    let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(&repo.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let busy = health(&repo);
    assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
    assert!(busy.contains("too many connections"), "{busy}");
    // A whole answer: its body is as long as it says.
    let (head, body) = busy.split_once("\r\n\r\n").unwrap();
    assert!(head.contains(&format!("content-length: {}", body.len())), "{busy}");
    drop(idle);
    std::thread::sleep(Duration::from_millis(300));
    let ok = health(&repo);
    assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok"), "{ok}");
}

#[test]
fn a_half_sent_request_head_is_cut_off_after_the_header_timeout() {
    let repo = with("header_timeout_s = 1\n");
    let mut tcp = TcpStream::connect(&repo.addr).unwrap();
    write!(tcp, "GET /v1/health HTTP/1.1\r\nhost: x\r\n").unwrap();
    let t = Instant::now();
    let (_, closed) = read_all(&mut tcp, Duration::from_secs(10));
    assert!(closed, "the server kept a half-sent request open for 10 s");
    assert!(t.elapsed() < Duration::from_secs(5), "closed only after {:?}", t.elapsed());
}

#[test]
fn a_trickling_upload_is_cut_off_and_leaves_no_file() {
    let repo = with("body_idle_timeout_s = 1\nmin_upload_bytes_per_s = 100000\n");
    let data = content(7, 100_000);
    let id = BlobId::of(&data);
    let mut tcp = TcpStream::connect(&repo.addr).unwrap();
    write!(
        tcp,
        "PUT /v1/blobs/{id}?kind=disk&name=slow HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: {}\r\n\r\n",
        data.len()
    )
    .unwrap();
    // 100 bytes every 100 ms: 1 kB/s, far below the least rate.
    let t = Instant::now();
    let mut answer = String::new();
    for chunk in data.chunks(100) {
        if tcp.write_all(chunk).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        tcp.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 4096];
        if let Ok(n) = tcp.read(&mut buf) {
            answer = String::from_utf8_lossy(&buf[..n]).into();
            break;
        }
        tcp.set_nonblocking(false).unwrap();
        assert!(t.elapsed() < Duration::from_secs(10), "still receiving after 10 s");
    }
    assert!(answer.starts_with("HTTP/1.1 408") || answer.is_empty(), "{answer}");
    assert!(t.elapsed() < Duration::from_secs(5), "cut off only after {:?}", t.elapsed());
    assert!(repo.wait_tmp_empty().is_empty(), "a temporary file was left");
    assert!(repo.blob_files().is_empty());
}

#[tokio::test]
async fn parallel_uploads_never_exceed_the_quota_together() {
    let repo = Repo::start_with(Options {
        max_bytes: Some(1_000_000),
        ..Default::default()
    });
    let client = repo.client();
    let mut tasks = Vec::new();
    for i in 0..10u64 {
        let client = client.clone();
        let file = common::write_file(repo.scratch(), &format!("part-{i}"), &content(100 + i, 400_000));
        tasks.push(tokio::spawn(async move {
            let meta = PushMeta::new(format!("part-{i}"), BlobKind::Disk);
            client.push_file(&file, &meta).await
        }));
    }
    let mut stored = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => stored += 1,
            Err(e) => assert!(e.to_string().contains("quota") || e.to_string().contains("room"), "{e}"),
        }
    }
    let total: u64 = client.list().await.unwrap().iter().map(|m| m.size).sum();
    assert!(
        total <= 1_000_000,
        "{stored} uploads stored, {total} bytes over a quota of 1,000,000"
    );
    assert!(stored >= 1, "none stored");
    assert!(repo.wait_tmp_empty().is_empty());
}

#[tokio::test]
async fn over_tls_only_clients_that_trust_its_ca_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = common::tls_files(dir.path(), "127.0.0.1");
    let repo = with(&format!(
        "[tls]\ncert = {:?}\nkey = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    ));
    assert!(repo.url.starts_with("https://"), "{}", repo.url);
    let client = RepoClient::with_ca(&repo.url, Some(TOKEN.into()), Some(&ca)).unwrap();
    let data = content(9, 10_000);
    let file = common::write_file(dir.path(), "tls.img", &data);
    let id = client.push_file(&file, &PushMeta::new("tls", BlobKind::Disk)).await.unwrap();
    let back = dir.path().join("back.img");
    client.pull(&id, &back, None).await.unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), data);
    // Plaintext at the TLS port: no HTTP answer.
    let plain = health(&repo);
    assert!(!plain.contains("200"), "{plain}");
    // A client that trusts another CA: refused by the handshake.
    let (other_ca, _, _) = common::tls_files(&dir.path().join("other"), "127.0.0.1");
    let stranger = RepoClient::with_ca(&repo.url, Some(TOKEN.into()), Some(&other_ca)).unwrap();
    assert!(stranger.list().await.is_err());
    // https without a CA is refused by the client, naming why.
    let err = RepoClient::new(&repo.url, None).unwrap_err().to_string();
    assert!(err.contains("give the CA"), "{err}");
}
