//! A failed host's VEEs brought back side by side, on fake VEEHs whose
//! restores take a second of the paused runtime's virtual time: what a
//! user sees is when each VEE runs again (its `state` event), which host
//! ran how many restores at once, and the violations.

use std::time::Duration;

use crate::model::{VeeState, ViolationRec};
use crate::planner::Resources;
use crate::sim::{FakeSite, STANDARD};
use crate::store::Tree;

/// How long one restore takes on the destinations.
const RESTORE: Duration = Duration::from_secs(1);

/// A site whose host `h1` runs the VEEs (it is the fullest, so packing
/// places every VEE there) and destinations `dests` with room for all of
/// them, whose restores take [`RESTORE`]; the clock follows the runtime's.
async fn site(dests: &[&str], recovery: &str) -> FakeSite {
    let mut hosts = vec![("h1", Resources::new(16, 8192, 100))];
    hosts.extend(dests.iter().map(|d| (*d, Resources::new(16, 16384, 100))));
    let site = FakeSite::start_sized(&hosts, &format!("[recovery]\nbudget = \"10m\"\n{recovery}")).await;
    site.clock.follow_runtime();
    for d in dests {
        site.host(d).script.lock().unwrap().restore_ms = RESTORE.as_millis() as u64;
    }
    site
}

/// A running VEE of a one-VEE service of guarantee `level`, on `h1`
/// (`full` with `migration = "federation"`, as it must).
fn vee_of(site: &FakeSite, level: &str) -> String {
    let sla = match level {
        "full" => "guarantee = \"full\"\nmigration = \"federation\"".to_string(),
        _ => format!("guarantee = \"{level}\""),
    };
    let m = STANDARD.replace("guarantee = \"standard\"", &sla);
    let vee = site.running_service(&m).remove(0);
    assert_eq!(site.veem.core.vee(&vee).unwrap().host(), Some("h1"));
    vee
}

/// How long after its host's failure VEE `vee` ran again (its `state`
/// event to running, against the `host-failed` event).
fn back_after(site: &FakeSite, vee: &str) -> Duration {
    let events = site.veem.core.store.events().unwrap();
    let failed = events.iter().find(|e| e.kind == "host-failed").unwrap().at_ms;
    let running = events
        .iter()
        .rfind(|e| e.vee_id == vee && e.kind == "state" && e.detail.starts_with("recovering -> running"))
        .unwrap_or_else(|| panic!("{vee} never ran again: {:#?}", site.events(vee)))
        .at_ms;
    Duration::from_millis((running - failed) as u64)
}

fn violations(site: &FakeSite) -> Vec<ViolationRec> {
    site.veem.core.store.list(Tree::Violations).unwrap()
}

/// When each restore on `host` started, from `t0`, and of which VEE.
fn starts(site: &FakeSite, host: &str, t0: tokio::time::Instant) -> Vec<(Duration, String)> {
    let s = site.host(host).script.lock().unwrap();
    s.restore_starts.iter().map(|(t, v)| (*t - t0, v.clone())).collect()
}

#[tokio::test(start_paused = true)]
async fn ten_vees_of_a_failed_host_are_back_in_about_the_time_of_one_restore() {
    let site = site(&["d1"], "parallel_per_host = 10\n").await;
    let vees: Vec<String> = (0..10).map(|_| vee_of(&site, "standard")).collect();

    let t0 = tokio::time::Instant::now();
    site.veem.recovery.recover_host("h1").await.unwrap();
    let took = t0.elapsed();

    for v in &vees {
        let rec = site.veem.core.vee(v).unwrap();
        assert_eq!((rec.state, rec.host()), (VeeState::Running, Some("d1")), "{:#?}", site.events(v));
        let back = back_after(&site, v);
        assert!(back < 2 * RESTORE, "{v} ran again after {back:?}, one restore takes {RESTORE:?}");
    }
    assert!(took < 2 * RESTORE, "ten restores of {RESTORE:?} each took {took:?}");
    assert_eq!(site.host("d1").script.lock().unwrap().max_restores_in_flight, 10);
    assert!(violations(&site).is_empty(), "{:?}", violations(&site));
}

#[tokio::test(start_paused = true)]
async fn a_destination_never_runs_more_restores_at_once_than_parallel_per_host() {
    let site = site(&["d1"], "parallel_per_host = 3\n").await;
    let vees: Vec<String> = (0..10).map(|_| vee_of(&site, "standard")).collect();

    let t0 = tokio::time::Instant::now();
    site.veem.recovery.recover_host("h1").await.unwrap();
    let took = t0.elapsed();

    for v in &vees {
        assert_eq!(site.veem.core.vee(v).unwrap().state, VeeState::Running, "{:#?}", site.events(v));
    }
    assert_eq!(
        site.host("d1").script.lock().unwrap().max_restores_in_flight,
        3,
        "at most parallel_per_host at once, and as many as that"
    );
    // Ten restores, three at a time: four rounds.
    assert!(took >= 4 * RESTORE && took < 5 * RESTORE, "{took:?}");
    let mut rounds: Vec<u64> = starts(&site, "d1", t0).iter().map(|(t, _)| t.as_secs()).collect();
    rounds.dedup();
    assert_eq!(rounds, [0, 1, 2, 3], "{:?}", starts(&site, "d1", t0));
}

#[tokio::test(start_paused = true)]
async fn without_parallel_per_host_a_destination_runs_half_its_vcpus_at_once() {
    let site = site(&["d1"], "").await;
    let vees: Vec<String> = (0..10).map(|_| vee_of(&site, "standard")).collect();
    site.host("d1").script.lock().unwrap().vcpus = Some(8);
    crate::loops::heartbeat_round(&site.veem).await;

    site.veem.recovery.recover_host("h1").await.unwrap();
    for v in &vees {
        assert_eq!(site.veem.core.vee(v).unwrap().state, VeeState::Running, "{:#?}", site.events(v));
    }
    assert_eq!(
        site.host("d1").script.lock().unwrap().max_restores_in_flight,
        4,
        "8 vCPUs: 4 at once"
    );
}

#[tokio::test(start_paused = true)]
async fn queued_restores_start_full_first_then_enhanced_then_the_rest() {
    let site = site(&["d1"], "parallel_per_host = 2\n").await;
    let mut level_of = std::collections::HashMap::new();
    for level in ["standard", "legacy", "enhanced", "full", "standard", "enhanced", "full", "standard"] {
        level_of.insert(vee_of(&site, level), level);
    }

    let t0 = tokio::time::Instant::now();
    site.veem.recovery.recover_host("h1").await.unwrap();

    let starts = starts(&site, "d1", t0);
    assert_eq!(starts.len(), 8, "{starts:?}");
    let seen: Vec<(u64, &str)> = starts.iter().map(|(t, v)| (t.as_secs(), level_of[v])).collect();
    // Two at a time, from the moment of the failure: the two full VEEs,
    // then the two enhanced ones (on their spares' host), then the rest.
    assert_eq!(&seen[..4], [(0, "full"), (0, "full"), (1, "enhanced"), (1, "enhanced")], "{seen:?}");
    assert!(
        seen[4..].iter().all(|(t, level)| *t >= 2 && !["full", "enhanced"].contains(level)),
        "{seen:?}"
    );
    for v in level_of.keys() {
        assert_eq!(site.veem.core.vee(v).unwrap().state, VeeState::Running, "{:#?}", site.events(v));
    }
}

#[tokio::test(start_paused = true)]
async fn a_vee_that_cannot_be_restored_is_written_off_while_the_others_come_back() {
    let site = site(&["d1", "d2"], "parallel_per_host = 4\nattempts_per_host = 2\nbackoff = \"5s\"\n").await;
    let vees: Vec<String> = (0..6).map(|_| vee_of(&site, "standard")).collect();
    // The planner's first: sequentially, everyone would wait for its four
    // failed attempts and their backoffs.
    let bad = {
        let mut p = site.veem.core.planner.lock().unwrap().clone();
        let now = site.veem.core.now_slot();
        p.set_host_down("h1", now, 1).unwrap();
        p.recover_host("h1", now).unwrap().steps[0].vee.clone()
    };
    for d in ["d1", "d2"] {
        site.host(d)
            .fail_for("Restore", &bad, tonic::Code::Unavailable, &format!("checkpoint unreadable on {d}"));
    }

    site.veem.recovery.recover_host("h1").await.unwrap();

    // Four places for six VEEs: two rounds of restores, the bad VEE's
    // place given back while it backs off (one after the other, they
    // would have waited for its four attempts and two backoffs: 14 s).
    for v in vees.iter().filter(|v| **v != bad) {
        assert_eq!(site.veem.core.vee(v).unwrap().state, VeeState::Running, "{:#?}", site.events(v));
        let back = back_after(&site, v);
        assert!(back <= 2 * RESTORE, "{v} ran again after {back:?}: it waited for {bad}");
    }
    assert_eq!(site.veem.core.vee(&bad).unwrap().state, VeeState::Failed);
    let viol = violations(&site);
    assert_eq!(viol.len(), 1, "{viol:?}");
    assert_eq!(viol[0].vee_id, bad);
    assert!(viol[0].penalty > 0.0, "{:?}", viol[0]);
    let term = &viol[0].term;
    assert!(term.starts_with("availability: host h1 failed"), "{term}");
    for n in 1..=4 {
        assert!(term.contains(&format!("{n}. d")), "attempt {n} in {term}");
    }
    assert!(term.contains("unreadable on d1") && term.contains("unreadable on d2"), "{term}");
}
