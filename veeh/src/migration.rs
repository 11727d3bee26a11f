//! Live migration between VEEHs on different libvirtds, with incremental
//! storage copy (DESIGN.md §7; shared/notes/libvirt-lab.md, "Live migration
//! between the sites").
//!
//! Destination: `prepare_incoming` pulls the images by ID, creates an empty
//! overlay on the base image and returns where to send the VEE. Source:
//! `migrate_out` rewrites its migratable domain XML with the destination's
//! paths and owner, and migrates live, peer to peer, copying only the
//! overlay's data. On failure libvirt keeps the VEE running at the source and
//! the destination's `abort_incoming` removes what was prepared.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use interfaces::vhi::{HostEventKind, IncomingTarget, MigrationPhase, MigrationProgress, VeeSpec, VeeStatus};
use tokio::sync::mpsc;

use crate::domain_xml::{self, PathMap};
use crate::host::{Host, OutgoingSet};
use crate::hypervisor;
use crate::qemu_img;
use crate::vee_store::VeeRecord;

impl Host {
    /// Destination side: images by ID, an empty overlay, and the target.
    pub async fn prepare_incoming(&self, spec: &VeeSpec) -> Result<IncomingTarget> {
        let mut rec = VeeRecord::from_spec(spec)?;
        let id = rec.vee_id.clone();
        let _g = self.lock_vee(&id).await;
        self.ensure_no_domain(&id, None).await?;
        let mut reply = Default::default();
        let paths = self.ensure_images(&rec, &mut reply).await?;
        rec.incoming = true;
        self.vees.save(&rec)?;
        self.write_seed(&rec).await?;
        let overlay = self.vees.overlay(&id);
        let _ = std::fs::remove_file(&overlay);
        if let Some(base) = &paths.base {
            let (base, o, size) = (base.clone(), overlay.clone(), rec.disk_gib * 1024 * 1024 * 1024);
            tokio::task::spawn_blocking(move || qemu_img::create_overlay(&base, &o, size))
                .await?
                .with_context(|| format!("VEE {id}: field `image` ({})", rec.image))?;
        }
        crate::network::ensure_networks(self.cfg.vtep(), &rec.nics).await?;
        let ds = self.domain_spec(&rec)?;
        let addr = &self.cfg.migration_address;
        self.event(&id, HostEventKind::Incoming, "prepared");
        Ok(IncomingTarget {
            vee_id: id.clone(),
            libvirt_uri: self.cfg.peer_libvirt_uri().to_string(),
            migration_uri: format!("tcp://{addr}"),
            disks_uri: format!("tcp://{addr}"),
            disk_path: ds.disk.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            kernel_path: ds.kernel.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            initrd_path: ds.initrd.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            console_path: ds.console.display().to_string(),
            seed_path: ds.seed.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            dest_xml: domain_xml::generate(&ds),
            host: self.cfg.host.clone(),
        })
    }

    /// Destination side: the VEE arrived and runs here; adopt it.
    pub async fn complete_incoming(&self, vee_id: &str) -> Result<VeeStatus> {
        let mut rec = self.vees.get(vee_id)?;
        if self.domain_state(vee_id).await?.is_none() {
            bail!("VEE {vee_id} has not arrived on {}", self.cfg.host);
        }
        rec.incoming = false;
        self.vees.save(&rec)?;
        let id = vee_id.to_string();
        let xml = self.blocking(move |hv| hv.xml(&id, false)).await?;
        std::fs::write(self.vees.dir(vee_id).join("domain.xml"), xml)?;
        self.event(vee_id, HostEventKind::MigratedIn, "");
        self.sync_guest_clock(vee_id, "incoming migration");
        self.status(vee_id).await
    }

    /// Destination side: the migration failed; remove what was prepared
    /// (and a domain, should one have arrived).
    pub async fn abort_incoming(&self, vee_id: &str) -> Result<VeeStatus> {
        if let Some(rec) = self.vees.load(vee_id)? {
            if !rec.incoming {
                bail!("VEE {vee_id} runs on {} and is not an incoming migration", self.cfg.host);
            }
            let id = vee_id.to_string();
            self.blocking(move |hv| hv.destroy(&id)).await?;
            self.vees.remove(vee_id)?;
            crate::network::release_networks(&rec.nics).await;
            self.event(vee_id, HostEventKind::Incoming, "aborted");
        }
        self.status(vee_id).await
    }

    /// Source side: live-migrates `vee_id` to `target`, sending progress on
    /// `progress` every 500 ms and a final `done` or `failed` message with
    /// total time and downtime in ms. `limits` is (max downtime ms,
    /// bandwidth MiB/s), 0 for libvirt's default.
    pub async fn migrate_out(
        &self,
        vee_id: &str,
        target: IncomingTarget,
        limits: (u64, u64),
        progress: mpsc::Sender<MigrationProgress>,
    ) -> Result<()> {
        let rec = self.vees.get(vee_id)?;
        let _outgoing = Outgoing::mark(&self.outgoing, vee_id);
        let id = vee_id.to_string();
        let xml = self.blocking(move |hv| hv.xml(&id, true)).await?;
        let opt = |s: &str| (!s.is_empty()).then(|| std::path::PathBuf::from(s));
        let map = PathMap {
            disk: if rec.image.is_empty() { None } else { opt(&target.disk_path) },
            kernel: opt(&target.kernel_path),
            initrd: opt(&target.initrd_path),
            console: opt(&target.console_path),
            seed: opt(&target.seed_path),
            // The destination's bridges, as it generated them.
            bridges: domain_xml::bridges(&target.dest_xml).context("the destination's domain XML")?,
        };
        let dest_xml = domain_xml::rewrite_for(&xml, &map, &target.host).context("destination domain XML")?;
        self.event(vee_id, HostEventKind::Migrating, format!("to {}", target.host));
        let started = Instant::now();
        let hv = self.hv.clone();
        let (id, t) = (vee_id.to_string(), target.clone());
        let mut job = tokio::task::spawn_blocking(move || {
            hv.migrate(&id, &t.libvirt_uri, &dest_xml, &t.migration_uri, &t.disks_uri, limits.0, limits.1)
        });
        let _ = progress
            .send(MigrationProgress {
                phase: MigrationPhase::Preparing as i32,
                ..Default::default()
            })
            .await;
        // The caller gone (its VEEM killed or taken over, the stream
        // dropped): nobody would complete the VEE at the destination, so
        // the migration is aborted and the VEE runs on here, which the next
        // VEEM finds (the domain no longer `migrating_out`).
        let mut abandoned = false;
        let outcome = loop {
            tokio::select! {
                r = &mut job => break r?,
                _ = progress.closed(), if !abandoned => {
                    abandoned = true;
                    tracing::warn!(vee = %vee_id, to = %target.host, "the migration's caller went away: aborting it");
                    let (hv, id) = (self.hv.clone(), vee_id.to_string());
                    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || hv.abort_job(&id)).await {
                        tracing::warn!(vee = %vee_id, error = %format!("{e:#}"), "the migration could not be aborted: it ends as it would have");
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(500)) => {
                    let hv = self.hv.clone();
                    let id = vee_id.to_string();
                    if let Ok(Some((done, left, total))) = tokio::task::spawn_blocking(move || hv.job_progress(&id)).await {
                        let _ = progress.send(MigrationProgress {
                            phase: MigrationPhase::Copying as i32, data_processed: done, data_remaining: left, data_total: total,
                            total: interfaces::time::duration_ms(started.elapsed().as_millis() as u64), ..Default::default()
                        }).await;
                    }
                }
            }
        };
        let total_ms = started.elapsed().as_millis() as u64;
        match outcome {
            Ok(()) => {
                let (uri, id) = (target.libvirt_uri.clone(), vee_id.to_string());
                let downtime = tokio::task::spawn_blocking(move || hypervisor::completed_job_downtime(&uri, &id))
                    .await
                    .ok()
                    .flatten();
                let nics = self.vees.load(vee_id)?.map(|r| r.nics).unwrap_or_default();
                self.vees.remove(vee_id)?;
                crate::network::release_networks(&nics).await;
                self.event(vee_id, HostEventKind::MigratedOut, format!("to {} in {total_ms} ms", target.host));
                tracing::info!(vee = %vee_id, to = %target.host, total_ms, ?downtime, "migrated");
                let _ = progress
                    .send(MigrationProgress {
                        phase: MigrationPhase::Done as i32,
                        total: interfaces::time::duration_ms(total_ms),
                        downtime: interfaces::time::duration_ms(downtime.unwrap_or(0)),
                        ..Default::default()
                    })
                    .await;
                Ok(())
            }
            Err(e) => {
                let msg = format!("{e:#}");
                tracing::warn!(vee = %vee_id, to = %target.host, error = %msg, "migration failed; VEE stays here");
                self.event(vee_id, HostEventKind::MigrationFailed, msg.clone());
                let _ = progress
                    .send(MigrationProgress {
                        phase: MigrationPhase::Failed as i32,
                        total: interfaces::time::duration_ms(total_ms),
                        error: msg.clone(),
                        ..Default::default()
                    })
                    .await;
                Err(e)
            }
        }
    }
}

/// A VEE marked as migrating out of this host ([`Host::migrate_out`]) for
/// as long as this guard lives: the call's whole run, whoever waits for it
/// (the VEEM that asked may have gone).
struct Outgoing {
    set: OutgoingSet,
    vee_id: String,
}

impl Outgoing {
    fn mark(set: &OutgoingSet, vee_id: &str) -> Self {
        set.lock().unwrap().insert(vee_id.to_string());
        Self {
            set: set.clone(),
            vee_id: vee_id.to_string(),
        }
    }
}

impl Drop for Outgoing {
    fn drop(&mut self) {
        self.set.lock().unwrap().remove(&self.vee_id);
    }
}
