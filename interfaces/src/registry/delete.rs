//! A checkpoint artifact removed from a registry (the VEEM's
//! `checkpoints_kept` at a site whose repository is a registry): its
//! manifest deleted by digest, which drops its tag, and its entry taken out
//! of its subject's referrers index where the registry keeps the tag
//! schema fallback. `oci-client` has no delete: the `DELETE` is a request
//! of our own with the entry's credentials (a bearer token from the
//! registry's token service when it has one, else HTTP Basic), as the OCI
//! Distribution Specification's "Deleting manifests" states it. The
//! registry then garbage-collects the blobs nothing else references.

use oci_client::manifest::OciImageIndex;
use oci_client::{Reference, RegistryOperation};
use reqwest::header::HeaderValue;
use reqwest::StatusCode;

use super::{registry_err, Entry, Registries};
use crate::artifact::{self, OCI_INDEX, OCI_MANIFEST};
use crate::error::Result;
use crate::manifest::RegistryImage;
use crate::BlobId;

/// What became of a checkpoint artifact asked to go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// Its manifest (and tag) deleted.
    Removed,
    /// No manifest has that tag (gone already).
    Absent,
    /// The registry does not delete manifests (Distribution without
    /// `storage.delete.enabled`): its own retention applies. The reason.
    Unsupported(String),
}

impl Registries {
    /// Removes checkpoint `tag` from `repository` (a registry and
    /// repository, without tag or digest): the checkpoint artifact's
    /// manifest deleted by its digest, and its entry in the referrers
    /// index tagged `sha256-<subject hex>` (the tag schema fallback) when
    /// there is one. Idempotent. Errors: [`Error::Registry`] (refused,
    /// unreachable, or the tag names something other than a checkpoint
    /// artifact, which is left alone).
    pub async fn drop_checkpoint(&self, repository: &RegistryImage, tag: &str) -> Result<Dropped> {
        let e = self.find(&repository.registry, &repository.to_string())?;
        let what = format!("checkpoint {tag} in {repository}");
        let Some(raw) = self.manifest_if_any(e, repository, tag, OCI_MANIFEST).await? else {
            return Ok(Dropped::Absent);
        };
        let m: serde_json::Value =
            serde_json::from_slice(&raw).map_err(|err| registry_err(&repository.registry, &what, format!("not JSON: {err}")))?;
        if m["artifactType"].as_str() != Some(artifact::CHECKPOINT_ARTIFACT_TYPE) {
            return Err(registry_err(
                &repository.registry,
                &what,
                format!("the tag names a {:?}, not a checkpoint artifact: left alone", m["artifactType"]),
            ));
        }
        let digest = BlobId::of(&raw);
        if let Some(subject) = m["subject"]["digest"].as_str().and_then(|d| d.parse::<BlobId>().ok()) {
            self.drop_referrer(e, repository, &subject, &digest).await?;
        }
        self.delete_manifest(e, repository, &digest).await
    }

    /// The bytes of manifest `reference` (a tag) of `repository`
    /// accepting `media_type`; `None` when the registry has none.
    async fn manifest_if_any(&self, e: &Entry, repository: &RegistryImage, reference: &str, media_type: &str) -> Result<Option<Vec<u8>>> {
        let at = Reference::with_tag(repository.registry.clone(), repository.repository.clone(), reference.to_string());
        match e.client.pull_manifest_raw(&at, e.signed_in().await?, &[media_type]).await {
            Ok((raw, _)) if raw.len() > artifact::MAX_MANIFEST_BYTES => Err(registry_err(
                &repository.registry,
                format!("manifest {reference} of {repository}"),
                format!("{} bytes; at most {}", raw.len(), artifact::MAX_MANIFEST_BYTES),
            )),
            Ok((raw, _)) => Ok(Some(raw.to_vec())),
            Err(err) if not_found(&err) => Ok(None),
            Err(err) => Err(registry_err(
                &repository.registry,
                format!("manifest {reference} of {repository}"),
                crate::error::chain(&err),
            )),
        }
    }

    /// Takes `referrer` out of the tag schema fallback's index of
    /// `subject` in `repository`, if the registry keeps one: the index
    /// pushed again without it, or deleted when it was the last.
    async fn drop_referrer(&self, e: &Entry, repository: &RegistryImage, subject: &BlobId, referrer: &BlobId) -> Result<()> {
        let tag = format!("sha256-{}", subject.hex());
        let Some(raw) = self.manifest_if_any(e, repository, &tag, OCI_INDEX).await? else {
            return Ok(());
        };
        let what = format!("referrers index {tag} of {repository}");
        let mut index: OciImageIndex =
            serde_json::from_slice(&raw).map_err(|err| registry_err(&repository.registry, &what, format!("not an index: {err}")))?;
        let before = index.manifests.len();
        index.manifests.retain(|m| m.digest != referrer.to_string());
        if index.manifests.len() == before {
            return Ok(());
        }
        if index.manifests.is_empty() {
            self.delete_manifest(e, repository, &BlobId::of(&raw)).await?;
            return Ok(());
        }
        let body = serde_json::to_vec(&index).expect("an index serializes");
        let at = Reference::with_tag(repository.registry.clone(), repository.repository.clone(), tag);
        e.client
            .push_manifest_raw(&at, body, HeaderValue::from_static(OCI_INDEX))
            .await
            .map_err(|err| registry_err(&repository.registry, &what, crate::error::chain(&err)))?;
        Ok(())
    }

    /// `DELETE /v2/<name>/manifests/<digest>`: 202 removed, 404 absent,
    /// 405 or `UNSUPPORTED` not done by this registry.
    async fn delete_manifest(&self, e: &Entry, repository: &RegistryImage, digest: &BlobId) -> Result<Dropped> {
        let what = format!("delete manifest {digest} of {repository}");
        let at = Reference::with_digest(repository.registry.clone(), repository.repository.clone(), digest.to_string());
        let auth = e.signed_in().await?;
        let token = e
            .client
            .auth(&at, auth, RegistryOperation::Push)
            .await
            .map_err(|err| registry_err(&repository.registry, "sign in to delete", crate::error::chain(&err)))?;
        let url = format!("https://{}/v2/{}/manifests/{digest}", repository.registry, repository.repository);
        let mut req = e.http.delete(&url);
        req = match (token, auth) {
            (Some(t), _) => req.bearer_auth(t),
            (None, oci_client::secrets::RegistryAuth::Basic(user, password)) => req.basic_auth(user, Some(password)),
            (None, _) => req,
        };
        let resp = req
            .send()
            .await
            .map_err(|err| registry_err(&repository.registry, &what, crate::error::chain(&err)))?;
        let status = resp.status();
        let raw = resp.bytes().await.unwrap_or_default();
        let body = crate::excerpt::excerpt(&String::from_utf8_lossy(&raw), 300).into_owned();
        match status {
            s if s.is_success() => Ok(Dropped::Removed),
            StatusCode::NOT_FOUND => Ok(Dropped::Absent),
            StatusCode::METHOD_NOT_ALLOWED => Ok(Dropped::Unsupported(format!("{status}: {body}"))),
            s if body.contains("UNSUPPORTED") => Ok(Dropped::Unsupported(format!("{s}: {body}"))),
            s => Err(registry_err(&repository.registry, what, format!("{s}: {body}"))),
        }
    }
}

/// Whether `err` says the registry has no such manifest.
fn not_found(err: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::OciDistributionError as E;
    match err {
        E::ImageManifestNotFoundError(_) => true,
        E::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, oci_client::errors::OciErrorCode::ManifestUnknown)),
        E::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}
