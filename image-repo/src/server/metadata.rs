//! Metadata of the stored blobs in sled: one JSON record per blob, keyed by
//! the 32-byte digest. A format version in the database lets a later
//! version read or refuse old data explicitly.

use std::path::Path;

use anyhow::{bail, Context, Result};
use interfaces::repo_client::BlobMeta;
use interfaces::BlobId;

/// Version of the record layout written by this build. 2: records have
/// `owner`, `public` and `readers` (issue 13 S3).
pub const FORMAT_VERSION: &str = "2";
/// Version 1 records read as version 2 ones: the operator owns them and
/// they are private (serde defaults), so nothing is rewritten.
const FORMAT_VERSION_1: &str = "1";
const FORMAT_KEY: &[u8] = b"format_version";

/// The metadata database.
pub struct MetaDb {
    db: sled::Db,
    blobs: sled::Tree,
}

impl MetaDb {
    /// Opens (or creates) the database in `dir`. Errors: sled cannot open it
    /// (for instance another server holds it) or it has another format version.
    pub fn open(dir: &Path) -> Result<Self> {
        let db = interfaces::database::open_database(dir, 16).with_context(|| format!("opening metadata database {}", dir.display()))?;
        match db.get(FORMAT_KEY)? {
            None => {
                db.insert(FORMAT_KEY, FORMAT_VERSION)?;
                db.flush()?;
            }
            Some(v) if v.as_ref() == FORMAT_VERSION.as_bytes() => {}
            Some(v) if v.as_ref() == FORMAT_VERSION_1.as_bytes() => {
                tracing::warn!(
                    "metadata format 1 upgraded to {FORMAT_VERSION}: the blobs stored so far belong to the operator and are private; \
                     mark images public (image-repo public ID) or share them"
                );
                db.insert(FORMAT_KEY, FORMAT_VERSION)?;
                db.flush()?;
            }
            Some(v) => bail!(
                "metadata database {} has format version {:?}; this build reads version {FORMAT_VERSION}",
                dir.display(),
                String::from_utf8_lossy(&v)
            ),
        }
        let blobs = db.open_tree("blobs")?;
        Ok(Self { db, blobs })
    }

    /// Flushes on a blocking thread. Not sled's `flush_async`: its worker
    /// still holds the database for a moment after the flush is reported,
    /// so a database dropped right after it could not be reopened at once.
    async fn flush(&self) -> Result<()> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.flush()).await.context("flush task")??;
        Ok(())
    }

    /// The record of `id`, if any. Errors: the database or the record is unreadable.
    pub fn get(&self, id: &BlobId) -> Result<Option<BlobMeta>> {
        match self.blobs.get(key(id))? {
            Some(raw) => Ok(Some(decode(&raw).with_context(|| format!("metadata of {id}"))?)),
            None => Ok(None),
        }
    }

    /// Inserts or replaces the record of `meta.id` and flushes it to disk.
    /// Errors: the database cannot write.
    pub async fn put(&self, meta: &BlobMeta) -> Result<()> {
        self.blobs.insert(key(&meta.id), serde_json::to_vec(meta)?)?;
        self.flush().await?;
        Ok(())
    }

    /// Removes the record of `id` and flushes. Returns the removed record.
    pub async fn remove(&self, id: &BlobId) -> Result<Option<BlobMeta>> {
        let old = self.blobs.remove(key(id))?;
        self.flush().await?;
        Ok(match old {
            Some(raw) => Some(decode(&raw)?),
            None => None,
        })
    }

    /// Every record, sorted by name then ID. Errors: a record is unreadable.
    pub fn list(&self) -> Result<Vec<BlobMeta>> {
        let mut all = Vec::new();
        for item in self.blobs.iter() {
            let (_, raw) = item?;
            all.push(decode(&raw)?);
        }
        all.sort_by(|a, b| (&a.name, &a.id).cmp(&(&b.name, &b.id)));
        Ok(all)
    }

    /// Sum of the sizes of all blobs, in bytes.
    pub fn total_size(&self) -> Result<u64> {
        Ok(self.list()?.iter().map(|m| m.size).sum())
    }
}

fn key(id: &BlobId) -> Vec<u8> {
    hex::decode(id.hex()).expect("hex of a BlobId decodes")
}

fn decode(raw: &[u8]) -> Result<BlobMeta> {
    serde_json::from_slice(raw).context("corrupt metadata record")
}

#[cfg(test)]
mod tests {
    use super::*;
    use interfaces::repo_client::BlobKind;

    fn meta(name: &str, content: &[u8]) -> BlobMeta {
        BlobMeta {
            id: BlobId::of(content),
            name: name.into(),
            kind: BlobKind::Kernel,
            format: None,
            size: content.len() as u64,
            created: chrono::Utc::now(),
            labels: Default::default(),
            pins: vec![],
            owner: "acme".into(),
            public: false,
            readers: vec![],
        }
    }

    #[tokio::test]
    async fn records_survive_reopen_and_list_sorted() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = MetaDb::open(dir.path()).unwrap();
            db.put(&meta("b", b"two")).await.unwrap();
            db.put(&meta("a", b"one")).await.unwrap();
        }
        let db = MetaDb::open(dir.path()).unwrap();
        let names: Vec<_> = db.list().unwrap().into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(db.total_size().unwrap(), 6);
        assert_eq!(db.remove(&BlobId::of(b"one")).await.unwrap().unwrap().name, "a");
        assert!(db.get(&BlobId::of(b"one")).unwrap().is_none());
    }

    #[tokio::test]
    async fn version_1_records_belong_to_the_operator() {
        let dir = tempfile::tempdir().unwrap();
        let id = BlobId::of(b"one");
        {
            let db = interfaces::database::open_database(dir.path(), 16).unwrap();
            db.insert(FORMAT_KEY, FORMAT_VERSION_1).unwrap();
            let v1 = format!(
                r#"{{"id":"{id}","name":"a","kind":"kernel","format":null,"size":3,"created":"2026-01-01T00:00:00Z","labels":{{}},"pins":[]}}"#
            );
            db.open_tree("blobs").unwrap().insert(key(&id), v1.as_bytes()).unwrap();
            db.flush().unwrap();
        }
        let db = MetaDb::open(dir.path()).unwrap();
        let m = db.get(&id).unwrap().unwrap();
        assert_eq!((m.owner.as_str(), m.public, m.readers.len()), ("operator", false, 0));
        assert_eq!(db.db.get(FORMAT_KEY).unwrap().unwrap().as_ref(), FORMAT_VERSION.as_bytes());
    }

    #[tokio::test]
    async fn refuses_another_format_version() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = interfaces::database::open_database(dir.path(), 16).unwrap();
            db.insert(FORMAT_KEY, "99").unwrap();
            db.flush().unwrap();
        }
        let err = MetaDb::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("format version \"99\""), "{err}");
    }
}
