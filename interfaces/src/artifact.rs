//! The VEE artifacts in OCI registries (issue 39, item 2): their
//! `artifactType`s and layer media types, and an image artifact's manifest
//! read, checked and built. An image artifact is an OCI image manifest
//! (`application/vnd.oci.image.manifest.v1+json`) with
//!
//! | field | value |
//! |---|---|
//! | `artifactType` | [`IMAGE_ARTIFACT_TYPE`] `application/vnd.vee.image.v1` |
//! | `config` | the empty descriptor (`application/vnd.oci.empty.v1+json`, `{}`) |
//! | `layers` | one disk ([`DISK_QCOW2`] or [`DISK_RAW`]), at most one kernel ([`KERNEL`]) and one initrd ([`INITRD`]), nothing else |
//!
//! A checkpoint artifact ([`CHECKPOINT_ARTIFACT_TYPE`]) has the checkpoint
//! record as its config ([`CHECKPOINT_CONFIG`]), the memory state
//! ([`MEMORY_STATE`]) and the frozen disk overlay ([`DISK_OVERLAY`]) as its
//! layers, and its base image's manifest as its `subject`.

use oci_spec::image::{Descriptor, ImageManifest, MediaType};

use crate::BlobId;

/// `artifactType` of a VM image.
pub const IMAGE_ARTIFACT_TYPE: &str = "application/vnd.vee.image.v1";
/// `artifactType` of a whole-VM checkpoint.
pub const CHECKPOINT_ARTIFACT_TYPE: &str = "application/vnd.vee.checkpoint.v1";
/// A disk image in qcow2.
pub const DISK_QCOW2: &str = "application/vnd.vee.disk.v1+qcow2";
/// A raw disk image.
pub const DISK_RAW: &str = "application/vnd.vee.disk.v1+raw";
/// A kernel for direct kernel boot.
pub const KERNEL: &str = "application/vnd.vee.kernel.v1";
/// An initial ramdisk for direct kernel boot.
pub const INITRD: &str = "application/vnd.vee.initrd.v1";
/// A checkpoint's record (JSON), its artifact's config.
pub const CHECKPOINT_CONFIG: &str = "application/vnd.vee.checkpoint.config.v1+json";
/// A checkpoint's memory and device state.
pub const MEMORY_STATE: &str = "application/vnd.vee.memory.v1";
/// A checkpoint's frozen disk overlay (qcow2 over the base image).
pub const DISK_OVERLAY: &str = "application/vnd.vee.disk-overlay.v1+qcow2";
/// The OCI image manifest's media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI image index's media type (the referrers tag schema's).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The largest manifest read, in bytes (the OCI specification's 4 MiB).
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// One layer of an artifact: its digest, size in bytes and media type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    pub digest: BlobId,
    pub size: u64,
    pub media_type: String,
}

impl Layer {
    /// The layer of `content` (its digest and size) with `media_type`.
    pub fn of(media_type: &str, content: &[u8]) -> Self {
        Self {
            digest: BlobId::of(content),
            size: content.len() as u64,
            media_type: media_type.into(),
        }
    }
}

/// An image artifact's manifest, checked: see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageArtifact {
    /// The digest of the manifest's bytes.
    pub digest: BlobId,
    /// The manifest's size in bytes (a checkpoint's `subject` gives it).
    pub size: u64,
    pub disk: Layer,
    pub kernel: Option<Layer>,
    pub initrd: Option<Layer>,
}

impl ImageArtifact {
    /// Reads the manifest `raw`. Errors name what is wrong: not an OCI image
    /// manifest, another artifact type, a missing, repeated or unknown layer,
    /// a digest that is not sha256, larger than [`MAX_MANIFEST_BYTES`].
    pub fn parse(raw: &[u8]) -> Result<Self, String> {
        if raw.len() > MAX_MANIFEST_BYTES {
            return Err(format!("the manifest is {} bytes; at most {MAX_MANIFEST_BYTES}", raw.len()));
        }
        let m: ImageManifest = serde_json::from_slice(raw).map_err(|e| format!("not an OCI image manifest: {e}"))?;
        if m.media_type().as_ref().is_some_and(|t| t.to_string() != OCI_MANIFEST) {
            return Err(format!(
                "media type {:?}; an image artifact is an OCI image manifest",
                m.media_type()
            ));
        }
        // The specification's rule: the artifact type, else the config's media type.
        let kind = match m.artifact_type() {
            Some(t) => t.to_string(),
            None => m.config().media_type().to_string(),
        };
        if kind != IMAGE_ARTIFACT_TYPE {
            return Err(format!("artifact type {kind:?}; a VEE image is {IMAGE_ARTIFACT_TYPE:?}"));
        }
        let (mut disk, mut kernel, mut initrd) = (None, None, None);
        for d in m.layers() {
            let layer = layer_of(d)?;
            let slot = match layer.media_type.as_str() {
                DISK_QCOW2 | DISK_RAW => &mut disk,
                KERNEL => &mut kernel,
                INITRD => &mut initrd,
                other => {
                    return Err(format!(
                        "a layer of media type {other:?}; an image has {DISK_QCOW2} or {DISK_RAW}, {KERNEL}, {INITRD}"
                    ))
                }
            };
            if slot.is_some() {
                return Err(format!("two layers of media type {:?}", layer.media_type));
            }
            *slot = Some(layer);
        }
        let disk = disk.ok_or_else(|| format!("no disk layer ({DISK_QCOW2} or {DISK_RAW})"))?;
        if initrd.is_some() && kernel.is_none() {
            return Err(format!("an initrd layer without a kernel layer ({KERNEL})"));
        }
        Ok(Self {
            digest: BlobId::of(raw),
            size: raw.len() as u64,
            disk,
            kernel,
            initrd,
        })
    }

    /// Its layers: the disk, then the kernel and initrd it has.
    pub fn layers(&self) -> impl Iterator<Item = &Layer> {
        std::iter::once(&self.disk).chain(&self.kernel).chain(&self.initrd)
    }
}

fn layer_of(d: &Descriptor) -> Result<Layer, String> {
    let digest = d.digest().to_string().parse::<BlobId>().map_err(|e| format!("layer digest: {e}"))?;
    Ok(Layer {
        digest,
        size: d.size(),
        media_type: d.media_type().to_string(),
    })
}

/// The manifest of an image artifact of `layers` (each its media type,
/// digest and size), with the empty config: the bytes to push.
pub fn image_manifest(layers: &[Layer]) -> Vec<u8> {
    manifest(IMAGE_ARTIFACT_TYPE, &empty_config(), layers, None)
}

/// The empty config's descriptor (`application/vnd.oci.empty.v1+json`,
/// [`EMPTY_CONFIG`]), an image artifact's config.
pub fn empty_config() -> Layer {
    Layer::of(MediaType::EmptyJSON.as_ref(), EMPTY_CONFIG)
}

/// The empty config's content, `{}`.
pub const EMPTY_CONFIG: &[u8] = b"{}";

/// A checkpoint artifact's config ([`CHECKPOINT_CONFIG`]): the checkpoint
/// record, whole (`record`: `vhi.v1.CheckpointRecord` in protobuf, hex),
/// beside its fields a reader wants without decoding it (JSON).
pub fn checkpoint_config(rec: &crate::vhi::CheckpointRecord) -> Vec<u8> {
    use prost::Message;
    let profile = rec.profile.clone().unwrap_or_default();
    let config = serde_json::json!({
        "format_version": rec.format_version,
        "checkpoint_id": rec.checkpoint_id,
        "vee_id": rec.vee_id,
        "host": rec.host,
        "take_time_unix_ms": crate::time::ms_of(&rec.take_time),
        "memory_blob": rec.memory_blob,
        "memory_bytes": rec.memory_bytes,
        "disk_blob": rec.disk_blob,
        "disk_bytes": rec.disk_bytes,
        "profile": { "arch": profile.arch, "machine": profile.machine, "accel": profile.accel, "cpu_model": profile.cpu_model, "qemu_version": profile.qemu_version },
        "record": hex::encode(rec.encode_to_vec()),
    });
    serde_json::to_vec(&config).expect("a JSON value serializes")
}

/// The checkpoint record a config of [`checkpoint_config`] holds. Errors:
/// not such a config, naming what is wrong.
pub fn record_of_config(config: &[u8]) -> Result<crate::vhi::CheckpointRecord, String> {
    use prost::Message;
    let v: serde_json::Value = serde_json::from_slice(config).map_err(|e| format!("not JSON: {e}"))?;
    let hex_record = v["record"].as_str().ok_or("no `record`")?;
    let bytes = hex::decode(hex_record).map_err(|e| format!("`record`: {e}"))?;
    crate::vhi::CheckpointRecord::decode(bytes.as_slice()).map_err(|e| format!("`record`: {e}"))
}

/// The manifest of a checkpoint artifact: `config` (the checkpoint record,
/// [`CHECKPOINT_CONFIG`]), `layers` (the memory state, the disk overlay)
/// and, when the VEE's image is an image artifact, that image's manifest
/// as `subject` (its digest and size).
pub fn checkpoint_manifest(config: &Layer, layers: &[Layer], subject: Option<(&BlobId, u64)>) -> Vec<u8> {
    manifest(CHECKPOINT_ARTIFACT_TYPE, config, layers, subject)
}

/// An OCI image manifest of `artifact_type` over `config` and `layers`,
/// with `subject` (a manifest's digest and size) when given.
fn manifest(artifact_type: &str, config: &Layer, layers: &[Layer], subject: Option<(&BlobId, u64)>) -> Vec<u8> {
    let descriptor = |l: &Layer| serde_json::json!({ "mediaType": l.media_type, "digest": l.digest.to_string(), "size": l.size });
    let mut manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": descriptor(config),
        "layers": layers.iter().map(descriptor).collect::<Vec<_>>(),
    });
    if let Some((digest, size)) = subject {
        manifest["subject"] = serde_json::json!({ "mediaType": OCI_MANIFEST, "digest": digest.to_string(), "size": size });
    }
    serde_json::to_vec(&manifest).expect("a JSON value serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_manifest_built_reads_back() {
        let layers = [
            Layer::of(DISK_QCOW2, b"disk"),
            Layer::of(KERNEL, b"vmlinuz"),
            Layer::of(INITRD, b"initrd"),
        ];
        let raw = image_manifest(&layers);
        let a = ImageArtifact::parse(&raw).unwrap();
        assert_eq!(a.digest, BlobId::of(&raw));
        assert_eq!(a.layers().cloned().collect::<Vec<_>>(), layers);
    }

    #[test]
    fn what_is_not_a_vee_image_is_refused_with_the_reason() {
        let raw = |layers: &[Layer]| image_manifest(layers);
        for (bytes, why) in [
            (raw(&[Layer::of(KERNEL, b"k")]), "no disk layer"),
            (raw(&[Layer::of(DISK_RAW, b"a"), Layer::of(DISK_QCOW2, b"b")]), "two layers"),
            (
                raw(&[Layer::of(DISK_RAW, b"a"), Layer::of("application/vnd.oci.image.layer.v1.tar", b"b")]),
                "a layer of media type",
            ),
            (raw(&[Layer::of(DISK_RAW, b"a"), Layer::of(INITRD, b"b")]), "without a kernel"),
            (b"{}".to_vec(), "not an OCI image manifest"),
        ] {
            let e = ImageArtifact::parse(&bytes).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        let other = String::from_utf8(raw(&[Layer::of(DISK_RAW, b"a")]))
            .unwrap()
            .replace(IMAGE_ARTIFACT_TYPE, "application/x-other");
        assert!(ImageArtifact::parse(other.as_bytes()).unwrap_err().contains("artifact type"));
    }
}
