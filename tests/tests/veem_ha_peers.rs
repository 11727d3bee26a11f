//! A peer site through site A's takeover (issue 38, items 4 and 5): site
//! A's two VEEMs share an etcd cluster, and site B's `[[peers]]` entry for
//! A names both. B places a VEE at A; A's leader is killed; B does not
//! take A for failed while the standby takes over (its answers say the
//! site is there), the VEE placed there runs on, and B goes on placing a
//! service's instance at A and migrating a VEE there, through the new
//! leader. Real processes: etcd (3 members), A's two VEEMs and VEEHs a1,
//! a2, B's VEEM and VEEH b1 in B's namespaces, the tiny guest.

use std::time::{Duration, Instant};

use e2e::daemons::{ImageRepo, Veeh};
use e2e::ha;
use e2e::site::{self, manifest, Veem, ACME, OPERATOR};
use e2e::{guest, lab};
use interfaces::vmi::*;
use vee_testkit::etcd::EtcdCluster;

const BOOT: Duration = Duration::from_secs(180);

/// Waits until site B's operator sees `vee` running where `at` says
/// (`remote (site-a)`, or a `local (...)` host); returns its location.
async fn running_at(b: &Veem, vee: &str, what: &str, at: impl Fn(&str) -> bool) -> String {
    b.wait_vee(vee, what, BOOT, |i| i.state() == VeeState::Running && at(&i.location))
        .await
        .location
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_peer_site_places_and_migrates_at_site_a_through_a_takeover() {
    let _lab = lab::lock();
    let dir = lab::test_dir("veem-ha-peers");
    let cluster = tokio::task::block_in_place(|| EtcdCluster::start(&dir, 3)).unwrap();
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "pa1", "site-a", lab::SITE_A_URI, &repo).await;
    let a2 = Veeh::start(&dir, "pa2", "site-a", lab::SITE_A_URI, &repo).await;
    let b1 = Veeh::start(&dir, "pb1", "site-b", lab::SITE_B_URI, &repo).await;
    let store = cluster.store_toml_leased("/vee/site-a", Duration::from_secs(3));
    let (p1, p2, pb) = (site::port(), site::port(), site::port());
    let (to_b, mut to_a) = site::peer_links(p1, pb, false);
    to_a.endpoint = format!("{},{}", site::endpoint("site-a", p1), site::endpoint("site-a", p2));
    let c1 = ha::config(&dir, "veem-a1", p1, &repo, &[&a1, &a2], std::slice::from_ref(&to_b), &store);
    let c2 = ha::config(&dir, "veem-a2", p2, &repo, &[&a1, &a2], &[to_b], &store);
    let cb = site::write_config(&dir, "site-b", pb, &repo, &[&b1], &[to_a], "");
    let mut one = ha::spawn(&dir, "veem-a1", p1, &c1);
    ha::wait_leading(&mut one, Duration::from_secs(60)).await;
    let mut two = ha::spawn(&dir, "veem-a2", p2, &c2);
    let b = Veem::start(&dir, "site-b", pb, cb).await;
    let mut acme = b.client(ACME).await;

    // B has one host: of two anti-affine instances, one goes to A.
    let svc = site::deploy(&mut acme, manifest("two", "acme", &ids, 2, "")).await.unwrap();
    let mut placed = None;
    for v in &svc.vees {
        let at = running_at(&b, &v.vee_id, "running", |_| true).await;
        if at == "remote (site-a)" {
            placed = Some(v.vee_id.clone());
        }
    }
    let placed = placed.expect("one instance placed at site A");
    let solo = site::deploy(&mut acme, manifest("solo", "acme", &ids, 1, "")).await.unwrap();
    let solo = solo.vees[0].vee_id.clone();
    running_at(&b, &solo, "running at B", |l| l.starts_with("local (")).await;

    // A's leader dies: the standby takes over. B's peer watch asks A
    // every second and would take three silent rounds for a failure.
    one.daemon.kill();
    let took = ha::wait_leading(&mut two, Duration::from_secs(30)).await;
    println!("site A's takeover: {took:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = b.daemon.log_text();
    assert!(!log.contains("peer site missed its heartbeats"), "B took A for failed:\n{log}");
    let mut op = b.client(OPERATOR).await;
    let shown = op.get_vee(GetVeeRequest { vee_id: placed.clone() }).await.unwrap().into_inner();
    assert_eq!(
        (shown.state(), shown.location.as_str()),
        (VeeState::Running, "remote (site-a)"),
        "the VEE placed at A runs on there"
    );
    assert!(
        b1.domains().await.iter().all(|d| d.vee_id != placed),
        "B recovered the VEE placed at A"
    );

    // Placing through the new leader: another service's instance goes
    // to A.
    let start = Instant::now();
    let more = site::deploy(&mut acme, manifest("more", "acme", &ids, 2, "")).await.unwrap();
    let mut more_at_a = 0;
    for v in &more.vees {
        if running_at(&b, &v.vee_id, "running", |_| true).await == "remote (site-a)" {
            more_at_a += 1;
        }
    }
    assert!(more_at_a >= 1, "no instance of `more` placed at A");
    println!("B placed `more` at A through its new leader in {:?}", start.elapsed());

    // Migrating through the new leader: B's operator moves `solo` to A.
    let m = site::migrate_approved(&b, &solo, "site-a", "").await;
    assert_eq!(m.state(), MigrationState::Done, "{}", m.detail);
    running_at(&b, &solo, "running at A", |l| l == "remote (site-a)").await;
    assert!(b1.domains().await.iter().all(|d| d.vee_id != solo), "solo still runs at B");
    // A boots what it accepted in the background: its hosts run all of
    // it, once each, soon.
    let start = Instant::now();
    loop {
        let mut at_a: Vec<String> = a1.domains().await.into_iter().map(|d| d.vee_id).collect();
        at_a.extend(a2.domains().await.into_iter().map(|d| d.vee_id));
        if at_a.len() == 2 + more_at_a {
            assert!(at_a.contains(&placed) && at_a.contains(&solo), "{at_a:?}");
            break;
        }
        assert!(
            start.elapsed() < BOOT,
            "A runs {at_a:?}, not the {} VEEs B placed and moved there",
            2 + more_at_a
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    for h in [&a1, &a2, &b1] {
        h.destroy_all().await;
    }
    drop((one, two, b, a1, a2, b1, repo, cluster));
    let _ = std::fs::remove_dir_all(&dir);
}
