//! The images a VEE boots from on this host: content IDs pulled from the
//! site's image repository, or a registry image's artifact and layers
//! pulled from its OCI registry (its kernel and initrd booted when the VEE
//! names none), all into the image cache; their paths there; which cached
//! blobs the VEEs here use.

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::{Context, Result};
use interfaces::artifact::{self, ImageArtifact, Layer};
use interfaces::manifest::ImageRef;
use interfaces::vhi;
use interfaces::BlobId;

use super::Host;
use crate::error::HostError;
use crate::qemu_img;
use crate::vee_store::VeeRecord;

/// Local paths of the images a VEE boots from.
#[derive(Clone, Debug, Default)]
pub struct ImagePaths {
    pub base: Option<PathBuf>,
    pub kernel: Option<PathBuf>,
    pub initrd: Option<PathBuf>,
}

impl Host {
    /// Pulls (or finds in the cache) every image `rec` names: content IDs
    /// from the image repository; a registry image's artifact and its
    /// layers from its registry, its kernel and initrd booted when `rec`
    /// names none.
    pub async fn ensure_images(&self, rec: &VeeRecord, reply: &mut vhi::PrepareResponse) -> Result<ImagePaths> {
        let mut paths = ImagePaths::default();
        let mut note = |c: &crate::image_cache::Cached, id: &BlobId| {
            if c.pulled {
                reply.pulled.push(id.to_string());
                reply.bytes_pulled += c.bytes;
            } else {
                reply.cached.push(id.to_string());
            }
        };
        if let Some(ImageRef::Registry(image)) = image_ref(&rec.image)? {
            let artifact = self
                .cache
                .ensure_artifact(&image)
                .await
                .with_context(|| format!("VEE {}: field `image`", rec.vee_id))?;
            let direct = rec.kernel.is_empty();
            for (layer, slot) in [
                (Some(&artifact.disk), &mut paths.base),
                (artifact.kernel.as_ref().filter(|_| direct), &mut paths.kernel),
                (artifact.initrd.as_ref().filter(|_| direct), &mut paths.initrd),
            ] {
                let Some(layer) = layer else { continue };
                let c = self
                    .cache
                    .ensure_layer(&image, layer)
                    .await
                    .with_context(|| format!("VEE {}: field `image`", rec.vee_id))?;
                note(&c, &layer.digest);
                *slot = Some(c.path);
            }
        }
        for (field, id, slot) in [
            ("image", &rec.image, &mut paths.base),
            ("kernel", &rec.kernel, &mut paths.kernel),
            ("initrd", &rec.initrd, &mut paths.initrd),
        ] {
            if let Some(id) = blob(field, id)? {
                let c = self
                    .cache
                    .ensure(&id)
                    .await
                    .with_context(|| format!("VEE {}: field `{field}`", rec.vee_id))?;
                note(&c, &id);
                *slot = Some(c.path);
            }
        }
        Ok(paths)
    }

    /// Paths of images already in the cache (after `prepare`).
    pub fn image_paths(&self, rec: &VeeRecord) -> Result<ImagePaths> {
        let mut paths = ImagePaths::default();
        for (field, id, slot) in [
            ("image", &rec.image, &mut paths.base),
            ("kernel", &rec.kernel, &mut paths.kernel),
            ("initrd", &rec.initrd, &mut paths.initrd),
        ] {
            *slot = blob(field, id)?.map(|id| self.cache.path(&id));
        }
        if let Some(a) = self.cached_artifact(rec)? {
            paths.base = Some(self.cache.path(&a.disk.digest));
            if rec.kernel.is_empty() {
                paths.kernel = a.kernel.map(|l| self.cache.path(&l.digest));
                paths.initrd = a.initrd.map(|l| self.cache.path(&l.digest));
            }
        }
        Ok(paths)
    }

    /// The artifact of `rec`'s registry image, from the cache; `None` for
    /// a content ID. Errors: a registry image whose manifest is not cached
    /// (the VEE was not prepared here).
    pub(crate) fn cached_artifact(&self, rec: &VeeRecord) -> Result<Option<ImageArtifact>> {
        let Some(ImageRef::Registry(image)) = image_ref(&rec.image)? else {
            return Ok(None);
        };
        let digest = image
            .digest
            .as_ref()
            .with_context(|| format!("VEE {}: field `image` ({image}) names no digest", rec.vee_id))?;
        let a = self
            .cache
            .cached_artifact(digest)
            .with_context(|| format!("VEE {}: field `image` ({image}) is not in the image cache", rec.vee_id))?;
        Ok(Some(a))
    }

    /// The layers of the image artifact of `rec`'s boot files when its
    /// image is a content ID (its checkpoints' `subject`): the cached disk
    /// (`+qcow2` or `+raw` by its header, as it boots), and its kernel
    /// and initrd when they are content IDs too. `None` for a registry
    /// image (it has an artifact) or no disk. Errors: a file not cached,
    /// an image `qemu-img` refuses.
    pub(crate) fn boot_file_layers(&self, rec: &VeeRecord) -> Result<Option<Vec<Layer>>> {
        let Some(ImageRef::Repository(disk)) = image_ref(&rec.image)? else {
            return Ok(None);
        };
        let paths = self.image_paths(rec)?;
        let layer = |id: BlobId, path: Option<PathBuf>, media_type: &str| -> Result<Layer> {
            let path = path.with_context(|| format!("{id} is not in the image cache"))?;
            let size = std::fs::metadata(&path).with_context(|| path.display().to_string())?.len();
            Ok(Layer {
                digest: id,
                size,
                media_type: media_type.into(),
            })
        };
        let format = qemu_img::inspect(paths.base.as_deref().context("no disk path")?, qemu_img::Layer::Base)?;
        let disk_type = match format {
            qemu_img::DiskFormat::Qcow2 => artifact::DISK_QCOW2,
            qemu_img::DiskFormat::Raw => artifact::DISK_RAW,
        };
        let mut layers = vec![layer(disk, paths.base, disk_type)?];
        if let Some(k) = blob("kernel", &rec.kernel)? {
            layers.push(layer(k, paths.kernel, artifact::KERNEL)?);
            if let Some(i) = blob("initrd", &rec.initrd)? {
                layers.push(layer(i, paths.initrd, artifact::INITRD)?);
            }
        }
        Ok(Some(layers))
    }

    /// Blob IDs any VEE on this host references.
    pub fn images_in_use(&self) -> Result<HashSet<BlobId>> {
        let mut set = HashSet::new();
        for r in self.vees.list()? {
            for id in [&r.image, &r.kernel, &r.initrd] {
                if let Ok(id) = id.parse() {
                    set.insert(id);
                }
            }
            if let Ok(Some(a)) = self.cached_artifact(&r) {
                set.extend(a.layers().map(|l| l.digest.clone()));
            }
        }
        Ok(set)
    }
}

/// A content ID field of a VEE's spec: `None` when empty or when the image
/// is a registry image (its layers' digests are in its artifact).
fn blob(field: &str, id: &str) -> Result<Option<BlobId>> {
    if id.is_empty() {
        return Ok(None);
    }
    match id.parse::<ImageRef>().map_err(|e| HostError::field(field, e))? {
        ImageRef::Repository(id) => Ok(Some(id)),
        ImageRef::Registry(_) if field == "image" => Ok(None),
        ImageRef::Registry(_) => Err(HostError::field(field, "must be a content ID (sha256:<hex>)").into()),
    }
}

/// The image a VEE's spec names, `None` when it has no disk.
fn image_ref(image: &str) -> Result<Option<ImageRef>> {
    if image.is_empty() {
        return Ok(None);
    }
    Ok(Some(image.parse().map_err(|e| HostError::field("image", e))?))
}
