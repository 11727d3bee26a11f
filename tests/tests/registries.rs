//! VEE images in any OCI registry the site trusts (issue 39, items 2 and
//! 3), against a real CNCF Distribution registry (Debian's
//! `docker-registry`) over TLS with a password: `image-repo push-image`
//! pushes a VEE image artifact, the VEEM resolves its tag once at
//! admission and checks the provider's scope, the VEEH pulls its layers
//! by digest through `oci-client`, verified and resumable, and the tiny
//! guest boots from the artifact's own kernel and initrd.

use std::path::Path;
use std::time::Duration;

use e2e::daemons::{wait_tick, ImageRepo, Veeh};
use e2e::site::{self, Veem, ACME};
use e2e::{guest, lab};
use interfaces::artifact;
use interfaces::manifest::{ImageRef, RegistryImage};
use interfaces::registry::{Dropped, Registries, RegistryConfig, Scope};
use interfaces::BlobId;
use vee_testkit::registry::Distribution;

const USER: &str = "site-a";
const PASSWORD: &str = "registry-s3cret";

/// `image-repo push-image` of the tiny guest as `reference`; the
/// reference by digest it prints last.
fn push_guest(reg: &Distribution, dir: &Path, reference: &str, disk: &Path) -> RegistryImage {
    let g = guest::image();
    let password = dir.join("registry.password");
    std::fs::write(&password, PASSWORD).unwrap();
    let out = std::process::Command::new(lab::binary("image-repo"))
        .args(["push-image", reference, "--disk"])
        .arg(disk)
        .arg("--kernel")
        .arg(&g.kernel)
        .arg("--initrd")
        .arg(&g.initrd)
        .arg("--ca")
        .arg(&reg.ca)
        .args(["--username", USER, "--password-file"])
        .arg(&password)
        .output()
        .unwrap();
    assert!(out.status.success(), "push-image: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    match stdout.lines().last().unwrap().parse::<ImageRef>().unwrap() {
        ImageRef::Registry(r) => r,
        other => panic!("{other}"),
    }
}

/// The `[[registries]]` entry of `reg` (with its password file in `dir`).
fn entry(reg: &Distribution, dir: &Path, password: &str) -> RegistryConfig {
    let file = dir.join(format!("pw-{}", BlobId::of(password.as_bytes()).hex()));
    std::fs::write(&file, password).unwrap();
    RegistryConfig {
        host: reg.addr.clone(),
        ca: Some(reg.ca.clone()),
        username: Some(USER.into()),
        password_file: Some(file),
        scope: Scope::Provider,
        realm_hosts: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_image_is_resolved_checked_and_pulled_verified_and_resumable() {
    let dir = lab::test_dir("registry-client");
    let reg = Distribution::start(Some((USER, PASSWORD)));
    let disk = dir.join("disk.raw");
    let bytes: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(&disk, &bytes).unwrap();
    let tagged: RegistryImage = match format!("{}/acme/tiny:v1", reg.addr).parse::<ImageRef>().unwrap() {
        ImageRef::Registry(r) => r,
        other => panic!("{other}"),
    };
    let pushed = push_guest(&reg, &dir, &tagged.to_string(), &disk);
    assert_eq!(pushed.repository, "acme/tiny");
    let registries = Registries::new(&[entry(&reg, &dir, PASSWORD)]).unwrap();

    // The tag resolves to the digest pushed; the artifact is a VEE image.
    let a = registries.resolve(&tagged).await.unwrap();
    assert_eq!(Some(&a.digest), pushed.digest.as_ref());
    assert_eq!(a.disk.media_type, artifact::DISK_RAW);
    assert_eq!(a.disk.digest, BlobId::of(&bytes));
    assert!(a.kernel.is_some() && a.initrd.is_some());
    // Scope "provider": acme may name acme/..., globex may not.
    registries.check_use(&tagged, "acme").unwrap();
    let e = registries.check_use(&tagged, "globex").unwrap_err().to_string();
    assert!(e.contains("not under provider \"globex\"'s name"), "{e}");

    // Pulled by digest, verified.
    let dest = dir.join("pulled");
    assert_eq!(registries.pull_layer(&pushed, &a.disk, &dest).await.unwrap(), bytes.len() as u64);
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    // Resumed from a partial file: only the rest is fetched.
    let resumed = dir.join("resumed");
    std::fs::write(dir.join("resumed.partial"), &bytes[..1 << 20]).unwrap();
    assert_eq!(registries.pull_layer(&pushed, &a.disk, &resumed).await.unwrap(), (2 << 20) as u64);
    assert_eq!(std::fs::read(&resumed).unwrap(), bytes);
    // A partial file that is not the layer's prefix: started over.
    let restarted = dir.join("restarted");
    std::fs::write(dir.join("restarted.partial"), vec![0u8; 1 << 20]).unwrap();
    registries.pull_layer(&pushed, &a.disk, &restarted).await.unwrap();
    assert_eq!(std::fs::read(&restarted).unwrap(), bytes);

    // Refused: a wrong password, a registry not configured, a CA the
    // registry's certificate is not of.
    let wrong = Registries::new(&[entry(&reg, &dir, "wrong")]).unwrap();
    assert!(wrong.resolve(&tagged).await.is_err());
    let e = Registries::new(&[]).unwrap().resolve(&tagged).await.unwrap_err().to_string();
    assert!(e.contains("not a registry this site trusts"), "{e}");
    let mut other_ca = entry(&reg, &dir, PASSWORD);
    other_ca.ca = Some(vee_testkit::pki::site("not-the-registry").vmi_ca());
    assert!(Registries::new(&[other_ca]).unwrap().resolve(&tagged).await.is_err());

    // A registry serving other bytes than the digest: refused, nothing kept.
    let blob = reg.blob_file(&a.disk.digest.hex());
    let mut evil = bytes.clone();
    evil[1000] ^= 0xff;
    std::fs::write(&blob, &evil).unwrap();
    let bad = dir.join("bad");
    let e = registries.pull_layer(&pushed, &a.disk, &bad).await.unwrap_err();
    assert!(matches!(e, interfaces::Error::DigestMismatch { .. }), "{e}");
    assert!(!bad.exists() && !dir.join("bad.partial").exists());
}

/// A checkpoint artifact the VEEM forgets (`checkpoints_kept`) at a site
/// whose repository is a registry: its manifest deleted (the tag with it)
/// and its entry taken out of its image's referrers (Distribution 2.8
/// keeps the tag schema fallback's index); asked again, nothing to do; a
/// tag that names an image is left alone; a registry that deletes nothing
/// says so and keeps it.
#[tokio::test(flavor = "multi_thread")]
async fn a_forgotten_checkpoint_artifact_leaves_the_registry_and_its_images_referrers() {
    let dir = lab::test_dir("registry-drop");
    let g = guest::image();
    for deletes in [true, false] {
        let reg = Distribution::start_with(Some((USER, PASSWORD)), deletes);
        let image = push_guest(&reg, &dir, &format!("{}/acme/tiny:v1", reg.addr), &g.disk);
        let registries = Registries::new(&[entry(&reg, &dir, PASSWORD)]).unwrap();
        let a = registries.resolve(&image).await.unwrap();
        let checkpoints = RegistryImage {
            registry: reg.addr.clone(),
            repository: "site-a/checkpoints".into(),
            tag: None,
            digest: None,
        };
        let mut pushed = Vec::new();
        for n in 0..2 {
            let file = dir.join(format!("memory-{n}"));
            std::fs::write(&file, format!("memory state {n}")).unwrap();
            let layer = registries.push_layer(&checkpoints, artifact::MEMORY_STATE, &file).await.unwrap();
            let record = interfaces::vhi::CheckpointRecord {
                checkpoint_id: format!("cp-{n}"),
                vee_id: "vee-1".into(),
                ..Default::default()
            };
            let config = artifact::checkpoint_config(&record);
            let digest = registries
                .push_checkpoint(&checkpoints, &record.checkpoint_id, config, &[layer], Some((&a.digest, a.size)))
                .await
                .unwrap();
            pushed.push(digest);
        }
        let referrers = || registries.referrers(&checkpoints, &a.digest, artifact::CHECKPOINT_ARTIFACT_TYPE);
        assert_eq!(referrers().await.unwrap().len(), 2);
        let tagged = |tag: &str| RegistryImage {
            tag: Some(tag.into()),
            ..checkpoints.clone()
        };
        let dropped = registries.drop_checkpoint(&checkpoints, "cp-0").await.unwrap();
        if !deletes {
            assert!(matches!(dropped, Dropped::Unsupported(_)), "{dropped:?}");
            assert!(registries.raw_manifest(&tagged("cp-0")).await.is_ok());
            continue;
        }
        assert_eq!(dropped, Dropped::Removed);
        assert!(registries.raw_manifest(&tagged("cp-0")).await.is_err());
        assert_eq!(referrers().await.unwrap(), [pushed[1].clone()]);
        assert_eq!(registries.drop_checkpoint(&checkpoints, "cp-0").await.unwrap(), Dropped::Absent);
        // A tag naming something else than a checkpoint artifact: left alone.
        let e = registries
            .drop_checkpoint(
                &RegistryImage {
                    tag: None,
                    ..image.clone()
                },
                "v1",
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a checkpoint artifact"), "{e}");
        assert!(registries.resolve(&tagged_image(&image)).await.is_ok());
        // The last referrer gone, so is the fallback's index.
        assert_eq!(registries.drop_checkpoint(&checkpoints, "cp-1").await.unwrap(), Dropped::Removed);
        assert!(referrers().await.unwrap().is_empty());
    }
}

/// `image` by its tag `v1`.
fn tagged_image(image: &RegistryImage) -> RegistryImage {
    RegistryImage {
        tag: Some("v1".into()),
        digest: None,
        ..image.clone()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_vee_boots_from_a_registry_image_resolved_at_admission() {
    let _lab = lab::lock();
    let dir = lab::test_dir("registry-boot");
    let reg = Distribution::start(Some((USER, PASSWORD)));
    let repo = ImageRepo::start(&dir).await;
    let life = boot_checkpoint_and_recover(&reg, &dir, &repo).await;
    // The checkpoints' blobs are in the site's image-repo, and only they:
    // the image's layers came from the registry.
    let held = repo.client().list().await.unwrap();
    let mut kinds: Vec<String> = held.iter().map(|b| format!("{:?}", b.kind)).collect();
    kinds.sort();
    kinds.dedup();
    // (Its parts in chunks with their indexes; the checkpoint's artifact:
    // its record and its manifest.)
    assert_eq!(kinds, ["CheckpointChunk", "CheckpointIndex", "Manifest", "OciBlob"], "{held:?}");
    // The checkpoint is an OCI artifact in the image-repo's /v2 too.
    let password = dir.join("site-token");
    std::fs::write(&password, repo.site_token("site-a")).unwrap();
    let ours = Registries::new(&[RegistryConfig {
        host: repo.url.trim_start_matches("https://").into(),
        ca: Some(repo.ca.clone()),
        username: Some("site-a".into()),
        password_file: Some(password),
        scope: Scope::Any,
        realm_hosts: Vec::new(),
    }])
    .unwrap();
    let artifact_repo = RegistryImage {
        registry: repo.url.trim_start_matches("https://").into(),
        repository: "site-a/checkpoints".into(),
        tag: Some(life.latest.clone()),
        digest: None,
    };
    check_checkpoint_artifact(&ours, &artifact_repo, &life.image, &life.vee, &dir).await;
    let forgotten = RegistryImage {
        tag: Some(life.forgotten),
        ..artifact_repo
    };
    assert!(ours.raw_manifest(&forgotten).await.is_err());
}

/// Item 6: a site whose repository is the registry itself
/// (`image_repo = "oci://REGISTRY/site-a"`): the same life, its checkpoint
/// an OCI artifact in `site-a/checkpoints` tagged by its ID, with the
/// checkpoint record as its config and the image as its subject.
#[tokio::test(flavor = "multi_thread")]
async fn lab_a_site_whose_repository_is_a_registry_deploys_checkpoints_and_restores() {
    let _lab = lab::lock();
    let dir = lab::test_dir("registry-site");
    let reg = Distribution::start(Some((USER, PASSWORD)));
    // An image-repo runs too, unused: the site is configured with the registry.
    let mut repo = ImageRepo::start(&dir).await;
    let unused = std::mem::replace(&mut repo.url, format!("oci://{}/site-a", reg.addr));
    let life = boot_checkpoint_and_recover(&reg, &dir, &repo).await;

    let registries = Registries::new(&[entry(&reg, &dir, PASSWORD)]).unwrap();
    let artifact_repo = RegistryImage {
        registry: reg.addr.clone(),
        repository: "site-a/checkpoints".into(),
        tag: Some(life.latest.clone()),
        digest: None,
    };
    check_checkpoint_artifact(&registries, &artifact_repo, &life.image, &life.vee, &dir).await;
    // The forgotten one's manifest was deleted (its tag with it).
    let forgotten = RegistryImage {
        tag: Some(life.forgotten),
        ..artifact_repo
    };
    assert!(registries.raw_manifest(&forgotten).await.is_err());
    // The image-repo was not used.
    repo.url = unused;
    assert!(repo.client().list().await.unwrap().is_empty());
}

/// The checkpoint artifact `tagged` names (by the checkpoint's ID) is one
/// of VEE `vee`: its type, its subject (`image`), its config the record,
/// whose blobs are its layers.
async fn check_checkpoint_artifact(registries: &Registries, tagged: &RegistryImage, image: &RegistryImage, vee: &str, dir: &Path) {
    let raw = registries.raw_manifest(tagged).await.unwrap();
    let m: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(m["artifactType"], artifact::CHECKPOINT_ARTIFACT_TYPE, "{m}");
    assert_eq!(m["subject"]["digest"], image.digest.as_ref().unwrap().to_string(), "{m}");
    // Found from its image: the referrers API (the image-repo), or its tag
    // schema fallback (Distribution 2.8 has no referrers API).
    let referrers = registries
        .referrers(tagged, image.digest.as_ref().unwrap(), artifact::CHECKPOINT_ARTIFACT_TYPE)
        .await
        .unwrap();
    assert_eq!(referrers, [BlobId::of(&raw)]);
    assert_eq!(m["config"]["mediaType"], artifact::CHECKPOINT_CONFIG);
    let config = artifact::Layer {
        digest: m["config"]["digest"].as_str().unwrap().parse().unwrap(),
        size: m["config"]["size"].as_u64().unwrap(),
        media_type: artifact::CHECKPOINT_CONFIG.into(),
    };
    let file = dir.join(format!("config-{}.json", config.digest.hex()));
    registries.pull_layer(tagged, &config, &file).await.unwrap();
    let record = artifact::record_of_config(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        (record.vee_id.as_str(), Some(record.checkpoint_id.as_str())),
        (vee, tagged.tag.as_deref())
    );
    assert!(record.profile.is_some() && record.spec.is_some(), "{record:?}");
    let layers: Vec<(&str, &str)> = m["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["mediaType"].as_str().unwrap(), l["digest"].as_str().unwrap()))
        .collect();
    // At an image-repo site its parts are chunk indexes; at a registry,
    // the parts themselves.
    let (memory_type, disk_type) = match record.layout() {
        interfaces::vhi::CheckpointLayout::Chunked => (
            interfaces::chunks::CHUNK_INDEX_MEDIA_TYPE,
            interfaces::chunks::CHUNK_INDEX_MEDIA_TYPE,
        ),
        _ => (artifact::MEMORY_STATE, artifact::DISK_OVERLAY),
    };
    assert_eq!(
        layers,
        [(memory_type, record.memory_blob.as_str()), (disk_type, record.disk_blob.as_str())]
    );
}

/// The life a VEE of a registry image lives at a site of two hosts with
/// `repo` as its repository: refusals at admission, a boot from the
/// artifact's kernel, initrd and disk, a checkpoint, its host's failure
/// and a restore on the other host, then a second checkpoint, which
/// forgets the first (`checkpoints_kept = 1`).
async fn boot_checkpoint_and_recover(reg: &Distribution, dir: &Path, repo: &ImageRepo) -> Checkpoints {
    let g = guest::image();
    let pushed = push_guest(reg, dir, &format!("{}/acme/tiny:v1", reg.addr), &g.disk);
    let conf = entry(reg, dir, PASSWORD);
    let table = format!(
        "\n[[registries]]\nhost = \"{}\"\nca = \"{}\"\nusername = \"{USER}\"\npassword_file = \"{}\"\n",
        conf.host,
        reg.ca.display(),
        conf.password_file.as_ref().unwrap().display()
    );
    let mut hosts = [
        Veeh::start_configured(dir, "g1", "site-a", lab::SITE_A_URI, repo, (2, 1024), &table).await,
        Veeh::start_configured(dir, "g2", "site-a", lab::SITE_A2_URI, repo, (2, 1024), &table).await,
    ];
    let port = site::port();
    // One checkpoint kept: the second forgets the first.
    let cfg = site::write_config(
        dir,
        "site-a",
        port,
        repo,
        &[&hosts[0], &hosts[1]],
        &[],
        &format!("checkpoints_kept = 1\n{table}"),
    );
    let veem = Veem::start(dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    let manifest = |image: &str| {
        format!(
            "[service]\nname = \"oci\"\nprovider = \"acme\"\n[sla]\nguarantee = \"standard\"\n[[component]]\nname = \"web\"\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"{image}\"\ncmdline = \"{}\"\n",
            g.cmdline
        )
    };

    // Refused with the field and the reason: another provider's namespace,
    // a registry the site does not trust, a tag the registry lacks.
    for (image, why) in [
        (format!("{}/globex/tiny:v1", reg.addr), "not under provider \"acme\"'s name"),
        ("registry.invalid:5000/acme/tiny:v1".to_string(), "not a registry this site trusts"),
        (format!("{}/acme/tiny:nope", reg.addr), "manifest of"),
    ] {
        let e = site::deploy(&mut acme, manifest(&image)).await.unwrap_err();
        assert!(
            e.message().contains("component[0].image") && e.message().contains(why),
            "{image}: {}",
            e.message()
        );
    }

    let svc = site::deploy(&mut acme, manifest(&format!("{}/acme/tiny:v1", reg.addr)))
        .await
        .unwrap();
    let vee = svc.vees[0].vee_id.clone();
    let info = veem
        .wait_vee(&vee, "running", Duration::from_secs(180), |i| {
            i.state() == interfaces::vmi::VeeState::Running
        })
        .await;
    let at = usize::from(site::host_of(&info).as_deref() != Some(hosts[0].host.as_str()));
    let a1 = &hosts[at];
    // It boots the artifact's kernel and initrd, with the artifact's disk.
    let (_, disk) = wait_tick(&mut a1.client().await, &vee, 2, Duration::from_secs(180)).await;
    assert!(disk.is_some(), "the guest sees its disk");
    // The VEE keeps the digest the tag named at admission.
    let record = std::fs::read_to_string(a1.state_dir.join("vees").join(&vee).join("vee.json")).unwrap();
    assert!(record.contains(&pushed.to_string()), "{record}");
    assert!(!record.contains(":v1"), "{record}");

    // Checkpointed, then its host fails: restored on the other host, which
    // pulls the image's layers from the registry and the checkpoint from
    // the site's repository.
    let mut c = a1.client().await;
    let before = e2e::guest::last_tick(&e2e::daemons::console(&mut c, &vee).await).unwrap().0;
    let taken = site::vee_action(&mut acme, &vee, interfaces::vmi::Action::Checkpoint)
        .await
        .unwrap();
    let (failed, uri) = (a1.host.clone(), a1.uri.clone());
    let a2_host = hosts[1 - at].host.clone();
    hosts[at].daemon.kill();
    veeh::hypervisor::Hypervisor::open(&uri, &failed).unwrap().destroy(&vee).unwrap();
    let a2 = &hosts[1 - at];
    let info = veem
        .wait_vee(&vee, "restored on the other host", Duration::from_secs(180), |i| {
            i.state() == interfaces::vmi::VeeState::Running && site::host_of(i).as_deref() == Some(a2_host.as_str())
        })
        .await;
    assert_eq!(info.latest_checkpoint, taken.latest_checkpoint);
    let mut c2 = a2.client().await;
    wait_tick(&mut c2, &vee, 1, Duration::from_secs(120)).await;
    let first = e2e::guest::ticks(&e2e::daemons::console(&mut c2, &vee).await)[0];
    assert!(
        first > before,
        "restored from the checkpoint (tick {before} then), first tick now {first}"
    );
    let record = std::fs::read_to_string(a2.state_dir.join("vees").join(&vee).join("vee.json")).unwrap();
    assert!(record.contains(&pushed.to_string()), "{record}");
    // A second checkpoint: the first is forgotten, its artifact dropped.
    let second = site::vee_action(&mut acme, &vee, interfaces::vmi::Action::Checkpoint)
        .await
        .unwrap()
        .latest_checkpoint;
    assert_ne!(second, taken.latest_checkpoint);
    Checkpoints {
        image: pushed,
        vee,
        forgotten: taken.latest_checkpoint,
        latest: second,
    }
}

/// What [`boot_checkpoint_and_recover`] leaves.
struct Checkpoints {
    /// The image, by digest.
    image: RegistryImage,
    vee: String,
    /// The first checkpoint, forgotten (`checkpoints_kept = 1`).
    forgotten: String,
    /// The second, the VEE's latest.
    latest: String,
}
