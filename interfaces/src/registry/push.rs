//! Pushing VEE artifacts to a registry: layers from files (streamed, each
//! hashed first so that the registry checks the digest it is told; one
//! the repository holds is not sent again), a config, then the manifest
//! under a tag or its digest: an image artifact ([`Registries::push_image`])
//! or a checkpoint's ([`Registries::push_checkpoint`]).

use std::path::Path;

use oci_client::manifest::ImageIndexEntry;
use oci_client::Reference;
use reqwest::header::HeaderValue;
use tokio_util::io::ReaderStream;

use crate::artifact::{self, Layer};

use super::{registry_err, Registries};
use crate::error::{Error, Result};
use crate::manifest::RegistryImage;
use crate::repo_client::sink::hash_file;
use crate::BlobId;

impl Registries {
    /// Pushes an image artifact of `files` (each a layer's media type and
    /// file: a disk, and a kernel and initrd for direct boot) as `image`
    /// (tagged, or by the digest it must have). Returns the manifest's
    /// digest. Errors: [`Error::Registry`] (the registry refused or the
    /// artifact would not be a VEE image), [`Error::Io`].
    pub async fn push_image(&self, image: &RegistryImage, files: &[(&str, &Path)]) -> Result<BlobId> {
        let (e, repo) = self.signed_in_to_push(image).await?;
        let mut layers = Vec::new();
        for (media_type, path) in files {
            layers.push(self.push_layer(image, media_type, path).await?);
        }
        let raw = artifact::image_manifest(&layers);
        artifact::ImageArtifact::parse(&raw).map_err(|why| registry_err(&image.registry, "push", format!("not a VEE image: {why}")))?;
        e.client
            .push_blob(&repo, artifact::EMPTY_CONFIG, &BlobId::of(artifact::EMPTY_CONFIG).to_string())
            .await
            .map_err(|err| registry_err(&image.registry, "push the empty config", crate::error::chain(&err)))?;
        let digest = BlobId::of(&raw);
        let target = match (&image.tag, &image.digest) {
            (Some(t), _) => Reference::with_tag(image.registry.clone(), image.repository.clone(), t.clone()),
            (None, Some(d)) if d == &digest => Reference::with_digest(image.registry.clone(), image.repository.clone(), d.to_string()),
            (None, Some(d)) => {
                return Err(registry_err(
                    &image.registry,
                    image.to_string(),
                    format!("the artifact's digest is {digest}, not {d}"),
                ))
            }
            (None, None) => return Err(registry_err(&image.registry, image.to_string(), "names neither a tag nor a digest")),
        };
        e.client
            .push_manifest_raw(&target, raw, HeaderValue::from_static(artifact::OCI_MANIFEST))
            .await
            .map_err(|err| registry_err(&image.registry, format!("push the manifest of {image}"), crate::error::chain(&err)))?;
        Ok(digest)
    }

    /// The client of `image`'s registry, signed in to push to its
    /// repository, and a reference to that repository.
    async fn signed_in_to_push(&self, image: &RegistryImage) -> Result<(&super::Entry, Reference)> {
        let e = self.find(&image.registry, &image.to_string())?;
        let repo = Reference::with_tag(image.registry.clone(), image.repository.clone(), "push".into());
        e.client
            .auth(&repo, e.signed_in().await?, oci_client::RegistryOperation::Push)
            .await
            .map_err(|err| registry_err(&image.registry, "sign in to push", crate::error::chain(&err)))?;
        Ok((e, repo))
    }

    /// Pushes file `path` as a blob of `image`'s repository (not sent when
    /// the repository holds it); its layer descriptor with `media_type`.
    pub async fn push_layer(&self, image: &RegistryImage, media_type: &str, path: &Path) -> Result<Layer> {
        let (e, repo) = self.signed_in_to_push(image).await?;
        let w = hash_file(path).await.map_err(|err| Error::io(path, err))?;
        let what = format!("push {}", path.display());
        if !e.client.blob_exists(&repo, &w.id.to_string()).await.unwrap_or(false) {
            let file = tokio::fs::File::open(path).await.map_err(|err| Error::io(path, err))?;
            let stream = futures::TryStreamExt::map_err(ReaderStream::new(file), oci_client::errors::OciDistributionError::from);
            e.client
                .push_blob_stream(&repo, stream, &w.id.to_string(), Some(w.len))
                .await
                .map_err(|err| registry_err(&image.registry, &what, crate::error::chain(&err)))?;
        }
        Ok(Layer {
            digest: w.id,
            size: w.len,
            media_type: media_type.to_string(),
        })
    }

    /// Pushes a checkpoint artifact to `repository` (a registry and
    /// repository, without tag or digest), tagged `tag`: `config` (the
    /// checkpoint record, [`artifact::CHECKPOINT_CONFIG`]) and the manifest
    /// of `layers` (pushed before with [`Registries::push_layer`]), with
    /// `subject` its base image's manifest (digest, size). Returns the
    /// manifest's digest. Errors: [`Error::Registry`].
    pub async fn push_checkpoint(
        &self,
        repository: &RegistryImage,
        tag: &str,
        config: Vec<u8>,
        layers: &[Layer],
        subject: Option<(&BlobId, u64)>,
    ) -> Result<BlobId> {
        let (e, repo) = self.signed_in_to_push(repository).await?;
        let config_layer = Layer::of(artifact::CHECKPOINT_CONFIG, &config);
        e.client
            .push_blob(&repo, config, &config_layer.digest.to_string())
            .await
            .map_err(|err| registry_err(&repository.registry, "push a checkpoint's record", crate::error::chain(&err)))?;
        let raw = artifact::checkpoint_manifest(&config_layer, layers, subject);
        let digest = BlobId::of(&raw);
        let target = Reference::with_tag(repository.registry.clone(), repository.repository.clone(), tag.to_string());
        let size = raw.len() as i64;
        e.client
            .push_manifest_raw(&target, raw, HeaderValue::from_static(artifact::OCI_MANIFEST))
            .await
            .map_err(|err| registry_err(&repository.registry, format!("push checkpoint {tag}"), crate::error::chain(&err)))?;
        if let Some((subject, _)) = subject {
            let entry = ImageIndexEntry {
                media_type: artifact::OCI_MANIFEST.into(),
                digest: digest.to_string(),
                size,
                platform: None,
                annotations: None,
                artifact_type: Some(artifact::CHECKPOINT_ARTIFACT_TYPE.into()),
            };
            self.add_referrer(e, repository, subject, entry).await?;
        }
        Ok(digest)
    }

    /// Makes `entry` (a manifest just pushed with `subject`) a referrer of
    /// `subject` in `repository`: a registry with the referrers API lists
    /// it already; for one without (Distribution 2.8) the specification's
    /// tag schema fallback, the image index tagged `sha256-<hex>` of the
    /// subject, gets it added.
    async fn add_referrer(&self, e: &super::Entry, repository: &RegistryImage, subject: &BlobId, entry: ImageIndexEntry) -> Result<()> {
        let at = |tag: Option<String>| match tag {
            Some(t) => Reference::with_tag(repository.registry.clone(), repository.repository.clone(), t),
            None => Reference::with_digest(repository.registry.clone(), repository.repository.clone(), subject.to_string()),
        };
        let what = format!("referrers of {subject} in {repository}");
        let mut index = e
            .client
            .pull_referrers(&at(None), None)
            .await
            .map_err(|err| registry_err(&repository.registry, &what, crate::error::chain(&err)))?;
        if index.manifests.iter().any(|m| m.digest == entry.digest) {
            return Ok(());
        }
        index.media_type = Some(artifact::OCI_INDEX.into());
        index.manifests.push(entry);
        let body = serde_json::to_vec(&index).expect("an index serializes");
        e.client
            .push_manifest_raw(
                &at(Some(format!("sha256-{}", subject.hex()))),
                body,
                HeaderValue::from_static(artifact::OCI_INDEX),
            )
            .await
            .map_err(|err| registry_err(&repository.registry, &what, crate::error::chain(&err)))?;
        Ok(())
    }

    /// The digests of the manifests of `artifact_type` whose subject is
    /// `subject` in `repository` (the referrers API, else its tag schema
    /// fallback). Errors: [`Error::Registry`].
    pub async fn referrers(&self, repository: &RegistryImage, subject: &BlobId, artifact_type: &str) -> Result<Vec<BlobId>> {
        let e = self.find(&repository.registry, &repository.to_string())?;
        let at = Reference::with_digest(repository.registry.clone(), repository.repository.clone(), subject.to_string());
        e.client.store_auth_if_needed(&repository.registry, e.signed_in().await?).await;
        let index = e
            .client
            .pull_referrers(&at, Some(artifact_type))
            .await
            .map_err(|err| registry_err(&repository.registry, format!("referrers of {subject}"), crate::error::chain(&err)))?;
        Ok(index.manifests.iter().filter_map(|m| m.digest.parse().ok()).collect())
    }
}
