//! `veem serve`: binds its port, opens the state, answers the VMI (not
//! serving yet: `front`) while it learns the site's hosts and reconciles
//! with what the VEEHs run, then serves the VMI beside the loops (`loops`)
//! until stopped, and stops them cleanly. Over etcd it first stands by
//! (`api::standby`) until it leads, and stands by again when it loses the
//! leadership.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use crate::api::front::Acting;
use crate::api::front::Front;
use crate::api::standby::Port;
use crate::config::{EngineKind, VeemConfig};
use crate::core::renew_ahead_s;
use crate::core::replica::Replica;
use crate::domain::Health;
use crate::leadership::{Leader, Leadership};
use crate::loops::{self, Loops};
use crate::manager::Veem;
use crate::store::{EtcdEngine, Store, StoreError};

/// How long a new leader waits for its standby copy to reach the
/// takeover's barrier before it reads the store instead.
const CATCH_UP: Duration = Duration::from_secs(10);

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
    // Until the stop, then no new connection, the calls under way and the
    // loops' rounds get the grace period: the stop token ends WatchEvents
    // streams, so that a client that keeps one open does not hold the
    // stop. Every store write is durable when made, so nothing is
    // half-written.
    let serve = |port: Arc<Port>| {
        tokio::spawn(interfaces::connections::serve(
            listener,
            tls,
            limits,
            port.router(),
            stop.clone().cancelled_owned(),
            SHUTDOWN_GRACE,
        ))
    };
    let site = cfg.site_id.clone();
    // What the VEEM counts, across leadership terms, and the gauges of
    // whichever VEEM acts: the metrics listener runs from start to stop.
    let metrics = Arc::new(crate::metrics::VeemMetrics::default());
    let acting = Acting::default();
    let metrics_listener = match &cfg.metrics {
        Some(m) => Some(interfaces::metrics::Serving::start(m, crate::api::metrics::exporter(m, metrics.clone(), acting.clone())?).await?),
        None => None,
    };
    // The web console, on its own port, with the VMI's identity and
    // limits; its pages call whichever VEEM acts.
    let web_console = match (&cfg.web, &cfg.tls) {
        (Some(w), Some(tls)) => {
            let listener = interfaces::listen::bind(w.listen).await?;
            let web = crate::api::web::Web::new(w, acting.clone(), &limits);
            let (tls, until) = (tls.clone(), stop.clone().cancelled_owned());
            tracing::info!(listen = %w.listen, "web console listening");
            Some(tokio::spawn(async move {
                crate::api::web::serve(listener, &tls, limits, web, until, SHUTDOWN_GRACE).await
            }))
        }
        _ => None,
    };
    match cfg.store.engine {
        // On the embedded store the VEEM opens its database and answers
        // at once (not serving until it has reconciled: `front`).
        EngineKind::Sled => {
            let reading = Instant::now();
            let veem = Veem::open_measured(cfg, metrics)?;
            tracing::info!(
                ms = reading.elapsed().as_millis() as u64,
                vees = veem.core.vee_count(),
                "database read"
            );
            // One set of handlers (and of peer CAs) for gRPC and REST, on
            // one port, over HTTP/2 and HTTP/1.1.
            let front = Front::of(veem.clone(), &limits).await?;
            acting.set(veem.clone(), front.clone());
            let server = serve(Port::of(&site, front.clone()));
            tracing::info!(%site, %listen, max_connections = limits.max_connections, "VMI listening; reconciling with the hosts");
            let start = Start {
                destroy_strays,
                wait_for_known_hosts: true,
            };
            let loops = act(&veem, &front, &CancellationToken::new(), &stop, start).await;
            let (served, ()) = tokio::join!(server, wind_down(&veem, &front, loops, SHUTDOWN_GRACE));
            served??;
        }
        // Over etcd it stands by until it leads its site, leads until it
        // loses the leadership, and then stands by again.
        EngineKind::Etcd => {
            let port = Port::standing_by(&site);
            let server = serve(port.clone());
            let mut resign = None;
            while let Some((veem, leader, took_over)) = lead(&cfg, &port, &stop, &metrics).await? {
                let front = Front::of(veem.clone(), &limits).await?;
                port.lead(front.clone());
                acting.set(veem.clone(), front.clone());
                tracing::info!(%site, %listen, max_connections = limits.max_connections, "VMI listening; reconciling with the hosts");
                let start = Start {
                    destroy_strays,
                    wait_for_known_hosts: !took_over,
                };
                let loops = act(&veem, &front, &leader.lost, &stop, start).await;
                if stop.is_cancelled() {
                    wind_down(&veem, &front, loops, SHUTDOWN_GRACE).await;
                    resign = Some(leader);
                    break;
                }
                // A VEEM that lost its leadership gives its work a second
                // only: whatever it still does is fenced (its commits by
                // etcd, its host and peer calls by their epoch), and the
                // new leader reconciles.
                tracing::error!(%site, "lost the site's leadership (the lease was not renewed in time): stepping down, standing by again");
                port.stand_by();
                acting.clear();
                wind_down(&veem, &front, loops, Duration::from_secs(1)).await;
            }
            server.await??;
            // A clean stop hands the site over at once.
            if let Some(leader) = resign {
                leader.resign().await;
            }
        }
    }
    if let Some(m) = metrics_listener {
        m.stop().await;
    }
    if let Some(w) = web_console {
        w.await??;
    }
    tracing::info!("stopped");
    Ok(())
}

/// How a VEEM starts acting for its site.
#[derive(Clone, Copy)]
struct Start {
    /// The operator's word that domains an empty database does not know
    /// are to be destroyed ([`crate::workflows::reconcile::Strays`]).
    destroy_strays: bool,
    /// Whether hosts the planner already knows are given up to ten
    /// heartbeat rounds to answer before the reconcile (a start: they may
    /// be starting too), or one (a takeover from a standby's copy: they
    /// answered the old leader a moment ago, and one silent now is counted
    /// as failing from the start).
    wait_for_known_hosts: bool,
}

/// Acts for the site with `veem`, its `front` answering: starts up (the
/// first heartbeats, reconcile) and runs the loops, until `stop` or
/// `lost`. Returns the loops, if they were started.
async fn act(veem: &Arc<Veem>, front: &Front, lost: &CancellationToken, stop: &CancellationToken, start: Start) -> Option<Loops> {
    let started = tokio::select! {
        () = stop.cancelled() => false,
        () = lost.cancelled() => false,
        () = start_up(veem, start) => true,
    };
    if !started {
        return None;
    }
    front.started().await;
    let loops = Loops::start(veem);
    tracing::info!(site = %veem.core.cfg.site_id, "VMI serving");
    interfaces::daemon::notify_ready();
    tokio::select! {
        () = stop.cancelled() => {}
        () = lost.cancelled() => {}
    }
    Some(loops)
}

/// Stops acting: health NOT_SERVING, the loops' rounds and then the
/// background work they or the calls started (a deploy's boots, a
/// recovery, a migration) given `grace`, their steps committed
/// atomically, so that what the grace period cuts is resumed at the next
/// start (reconcile, intents).
async fn wind_down(veem: &Arc<Veem>, front: &Front, loops: Option<Loops>, grace: Duration) {
    front.stopping().await;
    veem.core.stopping.cancel();
    if let Some(loops) = loops {
        loops.shutdown(grace).await;
    }
    let cut = veem.core.drain_tasks(grace).await;
    if cut > 0 {
        tracing::warn!(tasks = cut, ?grace, "background work still under way after the grace period: cut");
    }
}

/// Campaigns for site `cfg.site_id`'s leadership in its etcd cluster
/// (`crate::leadership`), the port answering as a standby (naming the
/// leader, or saying the store does not answer) and the site's records
/// kept current meanwhile (`core::replica`); once elected, the VEEM is
/// opened ([`open`]); elected but unable to open it (the store stopped
/// answering, the lease lost meanwhile), it hands the leadership back and
/// campaigns again. The VEEM, its leadership and whether it took over
/// from its standby's copy; `None` when stopped first. Errors: the cluster's
/// configuration, a database of another site or format.
async fn lead(
    cfg: &VeemConfig,
    port: &Arc<Port>,
    stop: &CancellationToken,
    metrics: &Arc<crate::metrics::VeemMetrics>,
) -> Result<Option<(Arc<Veem>, Leader, bool)>> {
    let engine = Arc::new(EtcdEngine::connect(&cfg.store.etcd(&cfg.site_id))?);
    let leadership = Arc::new(Leadership::new(
        engine.waiting_client().await?,
        engine.election(),
        &cfg.advertised(),
        cfg.store.lease_ttl,
    ));
    tracing::info!(site = %cfg.site_id, endpoint = %cfg.advertised(), "standing by: campaigning for the site's leadership");
    // Who leads, or why none can, for the standby's answers, until this
    // VEEM does.
    let watching = CancellationToken::new();
    let _watching = watching.clone().drop_guard();
    tokio::spawn({
        let (leadership, port) = (leadership.clone(), port.clone());
        async move {
            while !watching.is_cancelled() {
                port.set_leader(leadership.leader_endpoint().await);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    loop {
        // The site's records and planner, kept current meanwhile, so that
        // a takeover does not read them all again.
        let replica = Replica::follow(engine.clone(), renew_ahead_s(cfg), Arc::new(crate::ports::SystemClock));
        let leader = loop {
            let won = tokio::select! {
                () = stop.cancelled() => return Ok(None),
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
        tracing::info!(site = %cfg.site_id, epoch = leader.epoch, "leading the site");
        match open(cfg, &engine, &leader, replica, metrics.clone()).await {
            Ok((veem, took_over)) => {
                port.set_leader(Ok(Some(cfg.advertised())));
                return Ok(Some((veem, leader, took_over)));
            }
            // The store stopped answering, or this VEEM lost the
            // leadership meanwhile: hand it over and stand by again.
            Err(e)
                if matches!(
                    crate::core::store_error_in(&e),
                    Some(StoreError::Unavailable { .. } | StoreError::Fenced(_))
                ) =>
            {
                tracing::warn!(error = %format!("{e:#}"), "elected, but cannot open the site's state: standing by again");
                engine.fence_with(None);
                leader.resign().await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                leader.resign().await;
                return Err(e);
            }
        }
    }
}

/// The VEEM of `leader` over the site's store in `engine`: the store's
/// commits fenced by the election key, its state taken from `replica`
/// (or read from the store when the copy cannot be used), its host and
/// peer calls carrying the epoch; and whether it came from the copy (a
/// takeover from a standby that followed the site). Errors: the store's
/// ([`StoreError::Unavailable`], [`StoreError::Fenced`]), a database of another site or
/// format.
async fn open(
    cfg: &VeemConfig,
    engine: &Arc<EtcdEngine>,
    leader: &Leader,
    replica: Replica,
    metrics: Arc<crate::metrics::VeemMetrics>,
) -> Result<(Arc<Veem>, bool)> {
    engine.fence_with(Some((leader.key.clone(), leader.epoch)));
    let what = format!("etcd {:?}", engine.prefix());
    let store = Store::on(engine.clone(), &what)?;
    let loaded = replica.take(&store, leader.epoch, CATCH_UP).await?;
    let from_copy = loaded.is_some();
    tracing::info!(from_copy, "opening the site's state");
    Ok((Veem::open_leading(cfg.clone(), store, leader.epoch, loaded, metrics)?, from_copy))
}

/// What the VEEM does before it serves: learns its hosts' capacities and
/// profiles (first heartbeats), undoes what a crash cut short, reconciles
/// its records with what the VEEHs run. Cancel-safe as a crash is: every
/// step commits atomically.
async fn start_up(veem: &Arc<Veem>, start: Start) {
    let began = Instant::now();
    for _ in 0..10 {
        loops::heartbeat_round(veem).await;
        // Not waited for: a host that answered, one failed already before
        // this start, and after a takeover one the planner knows.
        let settled = |h: &String| {
            let p = veem.core.planner();
            veem.core.hosts.health(h) == Health::Up || p.host_down(h).is_some() || !start.wait_for_known_hosts && p.host(h).is_some()
        };
        if veem.core.hosts.names().iter().all(settled) {
            break;
        }
        veem.core.clock.sleep(Duration::from_millis(500)).await;
    }
    let heartbeats = began.elapsed();
    let strays = if start.destroy_strays {
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
    let reconciling = Instant::now();
    if let Err(e) = veem.reconcile.reconcile(strays).await {
        tracing::warn!(error = %format!("{e:#}"), "reconciliation incomplete");
    }
    tracing::info!(
        heartbeats_ms = heartbeats.as_millis() as u64,
        reconcile_ms = reconciling.elapsed().as_millis() as u64,
        "started up: the hosts' first heartbeats, then the reconcile"
    );
    veem.resizing.roll_back_cut_short().await;
    veem.rollouts.resume_all();
    // Hosts the site had before: from now on, silence counts against them
    // even if they never answered since this start (a host that died while
    // the VEEM was down is declared failed and its VEEs recovered).
    for h in veem.core.hosts.names() {
        if veem.core.planner.lock().unwrap().host(&h).is_some() {
            veem.core.hosts.mark_known(&h);
        }
    }
    // What reading the database and reconciling freed goes back to the
    // system (at 100,000 VEEs, tens of MiB of decoding's temporaries).
    interfaces::daemon::return_freed_memory();
}
