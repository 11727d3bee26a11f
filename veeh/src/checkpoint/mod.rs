//! Whole-VM checkpoint and restore (H §4.4; shared/notes/libvirt-lab.md,
//! "Live whole-VM checkpoint").
//!
//! Checkpoint: a live external snapshot writes memory+device state to a file
//! while the guest runs on; at that instant the VEE's overlay freezes and
//! the guest writes to a new top layer, which is committed back into the
//! overlay once the overlay is read (so chains never grow). At an
//! image-repo site both parts go in chunks (`chunked`); at a registry site
//! the frozen overlay is copied and both parts are pushed whole. Restore
//! reads them on any host whose profile and save formats allow, points the
//! disk at the local copy of the base image and resumes the guest where it
//! was.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use interfaces::artifact::Layer;
use interfaces::vhi::HostEventKind;
use interfaces::vhi::{CheckpointLayout, CheckpointRecord, CompatibilityProfile, SaveFormat};

use crate::host::{now_ms, Host};
use crate::repository::{BaseImage, Part};
use crate::vee_store::VeeRecord;

mod chunked;
mod restore;

/// A checkpoint being taken: of which VEE, into which files.
struct Taking<'a> {
    vee_id: &'a str,
    cp_id: &'a str,
    /// The checkpoint's working directory, removed afterwards.
    dir: &'a std::path::Path,
    /// Where libvirt writes the memory state.
    memory: std::path::PathBuf,
    /// The disk's new top layer during the snapshot.
    top: std::path::PathBuf,
    /// The VEE's overlay, when it has a disk.
    overlay: Option<std::path::PathBuf>,
    /// The guest is stopped once its state is read.
    stop_after: bool,
}

/// Why a checkpoint taken under `taken` cannot be restored on `here`, naming
/// the first mismatching field; `None` when compatible. QEMU loads state
/// from its own or an older version, so `qemu_version` may be newer here.
pub fn incompatibility(taken: &CompatibilityProfile, here: &CompatibilityProfile) -> Option<String> {
    for (field, a, b) in [
        ("arch", &taken.arch, &here.arch),
        ("machine", &taken.machine, &here.machine),
        ("accel", &taken.accel, &here.accel),
        ("cpu_model", &taken.cpu_model, &here.cpu_model),
    ] {
        if a != b {
            return Some(format!(
                "compatibility profile field `{field}`: checkpoint has {a:?}, this host {b:?}"
            ));
        }
    }
    let v = |s: &str| s.split('.').map(|p| p.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
    if v(&taken.qemu_version) > v(&here.qemu_version) {
        return Some(format!(
            "compatibility profile field `qemu_version`: checkpoint has {:?}, this host's {:?} is older",
            taken.qemu_version, here.qemu_version
        ));
    }
    None
}

/// Why the memory state of checkpoint `cp` cannot be read on a host of
/// profile `here`: its save format is not one `here` lists (a host that
/// lists none reads sequential only). `None` when it can.
pub fn unreadable(cp: &CheckpointRecord, here: &CompatibilityProfile) -> Option<String> {
    let format = cp.save_format();
    if here.reads(format) {
        return None;
    }
    let reads: Vec<&str> = std::iter::once(SaveFormat::Sequential)
        .chain(here.save_formats().filter(|f| *f != SaveFormat::Sequential))
        .map(|f| f.as_str_name())
        .collect();
    Some(format!(
        "field `save_format`: the checkpoint's memory state is {}, which this host (QEMU {}, libvirt {}) cannot read; it reads {}",
        format.as_str_name(),
        here.qemu_version,
        here.libvirt_version,
        reads.join(", ")
    ))
}

impl Host {
    /// Takes a consistent whole-VM checkpoint of a running VEE and pushes it
    /// to the image repository. The VEE runs on afterwards unless
    /// `stop_after`. Downtime is libvirt's measurement when it gives one,
    /// else the wall time of the snapshot call (an upper bound).
    pub async fn checkpoint(self: &Arc<Self>, vee_id: &str, stop_after: bool) -> Result<CheckpointRecord> {
        let rec = self.vees.get(vee_id)?;
        let _g = self.lock_vee(vee_id).await;
        let cp_id = uuid::Uuid::new_v4().to_string();
        let dir = self.vees.dir(vee_id).join("checkpoints").join(&cp_id);
        std::fs::create_dir_all(&dir)?;
        let result = self.checkpoint_into(&rec, &cp_id, &dir, stop_after).await;
        let _ = std::fs::remove_dir_all(&dir);
        if result.is_ok() {
            self.event(vee_id, HostEventKind::Checkpointed, cp_id);
        }
        result
    }

    async fn checkpoint_into(
        self: &Arc<Self>,
        rec: &VeeRecord,
        cp_id: &str,
        dir: &std::path::Path,
        stop_after: bool,
    ) -> Result<CheckpointRecord> {
        let vee_id = rec.vee_id.clone();
        let taking = Taking {
            vee_id: &vee_id,
            cp_id,
            dir,
            memory: dir.join("memory.state"),
            top: self.vees.dir(&vee_id).join(format!("top-{cp_id}.qcow2")),
            overlay: (!rec.image.is_empty()).then(|| self.vees.overlay(&vee_id)),
            stop_after,
        };
        let started = Instant::now();
        let (downtime, layers, layout, save_format, (memory_bytes, disk_bytes), sent) = match self.repo.client() {
            Some(client) => {
                let taken = self.take_chunked(client, &taking).await?;
                let mut layers = vec![taken.memory.layer];
                let mut sent = taken.memory.sent;
                let mut disk_bytes = 0;
                if let Some(d) = taken.disk {
                    layers.push(d.layer);
                    sent += d.sent;
                    disk_bytes = d.size;
                }
                let sizes = (taken.memory.size, disk_bytes);
                (taken.downtime_ms, layers, CheckpointLayout::Chunked, taken.save_format, sizes, sent)
            }
            None => {
                let (downtime, layers) = self.take_whole(&taking).await?;
                let sizes = (layers[0].size, layers.get(1).map_or(0, |l| l.size));
                (
                    downtime,
                    layers,
                    CheckpointLayout::Whole,
                    SaveFormat::Sequential,
                    sizes,
                    sizes.0 + sizes.1,
                )
            }
        };
        let wall_ms = started.elapsed().as_millis() as u64;
        let record = CheckpointRecord {
            checkpoint_id: cp_id.to_string(),
            vee_id: vee_id.clone(),
            memory_blob: layers[0].digest.to_string(),
            memory_bytes,
            disk_blob: layers.get(1).map_or(String::new(), |l| l.digest.to_string()),
            disk_bytes,
            take_time: interfaces::time::timestamp_ms(now_ms()),
            downtime: interfaces::time::duration_ms(downtime.unwrap_or(wall_ms)),
            profile: Some(self.profile().await?),
            spec: Some(rec.to_spec()),
            host: self.cfg.host.clone(),
            format_version: interfaces::CHECKPOINT_RECORD_FORMAT,
            layout: layout as i32,
            save_format: save_format as i32,
            bytes_sent: sent,
            ..Default::default()
        };
        let base = match self.cached_artifact(rec) {
            Ok(Some(a)) => Some(BaseImage::Registry(Box::new(a))),
            _ => match self.boot_file_layers(rec) {
                Ok(files) => files.map(BaseImage::BootFiles),
                Err(e) => {
                    tracing::warn!(vee = %vee_id, error = %format!("{e:#}"), "no subject for this checkpoint's artifact");
                    None
                }
            },
        };
        self.hv.metrics.checkpoint_sent.inc_by(sent);
        if layout == CheckpointLayout::Whole {
            // At a registry site the artifact's tag is what keeps the
            // blobs: the checkpoint is not usable before it.
            self.repo
                .record_checkpoint(&record, &layers, base.as_ref())
                .await
                .context("record the checkpoint in the repository")?;
        } else {
            // At an image-repo site the indexes are in and the VEEM's pins
            // keep them: the artifact, for OCI tools, comes after the
            // answer (`veeh_checkpoint_artifacts_pending` while it is
            // written; a failure is logged by `record_checkpoint`).
            let (host, r) = (self.clone(), record.clone());
            let pending = self.hv.metrics.artifacts_pending.clone();
            pending.inc();
            tokio::spawn(async move {
                if let Err(e) = host.repo.record_checkpoint(&r, &layers, base.as_ref()).await {
                    tracing::warn!(checkpoint = %r.checkpoint_id, error = %format!("{e:#}"), "no OCI artifact for this checkpoint");
                }
                pending.dec();
            });
        }
        Ok(record)
    }

    /// libvirt's live external snapshot of `t.vee_id`: its memory state
    /// into `t.memory`, its disk going on in `t.top`. Returns the guest's
    /// downtime in ms when libvirt measured it.
    async fn live_snapshot(&self, t: &Taking<'_>) -> Result<Option<u64>> {
        let (id, m, top, name) = (
            t.vee_id.to_string(),
            t.memory.display().to_string(),
            t.top.display().to_string(),
            format!("cp-{}", t.cp_id),
        );
        self.blocking(move |hv| hv.live_snapshot(&id, &name, &m, &top)).await
    }

    /// The guest of a checkpoint taken to stop it (`stop_after`), stopped
    /// once its state is read.
    async fn stop_after_checkpoint(&self, vee_id: &str) -> Result<()> {
        let id = vee_id.to_string();
        self.blocking(move |hv| hv.destroy(&id)).await
    }

    /// The live snapshot into `memory`, then each part pushed whole (a
    /// site whose repository is an OCI registry): the frozen overlay
    /// copied, the top layer committed back, the guest stopped with
    /// `stop_after`. Returns libvirt's downtime
    /// and the parts' layers (memory first).
    async fn take_whole(&self, t: &Taking<'_>) -> Result<(Option<u64>, Vec<Layer>)> {
        let Taking {
            vee_id,
            cp_id,
            dir,
            memory,
            top,
            stop_after,
            ..
        } = t;
        let has_disk = t.overlay.is_some();
        let overlay = self.vees.overlay(vee_id);
        let downtime = self.live_snapshot(t).await?;
        let frozen = dir.join("disk.qcow2");
        if has_disk {
            tokio::fs::copy(&overlay, &frozen)
                .await
                .with_context(|| format!("copy frozen overlay {}", overlay.display()))?;
            let id = vee_id.to_string();
            self.blocking(move |hv| hv.block_commit_active(&id, std::time::Duration::from_secs(120)))
                .await?;
            let _ = std::fs::remove_file(top);
        }
        if *stop_after {
            self.stop_after_checkpoint(vee_id).await?;
        }
        let mut layers = vec![self
            .repo
            .push_part(vee_id, cp_id, Part::Memory, memory)
            .await
            .context("push checkpoint memory")?];
        if has_disk {
            layers.push(
                self.repo
                    .push_part(vee_id, cp_id, Part::Disk, &frozen)
                    .await
                    .context("push checkpoint disk")?,
            );
        }
        Ok((downtime, layers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> CompatibilityProfile {
        CompatibilityProfile {
            arch: "x86_64".into(),
            machine: "pc-i440fx-7.2".into(),
            qemu_version: "7.2.0".into(),
            libvirt_version: "9.0.0".into(),
            accel: "tcg".into(),
            cpu_model: "qemu64".into(),
            save_formats: vec![SaveFormat::Sequential as i32],
        }
    }

    #[test]
    fn same_profile_is_compatible_and_newer_qemu_may_load() {
        assert_eq!(incompatibility(&profile(), &profile()), None);
        let newer = CompatibilityProfile {
            qemu_version: "7.10.0".into(),
            ..profile()
        };
        assert_eq!(incompatibility(&profile(), &newer), None);
    }

    #[test]
    fn a_mapped_ram_checkpoint_is_refused_on_a_stock_host_with_the_reason() {
        let cp = CheckpointRecord {
            save_format: SaveFormat::MappedRam as i32,
            ..Default::default()
        };
        // Debian 12's QEMU 7.2 and libvirt 9.0 read sequential saves only.
        let why = unreadable(&cp, &profile()).unwrap();
        assert!(why.contains("`save_format`") && why.contains("SAVE_FORMAT_MAPPED_RAM"), "{why}");
        assert!(why.contains("QEMU 7.2.0") && why.contains("reads SAVE_FORMAT_SEQUENTIAL"), "{why}");
        // A backports host (QEMU 10.0, libvirt 11.3) reads it.
        let backports = CompatibilityProfile {
            save_formats: vec![SaveFormat::Sequential as i32, SaveFormat::MappedRam as i32],
            ..profile()
        };
        assert_eq!(unreadable(&cp, &backports), None);
        // A sequential checkpoint, or one from before formats, reads anywhere.
        let old_host = CompatibilityProfile {
            save_formats: vec![],
            ..profile()
        };
        assert_eq!(unreadable(&CheckpointRecord::default(), &old_host), None);
    }

    #[test]
    fn mismatch_names_the_field() {
        let kvm = CompatibilityProfile {
            accel: "kvm".into(),
            ..profile()
        };
        assert!(incompatibility(&profile(), &kvm).unwrap().contains("`accel`"));
        let older = CompatibilityProfile {
            qemu_version: "7.1.0".into(),
            ..profile()
        };
        assert!(incompatibility(&profile(), &older).unwrap().contains("`qemu_version`"));
        let q35 = CompatibilityProfile {
            machine: "pc-q35-7.2".into(),
            ..profile()
        };
        assert!(incompatibility(&profile(), &q35).unwrap().contains("`machine`"));
    }
}
