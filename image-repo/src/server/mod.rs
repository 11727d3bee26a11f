//! The image repository server: content-addressed blobs over HTTP/1.1
//! (axum) with metadata in sled. See `interfaces::repo_client::protocol`
//! for the API and [`store`] for the layout on disk.

pub mod auth;
pub mod chunk_refs;
pub mod chunks;
pub mod config;
pub mod connections;
pub mod download;
pub mod error;
pub mod gc;
pub mod in_flight;
pub mod metadata;
pub mod metrics;
pub mod oci;
pub mod peers;
pub mod quota;
pub mod repositories;
pub mod routes;
pub mod store;
pub mod upload;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::net::TcpListener;

pub use config::{Config, Overrides};

/// What every handler shares.
pub struct App {
    /// The configuration in force.
    pub config: Config,
    /// Blobs and metadata.
    pub store: store::Store,
    /// Bytes held by uploads under way against `max_bytes`.
    pub quota: quota::Quota,
    /// The OCI API's upload sessions.
    pub uploads: oci::uploads::Sessions,
    /// Uploads whose bodies are being received, per caller and in all.
    pub in_flight: in_flight::UploadsInFlight,
    /// Failed authentications per client address.
    pub throttle: interfaces::auth_throttle::AuthThrottle,
    /// The repositories of peer sites.
    pub peers: peers::Peers,
    /// What `/metrics` of the metrics listener reports.
    pub metrics: metrics::RepoMetrics,
}

impl App {
    /// The server's state over `store` with `config`: no upload under way.
    /// Errors: a peer's token file or CA cannot be read.
    pub fn new(config: Config, store: store::Store) -> Result<Self> {
        Ok(Self {
            peers: peers::Peers::new(&config.peers)?,
            store,
            quota: quota::Quota::default(),
            uploads: oci::uploads::Sessions::default(),
            in_flight: in_flight::UploadsInFlight::new(config.max_uploads_in_flight, config.max_uploads_in_flight_per_caller),
            metrics: Default::default(),
            throttle: interfaces::auth_throttle::AuthThrottle::new(
                config.listener.auth_failures_burst,
                config.listener.auth_failure_interval,
            ),
            config,
        })
    }
}

/// Shared handle on [`App`].
pub type AppState = Arc<App>;

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    app: AppState,
}

impl Server {
    /// Opens the store in `config.data` and binds `config.listen`.
    /// Errors: the data directory or database cannot be opened (e.g. another
    /// server uses it) or the address cannot be bound.
    pub async fn bind(config: Config) -> Result<Self> {
        let store = store::Store::open(&config.data).with_context(|| format!("opening data directory {}", config.data.display()))?;
        let listener = interfaces::listen::bind(config.listen).await?;
        Ok(Self {
            listener,
            app: Arc::new(App::new(config, store)?),
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.listener.local_addr()?)
    }

    /// Serves until `shutdown` completes, then lets the requests in flight
    /// finish for `shutdown_grace` and cuts what is left.
    /// Errors: the listener fails.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let addr = self.local_addr()?;
        let config = &self.app.config;
        let tls = config.tls.as_ref().map(connections::acceptor).transpose()?;
        if tls.is_none() {
            tracing::error!("INSECURE: insecure = true: the repository speaks plaintext HTTP; tokens and content cross in clear");
        }
        tracing::info!(%addr, data = %config.data.display(), tokens = config.tokens.len() + 1, tls = tls.is_some(), "image repository serving");
        interfaces::daemon::notify_ready();
        let (limits, grace) = (config.limits(), config.shutdown_grace);
        let metrics = match &config.metrics {
            Some(m) => Some(interfaces::metrics::Serving::start(m, metrics::RepoMetrics::exporter(&self.app, m)?).await?),
            None => None,
        };
        let sweeper = tokio::spawn(sweep_uploads(self.app.clone()));
        interfaces::connections::serve(self.listener, tls, limits, routes::router(self.app), shutdown, grace).await?;
        sweeper.abort();
        if let Some(m) = metrics {
            m.stop().await;
        }
        tracing::info!("image repository stopped");
        Ok(())
    }
}

/// Drops the OCI upload sessions idle for `upload_session_timeout`, with
/// their files and the room they held, checking every tenth of it (at
/// least every 10 s).
async fn sweep_uploads(app: AppState) {
    let timeout = app.config.upload_session_timeout;
    let mut tick = tokio::time::interval((timeout / 10).clamp(std::time::Duration::from_millis(100), std::time::Duration::from_secs(10)));
    loop {
        tick.tick().await;
        app.uploads.sweep(timeout);
    }
}
