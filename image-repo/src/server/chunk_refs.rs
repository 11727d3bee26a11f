//! What the chunk indexes (`interfaces::chunks`) list, and when each blob
//! was last found needed, in three sled trees beside the blob records
//! (metadata format 5; built from the stored indexes at the first open of
//! an older database):
//!
//! ```text
//! chunk_refs    chunk(32) index(32)  -> ()    which indexes list a chunk
//! index_chunks  index(32) chunk(32)  -> ()    which chunks an index lists
//! touched       blob(32)             -> ms    when `missing` or a push of it again last found it (big-endian i64)
//! ```
//!
//! The store changes them under its lock only ([`super::store::Store`]):
//! an index's references are written before its record, so a crash never
//! leaves a stored index whose chunks are not held; a reference to an
//! index without a record (a crash in between) holds nothing, since
//! readers of the references check the index's record.

use anyhow::{Context, Result};
use chrono::{DateTime, TimeZone, Utc};
use interfaces::BlobId;

/// The three trees; see the module doc.
pub struct ChunkRefs {
    refs: sled::Tree,
    lists: sled::Tree,
    touched: sled::Tree,
}

impl ChunkRefs {
    /// The trees in `db`, created when absent. Errors: sled.
    pub fn open(db: &sled::Db) -> Result<Self> {
        Ok(Self {
            refs: db.open_tree("chunk_refs")?,
            lists: db.open_tree("index_chunks")?,
            touched: db.open_tree("touched")?,
        })
    }

    /// Records that `index` lists `chunks` (idempotent; a chunk listed
    /// twice is one reference). Not flushed: the index's record, written
    /// next, flushes the database.
    pub fn add_index<'a>(&self, index: &BlobId, chunks: impl IntoIterator<Item = &'a BlobId>) -> Result<()> {
        let (mut refs, mut lists) = (sled::Batch::default(), sled::Batch::default());
        let i = key(index);
        for c in chunks {
            let c = key(c);
            refs.insert([c.as_slice(), &i].concat(), &[]);
            lists.insert([i.as_slice(), &c].concat(), &[]);
        }
        self.refs.apply_batch(refs)?;
        self.lists.apply_batch(lists)?;
        Ok(())
    }

    /// Forgets what `index` lists (idempotent).
    pub fn remove_index(&self, index: &BlobId) -> Result<()> {
        let i = key(index);
        let (mut refs, mut lists) = (sled::Batch::default(), sled::Batch::default());
        for item in self.lists.scan_prefix(&i) {
            let (k, _) = item?;
            refs.remove([&k[32..], i.as_slice()].concat());
            lists.remove(k);
        }
        self.refs.apply_batch(refs)?;
        self.lists.apply_batch(lists)?;
        Ok(())
    }

    /// Whether `index` has references recorded.
    pub fn lists_any(&self, index: &BlobId) -> Result<bool> {
        Ok(self.lists.scan_prefix(key(index)).next().transpose()?.is_some())
    }

    /// The indexes recorded as listing `chunk`, in digest order.
    pub fn indexes_of(&self, chunk: &BlobId) -> impl Iterator<Item = Result<BlobId>> {
        self.refs
            .scan_prefix(key(chunk))
            .map(|item| item.context("reading chunk references").and_then(|(k, _)| id_of(&k[32..])))
    }

    /// Records that `ids` were found needed at `at`. Not flushed.
    pub fn touch<'a>(&self, ids: impl IntoIterator<Item = &'a BlobId>, at: DateTime<Utc>) -> Result<()> {
        let mut batch = sled::Batch::default();
        let ms = at.timestamp_millis().to_be_bytes();
        for id in ids {
            batch.insert(key(id), &ms);
        }
        self.touched.apply_batch(batch)?;
        Ok(())
    }

    /// When `id` was last found needed, if ever.
    pub fn touched(&self, id: &BlobId) -> Result<Option<DateTime<Utc>>> {
        let Some(raw) = self.touched.get(key(id))? else { return Ok(None) };
        let ms = i64::from_be_bytes(raw.as_ref().try_into().context("corrupt touched time")?);
        Ok(Utc.timestamp_millis_opt(ms).single())
    }

    /// Forgets when `id` was touched (its blob is gone).
    pub fn forget(&self, id: &BlobId) -> Result<()> {
        self.touched.remove(key(id))?;
        Ok(())
    }
}

fn key(id: &BlobId) -> Vec<u8> {
    hex::decode(id.hex()).expect("hex of a BlobId decodes")
}

fn id_of(raw: &[u8]) -> Result<BlobId> {
    format!("sha256:{}", hex::encode(raw))
        .parse()
        .context("corrupt chunk reference")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_kept_both_ways_and_removed_with_their_index() {
        let dir = tempfile::tempdir().unwrap();
        let db = interfaces::database::open_database(dir.path(), 16).unwrap();
        let refs = ChunkRefs::open(&db).unwrap();
        let (a, b, c) = (BlobId::of(b"a"), BlobId::of(b"b"), BlobId::of(b"c"));
        let (i, j) = (BlobId::of(b"index i"), BlobId::of(b"index j"));
        refs.add_index(&i, [&a, &b, &a]).unwrap();
        refs.add_index(&j, [&b, &c]).unwrap();
        let of = |chunk: &BlobId| refs.indexes_of(chunk).collect::<Result<Vec<_>>>().unwrap();
        assert_eq!(of(&a), std::slice::from_ref(&i));
        assert_eq!(of(&b).len(), 2);
        refs.remove_index(&i).unwrap();
        assert!(of(&a).is_empty());
        assert_eq!(of(&b), std::slice::from_ref(&j));
        assert!(!refs.lists_any(&i).unwrap() && refs.lists_any(&j).unwrap());
        let at = Utc.timestamp_millis_opt(1_700_000_000_123).unwrap();
        refs.touch([&a], at).unwrap();
        assert_eq!(refs.touched(&a).unwrap(), Some(at));
        refs.forget(&a).unwrap();
        assert_eq!(refs.touched(&a).unwrap(), None);
    }
}
