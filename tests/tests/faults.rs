//! Faults on one site with real daemons and the tiny guest (issue 13):
//! - R2: a VEEH that stalls (SIGSTOP) past the heartbeat miss limit while
//!   its VEE goes on running in its libvirtd, and comes back. Its VEE is
//!   recovered on the other host from its checkpoint; the returning host is
//!   fenced (its copy destroyed) before it counts as up again, and the VEE
//!   runs in one place.
//! - R3: the VEEM killed in the middle of a recovery (a failpoint aborts it
//!   there, as kill -9 would), its host still dead: after the restart the
//!   host is failed, the VEE is recovered from its checkpoint, no violation
//!   is charged, one copy runs.
//! - R1: the VEEM killed inside Deploy, after its commit and before it
//!   answered: the client's retry with its request ID gets the one service,
//!   whose VEE runs once.

use std::time::{Duration, Instant};

use e2e::daemons::{console, wait_tick, GuestIds, ImageRepo, Veeh};
use e2e::site::{self, host_of, manifest, Veem, ACME, OPERATOR};
use e2e::{guest, lab};
use interfaces::vmi::*;
use veeh::hypervisor::Hypervisor;

const BOOT: Duration = Duration::from_secs(180);

/// One site: two VEEHs on two libvirtds (so that a copy on one really
/// runs beside a copy on the other) and a VEEM over them, its
/// configuration with `extra` (e.g. failpoints).
struct Site {
    dir: std::path::PathBuf,
    repo: ImageRepo,
    ids: GuestIds,
    hosts: [Veeh; 2],
    veem: Veem,
}

impl Site {
    async fn new(name: &str, extra: &str) -> Self {
        let dir = lab::test_dir(name);
        let repo = ImageRepo::start(&dir).await;
        let ids = repo.push_guest(&guest::image()).await;
        let h1 = Veeh::start(&dir, "f1", "site-a", lab::SITE_A_URI, &repo).await;
        let h2 = Veeh::start(&dir, "f2", "site-a", lab::SITE_A2_URI, &repo).await;
        let port = site::port();
        let cfg = site::write_config(&dir, "site-a", port, &repo, &[&h1, &h2], &[], extra);
        let veem = Veem::start(&dir, "site-a", port, cfg).await;
        Self {
            dir,
            repo,
            ids,
            hosts: [h1, h2],
            veem,
        }
    }

    /// Indices in `hosts` of the hosts running a domain of `vee`.
    async fn running(&self, vee: &str) -> Vec<usize> {
        let mut on = Vec::new();
        for (i, h) in self.hosts.iter().enumerate() {
            if h.domains().await.iter().any(|d| d.vee_id == vee) {
                on.push(i);
            }
        }
        on
    }

    /// Once its VEEM settled after a restart: `vee` is running, on the one
    /// host that runs it, and a checkpoint of it is taken: no operation
    /// left it stuck. The index of its host.
    async fn stable(&self, vee: &str, after: &str) -> usize {
        let info = self
            .veem
            .wait_vee(vee, &format!("running after {after}"), Duration::from_secs(120), |i| {
                i.state() == VeeState::Running
            })
            .await;
        let host = host_of(&info).expect("on a host");
        let on = self.running(vee).await;
        let at = self.hosts.iter().position(|h| h.host == host).unwrap();
        assert_eq!(on, vec![at], "after {after}: recorded on {host}, domains on {on:?}");
        let mut acme = self.veem.client(ACME).await;
        site::vee_action(&mut acme, vee, Action::Checkpoint)
            .await
            .unwrap_or_else(|e| panic!("after {after}: not checkpointable: {e:?}"));
        at
    }
}

/// [`Site`] with one VEE of acme's running and checkpointed.
struct Stage {
    site: Site,
    service: String,
    vee: String,
    /// Index in `hosts` of the VEE's host, and that host's libvirt URI.
    at: usize,
    at_uri: &'static str,
    /// The guest's last counter tick before and after the checkpoint.
    ticks: (u64, u64),
}

impl Stage {
    async fn new(name: &str, extra: &str) -> Self {
        let site = Site::new(name, extra).await;
        let mut acme = site.veem.client(ACME).await;
        let svc = site::deploy(&mut acme, manifest("shop", "acme", &site.ids, 1, "")).await.unwrap();
        let vee = svc.vees[0].vee_id.clone();
        let info = site.veem.wait_vee(&vee, "running", BOOT, |i| i.state() == VeeState::Running).await;
        let at = usize::from(host_of(&info) != Some(site.hosts[0].host.clone()));
        let mut c = site.hosts[at].client().await;
        wait_tick(&mut c, &vee, 2, BOOT).await;
        let before = guest::last_tick(&console(&mut c, &vee).await).unwrap().0;
        site::vee_action(&mut acme, &vee, Action::Checkpoint).await.unwrap();
        let after = guest::last_tick(&console(&mut c, &vee).await).unwrap().0;
        Self {
            site,
            service: svc.service_id,
            vee,
            at,
            at_uri: [lab::SITE_A_URI, lab::SITE_A2_URI][at],
            ticks: (before, after),
        }
    }

    fn other(&self) -> &Veeh {
        &self.site.hosts[1 - self.at]
    }

    /// The operator's view of host `name`, once `pred` holds (30 s at most).
    async fn host_when(&self, name: &str, what: &str, pred: impl Fn(&HostStatus) -> bool) -> HostStatus {
        let mut op = self.site.veem.client(OPERATOR).await;
        let start = Instant::now();
        loop {
            let hosts = op.list_hosts(ListHostsRequest::default()).await.unwrap().into_inner().hosts;
            let h = hosts.into_iter().find(|h| h.name == name).unwrap();
            if pred(&h) {
                return h;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "host {name} never {what}: {h:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The VEE runs once, on the other host, from its checkpoint on, and
    /// the operator sees it there.
    async fn runs_once_on_the_other_host(&self) {
        let other = self.other();
        let mut oc = other.client().await;
        wait_tick(&mut oc, &self.vee, 1, Duration::from_secs(60)).await;
        let first = guest::ticks(&console(&mut oc, &self.vee).await)[0];
        let (before, after) = self.ticks;
        assert!(
            first > before && first <= after + 1,
            "restored from the checkpoint (ticks {before}..={after}), first tick {first}"
        );
        let now = guest::last_tick(&console(&mut oc, &self.vee).await).unwrap().0;
        wait_tick(&mut oc, &self.vee, now + 2, Duration::from_secs(30)).await;
        let at_view = Hypervisor::open(self.at_uri, &self.site.hosts[self.at].host).unwrap();
        assert_eq!(at_view.state(&self.vee).unwrap(), None, "a copy on the first host");
        let mut op = self.site.veem.client(OPERATOR).await;
        let v = op.get_vee(GetVeeRequest { vee_id: self.vee.clone() }).await.unwrap().into_inner();
        assert_eq!((v.state(), host_of(&v)), (VeeState::Running, Some(other.host.clone())));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_stalled_host_that_comes_back_is_fenced_and_its_vee_runs_once() {
    let _lab = lab::lock();
    let s = Stage::new("faults-stall", "").await;
    let (stalled, other, vee) = (&s.site.hosts[s.at], s.other(), s.vee.clone());
    let veem = &s.site.veem;

    // The host stalls; its libvirtd runs on and so does its copy.
    stalled.signal("-STOP");
    let info = veem
        .wait_vee(&vee, "recovered on the other host", Duration::from_secs(120), |i| {
            i.state() == VeeState::Running && host_of(i).as_deref() == Some(other.host.as_str())
        })
        .await;
    assert_eq!(host_of(&info).unwrap(), other.host);
    let stalled_view = Hypervisor::open(s.at_uri, &stalled.host).unwrap();
    assert!(
        stalled_view.state(&vee).unwrap().is_some(),
        "the stalled host's copy runs on while it stalls"
    );

    // It comes back: fenced before it counts as up, its copy destroyed.
    stalled.signal("-CONT");
    let start = Instant::now();
    while stalled_view.state(&vee).unwrap().is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the returning host's copy is still there"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let back = s.host_when(&stalled.host, "came back", |h| h.health() == HostHealth::Up).await;
    assert_eq!((back.vees, back.used_vcpus, back.used_memory_mib), (0, 0, 0), "{back:?}");
    assert!(stalled.domains().await.is_empty());
    s.runs_once_on_the_other_host().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_veem_killed_mid_recovery_finishes_it_after_its_restart() {
    let _lab = lab::lock();
    let mut s = Stage::new("faults-recovery-kill", "failpoints = \"recovery-before-restore=panic\"\n").await;
    let (vee, dead) = (s.vee.clone(), s.site.hosts[s.at].host.clone());
    // The host dies with its VEE; the VEEM dies as it recovers the VEE,
    // recorded recovering on the other host and not yet restored there.
    s.site.hosts[s.at].daemon.kill();
    Hypervisor::open(s.at_uri, &dead).unwrap().destroy(&vee).unwrap();
    s.site.veem.restart_after_failpoint().await;
    // After the restart, with the host still dead: failed, not unknown.
    s.host_when(&dead, "declared failed", |h| h.health() == HostHealth::Failed).await;
    let other = s.other().host.clone();
    s.site
        .veem
        .wait_vee(&vee, "recovered on the other host", Duration::from_secs(120), |i| {
            i.state() == VeeState::Running && host_of(i).as_deref() == Some(other.as_str())
        })
        .await;
    s.runs_once_on_the_other_host().await;
    site::assert_no_violations(&mut s.site.veem.client(ACME).await, &s.service).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_veem_killed_inside_deploy_deploys_once_for_a_client_that_retries() {
    let _lab = lab::lock();
    let mut site = Site::new("faults-deploy-kill", "failpoints = \"deploy-after-commit=panic\"\n").await;
    let shop = DeployRequest {
        manifest_toml: manifest("shop", "acme", &site.ids, 1, ""),
        request_id: "shop-1".into(),
    };
    // Committed, then the VEEM dies before it calls a VEEH or answers.
    let e = site.veem.client(ACME).await.deploy(shop.clone()).await.unwrap_err();
    assert!(
        matches!(e.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal),
        "{e:?}"
    );
    site.veem.restart_after_failpoint().await;
    // The client asks again with its request ID: the one service.
    let mut acme = site.veem.client(ACME).await;
    let svc = acme.deploy(shop.clone()).await.unwrap().into_inner();
    let again = acme.deploy(shop).await.unwrap().into_inner();
    assert_eq!(again.service_id, svc.service_id);
    assert_eq!(
        acme.list_services(ListServicesRequest::default())
            .await
            .unwrap()
            .into_inner()
            .services
            .len(),
        1
    );
    let vee = svc.vees[0].vee_id.clone();
    let info = site.veem.wait_vee(&vee, "running", BOOT, |i| i.state() == VeeState::Running).await;
    let mut op = site.veem.client(OPERATOR).await;
    let placed = op.get_vee(GetVeeRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
    let host = host_of(&placed).expect("on a host");
    let (on, off) = if host == site.hosts[0].host { (0, 1) } else { (1, 0) };
    wait_tick(&mut site.hosts[on].client().await, &vee, 2, BOOT).await;
    let elsewhere = site.hosts[off].domains().await;
    assert!(elsewhere.is_empty(), "{elsewhere:?}");
    assert_eq!(info.vee_id, vee);
}

/// The VEEM killed (as kill -9: a failpoint aborts it) at every step of a
/// checkpoint, a restore, a resize, a rolling update, a migration within
/// the site and a scale-out, then started again, as a standby taking over
/// would: each time the VEE ends running, once, checkpointable and
/// movable; none is left checkpointing, migrating or approved for good,
/// no resize half made, no rollout stuck, no new instance left unbooted.
#[tokio::test(flavor = "multi_thread")]
async fn lab_a_veem_killed_at_any_step_of_an_operation_leaves_its_vee_running_once() {
    let _lab = lab::lock();
    let mut site = Site::new("faults-takeover", "").await;
    let mut acme = site.veem.client(ACME).await;
    let resizable = manifest("shop", "acme", &site.ids, 1, "").replace("disk_gib = 1\n", "disk_gib = 1\nmax_vcpus = 2\n");
    let svc = site::deploy(&mut acme, resizable).await.unwrap();
    let vee = svc.vees[0].vee_id.clone();
    site.stable(&vee, "deploy").await;
    for point in ["checkpoint-after-transition", "checkpoint-after-vhi", "restore-after-destroy"] {
        site.veem.arm(point).await;
        let mut acme = site.veem.client(ACME).await;
        let action = if point.starts_with("restore") {
            Action::Restore
        } else {
            Action::Checkpoint
        };
        let e = site::vee_action(&mut acme, &vee, action).await.unwrap_err();
        assert!(!matches!(e.code(), tonic::Code::Ok), "{e:?}");
        site.veem.restart_after_failpoint().await;
        site.stable(&vee, point).await;
    }
    // A resize: its reservation grown, the VEEM killed before the host
    // or the record: back to the record's size.
    site.veem.arm("resize-after-reservation").await;
    let resize = ResizeVeeRequest {
        vee_id: vee.clone(),
        vcpus: 2,
        memory_mib: 0,
    };
    assert!(site.veem.client(ACME).await.resize_vee(resize).await.is_err());
    site.veem.restart_after_failpoint().await;
    let mut at = site.stable(&vee, "resize-after-reservation").await;
    let info = site
        .veem
        .client(OPERATOR)
        .await
        .get_vee(GetVeeRequest { vee_id: vee.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.vcpus, 1, "{info:?}");
    let rolled_back = site::history(&mut site.veem.client(OPERATOR).await, &svc.service_id).await;
    assert!(
        rolled_back.iter().any(|e| e.detail.contains("a resize cut short")),
        "{rolled_back:?}"
    );
    // A rolling update of the VEE's component, killed in its step: once
    // the old domain is removed (its record still on the old image), once
    // its record is on the new image, not booted (as it rolls back): the
    // next VEEM boots it on the rollout's image and the rollout ends done.
    let v2 = site.repo.push_guest_disk_v2(&guest::image(), &site.dir).await;
    for (point, rollback, image) in [("rollout-after-destroy", false, &v2), ("rollout-after-image", true, &site.ids.disk)] {
        site.veem.arm(point).await;
        let update = UpdateComponentRequest {
            service_id: svc.service_id.clone(),
            component: "web".into(),
            image: if rollback { String::new() } else { v2.clone() },
            rollback,
            ..Default::default()
        };
        // Answered (it rolls in the background), or cut by the kill.
        let _ = site.veem.client(ACME).await.update_component(update).await;
        site.veem.restart_after_failpoint().await;
        let r = rollout_end(&site.veem, &svc.service_id).await;
        assert_eq!(
            (r.state(), &r.replaced),
            (RolloutState::Done, &vec![vee.clone()]),
            "after {point}: {r:?}"
        );
        assert_eq!(site.stable(&vee, point).await, at, "after {point}: replaced in place");
        let mut acme = site.veem.client(ACME).await;
        let info = acme.get_vee(GetVeeRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
        assert_eq!(&info.image, image, "after {point}");
    }
    // A migration within the site: killed once approved, once the VEE is
    // migrating, once its destination prepared, once it was sent, once
    // its destination completed; the next VEEM runs it, rolls it back or
    // completes it, and records the VEE's reservation where it runs (the
    // next migration is planned from it).
    for (point, moves) in [
        ("migration-after-approval", true),
        ("migration-after-start", false),
        ("migration-after-prepare", false),
        ("migration-after-send", true),
        ("migration-after-complete", true),
    ] {
        site.veem.arm(point).await;
        let to = site.hosts[1 - at].host.clone();
        let mut op = site.veem.client(OPERATOR).await;
        let m = op
            .migrate(MigrateRequest {
                vee_id: vee.clone(),
                to_host: to.clone(),
                to_site: String::new(),
                reason: "maintenance".into(),
            })
            .await
            .unwrap()
            .into_inner();
        // The approval's answer, or the migration's, is cut by the kill.
        let _ = op
            .approve_migration(ApproveMigrationRequest {
                migration_id: m.migration_id.clone(),
            })
            .await;
        site.veem.restart_after_failpoint().await;
        let end = site::wait_migration(&site.veem, &m.migration_id, Duration::from_secs(180)).await;
        let expected = if moves { MigrationState::Done } else { MigrationState::Failed };
        assert_eq!(end.state(), expected, "after {point}: {end:?}");
        let now = site.stable(&vee, point).await;
        assert_eq!(now == 1 - at, moves, "after {point}: on host {now}, was on {at}");
        at = now;
    }
    // A scale-out: the new instance admitted and recorded, the VEEM
    // killed before it booted it: booted by the next.
    site.veem.arm("scale-after-commit").await;
    let scale = ScaleComponentRequest {
        service_id: svc.service_id.clone(),
        component: "web".into(),
        instances: 2,
    };
    assert!(site.veem.client(ACME).await.scale_component(scale).await.is_err());
    site.veem.restart_after_failpoint().await;
    let vees = site::vees(&mut site.veem.client(ACME).await, &svc.service_id).await;
    assert_eq!(vees.len(), 2, "{vees:?}");
    for v in &vees {
        site.stable(&v.vee_id, "scale-after-commit").await;
    }
}

/// The component `web`'s latest rollout of `service` once it ended (180 s
/// at most).
async fn rollout_end(veem: &Veem, service: &str) -> Rollout {
    let mut acme = veem.client(ACME).await;
    let start = Instant::now();
    loop {
        let r = acme
            .get_rollout(GetRolloutRequest {
                service_id: service.into(),
                component: "web".into(),
            })
            .await
            .unwrap()
            .into_inner();
        if r.state() != RolloutState::Rolling {
            return r;
        }
        assert!(start.elapsed() < Duration::from_secs(180), "still rolling: {r:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
