//! `veem serve`: opens the state, learns the site's hosts, reconciles with
//! what the VEEHs run, then serves the VMI beside the loops (`loops`) until
//! stopped, and stops them cleanly.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::config::VeemConfig;
use crate::hosts::Health;
use crate::loops::{self, Loops};
use crate::manager::Veem;
use crate::server::VmiService;

/// How long a stop waits for the loops' rounds under way.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The VMI's service name in gRPC health checks (`grpc.health.v1`).
pub const VMI_SERVICE: &str = "vmi.v1.VmiService";

/// Runs the VEEM of `config` until Ctrl-C or SIGTERM. `destroy_strays`:
/// the operator's word that domains an empty database does not know are
/// to be destroyed ([`crate::reconcile::Strays`]).
pub async fn run(config: &Path, destroy_strays: bool) -> Result<()> {
    let cfg = VeemConfig::load(config)?;
    #[cfg(feature = "failpoints")]
    if let Some(spec) = &cfg.failpoints {
        crate::failpoints::arm(spec)?;
    }
    if cfg.insecure {
        tracing::error!(
            "INSECURE: insecure = true: {}calls to http:// hosts and peers are plaintext, and whoever answers there is believed",
            if cfg.tls.is_none() {
                "the VMI is served in plaintext (tokens cross in clear), "
            } else {
                ""
            }
        );
    } else if cfg.tls.is_none() {
        anyhow::bail!(
            "{}: no [tls] for the VMI: give this site's certificate, or set insecure = true",
            config.display()
        );
    }
    let listen = cfg.listen;
    // The port first: a VEEM that cannot serve does not start (nor
    // reconcile, nor run its loops).
    let listener = interfaces::listen::bind(listen).await?;
    let veem = Veem::open(cfg)?;
    // One set of handlers (and of peer CAs) for gRPC and REST. REST is
    // beside gRPC on the same port, over HTTP/1.1 too (TLS included: the
    // VMI's ALPN offers both, so the connections' TLS is ours, not tonic's).
    let handlers = std::sync::Arc::new(VmiService::checked(veem.clone())?);
    let vmi = interfaces::vmi::vmi_service_server::VmiServiceServer::from_arc(handlers.clone());
    let rest = tonic::service::Routes::default()
        .into_axum_router()
        .merge(crate::rest::router(handlers));
    let mut builder = tonic::transport::Server::builder().accept_http1(true);
    let tls = match &veem.cfg.tls {
        Some(tls) => {
            let cas: Vec<&Path> = veem.cfg.peers.iter().filter_map(|p| p.ca.as_deref()).collect();
            Some(tls.acceptor(&cas)?)
        }
        None => None,
    };
    // First heartbeats: learn capacities and profiles, then reconcile.
    for _ in 0..10 {
        loops::heartbeat_round(&veem).await;
        if veem.hosts.names().iter().all(|h| veem.hosts.health(h) == Health::Up) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let strays = if destroy_strays {
        crate::reconcile::Strays::Destroy
    } else {
        crate::reconcile::Strays::KeepWithoutRecords
    };
    match veem.undo_intents().await {
        Ok(0) => {}
        Ok(n) => tracing::warn!(
            left = n,
            "steps a crash cut short are not all undone yet; retrying in the background"
        ),
        Err(e) => tracing::warn!(error = %format!("{e:#}"), "cannot read the intents a crash left"),
    }
    if let Err(e) = veem.reconcile(strays).await {
        tracing::warn!(error = %format!("{e:#}"), "reconciliation incomplete");
    }
    // Hosts the site had before: from now on, silence counts against them
    // even if they never answered since this start (a host that died while
    // the VEEM was down is declared failed and its VEEs recovered).
    for h in veem.hosts.names() {
        if veem.planner.lock().unwrap().host(&h).is_some() {
            veem.hosts.mark_known(&h);
        }
    }
    let loops = Loops::start(&veem);
    // The stop signal's handlers before READY=1: a SIGTERM from then on
    // is a clean stop.
    let stop_signal = interfaces::daemon::shutdown_signal();
    tracing::info!(site = %veem.cfg.site_id, %listen, "VMI listening");
    interfaces::daemon::notify_ready();
    let (router, health) = interfaces::daemon::with_health_and_reflection(
        builder.add_routes(rest.into()).add_service(vmi),
        VMI_SERVICE,
        interfaces::vmi::FILE_DESCRIPTOR_SET,
    )
    .await?;
    // Until a signal, or until the server ends by itself (it cannot bind).
    // Then the server stops accepting and lets the calls under way finish,
    // the loops end their round under way, both within the grace period:
    // the stop token ends WatchEvents streams, so that a client that keeps
    // one open does not hold the stop. Every store write is durable when
    // made, so nothing is half-written.
    let on_stop = || {
        veem.stopping.cancel();
        loops.shutdown(SHUTDOWN_GRACE)
    };
    let health = (health, VMI_SERVICE);
    match tls {
        Some(acceptor) => {
            let incoming = interfaces::listen::tls_incoming(listener, acceptor);
            interfaces::daemon::serve_until_stopped(router, incoming, stop_signal, health, SHUTDOWN_GRACE, on_stop).await
        }
        None => {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            interfaces::daemon::serve_until_stopped(router, incoming, stop_signal, health, SHUTDOWN_GRACE, on_stop).await
        }
    }
}
