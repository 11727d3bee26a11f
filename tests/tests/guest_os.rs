//! The VEE as its guest operating system sees it, through a real `veeh`
//! and libvirtd: a stop is a clean shutdown (guest agent or ACPI power
//! button), and the guest's clock is set to the host's after a restore or a
//! resume (guest agent). The tiny guest behaves here as a stock systemd
//! guest with qemu-guest-agent would (scripts/build-guest-image).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::daemons::{checkpoint, console, wait_console_line, wait_tick, ImageRepo, Veeh};
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
    let _lab = lab::lock();
    let dir = lab::test_dir("guest-shutdown");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "gs-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let mut c = a1.client().await;
    let spec = ids.spec("svc-shutdown");
    let vee = spec.vee_id.clone();
    c.prepare(spec.clone()).await.unwrap();
    c.create(spec.clone()).await.unwrap();
    c.start(VeeRef { vee_id: vee.clone() }).await.unwrap();
    wait_tick(&mut c, &vee, 2, BOOT).await;

    let t = Instant::now();
    let r = c
        .shutdown(ShutdownRequest {
            vee_id: vee.clone(),
            timeout_s: 60,
        })
        .await
        .unwrap()
        .into_inner();
    let took = t.elapsed();
    assert!(r.clean, "the guest shut down by itself, not destroyed after the timeout");
    assert!(took < Duration::from_secs(60), "{took:?}");
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
    c.prepare(spec.clone()).await.unwrap();
    c.create(spec.clone()).await.unwrap();
    c.start(VeeRef { vee_id: vee.clone() }).await.unwrap();
    wait_tick(&mut c, &vee, 2, BOOT).await;

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
    c.suspend(VeeRef { vee_id: vee.clone() }).await.unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    c.resume(VeeRef { vee_id: vee.clone() }).await.unwrap();
    let line = wait_console_line(&mut c, &vee, "vee-guest: agent set the clock to", 1, Duration::from_secs(30)).await;
    let skew = clock_of(&line) - now_s();
    assert!(skew.abs() <= 2, "guest clock after resume {skew} s from the host's: {line}");
    c.destroy(destroy(true)).await.unwrap();
    drop(a1);
    std::fs::remove_dir_all(&dir).unwrap();
}
