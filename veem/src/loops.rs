//! The VEEM's long-running loops, apart from the request handlers:
//! heartbeats (`heartbeat_interval`, paced: `max_heartbeats_per_second`), the scheduler (every second: windows
//! and checkpoints), checkpoints' replication (every second), accounting (`usage_interval`), migration proposals
//! (`proposals.interval`), the elasticity rules (`elasticity_interval`),
//! the peer watch (`heartbeat_interval`) and the event log's retention
//! (`events.prune_interval`). Each
//! runs one round per period; [`Loops::shutdown`] lets the round under way
//! end (within a grace period) and starts no other. The loops are tasks
//! of the core's one task set ([`crate::core::Core::spawn_task`]), which
//! the daemon's stop drains with the background work they start; their
//! handles are kept so that the loops alone can be stopped (a leader that
//! steps down keeps serving).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::domain::Health;
use crate::hosts::pacing::Pacing;
use crate::manager::Veem;
use crate::planner::{HostSpec, Profile, Resources};

/// The running loops of one VEEM.
pub struct Loops {
    stop: CancellationToken,
    /// The loops' tasks, in the core's task set.
    tasks: Vec<JoinHandle<()>>,
    /// The core's clock: the grace of a shutdown runs on it.
    clock: Arc<dyn crate::ports::Clock>,
}

impl Loops {
    /// Starts every loop of `veem`.
    pub fn start(veem: &Arc<Veem>) -> Loops {
        let mut loops = Loops {
            stop: CancellationToken::new(),
            tasks: Vec::new(),
            clock: veem.core.clock.clone(),
        };
        let cfg = veem.core.config();
        loops.spawn(veem, cfg.heartbeat_interval, 0usize, |veem, mut cursor| async move {
            heartbeat_turn(&veem, &mut cursor).await;
            cursor
        });
        loops.spawn(
            veem,
            cfg.heartbeat_interval,
            veem.reconcile.take_watch_seed(),
            |veem, mut watch| async move {
                veem.reconcile.domain_watch_round(&mut watch).await;
                watch
            },
        );
        loops.spawn(veem, Duration::from_secs(1), (), |veem, _| async move {
            veem.lifecycle.scheduler_round();
            veem.windows.renew_windows().await;
        });
        // Checkpoints' copies where peer sites need them: the ones due
        // (after a failure, a restart or a takeover) started again.
        loops.spawn(veem, Duration::from_secs(1), (), |veem, _| async move {
            if let Err(e) = veem.checkpoints.replicator.pass().await {
                tracing::warn!(error = %format!("{e:#}"), "checkpoint replication pass");
            }
        });
        // Steps a crash cut short whose undo could not finish at start-up,
        // and migrations left running (a host or a peer silent then).
        loops.spawn(veem, cfg.usage_interval.max(Duration::from_secs(1)), (), |veem, _| async move {
            if let Err(e) = veem.intents.retry_left().await {
                tracing::warn!(error = %format!("{e:#}"), "cannot read the intents a crash left");
            }
            if let Err(e) = veem.migration.settle_left().await {
                tracing::warn!(error = %format!("{e:#}"), "cannot settle the migrations left running");
            }
        });
        let usage = cfg.usage_interval.max(Duration::from_secs(1));
        loops.spawn(
            veem,
            usage,
            (Default::default(), 0usize),
            |veem, (mut last, mut cursor)| async move {
                veem.accounting.paced_round(&mut last, &mut cursor).await;
                (last, cursor)
            },
        );
        loops.spawn(
            veem,
            cfg.elasticity_interval.max(Duration::from_secs(1)),
            (),
            |veem, _| async move {
                veem.elasticity.round().await;
            },
        );
        loops.spawn(veem, cfg.proposals.interval, (), |veem, _| async move {
            if let Err(e) = veem.proposals.proposal_pass() {
                tracing::warn!(error = %format!("{e:#}"), "proposal pass failed");
            }
        });
        loops.spawn(veem, cfg.heartbeat_interval, HashMap::new(), |veem, mut misses| async move {
            veem.peer_watch.watch_round(&mut misses).await;
            misses
        });
        loops.spawn(veem, cfg.events.prune_interval, (), |veem, _| async move {
            if let Err(e) = veem.core.prune_events().await {
                tracing::warn!(error = %format!("{e:#}"), "cannot prune the event log");
            }
        });
        loops
    }

    /// A loop: every `period`, one `round` of `veem`, which takes the
    /// loop's state (`S`, carried from round to round) and gives it back.
    fn spawn<S, F, Fut>(&mut self, veem: &Arc<Veem>, period: Duration, mut state: S, round: F)
    where
        S: Send + 'static,
        F: Fn(Arc<Veem>, S) -> Fut + Send + 'static,
        Fut: Future<Output = S> + Send,
    {
        let (veem, stop) = (veem.clone(), self.stop.clone());
        self.tasks.push(veem.clone().core.spawn_task(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = veem.core.clock.sleep(period) => {}
                }
                state = round(veem.clone(), state).await;
            }
        }));
    }

    /// Stops every loop: no round starts any more, the rounds under way
    /// get `grace` to end, then they are aborted.
    pub async fn shutdown(self, grace: Duration) {
        self.stop.cancel();
        let aborts: Vec<_> = self.tasks.iter().map(|t| t.abort_handle()).collect();
        if crate::ports::within(&*self.clock, grace, futures::future::join_all(self.tasks))
            .await
            .is_none()
        {
            tracing::warn!(?grace, "loops still busy after the grace period: aborted");
            aborts.iter().for_each(|a| a.abort());
        }
    }
}

/// The pacing of this VEEM's heartbeats ([`crate::hosts::pacing`]).
pub(crate) fn pacing(veem: &Veem) -> Pacing {
    let cfg = veem.core.config();
    Pacing::new(veem.core.hosts.names().len(), cfg.heartbeat_interval, cfg.max_heartbeats_per_second)
}

/// One round of the heartbeat loop: the next hosts in turn from `cursor`
/// on, as many as the pacing allows a round ([`heartbeat_hosts`]).
pub(crate) async fn heartbeat_turn(veem: &Arc<Veem>, cursor: &mut usize) {
    let names = crate::hosts::pacing::turn(&veem.core.hosts.names(), cursor, pacing(veem).per_round);
    heartbeat_hosts(veem, names).await;
}

/// One heartbeat to every host (at start-up, and in tests).
pub(crate) async fn heartbeat_round(veem: &Arc<Veem>) {
    heartbeat_hosts(veem, veem.core.hosts.names()).await;
}

/// One heartbeat to each of `names`, all at once (each bounded by its own
/// timeout, so a silent host delays nobody); then registers new hosts with
/// the planner, brings recovered hosts back, and sends failed hosts to
/// recovery.
async fn heartbeat_hosts(veem: &Arc<Veem>, names: Vec<String>) {
    let before: Vec<Health> = names.iter().map(|h| veem.core.hosts.health(h)).collect();
    let beats = futures::future::join_all(
        names
            .iter()
            .map(|h| veem.core.hosts.heartbeat(h, veem.core.cfg.heartbeat_miss_limit)),
    )
    .await;
    for ((h, before), (after, info)) in names.into_iter().zip(before).zip(beats) {
        if info.is_none() && matches!(after, Health::Missing(_) | Health::Failed) {
            veem.core.metrics.heartbeat_missed(&h);
        }
        if let Some(i) = info {
            let known = veem.core.planner.lock().unwrap().host(&h).is_some();
            if known {
                // Load-aware rank follows what the host measures.
                let _ = veem.core.planner.lock().unwrap().set_measured_load(&h, i.cpu_load);
            }
            if !known {
                let p = i.profile.unwrap_or_default();
                let spec = HostSpec::new(
                    &h,
                    Resources::new(i.vcpus, i.memory_mib, i.disk_gib),
                    &veem.core.cfg.site_id,
                    veem.core.hosts.region(&h).unwrap_or_else(|| veem.core.cfg.site_id.clone()),
                )
                .with_profile(Profile {
                    arch: p.arch,
                    machine: p.machine,
                    qemu_version: p.qemu_version,
                    libvirt_version: p.libvirt_version,
                    accel: p.accel,
                    cpu_model: p.cpu_model,
                });
                if let Err(e) = veem.core.planner.lock().unwrap().add_host(spec) {
                    tracing::warn!(host = %h, error = %e, "cannot add host to the planner");
                }
                let _ = veem.core.persist_planner();
                veem.core.event("", "", "host-up", format!("{h} registered"));
            } else if before == Health::Failed || veem.core.planner.lock().unwrap().host_down(&h).is_some() && before != Health::Up {
                veem.reconcile.fence_returning_host(&h).await;
                let _ = veem.core.planner.lock().unwrap().set_host_up(&h);
                let _ = veem.core.persist_planner();
                veem.core.event("", "", "host-up", format!("{h} answers again"));
            }
        }
        if after == Health::Failed && before == Health::Failed {
            // Still silent: VRM again (V §4.4: every slot while it is
            // down), and its block moves on, so that no new VEE is placed
            // on it until it answers again.
            if let Err(e) = veem.remapping.remap_failed_host(&h).await {
                tracing::warn!(host = %h, error = %format!("{e:#}"), "VRM remapping");
            }
        }
        if after == Health::Failed && before != Health::Failed {
            tracing::error!(host = %h, "host missed its heartbeats: failed");
            let recovery = veem.recovery.clone();
            veem.core.spawn(async move {
                if let Err(e) = recovery.recover_host(&h).await {
                    tracing::error!(host = %h, error = %format!("{e:#}"), "recovery failed");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests;
