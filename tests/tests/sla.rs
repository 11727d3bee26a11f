//! What the SLA promises, kept by the running VEEM (issue 14), on one site
//! of two real hosts with the tiny guest:
//! - background: a background VEE gives way to a standard one being
//!   recovered (its state saved, its domain gone) and comes back by itself
//!   when capacity returns, its counter going on from where it was;
//! - checkpoints: a VEE with a short checkpoint interval is checkpointed by
//!   the scheduler, again and again, with no call from anyone;
//! - windows: a VEE starts at its window's start and stops at its end; a
//!   manifest that only fits after it gets a counter-offer; a window is
//!   extended after admission;
//! - VRM: a reservation on a host that fails before it starts is remapped
//!   to another host (V Fig. 7) and starts there;
//! - the five guarantee levels side by side on one host failure (the
//!   docs/reliability.md's table).

use std::time::{Duration, Instant};

use e2e::daemons::{console, wait_tick, GuestIds, ImageRepo, Veeh};
use e2e::site::{self, host_of, manifest, Veem, ACME, OPERATOR};
use e2e::{guest, lab};
use interfaces::vmi::*;
use veeh::hypervisor::Hypervisor;

const BOOT: Duration = Duration::from_secs(180);

/// One site: two VEEHs on two libvirtds (2 vCPUs, 1024 MiB each) and a
/// VEEM over them.
struct Site {
    _repo: ImageRepo,
    ids: GuestIds,
    hosts: [Veeh; 2],
    veem: Veem,
}

impl Site {
    async fn new(name: &str, extra: &str) -> Self {
        let dir = lab::test_dir(name);
        let repo = ImageRepo::start(&dir).await;
        let ids = repo.push_guest(&guest::image()).await;
        let h1 = Veeh::start(&dir, "g1", "site-a", lab::SITE_A_URI, &repo).await;
        let h2 = Veeh::start(&dir, "g2", "site-a", lab::SITE_A2_URI, &repo).await;
        let port = site::port();
        let cfg = site::write_config(&dir, "site-a", port, &repo, &[&h1, &h2], &[], extra);
        let veem = Veem::start(&dir, "site-a", port, cfg).await;
        Self {
            _repo: repo,
            ids,
            hosts: [h1, h2],
            veem,
        }
    }

    /// Deploys one VEE of `guarantee` that fills a host (1024 MiB) and
    /// waits until its counter ticks: (its ID, the index of its host).
    async fn deploy_filling(&self, name: &str, guarantee: &str) -> (String, usize) {
        let mut acme = self.veem.client(ACME).await;
        let m = manifest(name, "acme", &self.ids, 1, "")
            .replace("guarantee = \"standard\"", &format!("guarantee = \"{guarantee}\""))
            .replace("memory_mib = 128", "memory_mib = 1024");
        let svc = site::deploy(&mut acme, m).await.unwrap();
        let vee = svc.vees[0].vee_id.clone();
        let info = self.veem.wait_vee(&vee, "running", BOOT, |i| i.state() == VeeState::Running).await;
        let at = self.index(&host_of(&info).unwrap());
        wait_tick(&mut self.hosts[at].client().await, &vee, 2, BOOT).await;
        (vee, at)
    }

    fn index(&self, host: &str) -> usize {
        self.hosts.iter().position(|h| h.host == host).unwrap()
    }

    /// The operator's view of `vee` once `pred` holds (`timeout` at most).
    async fn vee_when(&self, vee: &str, what: &str, timeout: Duration, pred: impl Fn(&VeeInfo) -> bool) -> VeeInfo {
        self.veem.wait_vee(vee, what, timeout, pred).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_displaced_background_vee_comes_back_when_capacity_returns() {
    let _lab = lab::lock();
    let mut s = Site::new("guarantee-background", "").await;
    let (std_vee, std_at) = s.deploy_filling("std", "standard").await;
    let mut acme = s.veem.client(ACME).await;
    site::vee_action(&mut acme, &std_vee, Action::Checkpoint).await.unwrap();
    let (bg, bg_at) = s.deploy_filling("batch", "background").await;
    assert_ne!(std_at, bg_at, "each fills a host");
    let other_uri = [lab::SITE_A_URI, lab::SITE_A2_URI][bg_at];

    // The standard VEE's host dies: it is restored on the other host, and
    // the background VEE there gives way, its state saved.
    s.hosts[std_at].daemon.kill();
    Hypervisor::open([lab::SITE_A_URI, lab::SITE_A2_URI][std_at], &s.hosts[std_at].host)
        .unwrap()
        .destroy(&std_vee)
        .unwrap();
    let other = &s.hosts[bg_at];
    let mut oc = other.client().await;
    let last_before = guest::last_tick(&console(&mut oc, &bg).await).unwrap().0;
    let displaced = s
        .vee_when(&bg, "displaced", Duration::from_secs(120), |i| {
            i.state() == VeeState::Suspended && i.location == "none"
        })
        .await;
    assert!(!displaced.latest_checkpoint.is_empty(), "its state is saved: {displaced:?}");
    s.vee_when(&std_vee, "restored on the other host", Duration::from_secs(120), |i| {
        i.state() == VeeState::Running && host_of(i).as_deref() == Some(other.host.as_str())
    })
    .await;
    let view = Hypervisor::open(other_uri, &other.host).unwrap();
    assert_eq!(view.state(&bg).unwrap(), None, "the displaced VEE's domain is gone");

    // Nothing brings it back while there is no room.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut op = s.veem.client(OPERATOR).await;
    let still = op.get_vee(GetVeeRequest { vee_id: bg.clone() }).await.unwrap().into_inner();
    assert_eq!(still.state(), VeeState::Suspended);

    // The standard VEE ends: the background VEE resumes by itself, from its
    // saved state, and charges no violation.
    let started = Instant::now();
    site::vee_action(&mut acme, &std_vee, Action::Stop).await.unwrap();
    s.vee_when(&bg, "resumed", Duration::from_secs(120), |i| {
        i.state() == VeeState::Running && host_of(i).as_deref() == Some(other.host.as_str())
    })
    .await;
    eprintln!("background VEE resumed {:.1} s after the stop", started.elapsed().as_secs_f64());
    wait_tick(&mut oc, &bg, 1, Duration::from_secs(60)).await;
    let first = guest::ticks(&console(&mut oc, &bg).await)[0];
    assert!(
        first > last_before,
        "resumed from its saved state: {last_before} before, {first} after"
    );
    let events = site::history(&mut op, &displaced.service_id).await;
    assert!(events.iter().any(|e| e.detail.contains("displaced to make room")), "{events:#?}");
    let usage = op
        .get_usage(GetUsageRequest {
            service_id: displaced.service_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(usage.violations.is_empty(), "{:?}", usage.violations);
    site::vee_action(&mut acme, &bg, Action::Stop).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_the_scheduler_checkpoints_a_vee_by_itself_each_interval() {
    let _lab = lab::lock();
    let s = Site::new("sla-checkpoints", "").await;
    let mut acme = s.veem.client(ACME).await;
    let m = manifest("periodic", "acme", &s.ids, 1, "checkpoint_interval = \"10s\"");
    let svc = site::deploy(&mut acme, m).await.unwrap();
    let vee = svc.vees[0].vee_id.clone();
    let info = s.vee_when(&vee, "running", BOOT, |i| i.state() == VeeState::Running).await;
    let at = s.index(&host_of(&info).unwrap());
    let mut c = s.hosts[at].client().await;
    let start = Instant::now();
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 3 {
        assert!(start.elapsed() < Duration::from_secs(120), "checkpoints so far: {seen:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let v = acme.get_vee(GetVeeRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
        if !v.latest_checkpoint.is_empty() {
            seen.insert(v.latest_checkpoint);
        }
    }
    eprintln!("3 scheduled checkpoints in {:.1} s", start.elapsed().as_secs_f64());
    let events = site::history(&mut acme, &svc.service_id).await;
    let taken = events.iter().filter(|e| e.vee_id == vee && e.kind == "checkpointed").count();
    assert!(taken >= 3, "{events:#?}");
    // The guest ran on throughout.
    let now = guest::last_tick(&console(&mut c, &vee).await).unwrap().0;
    wait_tick(&mut c, &vee, now + 2, Duration::from_secs(30)).await;
    site::vee_action(&mut acme, &vee, Action::Stop).await.unwrap();
}

/// RFC 3339 of Unix second `t`.
fn rfc3339(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0).unwrap().to_rfc3339()
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_window_starts_and_stops_its_vee_and_a_later_fit_is_a_counter_offer() {
    let _lab = lab::lock();
    // 2 s slots: the window's boundaries within 2 s. The VEE is deployed
    // its 4 s init overhead ahead of its window (H §3.4.1); a stop waits
    // 5 s for the guest.
    let s = Site::new("sla-window", "slot = \"2s\"\ninit_overhead = \"4s\"\nstop_timeout = \"5s\"\n").await;
    let mut acme = s.veem.client(ACME).await;
    let now = chrono::Utc::now().timestamp();
    let (start, end) = (now + 30, now + 75);
    let window = format!("window = {{ start = \"{}\", end = \"{}\" }}", rfc3339(start), rfc3339(end));
    let svc = site::deploy(&mut acme, manifest("windowed", "acme", &s.ids, 1, &window))
        .await
        .unwrap();
    let vee = svc.vees[0].vee_id.clone();

    // A manifest needing both hosts whole over the same time only fits
    // once the first window has ended: a counter-offer, not a refusal. Its
    // window starts once the first VEE's stop and checkpoint padding (5 s
    // and 5 s) and its own init overhead (4 s) fit between them (H eq. 3.7).
    let both = manifest("big", "acme", &s.ids, 2, &window).replace("memory_mib = 128", "memory_mib = 1024");
    let offer = site::negotiate(&mut acme, both).await;
    assert_eq!(offer.verdict(), Verdict::CounterOffer, "{offer:?}");
    assert!(
        interfaces::time::s_of(&offer.earliest_start) >= end + 12 && interfaces::time::s_of(&offer.earliest_start) <= end + 16,
        "the earliest start is 14 s after the first window's end ({end}): {offer:?}"
    );

    // Nothing runs before the start (less its init overhead).
    while chrono::Utc::now().timestamp() < start - 4 - 3 {
        let v = acme.get_vee(GetVeeRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
        assert_eq!(v.state(), VeeState::Admitted, "before its window");
        for h in &s.hosts {
            assert!(h.domains().await.is_empty(), "{} runs a domain before the window", h.host);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let info = s
        .vee_when(&vee, "running in its window", BOOT, |i| i.state() == VeeState::Running)
        .await;
    let began = chrono::Utc::now().timestamp();
    assert!(began >= start - 4 - 2, "started at {began}, window from {start}");
    let at = s.index(&host_of(&info).unwrap());
    wait_tick(&mut s.hosts[at].client().await, &vee, 1, BOOT).await;

    // Extended by 20 s after admission: it runs on past the first end.
    let extended = acme
        .extend_service(ExtendServiceRequest {
            service_id: svc.service_id.clone(),
            until: interfaces::time::timestamp_s(end + 20),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(extended.service_id, svc.service_id);
    while chrono::Utc::now().timestamp() < end + 5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Running on (its scheduled checkpoints come every few seconds over so
    // short a window: checkpointing is running too).
    let v = acme.get_vee(GetVeeRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
    assert!(
        matches!(v.state(), VeeState::Running | VeeState::Checkpointing),
        "extended past {end}: {:?}",
        v.state()
    );
    // And stops at the new end.
    s.vee_when(&vee, "stopped at its window's end", Duration::from_secs(60), |i| {
        matches!(i.state(), VeeState::Stopped | VeeState::Terminated)
    })
    .await;
    let stopped = chrono::Utc::now().timestamp();
    assert!(
        stopped >= end + 20 - 2 && stopped <= end + 20 + 15,
        "stopped at {stopped}, window to {}",
        end + 20
    );
    assert!(s.hosts[at].domains().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_reservation_on_a_failed_host_is_remapped_and_starts_elsewhere() {
    let _lab = lab::lock();
    let mut s = Site::new("sla-remap", "slot = \"2s\"\ninit_overhead = \"4s\"\n").await;
    let mut acme = s.veem.client(ACME).await;
    let now = chrono::Utc::now().timestamp();
    let start = now + 40;
    let window = format!("window = {{ start = \"{}\", end = \"{}\" }}", rfc3339(start), rfc3339(start + 600));
    let svc = site::deploy(&mut acme, manifest("later", "acme", &s.ids, 1, &window))
        .await
        .unwrap();
    let vee = svc.vees[0].vee_id.clone();
    let mut op = s.veem.client(OPERATOR).await;
    let planned = op.get_vee(GetVeeRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
    assert_eq!(planned.state(), VeeState::Admitted);
    let failed = s.index(&host_of(&planned).unwrap());
    let other = s.hosts[1 - failed].host.clone();

    // Its host dies before the window opens.
    s.hosts[failed].daemon.kill();
    let info = s
        .vee_when(&vee, "running on the other host", BOOT, |i| {
            i.state() == VeeState::Running && host_of(i).as_deref() == Some(other.as_str())
        })
        .await;
    let began = chrono::Utc::now().timestamp();
    assert!(
        began >= start - 4 - 2,
        "started at {began}, window from {start} less its init overhead"
    );
    wait_tick(&mut s.hosts[1 - failed].client().await, &vee, 1, BOOT).await;
    let events = site::history(&mut op, &svc.service_id).await;
    assert!(
        events.iter().any(|e| e.kind == "remapped" && e.detail.contains(&other)),
        "{events:#?}"
    );
    assert!(info.latest_checkpoint.is_empty());
    site::vee_action(&mut acme, &vee, Action::Stop).await.unwrap();
}

/// Deploys `name` (one VEE of `memory_mib`, guarantee `level`) as acme at
/// `veem`; returns its service and VEE once it runs (and ticks, on `hosts`).
async fn one_of(veem: &Veem, ids: &GuestIds, name: &str, level: &str, memory_mib: u64) -> (String, String) {
    let mut acme = veem.client(ACME).await;
    let m = manifest(name, "acme", ids, 1, "")
        .replace("guarantee = \"standard\"", &format!("guarantee = \"{level}\""))
        .replace("memory_mib = 128", &format!("memory_mib = {memory_mib}"));
    let svc = site::deploy(&mut acme, m)
        .await
        .unwrap_or_else(|e| panic!("{name}: {}", e.message()));
    let vee = svc.vees[0].vee_id.clone();
    veem.wait_vee(&vee, &format!("{name} running"), BOOT, |i| i.state() == VeeState::Running)
        .await;
    (svc.service_id, vee)
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_each_guarantee_level_keeps_its_promise_when_a_host_fails() {
    let _lab = lab::lock();
    // Site A: two hosts of 8 vCPUs and 1024 MiB (memory decides); site B
    // with one host holds full's spare.
    let dir = lab::test_dir("sla-levels");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let g1 = Veeh::start_sized(&dir, "l1", "site-a", lab::SITE_A_URI, &repo, (8, 1024)).await;
    let g2 = Veeh::start_sized(&dir, "l2", "site-a", lab::SITE_A2_URI, &repo, (8, 1024)).await;
    let b1 = Veeh::start(&dir, "lb1", "site-b", lab::SITE_B_URI, &repo).await;
    let (pa, pb) = (site::port(), site::port());
    let (to_b, to_a) = site::peer_links(pa, pb, false);
    let ca = site::write_config(&dir, "site-a", pa, &repo, &[&g1, &g2], &[to_b], "");
    let cb = site::write_config(&dir, "site-b", pb, &repo, &[&b1], &[to_a], "");
    let a = Veem::start(&dir, "site-a", pa, ca).await;
    let _b = Veem::start(&dir, "site-b", pb, cb).await;
    let mut hosts = [g1, g2];

    // Packing fills one host X with full, standard, legacy and enhanced
    // (1024 MiB); enhanced's spare, a filler and the background VEE fill
    // the other, Y. After X fails Y has room for standard only by
    // displacing the background VEE, none for legacy, and full (384 MiB)
    // cannot fit even so: it goes to its spare at B.
    let mut acme = a.client(ACME).await;
    let mut op = a.client(OPERATOR).await;
    let full = one_of(&a, &ids, "full", "full", 384).await;
    let standard = one_of(&a, &ids, "standard", "standard", 256).await;
    let legacy = one_of(&a, &ids, "legacy", "legacy", 256).await;
    let enhanced = one_of(&a, &ids, "enhanced", "enhanced", 128).await;
    let _filler = one_of(&a, &ids, "filler", "standard", 640).await;
    let background = one_of(&a, &ids, "background", "background", 256).await;
    let where_ = |i: &VeeInfo| host_of(i).unwrap_or_else(|| i.location.clone());
    let at = |vee: &str| {
        let vee = vee.to_string();
        let mut op = op.clone();
        async move { op.get_vee(GetVeeRequest { vee_id: vee }).await.unwrap().into_inner() }
    };
    let x = where_(&at(&full.1).await);
    for (name, vee) in [("standard", &standard.1), ("legacy", &legacy.1), ("enhanced", &enhanced.1)] {
        assert_eq!(where_(&at(vee).await), x, "{name} shares full's host");
    }
    let xi = hosts.iter().position(|h| h.host == x).unwrap();
    let y = hosts[1 - xi].host.clone();
    assert_eq!(where_(&at(&background.1).await), y);
    for vee in [&full.1, &standard.1, &enhanced.1] {
        site::vee_action(&mut acme, vee, Action::Checkpoint).await.unwrap();
    }

    // X dies.
    let failed_at = Instant::now();
    hosts[xi].daemon.kill();
    let view = Hypervisor::open([lab::SITE_A_URI, lab::SITE_A2_URI][xi], &hosts[xi].host).unwrap();
    for vee in [&full.1, &standard.1, &legacy.1, &enhanced.1] {
        view.destroy(vee).unwrap();
    }
    let mut rows = Vec::new();
    let mut row = |level: &str, promise: &str, seen: String| {
        rows.push(format!(
            "| {level} | {promise} | {seen} | {:.1} s |",
            failed_at.elapsed().as_secs_f64()
        ));
    };
    let t = Duration::from_secs(150);
    let e = a
        .wait_vee(&enhanced.1, "enhanced in its spare", t, |i| {
            i.state() == VeeState::Running && where_(i) == y
        })
        .await;
    row(
        "enhanced",
        "restored into its local spare",
        format!("running on Y from checkpoint {}", &e.latest_checkpoint[..8]),
    );
    let f = a
        .wait_vee(&full.1, "full at site B", t, |i| {
            i.state() == VeeState::Running && i.location == "remote (site-b)"
        })
        .await;
    row(
        "full",
        "restored into its spare at the peer",
        format!("running at site B from checkpoint {}", &f.latest_checkpoint[..8]),
    );
    let s = a
        .wait_vee(&standard.1, "standard restored", t, |i| {
            i.state() == VeeState::Running && where_(i) == y
        })
        .await;
    row(
        "standard",
        "restored from its checkpoint",
        format!("running on Y from checkpoint {}", &s.latest_checkpoint[..8]),
    );
    a.wait_vee(&background.1, "background displaced", t, |i| {
        i.state() == VeeState::Suspended && i.location == "none"
    })
    .await;
    row(
        "background",
        "may be suspended, resumed later",
        "displaced (saved, suspended)".into(),
    );
    a.wait_vee(&legacy.1, "legacy lost", t, |i| i.state() == VeeState::Failed).await;
    let usage = op
        .get_usage(GetUsageRequest {
            service_id: legacy.0.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(usage.violations.len(), 1, "{:?}", usage.violations);
    row(
        "legacy",
        "none: lost, violation recorded",
        format!("failed; violation, penalty {:.2}", usage.violations[0].penalty),
    );
    for svc in [&full.0, &standard.0, &enhanced.0, &background.0] {
        let u = op
            .get_usage(GetUsageRequest { service_id: svc.clone() })
            .await
            .unwrap()
            .into_inner();
        assert!(u.violations.is_empty(), "{svc}: {:?}", u.violations);
    }

    // Room returns (standard ends): the background VEE resumes.
    site::vee_action(&mut acme, &standard.1, Action::Stop).await.unwrap();
    a.wait_vee(&background.1, "background resumed", t, |i| {
        i.state() == VeeState::Running && where_(i) == y
    })
    .await;
    row("background", "resumed when room returns", "running on Y again".into());
    eprintln!(
        "| level | promise | seen | after the failure |\n|---|---|---|---|\n{}",
        rows.join("\n")
    );
    for vee in [&full.1, &standard.1, &enhanced.1, &background.1, &_filler.1] {
        site::vee_action(&mut acme, vee, Action::Stop).await.ok();
    }
}
