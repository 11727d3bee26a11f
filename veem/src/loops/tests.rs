use std::time::{Duration, Instant};

use super::Loops;
use crate::sim::{eventually, FakeSite};

fn heartbeats(site: &FakeSite) -> usize {
    site.host("h1").calls().iter().filter(|c| c.starts_with("host_info")).count()
}

#[tokio::test]
async fn a_host_that_stays_silent_gets_no_new_vee_after_its_remapping_block() {
    let site = FakeSite::start(&["h1", "h2"], "heartbeat_miss_limit = 1\n").await;
    site.repo.blobs.lock().unwrap().insert(format!("sha256:{}", "5".repeat(64)));
    super::heartbeat_round(&site.veem).await; // both up
    site.host("h1").fail("HostInfo", tonic::Code::Unavailable, "host down");
    for _ in 0..3 {
        super::heartbeat_round(&site.veem).await;
    }
    eventually("h1 failed", || site.veem.core.hosts.health("h1") == crate::domain::Health::Failed).await;
    // An hour later h1 still does not answer.
    for _ in 0..3 {
        site.clock.advance_ms(20 * 60 * 1000);
        super::heartbeat_round(&site.veem).await;
    }
    let two = crate::sim::STANDARD.replace("disk_gib = 1\n", "disk_gib = 1\ninstances = 2\n");
    let provider = crate::config::Role::Provider("acme".into());
    let svc = site.veem.deploy.deploy(&provider, &two).await.unwrap();
    for id in &svc.vees {
        assert_eq!(
            site.veem.core.vee(id).unwrap().host(),
            Some("h2"),
            "a VEE placed on the silent host"
        );
    }
}

#[tokio::test]
async fn load_aware_placement_follows_the_load_the_hosts_measure() {
    let site = FakeSite::start(&["h1", "h2"], "rank_policy = \"load-aware\"\n").await;
    site.repo.blobs.lock().unwrap().insert(format!("sha256:{}", "5".repeat(64)));
    let provider = crate::config::Role::Provider("acme".into());
    for (busy, idle) in [("h1", "h2"), ("h2", "h1")] {
        site.host(busy).script.lock().unwrap().cpu_load = 0.9;
        site.host(idle).script.lock().unwrap().cpu_load = 0.1;
        super::heartbeat_round(&site.veem).await;
        let svc = site.veem.deploy.deploy(&provider, crate::sim::STANDARD).await.unwrap();
        let vee = site.veem.core.vee(&svc.vees[0]).unwrap();
        assert_eq!(vee.host(), Some(idle), "{busy} measured busy");
    }
    let vmi = crate::api::server::VmiService::handler(site.veem.clone());
    let loads: Vec<(String, f64)> = vmi.host_status().into_iter().map(|h| (h.name, h.cpu_load)).collect();
    assert_eq!(loads, [("h1".to_string(), 0.1), ("h2".to_string(), 0.9)]);
}

#[tokio::test]
async fn the_loops_run_each_period_and_stop_for_good_on_shutdown() {
    let site = FakeSite::start(&["h1"], "heartbeat_interval = \"1s\"\n").await;
    let loops = Loops::start(&site.veem);
    eventually("a heartbeat", || heartbeats(&site) >= 1).await;
    let t = Instant::now();
    loops.shutdown(Duration::from_secs(5)).await;
    assert!(t.elapsed() < Duration::from_secs(1), "nothing hung: {:?}", t.elapsed());
    let after = heartbeats(&site);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(heartbeats(&site), after, "no round after the shutdown");
}

/// The loops are tasks of the core's one task set (issue 37: no second
/// set the stop forgets): a drain of the core waits for them, and finds
/// none left once they are shut down.
#[tokio::test]
async fn the_loops_are_in_the_task_set_a_stop_drains() {
    let site = FakeSite::start(&["h1"], "heartbeat_interval = \"1s\"\n").await;
    let loops = Loops::start(&site.veem);
    let running = site.veem.core.drain_tasks(Duration::from_millis(100)).await;
    assert!(running >= 7, "every loop is one of the core's tasks: {running} running");
    loops.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        site.veem.core.drain_tasks(Duration::from_secs(1)).await,
        0,
        "none left after the shutdown"
    );
}

/// A whole day of a site on the virtual clock (issue 37): two services
/// deployed hours apart, checkpoints every hour, a host that fails in the
/// afternoon and its VEE restored from its checkpoint on another host, the
/// open-ended windows renewed, all through the real loops and workflows
/// over the in-memory ports. The runtime's clock is paused, so it jumps to
/// the next timer whenever every task waits: the day passes in seconds.
#[tokio::test(start_paused = true)]
async fn a_day_of_a_site_passes_on_the_virtual_clock() {
    use crate::model::{CheckpointRec, VeeState};
    use crate::ports::Clock;
    use crate::store::Tree;
    const HOUR: Duration = Duration::from_secs(3600);
    let wall = Instant::now();
    // Every checkpoint of the day kept, to count them.
    let site = FakeSite::start(
        &["h1", "h2"],
        "heartbeat_interval = \"10s\"\nheartbeat_miss_limit = 3\ncheckpoints_kept = 100\n",
    )
    .await;
    site.clock.follow_runtime();
    let start_ms = site.clock.now_ms();
    site.repo.blobs.lock().unwrap().insert(format!("sha256:{}", "5".repeat(64)));
    let hourly = crate::sim::STANDARD.replace("penalty_per_hour", "checkpoint_interval = \"1h\"\npenalty_per_hour");
    let provider = crate::config::Role::Provider("acme".into());
    let loops = Loops::start(&site.veem);

    let first = site.veem.deploy.deploy(&provider, &hourly).await.unwrap().vees.remove(0);
    tokio::time::sleep(2 * HOUR).await;
    let second = site.veem.deploy.deploy(&provider, &hourly).await.unwrap().vees.remove(0);
    tokio::time::sleep(4 * HOUR).await;
    for id in [&first, &second] {
        assert_eq!(site.veem.core.vee(id).unwrap().state, VeeState::Running, "{id}");
    }
    let on_h1 = [&first, &second]
        .into_iter()
        .find(|id| site.veem.core.vee(id).unwrap().host() == Some("h1"))
        .expect("packing puts a VEE on h1")
        .clone();
    // h1 stops answering in the afternoon.
    site.host("h1").fail("HostInfo", tonic::Code::Unavailable, "host down");
    tokio::time::sleep(18 * HOUR).await;

    assert!(
        site.clock.now_ms() - start_ms >= 24 * 3600 * 1000,
        "a day passed on the VEEM's clock"
    );
    assert_eq!(site.veem.core.hosts.health("h1"), crate::domain::Health::Failed);
    let moved = site.veem.core.vee(&on_h1).unwrap();
    assert_eq!(
        (moved.state, moved.host()),
        (VeeState::Running, Some("h2")),
        "{on_h1} recovered on h2"
    );
    assert!(
        site.host("h2").calls().iter().any(|c| c.starts_with(&format!("restore {on_h1} "))),
        "restored from its checkpoint, not rebooted"
    );
    let checkpoints: Vec<CheckpointRec> = site.veem.core.store.list(Tree::Checkpoints).unwrap();
    for (id, hours) in [(&first, 24), (&second, 22)] {
        let n = checkpoints.iter().filter(|c| &c.vee_id == id).count();
        assert!((hours - 2..=hours + 1).contains(&n), "{id}: {n} checkpoints in {hours} hours");
    }
    loops.shutdown(Duration::from_secs(5)).await;
    eprintln!("a day of a site took {:?} of wall time", wall.elapsed());
}

/// Retention by age and by count: a round of the loop leaves none older
/// than `max_age` and at most `keep`, the newest.
#[tokio::test]
async fn the_retention_round_leaves_at_most_keep_events_none_older_than_max_age() {
    use crate::ports::Clock;
    let site = FakeSite::start(&["h1"], "[events]\nkeep = 50\nmax_age = \"1h\"\nprune_interval = \"1s\"\n").await;
    for i in 0..30 {
        site.veem.core.event("v", "s", "old", format!("old {i}"));
    }
    site.clock.advance_ms(2 * 3600 * 1000);
    for i in 0..20 {
        site.veem.core.event("v", "s", "new", format!("new {i}"));
    }
    let loops = Loops::start(&site.veem);
    eventually("the old events pruned", || site.veem.core.store.event_count().unwrap() == 20).await;
    let cut = site.clock.now_ms() - 3600 * 1000;
    assert!(site
        .veem
        .core
        .store
        .events()
        .unwrap()
        .iter()
        .all(|e| e.at_ms >= cut && e.kind == "new"));
    for i in 20..120 {
        site.veem.core.event("v", "s", "new", format!("new {i}"));
    }
    eventually("pruned to `keep`", || site.veem.core.store.event_count().unwrap() == 50).await;
    let all = site.veem.core.store.events().unwrap();
    assert_eq!(
        (all[0].detail.as_str(), all[49].detail.as_str()),
        ("new 70", "new 119"),
        "the newest kept"
    );
    loops.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn paced_heartbeats_ask_the_hosts_in_turn_and_a_silent_one_fails_after_its_own_misses() {
    let site = FakeSite::start(
        &["h1", "h2", "h3"],
        "heartbeat_interval = \"1s\"\nmax_heartbeats_per_second = 1\nheartbeat_miss_limit = 2\n",
    )
    .await;
    assert_eq!(super::pacing(&site.veem).host_period, Duration::from_secs(3));
    let asked = |h: &str| site.host(h).calls().iter().filter(|c| c.starts_with("host_info")).count();
    let mut cursor = 0;
    for round in 1..=3 {
        super::heartbeat_turn(&site.veem, &mut cursor).await;
        let counts: Vec<usize> = ["h1", "h2", "h3"].iter().map(|h| asked(h)).collect();
        assert_eq!(counts.iter().sum::<usize>(), round, "one host a round: {counts:?}");
    }
    assert_eq!([asked("h1"), asked("h2"), asked("h3")], [1, 1, 1]);
    site.host("h2").fail("HostInfo", tonic::Code::Unavailable, "host down");
    // Its turns come every third round: missed once, then twice: failed.
    for _ in 0..3 {
        super::heartbeat_turn(&site.veem, &mut cursor).await;
    }
    assert_eq!(site.veem.core.hosts.health("h2"), crate::domain::Health::Missing(1));
    for _ in 0..3 {
        super::heartbeat_turn(&site.veem, &mut cursor).await;
    }
    assert_eq!(site.veem.core.hosts.health("h2"), crate::domain::Health::Failed);
    assert_eq!(site.veem.core.hosts.health("h1"), crate::domain::Health::Up);
}
