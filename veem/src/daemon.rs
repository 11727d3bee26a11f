//! `veem serve`: opens the state, registers the site's hosts with the
//! planner, reconciles with what the VEEHs run, then serves the VMI and runs
//! the heartbeat, scheduler, accounting and proposal loops.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::config::VeemConfig;
use crate::hosts::Health;
use crate::manager::Veem;
use crate::planner::{HostSpec, Profile, Resources};
use crate::server::VmiService;

/// Runs the VEEM of `config` until Ctrl-C.
pub async fn run(config: &Path) -> Result<()> {
    let cfg = VeemConfig::load(config)?;
    let listen = cfg.listen;
    let veem = Veem::open(cfg)?;
    // First heartbeats: learn capacities and profiles, then reconcile.
    for _ in 0..10 {
        heartbeat_round(&veem).await;
        if veem.hosts.names().iter().all(|h| veem.hosts.health(h) == Health::Up) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if let Err(e) = veem.reconcile().await {
        tracing::warn!(error = %format!("{e:#}"), "reconciliation incomplete");
    }
    spawn_heartbeats(&veem);
    veem.spawn_scheduler();
    veem.spawn_accounting();
    veem.spawn_peer_watch();
    veem.spawn_proposals();
    tracing::info!(site = %veem.cfg.site_id, %listen, "VMI listening");
    tonic::transport::Server::builder()
        .add_service(VmiService::new(veem))
        .serve_with_shutdown(listen, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// One heartbeat to every host, all at once (each bounded by its own
/// timeout, so a silent host delays nobody); then registers new hosts with
/// the planner, brings recovered hosts back, and sends failed hosts to
/// recovery.
async fn heartbeat_round(veem: &Arc<Veem>) {
    let names = veem.hosts.names();
    let before: Vec<Health> = names.iter().map(|h| veem.hosts.health(h)).collect();
    let beats = futures::future::join_all(names.iter().map(|h| veem.hosts.heartbeat(h, veem.cfg.heartbeat_miss_limit))).await;
    for ((h, before), (after, info)) in names.into_iter().zip(before).zip(beats) {
        if let Some(i) = info {
            let known = veem.planner.lock().unwrap().host(&h).is_some();
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
        if after == Health::Failed && before != Health::Failed {
            tracing::error!(host = %h, "host missed its heartbeats: failed");
            let veem = veem.clone();
            tokio::spawn(async move {
                if let Err(e) = veem.recover_host(&h).await {
                    tracing::error!(host = %h, error = %format!("{e:#}"), "recovery failed");
                }
            });
        }
    }
}

fn spawn_heartbeats(veem: &Arc<Veem>) {
    let veem = veem.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(veem.cfg.heartbeat_interval).await;
            heartbeat_round(&veem).await;
        }
    });
}
