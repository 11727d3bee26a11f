//! The soak (issue 13, deliverable 8): one VEE live-migrated back and forth
//! between site A and site B, with a checkpoint between each migration.
//! After every step exactly one domain of it runs, where the VEEM says, and
//! its counter has gone on from where it was (never restarted), its disk's
//! counter with it. `SOAK_ROUNDS` round trips (default 2 in the suite;
//! `scripts/soak` runs 50, i.e. 100 migrations).

use std::time::{Duration, Instant};

use e2e::daemons::{wait_tick, ImageRepo, Veeh};
use e2e::site::{self, manifest, Veem, ACME};
use e2e::{guest, lab};
use interfaces::vmi::*;

const BOOT: Duration = Duration::from_secs(180);

/// The last tick of `vee` on `host`'s console, once it is above `above`
/// (the counter went on there), with its disk counter.
async fn ticks_on_from(host: &Veeh, vee: &str, above: u64) -> (u64, Option<u64>) {
    wait_tick(&mut host.client().await, vee, above + 1, Duration::from_secs(60)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_soak_migrations_back_and_forth_with_checkpoints_lose_and_double_nothing() {
    let rounds: u32 = std::env::var("SOAK_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let _lab = lab::lock();
    let dir = lab::test_dir("soak");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "sa1", "site-a", lab::SITE_A_URI, &repo).await;
    let b1 = Veeh::start(&dir, "sb1", "site-b", lab::SITE_B_URI, &repo).await;
    let (pa, pb) = (site::port(), site::port());
    let (to_b, to_a) = site::peer_links(pa, pb, false);
    let ca = site::write_config(&dir, "site-a", pa, &repo, &[&a1], &[to_b], "");
    let cb = site::write_config(&dir, "site-b", pb, &repo, &[&b1], &[to_a], "");
    let a = Veem::start(&dir, "site-a", pa, ca).await;
    let _b = Veem::start(&dir, "site-b", pb, cb).await;
    let mut acme = a.client(ACME).await;

    let svc = acme
        .deploy(DeployRequest {
            manifest_toml: manifest("soak", "acme", &ids, 1, ""),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let vee = svc.vees[0].vee_id.clone();
    a.wait_vee(&vee, "running", BOOT, |i| i.state() == VeeState::Running).await;
    let (mut last, _) = wait_tick(&mut a1.client().await, &vee, 3, BOOT).await;

    let start = Instant::now();
    let mut checkpoints = std::collections::HashSet::new();
    for step in 0..rounds * 2 {
        let to_b = step % 2 == 0;
        let (here, there) = if to_b { (&a1, &b1) } else { (&b1, &a1) };
        // A checkpoint, then the VEE goes on where it is.
        let cp = site::vee_action(&mut acme, &vee, Action::Checkpoint).await.unwrap();
        assert!(
            checkpoints.insert(cp.latest_checkpoint.clone()),
            "step {step}: a new checkpoint each time"
        );
        (last, _) = ticks_on_from(here, &vee, last).await;

        let (site_to, host_to) = if to_b { ("site-b", "") } else { ("", a1.host.as_str()) };
        let m = site::migrate_approved(&a, &vee, site_to, host_to).await;
        assert_eq!(m.state(), MigrationState::Done, "step {step}: {}", m.detail);

        // Exactly one copy, where the VEEM says it is.
        let info = a
            .client(site::OPERATOR)
            .await
            .get_vee(GetVeeRequest { vee_id: vee.clone() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(info.state(), VeeState::Running, "step {step}");
        let expected = if to_b {
            "remote (site-b)".to_string()
        } else {
            format!("local ({})", a1.host)
        };
        assert_eq!(info.location, expected, "step {step}");
        assert_eq!(
            (here.domains().await.len(), there.domains().await.len()),
            (0, 1),
            "step {step}: one copy, at the destination"
        );

        // The counter went on from where it was; the disk's with it.
        let (n, d) = ticks_on_from(there, &vee, last).await;
        assert!(n > last, "step {step}: counter {n} after {last}");
        assert_eq!(d, Some(n), "step {step}: the disk's counter");
        last = n;
    }
    eprintln!(
        "soak: {} migrations and {} checkpoints in {:.0} s; counter at {last}",
        rounds * 2,
        checkpoints.len(),
        start.elapsed().as_secs_f64()
    );
    let services = acme
        .list_services(ListServicesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .services;
    assert_eq!(services.len(), 1, "one service");
    site::vee_action(&mut acme, &vee, Action::Stop).await.unwrap();
    assert_eq!(a1.domains().await.len() + b1.domains().await.len(), 0);
    drop((a, _b, a1, b1, repo));
    std::fs::remove_dir_all(&dir).unwrap();
}
