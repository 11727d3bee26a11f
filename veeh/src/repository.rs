//! The site's repository as this host sees it (`image_repo`): where its
//! checkpoints go and come back from, and whether content IDs can be
//! pulled. Either the site's `image-repo` (`/v1`: blobs by ID with their
//! kind and labels), or an OCI registry (`oci://REGISTRY/NAMESPACE`, issue
//! 39 item 6), where a checkpoint is an artifact in `NAMESPACE/checkpoints`
//! tagged by its ID (`interfaces::registry::artifact`: its record as the
//! config, the memory state and disk overlay as layers, the base image's
//! manifest as `subject`).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use interfaces::registry::artifact::{self, ImageArtifact, Layer};
use interfaces::registry::{Registries, SiteRegistry};
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::vhi::CheckpointRecord;
use interfaces::BlobId;

/// See the module documentation.
pub enum Repository {
    /// The site's `image-repo`.
    Vee(RepoClient),
    /// An OCI registry, one of `registries`.
    Registry { registries: Arc<Registries>, site: SiteRegistry },
}

/// Which part of a checkpoint a blob is.
#[derive(Clone, Copy, Debug)]
pub enum Part {
    /// The memory and device state.
    Memory,
    /// The frozen disk overlay (qcow2).
    Disk,
}

impl Part {
    fn media_type(self) -> &'static str {
        match self {
            Part::Memory => artifact::MEMORY_STATE,
            Part::Disk => artifact::DISK_OVERLAY,
        }
    }
}

impl Repository {
    /// The repository `image_repo` names: `oci://...` (the registry must be
    /// one of `registries`), else an `image-repo` URL with its token and
    /// CA. Errors name the field.
    pub fn open(image_repo: &str, token: Option<String>, ca: Option<&Path>, registries: Arc<Registries>) -> Result<Self> {
        match SiteRegistry::parse(image_repo) {
            Some(site) => {
                let site = site.map_err(|why| anyhow::anyhow!("field `image_repo`: {why}"))?;
                anyhow::ensure!(
                    registries.trusts(&site.registry),
                    "field `image_repo`: registry {} is not one of the [[registries]]",
                    site.registry
                );
                Ok(Self::Registry { registries, site })
            }
            None => Ok(Self::Vee(RepoClient::with_ca(image_repo, token, ca)?)),
        }
    }

    /// The `image-repo` client, `None` for a registry (content IDs cannot
    /// be pulled from it).
    pub fn client(&self) -> Option<&RepoClient> {
        match self {
            Self::Vee(c) => Some(c),
            Self::Registry { .. } => None,
        }
    }

    /// Pushes `part` of checkpoint `cp_id` of VEE `vee_id` from `path`;
    /// its layer (digest, size, media type).
    pub async fn push_part(&self, vee_id: &str, cp_id: &str, part: Part, path: &Path) -> Result<Layer> {
        match self {
            Self::Vee(c) => {
                let (name, kind) = match part {
                    Part::Memory => ("memory", BlobKind::CheckpointMemory),
                    Part::Disk => ("disk", BlobKind::CheckpointDisk),
                };
                let mut meta = PushMeta::new(format!("vee-{vee_id}-{cp_id}-{name}"), kind);
                if let Part::Disk = part {
                    meta.format = Some("qcow2".into());
                }
                meta.labels.insert("vee".into(), vee_id.to_string());
                let digest = c.push_file(path, &meta).await?;
                Ok(Layer {
                    digest,
                    size: std::fs::metadata(path)?.len(),
                    media_type: part.media_type().into(),
                })
            }
            Self::Registry { registries, site } => Ok(registries.push_layer(&site.checkpoints(), part.media_type(), path).await?),
        }
    }

    /// Records checkpoint `rec` of `layers` (pushed with
    /// [`Repository::push_part`]) as an artifact tagged by its ID, with
    /// `base` (the VEE's image artifact) as its subject; nothing to do in
    /// an `image-repo`, where the VEEM pins the blobs.
    pub async fn record_checkpoint(&self, rec: &CheckpointRecord, layers: &[Layer], base: Option<&ImageArtifact>) -> Result<()> {
        let Self::Registry { registries, site } = self else { return Ok(()) };
        let digest = registries
            .push_checkpoint(
                &site.checkpoints(),
                &rec.checkpoint_id,
                artifact::checkpoint_config(rec),
                layers,
                base.map(|b| (&b.digest, b.size)),
            )
            .await?;
        tracing::info!(checkpoint = %rec.checkpoint_id, %digest, repository = %site.checkpoints(), "checkpoint artifact pushed");
        Ok(())
    }

    /// Pulls `part` of a checkpoint, blob `id` of `size` bytes, to `dest`,
    /// verified by its digest.
    pub async fn pull_part(&self, id: &BlobId, size: u64, part: Part, dest: &Path) -> Result<u64> {
        match self {
            Self::Vee(c) => Ok(c.pull(id, dest, None).await?),
            Self::Registry { registries, site } => {
                let layer = Layer {
                    digest: id.clone(),
                    size,
                    media_type: part.media_type().into(),
                };
                registries
                    .pull_layer(&site.checkpoints(), &layer, dest)
                    .await
                    .with_context(|| format!("from {}", site.checkpoints()))
            }
        }
    }
}
