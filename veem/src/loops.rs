//! The VEEM's long-running loops, apart from the request handlers:
//! heartbeats (`heartbeat_interval`), the scheduler (every second: windows
//! and checkpoints), accounting (`usage_interval`), migration proposals
//! (`proposals.interval`) and the peer watch (`heartbeat_interval`). Each
//! runs one round per period; [`Loops::shutdown`] lets the round under way
//! end (within a grace period) and starts no other.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::domain::Health;
use crate::manager::Veem;
use crate::planner::{HostSpec, Profile, Resources};

/// The running loops of one VEEM.
pub struct Loops {
    stop: CancellationToken,
    tasks: JoinSet<()>,
}

impl Loops {
    /// Starts every loop of `veem`.
    pub fn start(veem: &Arc<Veem>) -> Loops {
        let mut loops = Loops {
            stop: CancellationToken::new(),
            tasks: JoinSet::new(),
        };
        let cfg = veem.config();
        loops.spawn(
            veem,
            cfg.heartbeat_interval,
            (),
            |veem, _| async move { heartbeat_round(&veem).await },
        );
        loops.spawn(
            veem,
            cfg.heartbeat_interval,
            crate::reconcile::Missing::new(),
            |veem, mut missing| async move {
                veem.domain_watch_round(&mut missing).await;
                missing
            },
        );
        loops.spawn(veem, Duration::from_secs(1), (), |veem, _| async move {
            veem.scheduler_round();
            veem.renew_windows().await;
        });
        // Steps a crash cut short whose undo could not finish at start-up.
        loops.spawn(veem, cfg.usage_interval.max(Duration::from_secs(1)), (), |veem, _| async move {
            if let Err(e) = veem.undo_intents().await {
                tracing::warn!(error = %format!("{e:#}"), "cannot read the intents a crash left");
            }
        });
        let usage = cfg.usage_interval.max(Duration::from_secs(1));
        loops.spawn(veem, usage, HashMap::new(), |veem, mut last| async move {
            veem.accounting_round(&mut last).await;
            last
        });
        loops.spawn(
            veem,
            cfg.proposals.interval,
            crate::proposals::Seen::new(),
            |veem, mut seen| async move {
                if let Err(e) = veem.proposal_pass(&mut seen) {
                    tracing::warn!(error = %format!("{e:#}"), "proposal pass failed");
                }
                seen
            },
        );
        loops.spawn(veem, cfg.heartbeat_interval, HashMap::new(), |veem, mut misses| async move {
            veem.watch_round(&mut misses).await;
            misses
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
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = veem.clock.sleep(period) => {}
                }
                state = round(veem.clone(), state).await;
            }
        });
    }

    /// Stops every loop: no round starts any more, the rounds under way
    /// get `grace` to end, then they are aborted.
    pub async fn shutdown(mut self, grace: Duration) {
        self.stop.cancel();
        if tokio::time::timeout(grace, async { while self.tasks.join_next().await.is_some() {} })
            .await
            .is_err()
        {
            tracing::warn!(?grace, "loops still busy after the grace period: aborted");
            self.tasks.abort_all();
        }
    }
}

/// One heartbeat to every host, all at once (each bounded by its own
/// timeout, so a silent host delays nobody); then registers new hosts with
/// the planner, brings recovered hosts back, and sends failed hosts to
/// recovery.
pub(crate) async fn heartbeat_round(veem: &Arc<Veem>) {
    let names = veem.hosts.names();
    let before: Vec<Health> = names.iter().map(|h| veem.hosts.health(h)).collect();
    let beats = futures::future::join_all(names.iter().map(|h| veem.hosts.heartbeat(h, veem.cfg.heartbeat_miss_limit))).await;
    for ((h, before), (after, info)) in names.into_iter().zip(before).zip(beats) {
        if let Some(i) = info {
            let known = veem.planner.lock().unwrap().host(&h).is_some();
            if known {
                // Load-aware rank follows what the host measures.
                let _ = veem.planner.lock().unwrap().set_measured_load(&h, i.cpu_load);
            }
            if !known {
                let p = i.profile.unwrap_or_default();
                let spec = HostSpec::new(
                    &h,
                    Resources::new(i.vcpus, i.memory_mib, i.disk_gib),
                    &veem.cfg.site_id,
                    veem.hosts.region(&h).unwrap_or_else(|| veem.cfg.site_id.clone()),
                )
                .with_profile(Profile {
                    arch: p.arch,
                    machine: p.machine,
                    qemu_version: p.qemu_version,
                    libvirt_version: p.libvirt_version,
                    accel: p.accel,
                    cpu_model: p.cpu_model,
                });
                if let Err(e) = veem.planner.lock().unwrap().add_host(spec) {
                    tracing::warn!(host = %h, error = %e, "cannot add host to the planner");
                }
                let _ = veem.persist_planner();
                veem.event("", "", "host-up", format!("{h} registered"));
            } else if before == Health::Failed || veem.planner.lock().unwrap().host_down(&h).is_some() && before != Health::Up {
                veem.fence_returning_host(&h).await;
                let _ = veem.planner.lock().unwrap().set_host_up(&h);
                let _ = veem.persist_planner();
                veem.event("", "", "host-up", format!("{h} answers again"));
            }
        }
        if after == Health::Failed && before == Health::Failed {
            // Still silent: VRM again (V §4.4: every slot while it is
            // down), and its block moves on, so that no new VEE is placed
            // on it until it answers again.
            if let Err(e) = veem.remap_failed_host(&h).await {
                tracing::warn!(host = %h, error = %format!("{e:#}"), "VRM remapping");
            }
        }
        if after == Health::Failed && before != Health::Failed {
            tracing::error!(host = %h, "host missed its heartbeats: failed");
            let v = veem.clone();
            veem.spawn(async move {
                if let Err(e) = v.recover_host(&h).await {
                    tracing::error!(host = %h, error = %format!("{e:#}"), "recovery failed");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Loops;
    use crate::fakes::{eventually, FakeSite};

    fn heartbeats(site: &FakeSite) -> usize {
        site.host("h1").calls().iter().filter(|c| c.starts_with("host_info")).count()
    }

    #[tokio::test]
    async fn a_host_that_stays_silent_gets_no_new_vee_after_its_remapping_block() {
        let site = FakeSite::start(&["h1", "h2"], "heartbeat_miss_limit = 1\n").await;
        site.repo.blobs.lock().unwrap().insert(format!("sha256:{}", "5".repeat(64)));
        super::heartbeat_round(&site.veem).await; // both up
        site.host("h1").fail("HostInfo", tonic::Code::Unavailable, "host down");
        for _ in 0..3 {
            super::heartbeat_round(&site.veem).await;
        }
        eventually("h1 failed", || site.veem.hosts.health("h1") == crate::domain::Health::Failed).await;
        // An hour later h1 still does not answer.
        for _ in 0..3 {
            site.clock.advance_ms(20 * 60 * 1000);
            super::heartbeat_round(&site.veem).await;
        }
        let two = crate::fakes::STANDARD.replace("disk_gib = 1\n", "disk_gib = 1\ninstances = 2\n");
        let provider = crate::config::Role::Provider("acme".into());
        let svc = site.veem.deploy(&provider, &two).await.unwrap();
        for id in &svc.vees {
            assert_eq!(site.veem.vee(id).unwrap().host(), Some("h2"), "a VEE placed on the silent host");
        }
    }

    #[tokio::test]
    async fn load_aware_placement_follows_the_load_the_hosts_measure() {
        let site = FakeSite::start(&["h1", "h2"], "rank_policy = \"load-aware\"\n").await;
        site.repo.blobs.lock().unwrap().insert(format!("sha256:{}", "5".repeat(64)));
        let provider = crate::config::Role::Provider("acme".into());
        for (busy, idle) in [("h1", "h2"), ("h2", "h1")] {
            site.host(busy).script.lock().unwrap().cpu_load = 0.9;
            site.host(idle).script.lock().unwrap().cpu_load = 0.1;
            super::heartbeat_round(&site.veem).await;
            let svc = site.veem.deploy(&provider, crate::fakes::STANDARD).await.unwrap();
            let vee = site.veem.vee(&svc.vees[0]).unwrap();
            assert_eq!(vee.host(), Some(idle), "{busy} measured busy");
        }
        let vmi = crate::server::VmiService::handler(site.veem.clone());
        let loads: Vec<(String, f64)> = vmi.host_status().into_iter().map(|h| (h.name, h.cpu_load)).collect();
        assert_eq!(loads, [("h1".to_string(), 0.1), ("h2".to_string(), 0.9)]);
    }

    #[tokio::test]
    async fn the_loops_run_each_period_and_stop_for_good_on_shutdown() {
        let site = FakeSite::start(&["h1"], "heartbeat_interval = \"1s\"\n").await;
        let loops = Loops::start(&site.veem);
        eventually("a heartbeat", || heartbeats(&site) >= 1).await;
        let t = Instant::now();
        loops.shutdown(Duration::from_secs(5)).await;
        assert!(t.elapsed() < Duration::from_secs(1), "nothing hung: {:?}", t.elapsed());
        let after = heartbeats(&site);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(heartbeats(&site), after, "no round after the shutdown");
    }
}
