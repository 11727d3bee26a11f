//! One image repository per site (issue 39), on the lab: no site's
//! repository is a single point of failure for another site. A checkpoint
//! of a VEE run at site B for site A is replicated to A's repository after
//! it is taken (issue 55: B answers first; A counts it once its own
//! repository holds it), so A restores it at home while B (its VEEM and its repository)
//! is down; with A's repository down, a host at B fails and B restores
//! A's VEE on its other host from its own repository (the checkpoint
//! replicated to it, the image pulled through earlier); a VEE deployed at
//! A from an image only B's repository holds is pulled through by digest;
//! an image whose bytes at B do not match its digest is refused and
//! nothing of it is kept at A.

use std::process::Command;
use std::time::Duration;

use e2e::daemons::{console, wait_tick, GuestIds, ImageRepo, Veeh};
use e2e::site::{self, host_of, manifest, Veem, ACME};
use e2e::two_sites::TwoSites;
use e2e::{guest, lab};
use interfaces::repo_client::{BlobKind, PushMeta};
use interfaces::vmi::{Action, CheckpointReplication, VeeState};

const BOOT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_replicated_checkpoint_is_restored_at_home_while_the_remote_site_and_its_repository_are_down() {
    let _lab = lab::lock();
    let policy = "replicate_checkpoints = true\n";
    let mut l = TwoSites::start_both("repo-replicate", policy, policy).await;
    let mut acme = l.a.client(ACME).await;
    let (_svc, vee) = l.deploy_one(&mut acme).await;

    // A checkpoint at A; A's only host fails: the VEE is restored at B,
    // whose hosts get the checkpoint from B's repository (replicated when
    // it was handed over).
    site::vee_action(&mut acme, &vee, Action::Checkpoint).await.unwrap();
    l.power_off_a1(&vee);
    l.a.wait_vee(&vee, "restored at site B", BOOT, |i| {
        i.state() == VeeState::Running && i.location == "remote (site-b)"
    })
    .await;
    let mut cb = l.b1.client().await;
    wait_tick(&mut cb, &vee, 1, Duration::from_secs(60)).await;

    // A's host is back. A checkpoint taken at B is pushed to A's
    // repository after B answered (B records it local-only first), and
    // counts at A once A's repository holds it (awaiting until then).
    l.a1.restart().await;
    let before = guest::last_tick(&console(&mut cb, &vee).await).unwrap().0;
    let info = site::vee_action(&mut acme, &vee, Action::Checkpoint).await.unwrap();
    let after = guest::last_tick(&console(&mut cb, &vee).await).unwrap().0;
    l.a.wait_vee(&vee, "B's checkpoint in A's repository", Duration::from_secs(120), |i| {
        i.latest_checkpoint == info.latest_checkpoint && i.latest_checkpoint_replication() == CheckpointReplication::Replicated
    })
    .await;
    wait_tick(&mut cb, &vee, after + 3, Duration::from_secs(30)).await;
    let at_a: Vec<_> = l
        .repo_a
        .client()
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.kind == BlobKind::CheckpointIndex && m.owner == "site-b")
        .collect();
    // Its two parts' chunk indexes (and the chunks they list).
    assert_eq!(at_a.len(), 2, "B's checkpoint in A's repository: {at_a:?}");

    // Site B goes away, its repository with it: A restores the VEE at
    // home from B's checkpoint, which it reads from its own repository.
    // (A's host keeps the console log of the VEE's first run there: gone,
    // so that what A's console shows next is the restored run's.)
    let _ = std::fs::remove_file(l.a1.state_dir.join("vees").join(&vee).join("console.log"));
    l.repo_b.daemon.kill();
    let b_pid = l.b.daemon.pid().unwrap().to_string();
    assert!(Command::new("kill").args(["-STOP", &b_pid]).status().unwrap().success());
    let restored =
        l.a.wait_vee(&vee, "restored at home", BOOT, |i| {
            i.state() == VeeState::Running && i.location.starts_with("local")
        })
        .await;
    assert!(Command::new("kill").args(["-CONT", &b_pid]).status().unwrap().success());
    assert_eq!(restored.latest_checkpoint, info.latest_checkpoint);
    let mut ca = l.a1.client().await;
    let start = std::time::Instant::now();
    let first = loop {
        let ticks = guest::ticks(&console(&mut ca, &vee).await);
        if let Some(&t) = ticks.first() {
            break t;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the restored guest prints nothing at A");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        first > before && first <= after + 1,
        "restored at A from B's checkpoint (ticks {before}..={after}), first tick at A {first}"
    );
    site::vee_action(&mut acme, &vee, Action::Stop).await.unwrap();
    let dir = l.dir.clone();
    drop(l);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_with_site_a_repository_down_a_host_at_b_fails_and_b_restores_a_vee_of_a_from_its_own() {
    let _lab = lab::lock();
    let dir = lab::test_dir("repo-b-recovers");
    let (mut repo_a, repo_b) = ImageRepo::per_site(&dir).await;
    let ids = repo_a.push_guest(&guest::image()).await;
    let mut a1 = Veeh::start(&dir, "ra1", "site-a", lab::SITE_A_URI, &repo_a).await;
    let mut bs = [
        Veeh::start(&dir, "rb1", "site-b", lab::SITE_B_URI, &repo_b).await,
        Veeh::start(&dir, "rb2", "site-b", lab::SITE_B_URI, &repo_b).await,
    ];
    let (pa, pb) = (site::port(), site::port());
    let (to_b, to_a) = site::peer_links(pa, pb, false);
    let policy = "replicate_checkpoints = true\n";
    let ca = site::write_config(&dir, "site-a", pa, &repo_a, &[&a1], &[to_b], policy);
    let cb = site::write_config(&dir, "site-b", pb, &repo_b, &[&bs[0], &bs[1]], &[to_a], policy);
    let a = Veem::start(&dir, "site-a", pa, ca).await;
    let b = Veem::start(&dir, "site-b", pb, cb).await;
    let mut acme = a.client(ACME).await;
    let svc = site::deploy(&mut acme, manifest("shop", "acme", &ids, 1, "")).await.unwrap();
    let vee = svc.vees[0].vee_id.clone();
    a.wait_vee(&vee, "running", BOOT, |i| i.state() == VeeState::Running).await;
    wait_tick(&mut a1.client().await, &vee, 2, BOOT).await;

    // A checkpoint at A; A's only host fails: the VEE is restored at B,
    // which pulls the image through from A's repository into its own.
    site::vee_action(&mut acme, &vee, Action::Checkpoint).await.unwrap();
    a1.daemon.kill();
    veeh::hypervisor::Hypervisor::open(lab::SITE_A_URI, &a1.host)
        .unwrap()
        .destroy(&vee)
        .unwrap();
    a.wait_vee(&vee, "restored at site B", BOOT, |i| {
        i.state() == VeeState::Running && i.location == "remote (site-b)"
    })
    .await;
    // A checkpoint taken at B (B's own repository; replicated to A's).
    let at_b = b.wait_vee(&vee, "running at B", BOOT, |i| i.state() == VeeState::Running).await;
    let running = host_of(&at_b).expect("B's operator sees the host");
    let at = usize::from(bs[0].host != running);
    let mut c = bs[at].client().await;
    wait_tick(&mut c, &vee, 1, BOOT).await;
    let before = guest::last_tick(&console(&mut c, &vee).await).unwrap().0;
    let taken = site::vee_action(&mut acme, &vee, Action::Checkpoint).await.unwrap();
    let after = guest::last_tick(&console(&mut c, &vee).await).unwrap().0;

    // Site A's repository stops; then B's host running the VEE fails.
    repo_a.daemon.kill();
    let failed = bs[at].host.clone();
    bs[at].daemon.kill();
    veeh::hypervisor::Hypervisor::open(lab::SITE_B_URI, &failed)
        .unwrap()
        .destroy(&vee)
        .unwrap();
    let other = bs[1 - at].host.clone();
    let info = b
        .wait_vee(&vee, "restored on B's other host", BOOT, |i| {
            i.state() == VeeState::Running && host_of(i).as_deref() == Some(other.as_str())
        })
        .await;
    assert_eq!(info.latest_checkpoint, taken.latest_checkpoint);
    let mut c2 = bs[1 - at].client().await;
    wait_tick(&mut c2, &vee, 1, Duration::from_secs(60)).await;
    let first = guest::ticks(&console(&mut c2, &vee).await)[0];
    assert!(
        first > before && first <= after + 1,
        "restored from B's checkpoint (ticks {before}..={after}), first tick now {first}"
    );
    // Everything came from B's repository: A's was down.
    let log = bs[1 - at].daemon.log_text();
    assert!(log.contains("pulled blob"), "{log}");
    site::vee_action(&mut acme, &vee, Action::Stop).await.unwrap();
    drop((a, b, a1, bs, repo_b));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A qcow2 disk holding 1 MiB of the byte `seed`: an image with a digest
/// of its own.
fn own_disk(dir: &std::path::Path, name: &str, seed: u8) -> std::path::PathBuf {
    let path = dir.join(name);
    let raw = dir.join(format!("{name}.raw"));
    std::fs::write(&raw, vec![seed; 1 << 20]).unwrap();
    let ok = Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "qcow2"])
        .arg(&raw)
        .arg(&path)
        .status()
        .unwrap();
    assert!(ok.success());
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_an_image_only_at_site_b_is_pulled_through_and_a_corrupt_one_is_refused() {
    let _lab = lab::lock();
    let l = TwoSites::start("repo-pull", "").await;
    let acme_at_b = l.repo_b.client_as(&l.repo_b.provider_token("acme"));
    let mut meta = PushMeta::new("acme-disk", BlobKind::Disk);
    meta.format = Some("qcow2".into());
    let disk = acme_at_b.push_file(&own_disk(&l.dir, "acme.qcow2", 7), &meta).await.unwrap();
    assert!(l.repo_a.client().head(&disk).await.unwrap().is_none());

    // Deployed at A, whose repository lacks the image: A's repository
    // asks B's, which says acme may use it, and pulls it through.
    let ids = GuestIds {
        disk: disk.to_string(),
        ..l.ids.clone()
    };
    let mut acme = l.a.client(ACME).await;
    let svc = site::deploy(&mut acme, manifest("pulled", "acme", &ids, 1, ""))
        .await
        .unwrap_or_else(|e| panic!("deploy: {}", e.message()));
    let vee = svc.vees[0].vee_id.clone();
    l.a.wait_vee(&vee, "running", BOOT, |i| i.state() == VeeState::Running).await;
    wait_tick(&mut l.a1.client().await, &vee, 1, BOOT).await;
    let here = l
        .repo_a
        .client()
        .head(&disk)
        .await
        .unwrap()
        .expect("pulled through into A's repository");
    assert_eq!(here.owner, "acme");
    assert!(l.repo_a.daemon.log_text().contains("pulled through from a peer site"));

    // Another image of acme's at B, whose bytes on B's disk no longer
    // match its digest: refused, the deploy says why, nothing kept at A.
    let bad = acme_at_b.push_file(&own_disk(&l.dir, "bad.qcow2", 9), &meta).await.unwrap();
    let file = l.dir.join("repo-b/blobs").join(bad.hex());
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    let ids = GuestIds {
        disk: bad.to_string(),
        ..l.ids.clone()
    };
    let err = site::deploy(&mut acme, manifest("corrupt", "acme", &ids, 1, "")).await.unwrap_err();
    assert!(err.message().contains(&bad.to_string()), "{}", err.message());
    assert!(l.repo_a.client().head(&bad).await.unwrap().is_none());
    assert!(l.repo_a.daemon.log_text().contains("pull-through failed"));
    let tmp: Vec<_> = std::fs::read_dir(l.dir.join("repo-a/blobs/.tmp")).unwrap().collect();
    assert!(tmp.is_empty(), "leftovers in A's repository: {tmp:?}");
    site::vee_action(&mut acme, &vee, Action::Stop).await.unwrap();
    let dir = l.dir.clone();
    drop(l);
    std::fs::remove_dir_all(&dir).unwrap();
}
