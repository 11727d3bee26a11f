//! A checkpoint as an OCI artifact in the repository's own OCI API (`/v2`,
//! issue 39 item 2), beside its blobs pushed through `/v1`: the blobs are
//! mounted (linked) into the site's `SITE/checkpoints` repository, the
//! checkpoint record pushed as the config, the manifest tagged by the
//! checkpoint's ID; and all of it removed again when the VEEM forgets the
//! checkpoint, so that garbage collection may take the blobs once their
//! pins are gone too.

use reqwest::{header, Method, RequestBuilder, StatusCode};

use super::{check, RepoClient};
use crate::artifact::{self, Layer};
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
        let mut linked = Vec::new();
        let result = self.put_artifact(repository, tag, config, layers, subject, &mut linked).await;
        if result.is_err() {
            for id in &linked {
                let _ = self.v2(Method::DELETE, &format!("/{repository}/blobs/{id}")).send().await;
            }
        }
        result
    }

    async fn put_artifact(
        &self,
        repository: &str,
        tag: &str,
        config: Vec<u8>,
        layers: &[Layer],
        subject: Option<(&BlobId, u64)>,
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
        let config_layer = Layer::of(artifact::CHECKPOINT_CONFIG, &config);
        let what = format!("upload checkpoint {tag}'s record to {repository}");
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
        let raw = artifact::checkpoint_manifest(&config_layer, layers, subject);
        let digest = BlobId::of(&raw);
        let what = format!("put checkpoint {tag} in {repository}");
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
    /// another repository holds it). Idempotent. Errors:
    /// [`Error::Repository`].
    pub async fn drop_checkpoint_artifact(&self, repository: &str, tag: &str, blobs: &[BlobId]) -> Result<()> {
        let what = format!("checkpoint {tag} in {repository}");
        let path = format!("/{repository}/manifests/{tag}");
        let resp = self
            .send(&what, || self.v2(Method::GET, &path).header(header::ACCEPT, artifact::OCI_MANIFEST))
            .await?;
        let mut unlink: Vec<BlobId> = blobs.to_vec();
        if resp.status() != StatusCode::NOT_FOUND {
            let raw = check(&what, None, resp)
                .await?
                .bytes()
                .await
                .map_err(|e| super::transport(&what, &e))?;
            let m: serde_json::Value = serde_json::from_slice(&raw).map_err(|e| Error::Repository {
                what: what.clone(),
                reason: format!("its manifest is not JSON: {e}"),
            })?;
            let digest = BlobId::of(&raw);
            let resp = self
                .send(&what, || self.v2(Method::DELETE, &format!("/{repository}/manifests/{digest}")))
                .await?;
            if resp.status() != StatusCode::NOT_FOUND {
                check(&what, None, resp).await?;
            }
            let named = std::iter::once(&m["config"]).chain(m["layers"].as_array().into_iter().flatten());
            unlink.extend(named.filter_map(|d| d["digest"].as_str()?.parse::<BlobId>().ok()));
        }
        unlink.sort();
        unlink.dedup();
        for d in unlink {
            let resp = self
                .send(&what, || self.v2(Method::DELETE, &format!("/{repository}/blobs/{d}")))
                .await?;
            if resp.status() != StatusCode::NOT_FOUND {
                check(&what, None, resp).await?;
            }
        }
        Ok(())
    }
}
