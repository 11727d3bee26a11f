//! The repositories of the OCI Distribution API over the blob store: which
//! blobs and manifests each repository holds, its tags, and the referrers
//! of each subject. Content lives once in the store (by digest); a
//! repository only links to it. Four sled trees beside the blob records
//! (metadata format 3), keyed by the repository's name, a NUL (never in a
//! name) and the rest:
//!
//! ```text
//! oci_blobs       NAME \0 digest(32)                 -> ()
//! oci_manifests   NAME \0 digest(32)                 -> ManifestRecord (JSON)
//! oci_tags        NAME \0 tag                        -> digest(32)
//! oci_referrers   NAME \0 subject(32) manifest(32)   -> ()
//! ```
//!
//! A link may outlive its blob (a blob deleted through `/v1`): readers
//! check the blob's record too, and answer "unknown" for a dangling link.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use interfaces::BlobId;
use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::metadata::flush;

/// What the repository keeps of a manifest besides its bytes: what its
/// descriptor in a tag list or referrers answer needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestRecord {
    /// Its media type (`Content-Type` of its GET), e.g.
    /// `application/vnd.oci.image.manifest.v1+json`.
    pub media_type: String,
    /// Its `artifactType`, or for an image manifest without one its
    /// config's media type (as the referrers API reports it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// Its length in bytes.
    pub size: u64,
    /// The manifest it refers to (`subject`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<BlobId>,
    /// Its annotations (the referrers answer carries them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The four trees; see the module doc.
pub struct Repositories {
    db: sled::Db,
    blobs: sled::Tree,
    manifests: sled::Tree,
    tags: sled::Tree,
    referrers: sled::Tree,
}

/// One page of a list: the items and whether more follow.
#[derive(Debug, PartialEq, Eq)]
pub struct Page<T> {
    /// The items, in key order.
    pub items: Vec<T>,
    /// Whether items follow the last one.
    pub more: bool,
}

impl Repositories {
    /// Opens the trees in `db`. Errors: sled cannot open a tree.
    pub fn open(db: &sled::Db) -> Result<Self> {
        Ok(Self {
            db: db.clone(),
            blobs: db.open_tree("oci_blobs")?,
            manifests: db.open_tree("oci_manifests")?,
            tags: db.open_tree("oci_tags")?,
            referrers: db.open_tree("oci_referrers")?,
        })
    }

    /// Whether `repo` holds blob `id`. Errors: the database.
    pub fn has_blob(&self, repo: &str, id: &BlobId) -> Result<bool> {
        Ok(self.blobs.contains_key(key(repo, &[&digest(id)]))?)
    }

    /// Links blob `id` into `repo` (idempotent) and flushes.
    pub async fn link_blob(&self, repo: &str, id: &BlobId) -> Result<()> {
        self.blobs.insert(key(repo, &[&digest(id)]), &[])?;
        flush(&self.db).await
    }

    /// Unlinks blob `id` from `repo`; whether it was linked.
    pub async fn unlink_blob(&self, repo: &str, id: &BlobId) -> Result<bool> {
        let was = self.blobs.remove(key(repo, &[&digest(id)]))?.is_some();
        flush(&self.db).await?;
        Ok(was)
    }

    /// Whether `repo` holds anything (a blob, a manifest or a tag).
    pub fn exists(&self, repo: &str) -> Result<bool> {
        let p = prefix(repo);
        for tree in [&self.blobs, &self.manifests, &self.tags] {
            if tree.scan_prefix(&p).next().transpose()?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Every digest some repository holds, as a blob or as a manifest (what
    /// garbage collection keeps, `super::gc`). Errors: the database.
    pub fn linked(&self) -> Result<std::collections::HashSet<BlobId>> {
        let mut all = std::collections::HashSet::new();
        for tree in [&self.blobs, &self.manifests] {
            for item in tree.iter() {
                let (k, _) = item?;
                let at = k.iter().position(|b| *b == 0).context("a repository key without its NUL")?;
                all.insert(from_digest(&k[at + 1..])?);
            }
        }
        Ok(all)
    }

    /// The record of manifest `id` in `repo`, if it holds it.
    pub fn manifest(&self, repo: &str, id: &BlobId) -> Result<Option<ManifestRecord>> {
        self.manifests
            .get(key(repo, &[&digest(id)]))?
            .map(|raw| serde_json::from_slice(&raw).with_context(|| format!("record of manifest {id} in {repo}")))
            .transpose()
    }

    /// The manifest `tag` names in `repo`, if any.
    pub fn tag(&self, repo: &str, tag: &str) -> Result<Option<BlobId>> {
        self.tags
            .get(key(repo, &[tag.as_bytes()]))?
            .map(|raw| from_digest(&raw))
            .transpose()
    }

    /// Records manifest `id` in `repo` (and `tag` naming it, and the
    /// referrer entry of its subject) in one transaction, then flushes.
    pub async fn put_manifest(&self, repo: &str, id: &BlobId, record: &ManifestRecord, tag: Option<&str>) -> Result<()> {
        let value = serde_json::to_vec(record)?;
        let d = digest(id);
        (&self.manifests, &self.tags, &self.referrers)
            .transaction(|(manifests, tags, referrers)| {
                manifests.insert(key(repo, &[&d]), value.as_slice())?;
                if let Some(tag) = tag {
                    tags.insert(key(repo, &[tag.as_bytes()]), &d[..])?;
                }
                if let Some(subject) = &record.subject {
                    referrers.insert(key(repo, &[&digest(subject), &d]), &[])?;
                }
                Ok::<_, ConflictableTransactionError<()>>(())
            })
            .map_err(tx_error)?;
        flush(&self.db).await
    }

    /// Removes manifest `id` from `repo` with the tags naming it and its
    /// referrer entry; whether `repo` held it.
    pub async fn delete_manifest(&self, repo: &str, id: &BlobId) -> Result<bool> {
        let Some(record) = self.manifest(repo, id)? else { return Ok(false) };
        let d = digest(id);
        let mut naming = Vec::new();
        for item in self.tags.scan_prefix(prefix(repo)) {
            let (k, v) = item?;
            if v.as_ref() == d {
                naming.push(k);
            }
        }
        (&self.manifests, &self.tags, &self.referrers)
            .transaction(|(manifests, tags, referrers)| {
                manifests.remove(key(repo, &[&d]))?;
                for k in &naming {
                    tags.remove(k)?;
                }
                if let Some(subject) = &record.subject {
                    referrers.remove(key(repo, &[&digest(subject), &d]))?;
                }
                Ok::<_, ConflictableTransactionError<()>>(())
            })
            .map_err(tx_error)?;
        flush(&self.db).await?;
        Ok(true)
    }

    /// Removes `tag` from `repo` (the manifest stays); whether it existed.
    pub async fn delete_tag(&self, repo: &str, tag: &str) -> Result<bool> {
        let was = self.tags.remove(key(repo, &[tag.as_bytes()]))?.is_some();
        flush(&self.db).await?;
        Ok(was)
    }

    /// At most `n` tags of `repo` in lexical order, after `last` if given.
    pub fn tags(&self, repo: &str, last: Option<&str>, n: usize) -> Result<Page<(String, BlobId)>> {
        let p = prefix(repo);
        let start = match last {
            // The first key after `last`: `last` followed by a NUL byte.
            Some(last) => key(repo, &[last.as_bytes(), &[0]]),
            None => p.clone(),
        };
        page(&self.tags, &p, start, n, |tag, digest| {
            Ok(Some((String::from_utf8_lossy(tag).into_owned(), from_digest(digest)?)))
        })
    }

    /// At most `n` manifests of `repo` whose subject is `subject`, in
    /// digest order, after the manifest `after` if given, with their records.
    pub fn referrers(&self, repo: &str, subject: &BlobId, after: Option<&BlobId>, n: usize) -> Result<Page<(BlobId, ManifestRecord)>> {
        let s = digest(subject);
        let p = key(repo, &[&s]);
        let start = match after {
            Some(a) => key(repo, &[&s, &digest(a), &[0]]),
            None => p.clone(),
        };
        // A manifest removed since is skipped, not reported.
        page(&self.referrers, &p, start, n, |id, _| {
            let id = from_digest(id)?;
            Ok(self.manifest(repo, &id)?.map(|record| (id, record)))
        })
    }
}

/// At most `n` items of `tree` under key prefix `p`, from key `start` on,
/// each made by `item` of the rest of its key and its value (`None`:
/// skipped), and whether more follow: the lists' pages.
fn page<T>(
    tree: &sled::Tree,
    p: &[u8],
    start: Vec<u8>,
    n: usize,
    mut item: impl FnMut(&[u8], &[u8]) -> Result<Option<T>>,
) -> Result<Page<T>> {
    let mut items = Vec::new();
    for entry in tree
        .range(start..)
        .take_while(|i| i.as_ref().map_or(true, |(k, _)| k.starts_with(p)))
    {
        let (k, v) = entry?;
        if items.len() == n {
            return Ok(Page { items, more: true });
        }
        items.extend(item(&k[p.len()..], &v)?);
    }
    Ok(Page { items, more: false })
}

/// `repo \0`.
fn prefix(repo: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(repo.len() + 1 + 64);
    k.extend_from_slice(repo.as_bytes());
    k.push(0);
    k
}

/// `repo \0 parts...`.
fn key(repo: &str, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = prefix(repo);
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

/// The 32 bytes of a sha256 digest.
fn digest(id: &BlobId) -> [u8; 32] {
    let mut d = [0u8; 32];
    hex::decode_to_slice(id.hex(), &mut d).expect("hex of a BlobId decodes");
    d
}

fn from_digest(raw: &[u8]) -> Result<BlobId> {
    let d: [u8; 32] = raw.try_into().context("corrupt digest in a repository tree")?;
    Ok(BlobId::from_digest(d))
}

fn tx_error(e: TransactionError<()>) -> anyhow::Error {
    match e {
        TransactionError::Abort(()) => anyhow::anyhow!("repository transaction aborted"),
        TransactionError::Storage(e) => anyhow::Error::new(e).context("repository transaction"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(subject: Option<&BlobId>) -> ManifestRecord {
        ManifestRecord {
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            artifact_type: Some("application/vnd.example".into()),
            size: 10,
            subject: subject.cloned(),
            annotations: BTreeMap::new(),
        }
    }

    #[tokio::test]
    async fn tags_page_in_lexical_order_and_stay_inside_their_repository() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let r = Repositories::open(&db).unwrap();
        let m = BlobId::of(b"m");
        for tag in ["b", "a", "c", "a1"] {
            r.put_manifest("acme/os", &m, &record(None), Some(tag)).await.unwrap();
        }
        // A repository whose name extends this one's is another repository.
        r.put_manifest("acme/os2", &m, &record(None), Some("zz")).await.unwrap();
        let names = |p: Page<(String, BlobId)>| (p.items.into_iter().map(|(t, _)| t).collect::<Vec<_>>(), p.more);
        assert_eq!(names(r.tags("acme/os", None, 2).unwrap()), (vec!["a".into(), "a1".into()], true));
        assert_eq!(
            names(r.tags("acme/os", Some("a1"), 2).unwrap()),
            (vec!["b".into(), "c".into()], false)
        );
        assert_eq!(names(r.tags("acme/os", Some("c"), 2).unwrap()), (vec![], false));
        assert!(r.delete_manifest("acme/os", &m).await.unwrap());
        assert_eq!(names(r.tags("acme/os", None, 10).unwrap()), (vec![], false));
        assert_eq!(r.tag("acme/os2", "zz").unwrap(), Some(m));
    }

    #[tokio::test]
    async fn referrers_follow_their_manifests() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let r = Repositories::open(&db).unwrap();
        let subject = BlobId::of(b"image");
        let (a, b) = (BlobId::of(b"a"), BlobId::of(b"b"));
        r.put_manifest("site-a/checkpoints", &a, &record(Some(&subject)), None)
            .await
            .unwrap();
        r.put_manifest("site-a/checkpoints", &b, &record(Some(&subject)), None)
            .await
            .unwrap();
        let all = r.referrers("site-a/checkpoints", &subject, None, 10).unwrap();
        assert_eq!(all.items.len(), 2);
        let first = r.referrers("site-a/checkpoints", &subject, None, 1).unwrap();
        assert!(first.more);
        let rest = r.referrers("site-a/checkpoints", &subject, Some(&first.items[0].0), 1).unwrap();
        assert_eq!((rest.items.len(), rest.more), (1, false));
        assert_ne!(rest.items[0].0, first.items[0].0);
        r.delete_manifest("site-a/checkpoints", &a).await.unwrap();
        let left: Vec<_> = r
            .referrers("site-a/checkpoints", &subject, None, 10)
            .unwrap()
            .items
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(left, [b]);
        assert!(r.referrers("site-b/checkpoints", &subject, None, 10).unwrap().items.is_empty());
    }
}
