//! A checkpoint as an OCI artifact in the repository's own OCI API (`/v2`,
//! issue 39 item 2), beside its blobs pushed through `/v1`: the blobs are
//! mounted (linked) into the site's `SITE/checkpoints` repository, the
//! checkpoint record pushed as the config, the manifest tagged by the
//! checkpoint's ID; and all of it removed again when the VEEM forgets the
//! checkpoint, so that garbage collection may take the blobs once their
//! pins are gone too.
//!
//! A VEE booted from content IDs (`/v1` blobs, not a manifest) has its
//! checkpoints' `subject` all the same: the image artifact of its boot
//! files (disk, kernel, initrd), put in the site's `SITE/images`
//! repository tagged `image-<hex of its digest>`
//! ([`RepoClient::put_image_artifact`]), and dropped with the last
//! checkpoint that refers to it, its blobs unlinked unless another image
//! artifact there names them: while it is there, the provider's `/v1`
//! delete of those blobs is refused (a restore of the checkpoint needs
//! them).

use reqwest::{header, Method, RequestBuilder, StatusCode};

use super::{check, RepoClient};
use crate::artifact::{self, ImageArtifact, Layer};
use crate::error::{Error, Result};
use crate::BlobId;

impl RepoClient {
    /// A request to `/v2` + `path` with the bearer token.
    fn v2(&self, method: Method, path: &str) -> RequestBuilder {
        let req = self.http.request(method, format!("{}/v2{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Records checkpoint `tag` in OCI repository `repository` (the
    /// site's `SITE/checkpoints`): `layers` (blobs this caller pushed or
    /// may read) mounted into it, `config` (the checkpoint record,
    /// [`artifact::checkpoint_config`]) uploaded, and the manifest
    /// ([`artifact::checkpoint_manifest`], with `subject`) put under the
    /// tag. On failure what it linked is unlinked again (a link keeps a
    /// blob from gc). Returns the manifest's digest. Errors:
    /// [`Error::Repository`] naming the step the repository refused.
    pub async fn put_checkpoint_artifact(
        &self,
        repository: &str,
        tag: &str,
        config: Vec<u8>,
        layers: &[Layer],
        subject: Option<(&BlobId, u64)>,
    ) -> Result<BlobId> {
        let config_layer = Layer::of(artifact::CHECKPOINT_CONFIG, &config);
        let raw = artifact::checkpoint_manifest(&config_layer, layers, subject);
        self.put_artifact(repository, tag, (&config_layer, config), layers, raw).await
    }

    /// Records the image artifact of `layers` (a VEE's boot files, blobs
    /// this caller may read: a disk, and a kernel and initrd) in OCI
    /// repository `repository` (the site's `SITE/images`), tagged
    /// `image-<hex of its digest>`; idempotent. Returns it. Errors:
    /// [`Error::Repository`] (refused, or not a VEE image).
    pub async fn put_image_artifact(&self, repository: &str, layers: &[Layer]) -> Result<ImageArtifact> {
        let a = image_artifact(layers)?;
        let config = artifact::empty_config();
        let tag = image_tag(&a.digest);
        self.put_artifact(
            repository,
            &tag,
            (&config, artifact::EMPTY_CONFIG.to_vec()),
            layers,
            artifact::image_manifest(layers),
        )
        .await?;
        Ok(a)
    }

    /// `layers` mounted into `repository`, the config uploaded and the
    /// manifest `raw` put under `tag`; what it linked unlinked again on
    /// failure. The manifest's digest.
    async fn put_artifact(&self, repository: &str, tag: &str, config: (&Layer, Vec<u8>), layers: &[Layer], raw: Vec<u8>) -> Result<BlobId> {
        let mut linked = Vec::new();
        let result = self.link_and_put(repository, tag, config, layers, raw, &mut linked).await;
        if result.is_err() {
            for id in &linked {
                let _ = self.v2(Method::DELETE, &format!("/{repository}/blobs/{id}")).send().await;
            }
        }
        result
    }

    async fn link_and_put(
        &self,
        repository: &str,
        tag: &str,
        (config_layer, config): (&Layer, Vec<u8>),
        layers: &[Layer],
        raw: Vec<u8>,
        linked: &mut Vec<BlobId>,
    ) -> Result<BlobId> {
        for l in layers {
            let what = format!("mount {} into {repository}", l.digest);
            let path = format!("/{repository}/blobs/uploads/?mount={}", l.digest);
            let resp = self.send(&what, || self.v2(Method::POST, &path)).await?;
            if resp.status() != StatusCode::CREATED {
                // A session was opened instead (the blob is not mountable): close it.
                if let Some(location) = resp.headers().get(header::LOCATION).and_then(|v| v.to_str().ok()) {
                    let location = location.trim_start_matches("/v2").to_string();
                    let _ = self.v2(Method::DELETE, &location).send().await;
                }
                return Err(Error::Repository {
                    what,
                    reason: format!("{}: the blob is not one this site may read", resp.status()),
                });
            }
            linked.push(l.digest.clone());
        }
        let what = format!("upload {tag}'s config to {repository}");
        let path = format!("/{repository}/blobs/uploads/?digest={}", config_layer.digest);
        let resp = self
            .send(&what, || {
                self.v2(Method::POST, &path)
                    .header(header::CONTENT_TYPE, "application/octet-stream")
                    .body(config.clone())
            })
            .await?;
        check(&what, None, resp).await?;
        linked.push(config_layer.digest.clone());
        let digest = BlobId::of(&raw);
        let what = format!("put {tag} in {repository}");
        let path = format!("/{repository}/manifests/{tag}");
        let resp = self
            .send(&what, || {
                self.v2(Method::PUT, &path)
                    .header(header::CONTENT_TYPE, artifact::OCI_MANIFEST)
                    .body(raw.clone())
            })
            .await?;
        check(&what, None, resp).await?;
        Ok(digest)
    }

    /// Removes checkpoint `tag` from OCI repository `repository`: its
    /// manifest, and its config, its layers and `blobs` (the checkpoint's,
    /// as its record names them, in case the manifest never came to be)
    /// unlinked from the repository (their content stays while a pin or
    /// another repository holds it). When it was the last checkpoint there
    /// whose subject is an image artifact in `images` (the site's
    /// `SITE/images`), that artifact goes too, its blobs unlinked unless
    /// another image artifact there names them. Idempotent. Errors:
    /// [`Error::Repository`].
    pub async fn drop_checkpoint_artifact(&self, repository: &str, images: &str, tag: &str, blobs: &[BlobId]) -> Result<()> {
        let mut unlink: Vec<BlobId> = blobs.to_vec();
        let mut subject = None;
        if let Some((digest, m)) = self.manifest(repository, tag).await? {
            self.delete_manifest(repository, &digest).await?;
            unlink.extend(named_blobs(&m));
            subject = m["subject"]["digest"].as_str().and_then(|d| d.parse::<BlobId>().ok());
        }
        self.unlink(repository, unlink).await?;
        match subject {
            Some(s) => self.drop_unreferred_image(repository, images, &s).await,
            None => Ok(()),
        }
    }

    /// Drops image artifact `subject` from `images` when no manifest of
    /// `checkpoints` refers to it any more (see the module documentation).
    async fn drop_unreferred_image(&self, checkpoints: &str, images: &str, subject: &BlobId) -> Result<()> {
        let what = format!("referrers of {subject} in {checkpoints}");
        let path = format!("/{checkpoints}/referrers/{subject}");
        let resp = check(&what, None, self.send(&what, || self.v2(Method::GET, &path)).await?).await?;
        let index: serde_json::Value = resp.json().await.map_err(|e| super::transport(&what, &e))?;
        if index["manifests"].as_array().is_some_and(|m| !m.is_empty()) {
            return Ok(());
        }
        let Some((digest, m)) = self.manifest(images, &subject.to_string()).await? else {
            return Ok(());
        };
        if m["artifactType"].as_str() != Some(artifact::IMAGE_ARTIFACT_TYPE) {
            return Ok(());
        }
        // What the other image artifacts there name stays linked.
        let what = format!("tags of {images}");
        let path = format!("/{images}/tags/list?n=1000");
        let resp = self.send(&what, || self.v2(Method::GET, &path)).await?;
        let resp = check(&what, None, resp).await?;
        let more = resp.headers().contains_key(header::LINK);
        let tags: serde_json::Value = resp.json().await.map_err(|e| super::transport(&what, &e))?;
        let mut kept = Vec::new();
        for t in tags["tags"].as_array().into_iter().flatten().filter_map(|t| t.as_str()) {
            if t != image_tag(&digest) {
                if let Some((_, other)) = self.manifest(images, t).await? {
                    kept.extend(named_blobs(&other));
                }
            }
        }
        self.delete_manifest(images, &digest).await?;
        if more {
            // More image artifacts than one page: their links are kept.
            return Ok(());
        }
        let unlink = named_blobs(&m).into_iter().filter(|d| !kept.contains(d)).collect();
        self.unlink(images, unlink).await
    }

    /// Manifest `reference` of `repository` (its digest and JSON), `None`
    /// when there is none.
    async fn manifest(&self, repository: &str, reference: &str) -> Result<Option<(BlobId, serde_json::Value)>> {
        let what = format!("manifest {reference} in {repository}");
        let path = format!("/{repository}/manifests/{reference}");
        let resp = self
            .send(&what, || self.v2(Method::GET, &path).header(header::ACCEPT, artifact::OCI_MANIFEST))
            .await?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let raw = check(&what, None, resp)
            .await?
            .bytes()
            .await
            .map_err(|e| super::transport(&what, &e))?;
        let m = serde_json::from_slice(&raw).map_err(|e| Error::Repository {
            what,
            reason: format!("its manifest is not JSON: {e}"),
        })?;
        Ok(Some((BlobId::of(&raw), m)))
    }

    /// Deletes manifest `digest` of `repository` (gone already: fine).
    async fn delete_manifest(&self, repository: &str, digest: &BlobId) -> Result<()> {
        let what = format!("delete manifest {digest} of {repository}");
        let path = format!("/{repository}/manifests/{digest}");
        let resp = self.send(&what, || self.v2(Method::DELETE, &path)).await?;
        if resp.status() != StatusCode::NOT_FOUND {
            check(&what, None, resp).await?;
        }
        Ok(())
    }

    /// Unlinks `ids` from `repository` (those not linked: fine).
    async fn unlink(&self, repository: &str, mut ids: Vec<BlobId>) -> Result<()> {
        ids.sort();
        ids.dedup();
        for d in ids {
            let what = format!("unlink {d} from {repository}");
            let path = format!("/{repository}/blobs/{d}");
            let resp = self.send(&what, || self.v2(Method::DELETE, &path)).await?;
            if resp.status() != StatusCode::NOT_FOUND {
                check(&what, None, resp).await?;
            }
        }
        Ok(())
    }
}

/// The blobs manifest `m` names: its config and layers.
fn named_blobs(m: &serde_json::Value) -> Vec<BlobId> {
    let named = std::iter::once(&m["config"]).chain(m["layers"].as_array().into_iter().flatten());
    named.filter_map(|d| d["digest"].as_str()?.parse::<BlobId>().ok()).collect()
}

/// The tag of image artifact `digest` in `SITE/images`.
fn image_tag(digest: &BlobId) -> String {
    format!("image-{}", digest.hex())
}

/// The image artifact of `layers`, checked. Errors: not a VEE image.
fn image_artifact(layers: &[Layer]) -> Result<ImageArtifact> {
    ImageArtifact::parse(&artifact::image_manifest(layers)).map_err(|reason| Error::Repository {
        what: "an image artifact of a VEE's boot files".into(),
        reason,
    })
}
