//! The listener's limits against real sockets on loopback (plaintext; the
//! VMI's e2e tests cover TLS with real clients).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// A listener on loopback serving `/` (the client's address) and `/slow`
/// (answers after 1.5 s), with `limits`; stops when the token is
/// cancelled.
async fn server(limits: ListenerLimits) -> (SocketAddr, CancellationToken) {
    let app = axum::Router::new()
        .route(
            "/",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
        )
        .route(
            "/endless",
            get(|| async {
                let chunk = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
                Body::from_stream(futures::StreamExt::map(futures::stream::repeat(chunk), Ok::<_, std::io::Error>))
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                "done"
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move { serve(listener, None, limits, app, s.cancelled_owned(), Duration::from_secs(5)).await });
    (addr, stop)
}

fn quick() -> ListenerLimits {
    ListenerLimits {
        head_timeout: Duration::from_millis(800),
        idle_timeout: Duration::from_millis(800),
        send_timeout: Duration::from_secs(1),
        ..ListenerLimits::default()
    }
}

/// A request from `from` (a loopback address) on a new connection: the
/// status line, or the error.
async fn get_from(addr: SocketAddr, from: [u8; 4], path: &str) -> std::io::Result<String> {
    let mut s = connect_from(addr, from).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

async fn connect_from(addr: SocketAddr, from: [u8; 4]) -> std::io::Result<TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind(SocketAddr::from((from, 0)))?;
    sock.connect(addr).await
}

/// Whether the server closed `s` (EOF or reset) within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline.into(), s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn a_slow_head_is_cut_within_the_head_timeout_while_others_are_served() {
    let (addr, _stop) = server(quick()).await;
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let start = Instant::now();
    let trickle = async {
        for b in b"GET / HTTP/1.1\r\nhost: x\r\n" {
            if slow.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let answered = get_from(addr, [127, 0, 0, 1], "/").await.unwrap();
            assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
        }
    };
    trickle.await;
    assert!(closed_within(&mut slow, Duration::from_secs(2)).await, "still open");
    assert!(start.elapsed() < Duration::from_millis(3500), "{:?}", start.elapsed());
}

#[tokio::test]
async fn an_idle_connection_is_closed_but_not_one_waiting_for_its_answer() {
    let (addr, _stop) = server(quick()).await;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    let mut waiting = TcpStream::connect(addr).await.unwrap();
    waiting.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    assert!(closed_within(&mut idle, Duration::from_secs(2)).await, "an idle connection stays");
    let mut out = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(3), waiting.read(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out[..n]);
    assert!(text.starts_with("HTTP/1.1 200") && text.ends_with("done"), "{text}");
}

#[tokio::test]
async fn a_head_over_the_size_limit_is_refused() {
    let (addr, _stop) = server(quick()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let big = format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "a".repeat(64 * 1024));
    let _ = s.write_all(big.as_bytes()).await;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    assert!(out.is_empty() || out.starts_with("HTTP/1.1 431"), "{out}");
}

#[tokio::test]
async fn one_address_cannot_take_every_slot_nor_keep_a_newcomer_out() {
    let limits = ListenerLimits {
        max_connections: 8,
        max_connections_per_peer: 4,
        ..ListenerLimits::default()
    };
    let (addr, _stop) = server(limits).await;
    // Ten idle connections from one address: it keeps four at most.
    let mut hog = Vec::new();
    for _ in 0..10 {
        hog.push(connect_from(addr, [127, 0, 0, 2]).await.unwrap());
    }
    // A client of the same address is still served (an idle one of its
    // gives way), and so is one of another.
    for from in [[127, 0, 0, 2], [127, 0, 0, 3]] {
        let answer = tokio::time::timeout(Duration::from_secs(2), get_from(addr, from, "/"))
            .await
            .unwrap()
            .unwrap();
        assert!(
            answer.ends_with(&format!("{}.{}.{}.{}", from[0], from[1], from[2], from[3])),
            "{answer}"
        );
    }
    let mut open = 0;
    for s in &mut hog {
        if !closed_within(s, Duration::from_millis(200)).await {
            open += 1;
        }
    }
    assert!(open <= 4, "{open} of one address's connections held");
}

#[test]
fn limits_read_from_toml_with_units_and_are_checked() {
    let l: ListenerLimits = toml::from_str("idle_timeout = \"2m\"\nmax_header_size = \"32 KiB\"").unwrap();
    assert_eq!((l.idle_timeout, l.max_header_size), (Duration::from_secs(120), 32 * 1024));
    assert_eq!(l.max_connections, 1024);
    l.check("listener").unwrap();
    let zero = ListenerLimits {
        max_connections_per_peer: 0,
        ..l
    };
    assert_eq!(zero.check("listener").unwrap_err().field, "listener.max_connections_per_peer");
    let e = toml::from_str::<ListenerLimits>("max_conections = 3").unwrap_err().to_string();
    assert!(e.contains("unknown field"), "{e}");
}

#[test]
fn the_connection_limit_stays_below_the_descriptor_limit() {
    let nofile = descriptor_limit().unwrap();
    let l = ListenerLimits {
        max_connections: usize::MAX,
        ..ListenerLimits::default()
    }
    .effective();
    assert!(
        l.max_connections < nofile && l.max_connections >= nofile / 2,
        "{} of {nofile}",
        l.max_connections
    );
}

#[tokio::test]
async fn a_client_that_does_not_read_its_answer_is_cut_after_the_send_timeout() {
    let (addr, _stop) = server(quick()).await;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    // An answer that never ends (as a stream of events), never read: the
    // request stays in flight, so only the blocked writes tell.
    s.write_all(b"GET /endless HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "still open after 14 s ({} bytes read)", got.len());
}
