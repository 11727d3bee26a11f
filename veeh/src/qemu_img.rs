//! The few `qemu-img` operations a VEEH needs on qcow2 files (the
//! `qemu-utils` package installed by scripts/setup-host).

use std::path::Path;
use std::process::Command;

pub use crate::error::UnsafeImage;
use anyhow::{bail, Context, Result};

fn run(args: &[&str]) -> Result<String> {
    let out = Command::new("qemu-img")
        .args(args)
        .output()
        .context("run qemu-img (package qemu-utils)")?;
    if !out.status.success() {
        bail!("qemu-img {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// The format of a disk image as this host uses it. QEMU and libvirt never
/// probe a tenant's image: the format is decided here from the image's
/// header ([`inspect`]) and stated explicitly everywhere after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFormat {
    Raw,
    Qcow2,
}

impl DiskFormat {
    /// The name `qemu-img` and libvirt use.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskFormat::Raw => "raw",
            DiskFormat::Qcow2 => "qcow2",
        }
    }
}

/// What an image is to a VEE: its base image (a tenant's data, which may
/// reference nothing) or the disk overlay of a checkpoint (whose backing
/// file is replaced by this host's copy of the base, [`rebase_unsafe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    Base,
    CheckpointOverlay,
}

/// Header magics of formats that can reference other files, refused
/// rather than handled as raw bytes (QEMU's block drivers; OpenStack's
/// format inspector refuses the same).
const FOREIGN_FORMATS: &[(&[u8], &str)] = &[
    (b"KDMV", "vmdk"),
    (b"COWD", "vmdk"),
    (b"# Disk DescriptorFile", "vmdk"),
    (b"QED\0", "qed"),
    (b"conectix", "vpc"),
    (b"vhdxfile", "vhdx"),
    (b"LUKS\xba\xbe", "luks"),
];

/// Inspects an image before any use (CVE-2024-32498-style attacks: a qcow2
/// whose backing file is a host path): a qcow2 header is checked with
/// `qemu-img info -f qcow2 -U` (which opens no backing file), anything
/// else is raw. Errors with [`UnsafeImage`] for a backing file (allowed
/// only for a [`Layer::CheckpointOverlay`]), an external data file, a
/// qcow2 that `qemu-img` cannot read, or a foreign format.
pub fn inspect(image: &Path, layer: Layer) -> Result<DiskFormat> {
    use std::io::Read;
    let mut head = [0u8; 32];
    let n = std::fs::File::open(image)
        .and_then(|mut f| f.read(&mut head))
        .with_context(|| format!("read {}", image.display()))?;
    let head = &head[..n];
    if let Some((_, name)) = FOREIGN_FORMATS.iter().find(|(magic, _)| head.starts_with(magic)) {
        return Err(UnsafeImage(format!("it is a {name} image: only qcow2 and raw images are taken")).into());
    }
    if !head.starts_with(b"QFI\xfb") {
        return match layer {
            Layer::Base => Ok(DiskFormat::Raw),
            Layer::CheckpointOverlay => Err(UnsafeImage("a checkpoint's disk must be a qcow2 overlay".into()).into()),
        };
    }
    let json = run(&["info", "--output=json", "-U", "-f", "qcow2", s(image)])
        .map_err(|e| UnsafeImage(format!("it has a qcow2 header that qemu-img cannot read ({e:#})")))?;
    let v: serde_json::Value = serde_json::from_str(&json)?;
    if let Some(backing) = v["backing-filename"].as_str().filter(|_| layer == Layer::Base) {
        return Err(UnsafeImage(format!(
            "it is a qcow2 image with a backing file ({backing}): images are data, never host paths"
        ))
        .into());
    }
    if let Some(data) = v["format-specific"]["data"]["data-file"].as_str() {
        return Err(UnsafeImage(format!(
            "it is a qcow2 image with an external data file ({data}): images are data, never host paths"
        ))
        .into());
    }
    Ok(DiskFormat::Qcow2)
}

/// Virtual size in bytes of an image of format `fmt`.
pub fn virtual_size(image: &Path, fmt: DiskFormat) -> Result<u64> {
    let json = run(&["info", "--output=json", "-U", "-f", fmt.as_str(), s(image)])?;
    let v: serde_json::Value = serde_json::from_str(&json)?;
    v["virtual-size"].as_u64().context("qemu-img info: no virtual-size")
}

/// Creates an empty qcow2 `overlay` on the read-only `base` (inspected:
/// an unsafe base is refused, [`inspect`]), at least `min_size_bytes`
/// large (the base's size when larger); the base's format is recorded in
/// the overlay, so nothing probes it later.
pub fn create_overlay(base: &Path, overlay: &Path, min_size_bytes: u64) -> Result<()> {
    let fmt = inspect(base, Layer::Base)?;
    let size = virtual_size(base, fmt)?.max(min_size_bytes);
    run(&[
        "create",
        "-q",
        "-f",
        "qcow2",
        "-F",
        fmt.as_str(),
        "-b",
        s(base),
        s(overlay),
        &size.to_string(),
    ])?;
    Ok(())
}

/// Points the checkpoint overlay `overlay`'s backing file at `base`
/// without touching data (the content of `base` is the same bits by ID;
/// only its path differs here). Both are inspected first ([`inspect`]):
/// whatever backing file the overlay named is replaced.
pub fn rebase_unsafe(overlay: &Path, base: &Path) -> Result<()> {
    inspect(overlay, Layer::CheckpointOverlay)?;
    let fmt = inspect(base, Layer::Base)?;
    run(&["rebase", "-u", "-f", "qcow2", "-F", fmt.as_str(), "-b", s(base), s(overlay)])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `qemu-img create` with `args` of a 1 MiB image at `path`.
    fn create(path: &Path, args: &[&str]) {
        let mut all = vec!["create", "-q"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[s(path), "1M"]);
        run(&all).unwrap();
    }

    fn refusal(image: &Path, layer: Layer) -> String {
        let e = inspect(image, layer).unwrap_err();
        assert!(e.is::<UnsafeImage>(), "{e:#}");
        e.to_string()
    }

    #[test]
    fn raw_and_plain_qcow2_images_are_taken_with_their_format() {
        let t = tempfile::tempdir().unwrap();
        let (raw, qcow2) = (t.path().join("raw.img"), t.path().join("plain.qcow2"));
        std::fs::write(&raw, vec![7u8; 4096]).unwrap();
        create(&qcow2, &["-f", "qcow2"]);
        assert_eq!(inspect(&raw, Layer::Base).unwrap(), DiskFormat::Raw);
        assert_eq!(inspect(&qcow2, Layer::Base).unwrap(), DiskFormat::Qcow2);
        assert_eq!(virtual_size(&qcow2, DiskFormat::Qcow2).unwrap(), 1 << 20);
    }

    #[test]
    fn an_image_naming_a_host_file_is_refused_and_no_overlay_is_made_on_it() {
        let t = tempfile::tempdir().unwrap();
        let host_file = t.path().join("host-secret");
        std::fs::write(&host_file, b"not for guests").unwrap();
        let backed = t.path().join("backed.qcow2");
        create(&backed, &["-f", "qcow2", "-F", "raw", "-b", s(&host_file)]);
        let why = refusal(&backed, Layer::Base);
        assert!(why.contains("backing file") && why.contains("host-secret"), "{why}");
        // A checkpoint's overlay names a backing file: it is replaced.
        assert_eq!(inspect(&backed, Layer::CheckpointOverlay).unwrap(), DiskFormat::Qcow2);
        let overlay = t.path().join("overlay.qcow2");
        assert!(create_overlay(&backed, &overlay, 1 << 20).is_err());
        assert!(!overlay.exists());

        let data_file = t.path().join("data-file");
        let external = t.path().join("external.qcow2");
        create(&external, &["-f", "qcow2", "-o", &format!("data_file={}", s(&data_file))]);
        for layer in [Layer::Base, Layer::CheckpointOverlay] {
            assert!(refusal(&external, layer).contains("external data file"));
        }
    }

    #[test]
    fn foreign_formats_are_refused_and_a_checkpoint_overlay_must_be_qcow2() {
        let t = tempfile::tempdir().unwrap();
        let vmdk = t.path().join("disk.vmdk");
        std::fs::write(&vmdk, b"# Disk DescriptorFile\nRW 2048 FLAT \"/etc/shadow\" 0\n").unwrap();
        assert!(refusal(&vmdk, Layer::Base).contains("vmdk"));
        let raw = t.path().join("raw.img");
        std::fs::write(&raw, vec![0u8; 512]).unwrap();
        assert!(refusal(&raw, Layer::CheckpointOverlay).contains("qcow2 overlay"));
    }
}
