//! `veem serve`: binds its port, opens the state, answers the VMI (not
//! serving yet: `front`) while it learns the site's hosts and reconciles
//! with what the VEEHs run, then serves the VMI beside the loops (`loops`)
//! until stopped, and stops them cleanly.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use crate::api::front::Front;
use crate::config::VeemConfig;
use crate::domain::Health;
use crate::loops::{self, Loops};
use crate::manager::Veem;

/// How long a stop waits for the loops' rounds under way.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Runs the VEEM of `config` until Ctrl-C or SIGTERM. `destroy_strays`:
/// the operator's word that domains an empty database does not know are
/// to be destroyed ([`crate::workflows::reconcile::Strays`]).
///
/// The stop signal's handlers come first and the port next: from then on
/// the VMI answers (health NOT_SERVING, calls UNAVAILABLE: `front`) while
/// the VEEM learns its hosts and reconciles with them, and a SIGTERM or
/// SIGINT at any moment is a clean stop (exit 0, the database closed).
pub async fn run(config: &Path, destroy_strays: bool) -> Result<()> {
    let stop = CancellationToken::new();
    let signal = interfaces::daemon::shutdown_signal();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            signal.await;
            stop.cancel();
        }
    });
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
    let limits = veem.cfg.listener.effective();
    // One set of handlers (and of peer CAs) for gRPC and REST, on one
    // port, over HTTP/2 and HTTP/1.1 (TLS included: the VMI's ALPN offers
    // both).
    let front = Front::of(veem.clone(), &limits).await?;
    let tls = match &veem.cfg.tls {
        Some(tls) => {
            let cas: Vec<&Path> = veem.cfg.peers.iter().filter_map(|p| p.ca.as_deref()).collect();
            Some(tls.acceptor(&cas)?)
        }
        None => None,
    };
    // Until the stop, then no new connection, the calls under way and the
    // loops' rounds get the grace period: the stop token ends WatchEvents
    // streams, so that a client that keeps one open does not hold the
    // stop. Every store write is durable when made, so nothing is
    // half-written.
    let server = tokio::spawn(interfaces::connections::serve(
        listener,
        tls,
        limits,
        front.clone().router(),
        stop.clone().cancelled_owned(),
        SHUTDOWN_GRACE,
    ));
    tracing::info!(site = %veem.cfg.site_id, %listen, max_connections = limits.max_connections, "VMI listening; reconciling with the hosts");
    let started = tokio::select! {
        () = stop.cancelled() => false,
        () = start_up(&veem, destroy_strays) => true,
    };
    let mut loops = None;
    if started {
        front.started().await;
        loops = Some(Loops::start(&veem));
        tracing::info!(site = %veem.cfg.site_id, %listen, "VMI serving");
        interfaces::daemon::notify_ready();
        stop.cancelled().await;
    }
    front.stopping().await;
    veem.stopping.cancel();
    // Beside the calls under way: the loops' rounds, then the background
    // work they or the calls started (a deploy's boots, a recovery, a
    // migration), whose steps commit atomically, so that what the grace
    // period cuts is resumed at the next start (reconcile, intents).
    let beside = async {
        if let Some(loops) = loops {
            loops.shutdown(SHUTDOWN_GRACE).await;
        }
        let cut = veem.drain_tasks(SHUTDOWN_GRACE).await;
        if cut > 0 {
            tracing::warn!(tasks = cut, grace = ?SHUTDOWN_GRACE, "background work still under way after the grace period: cut");
        }
    };
    let (served, ()) = tokio::join!(server, beside);
    served??;
    tracing::info!("stopped");
    Ok(())
}

/// What the VEEM does before it serves: learns its hosts' capacities and
/// profiles (first heartbeats), undoes what a crash cut short, reconciles
/// its records with what the VEEHs run. Cancel-safe as a crash is: every
/// step commits atomically.
async fn start_up(veem: &Arc<Veem>, destroy_strays: bool) {
    for _ in 0..10 {
        loops::heartbeat_round(veem).await;
        if veem.hosts.names().iter().all(|h| veem.hosts.health(h) == Health::Up) {
            break;
        }
        veem.clock.sleep(Duration::from_millis(500)).await;
    }
    let strays = if destroy_strays {
        crate::workflows::reconcile::Strays::Destroy
    } else {
        crate::workflows::reconcile::Strays::KeepWithoutRecords
    };
    match veem.intents.undo_intents().await {
        Ok(0) => {}
        Ok(n) => tracing::warn!(
            left = n,
            "steps a crash cut short are not all undone yet; retrying in the background"
        ),
        Err(e) => tracing::warn!(error = %format!("{e:#}"), "cannot read the intents a crash left"),
    }
    if let Err(e) = veem.reconcile.reconcile(strays).await {
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
    // What reading the database and reconciling freed goes back to the
    // system (at 100,000 VEEs, tens of MiB of decoding's temporaries).
    interfaces::daemon::return_freed_memory();
}
