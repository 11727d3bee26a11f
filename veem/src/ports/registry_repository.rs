//! [`ImageRepository`] of a site whose repository is an OCI registry
//! (`image_repo = "oci://REGISTRY/NAMESPACE"`, issue 39 item 6). Its
//! images are registry images (resolved at admission, pulled by the
//! VEEHs), its checkpoints artifacts its VEEHs push to
//! `NAMESPACE/checkpoints`, tagged by their IDs: the tag keeps their blobs
//! from the registry's garbage collection, so pins are not needed; a
//! checkpoint the VEEM forgets (`checkpoints_kept`) has its manifest
//! deleted (`Registries::drop_checkpoint`), after which the registry's
//! garbage collection takes its blobs (a registry that deletes no
//! manifests keeps them: its own retention applies). Content IDs and
//! sharing or replicating checkpoint blobs with peer sites need an
//! `image-repo`: refused with the reason.

use std::sync::Arc;

use anyhow::{bail, Result};
use interfaces::registry::{Dropped, Registries, SiteRegistry};
use interfaces::BlobId;

use super::ImageRepository;

/// See the module documentation.
pub struct RegistryRepository {
    pub site: SiteRegistry,
    /// The site's `[[registries]]`, the site's registry among them.
    pub registries: Arc<Registries>,
}

#[tonic::async_trait]
impl ImageRepository for RegistryRepository {
    async fn grant_for(&self, id: &BlobId, _provider: &str) -> Result<bool> {
        bail!(
            "{id} is a content ID, and this site's repository is the OCI registry {}: name the image there as {}/REPOSITORY@sha256:... or :TAG",
            self.site.registry,
            self.site.registry
        )
    }
    async fn share(&self, id: &BlobId, site: &str) -> Result<()> {
        bail!(
            "checkpoint blob {id} is in this site's OCI registry {}, which peer site {site} does not read (sharing and replicating checkpoints need an image-repo)",
            self.site.registry
        )
    }
    async fn pin(&self, _id: &BlobId, _pin: &str) -> Result<()> {
        Ok(())
    }
    async fn unpin(&self, _id: &BlobId, _pin: &str) -> Result<()> {
        Ok(())
    }
    async fn replicate(&self, id: &BlobId, site: &str) -> Result<()> {
        self.share(id, site).await
    }
    async fn forget_checkpoint(&self, _site: &str, checkpoint_id: &str, _blobs: &[BlobId]) -> Result<()> {
        let repository = self.site.checkpoints();
        match self.registries.drop_checkpoint(&repository, checkpoint_id).await? {
            Dropped::Removed => tracing::info!(checkpoint = checkpoint_id, %repository, "checkpoint artifact deleted"),
            Dropped::Absent => {}
            Dropped::Unsupported(why) => {
                tracing::warn!(checkpoint = checkpoint_id, %repository, %why, "the registry deletes no manifests: its own retention applies")
            }
        }
        Ok(())
    }
}
