//! VEE actions against fake VEEHs: what a host refuses changes no state,
//! and a failed checkpoint leaves the VEE running with its previous
//! checkpoint.

use crate::domain::Action;
use tonic::Code;

use crate::model::VeeState;
use crate::sim::{FakeSite, STANDARD};

async fn one_running_vee() -> (FakeSite, String, String) {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    (site, vee, "h1".into())
}

#[tokio::test]
async fn suspend_and_resume_go_to_the_host_and_change_the_state() {
    let (site, vee, host) = one_running_vee().await;
    let v = site.veem.lifecycle.vee_action(&vee, Action::Suspend, "").await.unwrap();
    assert_eq!(v.state, VeeState::Suspended);
    let v = site.veem.lifecycle.vee_action(&vee, Action::Resume, "").await.unwrap();
    assert_eq!(v.state, VeeState::Running);
    assert_eq!(site.host(&host).calls(), [format!("suspend {vee}"), format!("resume {vee}")]);
}

#[tokio::test]
async fn a_suspend_the_host_refuses_changes_nothing() {
    let (site, vee, host) = one_running_vee().await;
    site.host(&host).fail("Suspend", Code::FailedPrecondition, "domain is not running");
    let before = site.events(&vee).len();
    let e = site.veem.lifecycle.vee_action(&vee, Action::Suspend, "").await.unwrap_err();
    assert!(format!("{e:#}").contains("domain is not running"), "{e:#}");
    assert_eq!(
        crate::api::status::status(e).code(),
        Code::FailedPrecondition,
        "the host's refusal is the site's"
    );
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Running);
    assert_eq!(site.events(&vee).len(), before, "no state event");

    // A host that does not answer is not a refusal: another moment.
    site.host(&host).fail("Suspend", Code::Unavailable, "connection refused");
    let e = site.veem.lifecycle.vee_action(&vee, Action::Suspend, "").await.unwrap_err();
    let status = crate::api::status::status(e);
    assert_eq!(status.code(), Code::Unavailable, "{}", status.message());
    assert!(
        status.message().contains(&format!("suspend of {vee} on {host}")),
        "{}",
        status.message()
    );
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Running);
}

/// What a host answers is quoted in the event and the error, bounded
/// (issue 36): a host that says 1 MiB does not make a 1 MiB event.
#[tokio::test]
async fn a_hosts_huge_refusal_is_quoted_by_a_bounded_excerpt() {
    let (site, vee, host) = one_running_vee().await;
    site.host(&host).fail("Checkpoint", Code::Internal, &"disk full ".repeat(100_000));
    let e = site.veem.lifecycle.vee_action(&vee, Action::Checkpoint, "").await.unwrap_err();
    let status = crate::api::status::status(e);
    assert!(status.message().contains("disk full"), "{}", &status.message()[..200]);
    assert!(
        status.message().len() <= interfaces::excerpt::MESSAGE_BYTES,
        "{}",
        status.message().len()
    );
    let events = site.events(&vee);
    let last = events.last().unwrap();
    assert!(last.contains("disk full"), "{events:?}");
    assert!(
        events.iter().all(|e| e.len() <= interfaces::excerpt::MESSAGE_BYTES + 40),
        "{}",
        last.len()
    );
}

#[tokio::test]
async fn a_checkpoint_is_recorded_and_its_blobs_pinned() {
    let (site, vee, _) = one_running_vee().await;
    let cp = site.veem.lifecycle.checkpoint_vee(&vee).await.unwrap();
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.latest_checkpoint.as_deref()), (VeeState::Running, Some(cp.id.as_str())));
    assert_eq!(site.repo.pins.lock().unwrap().len(), 2, "memory and disk blobs");
}

#[tokio::test]
async fn checkpoints_beyond_the_kept_ones_are_forgotten_and_their_blobs_unpinned() {
    let (site, vee, _) = one_running_vee().await;
    let mut taken = Vec::new();
    for _ in 0..4 {
        taken.push(site.veem.lifecycle.checkpoint_vee(&vee).await.unwrap().id);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let kept: std::collections::BTreeSet<String> = site
        .veem
        .core
        .store
        .list::<crate::model::CheckpointRec>(crate::store::Tree::Checkpoints)
        .unwrap()
        .into_iter()
        .filter(|c| c.vee_id == vee)
        .map(|c| c.id)
        .collect();
    // checkpoints_kept = 3 (the default): the first one is forgotten.
    assert_eq!(kept, taken[1..].iter().cloned().collect());
    let pins = site.repo.pins.lock().unwrap().clone();
    assert_eq!(pins.len(), 6, "memory and disk blobs of three checkpoints: {pins:?}");
    assert!(pins.iter().all(|p| !p.ends_with(&taken[0])), "{pins:?}");
    // Its OCI artifact went first (its blobs linked there would stay).
    let calls = site.repo.shares.lock().unwrap().clone();
    let forgotten: Vec<&String> = calls.iter().filter(|c| c.starts_with("forget site-a ")).collect();
    assert!(forgotten.contains(&&format!("forget site-a {}", taken[0])), "{calls:?}");
    assert!(
        taken[1..].iter().all(|t| !forgotten.iter().any(|f| f.ends_with(t.as_str()))),
        "{calls:?}"
    );
    assert_eq!(
        site.veem.core.vee(&vee).unwrap().latest_checkpoint.as_deref(),
        Some(taken[3].as_str())
    );
}

#[tokio::test]
async fn a_failed_checkpoint_leaves_the_vee_running_with_its_previous_checkpoint() {
    let (site, vee, host) = one_running_vee().await;
    let previous = site.veem.core.vee(&vee).unwrap().latest_checkpoint;
    site.host(&host).fail("Checkpoint", Code::Internal, "snapshot: disk full");
    let e = site.veem.lifecycle.checkpoint_vee(&vee).await.unwrap_err();
    assert!(e.to_string().contains("disk full"), "{e}");
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.latest_checkpoint), (VeeState::Running, previous));
    assert!(site
        .events(&vee)
        .iter()
        .any(|e| e.contains("checkpointing -> running: checkpoint failed")));
}

#[tokio::test]
async fn the_scheduler_checkpoints_a_vee_once_its_period_has_passed_and_not_before() {
    use crate::ports::Clock;
    let (site, vee, host) = one_running_vee().await;
    let mut v = site.veem.core.vee(&vee).unwrap();
    v.checkpoint_interval_s = Some(60);
    v.last_checkpoint_ms = Some(site.clock.now_ms());
    site.veem.core.save_vee(&v).unwrap();
    site.clock.advance_ms(59_000);
    site.veem.lifecycle.scheduler_round();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(site.host(&host).calls().is_empty(), "59 s: not due yet");
    site.clock.advance_ms(1_000);
    site.veem.lifecycle.scheduler_round();
    crate::sim::eventually("checkpointed", || site.veem.core.vee(&vee).unwrap().latest_checkpoint.is_some()).await;
    assert_eq!(site.host(&host).calls(), [format!("checkpoint {vee}")]);
}

#[test]
fn the_checkpoint_cost_is_the_first_sample_then_a_moving_average() {
    use crate::workflows::lifecycle::{smoothed_cost, COST_SMOOTHING};
    assert_eq!(smoothed_cost(None, 3.0), 3.0);
    assert!((smoothed_cost(Some(3.0), 6.0) - (3.0 + COST_SMOOTHING * 3.0)).abs() < 1e-12);
    assert_eq!(smoothed_cost(Some(3.0), f64::NAN), 3.0 + COST_SMOOTHING * (0.001 - 3.0));
}

#[tokio::test]
async fn an_auto_interval_follows_the_measured_checkpoint_cost() {
    let site = FakeSite::start(&["h1"], "").await;
    // The checkpoint's cost is measured on the VEEM's clock.
    site.clock.follow_runtime();
    site.host("h1").script.lock().unwrap().checkpoint_ms = 300;
    let vee = site.running_service(STANDARD).remove(0);
    let v = site.veem.core.vee(&vee).unwrap();
    let m = interfaces::manifest::Manifest::from_toml(STANDARD).unwrap();
    let run = (v.window_end_unix - v.window_start_unix) as u64;
    let assumed = crate::domain::terms::checkpoint_interval(&m.sla, run, crate::domain::terms::DEFAULT_CHECKPOINT_COST_S);
    assert_eq!(v.checkpoint_interval_s, assumed, "before any: the default cost");
    site.veem.lifecycle.checkpoint_vee(&vee).await.unwrap();
    let v = site.veem.core.vee(&vee).unwrap();
    let cost = v.checkpoint_cost_s.unwrap();
    assert!((0.3..1.0).contains(&cost), "measured {cost} s");
    let measured = crate::domain::terms::checkpoint_interval(&m.sla, run, cost);
    assert_eq!(v.checkpoint_interval_s, measured);
    assert!(
        measured.unwrap() < assumed.unwrap(),
        "cheaper checkpoints, more often: {measured:?} < {assumed:?}"
    );
    assert!(
        site.events(&vee)
            .iter()
            .any(|e| e.starts_with("checkpoint-interval: ") && e.contains("measured cost")),
        "{:?}",
        site.events(&vee)
    );
}

#[tokio::test]
async fn undeploy_stops_every_vee_of_the_service_and_releases_its_reservations_only() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    let gone = site.running_service(STANDARD).remove(0);
    let kept = site.running_service(STANDARD).remove(0);
    let service = site.veem.core.vee(&gone).unwrap().service_id;
    let host = site.veem.core.vee(&gone).unwrap().host().unwrap().to_string();
    let used = |site: &FakeSite| {
        let (planner, now) = (site.veem.core.planner(), site.veem.core.now_slot());
        planner.host_usage("h1", now).unwrap().vcpus + planner.host_usage("h2", now).unwrap().vcpus
    };
    let before = used(&site);

    site.veem.lifecycle.undeploy(&service).await.unwrap();
    assert_eq!(site.veem.core.vee(&gone).unwrap().state, VeeState::Terminated);
    assert!(
        site.host(&host).calls().contains(&format!("destroy {gone}")),
        "{:?}",
        site.host(&host).calls()
    );
    assert!(!site.host(&host).runs(&gone));
    assert_eq!(used(&site), before - 1, "its reservation released, the other's kept");
    assert_eq!(site.veem.core.vee(&kept).unwrap().state, VeeState::Running);

    // Again: nothing left to stop, no call to a host.
    let calls = site.host(&host).calls().len();
    site.veem.lifecycle.undeploy(&service).await.unwrap();
    assert_eq!(site.host(&host).calls().len(), calls);
}

#[tokio::test]
async fn an_undeploy_a_host_refuses_names_the_vee_left_running() {
    let (site, vee, host) = one_running_vee().await;
    let service = site.veem.core.vee(&vee).unwrap().service_id;
    site.host(&host).fail("Destroy", Code::Unavailable, "libvirtd is gone");
    let e = format!("{:#}", site.veem.lifecycle.undeploy(&service).await.unwrap_err());
    assert!(
        e.contains(&format!("1 of 1 VEEs not stopped: VEE {vee}")) && e.contains("libvirtd is gone"),
        "{e}"
    );
    assert_ne!(site.veem.core.vee(&vee).unwrap().state, VeeState::Terminated);
}

#[tokio::test]
async fn stopping_a_vee_whose_domain_is_gone_says_so() {
    let (site, vee, host) = one_running_vee().await;
    site.host(&host).fail("Shutdown", Code::NotFound, "no domain vee-x");
    site.veem.lifecycle.vee_action(&vee, Action::Stop, "").await.unwrap();
    let events = site.events(&vee);
    assert!(events.iter().any(|e| e.contains("its domain was already gone")), "{events:?}");
    assert!(!events.iter().any(|e| e.contains("shutdown failed")), "{events:?}");
}
