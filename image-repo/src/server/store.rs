//! The repository's storage: content files named by digest, temporary upload
//! files beside them (same file system, so the final rename is atomic), and
//! the metadata database. Layout under the data directory:
//!
//! ```text
//! blobs/<64 hex>      content, visible only after verification
//! blobs/.tmp/<n>      uploads in progress (emptied at start)
//! meta/               sled metadata database
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use interfaces::repo_client::types::MAX_READERS;
use interfaces::repo_client::{BlobMeta, PushMeta};
use interfaces::BlobId;
use tokio::sync::Mutex;

use super::auth::Caller;
use super::chunk_refs::ChunkRefs;
use super::metadata::MetaDb;
use super::repositories::{Holders, Repositories};

mod chunks;

pub use chunks::Unlistable;

/// Outcome of storing a verified upload.
#[derive(Debug)]
pub enum Stored {
    /// The content was new and is now stored.
    New(BlobMeta),
    /// The content was already stored; the existing record is returned.
    Existing(BlobMeta),
}

/// Outcome of a delete.
pub enum Deleted {
    /// Removed; the record it had.
    Removed(BlobMeta),
    /// No such blob.
    NotFound,
    /// Pinned and not forced; the pins.
    Pinned(Vec<String>),
    /// Held by OCI repositories (linked, or a manifest there) and not
    /// forced; which.
    Held(Holders),
    /// A chunk stored chunk indexes list, and not forced; the first few
    /// of them ([`MAX_LISTED`]).
    Listed(Vec<BlobId>),
    /// Collected only if unused since a time, and used since (`missing`
    /// or a push found it again): kept.
    Used,
}

/// How many of the indexes listing a chunk a refused delete names.
pub const MAX_LISTED: usize = 8;

/// Blob files plus metadata, with the lock that orders commits, deletes and
/// pin changes.
pub struct Store {
    blobs: PathBuf,
    tmp: PathBuf,
    meta: MetaDb,
    repos: Repositories,
    refs: ChunkRefs,
    next_upload: AtomicU64,
    lock: Mutex<()>,
}

/// A temporary upload file, removed when dropped unless committed.
pub struct TempFile {
    path: PathBuf,
    keep: bool,
}

impl TempFile {
    /// Where the upload is written.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.keep {
            if let Err(e) = std::fs::remove_file(&self.path) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot remove temporary upload");
                }
            }
        }
    }
}

impl Store {
    /// Opens the store in `data`, creating its directories, emptying the
    /// temporary directory and removing content files that have no metadata
    /// (left by a crash between rename and metadata write). Errors: the
    /// directories cannot be created or the database cannot be opened.
    pub fn open(data: &Path) -> Result<Self> {
        let blobs = data.join("blobs");
        let tmp = blobs.join(".tmp");
        std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let meta = MetaDb::open(&data.join("meta"))?;
        for entry in std::fs::read_dir(&tmp).with_context(|| format!("reading {}", tmp.display()))? {
            let path = entry?.path();
            tracing::info!(path = %path.display(), "removing leftover temporary upload");
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
        for entry in std::fs::read_dir(&blobs)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(id) = format!("sha256:{name}").parse::<BlobId>() else {
                continue;
            };
            if meta.get(&id)?.is_none() {
                tracing::warn!(%id, "removing content file without metadata");
                std::fs::remove_file(entry.path())?;
            }
        }
        let repos = Repositories::open(meta.db())?;
        let refs = ChunkRefs::open(meta.db())?;
        let store = Self {
            blobs,
            tmp,
            repos,
            refs,
            meta,
            next_upload: AtomicU64::new(0),
            lock: Mutex::new(()),
        };
        if store.meta.before_chunks() {
            store.build_refs()?;
        }
        Ok(store)
    }

    /// Path of the content of `id`.
    pub fn blob_path(&self, id: &BlobId) -> PathBuf {
        self.blobs.join(id.hex())
    }

    /// A fresh temporary file name for an upload (the file is not created).
    pub fn temp_file(&self) -> TempFile {
        let n = self.next_upload.fetch_add(1, Ordering::Relaxed);
        TempFile {
            path: self.tmp.join(format!("upload-{n}")),
            keep: false,
        }
    }

    /// Bytes available to unprivileged writers on the data file system.
    pub fn free_bytes(&self) -> io::Result<u64> {
        let st = nix::sys::statvfs::statvfs(&self.blobs).map_err(io::Error::from)?;
        Ok((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
    }

    /// The metadata of `id`, if stored. Errors: the database is unreadable.
    pub fn get(&self, id: &BlobId) -> Result<Option<BlobMeta>> {
        self.meta.get(id)
    }

    /// A page of the records `keep` accepts: see [`MetaDb::page`].
    pub fn page(
        &self,
        after: Option<&BlobId>,
        n: usize,
        scan: usize,
        keep: impl Fn(&BlobMeta) -> bool,
    ) -> Result<(Vec<BlobMeta>, Option<BlobId>)> {
        self.meta.page(after, n, scan, keep)
    }

    /// Bytes of content stored in all (O(1)).
    pub fn total_size(&self) -> u64 {
        self.meta.total_size()
    }

    /// How many blobs are stored (O(1)).
    pub fn blob_count(&self) -> u64 {
        self.meta.count()
    }

    /// The repositories of the OCI API over these blobs.
    pub fn repos(&self) -> &Repositories {
        &self.repos
    }

    /// Makes a verified upload by `by` visible as `id`: renames `temp` into
    /// place and records `meta`, with `by` as owner. If the content is
    /// already stored, `temp` is dropped and the existing record kept; `by`,
    /// having shown it holds the content, may read it from then on.
    /// Errors: rename or database.
    /// Content pushed again restarts its collection grace (as `missing`
    /// does). Errors: rename or database.
    pub async fn commit(&self, temp: TempFile, id: &BlobId, size: u64, meta: PushMeta, by: &Caller) -> Result<Stored> {
        let _guard = self.lock.lock().await;
        self.commit_locked(temp, id, size, meta, by).await
    }

    /// [`Store::commit`] under the store's lock.
    async fn commit_locked(&self, mut temp: TempFile, id: &BlobId, size: u64, meta: PushMeta, by: &Caller) -> Result<Stored> {
        if let Some(mut existing) = self.meta.get(id)? {
            if self.blob_path(id).exists() {
                self.refs.touch([id], chrono::Utc::now())?;
                if !by.may_read(&existing) {
                    add_reader(&mut existing, &by.name);
                    self.meta.put(&existing).await?;
                } else {
                    self.meta.flush().await?;
                }
                return Ok(Stored::Existing(existing));
            }
            tracing::warn!(%id, "metadata without content file; storing the content again");
        }
        let dest = self.blob_path(id);
        std::fs::rename(&temp.path, &dest).with_context(|| format!("renaming {} to {}", temp.path.display(), dest.display()))?;
        temp.keep = true;
        sync_dir(&self.blobs);
        let record = BlobMeta {
            id: id.clone(),
            name: meta.name,
            kind: meta.kind,
            format: meta.format,
            size,
            created: chrono::Utc::now(),
            labels: meta.labels,
            pins: Vec::new(),
            owner: by.name.clone(),
            public: false,
            readers: Vec::new(),
        };
        if let Err(e) = self.meta.put(&record).await {
            let _ = std::fs::remove_file(&dest);
            return Err(e.context(format!("recording metadata of {id}")));
        }
        Ok(Stored::New(record))
    }

    /// Deletes `id` unless pinned, held by an OCI repository or listed by
    /// a stored chunk index (or `force`), and releases it from every
    /// repository that holds it, so that no link outlives it; an index
    /// deleted no longer holds its chunks. Metadata goes first, so a crash
    /// in between leaves a content file that the next start removes.
    pub async fn delete(&self, id: &BlobId, force: bool) -> Result<Deleted> {
        self.delete_unless(id, force, None).await
    }

    /// Garbage collection's delete: as [`Store::delete`] without force,
    /// and kept ([`Deleted::Used`]) if it was used at or after
    /// `unused_before` (all checked again under the lock).
    pub async fn collect(&self, id: &BlobId, unused_before: chrono::DateTime<chrono::Utc>) -> Result<Deleted> {
        self.delete_unless(id, false, Some(unused_before)).await
    }

    async fn delete_unless(&self, id: &BlobId, force: bool, unused_before: Option<chrono::DateTime<chrono::Utc>>) -> Result<Deleted> {
        let _guard = self.lock.lock().await;
        let Some(meta) = self.meta.get(id)? else {
            return Ok(Deleted::NotFound);
        };
        if !meta.pins.is_empty() && !force {
            return Ok(Deleted::Pinned(meta.pins));
        }
        let holders = self.repos.holders(id)?;
        if !holders.items.is_empty() && !force {
            return Ok(Deleted::Held(holders));
        }
        if !force {
            let listed = self.listing(id, &Default::default(), MAX_LISTED)?;
            if !listed.is_empty() {
                return Ok(Deleted::Listed(listed));
            }
        }
        if unused_before.is_some_and(|before| self.last_used(&meta).is_ok_and(|t| t >= before)) {
            return Ok(Deleted::Used);
        }
        self.meta.remove(id).await?;
        self.refs.remove_index(id)?;
        self.refs.forget(id)?;
        self.repos.release_everywhere(id).await?;
        let path = self.blob_path(id);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e).with_context(|| format!("removing {}", path.display())),
            _ => {}
        }
        sync_dir(&self.blobs);
        Ok(Deleted::Removed(meta))
    }

    /// Sets (`on`) or clears a pin of `id`; idempotent. Returns the updated
    /// record, or `None` if `id` is not stored.
    /// Errors: [`LimitReached`] for a new pin of a blob with `max` pins
    /// (`max_pins_per_blob`; each change rewrites and syncs the record, so
    /// it stays small). A record that has more, from a larger `max`, keeps
    /// them and loses them one by one.
    pub async fn set_pin(&self, id: &BlobId, pin: &str, on: bool, max: usize) -> Result<Option<BlobMeta>> {
        self.modify(id, |meta| {
            if on && meta.pins.len() >= max && !meta.pins.iter().any(|p| p == pin) {
                return Err(LimitReached(format!(
                    "blob {id} has {} pins, the most a blob may have (max_pins_per_blob = {max}): unpin one first",
                    meta.pins.len()
                ))
                .into());
            }
            Ok(set_member(&mut meta.pins, pin, on))
        })
        .await
    }

    /// Adds `name` to the readers of `id` (idempotent). Returns the updated
    /// record, or `None` if `id` is not stored.
    /// Errors: [`LimitReached`] for a reader past [`MAX_READERS`].
    pub async fn add_reader(&self, id: &BlobId, name: &str) -> Result<Option<BlobMeta>> {
        self.modify(id, |meta| {
            if meta.readers.len() >= MAX_READERS && !meta.readers.iter().any(|r| r == name) {
                return Err(LimitReached(format!("blob {id} has {MAX_READERS} readers, the most it may have")).into());
            }
            Ok(add_reader(meta, name))
        })
        .await
    }

    /// Marks `id` public or not (idempotent). Returns the updated record,
    /// or `None` if `id` is not stored.
    pub async fn set_public(&self, id: &BlobId, public: bool) -> Result<Option<BlobMeta>> {
        self.modify(id, |meta| Ok(std::mem::replace(&mut meta.public, public) != public))
            .await
    }

    /// Applies `change` (which says whether it changed anything, or why it
    /// may not) to the record of `id` under the store's lock and writes it
    /// if changed.
    async fn modify(&self, id: &BlobId, change: impl FnOnce(&mut BlobMeta) -> Result<bool>) -> Result<Option<BlobMeta>> {
        let _guard = self.lock.lock().await;
        let Some(mut meta) = self.meta.get(id)? else { return Ok(None) };
        if change(&mut meta)? {
            self.meta.put(&meta).await?;
        }
        Ok(Some(meta))
    }
}

/// A record would pass one of its bounds (`max_pins_per_blob`, [`MAX_READERS`]).
#[derive(Debug)]
pub struct LimitReached(pub String);

impl std::fmt::Display for LimitReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LimitReached {}

/// Adds (`on`) or removes `name` in the sorted `list`; whether it changed.
fn set_member(list: &mut Vec<String>, name: &str, on: bool) -> bool {
    match (list.binary_search_by(|p| p.as_str().cmp(name)), on) {
        (Err(at), true) => list.insert(at, name.to_string()),
        (Ok(at), false) => drop(list.remove(at)),
        _ => return false,
    }
    true
}

/// Adds `name` to the readers of `meta` unless it owns it; whether it changed.
fn add_reader(meta: &mut BlobMeta, name: &str) -> bool {
    meta.owner != name && set_member(&mut meta.readers, name, true)
}

/// Makes renames and removals in `dir` durable; logs a failure.
fn sync_dir(dir: &Path) {
    if let Err(e) = std::fs::File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot sync directory");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use interfaces::repo_client::BlobKind;

    #[tokio::test]
    async fn start_removes_leftovers_and_orphans() {
        let dir = tempfile::tempdir().unwrap();
        let orphan = BlobId::of(b"orphan");
        {
            let store = Store::open(dir.path()).unwrap();
            std::fs::write(store.temp_file().path(), b"half an upload").unwrap();
            std::fs::write(store.blob_path(&orphan), b"orphan").unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path().join("blobs/.tmp")).unwrap().count(), 0);
        assert!(!store.blob_path(&orphan).exists());
    }

    #[tokio::test]
    async fn pins_block_delete_until_forced() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let id = BlobId::of(b"x");
        let temp = store.temp_file();
        std::fs::write(temp.path(), b"x").unwrap();
        assert!(matches!(
            store
                .commit(temp, &id, 1, PushMeta::new("x", BlobKind::Disk), &Caller::operator())
                .await
                .unwrap(),
            Stored::New(_)
        ));
        store.set_pin(&id, "site-b", true, 64).await.unwrap();
        store.set_pin(&id, "site-b", true, 64).await.unwrap();
        assert!(matches!(store.delete(&id, false).await.unwrap(), Deleted::Pinned(p) if p == ["site-b"]));
        assert!(matches!(store.delete(&id, true).await.unwrap(), Deleted::Removed(_)));
        assert!(!store.blob_path(&id).exists());
        assert!(matches!(store.delete(&id, true).await.unwrap(), Deleted::NotFound));
    }

    #[tokio::test]
    async fn pins_per_blob_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let id = BlobId::of(b"x");
        let temp = store.temp_file();
        std::fs::write(temp.path(), b"x").unwrap();
        store
            .commit(temp, &id, 1, PushMeta::new("x", BlobKind::Disk), &Caller::operator())
            .await
            .unwrap();
        for i in 0..8 {
            store.set_pin(&id, &format!("p{i}"), true, 8).await.unwrap();
        }
        let err = store.set_pin(&id, "one-more", true, 8).await.unwrap_err();
        assert!(err.downcast_ref::<LimitReached>().is_some(), "{err:#}");
        assert!(err.to_string().contains("max_pins_per_blob = 8"), "{err:#}");
        // Setting one it has is no change; clearing one makes room.
        store.set_pin(&id, "p0", true, 8).await.unwrap();
        store.set_pin(&id, "p0", false, 8).await.unwrap();
        store.set_pin(&id, "one-more", true, 8).await.unwrap();
        // A lower bound than the record has: no new pin, the old ones stay.
        assert!(store.set_pin(&id, "another", true, 4).await.is_err());
        store.set_pin(&id, "p1", true, 4).await.unwrap();
    }
}
