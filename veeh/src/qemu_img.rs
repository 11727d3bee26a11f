//! The few `qemu-img` operations a VEEH needs on qcow2 files (the
//! `qemu-utils` package installed by scripts/setup-host).

use std::path::Path;
use std::process::Command;

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

/// Virtual size of an image in bytes.
pub fn virtual_size(image: &Path) -> Result<u64> {
    let json = run(&["info", "--output=json", "-U", s(image)])?;
    let v: serde_json::Value = serde_json::from_str(&json)?;
    v["virtual-size"].as_u64().context("qemu-img info: no virtual-size")
}

/// Format of an image (`qcow2`, `raw`).
pub fn format(image: &Path) -> Result<String> {
    let json = run(&["info", "--output=json", "-U", s(image)])?;
    let v: serde_json::Value = serde_json::from_str(&json)?;
    Ok(v["format"].as_str().unwrap_or("raw").to_string())
}

/// Creates an empty qcow2 `overlay` on the read-only `base`, at least
/// `min_size_bytes` large (the base's size when larger).
pub fn create_overlay(base: &Path, overlay: &Path, min_size_bytes: u64) -> Result<()> {
    let fmt = format(base)?;
    let size = virtual_size(base)?.max(min_size_bytes);
    run(&[
        "create",
        "-q",
        "-f",
        "qcow2",
        "-F",
        &fmt,
        "-b",
        s(base),
        s(overlay),
        &size.to_string(),
    ])?;
    Ok(())
}

/// Points `overlay`'s backing file at `base` without touching data (the
/// content of `base` is the same bits by ID; only its path differs here).
pub fn rebase_unsafe(overlay: &Path, base: &Path) -> Result<()> {
    let fmt = format(base)?;
    run(&["rebase", "-u", "-f", "qcow2", "-F", &fmt, "-b", s(base), s(overlay)])?;
    Ok(())
}
