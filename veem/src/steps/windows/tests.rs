//! Windows after admission against fake VEEHs and a clock the tests move:
//! extension (kept or refused whole) and the renewal of open-ended
//! services.

use crate::ports::Clock;
use crate::sim::{FakeSite, STANDARD};

/// STANDARD with a window from `start` to `end` (Unix s); `vcpus` each.
fn windowed(start: i64, end: i64, vcpus: u32) -> String {
    let t = |s: i64| chrono::DateTime::from_timestamp(s, 0).unwrap().to_rfc3339();
    STANDARD
        .replace(
            "penalty_per_hour = 36.0",
            &format!(
                "penalty_per_hour = 36.0\nwindow = {{ start = \"{}\", end = \"{}\" }}",
                t(start),
                t(end)
            ),
        )
        .replace("vcpus = 1", &format!("vcpus = {vcpus}"))
}

#[tokio::test]
async fn an_extension_moves_the_end_of_every_vee_or_of_none() {
    let site = FakeSite::start(&["h1"], "").await;
    let now = site.clock.now();
    let vee = site.running_service(&windowed(now, now + 600, 3)).remove(0);
    let svc = site.veem.core.vee(&vee).unwrap().service_id;
    let end = site.veem.core.vee(&vee).unwrap().window_end_unix;
    // Kept: 10 minutes more.
    site.veem.windows.extend_window(&svc, end + 600).await.unwrap();
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!(v.window_end_unix, end + 600);
    let r = site.veem.core.planner().reservation(&vee).unwrap().clone();
    assert_eq!(
        site.veem.core.slots.start_of(r.range.end),
        end + 600 + 60,
        "and its padding after the window (5 s stop, 5 s checkpoint: one slot)"
    );
    // Another service holds the host from then on: refused, nothing moves.
    // (Its reservation starts a slot before its window, where the first's
    // padding ends.)
    site.running_service(&windowed(end + 720, end + 1200, 2));
    let e = site.veem.windows.extend_window(&svc, end + 1200).await.unwrap_err();
    assert!(format!("{e:#}").contains("cannot end at"), "{e:#}");
    assert_eq!(site.veem.core.vee(&vee).unwrap().window_end_unix, end + 600);
    assert_eq!(site.veem.core.planner().reservation(&vee).unwrap().range, r.range);
}

#[tokio::test]
async fn an_open_ended_service_is_renewed_before_half_its_horizon_is_gone() {
    let site = FakeSite::start(&["h1"], "planning_horizon = \"1h\"\n").await;
    crate::loops::heartbeat_round(&site.veem).await;
    let vee = site.running_service(STANDARD).remove(0);
    let v = site.veem.core.vee(&vee).unwrap();
    assert!(v.open_ended);
    let first_end = v.window_end_unix;
    assert!((first_end - site.clock.now() - 3600).abs() <= 60, "a horizon from now");
    assert!(site.veem.windows.renew_windows().await.is_empty(), "more than half is left");
    // 40 minutes on: less than half left, renewed to an hour from now.
    site.clock.advance_ms(40 * 60 * 1000);
    assert_eq!(site.veem.windows.renew_windows().await, std::slice::from_ref(&v.service_id));
    let end = site.veem.core.vee(&vee).unwrap().window_end_unix;
    assert!(
        end > first_end && (end - site.clock.now() - 3600).abs() <= 60,
        "{first_end} -> {end}"
    );
    // An explicit window is never renewed.
    let now = site.clock.now();
    let fixed = site.running_service(&windowed(now, now + 600, 1)).remove(0);
    let fixed_end = site.veem.core.vee(&fixed).unwrap().window_end_unix;
    site.clock.advance_ms(400 * 1000);
    site.veem.windows.renew_windows().await;
    assert!(!site.veem.core.vee(&fixed).unwrap().open_ended);
    assert_eq!(site.veem.core.vee(&fixed).unwrap().window_end_unix, fixed_end);
}

#[tokio::test]
async fn a_reservation_holds_its_host_for_the_vees_start_and_stop_and_it_is_deployed_ahead() {
    // 1-minute slots; init_overhead 30 s and stop_timeout 30 s by default.
    let site = FakeSite::start(&["h1"], "").await;
    let now = site.clock.now();
    let start = site.veem.core.slots.start_of(site.veem.core.now_slot() + 10);
    let vee = site.running_service(&windowed(start, start + 600, 3)).remove(0);
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!(
        (v.window_start_unix, v.window_end_unix),
        (start, start + 600),
        "the window as asked"
    );
    let r = site.veem.core.planner().reservation(&vee).unwrap().clone();
    assert_eq!(
        (
            site.veem.core.slots.start_of(r.range.start),
            site.veem.core.slots.start_of(r.range.end)
        ),
        (start - 60, start + 660),
        "a slot before (boot: 30 s) and after (stop and a checkpoint in progress: 35 s), H eq. 3.7"
    );
    // Deployed when its lead begins, so that it runs when its window opens.
    assert_eq!(v.init_lead_s, 60);
    assert!(!v.deploy_due(start - 61) && v.deploy_due(start - 60));
    assert!(now < start - 60);
    // Back to back with it on the only host: the next window starts only
    // once its stop and the next VEE's boot fit between them.
    let m = interfaces::manifest::Manifest::from_toml(&windowed(start + 600, start + 1200, 3)).unwrap();
    let req = site.veem.deploy.request(&m, "next");
    let offer = site.veem.core.planner.lock().unwrap().negotiate(&req);
    match offer {
        crate::planner::Admission::CounterOffer { window, .. } => {
            let w = req.service_window(window);
            assert_eq!(site.veem.core.slots.start_of(w.start), start + 600 + 60 + 60, "{w}");
        }
        other => panic!("a counter-offer, not {other:?}"),
    }
}
