//! An HTTP listener that keeps its limits against slow, idle and too many
//! clients (issue 36): HTTP/1.1 and HTTP/2 (gRPC and REST on one port),
//! over TLS when given an acceptor, served with hyper directly so that
//! every limit below is the listener's own.
//!
//! - **Connections**: at most [`ListenerLimits::max_connections`], capped
//!   below the process's descriptor limit ([`ListenerLimits::effective`]),
//!   and at most [`ListenerLimits::max_connections_per_peer`] from one
//!   address; when full, an idle connection (no request in flight) of the
//!   address holding the most gives its slot to the newcomer (`slots`).
//! - **TLS handshake**: [`ListenerLimits::handshake_timeout`].
//! - **Request head**: HTTP/1.1 heads within
//!   [`ListenerLimits::head_timeout`] and [`ListenerLimits::max_header_size`]
//!   (hyper's `header_read_timeout` and read buffer); HTTP/2 header lists
//!   within the same size, at most
//!   [`ListenerLimits::max_streams_per_connection`] streams at once.
//! - **Idle**: a connection with no request in flight for
//!   [`ListenerLimits::idle_timeout`] is closed (HTTP/2: GOAWAY first); a
//!   response still streaming (a WatchEvents stream) counts as in flight.
//! - **Slow readers**: a write blocked for
//!   [`ListenerLimits::send_timeout`] (the client leaves its answers
//!   unread) closes the connection (`stall`).
//!
//! Each request carries, as extensions, the client's address
//! (`axum::extract::ConnectInfo<SocketAddr>`) and tonic's connection info
//! (`TcpConnectInfo`, or `TlsConnectInfo` with the client's certificates),
//! so that gRPC handlers read `peer_certs()` and `remote_addr()` as under
//! tonic's own server.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::body::Body;
use axum::extract::ConnectInfo;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::server::Connected;
use tower::ServiceExt;

use crate::config::{duration, size};

mod slots;
mod stall;
pub use slots::{Refused, Slots};

/// The limits of a daemon's HTTP listener (a `[listener]` table; every
/// field optional, durations with units, sizes in bytes or with units).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ListenerLimits {
    /// Connections at once (default 1024), capped below the process's
    /// limit of open files.
    pub max_connections: usize,
    /// Connections at once from one address (default 128; IPv6 by /64).
    pub max_connections_per_peer: usize,
    /// Time to finish the TLS handshake (default 10 s).
    #[serde(deserialize_with = "duration")]
    pub handshake_timeout: Duration,
    /// Time to send a whole HTTP/1.1 request head (default 10 s).
    #[serde(deserialize_with = "duration")]
    pub head_timeout: Duration,
    /// Time a connection may stay without a request in flight (default
    /// 60 s).
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// Bytes of a request head (HTTP/1.1) or header list (HTTP/2) at most
    /// (default 16 KiB; at least 8 KiB); larger: 431.
    #[serde(deserialize_with = "size")]
    #[schemars(with = "crate::config::Size")]
    pub max_header_size: u64,
    /// HTTP/2 streams (calls) at once on one connection (default 100).
    pub max_streams_per_connection: u32,
    /// Time a write to a client may stay blocked (it does not read its
    /// answers) before the connection is closed (default 60 s).
    #[serde(deserialize_with = "duration")]
    pub send_timeout: Duration,
    /// Bytes of a REST request body at most (default 2 MiB; the handler
    /// answers 413 above it).
    #[serde(deserialize_with = "size")]
    #[schemars(with = "crate::config::Size")]
    pub max_body_size: u64,
    /// Failed authentications an address may make at once before it is
    /// slowed down (default 10).
    pub auth_failures_burst: u32,
    /// Then one more attempt per this interval (default 1 s).
    #[serde(deserialize_with = "duration")]
    pub auth_failure_interval: Duration,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_connections_per_peer: 128,
            handshake_timeout: Duration::from_secs(10),
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_header_size: 16 * 1024,
            max_streams_per_connection: 100,
            send_timeout: Duration::from_secs(60),
            max_body_size: 2 * 1024 * 1024,
            auth_failures_burst: 10,
            auth_failure_interval: Duration::from_secs(1),
        }
    }
}

impl ListenerLimits {
    /// Errors: a limit of 0, or a header size below 8 KiB, naming the
    /// field (as `listener.FIELD` under `table`).
    pub fn check(&self, table: &str) -> Result<(), crate::config::Invalid> {
        let field = |f: &str| format!("{table}.{f}");
        for (name, v) in [
            ("max_connections", self.max_connections as u64),
            ("max_connections_per_peer", self.max_connections_per_peer as u64),
            ("max_streams_per_connection", u64::from(self.max_streams_per_connection)),
            ("max_body_size", self.max_body_size),
            ("auth_failures_burst", u64::from(self.auth_failures_burst)),
        ] {
            if v == 0 {
                return Err(crate::config::invalid(field(name), "must be at least 1"));
            }
        }
        for (name, d) in [
            ("handshake_timeout", self.handshake_timeout),
            ("head_timeout", self.head_timeout),
            ("idle_timeout", self.idle_timeout),
            ("send_timeout", self.send_timeout),
            ("auth_failure_interval", self.auth_failure_interval),
        ] {
            if d.is_zero() {
                return Err(crate::config::invalid(field(name), "must be longer than 0 s"));
            }
        }
        if self.max_header_size < 8192 || self.max_header_size > u64::from(u32::MAX) {
            return Err(crate::config::invalid(field("max_header_size"), "must be 8 KiB to 4 GiB"));
        }
        Ok(())
    }

    /// These limits with `max_connections` at most the descriptors this
    /// process may open (`RLIMIT_NOFILE`'s soft limit) less a quarter of
    /// them, at least 64, for its other files, clients and the
    /// connections being refused or closed.
    pub fn effective(mut self) -> Self {
        if let Some(nofile) = descriptor_limit() {
            let reserve = (nofile / 4).max(64);
            let cap = nofile.saturating_sub(reserve).max(1);
            if self.max_connections > cap {
                tracing::warn!(
                    configured = self.max_connections,
                    allowed = cap,
                    descriptors = nofile,
                    "max_connections lowered below the descriptor limit (raise LimitNOFILE to allow more)"
                );
                self.max_connections = cap;
            }
        }
        self.max_connections_per_peer = self.max_connections_per_peer.min(self.max_connections);
        self
    }
}

/// The soft limit of open files of this process, after raising it to the
/// hard limit (as Go's runtime does: the soft limit of 1,024 is for
/// `select(2)`, which nothing here uses). `None`: unknown.
pub fn descriptor_limit() -> Option<usize> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit with a valid pointer to an rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    Some(usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX))
}

/// Serves `app` on `listener` within `limits` (through `tls` when given),
/// until `stop` completes; then accepts no more, asks every connection to
/// close once its requests are answered (HTTP/2: GOAWAY), and cuts those
/// still open after `grace`. Errors: none once serving (accept errors are
/// logged and retried, [`crate::listen::accept`]).
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    limits: ListenerLimits,
    app: axum::Router,
    stop: impl Future<Output = ()>,
    grace: Duration,
) -> Result<()> {
    let slots = Slots::new(limits.max_connections, limits.max_connections_per_peer);
    let http = Arc::new(builder(&limits));
    let (closing, cut, tracker) = (CancellationToken::new(), CancellationToken::new(), TaskTracker::new());
    let mut refusing = false;
    let ended = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut trim = tokio::time::interval(TRIM_EVERY);
    tokio::pin!(stop);
    loop {
        let tcp = tokio::select! {
            tcp = crate::listen::accept(&listener) => tcp,
            _ = trim.tick() => {
                if ended.swap(0, std::sync::atomic::Ordering::Relaxed) >= TRIM_AFTER {
                    crate::daemon::return_freed_memory();
                }
                continue;
            }
            () = &mut stop => break,
        };
        let Ok(peer) = tcp.peer_addr() else { continue };
        let slot = match slots.admit(peer_key(peer.ip())) {
            Ok(slot) => {
                refusing = false;
                slot
            }
            Err(why) => {
                // Once per run of refusals, not once per connection.
                if !refusing {
                    tracing::warn!(peer = %peer, ?why, held = slots.held(), "connections refused: no idle slot to take");
                }
                refusing = true;
                drop(tcp);
                continue;
            }
        };
        let conn = Conn {
            http: http.clone(),
            app: app.clone(),
            slot,
            peer,
            limits,
            closing: closing.clone(),
            cut: cut.clone(),
        };
        let (tls, ended) = (tls.clone(), ended.clone());
        tracker.spawn(async move {
            let _ended = Ended(ended);
            match tls {
                None => conn.serve(tcp).await,
                Some(tls) => {
                    let hs = tls.accept(tcp);
                    tokio::select! {
                        r = tokio::time::timeout(limits.handshake_timeout, hs) => match r {
                            Ok(Ok(tls)) => conn.serve(tls).await,
                            Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                            Err(_) => tracing::debug!("TLS handshake timed out"),
                        },
                        () = conn.slot.evict.cancelled() => {}
                        () = conn.closing.cancelled() => {}
                    }
                }
            }
        });
    }
    drop(listener);
    closing.cancel();
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!(?grace, "calls still under way after the grace period: cut");
        cut.cancel();
        tracker.wait().await;
    }
    Ok(())
}

/// How often the listener looks whether to return freed memory, and after
/// how many connections ended since it last did.
const TRIM_EVERY: Duration = Duration::from_secs(2);
const TRIM_AFTER: usize = 16;

/// Counts a connection's end, when dropped.
struct Ended(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The address a client is counted by: itself, or its /64 for IPv6 (one
/// host's usual share).
pub fn peer_key(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            std::net::IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        std::net::IpAddr::V6(v6) => std::net::IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED)),
        v4 => v4,
    }
}

/// hyper's HTTP/1.1 and HTTP/2 server with `limits`.
fn builder(limits: &ListenerLimits) -> auto::Builder<TokioExecutor> {
    let header = usize::try_from(limits.max_header_size).unwrap_or(usize::MAX);
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head_timeout)
        .max_buf_size(header.max(8192))
        .max_headers(100);
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(header).unwrap_or(u32::MAX))
        .max_concurrent_streams(limits.max_streams_per_connection)
        // A peer that vanished during a long call (a WatchEvents stream)
        // frees its connection.
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    b
}

/// One accepted connection and what it serves.
struct Conn {
    http: Arc<auto::Builder<TokioExecutor>>,
    app: axum::Router,
    slot: slots::Slot,
    peer: SocketAddr,
    limits: ListenerLimits,
    /// The listener stops: close once answered.
    closing: CancellationToken,
    /// The grace period is over: close now.
    cut: CancellationToken,
}

impl Conn {
    /// Serves HTTP on `io` until the client closes, the connection is
    /// idle for `idle_timeout`, its slot is taken, or the listener stops.
    async fn serve<IO>(self, io: IO)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Connected + Unpin + Send + 'static,
        IO::ConnectInfo: Clone + Send + Sync + 'static,
    {
        let info = io.connect_info();
        let (app, peer, in_flight) = (self.app.clone(), self.peer, self.slot.in_flight.clone());
        let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(info.clone());
            req.extensions_mut().insert(ConnectInfo(peer));
            let busy = InFlight::new(&in_flight);
            let call = app.clone().oneshot(req.map(Body::new));
            async move {
                let resp = call.await?;
                // The request is in flight until its response's body ends
                // or is dropped.
                Ok::<_, std::convert::Infallible>(resp.map(|b| {
                    Body::new(b.map_frame(move |f| {
                        let _ = &busy;
                        f
                    }))
                }))
            }
        });
        let (io, stalled) = stall::watch(io);
        // With upgrades: the web console's WebSockets (an upgraded
        // connection leaves this loop to its handler's task).
        let conn = self.http.serve_connection_with_upgrades(TokioIo::new(io), svc);
        tokio::pin!(conn);
        let mut idle = self.slot.in_flight.subscribe();
        // Asked to close (idle, evicted, or the listener stops); and when
        // it is closed regardless: an unfinished head or HTTP/2 frame does
        // not hold a closing connection (a stop's grace is the listener's).
        let mut closing = false;
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            let hard_stop = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let after = |d: Duration| Some(tokio::time::Instant::now() + d);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(peer = %self.peer, error = %e, "connection ended");
                    }
                    return;
                }
                () = idle_for(&mut idle, self.limits.idle_timeout), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    (closing, deadline) = (true, after(self.limits.head_timeout));
                }
                () = self.slot.evict.cancelled(), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    (closing, deadline) = (true, after(Duration::from_secs(1)));
                }
                () = self.closing.cancelled(), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                () = self.cut.cancelled() => return,
                () = stalled.for_longer_than(self.limits.send_timeout) => {
                    tracing::debug!(peer = %self.peer, "closed: the client did not read its answers");
                    return;
                }
                () = hard_stop => return,
            }
        }
    }
}

/// Resolves once no request has been in flight for `timeout`.
async fn idle_for(in_flight: &mut watch::Receiver<usize>, timeout: Duration) {
    loop {
        if in_flight.wait_for(|n| *n == 0).await.is_err() {
            return;
        }
        if tokio::time::timeout(timeout, in_flight.wait_for(|n| *n > 0)).await.is_err() {
            return;
        }
    }
}

/// One request in flight on a connection, until dropped.
struct InFlight(watch::Sender<usize>);

impl InFlight {
    fn new(count: &watch::Sender<usize>) -> Self {
        count.send_modify(|n| *n += 1);
        Self(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests;
