//! SLA terms against fake VEEHs and a clock the tests move: each breach is
//! one violation with its interval and its penalty.

use super::*;
use crate::ports::Clock;
use crate::sim::{FakeSite, STANDARD};

/// 36 per hour: 0.01 per second.
fn manifest(extra_sla: &str) -> String {
    STANDARD.replace("penalty_per_hour = 36.0", &format!("penalty_per_hour = 36.0\n{extra_sla}"))
}

fn violations(site: &FakeSite, vee: &str) -> Vec<ViolationRec> {
    let all: Vec<ViolationRec> = site.veem.core.store.list(Tree::Violations).unwrap();
    all.into_iter().filter(|v| v.vee_id == vee).collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[tokio::test]
async fn a_migration_longer_than_max_downtime_is_a_violation_with_its_penalty() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    // The fake VEEHs report 40 ms of downtime.
    let tight = site.running_service(&manifest("max_downtime_ms = 30")).remove(0);
    let loose = site.running_service(&manifest("max_downtime_ms = 50")).remove(0);
    for vee in [&tight, &loose] {
        let to = if site.veem.core.vee(vee).unwrap().host() == Some("h1") {
            "h2"
        } else {
            "h1"
        };
        assert_eq!(site.migrate_to_host(vee, to).await.state, crate::model::MigrationState::Done);
    }
    let v = violations(&site, &tight);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].term.contains("took the VEE down for 40 ms, more than 30 ms"), "{}", v[0].term);
    assert!(close(v[0].penalty, 36.0 * 0.040 / 3600.0), "{}", v[0].penalty);
    assert!(violations(&site, &loose).is_empty());
    assert!(site.events(&tight).iter().any(|e| e.starts_with("sla-violation: max_downtime_ms")));
}

#[tokio::test]
async fn an_outage_beyond_max_outages_is_a_violation() {
    let site = FakeSite::start(&["h1", "h2", "h3"], "").await;
    crate::loops::heartbeat_round(&site.veem).await;
    let vee = site.running_service(&manifest("max_outages = 1")).remove(0);
    let first = site.veem.core.vee(&vee).unwrap().host().unwrap().to_string();
    site.veem.recovery.recover_host(&first).await.unwrap();
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.outages, v.down_since_ms), (VeeState::Running, 1, None));
    assert!(violations(&site, &vee).is_empty(), "the first outage is covered");
    let second = v.host().unwrap().to_string();
    site.veem.recovery.recover_host(&second).await.unwrap();
    let v = violations(&site, &vee);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].term.starts_with("max_outages: outage 2 of the VEE, more than the 1"),
        "{}",
        v[0].term
    );

    // Its penalty is the outage's length at the manifest's rate; a restore
    // that took longer than max_downtime_ms is charged too.
    let mut rec = site.veem.core.vee(&vee).unwrap();
    rec.max_downtime_ms = 1000;
    let out = site.veem.sla.outage_violations(&rec, (1_000_000, 1_090_000));
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out.iter().all(|o| close(o.penalty, 0.9)), "{out:?}");
    assert_eq!((out[0].start_unix, out[0].end_unix), (1000, 1090));
}

#[tokio::test]
async fn a_missed_checkpoint_is_one_violation_kept_current_until_one_is_taken() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(&manifest("checkpoint_interval = \"60s\"")).remove(0);
    let mut v = site.veem.core.vee(&vee).unwrap();
    v.last_checkpoint_ms = Some(site.clock.now_ms());
    site.veem.core.save_vee(&v).unwrap();
    let last = v.last_checkpoint_ms.unwrap();
    // Due after 60 s; missed by more than its interval after 120 s.
    site.clock.advance_ms(119_000);
    site.veem.sla.sla_round().unwrap();
    assert!(violations(&site, &vee).is_empty());
    site.clock.advance_ms(11_000);
    site.veem.sla.sla_round().unwrap();
    site.clock.advance_ms(60_000);
    site.veem.sla.sla_round().unwrap();
    let v = violations(&site, &vee);
    assert_eq!(v.len(), 1, "one violation per miss: {v:?}");
    assert_eq!((v[0].start_unix, v[0].end_unix), ((last + 60_000) / 1000, (last + 190_000) / 1000));
    assert!(close(v[0].penalty, 36.0 * 130.0 / 3600.0), "{}", v[0].penalty);
    assert!(v[0].term.contains("no checkpoint for 190 s"), "{}", v[0].term);
    let events = site.events(&vee);
    assert_eq!(events.iter().filter(|e| e.starts_with("sla-violation")).count(), 1, "{events:?}");
    // A checkpoint ends the miss.
    site.veem.lifecycle.checkpoint_vee(&vee).await.unwrap();
    site.clock.advance_ms(60_000);
    site.veem.sla.sla_round().unwrap();
    assert_eq!(violations(&site, &vee).len(), 1);
}

#[tokio::test]
async fn a_vee_that_never_starts_in_its_window_is_a_violation() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    let mut v = site.veem.core.vee(&vee).unwrap();
    v.state = VeeState::Deploying;
    v.window_start_unix = site.clock.now() - START_GRACE_S - 30;
    site.veem.core.save_vee(&v).unwrap();
    site.veem.sla.sla_round().unwrap();
    let viol = violations(&site, &vee);
    assert_eq!(viol.len(), 1, "{viol:?}");
    assert!(
        viol[0].term.starts_with("window: not running 150 s after its window opened"),
        "{}",
        viol[0].term
    );
    let late_ms = site.clock.now_ms() - v.window_start_unix * 1000;
    assert!(close(viol[0].penalty, 36.0 * late_ms as f64 / 3_600_000.0), "{}", viol[0].penalty);
}

#[test]
fn a_violations_term_is_named_by_its_identifier_or_other() {
    use super::term_name;
    assert_eq!(
        term_name("max_downtime_ms: migration m1 took the VEE down for 9 ms"),
        "max_downtime_ms"
    );
    assert_eq!(term_name("availability: lost and not recovered"), "availability");
    assert_eq!(term_name("a VEE's own words: {}"), "other");
    assert_eq!(term_name("no colon"), "other");
}
