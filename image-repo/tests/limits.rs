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
fn idle_connections_give_their_slots_to_newcomers() {
    let repo = with("max_connections = 4\n");
    let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(&repo.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    // Four connections without a request hold every slot; a newcomer
    // takes one of theirs (it was answered 503 before issue 39).
    let ok = health(&repo);
    assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok"), "{ok}");
    drop(idle);
}

/// A connection from `source` (any 127.x address is this machine's).
async fn connect_from(source: &str, to: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(to.parse().unwrap()).await.unwrap()
}

/// Starts an upload of `len` bytes on `tcp` and sends only its first
/// bytes: a request that stays in flight.
async fn stall_upload(tcp: &mut tokio::net::TcpStream, len: usize) {
    use tokio::io::AsyncWriteExt;
    let id = BlobId::of(b"never finished");
    let head = format!(
        "PUT /v1/blobs/{id}?kind=disk&name=stalled HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: {len}\r\n\r\nabc"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_uploads_of_one_address_leave_slots_for_the_others() {
    let repo = with("max_connections = 8\nbody_idle_timeout = \"60s\"\n[listener]\nmax_connections_per_peer = 3\n");
    // An address stalls as many uploads as it may hold; its next
    // connections find no slot (all of its are busy).
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let mut tcp = connect_from("127.0.0.7", &repo.addr).await;
        stall_upload(&mut tcp, 1 << 20).await;
        stalled.push(tcp);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut more = connect_from("127.0.0.7", &repo.addr).await;
    stall_upload(&mut more, 1 << 20).await;
    let mut buf = [0u8; 64];
    let refused = tokio::time::timeout(Duration::from_secs(5), tokio::io::AsyncReadExt::read(&mut more, &mut buf)).await;
    assert!(
        matches!(refused, Ok(Ok(0)) | Ok(Err(_))),
        "a fourth connection of the staller was served: {refused:?}"
    );
    // Another address is served at once (health, HEAD, GET).
    let client = interfaces::tls::http_client()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let t = Instant::now();
    let ok = client.get(format!("{}/v1/health", repo.url)).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let list = client
        .get(format!("{}/v1/blobs", repo.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200);
    assert!(t.elapsed() < Duration::from_secs(2), "served after {:?}", t.elapsed());
    drop(stalled);
}

/// What a stalled connection got: an answer's first line, a close
/// without one, or nothing yet after `wait`.
async fn answer_of(mut tcp: tokio::net::TcpStream, wait: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(wait, tokio::io::AsyncReadExt::read(&mut tcp, &mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&got).into()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// More uploads of one token than its address may hold connections (128),
/// each stalled after 1 KiB of its body: only the token's share
/// (`max_uploads_in_flight_per_caller`, 16 by default) is received; the
/// others are answered 429 with `Retry-After` at once and their connections
/// closed. Meanwhile health, HEAD and a download from that same address
/// are answered, and the server's threads do not grow with the stalled
/// uploads (before the limit each held a slot and a writer thread: the
/// 129th connection and every health check were dropped).
#[tokio::test(flavor = "multi_thread")]
async fn stalled_uploads_of_one_token_leave_health_head_and_get_answered() {
    use tokio::io::AsyncWriteExt;
    let repo = with("body_idle_timeout = \"60s\"\n");
    let data = content(11, 100_000);
    let file = common::write_file(repo.scratch(), "kept", &data);
    let id = repo
        .client()
        .push_file(&file, &PushMeta::new("kept", BlobKind::Disk))
        .await
        .unwrap();
    let threads_before = repo.threads();
    let mut stalled = Vec::new();
    for i in 0..140 {
        let mut tcp = connect_from("127.0.0.1", &repo.addr).await;
        let head = format!(
            "PUT /v1/blobs/{}?kind=disk&name=stalled-{i} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: {}\r\n\r\n",
            BlobId::of(format!("never finished {i}").as_bytes()),
            1 << 20
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        tcp.write_all(&[b'x'; 1024]).await.unwrap();
        stalled.push(tcp);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let threads_during = repo.threads();
    eprintln!("threads: {threads_before} before, {threads_during} with 140 stalled uploads");
    // The same address (and token) is served at once.
    let client = interfaces::tls::http_client()
        .local_address("127.0.0.1".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let t = Instant::now();
    for path in ["/healthz", "/v1/health"] {
        let r = client.get(format!("{}{path}", repo.url)).send().await;
        let r = r.unwrap_or_else(|e| panic!("GET {path} beside 140 stalled uploads: {e}"));
        assert_eq!(r.status(), 200);
    }
    let blob = format!("{}/v1/blobs/{id}", repo.url);
    let head = client
        .head(&blob)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("HEAD beside the stalled uploads");
    assert_eq!(head.status(), 200);
    let got = client
        .get(&blob)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET beside the stalled uploads");
    assert_eq!(got.bytes().await.unwrap().as_ref(), &data[..]);
    assert!(t.elapsed() < Duration::from_secs(3), "served after {:?}", t.elapsed());
    // What the stalled uploads got: 429 with Retry-After beyond the share.
    let answers = futures::future::join_all(stalled.into_iter().map(|tcp| answer_of(tcp, Duration::from_secs(2)))).await;
    let pending = answers.iter().filter(|a| a.is_none()).count();
    let refused: Vec<&String> = answers.iter().flatten().filter(|a| a.starts_with("HTTP/1.1 429")).collect();
    assert!(pending <= 16, "{pending} uploads of one token received at once");
    assert!(refused.len() >= 100, "{} of 140 answered 429: {answers:?}", refused.len());
    let one = refused[0].to_ascii_lowercase();
    assert!(
        one.contains("retry-after: 1") && one.contains("max_uploads_in_flight_per_caller"),
        "{one}"
    );
    assert!(
        threads_during < threads_before + 40,
        "{threads_before} threads grew to {threads_during} with 140 stalled uploads"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_authentications_are_slowed_down_per_address() {
    let repo = with("[listener]\nauth_failures_burst = 3\nauth_failure_interval = \"10s\"\n");
    let from = |ip: &str| {
        interfaces::tls::http_client()
            .local_address(ip.parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap()
    };
    let guesser = from("127.0.0.9");
    let url = format!("{}/v1/blobs", repo.url);
    for _ in 0..3 {
        let r = guesser.get(&url).bearer_auth("wrong-guess").send().await.unwrap();
        assert_eq!(r.status(), 401);
    }
    // Over its bucket: a wrong token gets 429 before any route, on both
    // APIs, with Retry-After.
    let r = guesser.get(&url).bearer_auth("another-guess").send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let r = guesser
        .get(format!("{}/v2/", repo.url))
        .basic_auth("x", Some("a-third-guess"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["errors"][0]["code"], "TOOMANYREQUESTS");
    // The right token is served all the same (the others behind the
    // guesser's NAT), on both APIs.
    let r = guesser.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = guesser
        .get(format!("{}/v2/", repo.url))
        .basic_auth("x", Some(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A wrong token's upload gets its 429 every time, not a reset
    // connection while its body is still on the way.
    let body = vec![7u8; 2 << 20];
    for i in 0..20 {
        let r = guesser.post(&url).bearer_auth("guess").body(body.clone()).send().await;
        let status = r.map(|r| r.status().as_u16()).map_err(|e| format!("{e:?}"));
        assert_eq!(status, Ok(429), "upload {i}");
    }
    // Health needs no credentials and is not held up; another address is
    // served as usual.
    assert_eq!(guesser.get(format!("{}/v1/health", repo.url)).send().await.unwrap().status(), 200);
    assert_eq!(from("127.0.0.10").get(&url).bearer_auth(TOKEN).send().await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_cuts_stalled_uploads_half_sent_heads_and_unread_downloads_within_its_grace() {
    use tokio::io::AsyncWriteExt;
    let mut repo = with("shutdown_grace = \"2s\"\nbody_idle_timeout = \"60s\"\n[listener]\nsend_timeout = \"60s\"\n");
    let big = content(3, 32 << 20);
    let file = common::write_file(repo.scratch(), "big", &big);
    let id = repo.client().push_file(&file, &PushMeta::new("big", BlobKind::Disk)).await.unwrap();
    let mut upload = connect_from("127.0.0.1", &repo.addr).await;
    stall_upload(&mut upload, 1 << 20).await;
    let mut head = connect_from("127.0.0.1", &repo.addr).await;
    head.write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    let mut download = connect_from("127.0.0.1", &repo.addr).await;
    let get = format!("GET /v1/blobs/{id} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n\r\n");
    download.write_all(get.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let took = repo.terminate();
    assert!(took < Duration::from_secs(5), "still running {took:?} after SIGTERM (grace 2 s)");
    drop((upload, head, download));
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

/// A request body that stalls is cut off after `body_idle_timeout`
/// wherever it goes, not only into an upload's file: an OCI manifest
/// (read whole before it is checked) stalled after its first byte held
/// its request, its connection's slot and an upload's share for good.
/// An upload stalled after 1 KiB is cut off too and leaves no file.
#[test]
fn stalled_bodies_are_cut_off_after_the_body_idle_timeout() {
    let repo = with("body_idle_timeout = \"1s\"\n");
    let mut upload = TcpStream::connect(&repo.addr).unwrap();
    let id = BlobId::of(b"stalled after 1 KiB");
    write!(
        upload,
        "PUT /v1/blobs/{id}?kind=disk&name=stalled HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: 1048576\r\n\r\n"
    )
    .unwrap();
    upload.write_all(&[b'x'; 1024]).unwrap();
    let (answer, closed) = read_all(&mut upload, Duration::from_secs(10));
    assert!(
        closed && answer.starts_with("HTTP/1.1 408") && answer.contains("no byte for 1 s"),
        "{answer}"
    );
    assert!(repo.wait_tmp_empty().is_empty(), "a cut upload left a file");
    let mut tcp = TcpStream::connect(&repo.addr).unwrap();
    write!(
        tcp,
        "PUT /v2/acme/web/manifests/v1 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/vnd.oci.image.manifest.v1+json\r\ncontent-length: 1000\r\n\r\n{{"
    )
    .unwrap();
    let t = Instant::now();
    let (answer, closed) = read_all(&mut tcp, Duration::from_secs(10));
    assert!(closed, "a stalled manifest body was held for 10 s: {answer:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "cut off only after {:?}", t.elapsed());
    assert!(
        answer.starts_with("HTTP/1.1 408") && answer.contains("no byte of its body for 1 s"),
        "{answer}"
    );
    // So is a query of missing chunks: a timeout, not bad input.
    let mut tcp = TcpStream::connect(&repo.addr).unwrap();
    write!(
        tcp,
        "POST /v1/blobs/missing HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"digests\": ["
    )
    .unwrap();
    let (answer, closed) = read_all(&mut tcp, Duration::from_secs(10));
    assert!(
        closed && answer.starts_with("HTTP/1.1 408") && answer.contains("no byte of its body for 1 s"),
        "{answer}"
    );
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

/// A tmpfs of `mib` MiB mounted on a fresh directory (root only, as the
/// lab's tests run), unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mib: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(ok.success(), "mounting a tmpfs needs root");
        Self { dir }
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn free(&self) -> u64 {
        let out = std::process::Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(self.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.dir.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_uploads_never_eat_into_the_disk_reserve() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fs = Tmpfs::mount(48);
    let data = fs.path().join("data");
    // Once to lay out the data directory, then with a reserve that leaves
    // 4 MiB for uploads.
    drop(Repo::start_with(Options {
        data: Some(data.clone()),
        ..Default::default()
    }));
    let reserve = fs.free() - (4 << 20);
    let repo = Repo::start_with(Options {
        data: Some(data),
        reserve_bytes: reserve,
        ..Default::default()
    });
    // Ten uploads of 1 MiB, each started (its length declared, half its
    // body sent) before any finishes: each alone would fit.
    let mut uploads = Vec::new();
    for i in 0..10u64 {
        let data = content(200 + i, 1 << 20);
        let mut tcp = connect_from("127.0.0.1", &repo.addr).await;
        let head = format!(
            "PUT /v1/blobs/{}?kind=disk&name=part-{i} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: {}\r\n\r\n",
            BlobId::of(&data),
            data.len()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let _ = tcp.write_all(&data[..1 << 19]).await;
        uploads.push((tcp, data));
    }
    let mut stored = 0;
    for (mut tcp, data) in uploads {
        let _ = tcp.write_all(&data[1 << 19..]).await;
        let mut answer = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut answer))
            .await
            .unwrap()
            .unwrap_or(0);
        let answer = String::from_utf8_lossy(&answer[..n]).to_string();
        if answer.starts_with("HTTP/1.1 201") {
            stored += 1;
        } else {
            assert!(answer.starts_with("HTTP/1.1 507") && answer.contains("promised"), "{answer}");
        }
    }
    assert!(repo.wait_tmp_empty().is_empty());
    assert!((1..=4).contains(&stored), "{stored} uploads of 1 MiB stored in 4 MiB of room");
    // The reserve is what the metadata database grows into: its writes
    // (under 1 MiB here) are not uploads.
    assert!(
        fs.free() + (1 << 20) >= reserve,
        "{} bytes free, the reserve is {reserve}",
        fs.free()
    );
}
