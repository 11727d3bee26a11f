//! The store's side of checkpoints in chunks (`interfaces::chunks`): who
//! may read a chunk through an index, which of a list of chunks a caller
//! must push (restarting the others' grace), an index accepted only when
//! every chunk it lists is there, and the references that keep chunks.

use std::collections::HashSet;

use anyhow::Result;
use chrono::{DateTime, Utc};
use interfaces::chunks::ChunkIndex;
use interfaces::repo_client::{BlobKind, BlobMeta, PushMeta};
use interfaces::BlobId;

use super::{Store, Stored, TempFile};
use crate::server::auth::Caller;

/// Why an index cannot be stored: the first chunk it lists that is not
/// there for its uploader, and why.
#[derive(Debug)]
pub struct Unlistable {
    /// The chunk.
    pub chunk: BlobId,
    /// Why (never whether another caller's content exists).
    pub reason: String,
}

impl Store {
    /// Whether `who` may read `m`: directly ([`Caller::may_read`]), or,
    /// for a chunk, through a stored index listing it that `who` may read
    /// (so that sharing an index shares its chunks).
    /// Errors: the database.
    pub fn may_read(&self, who: &Caller, m: &BlobMeta) -> Result<bool> {
        if who.may_read(m) {
            return Ok(true);
        }
        if m.kind != BlobKind::CheckpointChunk {
            return Ok(false);
        }
        for index in self.refs.indexes_of(&m.id) {
            if self.meta.get(&index?)?.is_some_and(|i| who.may_read(&i)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The stored indexes listing `chunk`, but those in `gone`: at most
    /// `max` of them. Errors: the database.
    pub fn listing(&self, chunk: &BlobId, gone: &HashSet<BlobId>, max: usize) -> Result<Vec<BlobId>> {
        let mut out = Vec::new();
        for index in self.refs.indexes_of(chunk) {
            let index = index?;
            if out.len() == max {
                break;
            }
            if !gone.contains(&index) && self.meta.get(&index)?.is_some() {
                out.push(index);
            }
        }
        Ok(out)
    }

    /// When `m` was last found needed: stored, pushed again or reported
    /// present by `missing`, whichever is last. Errors: the database.
    pub fn last_used(&self, m: &BlobMeta) -> Result<DateTime<Utc>> {
        Ok(self.refs.touched(&m.id)?.map_or(m.created, |t| t.max(m.created)))
    }

    /// Of `ids`, those `who` must push (not stored, or not readable by
    /// it), in order, and the bytes of the others, whose collection grace
    /// starts again now. Under the store's lock, so that a collection
    /// either removed a blob before (it is reported missing) or sees it
    /// touched. Errors: the database.
    pub async fn present(&self, who: &Caller, ids: &[BlobId]) -> Result<(Vec<BlobId>, u64)> {
        let _guard = self.lock.lock().await;
        let (mut missing, mut found, mut bytes) = (Vec::new(), Vec::new(), 0u64);
        for id in ids {
            match self.meta.get(id)? {
                Some(m) if self.may_read(who, &m)? => {
                    bytes += m.size;
                    found.push(id);
                }
                _ => missing.push(id.clone()),
            }
        }
        if !found.is_empty() {
            self.refs.touch(found, Utc::now())?;
            self.meta.flush().await?;
        }
        Ok((missing, bytes))
    }

    /// Stores the verified upload `temp` of chunk index `index` as `id`,
    /// as [`Store::commit`] does, if every chunk it lists is stored, of
    /// kind `checkpoint-chunk`, of the size listed and readable by `by`
    /// ([`Store::may_read`]); records what it lists. Checked also when
    /// the index is stored already: pushing an index proves only that one
    /// knows the digests it lists, not that one holds their content.
    /// All under the store's lock, so that no chunk goes between the check
    /// and the references. `Err` inside: the first chunk that is not there.
    /// Errors: rename or database.
    pub async fn commit_index(
        &self,
        temp: TempFile,
        id: &BlobId,
        size: u64,
        meta: PushMeta,
        by: &Caller,
        index: &ChunkIndex,
    ) -> Result<Result<Stored, Unlistable>> {
        let _guard = self.lock.lock().await;
        let mut seen = HashSet::new();
        for c in &index.chunks {
            if !seen.insert(&c.digest) {
                continue;
            }
            let refused = |reason: String| Ok(Err(Unlistable {
                chunk: c.digest.clone(),
                reason,
            }));
            let Some(m) = self.meta.get(&c.digest)?.filter(|m| self.may_read(by, m).unwrap_or(false)) else {
                return refused(format!("is not stored, or {} may not read it: push it first", by.name));
            };
            if m.kind != BlobKind::CheckpointChunk {
                return refused(format!("is a {}, not a {}", m.kind, BlobKind::CheckpointChunk));
            }
            if m.size != c.size {
                return refused(format!("has {} bytes, the index lists {}", m.size, c.size));
            }
        }
        let had = self.refs.lists_any(id)?;
        self.refs.add_index(id, seen)?;
        match self.commit_locked(temp, id, size, meta, by).await {
            Ok(stored) => Ok(Ok(stored)),
            Err(e) => {
                if !had {
                    let _ = self.refs.remove_index(id);
                }
                Err(e)
            }
        }
    }

    /// Records what every stored index lists (an older database's, at
    /// open). An index that cannot be read is logged and holds nothing.
    pub(super) fn build_refs(&self) -> Result<()> {
        let mut after = None;
        let mut n = 0usize;
        loop {
            let (page, next) = self
                .meta
                .page(after.as_ref(), 1000, 10_000, |m| m.kind == BlobKind::CheckpointIndex)?;
            for m in page {
                let parsed = std::fs::read(self.blob_path(&m.id))
                    .map_err(anyhow::Error::from)
                    .and_then(|raw| ChunkIndex::parse(&raw).map_err(anyhow::Error::from));
                match parsed {
                    Ok(index) => {
                        self.refs.add_index(&m.id, index.chunks.iter().map(|c| &c.digest))?;
                        n += 1;
                    }
                    Err(e) => tracing::warn!(id = %m.id, "stored chunk index unreadable; it holds no chunk: {e:#}"),
                }
            }
            match next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        self.meta.db().flush()?;
        tracing::info!(indexes = n, "chunk indexes' references built");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::auth::Role;
    use crate::server::store::Deleted;
    use interfaces::chunks::ChunkRef;

    async fn put(store: &Store, data: &[u8], kind: BlobKind, by: &Caller) -> BlobId {
        let id = BlobId::of(data);
        let temp = store.temp_file();
        std::fs::write(temp.path(), data).unwrap();
        store
            .commit(temp, &id, data.len() as u64, PushMeta::new("x", kind), by)
            .await
            .unwrap();
        id
    }

    async fn commit(store: &Store, raw: &[u8], index: &ChunkIndex, by: &Caller) -> Result<Stored, Unlistable> {
        let temp = store.temp_file();
        std::fs::write(temp.path(), raw).unwrap();
        let meta = PushMeta::new("i", BlobKind::CheckpointIndex);
        store
            .commit_index(temp, &BlobId::of(raw), raw.len() as u64, meta, by, index)
            .await
            .unwrap()
    }

    fn site(name: &str) -> Caller {
        Caller {
            name: name.into(),
            role: Role::Site,
        }
    }

    #[tokio::test]
    async fn an_index_needs_its_chunks_and_holds_them_until_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (a, b) = (site("site-a"), site("site-b"));
        let c1 = put(&store, b"chunk one", BlobKind::CheckpointChunk, &a).await;
        let c2 = put(&store, b"chunk two", BlobKind::CheckpointChunk, &b).await;
        let chunk = |id: &BlobId, n| ChunkRef { digest: id.clone(), size: n };
        let index = ChunkIndex::new("m", vec![chunk(&c1, 9), chunk(&c2, 9)]);
        let raw = index.to_bytes();
        let id = BlobId::of(&raw);
        // Site A may not read site B's chunk: refused, naming it.
        assert_eq!(commit(&store, &raw, &index, &a).await.unwrap_err().chunk, c2);
        assert!(store.get(&id).unwrap().is_none());
        // Site A pushes it too (it holds the content): accepted.
        put(&store, b"chunk two", BlobKind::CheckpointChunk, &a).await;
        assert!(matches!(commit(&store, &raw, &index, &a).await.unwrap(), Stored::New(_)));
        // A third site reads the chunks once the index is shared with it.
        let c = site("site-c");
        let m1 = store.get(&c1).unwrap().unwrap();
        assert!(!store.may_read(&c, &m1).unwrap());
        store.add_reader(&id, "site-c").await.unwrap();
        assert!(store.may_read(&c, &m1).unwrap());
        // Listed: no delete without force, no collection; the index gone,
        // its chunks are free.
        assert!(matches!(store.delete(&c1, false).await.unwrap(), Deleted::Listed(l) if l == [id.clone()]));
        assert!(matches!(store.delete(&id, false).await.unwrap(), Deleted::Removed(_)));
        assert!(!store.may_read(&c, &m1).unwrap());
        assert!(matches!(store.collect(&c1, Utc::now() + chrono::Duration::seconds(1)).await.unwrap(), Deleted::Removed(_)));
        // Touched by `missing`: kept by a collection of what is older.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let (missing, bytes) = store.present(&a, &[c1.clone(), c2.clone()]).await.unwrap();
        assert_eq!((missing, bytes), (vec![c1.clone()], 9));
        let before = store.get(&c2).unwrap().unwrap().created + chrono::Duration::milliseconds(1);
        assert!(matches!(store.collect(&c2, before).await.unwrap(), Deleted::Used));
    }

    #[tokio::test]
    async fn a_format_4_database_gets_its_indexes_references_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let a = site("site-a");
        let (chunk, index) = {
            let store = Store::open(dir.path()).unwrap();
            let c = put(&store, b"chunk", BlobKind::CheckpointChunk, &a).await;
            let index = ChunkIndex::new("m", vec![ChunkRef { digest: c.clone(), size: 5 }]);
            let raw = index.to_bytes();
            commit(&store, &raw, &index, &a).await.unwrap();
            (c, BlobId::of(&raw))
        };
        {
            // As a format 4 database has it: no references.
            let db = interfaces::database::open_database(&dir.path().join("meta"), 16).unwrap();
            db.insert("format_version", "4").unwrap();
            db.open_tree("chunk_refs").unwrap().clear().unwrap();
            db.open_tree("index_chunks").unwrap().clear().unwrap();
            db.flush().unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.listing(&chunk, &HashSet::new(), 8).unwrap(), [index]);
    }
}
