//! A daemon's metrics listener (the `[metrics]` table of the VEEM's, a
//! VEEH's and the image repository's configuration): `GET /metrics` in
//! the OpenMetrics text format (prometheus-client, what Prometheus
//! scrapes), and the supervisors' probes `GET`/`HEAD` `/healthz` (200 while
//! the process serves) and `/readyz` (200 when the daemon's gRPC health is
//! SERVING, else 503 with the reason).
//!
//! The listener is [`crate::connections::serve`] with smaller limits
//! ([`MetricsConfig::limits`]); `/metrics` may ask for a bearer token
//! (`token_sha256`), failed attempts slowed down per address
//! ([`crate::auth_throttle`]; the right token is served all the same). What every daemon adds: the process's own
//! metrics ([`ProcessCollector`], the names of Prometheus's client_golang).
//! Names follow Prometheus's conventions: base units (`_seconds`,
//! `_bytes`), counters end in `_total`, and no label takes unbounded
//! values.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::Extension;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use serde::Deserialize;

use crate::auth_throttle::AuthThrottle;
use crate::connections::ListenerLimits;

/// The `[metrics]` table: where the metrics listener listens and who may
/// read `/metrics`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address and port (e.g. `"127.0.0.1:9464"`). Plain HTTP unless
    /// `tls_cert` and `tls_key` are given: keep a plain listener on
    /// loopback or a management network.
    pub listen: SocketAddr,
    /// PEM certificate (chain) the listener serves HTTPS with (HTTP/1.1,
    /// no client certificates; Prometheus's `scheme: https` with its
    /// `tls_config.ca_file`). Given with `tls_key`, or neither.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// SHA-256 (64 hex digits) of the bearer token `/metrics` asks for
    /// (Prometheus's `authorization` of a scrape job); none: `/metrics`
    /// is open. The probes never ask for one.
    #[serde(default)]
    pub token_sha256: Option<String>,
}

impl MetricsConfig {
    /// Errors: a `token_sha256` that is not 64 hex digits, naming
    /// `metrics.token_sha256`; one of `tls_cert` and `tls_key` without the
    /// other, naming the missing one.
    pub fn check(&self) -> Result<(), crate::config::Invalid> {
        self.token_digest()?;
        self.tls_files().map(|_| ())
    }

    /// The certificate and key HTTPS is served with; `None`: plain HTTP.
    fn tls_files(&self) -> Result<Option<(&Path, &Path)>, crate::config::Invalid> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Ok(Some((c, k))),
            (None, None) => Ok(None),
            (Some(_), None) => Err(crate::config::invalid("metrics.tls_key", "is needed with metrics.tls_cert")),
            (None, Some(_)) => Err(crate::config::invalid("metrics.tls_cert", "is needed with metrics.tls_key")),
        }
    }

    fn token_digest(&self) -> Result<Option<[u8; 32]>, crate::config::Invalid> {
        self.token_sha256
            .as_deref()
            .map(|h| {
                hex::decode(h)
                    .ok()
                    .and_then(|d| <[u8; 32]>::try_from(d).ok())
                    .ok_or_else(|| crate::config::invalid("metrics.token_sha256", "must be 64 hex digits"))
            })
            .transpose()
    }

    /// The listener's limits: 64 connections, 16 per address, 10 s
    /// heads, 60 s idle, 64 KiB bodies.
    pub fn limits() -> ListenerLimits {
        ListenerLimits {
            max_connections: 64,
            max_connections_per_peer: 16,
            max_body_size: 64 * 1024,
            ..ListenerLimits::default()
        }
        .effective()
    }
}

/// Whether a daemon serves calls (`Ok`) or why not (`Err`): what
/// `/readyz` answers, as the daemon's gRPC health says.
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Runs before each scrape: brings gauges read from the daemon's state
/// (VEEs by state, a host's domains) up to date.
pub type BeforeScrape = Arc<dyn Fn() + Send + Sync>;

/// The answer to a supervisor's probe of `path` (`/healthz`, `/readyz`)
/// with `method` (`GET`, `HEAD`), `ready` saying whether calls are served
/// or why not; `None` for any other request. Shared by the metrics
/// listener and the VEEM's VMI port.
pub fn probe(method: &Method, path: &str, ready: impl FnOnce() -> Result<(), String>) -> Option<Response> {
    if !matches!(*method, Method::GET | Method::HEAD) {
        return None;
    }
    match path {
        "/healthz" => Some((StatusCode::OK, "ok\n").into_response()),
        "/readyz" => Some(match ready() {
            Ok(()) => (StatusCode::OK, "ready\n").into_response(),
            Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response(),
        }),
        _ => None,
    }
}

/// What the metrics listener serves: a daemon's registry, the refresh run
/// before each scrape, its readiness.
#[derive(Clone)]
pub struct Exporter {
    registry: Arc<Registry>,
    before_scrape: Option<BeforeScrape>,
    ready: Readiness,
    token: Option<[u8; 32]>,
    throttle: Arc<AuthThrottle>,
}

impl Exporter {
    /// The exporter under `cfg` of the process's metrics and those
    /// `register` adds, named `<prefix>_...`. Errors: `cfg`'s token digest
    /// is malformed.
    pub fn new(
        cfg: &MetricsConfig,
        prefix: &str,
        register: impl FnOnce(&mut Registry),
        before_scrape: Option<BeforeScrape>,
        ready: Readiness,
    ) -> Result<Self, crate::config::Invalid> {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        register(registry.sub_registry_with_prefix(prefix));
        let limits = MetricsConfig::limits();
        Ok(Self {
            registry: Arc::new(registry),
            before_scrape,
            ready,
            token: cfg.token_digest()?,
            throttle: Arc::new(AuthThrottle::new(limits.auth_failures_burst, limits.auth_failure_interval)),
        })
    }

    /// The metrics now, in the OpenMetrics text format.
    pub fn scrape(&self) -> String {
        if let Some(refresh) = &self.before_scrape {
            refresh();
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The listener's router: `/metrics`, `/healthz`, `/readyz`; 404 else.
    pub fn router(self) -> axum::Router {
        axum::Router::new().fallback(answer).with_state(self)
    }
}

/// The content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn answer(
    State(x): State<Exporter>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(resp) = probe(&method, uri.path(), || (x.ready)()) {
        return resp;
    }
    if uri.path() != "/metrics" {
        return (
            StatusCode::NOT_FOUND,
            "not found: this listener serves /metrics, /healthz and /readyz\n",
        )
            .into_response();
    }
    if !matches!(method, Method::GET | Method::HEAD) {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "GET, HEAD")],
            "method not allowed\n",
        )
            .into_response();
    }
    if let Some(token) = &x.token {
        // The token first (hashed, compared in constant time): a scraper
        // with the right one is served even while another client at its
        // address is throttled.
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let valid = presented.and_then(|p| crate::tokens::find(p, [token])).is_some();
        let addr = peer.map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |c| c.0 .0.ip());
        if let Some(wait) = x.throttle.admit(addr, valid) {
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, secs.to_string())],
                format!("too many failed authentications from this address: retry in {secs} s\n"),
            )
                .into_response();
        }
        if !valid {
            x.throttle.failed(addr);
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"metrics\"")],
                "unauthenticated: /metrics needs the bearer token of [metrics] token_sha256\n",
            )
                .into_response();
        }
    }
    ([(header::CONTENT_TYPE, OPENMETRICS)], x.scrape()).into_response()
}

/// A metrics listener running beside its daemon's other work
/// ([`Serving::start`]), until [`Serving::stop`].
pub struct Serving {
    addr: SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Serving {
    /// Binds `cfg.listen` (errors name the holder of a port in use,
    /// [`crate::listen::bind`]) and serves `exporter` there, over HTTPS
    /// when `cfg` names a certificate. Errors also: the certificate or
    /// key cannot be read or used, naming the file.
    pub async fn start(cfg: &MetricsConfig, exporter: Exporter) -> anyhow::Result<Self> {
        let tls = match cfg.tls_files()? {
            Some((cert, key)) => Some(crate::tls::http1_acceptor(cert, key)?),
            None => None,
        };
        let listener = crate::listen::bind(cfg.listen).await?;
        let addr = listener.local_addr()?;
        let token = cfg.token_sha256.is_some();
        if token && tls.is_none() && !cfg.listen.ip().is_loopback() {
            tracing::warn!(listen = %cfg.listen, "metrics: a bearer token over plain HTTP off loopback can be read on the wire; give [metrics] tls_cert and tls_key");
        }
        tracing::info!(listen = %cfg.listen, token, https = tls.is_some(), "metrics listening");
        let stop = tokio_util::sync::CancellationToken::new();
        let until = stop.clone().cancelled_owned();
        let limits = MetricsConfig::limits();
        let task = tokio::spawn(crate::connections::serve(
            listener,
            tls,
            limits,
            exporter.router(),
            until,
            STOP_GRACE,
        ));
        Ok(Self { addr, stop, task })
    }

    /// The address the listener is bound to (its port when `listen` gave
    /// port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the listener: scrapes under way get [`STOP_GRACE`].
    pub async fn stop(self) {
        self.stop.cancel();
        match self.task.await {
            Ok(Err(e)) => tracing::warn!(error = %format!("{e:#}"), "metrics listener"),
            Err(e) => tracing::warn!(error = %e, "metrics listener"),
            Ok(Ok(())) => {}
        }
    }
}

/// How long a stopping metrics listener waits for scrapes under way.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// The process's own metrics, read from `/proc/self` at each scrape (the
/// names and meanings of Prometheus's client_golang process collector):
/// `process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`,
/// `process_threads`, `process_start_time_seconds`.
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(me) = procfs::process::Process::myself() else {
            return Ok(());
        };
        let Ok(stat) = me.stat() else { return Ok(()) };
        let tps = procfs::ticks_per_second() as f64;
        let cpu = ConstCounter::new((stat.utime + stat.stime) as f64 / tps);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "User and system CPU time spent",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        let mut gauge = |name: &str, help: &str, unit: Option<&Unit>, v: f64| -> Result<(), std::fmt::Error> {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, unit, g.metric_type())?)
        };
        gauge(
            "process_resident_memory",
            "Resident memory size",
            Some(&Unit::Bytes),
            (stat.rss * procfs::page_size()) as f64,
        )?;
        gauge(
            "process_virtual_memory",
            "Virtual memory size",
            Some(&Unit::Bytes),
            stat.vsize as f64,
        )?;
        gauge("process_threads", "Threads of the process", None, stat.num_threads as f64)?;
        if let Ok(fds) = me.fd_count() {
            gauge("process_open_fds", "Open file descriptors", None, fds as f64)?;
        }
        if let Some(max) = crate::connections::descriptor_limit() {
            gauge("process_max_fds", "Most file descriptors the process may open", None, max as f64)?;
        }
        if let Ok(boot) = procfs::boot_time_secs() {
            gauge(
                "process_start_time",
                "When the process started, since the Unix epoch",
                Some(&Unit::Seconds),
                boot as f64 + stat.starttime as f64 / tps,
            )?;
        }
        Ok(())
    }
}

pub mod reference;

#[cfg(test)]
mod tests;
