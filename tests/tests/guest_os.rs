//! The VEE as its guest operating system sees it, through a real `veeh`
//! and libvirtd: a stop is a clean shutdown (guest agent or ACPI power
//! button); the guest's clock is set to the host's after a restore, a
//! resume or a live migration (guest agent); first-boot data reaches it as
//! a NoCloud seed, through a restore and a migration too. The tiny guest
//! behaves here as a stock cloud image with cloud-init and qemu-guest-agent
//! would (scripts/build-guest-image).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::daemons::{boot, checkpoint, console, migrate, start, wait_console_line, wait_tick, ImageRepo, Veeh};
use e2e::{guest, lab};
use interfaces::vhi::*;

const BOOT: Duration = Duration::from_secs(120);

fn now_s() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// The seconds in the guest's console line `vee-guest: agent set the clock
/// to SECONDS`.
fn clock_of(line: &str) -> i64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_shutdown_is_a_clean_guest_shutdown_not_a_power_cut() {
    clean_shutdown("guest-shutdown", Asked::Running).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_suspended_guest_runs_again_to_shut_down_cleanly() {
    clean_shutdown("guest-shutdown-suspended", Asked::Suspended).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_guest_asked_while_it_boots_is_asked_again_and_shuts_down_cleanly() {
    clean_shutdown("guest-shutdown-booting", Asked::Booting).await;
}

/// When the guest is asked to shut down.
#[derive(PartialEq)]
enum Asked {
    /// Running: ticking, its power button and agent listening.
    Running,
    /// Suspended (paused) after that.
    Suspended,
    /// At once after the start, before anything in it listens.
    Booting,
}

/// Boots the tiny guest and asks for a shutdown with 30 s to spare, when
/// `asked`: the guest shuts down by itself, unmounting its disk, well
/// before the destroy.
async fn clean_shutdown(name: &str, asked: Asked) {
    let _lab = lab::lock();
    let dir = lab::test_dir(name);
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "gs-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let mut c = a1.client().await;
    let spec = ids.spec("svc-shutdown");
    let vee = spec.vee_id.clone();
    if asked == Asked::Booting {
        start(&mut c, &spec).await;
    } else {
        boot(&mut c, &spec).await;
    }
    if asked == Asked::Suspended {
        let st = c.suspend(SuspendRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
        assert_eq!(st.state(), VeeState::Paused);
    }

    let t = Instant::now();
    let r = c
        .shutdown(ShutdownRequest {
            vee_id: vee.clone(),
            timeout: interfaces::time::duration_s(30),
        })
        .await
        .unwrap()
        .into_inner();
    let took = t.elapsed();
    assert!(r.clean, "the guest shut down by itself, not destroyed after the timeout ({took:?})");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_ne!(r.status.unwrap().state(), VeeState::Running);
    let text = console(&mut c, &vee).await;
    assert!(
        text.contains("vee-guest: data disk unmounted") && text.contains("vee-guest: clean shutdown"),
        "the guest unmounted its disk and powered itself off:\n{}",
        e2e::site::tail(&text, 600)
    );
    drop(a1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_the_guest_clock_is_the_hosts_after_a_restore_and_a_resume() {
    let _lab = lab::lock();
    let dir = lab::test_dir("guest-clock");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "gc-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let mut c = a1.client().await;
    let spec = ids.spec("svc-clock");
    let vee = spec.vee_id.clone();
    boot(&mut c, &spec).await;

    // Saved, and restored 8 s later: the guest's clock would be 8 s behind.
    let cp = checkpoint(&mut c, &vee).await;
    let destroy = |remove| DestroyRequest {
        vee_id: vee.clone(),
        remove,
    };
    c.destroy(destroy(false)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    c.restore(RestoreRequest {
        spec: Some(spec.clone()),
        checkpoint: Some(cp),
        fence_owner: String::new(),
    })
    .await
    .unwrap();
    let line = wait_console_line(&mut c, &vee, "vee-guest: agent set the clock to", 0, Duration::from_secs(30)).await;
    let skew = clock_of(&line) - now_s();
    assert!(skew.abs() <= 2, "guest clock after restore {skew} s from the host's: {line}");

    // Paused 8 s, then resumed: set again.
    c.suspend(SuspendRequest { vee_id: vee.clone() }).await.unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    c.resume(ResumeRequest { vee_id: vee.clone() }).await.unwrap();
    let line = wait_console_line(&mut c, &vee, "vee-guest: agent set the clock to", 1, Duration::from_secs(30)).await;
    let skew = clock_of(&line) - now_s();
    assert!(skew.abs() <= 2, "guest clock after resume {skew} s from the host's: {line}");
    c.destroy(destroy(true)).await.unwrap();
    drop(a1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_first_boot_data_reaches_the_guest_and_follows_it_through_restore_and_migration() {
    let _lab = lab::lock();
    let dir = lab::test_dir("guest-seed");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a = Veeh::start(&dir, "seed-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let b = Veeh::start(&dir, "seed-b1", "site-b", lab::SITE_B_URI, &repo).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let mut spec = ids.spec("svc-seed");
    spec.cloud_init = Some(CloudInit {
        hostname: "web-0".into(),
        user_data: "#!/bin/sh\necho \"vee-guest: user-data ran on $(hostname)\"\n".into(),
        ssh_authorized_keys: vec![
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBf0a7bYk5Yd0n9y5fQz1c6b3kKp alice@laptop".into(),
            "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 bob@desk".into(),
        ],
    });
    let vee = spec.vee_id.clone();
    start(&mut ca, &spec).await;
    let seed = wait_console_line(&mut ca, &vee, "vee-guest: seed", 0, BOOT).await;
    assert_eq!(seed, format!("vee-guest: seed instance-id={vee} hostname=web-0 ssh-keys=2"));
    wait_console_line(&mut ca, &vee, "vee-guest: user-data ran on web-0", 0, BOOT).await;
    let before = wait_tick(&mut ca, &vee, 3, BOOT).await.0;

    // A checkpoint restored: the seed disk is written again and attached.
    let cp = checkpoint(&mut ca, &vee).await;
    ca.destroy(DestroyRequest {
        vee_id: vee.clone(),
        remove: false,
    })
    .await
    .unwrap();
    ca.restore(RestoreRequest {
        spec: Some(spec.clone()),
        checkpoint: Some(cp),
        fence_owner: String::new(),
    })
    .await
    .unwrap();
    wait_tick(&mut ca, &vee, before + 2, Duration::from_secs(30)).await;

    // Live-migrated to site B: B writes its own seed; the guest runs on,
    // with its clock set there.
    let target = cb
        .prepare_incoming(interfaces::vhi::PrepareIncomingRequest { spec: Some(spec.clone()) })
        .await
        .unwrap()
        .into_inner();
    assert!(target.seed_path.starts_with(b.state_dir.to_str().unwrap()), "{}", target.seed_path);
    let progress = migrate(&mut ca, &vee, target.clone(), 0).await;
    let last = progress.last().unwrap();
    assert_eq!(last.phase(), MigrationPhase::Done, "migration failed: {:?}", last.error);
    cb.complete_incoming(CompleteIncomingRequest { vee_id: vee.clone() }).await.unwrap();
    assert!(std::path::Path::new(&target.seed_path).exists());
    let line = wait_console_line(&mut cb, &vee, "vee-guest: agent set the clock to", 0, Duration::from_secs(30)).await;
    assert!((clock_of(&line) - now_s()).abs() <= 2, "guest clock at B: {line}");
    wait_tick(&mut cb, &vee, before + 4, Duration::from_secs(30)).await;
    cb.destroy(DestroyRequest {
        vee_id: vee.clone(),
        remove: true,
    })
    .await
    .unwrap();
    drop((a, b, repo));
    std::fs::remove_dir_all(&dir).unwrap();
}
