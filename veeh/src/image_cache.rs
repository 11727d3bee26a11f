//! The host's image cache: base images, kernels and initrds pulled by ID
//! from the image repository, verified, shared read-only by every VEE on the
//! host, and evicted least-recently-used above a size limit, never while a
//! VEE uses them.
//!
//! Blobs come from the site's image repository by ID, or as the layers of
//! a VEE image artifact in an OCI registry the host trusts
//! (`interfaces::registry`), by their digests: either way verified.
//!
//! Layout under the cache directory:
//! `blobs/<hex>` the content (mode 0444), `blobs/<hex>.verified` the inode,
//! size, mtime and ctime it had when its digest was last checked (any other
//! stamp: the digest is checked again before use), `blobs/<hex>.used` whose
//! mtime is the last use; `manifests/<hex>` an image artifact's manifest
//! (a few hundred bytes, checked against its digest when read), kept so
//! that its layers are found again without the registry.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result};
use interfaces::artifact::{ImageArtifact, Layer};
use interfaces::manifest::RegistryImage;
use interfaces::registry::Registries;
use interfaces::repo_client::RepoClient;
use interfaces::BlobId;
use tokio::sync::Mutex;

/// Outcome of [`ImageCache::ensure`].
#[derive(Clone, Debug)]
pub struct Cached {
    pub path: PathBuf,
    /// True when the blob was fetched from the repository now.
    pub pulled: bool,
    /// Bytes fetched (0 when served from the cache).
    pub bytes: u64,
}

/// See the module documentation.
pub struct ImageCache {
    dir: PathBuf,
    limit_bytes: u64,
    repo: Option<RepoClient>,
    registries: Arc<Registries>,
    pulls: Mutex<()>,
}

/// What a file's verified state is bound to: its inode, size, mtime and
/// ctime (ns). A write that keeps the size and puts the mtime back still
/// changes the ctime, which no caller can set; a replaced file has another
/// inode.
fn stamp(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    let mtime = m.modified().ok()?.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_nanos();
    Some(format!("{} {} {mtime} {}.{:09}", m.ino(), m.len(), m.ctime(), m.ctime_nsec()))
}

impl ImageCache {
    /// A cache in `dir` holding at most `limit_mib` MiB of unused images.
    /// Pulls go to `repo` for content IDs (none when the site's repository
    /// is an OCI registry) and to `registries` for registry images.
    pub fn new(dir: &Path, limit_mib: u64, repo: Option<RepoClient>, registries: Arc<Registries>) -> Result<Self> {
        for sub in ["blobs", "manifests"] {
            std::fs::create_dir_all(dir.join(sub)).with_context(|| format!("{}", dir.display()))?;
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            limit_bytes: limit_mib * 1024 * 1024,
            repo,
            registries,
            pulls: Mutex::new(()),
        })
    }

    /// Where blob `id` lives in the cache.
    pub fn path(&self, id: &BlobId) -> PathBuf {
        self.dir.join("blobs").join(id.hex())
    }

    fn sidecar(&self, id: &BlobId, ext: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{}.{ext}", id.hex()))
    }

    /// True when the cached file is present and its digest is known good:
    /// checked now when its size or mtime changed since the last check.
    async fn verified(&self, id: &BlobId) -> bool {
        let path = self.path(id);
        let Some(now) = stamp(&path) else { return false };
        if std::fs::read_to_string(self.sidecar(id, "verified")).ok().as_deref() == Some(now.as_str()) {
            return true;
        }
        match interfaces::repo_client::sink::hash_file(&path).await {
            Ok(w) if &w.id == id => {
                let _ = std::fs::write(self.sidecar(id, "verified"), now);
                true
            }
            _ => {
                tracing::warn!(%id, "cached blob fails verification; pulling it again");
                let _ = std::fs::remove_file(&path);
                false
            }
        }
    }

    /// Makes blob `id` present and verified in the cache, pulling it from
    /// the repository when needed. Errors name the ID and the reason
    /// (unknown to the repository, digest mismatch, I/O).
    pub async fn ensure(&self, id: &BlobId) -> Result<Cached> {
        self.ensure_by(id, |path| async move {
            let repo = self.repo.as_ref().with_context(|| {
                format!("{id}: this site's repository is an OCI registry; name images there as REGISTRY/REPOSITORY@sha256:...")
            })?;
            repo.pull(id, &path, None)
                .await
                .with_context(|| format!("pull {id} into the image cache"))
        })
        .await
    }

    /// Makes `layer` of registry image `image` present and verified in the
    /// cache, pulling it from the registry by its digest when needed
    /// ([`Registries::pull_layer`]: resumable, cut off past its size).
    pub async fn ensure_layer(&self, image: &RegistryImage, layer: &Layer) -> Result<Cached> {
        self.ensure_by(&layer.digest, |path| async move {
            self.registries
                .pull_layer(image, layer, &path)
                .await
                .with_context(|| format!("pull layer {} of {image} into the image cache", layer.digest))
        })
        .await
    }

    async fn ensure_by<F: std::future::Future<Output = Result<u64>>>(
        &self,
        id: &BlobId,
        fetch: impl FnOnce(PathBuf) -> F,
    ) -> Result<Cached> {
        let _guard = self.pulls.lock().await;
        let path = self.path(id);
        let cached = self.verified(id).await;
        let mut bytes = 0;
        if !cached {
            bytes = fetch(path.clone()).await?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444))?;
            if let Some(s) = stamp(&path) {
                std::fs::write(self.sidecar(id, "verified"), s)?;
            }
        }
        std::fs::write(self.sidecar(id, "used"), b"")?;
        Ok(Cached {
            path,
            pulled: !cached,
            bytes,
        })
    }

    /// The image artifact registry image `image` (named by its digest)
    /// holds: from the cache, else from the registry, checked
    /// ([`ImageArtifact::parse`]) and kept. Errors: no digest, the
    /// registry's ([`Registries::manifest`]).
    pub async fn ensure_artifact(&self, image: &RegistryImage) -> Result<ImageArtifact> {
        let digest = image
            .digest
            .as_ref()
            .with_context(|| format!("{image} is not named by its digest (the VEEM resolves tags at admission)"))?;
        if let Some(a) = self.cached_artifact(digest) {
            return Ok(a);
        }
        let (a, raw) = self.registries.manifest(image).await?;
        let path = self.dir.join("manifests").join(digest.hex());
        let tmp = path.with_extension("partial");
        std::fs::write(&tmp, raw)?;
        std::fs::rename(&tmp, &path)?;
        Ok(a)
    }

    /// The image artifact of manifest `digest` when the cache holds it
    /// (its bytes still hash to `digest`).
    pub fn cached_artifact(&self, digest: &BlobId) -> Option<ImageArtifact> {
        let raw = std::fs::read(self.dir.join("manifests").join(digest.hex())).ok()?;
        (BlobId::of(&raw) == *digest).then(|| ImageArtifact::parse(&raw).ok()).flatten()
    }

    /// Removes least-recently-used blobs not in `in_use` until the cache
    /// holds at most its limit. Returns the IDs removed.
    pub fn evict(&self, in_use: &HashSet<BlobId>) -> Result<Vec<BlobId>> {
        let mut entries = Vec::new();
        let mut total = 0u64;
        for e in std::fs::read_dir(self.dir.join("blobs"))? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.contains('.') {
                continue;
            }
            let Ok(id) = format!("sha256:{name}").parse::<BlobId>() else {
                continue;
            };
            let size = e.metadata()?.len();
            total += size;
            let used = std::fs::metadata(self.sidecar(&id, "used"))
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            entries.push((used, id, size));
        }
        entries.sort_by_key(|(used, _, _)| *used);
        let mut removed = Vec::new();
        for (_, id, size) in entries {
            if total <= self.limit_bytes {
                break;
            }
            if in_use.contains(&id) {
                continue;
            }
            for p in [self.path(&id), self.sidecar(&id, "verified"), self.sidecar(&id, "used")] {
                let _ = std::fs::remove_file(p);
            }
            total -= size;
            removed.push(id);
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(dir: &Path, limit_mib: u64) -> ImageCache {
        // Nothing listens on port 9: every pull fails, so these tests see
        // exactly what the cache does with the files it has.
        ImageCache::new(
            dir,
            limit_mib,
            Some(RepoClient::new("http://127.0.0.1:9", None).unwrap()),
            Arc::new(Registries::new(&[]).unwrap()),
        )
        .unwrap()
    }

    fn put(c: &ImageCache, content: &[u8], used_secs_ago: u64) -> BlobId {
        let id = BlobId::of(content);
        std::fs::write(c.path(&id), content).unwrap();
        let used = c.sidecar(&id, "used");
        std::fs::write(&used, b"").unwrap();
        let t = SystemTime::now() - std::time::Duration::from_secs(used_secs_ago);
        std::fs::File::options().write(true).open(&used).unwrap().set_modified(t).unwrap();
        id
    }

    #[test]
    fn evicts_least_recently_used_first_but_never_what_is_in_use() {
        let t = tempfile::tempdir().unwrap();
        let c = cache(t.path(), 1); // 1 MiB limit
        let old = put(&c, &vec![1u8; 600 << 10], 300);
        let in_use = put(&c, &vec![2u8; 600 << 10], 200);
        let recent = put(&c, &vec![3u8; 600 << 10], 10);
        let keep: HashSet<BlobId> = [in_use.clone()].into();
        let removed = c.evict(&keep).unwrap();
        // 1800 KiB > 1024 KiB: the oldest goes; the in-use one is skipped,
        // so the recent one goes too.
        assert_eq!(removed, vec![old.clone(), recent.clone()]);
        assert!(!c.path(&old).exists() && !c.path(&recent).exists());
        assert!(c.path(&in_use).exists());
        assert!(c.evict(&keep).unwrap().is_empty(), "under the limit now");
    }

    #[tokio::test]
    async fn a_verified_blob_is_served_from_the_cache() {
        let t = tempfile::tempdir().unwrap();
        let c = cache(t.path(), 100);
        let id = put(&c, b"kernel bits", 0);
        let got = c.ensure(&id).await.unwrap();
        assert!(!got.pulled, "served from the cache without the repository");
        assert_eq!(std::fs::read(&got.path).unwrap(), b"kernel bits");
        assert!(c.sidecar(&id, "verified").exists());
    }

    #[tokio::test]
    async fn a_corrupted_blob_is_dropped_and_pulled_again() {
        let t = tempfile::tempdir().unwrap();
        let c = cache(t.path(), 100);
        let id = put(&c, b"kernel bits", 0);
        c.ensure(&id).await.unwrap();
        std::fs::write(c.path(&id), b"kernel bitz").unwrap();
        let err = c.ensure(&id).await.unwrap_err();
        // It went to the repository for a good copy (unreachable here)...
        assert!(format!("{err:#}").contains(&id.to_string()), "{err:#}");
        // ...and the bad copy is gone, never handed to a VEE.
        assert!(!c.path(&id).exists());
    }

    #[tokio::test]
    async fn a_blob_corrupted_in_place_with_its_size_and_mtime_kept_is_caught() {
        let t = tempfile::tempdir().unwrap();
        let c = cache(t.path(), 100);
        let id = put(&c, b"kernel bits", 0);
        c.ensure(&id).await.unwrap();
        let path = c.path(&id);
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::write(&path, b"kernel bitz").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
        assert!(c.ensure(&id).await.is_err(), "the corrupt copy was served");
        assert!(!path.exists());
    }
}
