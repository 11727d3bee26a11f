//! Two sites with real daemons and the tiny guest: remote placement when
//! site A is full, an operator-approved live migration A -> B with the
//! counter going on and the disk ticks intact, a rejected proposal, a
//! migration whose destination host dies, the primary VEEM killed
//! mid-migration, usage records from B at A exactly once, and the roles;
//! checkpoints restored across sites when a host or a whole site fails, and
//! a VEE withdrawn by the site running it.

use std::process::Command;
use std::time::Duration;

use e2e::daemons::{console, wait_tick};
use e2e::site::{self, manifest, ACME, B_TO_A, OPERATOR};
use e2e::two_sites::TwoSites;
use e2e::{guest, lab};
use interfaces::vhi;
use interfaces::vmi::*;

const BOOT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread")]
async fn lab_operator_approved_migration_to_site_b_and_usage_back_at_a() {
    let _lab = lab::lock();
    let l = TwoSites::start("fed-migrate", "").await;
    let mut acme = l.a.client(ACME).await;
    let (svc, vee) = l.deploy_one(&mut acme).await;
    let mut ca = l.a1.client().await;

    // Roles: a peer token cannot deploy; a service provider cannot approve.
    let mut peer_at_a = l.a.peer_client("site-b", B_TO_A).await;
    let e = peer_at_a
        .deploy(DeployRequest {
            manifest_toml: manifest("x", "acme", &l.ids, 1, ""),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);

    // Only the operator names a site (location unawareness, E §3.4).
    let mut op = l.a.client(OPERATOR).await;
    let e = acme
        .migrate(MigrateRequest {
            vee_id: vee.clone(),
            to_host: String::new(),
            to_site: "site-b".into(),
            reason: "cheaper".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{}", e.message());
    // A proposal the operator rejects moves nothing.
    let p = op
        .migrate(MigrateRequest {
            vee_id: vee.clone(),
            to_host: String::new(),
            to_site: "site-b".into(),
            reason: "cheaper".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(p.state(), interfaces::vmi::MigrationState::Proposed);
    // One open proposal per VEE.
    let e = op
        .migrate(MigrateRequest {
            vee_id: vee.clone(),
            to_host: String::new(),
            to_site: "site-b".into(),
            reason: "again".into(),
        })
        .await
        .unwrap_err();
    assert!(e.message().contains("already has migration"), "{}", e.message());
    let e = acme
        .approve_migration(ApproveMigrationRequest {
            migration_id: p.migration_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let r = op
        .reject_migration(RejectMigrationRequest {
            migration_id: p.migration_id.clone(),
            reason: "not now".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.state(), interfaces::vmi::MigrationState::Rejected);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(l.a1.domains().await.len(), 1);
    assert!(l.b1.domains().await.is_empty());
    assert_eq!(
        acme.get_vee(GetVeeRequest { vee_id: vee.clone() })
            .await
            .unwrap()
            .into_inner()
            .location,
        "placed"
    );
    // Draining A's only host proposes nothing: no other host of A has room.
    let drained = op.drain(DrainRequest { host: l.a1.host.clone() }).await.unwrap().into_inner();
    assert!(drained.migrations.is_empty(), "{:?}", drained.migrations);
    assert_eq!(
        acme.drain(DrainRequest { host: l.a1.host.clone() }).await.unwrap_err().code(),
        tonic::Code::PermissionDenied
    );

    // Approved: live migration to B; the counter goes on there. The
    // provider's serial console at A follows the VEE there (relayed over
    // B's VMI), its shell answering before and after.
    let shell = e2e::console::Console::attach(&mut acme, &vee).await.unwrap();
    shell.type_line("echo at-a-$((6*7))").await;
    shell.wait_for("at-a-42", Duration::from_secs(60)).await;
    let before = guest::last_tick(&console(&mut ca, &vee).await).unwrap().0;
    let m = site::migrate_approved(&l.a, &vee, "site-b", "").await;
    assert_eq!(m.state(), interfaces::vmi::MigrationState::Done, "{}", m.detail);
    shell
        .wait_for("[notice: the VEE moved: its console is attached again]", Duration::from_secs(60))
        .await;
    shell.type_line("echo at-b-$((6*7))").await;
    shell.wait_for("at-b-42", Duration::from_secs(60)).await;
    let screen = shell.shown.lock().unwrap().clone();
    assert!(
        !screen.contains("site-b") && !screen.contains(&l.b1.host),
        "no place named: {screen}"
    );
    drop(shell);
    let shown = acme.get_vee(GetVeeRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
    assert_eq!(shown.location, "placed", "the provider never sees where");
    assert_eq!(shown.state(), interfaces::vmi::VeeState::Running);
    let shown = op.get_vee(GetVeeRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
    assert_eq!(shown.location, "remote (site-b)");
    assert!(l.a1.domains().await.is_empty(), "the VEE still runs at A");
    let at_b = l.b1.domains().await;
    assert_eq!(at_b.len(), 1);
    let mut cb = l.b1.client().await;
    wait_tick(&mut cb, &vee, 1, Duration::from_secs(60)).await;
    let first_at_b = guest::ticks(&console(&mut cb, &vee).await)[0];
    assert!(first_at_b > before, "counter went on at B: {before} then {first_at_b}");
    let (n, d) = wait_tick(&mut cb, &vee, first_at_b + 2, Duration::from_secs(30)).await;
    assert_eq!(d, Some(n));

    // Usage metered at B comes back to A, stamped with B's ID, once (the
    // operator sees the site chain; the provider does not).
    let start = std::time::Instant::now();
    let remote = loop {
        let u = op
            .get_usage(GetUsageRequest {
                service_id: svc.service_id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let remote: Vec<UsageRecord> = u
            .records
            .into_iter()
            .filter(|r| r.site_chain.first().map(String::as_str) == Some("site-b"))
            .collect();
        if remote.len() >= 2 {
            break remote;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no usage records from site B at A");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    for r in &remote {
        assert_eq!(r.site_chain, vec!["site-b".to_string(), "site-a".to_string()]);
        assert_eq!(r.abc_id, svc.service_id);
        assert!(r.cpu_seconds > 0.0 && r.memory_mib_seconds > 0.0);
    }
    let ids: std::collections::HashSet<_> = remote.iter().map(|r| r.record_id.clone()).collect();
    assert_eq!(ids.len(), remote.len(), "duplicate usage records");
    // A batch pushed twice is counted once.
    let batch = PushUsageRequest {
        from_site: "site-b".into(),
        records: remote
            .iter()
            .map(|r| UsageRecord {
                site_chain: vec!["site-b".into()],
                ..r.clone()
            })
            .collect(),
    };
    let again = peer_at_a.push_usage(batch).await.unwrap().into_inner();
    assert_eq!((again.accepted, again.duplicates), (0, remote.len() as u32));
    // Home again: a VEE running remotely migrates back to a host of A.
    let last_at_b = guest::last_tick(&console(&mut cb, &vee).await).unwrap().0;
    let p = op
        .migrate(MigrateRequest {
            vee_id: vee.clone(),
            to_host: l.a1.host.clone(),
            to_site: String::new(),
            reason: "home".into(),
        })
        .await
        .unwrap()
        .into_inner();
    op.approve_migration(ApproveMigrationRequest {
        migration_id: p.migration_id.clone(),
    })
    .await
    .unwrap();
    let m = site::wait_migration(&l.a, &p.migration_id, Duration::from_secs(180)).await;
    assert_eq!(m.state(), interfaces::vmi::MigrationState::Done, "{}", m.detail);
    assert_eq!(
        acme.get_vee(GetVeeRequest { vee_id: vee.clone() })
            .await
            .unwrap()
            .into_inner()
            .location,
        "placed"
    );
    assert!(l.b1.domains().await.is_empty(), "the VEE still runs at B");
    assert_eq!(l.a1.domains().await.len(), 1);
    let back = {
        let mut ca = l.a1.client().await;
        wait_tick(&mut ca, &vee, 1, Duration::from_secs(60)).await;
        let text = console(&mut ca, &vee).await;
        *guest::ticks(&text).iter().find(|t| **t > before).expect("ticks after coming home")
    };
    assert!(back > last_at_b, "counter went on after coming home: {last_at_b} at B, then {back}");
    site::vee_action(&mut acme, &vee, interfaces::vmi::Action::Stop).await.unwrap();
    assert!(l.a1.domains().await.is_empty());
    let dir = l.dir.clone();
    drop(l);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_remote_placement_when_site_a_is_full() {
    let _lab = lab::lock();
    let l = TwoSites::start("fed-place", "").await;
    let mut acme = l.a.client(ACME).await;
    // Site A has one host: the second anti-affine instance goes to B.
    // (A peer's token cannot use peer calls to deploy either.)
    let svc = match acme
        .deploy(DeployRequest {
            manifest_toml: manifest("shop", "acme", &l.ids, 2, ""),
            ..Default::default()
        })
        .await
    {
        Ok(r) => r.into_inner(),
        Err(e) => panic!(
            "{e:?}\nsite A:\n{}\nsite B:\n{}",
            site::tail(&l.a.daemon.log_text(), 3000),
            site::tail(&l.b.daemon.log_text(), 3000)
        ),
    };
    let mut locations = Vec::new();
    for v in &svc.vees {
        let i =
            l.a.wait_vee(&v.vee_id, "running", BOOT, |i| i.state() == interfaces::vmi::VeeState::Running)
                .await;
        locations.push(i.location.clone());
    }
    // Anti-affinity: one instance on site A's only host, the other at B.
    assert_eq!(locations.iter().filter(|l| l.starts_with("local (")).count(), 1, "{locations:?}");
    assert_eq!(
        locations.iter().filter(|l| l.as_str() == "remote (site-b)").count(),
        1,
        "{locations:?}"
    );
    let remote = svc
        .vees
        .iter()
        .zip(&locations)
        .find(|(_, loc)| loc.as_str() == "remote (site-b)")
        .unwrap()
        .0
        .vee_id
        .clone();
    let shown = acme.get_vee(GetVeeRequest { vee_id: remote.clone() }).await.unwrap().into_inner();
    assert_eq!(shown.location, "placed", "the provider never sees where");
    let mut cb = l.b1.client().await;
    wait_tick(&mut cb, &remote, 2, BOOT).await;

    // Site B gives the VEE back (Withdraw). Only B's operator may; while
    // anti-affinity keeps it off A's only host, A refuses and B keeps it.
    let withdraw = VeeActionRequest {
        vee_id: remote.clone(),
        action: interfaces::vmi::Action::Withdraw as i32,
        checkpoint_id: String::new(),
    };
    let mut b_op = l.b.client(OPERATOR).await;
    let e = acme.vee_action(withdraw.clone()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let e = b_op.vee_action(withdraw.clone()).await.unwrap_err();
    assert!(e.message().contains("no local host can take"), "{}", e.message());
    assert_eq!(l.b1.domains().await.len(), 1);
    // Once the other instance stops, A takes it home: a live migration the
    // service provider sees only as events; the counter goes on at A.
    let local = svc.vees.iter().find(|v| v.vee_id != remote).unwrap().vee_id.clone();
    site::vee_action(&mut acme, &local, interfaces::vmi::Action::Stop).await.unwrap();
    let last_at_b = guest::last_tick(&console(&mut cb, &remote).await).unwrap().0;
    b_op.vee_action(withdraw).await.unwrap();
    let home =
        l.a.wait_vee(&remote, "back home", BOOT, |i| {
            i.state() == interfaces::vmi::VeeState::Running && i.location.starts_with("local")
        })
        .await;
    assert_eq!(
        acme.get_vee(GetVeeRequest { vee_id: remote.clone() })
            .await
            .unwrap()
            .into_inner()
            .location,
        "placed"
    );
    assert!(home.location.starts_with("local ("));
    assert!(l.b1.domains().await.is_empty(), "the VEE still runs at B");
    let mut ca = l.a1.client().await;
    wait_tick(&mut ca, &remote, last_at_b + 1, Duration::from_secs(60)).await;
    let at_a = guest::ticks(&console(&mut ca, &remote).await);
    assert!(at_a[0] > last_at_b, "counter went on at A: {last_at_b} at B, then {}", at_a[0]);
    site::vee_action(&mut acme, &remote, interfaces::vmi::Action::Stop).await.unwrap();
    let dir = l.dir.clone();
    drop(l);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_failed_and_interrupted_migrations_leave_exactly_one_copy() {
    let _lab = lab::lock();
    // Throttled so that there is time to interfere midway.
    let mut l = TwoSites::start("fed-fail", "[migration]\nbandwidth_mib_s = 4\n").await;
    let mut acme = l.a.client(ACME).await;
    let (_, vee) = l.deploy_one(&mut acme).await;

    // 1. The destination host dies midway (its VEEH and the incoming QEMU).
    let p = site::approved(&l.a, &vee, "site-b", "").await;
    let pat = format!("guest=vee-{vee}.*-incoming");
    let start = std::time::Instant::now();
    loop {
        let out = Command::new("pgrep").args(["-f", &pat]).output().unwrap();
        if let Some(pid) = String::from_utf8_lossy(&out.stdout).split_whitespace().next() {
            std::thread::sleep(Duration::from_secs(2));
            l.b1.daemon.kill();
            assert!(Command::new("kill").args(["-9", pid]).status().unwrap().success());
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the migration never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = site::wait_migration(&l.a, &p.migration_id, Duration::from_secs(120)).await;
    assert_eq!(m.state(), interfaces::vmi::MigrationState::Failed);
    let at_a = l.a1.domains().await;
    assert_eq!(at_a.len(), 1, "the VEE keeps running at A");
    assert_eq!(at_a[0].state(), vhi::VeeState::Running);
    let info =
        l.a.client(OPERATOR)
            .await
            .get_vee(GetVeeRequest { vee_id: vee.clone() })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(
        (info.state(), info.location.as_str()),
        (interfaces::vmi::VeeState::Running, format!("local ({})", l.a1.host).as_str())
    );
    let now = guest::last_tick(&console(&mut l.a1.client().await, &vee).await).unwrap().0;
    wait_tick(&mut l.a1.client().await, &vee, now + 2, Duration::from_secs(30)).await;

    // 2. Site B's host is back; the primary VEEM is killed mid-migration.
    l.b1.restart().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = site::approved(&l.a, &vee, "site-b", "").await;
    let start = std::time::Instant::now();
    while Command::new("pgrep").args(["-f", &pat]).output().unwrap().stdout.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(60), "the second migration never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::thread::sleep(Duration::from_secs(2));
    l.a.restart().await;
    let m = site::wait_migration(&l.a, &p.migration_id, Duration::from_secs(180)).await;
    // Whatever the outcome, exactly one copy runs, where A says it does.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (da, db) = (l.a1.domains().await, l.b1.domains().await);
    assert_eq!(da.len() + db.len(), 1, "exactly one running copy: A {da:?} B {db:?}");
    let mut acme = l.a.client(ACME).await;
    let info =
        l.a.client(OPERATOR)
            .await
            .get_vee(GetVeeRequest { vee_id: vee.clone() })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(info.state(), interfaces::vmi::VeeState::Running);
    if m.state() == interfaces::vmi::MigrationState::Done {
        assert_eq!(info.location, "remote (site-b)");
        assert_eq!(db.len(), 1);
    } else {
        assert_eq!(info.location, format!("local ({})", l.a1.host));
        assert_eq!(da.len(), 1);
    }
    let host = if da.is_empty() { &l.b1 } else { &l.a1 };
    let now = guest::last_tick(&console(&mut host.client().await, &vee).await).unwrap().0;
    wait_tick(&mut host.client().await, &vee, now + 2, Duration::from_secs(30)).await;
    site::vee_action(&mut acme, &vee, interfaces::vmi::Action::Stop).await.unwrap();
    let dir = l.dir.clone();
    drop(l);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_checkpoints_restore_across_sites_when_a_host_or_a_site_fails() {
    let _lab = lab::lock();
    let mut l = TwoSites::start("fed-recover", "").await;
    let mut acme = l.a.client(ACME).await;
    let (svc, vee) = l.deploy_one(&mut acme).await;
    let mut ca = l.a1.client().await;

    // 1. A checkpoint taken at A; then A's only host fails: no local host
    // is left, so the VEE is restored at B from A's checkpoint.
    let (cp_a, before, after) = checkpoint(&mut acme, &mut ca, &vee).await;
    l.power_off_a1(&vee);
    let info =
        l.a.wait_vee(&vee, "restored at site B", BOOT, |i| {
            i.state() == interfaces::vmi::VeeState::Running && i.location == "remote (site-b)"
        })
        .await;
    assert_eq!(info.latest_checkpoint, cp_a);
    let mut cb = l.b1.client().await;
    wait_tick(&mut cb, &vee, 1, Duration::from_secs(60)).await;
    let first = guest::ticks(&console(&mut cb, &vee).await)[0];
    assert!(
        first > before && first <= after + 1,
        "restored at B from A's checkpoint (ticks {before}..={after}), first tick at B {first}"
    );

    // 2. A's host is back. A checkpoint taken at B is recorded at A; then
    // site B stops answering: A restores the VEE at home from B's
    // checkpoint, and once B answers again B destroys its stale copy.
    l.a1.restart().await;
    let (cp_b, before, after) = checkpoint(&mut acme, &mut cb, &vee).await;
    assert_ne!(cp_b, cp_a);
    let b_pid = l.b.daemon.pid().unwrap().to_string();
    assert!(Command::new("kill").args(["-STOP", &b_pid]).status().unwrap().success());
    let info =
        l.a.wait_vee(&vee, "restored at home", BOOT, |i| {
            i.state() == interfaces::vmi::VeeState::Running && i.location.starts_with("local")
        })
        .await;
    assert!(Command::new("kill").args(["-CONT", &b_pid]).status().unwrap().success());
    assert_eq!(info.latest_checkpoint, cp_b);
    // The console log on A's host still holds the first run's ticks, which
    // went on past this checkpoint: the restored run starts where the
    // counter drops.
    let mut ca = l.a1.client().await;
    let start = std::time::Instant::now();
    let first = loop {
        let ticks = guest::ticks(&console(&mut ca, &vee).await);
        if let Some(t) = resumed_at(&ticks) {
            break t;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the restored guest prints nothing at A: {ticks:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        first > before && first <= after + 1,
        "restored at A from B's checkpoint (ticks {before}..={after}), first tick at A {first}"
    );
    let start = std::time::Instant::now();
    while !l.b1.domains().await.is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "B still runs its copy: {}",
            site::tail(&l.a.daemon.log_text(), 3000)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(l.a1.domains().await.len(), 1);
    site::assert_no_violations(&mut acme, &svc.service_id).await;
    site::vee_action(&mut acme, &vee, interfaces::vmi::Action::Stop).await.unwrap();
    let dir = l.dir.clone();
    drop(l);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Checkpoints `vee` through its primary site; returns the checkpoint ID
/// and the guest's last tick just before and just after, then lets the
/// guest tick on three more times.
async fn checkpoint(
    acme: &mut veem::peers::PeerClient,
    host: &mut vhi::vhi_service_client::VhiServiceClient<tonic::transport::Channel>,
    vee: &str,
) -> (String, u64, u64) {
    let before = guest::last_tick(&console(host, vee).await).unwrap().0;
    let info = site::vee_action(acme, vee, interfaces::vmi::Action::Checkpoint)
        .await
        .unwrap_or_else(|e| panic!("checkpoint of {vee}: {}", e.message()));
    assert!(!info.latest_checkpoint.is_empty());
    let after = guest::last_tick(&console(host, vee).await).unwrap().0;
    wait_tick(host, vee, after + 3, Duration::from_secs(30)).await;
    (info.latest_checkpoint, before, after)
}

/// The first tick of a second run in a console log: where the counter last
/// went down; `None` while there is no second run.
fn resumed_at(ticks: &[u64]) -> Option<u64> {
    ticks.windows(2).rposition(|w| w[1] <= w[0]).map(|i| ticks[i + 1])
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_full_vee_holds_a_spare_at_site_b_and_is_restored_into_it() {
    let _lab = lab::lock();
    let mut l = TwoSites::start("fed-full", "").await;
    let mut acme = l.a.client(ACME).await;
    let full = manifest("critical", "acme", &l.ids, 1, "").replace("guarantee = \"standard\"", "guarantee = \"full\"");

    // Site B's only host is taken whole: no peer can hold a spare, and the
    // manifest is refused with B's reason (the provider reads it without
    // site names); nothing stays at A.
    let mut acme_at_b = l.b.client(ACME).await;
    let filler = manifest("filler", "acme", &l.ids, 1, "").replace("memory_mib = 128", "memory_mib = 1024");
    let filler = site::deploy(&mut acme_at_b, filler).await.unwrap();
    let e = site::deploy(&mut acme, full.clone()).await.unwrap_err();
    assert!(
        e.message()
            .contains("guarantee full needs spare capacity at a peer site and none holds it")
            && e.message().contains("[site] refused a spare")
            && e.message().contains("no room for the spare"),
        "{}",
        e.message()
    );
    assert!(acme
        .list_services(ListServicesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .services
        .is_empty());
    site::vee_action(&mut acme_at_b, &filler.vees[0].vee_id, Action::Stop)
        .await
        .unwrap();

    // With room at B: admitted, its spare held there.
    let svc = site::deploy(&mut acme, full).await.unwrap();
    let vee = svc.vees[0].vee_id.clone();
    l.a.wait_vee(&vee, "running", BOOT, |i| i.state() == VeeState::Running).await;
    let mut ca = l.a1.client().await;
    wait_tick(&mut ca, &vee, 2, BOOT).await;
    let mut b_op = l.b.client(OPERATOR).await;
    let at_b = site::history(&mut b_op, "").await;
    assert!(
        at_b.iter()
            .any(|e| e.vee_id == vee && e.kind == "spare" && e.detail.contains("held for site-a")),
        "{at_b:#?}"
    );
    let (cp, before, after) = checkpoint(&mut acme, &mut ca, &vee).await;

    // Site A's only host dies: restored at B, into the spare held for it.
    l.power_off_a1(&vee);
    let info =
        l.a.wait_vee(&vee, "restored into its spare at site B", BOOT, |i| {
            i.state() == VeeState::Running && i.location == "remote (site-b)"
        })
        .await;
    assert_eq!(info.latest_checkpoint, cp);
    let mut cb = l.b1.client().await;
    wait_tick(&mut cb, &vee, 1, Duration::from_secs(60)).await;
    let first = guest::ticks(&console(&mut cb, &vee).await)[0];
    assert!(
        first > before && first <= after + 1,
        "from the checkpoint ({before}..={after}): {first}"
    );
    let at_b = site::history(&mut b_op, "").await;
    assert!(
        at_b.iter().any(|e| e.vee_id == vee && e.detail.contains("arrives into its spare")),
        "{at_b:#?}"
    );
    site::vee_action(&mut acme, &vee, Action::Stop).await.unwrap();
    let dir = l.dir.clone();
    drop(l);
    std::fs::remove_dir_all(&dir).unwrap();
}
