//! Two VEEMs of site A over one etcd cluster (issue 38, items 2, 3, 5 and
//! 7): one leads, the other stands by and names it; the leader killed,
//! and the VEE's host with it, the standby takes over within the lease
//! (from the copy it kept by etcd's watch), recovers the VEE on the other
//! host and checkpoints it on schedule, a deploy goes through the new
//! leader; a leader stopped past its lease and woken up is fenced, steps
//! down and stands by; etcd losing a member, then its quorum, then getting
//! it back. Real processes: etcd (3 members), `veem` twice, two VEEHs, the
//! tiny guest.

use std::path::Path;
use std::time::{Duration, Instant};

use e2e::daemons::{ImageRepo, Veeh};
use e2e::ha::{client, config, list, spawn, wait_leading};
use e2e::site::{self, manifest, ACME, OPERATOR};
use e2e::{guest, lab};
use interfaces::vmi::*;
use vee_testkit::etcd::EtcdCluster;

const BOOT: Duration = Duration::from_secs(180);
/// The leader's lease in this test.
const TTL: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread")]
async fn lab_the_standby_takes_over_a_killed_leader_and_a_stalled_one_is_fenced() {
    let _lab = lab::lock();
    let dir = lab::test_dir("veem-ha");
    let cluster = tokio::task::block_in_place(|| EtcdCluster::start(&dir, 3)).unwrap();
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let h1 = Veeh::start(&dir, "ha1", "site-a", lab::SITE_A_URI, &repo).await;
    let h2 = Veeh::start(&dir, "ha2", "site-a", lab::SITE_A_URI, &repo).await;
    let store = cluster.store_toml_leased("/vee/site-a", TTL);
    let (pa, pb) = (site::port(), site::port());
    let (ca, cb) = (
        config(&dir, "veem-1", pa, &repo, &[&h1, &h2], &[], &store),
        config(&dir, "veem-2", pb, &repo, &[&h1, &h2], &[], &store),
    );

    let mut one = spawn(&dir, "veem-1", pa, &ca);
    wait_leading(&mut one, Duration::from_secs(60)).await;
    let mut two = spawn(&dir, "veem-2", pb, &cb);
    // The standby names its leader and serves nothing itself.
    let start = Instant::now();
    let named = loop {
        match list(&two).await {
            Err(s) if s.code() == tonic::Code::Unavailable && s.metadata().get("vee-leader").is_some() => break s,
            Ok(_) => panic!("a standby answered as the leader"),
            _ => {}
        }
        two.daemon.assert_alive();
        assert!(start.elapsed() < Duration::from_secs(30), "{}", two.daemon.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(named.metadata().get("vee-leader").unwrap().to_str().unwrap(), one.endpoint);
    assert!(named.message().contains("stands by"), "{}", named.message());

    // A service whose VEE is checkpointed every 15 s.
    let mut acme = one.client(ACME).await;
    let svc = site::deploy(&mut acme, manifest("shop", "acme", &ids, 1, "checkpoint_interval = \"15s\"\n"))
        .await
        .unwrap();
    let vee = svc.vees[0].vee_id.clone();
    let on_host = |i: &VeeInfo, h: &Veeh| i.location == format!("local ({})", h.host);
    let info = one.wait_vee(&vee, "running", BOOT, |i| i.state() == VeeState::Running).await;
    let (failed, h1) = if on_host(&info, &h1) { (h1, h2) } else { (h2, h1) };
    one.wait_vee(&vee, "checkpointed", Duration::from_secs(60), |i| !i.latest_checkpoint.is_empty())
        .await;
    let before = list(&one).await.unwrap();

    // The leader dies, and the VEE's host with it (its VEEH killed, its
    // domain destroyed): the standby leads within the lease and a
    // heartbeat, and recovers the VEE on the other host.
    let killed = Instant::now();
    one.daemon.kill();
    let mut failed = failed;
    failed.daemon.kill();
    veeh::hypervisor::Hypervisor::open(lab::SITE_A_URI, &failed.host)
        .unwrap()
        .destroy(&vee)
        .unwrap();
    wait_leading(&mut two, TTL + Duration::from_secs(20)).await;
    println!("takeover after kill -9: {:?} (lease {TTL:?})", killed.elapsed());
    // From the copy it kept current by etcd's watch, not a second read.
    let log = two.daemon.log_text();
    assert!(log.contains("opening the site's state from_copy=true"), "{log}");
    let start = Instant::now();
    two.wait_vee(&vee, "recovered on the other host", Duration::from_secs(120), |i| {
        i.state() == VeeState::Running && on_host(i, &h1)
    })
    .await;
    println!("the VEE of the failed host ran again {:?} after the takeover", start.elapsed());
    let after = list(&two).await.unwrap();
    let view = |v: &[VeeInfo]| v.iter().map(|i| (i.vee_id.clone(), i.state())).collect::<Vec<_>>();
    assert_eq!(view(&after), view(&before), "the same VEEs, in the same states");
    assert_eq!(h1.domains().await.len(), 1, "the VEE runs once, on the host left");
    // Checkpointed on schedule by the new leader.
    let last = after[0].latest_checkpoint.clone();
    two.wait_vee(&vee, "checkpointed again", Duration::from_secs(60), |i| {
        !i.latest_checkpoint.is_empty() && i.latest_checkpoint != last
    })
    .await;
    // No violation charged for the takeover (nor for a recovery within
    // the SLA).
    site::assert_no_violations(&mut two.client(ACME).await, &svc.service_id).await;
    // The killed VEEM comes back as a standby naming the new leader.
    let mut one = spawn(&dir, "veem-1b", pa, &ca);
    let start = Instant::now();
    loop {
        if let Err(s) = list(&one).await {
            if s.metadata().get("vee-leader").is_some_and(|l| l.to_str().unwrap() == two.endpoint) {
                break;
            }
        }
        one.daemon.assert_alive();
        assert!(start.elapsed() < Duration::from_secs(30), "{}", one.daemon.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The leader stalls past its lease: the other takes over, and the
    // stalled one, woken up, is fenced, steps down and stands by again.
    let stalled = two.daemon.pid().unwrap().to_string();
    std::process::Command::new("kill").args(["-STOP", &stalled]).status().unwrap();
    let stopped = Instant::now();
    // Clients given both endpoints, the stalled one first, skip it within
    // the probe deadline, wait through the takeover and answer from the
    // new leader within seconds of it; a checkpoint asked meanwhile is
    // taken once.
    let both = format!("{},{}", two.endpoint, one.endpoint);
    let cli = |args: &'static [&'static str]| {
        let (both, dir) = (both.clone(), dir.clone());
        tokio::task::spawn_blocking(move || {
            let out = site::cli_at(&both, &dir, ACME, args);
            (Instant::now(), out)
        })
    };
    let ls = cli(&["ls", "-q"]);
    let checkpoint = {
        let (both, dir, vee) = (both.clone(), dir.clone(), vee.clone());
        tokio::task::spawn_blocking(move || site::cli_at(&both, &dir, ACME, &["checkpoint", &vee, "-o", "json"]))
    };
    let took = wait_leading(&mut one, TTL + Duration::from_secs(20)).await;
    let led = Instant::now();
    println!("takeover of a stalled leader: {took:?}");
    let (answered, out) = ls.await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&vee));
    let after = answered.saturating_duration_since(led);
    println!(
        "veem ls with the leader stopped: answered {:?} after the stop, {after:?} after the takeover",
        answered.duration_since(stopped)
    );
    assert!(after < Duration::from_secs(3), "{after:?} after the standby led");
    let out = checkpoint.await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cp: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cp["state"], "running", "{cp}");
    // The new leader's heartbeats carried its epoch to the host, which
    // keeps the newest and refuses any older one: the stalled leader's
    // (its election key was made before the new leader's).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let newest: i64 = std::fs::read_to_string(h1.state_dir.join("leader-epoch"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut vhi = h1.client().await;
    let mut older = tonic::Request::new(interfaces::vhi::ListDomainsRequest::default());
    older.metadata_mut().insert(interfaces::fencing::EPOCH, (newest - 1).into());
    let refused = vhi.list_domains(older).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().starts_with("fenced"), "{}", refused.message());
    // A deploy sent to the stalled leader waits in its socket; woken up,
    // it must not take effect: its commit is fenced, or it steps down
    // first.
    let late = tokio::spawn({
        let (m, endpoint) = (manifest("late", "acme", &ids, 1, ""), two.endpoint.clone());
        async move {
            // Connected once it wakes up (the TLS handshake waits too).
            let mut c = client(&endpoint, ACME).await?;
            site::deploy(&mut c, m).await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::process::Command::new("kill").args(["-CONT", &stalled]).status().unwrap();
    let start = Instant::now();
    loop {
        let log = two.daemon.log_text();
        if log.contains("stepping down, standing by again") {
            if let Err(s) = list(&two).await {
                if s.metadata().get("vee-leader").is_some_and(|l| l.to_str().unwrap() == one.endpoint) {
                    break;
                }
            }
        }
        two.daemon.assert_alive();
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the stalled leader did not step down and stand by; log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let late = late.await.unwrap();
    println!(
        "a deploy sent to the stalled leader: {:?}",
        late.as_ref().map(|s| &s.service_id).map_err(|e| e.message())
    );
    assert!(late.is_err(), "the stalled leader deployed {late:?}");
    let mut op = one.client(OPERATOR).await;
    let services = op
        .list_services(ListServicesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .services;
    assert!(services.iter().all(|s| s.name != "late"), "nothing of it written: {services:?}");

    // The site goes on under its new leader: the CLI, given both VEEMs'
    // endpoints, finds it and deploys there (the stopped one first in
    // the list).
    let file = dir.join("more.toml");
    std::fs::write(&file, manifest("more", "acme", &ids, 1, "")).unwrap();
    let out = site::cli_at(&both, &dir, ACME, &["deploy", file.to_str().unwrap(), "-o", "json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let deployed: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let more_vee = deployed["vees"][0]["vee_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{stdout}"))
        .to_string();
    one.wait_vee(&more_vee, "running", BOOT, |i| i.state() == VeeState::Running).await;
    assert_eq!(h1.domains().await.len(), 2);

    // Quorum: one etcd member down, the site works; two down, writes are
    // refused saying why and nothing is half-written, the VEEs run on;
    // both back, the site resumes by itself.
    let mut cluster = cluster;
    let m = |name: &str| {
        let file = dir.join(format!("{name}.toml"));
        std::fs::write(&file, manifest(name, "acme", &ids, 1, "")).unwrap();
        file
    };
    let deploy = |file: &Path| site::cli_at(&both, &dir, ACME, &["deploy", file.to_str().unwrap(), "-o", "json"]);
    // A follower first (the raft leader's death costs an election, which
    // a lease as short as this test's may not outlive), then the leader.
    let raft = cluster.raft_leader().unwrap();
    let follower = (0..3).find(|i| *i != raft).unwrap();
    cluster.kill_member(follower);
    let out = site::cli_at(&both, &dir, ACME, &["undeploy", "more"]);
    assert!(out.status.success(), "one member down: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(h1.domains().await.len(), 1, "undeployed with one member down");
    cluster.kill_member(raft);
    // Refused, and within seconds saying why (a VEEM that has just
    // stepped down may first say an election is under way).
    let (start, file) = (Instant::now(), m("no-quorum"));
    loop {
        let refused = deploy(&file);
        let said = String::from_utf8_lossy(&refused.stderr).to_string();
        assert!(!refused.status.success(), "deployed without quorum: {said}");
        if said.contains("read-only") {
            println!("a deploy without quorum ({:?}): {said}", start.elapsed());
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{said}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Past the lease, nobody leads; the CLI says why.
    tokio::time::sleep(TTL + Duration::from_secs(2)).await;
    let out = site::cli_at(&both, &dir, OPERATOR, &["ls"]);
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    println!("veem ls without quorum: {said}");
    assert!(
        !out.status.success() && said.contains("read-only") && said.contains("etcd"),
        "{said}"
    );
    assert_eq!(h1.domains().await.len(), 1, "the VEE runs on");
    for i in [raft, follower] {
        tokio::task::block_in_place(|| cluster.start_member(i)).unwrap();
    }
    let start = Instant::now();
    let resumed = loop {
        let out = site::cli_at(&both, &dir, OPERATOR, &["services", "-o", "json"]);
        if out.status.success() {
            break String::from_utf8_lossy(&out.stdout).to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!("the site resumed {:?} after quorum returned", start.elapsed());
    assert!(resumed.contains("shop"), "{resumed}");
    assert!(!resumed.contains("no-quorum"), "nothing of the refused deploy: {resumed}");
    let out = deploy(&m("after-quorum"));
    assert!(out.status.success(), "after quorum: {}", String::from_utf8_lossy(&out.stderr));

    h1.destroy_all().await;
    drop((one, two, h1, failed, repo, cluster));
    let _ = std::fs::remove_dir_all(&dir);
}
