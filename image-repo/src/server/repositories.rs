//! The repositories of the OCI Distribution API over the blob store: which
//! blobs and manifests each repository holds, its tags, and the referrers
//! of each subject. Content lives once in the store (by digest); a
//! repository only links to it. Four sled trees beside the blob records,
//! keyed by the repository's name, a NUL (never in a name) and the rest,
//! and a fifth, their reverse index by digest (metadata format 4; built
//! at the first open of a format 3 database):
//!
//! ```text
//! oci_blobs       NAME \0 digest(32)                 -> ()
//! oci_manifests   NAME \0 digest(32)                 -> ManifestRecord (JSON)
//! oci_tags        NAME \0 tag                        -> digest(32)
//! oci_referrers   NAME \0 subject(32) manifest(32)   -> ()
//! oci_holders     digest(32) 'b'|'m' NAME            -> ()   (a blob link, a manifest)
//! ```
//!
//! A `/v1` delete of content a repository holds is refused unless forced,
//! and a forced one releases it from every repository
//! ([`Repositories::release_everywhere`]). A link that still outlives its
//! blob (one made while the delete ran) is harmless: readers check the
//! blob's record too, and answer "unknown" for a dangling link.

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

/// The five trees; see the module doc.
pub struct Repositories {
    db: sled::Db,
    blobs: sled::Tree,
    manifests: sled::Tree,
    tags: sled::Tree,
    referrers: sled::Tree,
    holders: sled::Tree,
}

/// How a repository holds a digest (`oci_holders`' kind byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// A blob linked into it.
    Blob,
    /// A manifest of it.
    Manifest,
}

impl Held {
    fn byte(self) -> u8 {
        match self {
            Held::Blob => b'b',
            Held::Manifest => b'm',
        }
    }
}

/// The repositories holding a digest, at most [`Holders::MAX`] of them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Holders {
    /// Each holding repository's name with how it holds the digest.
    pub items: Vec<(String, Held)>,
    /// Whether more than these hold it.
    pub more: bool,
}

impl Holders {
    /// The most a refusal names.
    pub const MAX: usize = 10;
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
    /// The reverse index is built here when it is empty and the other
    /// trees are not (a format 3 database), in one atomic batch.
    pub fn open(db: &sled::Db) -> Result<Self> {
        let r = Self {
            db: db.clone(),
            blobs: db.open_tree("oci_blobs")?,
            manifests: db.open_tree("oci_manifests")?,
            tags: db.open_tree("oci_tags")?,
            referrers: db.open_tree("oci_referrers")?,
            holders: db.open_tree("oci_holders")?,
        };
        if r.holders.is_empty() {
            let mut batch = sled::Batch::default();
            let mut n = 0usize;
            for (tree, held) in [(&r.blobs, Held::Blob), (&r.manifests, Held::Manifest)] {
                for item in tree.iter() {
                    let (k, _) = item?;
                    let at = k.iter().position(|b| *b == 0).context("a repository key without its NUL")?;
                    let name = std::str::from_utf8(&k[..at]).context("a repository name that is not UTF-8")?;
                    batch.insert(holder_key(&k[at + 1..], held, name), &[]);
                    n += 1;
                }
            }
            if n > 0 {
                r.holders.apply_batch(batch)?;
                db.flush()?;
                tracing::info!(entries = n, "built the OCI repositories' index by digest (metadata format 4)");
            }
        }
        Ok(r)
    }

    /// Whether `repo` holds blob `id`. Errors: the database.
    pub fn has_blob(&self, repo: &str, id: &BlobId) -> Result<bool> {
        Ok(self.blobs.contains_key(key(repo, &[&digest(id)]))?)
    }

    /// Links blob `id` into `repo` (idempotent) and flushes.
    pub async fn link_blob(&self, repo: &str, id: &BlobId) -> Result<()> {
        let d = digest(id);
        (&self.blobs, &self.holders)
            .transaction(|(blobs, holders)| {
                blobs.insert(key(repo, &[&d]), &[])?;
                holders.insert(holder_key(&d, Held::Blob, repo), &[])?;
                Ok::<_, ConflictableTransactionError<()>>(())
            })
            .map_err(tx_error)?;
        flush(&self.db).await
    }

    /// Unlinks blob `id` from `repo`; whether it was linked.
    pub async fn unlink_blob(&self, repo: &str, id: &BlobId) -> Result<bool> {
        let d = digest(id);
        let was = (&self.blobs, &self.holders)
            .transaction(|(blobs, holders)| {
                holders.remove(holder_key(&d, Held::Blob, repo))?;
                Ok::<_, ConflictableTransactionError<()>>(blobs.remove(key(repo, &[&d]))?.is_some())
            })
            .map_err(tx_error)?;
        flush(&self.db).await?;
        Ok(was)
    }

    /// The repositories that hold `id` as a blob or a manifest, at most
    /// [`Holders::MAX`] (O(that), by the index). Errors: the database.
    pub fn holders(&self, id: &BlobId) -> Result<Holders> {
        let mut h = Holders::default();
        for item in self.holders.scan_prefix(digest(id)) {
            let (k, _) = item?;
            if h.items.len() == Holders::MAX {
                h.more = true;
                break;
            }
            let held = if k[32] == Held::Blob.byte() { Held::Blob } else { Held::Manifest };
            h.items.push((String::from_utf8_lossy(&k[33..]).into_owned(), held));
        }
        Ok(h)
    }

    /// Releases `id` from every repository (its content is gone): each
    /// link removed, each manifest of it removed with its tags and
    /// referrer entry. The number released. Errors: the database.
    pub async fn release_everywhere(&self, id: &BlobId) -> Result<usize> {
        let mut n = 0;
        let entries: Vec<_> = self.holders.scan_prefix(digest(id)).keys().collect::<Result<_, _>>()?;
        for k in entries {
            let repo = String::from_utf8_lossy(&k[33..]).into_owned();
            if k[32] == Held::Blob.byte() {
                self.unlink_blob(&repo, id).await?;
            } else if !self.delete_manifest(&repo, id).await? {
                // A record gone already: the index entry alone is left.
                self.holders.remove(&k)?;
            }
            n += 1;
        }
        Ok(n)
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
        (&self.manifests, &self.tags, &self.referrers, &self.holders)
            .transaction(|(manifests, tags, referrers, holders)| {
                manifests.insert(key(repo, &[&d]), value.as_slice())?;
                holders.insert(holder_key(&d, Held::Manifest, repo), &[])?;
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
        (&self.manifests, &self.tags, &self.referrers, &self.holders)
            .transaction(|(manifests, tags, referrers, holders)| {
                manifests.remove(key(repo, &[&d]))?;
                holders.remove(holder_key(&d, Held::Manifest, repo))?;
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

/// `digest(32) kind repo`: an `oci_holders` key.
fn holder_key(digest: &[u8], held: Held, repo: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(33 + repo.len());
    k.extend_from_slice(digest);
    k.push(held.byte());
    k.extend_from_slice(repo.as_bytes());
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

    #[tokio::test]
    async fn a_format_3_database_gets_its_index_by_digest_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let (blob, m) = (BlobId::of(b"layer"), BlobId::of(b"m"));
        {
            let r = Repositories::open(&db).unwrap();
            r.link_blob("acme/os", &blob).await.unwrap();
            r.put_manifest("acme/os", &m, &record(None), Some("v1")).await.unwrap();
            // As a format 3 database had them: the OCI trees without the index.
            r.holders.clear().unwrap();
            assert_eq!(r.holders(&blob).unwrap(), Holders::default());
        }
        let r = Repositories::open(&db).unwrap();
        assert_eq!(r.holders(&blob).unwrap().items, [("acme/os".to_string(), Held::Blob)]);
        assert_eq!(r.holders(&m).unwrap().items, [("acme/os".to_string(), Held::Manifest)]);
        assert_eq!(r.release_everywhere(&m).await.unwrap(), 1);
        assert_eq!(r.tag("acme/os", "v1").unwrap(), None);
        assert!(r.holders(&m).unwrap().items.is_empty());
    }
}
