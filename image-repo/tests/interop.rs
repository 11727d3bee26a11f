//! The OCI API against real third-party clients and a real registry
//! (issue 39, item 6): Debian's `skopeo` and `docker-registry` (CNCF
//! Distribution 2.8, installed by `scripts/setup-host`) and the
//! `oci-client` crate. Each test fails if a tool is missing: CI has them.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Repo, ACME_TOKEN};
use interfaces::BlobId;
use serde_json::{json, Value};
use vee_testkit::registry::Distribution;

/// Runs skopeo with `args`; its stdout. Panics with its stderr on failure.
fn skopeo(args: &[&str]) -> String {
    let out = Command::new("skopeo")
        .args(args)
        .output()
        .expect("skopeo (scripts/setup-host installs it)");
    assert!(out.status.success(), "skopeo {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// An OCI image layout in `dir` holding one manifest tagged `tag` of
/// `config` (with its media type) and `layers`; the manifest's digest.
fn layout(dir: &Path, tag: &str, artifact_type: Option<&str>, config: (&str, &[u8]), layers: &[(&str, &[u8])]) -> BlobId {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |data: &[u8], media: &str| {
        let id = BlobId::of(data);
        std::fs::write(blobs.join(id.hex()), data).unwrap();
        json!({ "mediaType": media, "digest": id.to_string(), "size": data.len() })
    };
    let mut manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": put(config.1, config.0),
        "layers": layers.iter().map(|(m, d)| put(d, m)).collect::<Vec<_>>(),
    });
    if let Some(t) = artifact_type {
        manifest["artifactType"] = json!(t);
    }
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let mut d = put(&bytes, "application/vnd.oci.image.manifest.v1+json");
    d["annotations"] = json!({ "org.opencontainers.image.ref.name": tag });
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&json!({ "schemaVersion": 2, "manifests": [d] })).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    BlobId::of(&bytes)
}

/// A VM image artifact: an empty config and one qcow2-typed disk layer.
fn disk_layout(dir: &Path, disk: &[u8]) -> BlobId {
    layout(
        dir,
        "v1",
        Some("application/vnd.vee.image.v1"),
        ("application/vnd.oci.empty.v1+json", b"{}"),
        &[("application/vnd.vee.disk.v1+qcow2", disk)],
    )
}

/// `skopeo copy --preserve-digests` of the layout in `dir` tagged `tag`
/// to `name` in our repository, as acme.
fn copy_to_ours(repo: &Repo, dir: &Path, tag: &str, name: &str) {
    let src = format!("oci:{}:{tag}", dir.display());
    skopeo(&[
        "copy",
        "--preserve-digests",
        "--dest-tls-verify=false",
        "--dest-creds",
        &creds(),
        &src,
        &ours(repo, name),
    ]);
}

fn creds() -> String {
    format!("acme:{ACME_TOKEN}")
}

fn ours(repo: &Repo, path: &str) -> String {
    format!("docker://{}/{path}", repo.addr)
}

fn raw_digest(args: &[&str]) -> BlobId {
    BlobId::of(skopeo(&[&["inspect", "--raw"], args].concat()).as_bytes())
}

#[test]
fn skopeo_copies_a_vm_image_from_us_to_distribution_and_back_keeping_its_digests() {
    let repo = Repo::start();
    let registry = Distribution::start(None);
    let dir = tempfile::tempdir().unwrap();
    let disk = common::content(11, 3 << 20);
    let digest = disk_layout(dir.path(), &disk);
    let creds = creds();
    copy_to_ours(&repo, dir.path(), "v1", "acme/tiny:v1");
    let theirs = format!("docker://{}/vee/tiny:v1", registry.addr);
    skopeo(&[
        "copy",
        "--preserve-digests",
        "--src-tls-verify=false",
        "--src-creds",
        &creds,
        "--dest-tls-verify=false",
        &ours(&repo, "acme/tiny:v1"),
        &theirs,
    ]);
    skopeo(&[
        "copy",
        "--preserve-digests",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        "--dest-creds",
        &creds,
        &theirs,
        &ours(&repo, "acme/back:v1"),
    ]);
    let tls = "--tls-verify=false";
    assert_eq!(raw_digest(&[tls, "--creds", &creds, &ours(&repo, "acme/tiny:v1")]), digest);
    assert_eq!(raw_digest(&[tls, &theirs]), digest);
    assert_eq!(raw_digest(&[tls, "--creds", &creds, &ours(&repo, "acme/back:v1")]), digest);
    // The disk came back byte for byte, as the blob of its digest.
    let back = repo.client();
    let dest = repo.scratch().join("disk");
    back.pull(&BlobId::of(&disk), &dest, None).rt().unwrap();
    assert_eq!(std::fs::read(dest).unwrap(), disk);
    let tags: Value = serde_json::from_str(&skopeo(&["list-tags", tls, "--creds", &creds, &ours(&repo, "acme/back")])).unwrap();
    assert_eq!(tags["Tags"], json!(["v1"]));
}

#[test]
fn skopeo_inspects_a_container_image_in_our_repository() {
    let repo = Repo::start();
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "rootfs": { "type": "layers", "diff_ids": [BlobId::of(b"layer").to_string()] },
        "config": {}
    }))
    .unwrap();
    let manifest = layout(
        dir.path(),
        "12",
        None,
        ("application/vnd.oci.image.config.v1+json", &config),
        &[("application/vnd.oci.image.layer.v1.tar", b"layer")],
    );
    let creds = creds();
    copy_to_ours(&repo, dir.path(), "12", "acme/debian:12");
    let info: Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--creds",
        &creds,
        &ours(&repo, "acme/debian:12"),
    ]))
    .unwrap();
    assert_eq!(info["Digest"], json!(manifest.to_string()));
    assert_eq!(info["Architecture"], json!("amd64"));
    assert_eq!(info["Layers"], json!([BlobId::of(b"layer").to_string()]));
    // Without credentials skopeo is refused.
    let out = Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false", &ours(&repo, "acme/debian:12")])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn oci_client_pulls_a_vm_image_artifact_verified_by_digest() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let repo = Repo::start();
    let dir = tempfile::tempdir().unwrap();
    let disk = common::content(5, 1 << 20);
    let digest = disk_layout(dir.path(), &disk);
    copy_to_ours(&repo, dir.path(), "v1", "acme/tiny:v1");

    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let auth = oci_client::secrets::RegistryAuth::Basic("acme".into(), ACME_TOKEN.into());
    let reference: oci_client::Reference = format!("{}/acme/tiny:v1", repo.addr).parse().unwrap();
    let (raw, got) = client
        .pull_manifest_raw(&reference, &auth, &["application/vnd.oci.image.manifest.v1+json"])
        .await
        .unwrap();
    assert_eq!(got, digest.to_string());
    assert_eq!(BlobId::of(&raw), digest);
    let manifest: oci_client::manifest::OciImageManifest = serde_json::from_slice(&raw).unwrap();
    assert_eq!(manifest.artifact_type.as_deref(), Some("application/vnd.vee.image.v1"));
    let mut out = Vec::new();
    client.pull_blob(&reference, &manifest.layers[0], &mut out).await.unwrap();
    assert_eq!(out, disk);
    // A wrong token is refused.
    let wrong = oci_client::secrets::RegistryAuth::Basic("acme".into(), "wrong".into());
    let other = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    assert!(other
        .pull_manifest_raw(&reference, &wrong, &["application/vnd.oci.image.manifest.v1+json"])
        .await
        .is_err());
}

/// Runs a future to completion on a runtime of its own (the skopeo tests
/// are synchronous).
trait Block: std::future::Future + Sized {
    fn rt(self) -> Self::Output {
        tokio::runtime::Runtime::new().unwrap().block_on(self)
    }
}

impl<F: std::future::Future> Block for F {}
