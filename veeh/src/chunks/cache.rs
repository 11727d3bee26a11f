//! The host's cache of checkpoint chunks: the chunks of the checkpoints
//! this host took, and of those it restored, kept under `cache_dir/chunks`
//! up to `checkpoint_cache_limit`, the least recently used going first, so
//! that a restore of a checkpoint whose chunks are here pulls nothing.
//!
//! Layout: `chunks/<hex>`, a chunk's content (written to a temporary name,
//! then renamed); its mtime is its last use. A chunk read from the cache
//! is checked against its digest before it is used.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::Bytes;
use interfaces::BlobId;

/// The share of the limit an eviction brings the cache down to.
const EVICT_TO: f64 = 0.9;

/// See the module documentation.
pub struct ChunkCache {
    dir: PathBuf,
    /// Bytes above which the least recently used chunks are removed.
    limit: u64,
    /// Each chunk's size in bytes and last use, and their sum.
    held: Mutex<Held>,
}

/// What the cache holds.
#[derive(Default)]
struct Held {
    chunks: HashMap<BlobId, (u64, SystemTime)>,
    /// Bytes held: the sum of the chunks' sizes.
    bytes: u64,
}

impl Held {
    fn insert(&mut self, id: BlobId, size: u64, used: SystemTime) {
        if let Some((old, _)) = self.chunks.insert(id, (size, used)) {
            self.bytes -= old;
        }
        self.bytes += size;
    }

    fn remove(&mut self, id: &BlobId) {
        if let Some((n, _)) = self.chunks.remove(id) {
            self.bytes -= n;
        }
    }
}

impl ChunkCache {
    /// The cache in `dir` (created), with what a previous run left there,
    /// of at most `limit` bytes.
    pub fn open(dir: &Path, limit: u64) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut held = Held::default();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| format!("sha256:{n}").parse::<BlobId>().ok()) else {
                let _ = std::fs::remove_file(entry.path());
                continue;
            };
            let meta = entry.metadata()?;
            held.insert(id, meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH));
        }
        let cache = Self {
            dir: dir.to_path_buf(),
            limit,
            held: Mutex::new(held),
        };
        cache.evict();
        Ok(cache)
    }

    fn path(&self, id: &BlobId) -> PathBuf {
        self.dir.join(id.hex())
    }

    /// Whether chunk `id` is here.
    pub fn has(&self, id: &BlobId) -> bool {
        self.held.lock().unwrap().chunks.contains_key(id)
    }

    /// Keeps chunk `id` of `data` (blocking). A failure to write is logged:
    /// the cache only saves pulls.
    pub fn put(&self, id: &BlobId, data: &Bytes) {
        if self.has(id) {
            self.touch(id);
            return;
        }
        let path = self.path(id);
        let tmp = path.with_extension("part");
        if let Err(e) = std::fs::write(&tmp, data).and_then(|_| std::fs::rename(&tmp, &path)) {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(chunk = %id, error = %e, "cannot keep a checkpoint chunk in the cache");
            return;
        }
        let over = {
            let mut held = self.held.lock().unwrap();
            held.insert(id.clone(), data.len() as u64, SystemTime::now());
            held.bytes > self.limit
        };
        if over {
            self.evict();
        }
    }

    /// Chunk `id` if it is here and whole (blocking); a chunk whose
    /// content is not `id` any more is dropped.
    pub fn get(&self, id: &BlobId) -> Option<Bytes> {
        if !self.has(id) {
            return None;
        }
        let data = Bytes::from(std::fs::read(self.path(id)).ok()?);
        if &BlobId::of(&data) != id {
            tracing::warn!(chunk = %id, "a cached checkpoint chunk is not what its name says; dropped");
            self.remove(id);
            return None;
        }
        self.touch(id);
        Some(data)
    }

    fn touch(&self, id: &BlobId) {
        let now = SystemTime::now();
        if let Some(e) = self.held.lock().unwrap().chunks.get_mut(id) {
            e.1 = now;
        }
        let _ = std::fs::File::options()
            .write(true)
            .open(self.path(id))
            .and_then(|f| f.set_modified(now));
    }

    fn remove(&self, id: &BlobId) {
        self.held.lock().unwrap().remove(id);
        let _ = std::fs::remove_file(self.path(id));
    }

    /// Removes the least recently used chunks while over the limit, down
    /// to [`EVICT_TO`] of it, so that the sort by age is paid once per
    /// tenth of the cache rather than at every chunk kept.
    fn evict(&self) {
        let victims = {
            let held = self.held.lock().unwrap();
            if held.bytes <= self.limit {
                return;
            }
            let target = (self.limit as f64 * EVICT_TO) as u64;
            let mut total = held.bytes;
            let mut by_age: Vec<_> = held.chunks.iter().map(|(id, (n, t))| (*t, *n, id.clone())).collect();
            by_age.sort();
            let mut victims = vec![];
            for (_, n, id) in by_age {
                if total <= target {
                    break;
                }
                total -= n;
                victims.push(id);
            }
            victims
        };
        for id in victims {
            self.remove(&id);
        }
    }

    /// Bytes held.
    pub fn size(&self) -> u64 {
        self.held.lock().unwrap().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_come_back_and_the_least_recently_used_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ChunkCache::open(dir.path(), 10).unwrap();
        let (a, b, c) = (Bytes::from_static(b"aaaa"), Bytes::from_static(b"bbbb"), Bytes::from_static(b"cccc"));
        let (ia, ib, ic) = (BlobId::of(&a), BlobId::of(&b), BlobId::of(&c));
        cache.put(&ia, &a);
        std::thread::sleep(std::time::Duration::from_millis(5));
        cache.put(&ib, &b);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(cache.get(&ia).unwrap(), a); // a used after b
        std::thread::sleep(std::time::Duration::from_millis(5));
        cache.put(&ic, &c); // 12 bytes > 10: b goes
        assert!(cache.has(&ia) && !cache.has(&ib) && cache.has(&ic));
        assert_eq!(cache.size(), 8);
        // What a restart finds.
        let again = ChunkCache::open(dir.path(), 10).unwrap();
        assert_eq!(again.get(&ic).unwrap(), c);
        // A chunk changed on disk is not used.
        std::fs::write(dir.path().join(ia.hex()), b"xxxx").unwrap();
        assert_eq!(again.get(&ia), None);
        assert!(!again.has(&ia));
    }
}
