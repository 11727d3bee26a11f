//! The site's repository as this host sees it (`image_repo`): where its
//! checkpoints go and come back from, and whether content IDs can be
//! pulled. Either the site's `image-repo` (blobs by ID through `/v1`, with
//! their kind and labels, the VEEM pinning them), or an OCI registry
//! (`oci://REGISTRY/NAMESPACE`, issue 39 item 6). In both a checkpoint is
//! also an OCI artifact in the site's `checkpoints` repository
//! (`SITE/checkpoints` of the image-repo's `/v2`, `NAMESPACE/checkpoints`
//! of the registry), tagged by its ID (`interfaces::artifact`:
//! its record as the config, the memory state and disk overlay as layers,
//! the VEE's image as `subject`: a registry image's artifact, or for a VEE
//! of content IDs the image artifact of its boot files, which an
//! image-repo site keeps in `SITE/images`).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use interfaces::artifact::{self, ImageArtifact, Layer};
use interfaces::registry::{Registries, SiteRegistry};
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::vhi::CheckpointRecord;
use interfaces::BlobId;

use crate::config::VeehConfig;

/// See the module documentation.
pub enum Repository {
    /// The site's `image-repo`, where the site's token has namespace `site`.
    Vee { client: RepoClient, site: String },
    /// An OCI registry, one of `registries`.
    Registry { registries: Arc<Registries>, site: SiteRegistry },
}

/// The image a checkpoint is of: its artifact's `subject`.
pub enum BaseImage {
    /// A registry image's artifact.
    Registry(Box<ImageArtifact>),
    /// The boot files of a VEE of content IDs (a disk, and a kernel and
    /// initrd), whose image artifact an image-repo site is given in
    /// `SITE/images`.
    BootFiles(Vec<Layer>),
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
    /// Its name in keys and logs: `memory`, `disk`.
    pub fn name(self) -> &'static str {
        match self {
            Part::Memory => "memory",
            Part::Disk => "disk",
        }
    }

    /// Its media type as an OCI layer (`artifact::MEMORY_STATE`,
    /// `artifact::DISK_OVERLAY`).
    pub fn media_type(self) -> &'static str {
        match self {
            Part::Memory => artifact::MEMORY_STATE,
            Part::Disk => artifact::DISK_OVERLAY,
        }
    }
}

impl Repository {
    /// The repository `cfg.image_repo` names: `oci://...` (the registry
    /// one of `cfg.registries`, the clients of `registries`), else an
    /// `image-repo` URL with the site's token and the CA. Errors name the
    /// field.
    pub fn open(cfg: &VeehConfig, registries: Arc<Registries>) -> Result<Self> {
        match SiteRegistry::parse(&cfg.image_repo, &cfg.registries) {
            Some(site) => {
                let site = site.map_err(|why| anyhow::anyhow!("field `image_repo`: {why}"))?;
                Ok(Self::Registry { registries, site })
            }
            None => Ok(Self::Vee {
                client: RepoClient::with_ca(&cfg.image_repo, cfg.image_repo_token.clone(), cfg.image_repo_ca.as_deref())?,
                site: cfg.site_id.clone(),
            }),
        }
    }

    /// The `image-repo` client, `None` for a registry (content IDs cannot
    /// be pulled from it).
    pub fn client(&self) -> Option<&RepoClient> {
        match self {
            Self::Vee { client, .. } => Some(client),
            Self::Registry { .. } => None,
        }
    }

    /// Pushes `part` of checkpoint `cp_id` of VEE `vee_id` from `path`;
    /// its layer (digest, size, media type).
    pub async fn push_part(&self, vee_id: &str, cp_id: &str, part: Part, path: &Path) -> Result<Layer> {
        match self {
            Self::Vee { client: c, .. } => {
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
    /// `base` as its subject; at an image-repo site the image artifact of
    /// `BaseImage::BootFiles` is put in `SITE/images` after it (so that a
    /// VEEM dropping the last checkpoint of that image meanwhile does not
    /// leave this one's subject gone). Errors: a registry refuses it
    /// (there its tag is what keeps the blobs); an image-repo's refusal is
    /// logged only.
    pub async fn record_checkpoint(&self, rec: &CheckpointRecord, layers: &[Layer], base: Option<&BaseImage>) -> Result<()> {
        let config = artifact::checkpoint_config(rec);
        let subject = match base {
            Some(BaseImage::Registry(a)) => Some((a.digest.clone(), a.size)),
            Some(BaseImage::BootFiles(files)) => {
                let raw = artifact::image_manifest(files);
                Some((BlobId::of(&raw), raw.len() as u64))
            }
            None => None,
        };
        let subject = subject.as_ref().map(|(d, n)| (d, *n));
        let (repository, digest) = match self {
            Self::Vee { client, site } => {
                // The VEEM's record and its pins are the checkpoint here;
                // the artifact shows it to OCI tools, and a repository
                // that refuses it (the site's token named otherwise than
                // the site) costs no checkpoint.
                let repository = format!("{site}/checkpoints");
                let digest = match client
                    .put_checkpoint_artifact(&repository, &rec.checkpoint_id, config, layers, subject)
                    .await
                {
                    Ok(digest) => digest,
                    Err(e) => {
                        tracing::warn!(checkpoint = %rec.checkpoint_id, %repository, error = %e, "no OCI artifact for this checkpoint");
                        return Ok(());
                    }
                };
                if let Some(BaseImage::BootFiles(files)) = base {
                    let images = format!("{site}/images");
                    match client.put_image_artifact(&images, files).await {
                        Ok(a) => tracing::info!(image = %a.digest, repository = %images, "image artifact of the VEE's boot files"),
                        Err(e) => {
                            tracing::warn!(checkpoint = %rec.checkpoint_id, repository = %images, error = %e, "no image artifact for this checkpoint's subject")
                        }
                    }
                }
                (repository, digest)
            }
            Self::Registry { registries, site } => {
                let repository = site.checkpoints();
                let digest = registries
                    .push_checkpoint(&repository, &rec.checkpoint_id, config, layers, subject)
                    .await?;
                (repository.to_string(), digest)
            }
        };
        tracing::info!(checkpoint = %rec.checkpoint_id, %digest, %repository, "checkpoint artifact pushed");
        Ok(())
    }

    /// Pulls `part` of a checkpoint, blob `id` of `size` bytes, to `dest`,
    /// verified by its digest.
    pub async fn pull_part(&self, id: &BlobId, size: u64, part: Part, dest: &Path) -> Result<u64> {
        match self {
            Self::Vee { client, .. } => Ok(client.pull(id, dest, None).await?),
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
