//! Migrations the planner proposes by itself, on one site with real
//! daemons and the tiny guest: a consolidation the site policy runs at once
//! (the guest's counter goes on, nothing moves back), and a host missing
//! heartbeats whose failure-risk proposal waits for the operator, who
//! rejects it (nothing moves); a source host that hangs mid-migration
//! fails the migration instead of holding its VEE, which is recovered.

use std::time::{Duration, Instant};

use e2e::daemons::{console, wait_tick, ImageRepo, Veeh};
use e2e::site::{self, host_of, manifest, Veem, ACME, OPERATOR};
use e2e::{guest, lab};
use interfaces::vhi;
use interfaces::vmi::*;

const BOOT: Duration = Duration::from_secs(180);

async fn migrations(v: &Veem) -> Vec<MigrationInfo> {
    v.client(OPERATOR)
        .await
        .list_migrations(ListMigrationsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .migrations
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_consolidation_empties_a_host_and_the_guest_goes_on() {
    let _lab = lab::lock();
    let t0 = Instant::now();
    let dir = lab::test_dir("proposals-consolidate");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    // Two hosts of site A on two libvirtds (libvirt refuses to migrate a
    // domain to the libvirtd it runs on): c2 uses the lab's second one.
    let c1 = Veeh::start(&dir, "c1", "site-a", lab::SITE_A_URI, &repo).await;
    let c2 = Veeh::start(&dir, "c2", "site-a", lab::SITE_A2_URI, &repo).await;
    let port = site::port();
    // Striping spreads the two services; consolidation then packs them.
    // settle: both guests tick before either may be moved.
    let extra = "rank_policy = \"striping\"\n[proposals]\nconsolidation = true\ninterval = \"2s\"\nsettle = \"30s\"\n[migration]\nauto_approve = [\"consolidation\"]\n";
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&c1, &c2], &[], extra);
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;

    // Two single-instance services (no constraint between them).
    let mut vees = Vec::new();
    for name in ["shop", "blog"] {
        let svc = acme
            .deploy(DeployRequest {
                manifest_toml: manifest(name, "acme", &ids, 1, ""),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        vees.push(svc.vees[0].vee_id.clone());
    }
    let hosts = [&c1, &c2];
    let mut placed = Vec::new();
    for v in &vees {
        let info = veem
            .wait_vee(v, "running", BOOT, |i| i.state() == interfaces::vmi::VeeState::Running)
            .await;
        let h = host_of(&info).expect("operator sees the host");
        let veeh = *hosts.iter().find(|x| x.host == h).unwrap();
        placed.push((v.clone(), veeh));
    }
    assert_ne!(placed[0].1.host, placed[1].1.host, "striping: one service per host");
    for (v, h) in &placed {
        wait_tick(&mut h.client().await, v, 2, BOOT).await;
    }
    assert!(migrations(&veem).await.is_empty(), "nothing moved before the VEEs settled");

    // Watch both consoles until the consolidation is done.
    let mut last_seen = [0u64; 2];
    let start = Instant::now();
    let done = loop {
        for (i, (v, h)) in placed.iter().enumerate() {
            if let Some((n, _)) = guest::last_tick(&console(&mut h.client().await, v).await) {
                last_seen[i] = last_seen[i].max(n);
            }
        }
        let ms = migrations(&veem).await;
        assert!(ms.len() <= 1, "one consolidation at a time: {ms:?}");
        if let Some(m) = ms.first() {
            assert!(
                !matches!(
                    m.state(),
                    interfaces::vmi::MigrationState::Failed | interfaces::vmi::MigrationState::Rejected
                ),
                "{m:?}\n{}",
                site::tail(&veem.daemon.log_text(), 3000)
            );
            if m.state() == interfaces::vmi::MigrationState::Done {
                break m.clone();
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "no consolidation done: {ms:?}\n{}",
            site::tail(&veem.daemon.log_text(), 3000)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(done.reason, "consolidation");
    assert_eq!(done.decided_by, "site policy");
    let moved = placed
        .iter()
        .position(|(v, _)| *v == done.vee_id)
        .expect("one of the two VEEs moved");
    let (src, dst) = (placed[moved].1, placed[1 - moved].1);
    assert_eq!(done.source, format!("host:{}", src.host));
    assert_eq!(done.destination, format!("host:{}", dst.host));

    // Both run on one host; the other is empty.
    for v in &vees {
        let info = veem
            .wait_vee(v, "running on the target", Duration::from_secs(30), |i| {
                i.state() == interfaces::vmi::VeeState::Running
            })
            .await;
        assert_eq!(host_of(&info).as_deref(), Some(dst.host.as_str()));
    }
    assert!(src.domains().await.is_empty(), "{} still runs a domain", src.host);
    assert_eq!(dst.domains().await.len(), 2);
    // The moved guest's counter goes on from where it was.
    let mut dc = dst.client().await;
    wait_tick(&mut dc, &done.vee_id, 1, Duration::from_secs(60)).await;
    let first = guest::ticks(&console(&mut dc, &done.vee_id).await)[0];
    assert!(
        last_seen[moved] >= 2 && first > last_seen[moved],
        "counter went on: {} at the source, then {first}",
        last_seen[moved]
    );
    let (n, d) = wait_tick(&mut dc, &done.vee_id, first + 2, Duration::from_secs(30)).await;
    assert_eq!(d, Some(n), "the disk holds every tick");

    // The proposal was evented; nothing moves back in later passes.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(migrations(&veem).await.len(), 1, "no oscillation");
    let log = veem.daemon.log_text();
    assert!(
        log.contains(&format!("{} host:{} -> host:{}: proposed", done.migration_id, src.host, dst.host)),
        "no proposal event"
    );

    for v in &vees {
        site::vee_action(&mut acme, v, interfaces::vmi::Action::Stop).await.unwrap();
    }
    assert!(dst.domains().await.is_empty());
    drop((veem, c1, c2, repo));
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!("consolidation test took {:?}", t0.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_failure_risk_waits_for_the_operator_who_rejects_it() {
    let _lab = lab::lock();
    let t0 = Instant::now();
    let dir = lab::test_dir("proposals-risk");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let r1 = Veeh::start(&dir, "k1", "site-a", lab::SITE_A_URI, &repo).await;
    let r2 = Veeh::start(&dir, "k2", "site-a", lab::SITE_A2_URI, &repo).await;
    let port = site::port();
    // Heartbeats every 2 s (a silent VEEH costs 2 s more each); a host
    // fails only after 20 misses, so a short stop is a risk, not a failure.
    // Only consolidation runs without the operator.
    let extra = "heartbeat_interval = \"2s\"\nheartbeat_miss_limit = 20\n[proposals]\ninterval = \"1s\"\n[migration]\nauto_approve = [\"consolidation\"]\n";
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&r1, &r2], &[], extra);
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    let svc = acme
        .deploy(DeployRequest {
            manifest_toml: manifest("shop", "acme", &ids, 1, ""),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let vee = svc.vees[0].vee_id.clone();
    let info = veem
        .wait_vee(&vee, "running", BOOT, |i| i.state() == interfaces::vmi::VeeState::Running)
        .await;
    let h = host_of(&info).unwrap();
    let (risky, other) = if h == r1.host { (&r1, &r2) } else { (&r2, &r1) };
    let mut rc = risky.client().await;
    wait_tick(&mut rc, &vee, 2, BOOT).await;
    assert!(migrations(&veem).await.is_empty());

    // The VEEH stops answering (its guests run on): the VEEM proposes
    // moving the VEE away, and waits for the operator.
    risky.signal("-STOP");
    let stopped = Instant::now();
    let proposal = loop {
        let ms = migrations(&veem).await;
        if let Some(m) = ms.iter().find(|m| m.vee_id == vee) {
            break m.clone();
        }
        if stopped.elapsed() > Duration::from_secs(30) {
            risky.signal("-CONT");
            panic!(
                "no failure-risk proposal after {:?}\n{}",
                stopped.elapsed(),
                site::tail(&veem.daemon.log_text(), 3000)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let stop_for = stopped.elapsed();
    // A few more passes while it is still silent: still one proposal, waiting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ms = migrations(&veem).await;
    risky.signal("-CONT");
    assert_eq!(ms.len(), 1, "one open proposal per VEE: {ms:?}");
    assert_eq!(proposal.reason, "failure-risk");
    assert_eq!(
        ms[0].state(),
        interfaces::vmi::MigrationState::Proposed,
        "failure-risk is not auto-approved: {:?}",
        ms[0]
    );
    assert_eq!(ms[0].decided_by, "");
    assert_eq!(proposal.source, format!("host:{}", risky.host));
    assert_eq!(proposal.destination, format!("host:{}", other.host));
    assert!(
        veem.daemon.log_text().contains(&format!(
            "{} host:{} -> host:{}: proposed",
            proposal.migration_id, risky.host, other.host
        )),
        "no proposal event"
    );

    // The host answers again; the operator rejects the proposal.
    let back = Instant::now();
    while rc.get_host_info(vhi::GetHostInfoRequest {}).await.is_err() {
        assert!(
            back.elapsed() < Duration::from_secs(20),
            "{} did not answer after SIGCONT",
            risky.host
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut op = veem.client(OPERATOR).await;
    let r = op
        .reject_migration(RejectMigrationRequest {
            migration_id: proposal.migration_id.clone(),
            reason: "the host is back".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (r.state(), r.decided_by.as_str()),
        (interfaces::vmi::MigrationState::Rejected, "operator")
    );

    // Nothing moved, and nothing new is proposed.
    let before = guest::last_tick(&console(&mut rc, &vee).await).unwrap().0;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let ms = migrations(&veem).await;
    assert_eq!(ms.len(), 1, "{ms:?}");
    let info = veem
        .wait_vee(&vee, "running", Duration::from_secs(10), |i| {
            i.state() == interfaces::vmi::VeeState::Running
        })
        .await;
    assert_eq!(host_of(&info).as_deref(), Some(risky.host.as_str()));
    assert!(other.domains().await.is_empty());
    wait_tick(&mut rc, &vee, before + 2, Duration::from_secs(30)).await;
    let ticks = guest::ticks(&console(&mut rc, &vee).await);
    assert!(ticks.windows(2).all(|w| w[1] > w[0]), "the guest never restarted: {ticks:?}");

    // The operator drains the host: a maintenance proposal to the other
    // host, waiting for approval; a second drain adds nothing.
    let d = op
        .drain(DrainRequest { host: risky.host.clone() })
        .await
        .unwrap()
        .into_inner()
        .migrations;
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0].reason.as_str(), d[0].state().to_string().as_str(), d[0].destination.clone()),
        ("maintenance", "proposed", format!("host:{}", other.host))
    );
    assert!(op
        .drain(DrainRequest { host: risky.host.clone() })
        .await
        .unwrap()
        .into_inner()
        .migrations
        .is_empty());
    op.reject_migration(RejectMigrationRequest {
        migration_id: d[0].migration_id.clone(),
        reason: "not today".into(),
    })
    .await
    .unwrap();

    site::vee_action(&mut acme, &vee, interfaces::vmi::Action::Stop).await.unwrap();
    drop((veem, r1, r2, repo));
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!(
        "failure-risk test took {:?} (VEEH stopped for {stop_for:?} until the proposal)",
        t0.elapsed()
    );
}

/// A source host that hangs in the middle of a live migration (its VEEH
/// stops answering, its domain is gone) must not hold its VEE: once the
/// host is declared failed the migration fails, the destination cleans
/// up, and the VEE is restored from its checkpoint on the other host.
#[tokio::test(flavor = "multi_thread")]
async fn lab_a_source_host_that_hangs_mid_migration_fails_it_and_its_vee_is_recovered() {
    let _lab = lab::lock();
    let dir = lab::test_dir("proposals-hung-source");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let h1 = Veeh::start(&dir, "h1", "site-a", lab::SITE_A_URI, &repo).await;
    let h2 = Veeh::start(&dir, "h2", "site-a", lab::SITE_A2_URI, &repo).await;
    let port = site::port();
    // 1 MiB/s: the migration of the guest's 128 MiB takes minutes.
    let extra = "[migration]\nbandwidth_mib_s = 1\n";
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&h1, &h2], &[], extra);
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    let mut op = veem.client(OPERATOR).await;

    let svc = site::deploy(&mut acme, manifest("shop", "acme", &ids, 1, "")).await.unwrap();
    let vee = svc.vees[0].vee_id.clone();
    let info = veem
        .wait_vee(&vee, "running", BOOT, |i| i.state() == interfaces::vmi::VeeState::Running)
        .await;
    let (src, dst) = if host_of(&info).as_deref() == Some(h1.host.as_str()) {
        (&h1, &h2)
    } else {
        (&h2, &h1)
    };
    wait_tick(&mut src.client().await, &vee, 2, BOOT).await;
    let cp = site::vee_action(&mut acme, &vee, interfaces::vmi::Action::Checkpoint)
        .await
        .unwrap_or_else(|e| panic!("checkpoint: {}", e.message()))
        .latest_checkpoint;

    let m = op
        .migrate(MigrateRequest {
            vee_id: vee.clone(),
            to_host: dst.host.clone(),
            to_site: String::new(),
            reason: "maintenance".into(),
        })
        .await
        .unwrap()
        .into_inner();
    op.approve_migration(ApproveMigrationRequest {
        migration_id: m.migration_id.clone(),
    })
    .await
    .unwrap();
    let start = Instant::now();
    while !migrations(&veem)
        .await
        .iter()
        .any(|x| x.state() == interfaces::vmi::MigrationState::Running && x.detail.starts_with("copying"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the migration does not copy: {:?}",
            migrations(&veem).await
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // The source host hangs: its VEEH stops, its domain dies with it.
    src.signal("-STOP");
    let uri = if src.host == h1.host { lab::SITE_A_URI } else { lab::SITE_A2_URI };
    veeh::hypervisor::Hypervisor::open(uri, &src.host).unwrap().destroy(&vee).unwrap();

    let start = Instant::now();
    let failed = loop {
        let ms = migrations(&veem).await;
        if let Some(x) = ms
            .iter()
            .find(|x| x.migration_id == m.migration_id && x.state() != interfaces::vmi::MigrationState::Running)
        {
            break x.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the migration still waits for a hung source: {ms:?}\n{}",
            site::tail(&veem.daemon.log_text(), 3000)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(failed.state(), interfaces::vmi::MigrationState::Failed, "{failed:?}");
    assert!(failed.detail.contains("source host failed"), "{failed:?}");
    let info = veem
        .wait_vee(&vee, "restored on the other host", BOOT, |i| {
            i.state() == interfaces::vmi::VeeState::Running && host_of(i).as_deref() == Some(dst.host.as_str())
        })
        .await;
    assert_eq!(info.latest_checkpoint, cp);
    wait_tick(&mut dst.client().await, &vee, 1, Duration::from_secs(60)).await;
    assert_eq!(dst.domains().await.len(), 1, "exactly one copy, at the destination");

    src.signal("-CONT");
    site::vee_action(&mut acme, &vee, interfaces::vmi::Action::Stop).await.unwrap();
    drop((veem, h1, h2, repo));
    std::fs::remove_dir_all(&dir).unwrap();
}
