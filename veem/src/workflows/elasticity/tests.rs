//! Elasticity rules applied by the VEEM against fake VEEHs, on the site's
//! clock moved by the test and metrics recorded as metering records them:
//! a busy component grows after `for`, shrinks after the cooldown when
//! idle, and a scale-out the planner refuses is an event that waits out
//! the cooldown.

use std::collections::BTreeMap;

use crate::config::Role;
use crate::model::VeeState;
use crate::sim::{eventually, FakeSite, STANDARD};

const IMAGE: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";

/// STANDARD's `vm` as `web` (one instance, one per host) with a CPU rule
/// between 1 and `max`.
fn elastic(max: u32) -> String {
    STANDARD.replace("name = \"vm\"", "name = \"web\"")
        + "[[constraint]]\nkind = \"anti-affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"web\"]\n"
        + &format!(
            "[[elasticity]]\ncomponent = \"web\"\nmin = 1\nmax = {max}\nmetric = \"cpu_utilization\"\n\
             scale_out_above = 0.7\nscale_in_below = 0.2\nfor = \"30s\"\ncooldown = \"60s\"\n"
        )
}

/// Every live instance of `service` measured at `cpu` now.
fn measure(site: &FakeSite, service: &str, cpu: f64) {
    let now = site.clock.now_ms();
    for v in site
        .veem
        .core
        .vees_where(|v| v.service_id == service && v.state != VeeState::Terminated)
    {
        let values: BTreeMap<String, f64> = [("cpu_utilization".to_string(), cpu)].into();
        site.veem.accounting.samples.record(&v.id, now, values);
    }
}

fn live(site: &FakeSite, service: &str) -> usize {
    site.veem
        .core
        .vees_where(|v| v.service_id == service && v.state != VeeState::Terminated)
        .len()
}

/// The service's events of `kind`.
fn events(site: &FakeSite, service: &str, kind: &str) -> Vec<String> {
    let all = site.veem.core.store.events().unwrap();
    all.into_iter()
        .filter(|e| e.service_id == service && e.kind == kind)
        .map(|e| e.detail)
        .collect()
}

/// `n` rounds 10 s apart at `cpu`.
async fn rounds(site: &FakeSite, service: &str, cpu: f64, n: usize) {
    for _ in 0..n {
        site.clock.advance_ms(10_000);
        measure(site, service, cpu);
        site.veem.elasticity.round().await;
    }
}

use crate::ports::Clock as _;

#[tokio::test]
async fn a_busy_component_grows_after_for_and_shrinks_when_idle_after_the_cooldown() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    site.repo.blobs.lock().unwrap().insert(IMAGE.into());
    let svc = site.veem.deploy.deploy(&Role::Provider("acme".into()), &elastic(2)).await.unwrap();
    eventually("running", || site.veem.core.vee(&svc.vees[0]).unwrap().state == VeeState::Running).await;
    // Busy for 20 s: not yet (for = 30 s).
    rounds(&site, &svc.id, 0.9, 3).await;
    assert_eq!(live(&site, &svc.id), 1);
    rounds(&site, &svc.id, 0.9, 1).await;
    assert_eq!(live(&site, &svc.id), 2);
    let why = events(&site, &svc.id, "elasticity");
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].contains("rule elasticity[0]: web 1 -> 2: cpu_utilization 0.900 above 0.7 for 30s"),
        "{why:?}"
    );
    // At max: busy on, nothing more.
    rounds(&site, &svc.id, 0.9, 10).await;
    assert_eq!(live(&site, &svc.id), 2);
    // Idle: back to one after `for`, the new instance going.
    let second = site.veem.core.vees_where(|v| v.service_id == svc.id && v.instance == 1).remove(0);
    rounds(&site, &svc.id, 0.05, 4).await;
    assert_eq!(live(&site, &svc.id), 1);
    assert_eq!(site.veem.core.vee(&second.id).unwrap().state, VeeState::Terminated);
    assert_eq!(events(&site, &svc.id, "elasticity").len(), 2);
}

#[tokio::test]
async fn a_refused_scale_out_is_an_event_and_waits_out_the_cooldown() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    site.repo.blobs.lock().unwrap().insert(IMAGE.into());
    let svc = site.veem.deploy.deploy(&Role::Provider("acme".into()), &elastic(3)).await.unwrap();
    eventually("running", || site.veem.core.vee(&svc.vees[0]).unwrap().state == VeeState::Running).await;
    rounds(&site, &svc.id, 0.9, 4).await;
    assert_eq!(live(&site, &svc.id), 2);
    // A third needs a third host: refused, named, the count as it was.
    rounds(&site, &svc.id, 0.9, 6).await;
    assert_eq!(live(&site, &svc.id), 2);
    let refused = events(&site, &svc.id, "elasticity-refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("web 2 -> 3 refused") && refused[0].contains("no host can take it"),
        "{refused:?}"
    );
    // Asked again only after the cooldown (60 s).
    rounds(&site, &svc.id, 0.9, 6).await;
    assert_eq!(events(&site, &svc.id, "elasticity-refused").len(), 2);
}

/// Every live instance of `service` measured with `memory_used` `mib`.
fn measure_memory(site: &FakeSite, service: &str, mib: f64) {
    let now = site.clock.now_ms();
    for v in site
        .veem
        .core
        .vees_where(|v| v.service_id == service && v.state != VeeState::Terminated)
    {
        let values: BTreeMap<String, f64> = [("memory_used".to_string(), mib)].into();
        site.veem.accounting.samples.record(&v.id, now, values);
    }
}

#[tokio::test]
async fn a_resize_rule_grows_every_instance_a_step_at_a_time_up_to_its_max() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    site.repo.blobs.lock().unwrap().insert(IMAGE.into());
    let m = STANDARD.replace("disk_gib = 1\n", "disk_gib = 1\ninstances = 2\nmax_memory_mib = 1024\n")
        + "[[elasticity]]\ncomponent = \"vm\"\nresize = \"memory\"\nmin = 512\nmax = 1024\nstep = 256\n\
           metric = \"memory_used\"\nscale_out_above = 400\nscale_in_below = 100\nfor = \"20s\"\ncooldown = \"30s\"\n";
    let svc = site.veem.deploy.deploy(&Role::Provider("acme".into()), &m).await.unwrap();
    for id in &svc.vees {
        eventually("running", || site.veem.core.vee(id).unwrap().state == VeeState::Running).await;
    }
    let sizes = || -> Vec<u64> { svc.vees.iter().map(|id| site.veem.core.vee(id).unwrap().memory_mib).collect() };
    // 450 MiB used (above 400): after `for`, a step; after the cooldown,
    // another; then the max holds.
    let mut seen = vec![];
    for _ in 0..12 {
        site.clock.advance_ms(10_000);
        measure_memory(&site, &svc.id, 450.0);
        site.veem.elasticity.round().await;
        seen.push(sizes()[0]);
    }
    // Above since the first round: `for` (20 s) held at the third; the
    // cooldown (30 s) over at the sixth.
    assert_eq!(
        seen,
        [512, 512, 768, 768, 768, 1024, 1024, 1024, 1024, 1024, 1024, 1024],
        "{seen:?}"
    );
    assert_eq!(sizes(), [1024, 1024], "every instance");
    let r = site.veem.core.planner.lock().unwrap().reservation(&svc.vees[1]).unwrap().resources;
    assert_eq!(r.memory_mib, 1024, "admitted by the planner");
    let why = events(&site, &svc.id, "elasticity");
    assert_eq!(why.len(), 2, "{why:?}");
    assert!(
        why[0].starts_with("rule elasticity[0]: vm resized: instance 0 512 -> 768 MiB, instance 1 512 -> 768 MiB"),
        "{why:?}"
    );
    assert!(why[0].contains("memory_used 450.000 above 400 for 20s"), "{why:?}");
    // Idle: back down a step per cooldown to its min.
    for _ in 0..12 {
        site.clock.advance_ms(10_000);
        measure_memory(&site, &svc.id, 50.0);
        site.veem.elasticity.round().await;
    }
    assert_eq!(sizes(), [512, 512]);
}
