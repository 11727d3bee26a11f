//! The VMI's listener under abuse (issue 36), against a real `veem serve`
//! over TLS with real clients: slow request heads are cut within the head
//! timeout while a legitimate client keeps being answered at once, the
//! memory held by unfinished heads is returned, and more idle connections
//! than the process has descriptors, from many addresses or from one, do
//! not keep a legitimate client out.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::abusive::{self, loopback};
use e2e::daemons::ImageRepo;
use e2e::lab;
use e2e::site::{self, Veem, OPERATOR};
use tokio::io::AsyncWriteExt;

fn addr_of(veem: &Veem) -> SocketAddr {
    veem.endpoint.trim_start_matches("https://").parse().unwrap()
}

/// A REST client trusting site A's VMI CA, as Python's requests or curl
/// would call.
fn rest_client() -> reqwest::Client {
    let ca = std::fs::read(vee_testkit::pki::site("site-a").vmi_ca()).unwrap();
    interfaces::tls::http_client()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca).unwrap()])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// `GET /v1/services` as the operator: how long it took; panics unless 200.
async fn list(client: &reqwest::Client, veem: &Veem) -> Duration {
    let start = Instant::now();
    let r = client
        .get(format!("{}/v1/services", veem.endpoint))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_slow_heads_are_cut_within_the_head_timeout_while_a_client_is_answered_at_once() {
    // Timing: no guest shares the CPU meanwhile.
    let _lab = lab::lock();
    let dir = lab::test_dir("vmi-slow-heads");
    let repo = ImageRepo::start(&dir).await;
    let port = site::port();
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[], &[], "[listener]\nhead_timeout = \"2s\"\n");
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let (pid, to) = (veem.daemon.pid().unwrap(), addr_of(&veem));
    let tls = abusive::connector(&vee_testkit::pki::site("site-a").vmi_ca(), "http/1.1");
    let client = rest_client();
    for _ in 0..20 {
        list(&client, &veem).await;
    }
    let baseline = abusive::rss_kib(pid);

    // Ten clients trickle a head, one byte every 500 ms, after TLS.
    let head = b"GET /v1/services HTTP/1.1\r\nhost: site-a\r\nauthorization: Bearer x\r\n\r\n";
    let slow: Vec<_> = (0..10u8)
        .map(|i| {
            let tls = tls.clone();
            tokio::spawn(async move {
                let s = abusive::tls_from(&tls, loopback(20 + i), to, "site-a").await.unwrap();
                let start = Instant::now();
                let (mut r, mut w) = tokio::io::split(s);
                tokio::select! {
                    _ = abusive::trickle(&mut w, head, Duration::from_millis(500)) => None,
                    closed = abusive::closed_within(&mut r, Duration::from_secs(30)) => closed.then(|| start.elapsed()),
                }
            })
        })
        .collect();
    // Meanwhile the legitimate client, every 100 ms.
    let mut took = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        took.push(list(&client, &veem).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for s in slow {
        let cut = s.await.unwrap().expect("a slow head was never cut");
        assert!(cut < Duration::from_secs(3), "cut after {cut:?}, the head timeout is 2 s");
    }
    took.sort();
    let median = took[took.len() / 2];
    println!(
        "legitimate calls during the slow heads: median {median:?}, max {:?}, {} calls",
        took[took.len() - 1],
        took.len()
    );
    assert!(median < Duration::from_millis(100), "{took:?}");
    assert!(took[took.len() * 9 / 10] < Duration::from_millis(100), "{took:?}");

    // Two hundred connections each holding 15 KiB of an unfinished head
    // (just under the 16 KiB limit), then gone.
    let mut held = Vec::new();
    for i in 0..200u32 {
        let mut s = abusive::tls_from(&tls, loopback(40 + (i % 4) as u8), to, "site-a").await.unwrap();
        let mut part = b"GET /v1/services HTTP/1.1\r\nhost: site-a\r\n".to_vec();
        while part.len() < 15 * 1024 {
            part.extend_from_slice(b"x-pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        s.write_all(&part).await.unwrap();
        s.flush().await.unwrap();
        held.push(s);
    }
    let peak = abusive::rss_kib(pid);
    // A head of 64 KiB is refused at once.
    let mut big = abusive::tls_from(&tls, loopback(45), to, "site-a").await.unwrap();
    let _ = big.write_all(&[b'a'; 64 * 1024]).await;
    assert!(
        abusive::closed_within(&mut big, Duration::from_secs(2)).await,
        "a 64 KiB head kept open"
    );
    for s in &mut held {
        assert!(
            abusive::closed_within(s, Duration::from_secs(4)).await,
            "an unfinished head outlived the head timeout"
        );
    }
    drop(held);
    // The listener returns freed memory every 2 s once connections ended.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for _ in 0..5 {
        list(&client, &veem).await;
    }
    let after = abusive::rss_kib(pid);
    println!("VEEM resident memory: {baseline} KiB before, {peak} KiB with 200 unfinished heads, {after} KiB after");
    assert!(after < baseline + 4 * 1024, "{baseline} KiB before, {after} KiB after");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_idle_connections_past_the_descriptor_limit_do_not_stop_a_legitimate_client() {
    let dir = lab::test_dir("vmi-idle");
    let repo = ImageRepo::start(&dir).await;
    let port = site::port();
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[], &[], "");
    // systemd's default soft limit; ulimit -n 1024 sets both.
    let mut veem = Veem::start_wrapped(&dir, "site-a", port, cfg, &["prlimit", "--nofile=1024:1024", "--"]).await;
    let (pid, to) = (veem.daemon.pid().unwrap(), addr_of(&veem));
    assert!(
        interfaces::connections::descriptor_limit().unwrap() > 4096,
        "this test opens 1,400 connections itself"
    );
    let tls = abusive::connector(&vee_testkit::pki::site("site-a").vmi_ca(), "h2");

    // 1,100 idle TLS connections, 100 from each of 11 addresses.
    let start = Instant::now();
    let mut idle = Vec::new();
    let opened = futures::future::join_all((0..1100u32).map(|i| {
        let tls = tls.clone();
        async move { abusive::tls_from(&tls, loopback(100 + (i / 100) as u8), to, "site-a").await }
    }));
    for c in opened.await.into_iter().flatten() {
        idle.push(c);
    }
    println!(
        "{} of 1,100 idle connections finished their handshakes in {:?}",
        idle.len(),
        start.elapsed()
    );
    // A legitimate client, by gRPC and by REST, is served.
    let started = Instant::now();
    let mut op = veem.client(OPERATOR).await;
    op.list_services(interfaces::vmi::ListServicesRequest::default()).await.unwrap();
    list(&rest_client(), &veem).await;
    println!("a legitimate client served in {:?} among them", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let mut open = 0;
    for c in &mut idle {
        if !abusive::closed_within(c, Duration::from_millis(5)).await {
            open += 1;
        }
    }
    let files = abusive::open_files(pid);
    println!("{open} idle connections still open; the VEEM has {files} files open");
    assert!(files < 1000, "{files} open files at a limit of 1,024");
    assert!(open <= 768, "{open} connections held: more than the limit below 1,024 descriptors");

    // 300 from one address: it holds 128 at most, and a client of that
    // same address is still served.
    drop(idle);
    let mut one = Vec::new();
    for _ in 0..300 {
        if let Ok(c) = abusive::tls_from(&tls, loopback(99), to, "site-a").await {
            one.push(c);
        }
    }
    let mut open = 0;
    for c in &mut one {
        if !abusive::closed_within(c, Duration::from_millis(5)).await {
            open += 1;
        }
    }
    assert!(open <= 128, "{open} connections of one address held");
    let mut same = abusive::tls_from(&tls, loopback(99), to, "site-a").await.unwrap();
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    same.write_all(preface).await.unwrap();
    assert!(
        !abusive::closed_within(&mut same, Duration::from_millis(500)).await,
        "the newest connection was refused"
    );
    drop(one);
    let log = veem.daemon.log_text();
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(log.contains("max_connections lowered"), "{log}");
    veem.daemon.assert_alive();
    let _ = std::fs::remove_dir_all(&dir);
}
