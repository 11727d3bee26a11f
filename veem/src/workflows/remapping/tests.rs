//! VRM applied by the VEEM, against fake VEEHs and a clock the tests move.

use crate::model::{Location, VeeState};
use crate::ports::Clock;
use crate::sim::{FakeSite, STANDARD};

/// A standard VEE of 3 vCPUs admitted (not started) on `h1`, its window
/// opening `ahead_s` from now for an hour.
fn future_vee_on_h1(site: &FakeSite, ahead_s: i64) -> String {
    let t = |s: i64| chrono::DateTime::from_timestamp(s, 0).unwrap().to_rfc3339();
    let now = site.clock.now();
    let m = STANDARD.replace("vcpus = 1", "vcpus = 3").replace(
        "penalty_per_hour = 36.0",
        &format!(
            "penalty_per_hour = 36.0\nwindow = {{ start = \"{}\", end = \"{}\" }}",
            t(now + ahead_s),
            t(now + ahead_s + 3600)
        ),
    );
    let vee = site.running_service(&m).remove(0);
    let mut v = site.veem.core.vee(&vee).unwrap();
    assert_eq!(v.location, Location::Host("h1".into()));
    v.state = VeeState::Admitted;
    site.veem.core.save_vee(&v).unwrap();
    site.host("h1").script.lock().unwrap().running.remove(&vee);
    vee
}

#[tokio::test]
async fn a_reservation_that_starts_during_the_outage_moves_when_it_enters_the_interval() {
    // One-minute slots; at the default η the interval is one slot.
    let site = FakeSite::start(&["h1", "h2"], "").await;
    crate::loops::heartbeat_round(&site.veem).await;
    let vee = future_vee_on_h1(&site, 300);
    site.veem.recovery.recover_host("h1").await.unwrap();
    assert_eq!(
        site.veem.core.vee(&vee).unwrap().location,
        Location::Host("h1".into()),
        "not yet: it starts in 5 slots"
    );
    // Recomputed each round: once its start is within the interval it moves.
    let mut moved_at = None;
    for minute in 1..=5 {
        site.clock.advance_ms(60_000);
        site.veem.remapping.remap_failed_host("h1").await.unwrap();
        if site.veem.core.vee(&vee).unwrap().location == Location::Host("h2".into()) {
            moved_at = Some(minute);
            break;
        }
    }
    assert!(matches!(moved_at, Some(3..=5)), "moved after {moved_at:?} minutes");
    assert_eq!(site.veem.core.planner().placement(&vee).unwrap().host, "h2");
    assert!(
        site.events(&vee)
            .iter()
            .any(|e| e.starts_with("remapped: its reservation moves from failed host h1 to h2")),
        "{:?}",
        site.events(&vee)
    );
    // The web console's timeline marks it, on its new host.
    assert_eq!(site.veem.remapping.moved_off().get(&vee).map(String::as_str), Some("h1"));
    let picture = crate::api::web::timeline(&site.veem);
    assert!(picture.contains("class=\"vee remapped\""), "{picture}");
    assert!(picture.contains("remapped off failed host h1"), "{picture}");
    assert!(
        picture.contains("class=\"blocked\""),
        "the failed host's blocked interval: {picture}"
    );
    // The failed host takes nothing new meanwhile, however far ahead.
    let later = crate::sim::STANDARD;
    let provider = crate::config::Role::Provider("acme".into());
    site.repo.blobs.lock().unwrap().insert(format!("sha256:{}", "5".repeat(64)));
    let svc = site.veem.deploy.deploy(&provider, later).await.unwrap();
    assert_eq!(site.veem.core.vee(&svc.vees[0]).unwrap().host(), Some("h2"));
}

#[tokio::test]
async fn eta_and_zeta_come_from_the_configuration() {
    // η = 0: every future reservation is in the interval at once.
    let site = FakeSite::start(&["h1", "h2"], "[recovery]\nremap_eta = 0.0\nremap_zeta = 3.0\n").await;
    crate::loops::heartbeat_round(&site.veem).await;
    assert_eq!(
        (site.veem.remapping.remap_params().eta, site.veem.remapping.remap_params().zeta),
        (0.0, 3.0)
    );
    let vee = future_vee_on_h1(&site, 1800);
    site.veem.recovery.recover_host("h1").await.unwrap();
    assert_eq!(site.veem.core.vee(&vee).unwrap().location, Location::Host("h2".into()));
    let e = crate::config::VeemConfig::parse(
        "site_id = \"a\"\nlisten = \"127.0.0.1:1\"\ndb = \"/tmp/x\"\nimage_repo = \"http://127.0.0.1:1\"\n[recovery]\nremap_zeta = 0.5\n",
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("field `recovery.remap_zeta`"), "{e:#}");
}
