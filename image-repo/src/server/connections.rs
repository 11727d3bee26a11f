//! Connections: the accept loop under the HTTP API, with the limits that
//! keep slow, idle or too many clients from taking the repository down
//! (issue 13, R7), and TLS when configured.
//!
//! - At most [`Limits::max_connections`] at once: one more is answered
//!   `503 Service Unavailable` and closed at once (over TLS: closed), so
//!   the process never runs out of file descriptors and the clients it
//!   serves keep being served.
//! - A client has [`Limits::header_timeout`] to finish its TLS handshake
//!   and then to send each request's head; an idle keep-alive connection
//!   is closed after the same time.
//! - Request bodies are watched by the upload itself (`upload::BodyPace`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::config::{Config, ServerTls};

/// How long a stop waits for the requests in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// The body of the answer to a connection over the limit.
const BUSY: &str = "the image repository has too many connections: retry later\n";

/// The limits on connections, from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time to finish the TLS handshake, and to send a request's head.
    pub header_timeout: Duration,
}

impl Limits {
    /// The configuration's limits.
    pub fn of(config: &Config) -> Self {
        Self {
            max_connections: config.max_connections,
            header_timeout: config.header_timeout,
        }
    }
}

/// The TLS acceptor of `tls` (rustls, ring). Errors: a file cannot be
/// read or holds no usable certificate or key, naming it.
pub fn acceptor(tls: &ServerTls) -> Result<TlsAcceptor> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth();
    let mut config = interfaces::tls::with_identity(builder, &tls.cert, &tls.key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves `app` on `listener` within `limits` (over TLS with `tls`) until
/// `shutdown` completes, then lets the requests in flight finish (30 s at
/// most). Errors: none once serving; accept errors (such as running out of
/// descriptors) are logged and retried (`interfaces::listen::accept`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            stream = interfaces::listen::accept(&listener) => stream,
            () = &mut shutdown => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(limit = limits.max_connections, "connection refused: too many connections");
            tokio::spawn(refuse(stream, tls.is_none()));
            continue;
        };
        let (http, tls, watcher, svc) = (http.clone(), tls.clone(), graceful.watcher(), TowerToHyperService::new(app.clone()));
        tokio::spawn(async move {
            let _permit = permit;
            let result = match tls {
                None => watcher.watch(http.serve_connection(TokioIo::new(stream), svc)).await,
                Some(tls) => match tokio::time::timeout(limits.header_timeout, tls.accept(stream)).await {
                    Ok(Ok(stream)) => watcher.watch(http.serve_connection(TokioIo::new(stream), svc)).await,
                    Ok(Err(e)) => return tracing::debug!(error = %e, "TLS handshake failed"),
                    Err(_) => return tracing::debug!("TLS handshake timed out"),
                },
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::warn!(grace = ?SHUTDOWN_GRACE, "requests still in flight after the grace period: closed");
    }
    Ok(())
}

/// Answers a connection over the limit with 503 (plaintext only) and
/// closes it.
async fn refuse(mut stream: TcpStream, plaintext: bool) {
    if plaintext {
        let answer = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{BUSY}",
            BUSY.len()
        );
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(answer.as_bytes())).await;
    }
    let _ = stream.shutdown().await;
}
