//! The host's cache of checkpoint parts: the memory states and disk
//! overlays of the checkpoints this host took and of those it restored,
//! each kept whole, as one file laid out as its chunk index says, under
//! `cache_dir/chunks`, up to `checkpoint_cache_limit`, the least recently
//! used going first. A restore of a checkpoint whose part is here reads
//! that file as it is (`whole`); one whose part is not may still find
//! most of its chunks in an earlier part of the same VEE (`get`).
//!
//! A part costs no copy when it is taken: the memory state libvirt wrote
//! is moved into the cache as it is (`adopt`); what is read anyway (the
//! frozen overlay during a checkpoint, the chunks of a restore) is written
//! into a new part as it goes by (`PartWriter`). One part per VEE and kind
//! is kept (its `key`): a newer one supersedes the older, which holds
//! mostly the same chunks.
//!
//! Layout (format [`PART_FORMAT`]): `<n>.part`, the part's bytes (a chunk
//! of zeros a hole), and `<n>.json`, [`PartMeta`], written once the
//! part's bytes are on disk (synced), so that a part without it is an
//! interrupted write and removed at open, as is a `<n>.tmp`. A part's
//! mtime is its last use. A part is checked when written (each chunk
//! against its digest as it is cut or fetched) and trusted afterwards,
//! as the image cache's files are; a chunk read out of a part for another
//! one (`get`) is checked again.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use interfaces::chunks::ChunkIndex;
use interfaces::BlobId;
use serde::{Deserialize, Serialize};

/// The format of a part's metadata this version writes and reads.
pub const PART_FORMAT: u32 = 1;

/// The share of the limit an eviction brings the cache down to.
const EVICT_TO: f64 = 0.9;

/// `<n>.json`: what a part file holds.
#[derive(Serialize, Deserialize)]
pub struct PartMeta {
    /// [`PART_FORMAT`].
    pub format_version: u32,
    /// Which VEE's which part (`vee-<id>-memory`): a newer part of the
    /// same key supersedes this one.
    pub key: String,
    /// The ID of the part's chunk index (what a checkpoint record names).
    pub index_id: BlobId,
    /// The chunk index itself.
    pub index: ChunkIndex,
}

/// A part held: its key and index, its disk usage in bytes and last use.
struct Entry {
    key: String,
    index_id: BlobId,
    /// Each chunk: its digest, offset and size in bytes.
    chunks: Vec<(BlobId, u64, u64)>,
    bytes: u64,
    used: SystemTime,
}

/// What the cache holds.
#[derive(Default)]
struct Held {
    parts: HashMap<u64, Entry>,
    /// Where each chunk is read: part, offset, size.
    chunks: HashMap<BlobId, (u64, u64, u64)>,
    /// The part that is each chunk index, whole.
    by_index: HashMap<BlobId, u64>,
    /// Bytes held on disk: the sum of the parts'.
    bytes: u64,
    /// The next part's number.
    next: u64,
}

impl Held {
    /// Holds part `n`; returns the parts it supersedes (same key),
    /// removed from what is held.
    fn insert(&mut self, n: u64, entry: Entry) -> Vec<u64> {
        let old: Vec<u64> = self.parts.iter().filter(|(_, e)| e.key == entry.key).map(|(n, _)| *n).collect();
        for o in &old {
            self.remove(*o);
        }
        for (d, off, size) in &entry.chunks {
            self.chunks.entry(d.clone()).or_insert((n, *off, *size));
        }
        self.by_index.insert(entry.index_id.clone(), n);
        self.bytes += entry.bytes;
        self.next = self.next.max(n + 1);
        self.parts.insert(n, entry);
        old
    }

    /// Forgets part `n`; its chunks held in another part are read there.
    fn remove(&mut self, n: u64) {
        let Some(entry) = self.parts.remove(&n) else { return };
        self.bytes -= entry.bytes;
        if self.by_index.get(&entry.index_id) == Some(&n) {
            self.by_index.remove(&entry.index_id);
        }
        let mut lost: HashSet<&BlobId> = HashSet::new();
        for (d, _, _) in &entry.chunks {
            if self.chunks.get(d).is_some_and(|at| at.0 == n) {
                self.chunks.remove(d);
                lost.insert(d);
            }
        }
        if lost.is_empty() {
            return;
        }
        for (m, e) in &self.parts {
            for (d, off, size) in &e.chunks {
                if lost.contains(d) {
                    self.chunks.entry(d.clone()).or_insert((*m, *off, *size));
                }
            }
        }
    }
}

/// See the module documentation.
pub struct ChunkCache {
    dir: PathBuf,
    /// Bytes above which the least recently used parts are removed.
    limit: u64,
    held: Mutex<Held>,
    /// Parts being kept after their answer ([`Staged::keep`],
    /// [`PartWriter::keep`]).
    pending: prometheus_client::metrics::gauge::Gauge,
}

impl ChunkCache {
    /// The cache in `dir` (created), with the parts a previous run left
    /// there whole, of at most `limit` bytes.
    pub fn open(dir: &Path, limit: u64) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut held = Held::default();
        let (mut found, mut metas) = (HashSet::new(), vec![]);
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let n = path.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse::<u64>().ok());
            match (n, path.extension().and_then(|e| e.to_str())) {
                (Some(n), Some("part")) => {
                    found.insert(n);
                }
                (Some(n), Some("json")) => metas.push((n, path)),
                _ => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        for (_, path) in metas.iter().filter(|(n, _)| !found.contains(n)) {
            let _ = std::fs::remove_file(path);
        }
        let cache = Self {
            dir: dir.to_path_buf(),
            limit,
            held: Mutex::new(Held::default()),
            pending: Default::default(),
        };
        for n in found {
            held.next = held.next.max(n + 1);
            match cache.read_meta(n) {
                Ok((meta, entry)) if meta.format_version == PART_FORMAT => {
                    for old in held.insert(n, entry) {
                        cache.delete(old);
                    }
                }
                other => {
                    if let Err(e) = other {
                        tracing::info!(part = n, error = %e, "a checkpoint part without its metadata (an interrupted write) removed");
                    }
                    cache.delete(n);
                }
            }
        }
        *cache.held.lock().unwrap() = held;
        cache.evict();
        Ok(cache)
    }

    /// The cache, counting the parts being kept in `pending`.
    pub fn counting(mut self, pending: prometheus_client::metrics::gauge::Gauge) -> Self {
        self.pending = pending;
        self
    }

    /// Runs `keep` on a blocking thread, counted in `pending`, logging
    /// its failure (the cache only saves pulls).
    fn later(&self, index_id: BlobId, keep: impl FnOnce() -> io::Result<()> + Send + 'static) {
        let pending = self.pending.clone();
        pending.inc();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = keep() {
                tracing::warn!(index = %index_id, error = %e, "a checkpoint part is not kept in the cache");
            }
            pending.dec();
        });
    }

    fn path(&self, n: u64, ext: &str) -> PathBuf {
        self.dir.join(format!("{n}.{ext}"))
    }

    fn read_meta(&self, n: u64) -> io::Result<(PartMeta, Entry)> {
        let meta: PartMeta = serde_json::from_slice(&std::fs::read(self.path(n, "json"))?).map_err(io::Error::other)?;
        let file = std::fs::metadata(self.path(n, "part"))?;
        if file.len() != meta.index.size {
            return Err(io::Error::other(format!(
                "{} bytes, its index says {}",
                file.len(),
                meta.index.size
            )));
        }
        let entry = entry(&meta, &file);
        Ok((meta, entry))
    }

    fn delete(&self, n: u64) {
        let _ = std::fs::remove_file(self.path(n, "json"));
        let _ = std::fs::remove_file(self.path(n, "part"));
    }

    /// A number for a new part.
    fn next(&self) -> u64 {
        let mut held = self.held.lock().unwrap();
        held.next += 1;
        held.next - 1
    }

    /// Whether chunk `id` is here.
    pub fn has(&self, id: &BlobId) -> bool {
        self.held.lock().unwrap().chunks.contains_key(id)
    }

    /// The file of the part whose chunk index is `index_id`, if it is
    /// here whole (marked used). The file is the cache's: link or copy it,
    /// never change it.
    pub fn whole(&self, index_id: &BlobId) -> Option<PathBuf> {
        let n = {
            let mut held = self.held.lock().unwrap();
            let n = *held.by_index.get(index_id)?;
            held.parts.get_mut(&n)?.used = SystemTime::now();
            n
        };
        let path = self.path(n, "part");
        let _ = std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(SystemTime::now()));
        Some(path)
    }

    /// Forgets the part whose chunk index is `index_id` (a file QEMU
    /// could not load from).
    pub fn forget(&self, index_id: &BlobId) {
        let n = {
            let mut held = self.held.lock().unwrap();
            let Some(n) = held.by_index.get(index_id).copied() else { return };
            held.remove(n);
            n
        };
        self.delete(n);
    }

    /// Chunk `id` if a part here holds it and it is what its digest says
    /// (blocking); a part where it is not is dropped.
    pub fn get(&self, id: &BlobId) -> Option<Bytes> {
        let (n, offset, size) = *self.held.lock().unwrap().chunks.get(id)?;
        let mut data = vec![0; size as usize];
        std::fs::File::open(self.path(n, "part"))
            .and_then(|f| f.read_exact_at(&mut data, offset))
            .ok()?;
        let data = Bytes::from(data);
        if &BlobId::of(&data) != id {
            tracing::warn!(chunk = %id, part = n, "a cached checkpoint part does not hold what its index says; dropped");
            self.held.lock().unwrap().remove(n);
            self.delete(n);
            return None;
        }
        if let Some(e) = self.held.lock().unwrap().parts.get_mut(&n) {
            e.used = SystemTime::now();
        }
        Some(data)
    }

    /// Takes the file at `file` into the cache (blocking, cheap): moved
    /// when `take` (renamed, or copied across file systems), else linked
    /// (or copied); it is held once [`Staged::commit`] says what it is.
    /// Errors: the file cannot be moved, linked or copied.
    pub fn stage(self: &Arc<Self>, file: &Path, take: bool) -> io::Result<Staged> {
        let n = self.next();
        let tmp = self.path(n, "tmp");
        let placed = if take {
            std::fs::rename(file, &tmp)
        } else {
            std::fs::hard_link(file, &tmp)
        };
        if let Err(e) = placed {
            if e.raw_os_error() != Some(nix::errno::Errno::EXDEV as i32) {
                return Err(e);
            }
            std::fs::copy(file, &tmp)?;
        }
        Ok(Staged {
            cache: self.clone(),
            n,
            done: false,
        })
    }

    /// A new part for `key`, written as it goes by (see [`PartWriter`]).
    /// Errors: its file cannot be made.
    pub fn writer(self: &Arc<Self>, key: &str) -> io::Result<PartWriter> {
        let n = self.next();
        let file = std::fs::File::create(self.path(n, "tmp"))?;
        Ok(PartWriter {
            cache: self.clone(),
            n,
            key: key.to_string(),
            file,
            state: Mutex::new(Written::default()),
        })
    }

    /// [`ChunkCache::writer`], shared, or `None` (logged) when it cannot be
    /// made: the cache only saves pulls.
    pub fn sink(self: &Arc<Self>, key: &str) -> Option<Arc<PartWriter>> {
        self.writer(key)
            .inspect_err(|e| tracing::warn!(error = %e, "cannot keep a checkpoint part in the cache"))
            .ok()
            .map(Arc::new)
    }

    /// Part `n`'s file `<n>.tmp`, whole, synced, described and held.
    /// Errors: it is not of the index's size, or cannot be synced or
    /// described (it is removed).
    fn commit(&self, n: u64, key: &str, index_id: &BlobId, index: &ChunkIndex) -> io::Result<()> {
        let tmp = self.path(n, "tmp");
        let result = (|| {
            let len = std::fs::metadata(&tmp)?.len();
            if len != index.size {
                return Err(io::Error::other(format!("{len} bytes, its index says {}", index.size)));
            }
            std::fs::File::open(&tmp)?.sync_data()?;
            let meta = PartMeta {
                format_version: PART_FORMAT,
                key: key.to_string(),
                index_id: index_id.clone(),
                index: index.clone(),
            };
            let json = self.path(n, "json.tmp");
            std::fs::write(&json, serde_json::to_vec(&meta).map_err(io::Error::other)?)?;
            std::fs::rename(&tmp, self.path(n, "part"))?;
            std::fs::rename(&json, self.path(n, "json"))?;
            let entry = entry(&meta, &std::fs::metadata(self.path(n, "part"))?);
            io::Result::Ok(entry)
        })();
        let entry = match result {
            Ok(entry) => entry,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                let _ = std::fs::remove_file(self.path(n, "json.tmp"));
                self.delete(n);
                return Err(e);
            }
        };
        let old = self.held.lock().unwrap().insert(n, entry);
        for o in old {
            self.delete(o);
        }
        self.evict();
        Ok(())
    }

    /// Removes the least recently used parts while over the limit, down
    /// to [`EVICT_TO`] of it.
    fn evict(&self) {
        let victims = {
            let mut held = self.held.lock().unwrap();
            if held.bytes <= self.limit {
                return;
            }
            let target = (self.limit as f64 * EVICT_TO) as u64;
            let mut by_age: Vec<_> = held.parts.iter().map(|(n, e)| (e.used, *n)).collect();
            by_age.sort();
            let mut victims = vec![];
            for (_, n) in by_age {
                if held.bytes <= target {
                    break;
                }
                held.remove(n);
                victims.push(n);
            }
            victims
        };
        for n in victims {
            self.delete(n);
        }
    }

    /// Bytes held on disk.
    pub fn size(&self) -> u64 {
        self.held.lock().unwrap().bytes
    }
}

/// A part's entry from its metadata and its file's.
fn entry(meta: &PartMeta, file: &std::fs::Metadata) -> Entry {
    Entry {
        key: meta.key.clone(),
        index_id: meta.index_id.clone(),
        chunks: meta.index.offsets().map(|(o, c)| (c.digest.clone(), o, c.size)).collect(),
        bytes: file.blocks() * 512,
        used: file.modified().unwrap_or(SystemTime::UNIX_EPOCH),
    }
}

/// A file [`ChunkCache::stage`]d: held once committed, removed if dropped
/// before.
pub struct Staged {
    cache: Arc<ChunkCache>,
    n: u64,
    done: bool,
}

impl Staged {
    /// Holds the file as the part `index` (of ID `index_id`) under `key`
    /// (blocking: it is synced first). Errors: it is not of the index's
    /// size, or cannot be synced or described (nothing is kept).
    pub fn commit(mut self, key: &str, index_id: &BlobId, index: &ChunkIndex) -> io::Result<()> {
        self.done = true;
        self.cache.commit(self.n, key, index_id, index)
    }

    /// [`Staged::commit`] on a blocking thread, after the caller's answer
    /// (a failure is logged: the cache only saves pulls).
    pub fn keep(self, key: String, index_id: BlobId, index: ChunkIndex) {
        let (cache, id) = (self.cache.clone(), index_id.clone());
        cache.later(id, move || self.commit(&key, &index_id, &index));
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(self.cache.path(self.n, "tmp"));
        }
    }
}

/// What a [`PartWriter`] was given.
#[derive(Default)]
struct Written {
    /// The offsets written.
    offsets: HashSet<u64>,
    /// A write failed: the part is not kept.
    failed: bool,
    /// Committed or given up.
    done: bool,
}

/// A part of the cache written as its chunks go by, in any order and any
/// number of times (each offset is written once), then committed with its
/// index ([`PartWriter::finish`]) when every chunk was given; dropped
/// before, it leaves nothing. Writes are best effort: one that fails is
/// logged and the part not kept (the cache only saves pulls).
pub struct PartWriter {
    cache: Arc<ChunkCache>,
    n: u64,
    key: String,
    file: std::fs::File,
    state: Mutex<Written>,
}

impl PartWriter {
    /// Writes `data`, the chunk at `offset` (blocking). A chunk of zeros
    /// is left a hole.
    pub fn put(&self, offset: u64, data: &[u8]) {
        if !self.state.lock().unwrap().offsets.insert(offset) || data.iter().all(|b| *b == 0) {
            return;
        }
        if let Err(e) = self.file.write_all_at(data, offset) {
            tracing::warn!(part = self.n, error = %e, "cannot keep a checkpoint part in the cache");
            self.state.lock().unwrap().failed = true;
        }
    }

    /// Keeps the part as `index` (of ID `index_id`), if every chunk it
    /// lists was given (blocking). Errors: a chunk is missing or a write
    /// failed (nothing is kept), or the commit failed.
    pub fn finish(&self, index_id: &BlobId, index: &ChunkIndex) -> io::Result<()> {
        {
            let mut state = self.state.lock().unwrap();
            if state.done {
                return Ok(());
            }
            if state.failed {
                return Err(io::Error::other("a write of the part failed"));
            }
            if let Some((o, _)) = index.offsets().find(|(o, _)| !state.offsets.contains(o)) {
                return Err(io::Error::other(format!("no chunk at byte {o}")));
            }
            self.file.set_len(index.size)?;
            // From here the commit removes what it leaves on failure.
            state.done = true;
        }
        self.cache.commit(self.n, &self.key, index_id, index)
    }

    /// [`PartWriter::finish`] on a blocking thread, after the caller's
    /// answer (a failure is logged: the cache only saves pulls).
    pub fn keep(self: Arc<Self>, index_id: BlobId, index: ChunkIndex) {
        let (cache, id) = (self.cache.clone(), index_id.clone());
        cache.later(id, move || self.finish(&index_id, &index));
    }
}

impl Drop for PartWriter {
    fn drop(&mut self) {
        if !self.state.lock().unwrap().done {
            let _ = std::fs::remove_file(self.cache.path(self.n, "tmp"));
        }
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
