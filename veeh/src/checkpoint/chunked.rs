//! A live checkpoint taken in chunks (`crate::chunks`): the memory state
//! cut and pushed while libvirt writes it, the frozen overlay cut as soon
//! as the snapshot returns and pushed beside it, the top layer committed
//! back once the overlay was read, and each part's index pushed last (the
//! repository accepts an index only when it holds every chunk). Nothing is
//! recorded before both indexes are in; a failure at any step leaves only
//! chunks no index lists, which the repository's garbage collection takes.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use interfaces::artifact::Layer;
use interfaces::chunks::{ChunkIndex, CHUNK_INDEX_MEDIA_TYPE};
use interfaces::repo_client::RepoClient;
use interfaces::vhi::SaveFormat;
use interfaces::BlobId;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::chunks::{self, cut::reread, Cut, PartWriter, Pushed};
use crate::host::Host;
use crate::repository::Part as Kind;

use super::Taking;

/// Cuts waiting for their upload, per part: at most this many chunks (of
/// at most 4 MiB) are held in memory.
const QUEUE: usize = 8;

/// One part of a checkpoint as pushed: its index and what it cost.
pub struct Part {
    /// The index, as the checkpoint artifact's layer.
    pub layer: Layer,
    /// The part's size in bytes, assembled.
    pub size: u64,
    /// Bytes sent: the chunks the repository lacked and the index.
    pub sent: u64,
    /// The index itself.
    pub index: ChunkIndex,
}

/// Parallel channels a mapped-ram save writes over, at most.
const SAVE_CHANNELS: u32 = 4;

/// What [`Host::take_chunked`] took.
pub struct Taken {
    /// The guest's downtime in ms as libvirt measured it, if it did.
    pub downtime_ms: Option<u64>,
    /// The memory state's format.
    pub save_format: SaveFormat,
    pub memory: Part,
    pub disk: Option<Part>,
}

impl Host {
    /// Takes the live snapshot of `t.vee_id` into `t.memory` (its disk's
    /// new top layer `t.top`) and pushes both parts in chunks through
    /// `client` (see the module documentation). With an overlay, it is
    /// read after the snapshot and the top layer committed back into it;
    /// with `stop_after`, the guest is stopped once its state is read.
    pub(super) async fn take_chunked(&self, client: &RepoClient, t: &Taking<'_>) -> Result<Taken> {
        if t.stop_after && self.save_formats().contains(&SaveFormat::MappedRam) {
            return self.take_saved(client, t).await;
        }
        let (vee_id, cp_id, memory, top) = (t.vee_id, t.cp_id, t.memory.as_path(), t.top.as_path());
        let meta = chunks::chunk_meta(vee_id);
        let writing = Arc::new(AtomicBool::new(false));
        let (cutter, rx) = self.start_cut(memory, Some(writing.clone()), None);
        let memory_chunks = chunks::push_chunks(client, rx, &meta, true);
        let after_snapshot = async {
            let snapshot = self.live_snapshot(t).await;
            writing.store(true, Ordering::Release);
            let downtime = snapshot?;
            let disk = match &t.overlay {
                Some(overlay) => Some(self.push_overlay(client, vee_id, overlay, top, &meta).await?),
                None => None,
            };
            crate::failpoints::stage!("checkpoint-after-disk-chunks");
            if t.stop_after {
                self.stop_after_checkpoint(vee_id).await?;
            }
            anyhow::Ok((downtime, disk))
        };
        let (memory_chunks, after) = tokio::join!(memory_chunks, after_snapshot);
        let (downtime_ms, disk) = after?;
        let mut memory_chunks = memory_chunks.context("push the memory state's chunks")?;
        let size = cutter.await?.context("read the memory state")?;
        if let Some(first) = memory_chunks.refs.first() {
            let m = memory.to_path_buf();
            let len = first.size as usize;
            let first = tokio::task::spawn_blocking(move || reread(&m, 0, len)).await??;
            chunks::replace_first(client, &mut memory_chunks, first, &meta).await?;
        }
        crate::failpoints::stage!("checkpoint-after-memory-chunks");
        let memory_part = finish(client, vee_id, cp_id, Kind::Memory, memory_chunks, size);
        let (disk, disk_sink) = match disk {
            Some((pushed, size, sink)) => (Some((pushed, size)), sink),
            None => (None, None),
        };
        let disk_part = async {
            match disk {
                Some((pushed, size)) => finish(client, vee_id, cp_id, Kind::Disk, pushed, size)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        };
        let (memory, disk) = tokio::try_join!(memory_part, disk_part)?;
        crate::failpoints::stage!("checkpoint-after-indexes");
        self.keep_parts(vee_id, t.memory.clone(), &memory, disk_sink, disk.as_ref()).await;
        Ok(Taken {
            downtime_ms,
            save_format: SaveFormat::Sequential,
            memory,
            disk,
        })
    }

    /// A checkpoint that stops its guest, on a host that writes
    /// mapped-ram: the state saved over parallel channels (the guest
    /// paused, then stopped: no top layer, the overlay consistent as it
    /// is), then both parts cut and pushed side by side. The downtime is
    /// the save's duration.
    async fn take_saved(&self, client: &RepoClient, t: &Taking<'_>) -> Result<Taken> {
        let started = std::time::Instant::now();
        let channels = std::thread::available_parallelism().map_or(1, |n| n.get() as u32).clamp(1, SAVE_CHANNELS);
        let (id, m) = (t.vee_id.to_string(), t.memory.display().to_string());
        self.blocking(move |hv| hv.save_mapped_ram(&id, &m, channels)).await?;
        let downtime_ms = started.elapsed().as_millis() as u64;
        self.stop_after_checkpoint(t.vee_id).await?;
        let meta = chunks::chunk_meta(t.vee_id);
        let memory = async {
            let (pushed, size) = self.cut_and_push(client, &t.memory, &meta, None).await?;
            finish(client, t.vee_id, t.cp_id, Kind::Memory, pushed, size).await
        };
        let disk_sink = t.overlay.as_ref().and_then(|_| self.chunks.sink(&chunks::part_key(t.vee_id, Kind::Disk)));
        let disk = async {
            let Some(overlay) = &t.overlay else { return Ok(None) };
            let (pushed, size) = self.cut_and_push(client, overlay, &meta, disk_sink.clone()).await?;
            finish(client, t.vee_id, t.cp_id, Kind::Disk, pushed, size)
                .await
                .map(Some)
        };
        let (memory, disk) = tokio::try_join!(memory, disk)?;
        self.keep_parts(t.vee_id, t.memory.clone(), &memory, disk_sink, disk.as_ref()).await;
        Ok(Taken {
            downtime_ms: Some(downtime_ms),
            save_format: SaveFormat::MappedRam,
            memory,
            disk,
        })
    }

    /// Keeps a checkpoint's parts in the host's cache, after the answer:
    /// the memory state's file moved there as it is, the disk's part
    /// written as it was cut (`sink`). A failure is logged: the cache only
    /// saves pulls.
    async fn keep_parts(&self, vee_id: &str, memory_file: std::path::PathBuf, memory: &Part, sink: Option<Arc<PartWriter>>, disk: Option<&Part>) {
        let c = self.chunks.clone();
        let staged = tokio::task::spawn_blocking(move || c.stage(&memory_file, true))
            .await
            .map_err(std::io::Error::other)
            .and_then(|staged| staged);
        match staged {
            Ok(staged) => staged.keep(chunks::part_key(vee_id, Kind::Memory), memory.layer.digest.clone(), memory.index.clone()),
            Err(e) => tracing::warn!(vee = %vee_id, error = %e, "the checkpoint's memory state is not kept in the cache"),
        }
        if let (Some(sink), Some(disk)) = (sink, disk) {
            sink.keep(disk.layer.digest.clone(), disk.index.clone());
        }
    }

    /// Starts cutting the file at `path` on a blocking thread (followed
    /// while `writing` is unset, `chunks::cut_file`), each chunk written
    /// to `sink` too: the cutter, which answers the file's size in bytes,
    /// and its chunks, at most [`QUEUE`] waiting.
    fn start_cut(&self, path: &Path, writing: Option<Arc<AtomicBool>>, sink: Option<Arc<PartWriter>>) -> (JoinHandle<std::io::Result<u64>>, mpsc::Receiver<Cut>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let p = path.to_path_buf();
        (tokio::task::spawn_blocking(move || chunks::cut_file(&p, writing, sink.as_deref(), &tx)), rx)
    }

    /// Cuts the file at `path` (not written any more) and pushes its
    /// chunks, each written to `sink` too. Returns them and the file's
    /// size in bytes.
    async fn cut_and_push(&self, client: &RepoClient, path: &Path, meta: &interfaces::repo_client::PushMeta, sink: Option<Arc<PartWriter>>) -> Result<(Pushed, u64)> {
        let (cutter, rx) = self.start_cut(path, None, sink);
        let pushed = chunks::push_chunks(client, rx, meta, false).await?;
        let size = cutter.await?.with_context(|| format!("read {}", path.display()))?;
        Ok((pushed, size))
    }

    /// Cuts the frozen `overlay` and pushes its chunks, written into a
    /// part of the host's cache as they are cut; once it is read, commits
    /// `top` back into it (so chains never grow). Returns its chunks, size
    /// in bytes and the cache's part.
    async fn push_overlay(
        &self,
        client: &RepoClient,
        vee_id: &str,
        overlay: &Path,
        top: &Path,
        meta: &interfaces::repo_client::PushMeta,
    ) -> Result<(Pushed, u64, Option<Arc<PartWriter>>)> {
        let sink = self.chunks.sink(&chunks::part_key(vee_id, Kind::Disk));
        let (cutter, rx) = self.start_cut(overlay, None, sink.clone());
        let commit = async {
            let size = cutter
                .await?
                .with_context(|| format!("read the frozen overlay {}", overlay.display()))?;
            let id = vee_id.to_string();
            self.blocking(move |hv| hv.block_commit_active(&id, std::time::Duration::from_secs(120)))
                .await?;
            let _ = std::fs::remove_file(top);
            anyhow::Ok(size)
        };
        let push = async { chunks::push_chunks(client, rx, meta, false).await.context("push the overlay's chunks") };
        let (pushed, size) = tokio::try_join!(push, commit)?;
        Ok((pushed, size, sink))
    }
}

/// Pushes the index of `part`'s chunks: the part as pushed.
async fn finish(client: &RepoClient, vee_id: &str, cp_id: &str, part: Kind, pushed: Pushed, size: u64) -> Result<Part> {
    let (chunks, name) = (pushed.refs.len(), part.name());
    let index = ChunkIndex::new(part.media_type(), pushed.refs);
    let (digest, index_size): (BlobId, u64) = chunks::push_index(client, format!("vee-{vee_id}-{cp_id}-{name}"), vee_id, &index).await?;
    tracing::info!(vee = %vee_id, checkpoint = %cp_id, part = name, size, sent = pushed.sent, chunks, chunks_sent = pushed.chunks_sent, "checkpoint part pushed in chunks");
    Ok(Part {
        layer: Layer {
            digest,
            size: index_size,
            media_type: CHUNK_INDEX_MEDIA_TYPE.into(),
        },
        size,
        sent: pushed.sent + index_size,
        index,
    })
}
