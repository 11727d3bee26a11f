//! Restore: a checkpoint read back on any host whose profile and save
//! formats allow. The disk overlay is put in place first (QEMU opens it as
//! it starts); the memory state of a chunked sequential checkpoint is then
//! streamed to QEMU through a FIFO while its chunks are read from the cache
//! or fetched (`crate::chunks::stream`), so loading starts at once. A
//! mapped-ram state (read at fixed offsets) or a whole one is written to a
//! file first. Should libvirt refuse the FIFO, the restore is made again
//! from an assembled file.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use interfaces::vhi::HostEventKind;
use interfaces::vhi::{CheckpointLayout, CheckpointRecord, RestoreRequest, SaveFormat, VeeStatus};
use interfaces::BlobId;

use super::{incompatibility, unreadable};
use crate::domain_xml::{self, PathMap};
use crate::error::HostError;
use crate::host::Host;
use crate::host::ImagePaths;
use crate::qemu_img;
use crate::repository::Part;
use crate::vee_store::VeeRecord;

impl Host {
    /// Restores a checkpoint (taken here or on any compatible host) and
    /// resumes the guest. Refused, naming the field, when the compatibility
    /// profile does not match, or when the VEE already runs here.
    pub async fn restore(&self, req: RestoreRequest) -> Result<VeeStatus> {
        let cp = req.checkpoint.ok_or_else(|| HostError::field("checkpoint", "is required"))?;
        cp.check_format()?;
        let spec = req
            .spec
            .or(cp.spec.clone())
            .ok_or_else(|| HostError::field("spec", "is required"))?;
        let mut cp = cp;
        cp.upgrade();
        let taken = cp.profile.clone().context("checkpoint has no compatibility profile")?;
        let here = self.profile().await?;
        // Every reason, the save format's first: a stock host refuses a
        // mapped-ram checkpoint of a newer QEMU for both.
        let why: Vec<String> = [unreadable(&cp, &here), incompatibility(&taken, &here)]
            .into_iter()
            .flatten()
            .collect();
        if !why.is_empty() {
            return Err(HostError::Incompatible {
                checkpoint: cp.checkpoint_id.clone(),
                host: self.cfg.host.clone(),
                why: why.join("; "),
            }
            .into());
        }
        let rec = VeeRecord::from_spec(&spec)?;
        let vee_id = rec.vee_id.clone();
        let _g = self.lock_vee(&vee_id).await;
        let fence = Some(req.fence_owner.as_str()).filter(|o| !o.is_empty());
        self.ensure_no_domain(&vee_id, fence).await?;
        let mut reply = Default::default();
        let paths = self.ensure_images(&rec, &mut reply).await?;
        self.vees.save(&rec)?;
        self.write_seed(&rec).await?;
        let dir = self.vees.dir(&vee_id);
        let memory = dir.join(format!("restore-{}.state", cp.checkpoint_id));
        let mem_id: BlobId = cp.memory_blob.parse().map_err(|e| HostError::field("checkpoint.memory_blob", e))?;
        let chunked = cp.layout() == CheckpointLayout::Chunked;
        let streamed = chunked && cp.save_format() == SaveFormat::Sequential;
        let overlay = self.vees.overlay(&vee_id);
        // The disk first, and beside it the memory state's file: the
        // cache's part as it is, or, unless the memory is streamed, pulled.
        let disk = self.pull_overlay(&cp, &rec, &paths, &dir, &overlay);
        let pull_memory = || async {
            self.pull(&vee_id, &mem_id, cp.memory_bytes, Part::Memory, chunked, &memory)
                .await
                .context("pull checkpoint memory")
        };
        let mem = async {
            if chunked && self.link_cached(&mem_id, &memory) {
                return anyhow::Ok(true);
            }
            if !streamed {
                pull_memory().await?;
            }
            anyhow::Ok(false)
        };
        let ((), cached) = tokio::try_join!(disk, mem)?;
        let load = |from: PathBuf| self.load(&rec, &paths, &overlay, from);
        let mut how = "file";
        let mut from_cache = None;
        if cached {
            match load(memory.clone()).await {
                Ok(()) => {
                    how = "cached";
                    from_cache = Some(Ok(()));
                }
                Err(e) => {
                    // A part QEMU cannot load is not kept: read its chunks.
                    tracing::warn!(vee = %vee_id, error = %format!("{e:#}"), "restore from the cached memory state failed; reading it from its chunks");
                    self.chunks.forget(&mem_id);
                    let _ = std::fs::remove_file(&memory);
                    if !streamed {
                        pull_memory().await?;
                    }
                }
            }
        }
        let result = if let Some(r) = from_cache {
            r
        } else if streamed {
            match self.load_streamed(&vee_id, &mem_id, cp.memory_bytes, &memory, load).await {
                Ok(()) => {
                    how = "streamed";
                    Ok(())
                }
                Err(Streamed::Libvirt(e)) => {
                    tracing::warn!(vee = %vee_id, error = %format!("{e:#}"), "restore through a FIFO refused; restoring from the assembled file");
                    pull_memory().await?;
                    load(memory.clone()).await
                }
                Err(Streamed::Chunks(e)) => Err(e),
            }
        } else {
            load(memory.clone()).await
        };
        let _ = std::fs::remove_file(&memory);
        result?;
        self.hv
            .metrics
            .restores
            .get_or_create(&crate::metrics::RestoreLabels { memory: how })
            .inc();
        self.event(&vee_id, HostEventKind::Restored, cp.checkpoint_id.clone());
        self.sync_guest_clock(&vee_id, "restore");
        tracing::info!(vee = %vee_id, checkpoint = %cp.checkpoint_id, memory = how, "restored");
        self.status(&vee_id).await
    }

    /// The checkpoint's disk overlay, pulled, rebased onto this host's copy
    /// of the base image and put at `overlay`; nothing without a disk.
    async fn pull_overlay(&self, cp: &CheckpointRecord, rec: &VeeRecord, paths: &ImagePaths, dir: &Path, overlay: &Path) -> Result<()> {
        if cp.disk_blob.is_empty() {
            return Ok(());
        }
        let disk_id: BlobId = cp.disk_blob.parse().map_err(|e| HostError::field("checkpoint.disk_blob", e))?;
        let tmp = dir.join("overlay.restore.qcow2");
        let _ = std::fs::remove_file(&tmp);
        let chunked = cp.layout() == CheckpointLayout::Chunked;
        self.pull(&rec.vee_id, &disk_id, cp.disk_bytes, Part::Disk, chunked, &tmp)
            .await
            .context("pull checkpoint disk")?;
        let (t, base) = (tmp.clone(), paths.base.clone());
        tokio::task::spawn_blocking(move || match base {
            Some(base) => qemu_img::rebase_unsafe(&t, &base),
            None => qemu_img::inspect(&t, qemu_img::Layer::Base).map(|_| ()),
        })
        .await?
        .with_context(|| format!("field `checkpoint.disk_blob` ({disk_id}) or `image` ({})", rec.image))?;
        std::fs::rename(&tmp, overlay)?;
        Ok(())
    }

    /// Starts the VEE from the memory state at `memory` (a file or a FIFO):
    /// reads its domain XML, points it at this host's files and networks,
    /// and restores it running.
    async fn load(&self, rec: &VeeRecord, paths: &ImagePaths, overlay: &Path, memory: PathBuf) -> Result<()> {
        let vee_id = &rec.vee_id;
        let m = memory.display().to_string();
        let saved = self.blocking(move |hv| hv.save_image_xml(&m)).await?;
        let map = PathMap {
            disk: paths.base.as_ref().map(|_| overlay.to_path_buf()),
            kernel: paths.kernel.clone(),
            initrd: paths.initrd.clone(),
            console: Some(self.vees.console(vee_id)),
            seed: rec.cloud_init.as_ref().map(|_| self.vees.seed(vee_id)),
            bridges: rec
                .nics
                .iter()
                .map(|n| (n.mac.clone(), crate::network::bridge_of(n.vni, n.overlay_port)))
                .collect(),
        };
        let xml = domain_xml::rewrite_for(&saved, &map, &self.cfg.host)?;
        std::fs::write(self.vees.dir(vee_id).join("domain.xml"), &xml)?;
        crate::network::ensure_networks(self.cfg.vtep(), &rec.nics).await?;
        let m = memory.display().to_string();
        self.blocking(move |hv| hv.restore(&m, &xml)).await
    }

    /// Links the host's cached part `index_id` at `dest` (see
    /// `crate::chunks::cache`): whether it is there.
    fn link_cached(&self, index_id: &BlobId, dest: &Path) -> bool {
        let Some(part) = self.chunks.whole(index_id) else { return false };
        let _ = std::fs::remove_file(dest);
        match std::fs::hard_link(&part, dest) {
            Ok(()) => true,
            Err(e) => {
                tracing::info!(index = %index_id, error = %e, "a cached checkpoint part cannot be linked; reading its chunks");
                false
            }
        }
    }

    /// Runs `load` on a FIFO at `path` that streams the chunked memory
    /// state `index_id` of `size` bytes (see the module documentation) of
    /// VEE `vee_id`, whose chunks are kept in the host's cache as a part
    /// once it loaded.
    async fn load_streamed<F>(&self, vee_id: &str, index_id: &BlobId, size: u64, path: &Path, load: impl FnOnce(PathBuf) -> F) -> Result<(), Streamed>
    where
        F: std::future::Future<Output = Result<()>>,
    {
        let client = self
            .repo
            .client()
            .context("a checkpoint in chunks is read from an image-repo site only")
            .map_err(Streamed::Chunks)?;
        let (index, index_bytes) = crate::chunks::assemble::index(client, index_id).await.map_err(Streamed::Chunks)?;
        if index.size != size {
            return Err(Streamed::Chunks(anyhow::anyhow!(
                "memory part of {} bytes, the record says {size}",
                index.size
            )));
        }
        let sink = self.chunks.sink(&crate::chunks::part_key(vee_id, Part::Memory));
        let feed = crate::chunks::Feed::new(path, client, &self.chunks, &index, sink.clone()).map_err(Streamed::Chunks)?;
        let load = load(path.to_path_buf());
        tokio::pin!(load);
        let result = tokio::select! {
            loaded = &mut load => loaded.map_err(Streamed::Libvirt),
            failed = feed.serve() => {
                // QEMU reads the end of the stream once the FIFO's writers
                // close, and libvirt gives the restore up: wait for it, so
                // no domain outlives the answer.
                let fetched = feed.fetched.load(Ordering::Relaxed);
                drop(feed);
                let _ = load.await;
                self.hv.metrics.restore_fetched.inc_by(fetched + index_bytes);
                return Err(Streamed::Chunks(failed));
            }
        };
        let fetched = feed.fetched.load(Ordering::Relaxed) + index_bytes;
        self.hv.metrics.restore_fetched.inc_by(fetched);
        drop(feed);
        if let (Ok(()), Some(sink)) = (&result, sink) {
            sink.keep(index_id.clone(), index);
        }
        tracing::info!(blob = %index_id, size, fetched, "checkpoint memory streamed from its chunks");
        result
    }

    /// VEE `vee_id`'s checkpoint `part`, blob `id` of `size` bytes (a
    /// chunk index when `chunked`), written to `dest`, verified.
    async fn pull(&self, vee_id: &str, id: &BlobId, size: u64, part: Part, chunked: bool, dest: &Path) -> Result<()> {
        if !chunked {
            let n = self.repo.pull_part(id, size, part, dest).await?;
            self.hv.metrics.restore_fetched.inc_by(n);
            return Ok(());
        }
        let client = self
            .repo
            .client()
            .context("a checkpoint in chunks is read from an image-repo site only")?;
        let key = crate::chunks::part_key(vee_id, part);
        let got = crate::chunks::assemble(client, &self.chunks, id, &key, dest).await?;
        self.hv.metrics.restore_fetched.inc_by(got.fetched);
        tracing::info!(blob = %id, size = got.size, fetched = got.fetched, "checkpoint part assembled from its chunks");
        anyhow::ensure!(got.size == size, "{part:?} part of {} bytes, the record says {size}", got.size);
        Ok(())
    }
}

/// Why a streamed restore failed: libvirt or QEMU refused it (the restore
/// is made again from a file), or the chunks could not be read (it fails).
enum Streamed {
    Libvirt(anyhow::Error),
    Chunks(anyhow::Error),
}
