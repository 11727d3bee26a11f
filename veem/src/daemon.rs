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
use crate::api::standby::Port;
use crate::config::{EngineKind, VeemConfig};
use crate::domain::Health;
use crate::leadership::{Leader, Leadership};
use crate::loops::{self, Loops};
use crate::manager::Veem;
use crate::store::{EtcdEngine, Store};

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
    let limits = cfg.listener.effective();
    let tls = match &cfg.tls {
        Some(tls) => {
            let cas: Vec<&Path> = cfg.peers.iter().filter_map(|p| p.ca.as_deref()).collect();
            Some(tls.acceptor(&cas)?)
        }
        None => None,
    };
    // On the embedded store the VEEM opens its database and answers at
    // once (not serving until it has reconciled: `front`); over etcd it
    // stands by until it leads its site.
    let site = cfg.site_id.clone();
    let (port, opening) = match cfg.store.engine {
        EngineKind::Sled => {
            let veem = Veem::open(cfg)?;
            let front = Front::of(veem.clone(), &limits).await?;
            (Port::of(&site, front.clone()), Opening::Opened(veem, front))
        }
        EngineKind::Etcd => (Port::standing_by(&site), Opening::StandingBy(Box::new(cfg))),
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
        port.clone().router(),
        stop.clone().cancelled_owned(),
        SHUTDOWN_GRACE,
    ));
    let (veem, front, leader) = match opening {
        Opening::Opened(veem, front) => (veem, front, None),
        Opening::StandingBy(cfg) => match lead(*cfg, &port, &stop).await? {
            Some((veem, leader)) => {
                // One set of handlers (and of peer CAs) for gRPC and
                // REST, on one port, over HTTP/2 and HTTP/1.1.
                let front = Front::of(veem.clone(), &limits).await?;
                port.lead(front.clone());
                (veem, front, Some(leader))
            }
            None => {
                server.await??;
                tracing::info!("stopped while standing by");
                return Ok(());
            }
        },
    };
    tracing::info!(site = %veem.cfg.site_id, %listen, max_connections = limits.max_connections, "VMI listening; reconciling with the hosts");
    let lost = leader.as_ref().map(|l| l.lost.clone()).unwrap_or_default();
    let started = tokio::select! {
        () = stop.cancelled() => false,
        () = lost.cancelled() => false,
        () = start_up(&veem, destroy_strays) => true,
    };
    let mut loops = None;
    if started {
        front.started().await;
        loops = Some(Loops::start(&veem));
        tracing::info!(site = %veem.cfg.site_id, %listen, "VMI serving");
        interfaces::daemon::notify_ready();
        tokio::select! {
            () = stop.cancelled() => {}
            () = lost.cancelled() => {}
        }
    }
    let stepped_down = lost.is_cancelled() && !stop.is_cancelled();
    if stepped_down {
        tracing::error!(site = %veem.cfg.site_id, "lost the site's leadership (the lease was not renewed in time): stepping down");
        stop.cancel();
    }
    front.stopping().await;
    veem.stopping.cancel();
    // Beside the calls under way: the loops' rounds, then the background
    // work they or the calls started (a deploy's boots, a recovery, a
    // migration), whose steps commit atomically, so that what the grace
    // period cuts is resumed at the next start (reconcile, intents).
    // A VEEM that stepped down gives its work a second only: whatever
    // it still does is fenced (its commits by etcd, its host calls by
    // their epoch), and the new leader reconciles.
    let grace = if stepped_down { Duration::from_secs(1) } else { SHUTDOWN_GRACE };
    let beside = async {
        if let Some(loops) = loops {
            loops.shutdown(grace).await;
        }
        let cut = veem.drain_tasks(grace).await;
        if cut > 0 {
            tracing::warn!(tasks = cut, ?grace, "background work still under way after the grace period: cut");
        }
    };
    let (served, ()) = tokio::join!(server, beside);
    if stepped_down {
        return Err(SteppedDown.into());
    }
    // A clean stop hands the site over at once.
    if let Some(leader) = leader {
        leader.resign().await;
    }
    served??;
    tracing::info!("stopped");
    Ok(())
}

/// How `veem serve` comes to act for its site.
enum Opening {
    /// On the embedded store: at once.
    Opened(Arc<Veem>, Arc<Front>),
    /// Over etcd: once it leads ([`lead`]).
    StandingBy(Box<VeemConfig>),
}

/// `veem serve` stopped because this VEEM lost its site's leadership
/// (exit code `cli::exit::STEPPED_DOWN`): started again, it stands by.
#[derive(Debug, thiserror::Error)]
#[error("this VEEM lost its site's leadership and stepped down")]
pub struct SteppedDown;

/// Campaigns for site `cfg.site_id`'s leadership in its etcd cluster
/// (`crate::leadership`), the port answering as a standby (naming the
/// leader) meanwhile; once elected, the store's commits are fenced by the
/// election key and the VEEM is opened over it, its host calls carrying
/// the epoch. `None` when stopped first. Errors: the cluster's
/// configuration, a database of another site or format.
async fn lead(cfg: VeemConfig, port: &Arc<Port>, stop: &CancellationToken) -> Result<Option<(Arc<Veem>, Leader)>> {
    let engine = Arc::new(EtcdEngine::connect(&cfg.store.etcd(&cfg.site_id))?);
    let leadership = Arc::new(Leadership::new(
        engine.waiting_client().await?,
        engine.election(),
        &cfg.advertised(),
        cfg.store.lease_ttl,
    ));
    tracing::info!(site = %cfg.site_id, endpoint = %cfg.advertised(), "standing by: campaigning for the site's leadership");
    // Who leads, for the standby's answers, until this VEEM does.
    let watching = CancellationToken::new();
    tokio::spawn({
        let (leadership, port, watching) = (leadership.clone(), port.clone(), watching.clone());
        async move {
            while !watching.is_cancelled() {
                port.set_leader(leadership.leader_endpoint().await);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    let leader = loop {
        let won = tokio::select! {
            () = stop.cancelled() => {
                watching.cancel();
                return Ok(None);
            }
            won = leadership.campaign() => won,
        };
        match won {
            Ok(l) => break l,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "campaign failed; campaigning again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    watching.cancel();
    port.set_leader(Some(cfg.advertised()));
    tracing::info!(site = %cfg.site_id, epoch = leader.epoch, "leading the site");
    engine.fence_with(Some((leader.key.clone(), leader.epoch)));
    let what = format!("etcd {:?}", engine.prefix());
    let store = Store::on(engine, &what)?;
    let veem = Veem::open_leading(cfg, store, leader.epoch)?;
    Ok(Some((veem, leader)))
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
