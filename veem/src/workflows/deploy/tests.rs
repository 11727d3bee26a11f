//! The deploy workflow against a fake repository and fake VEEHs: a
//! manifest whose images cannot be checked or found is refused and
//! changes nothing; a host that refuses leaves the VEE failed, with the
//! host's reason, and nothing running.

use tonic::Code;

use super::DeployError;
use crate::config::Role;
use crate::model::VeeState;
use crate::sim::{eventually, FakeSite, STANDARD};

const IMAGE: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";

fn acme() -> Role {
    Role::Provider("acme".into())
}

/// A site of two hosts whose repository holds STANDARD's image.
async fn site() -> FakeSite {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    site.repo.blobs.lock().unwrap().insert(IMAGE.into());
    site
}

#[tokio::test]
async fn a_deployed_vee_is_prepared_created_and_started_on_its_host() {
    let site = site().await;
    let svc = site.veem.deploy.deploy(&acme(), STANDARD).await.unwrap();
    let vee = svc.vees[0].clone();
    eventually("running", || site.veem.core.vee(&vee).unwrap().state == VeeState::Running).await;
    let host = site.veem.core.vee(&vee).unwrap().host().unwrap().to_string();
    assert_eq!(
        site.host(&host).calls(),
        [format!("prepare {vee}"), format!("create {vee}"), format!("start {vee}")]
    );
}

#[tokio::test]
async fn a_components_first_boot_data_reaches_each_vees_host_with_its_own_host_name() {
    let site = site().await;
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBf0a7bYk5Yd0n9y5fQz1c6b3kKp alice@laptop";
    let manifest = STANDARD.replace("name = \"vm\"", "name = \"web_tier\"\ninstances = 2")
        + &format!("user_data = \"\"\"\n#cloud-config\npackages: [nginx]\n\"\"\"\nssh_authorized_keys = [\"{key}\"]\n");
    let svc = site.veem.deploy.deploy(&acme(), &manifest).await.unwrap();
    let mut names = vec![];
    for vee in &svc.vees {
        eventually("running", || site.veem.core.vee(vee).unwrap().state == VeeState::Running).await;
        let host = site.veem.core.vee(vee).unwrap().host().unwrap().to_string();
        let c = site.host(&host).spec(vee).unwrap().cloud_init.expect("a seed for the VEE");
        assert_eq!(
            (c.user_data.as_str(), c.ssh_authorized_keys.as_slice()),
            ("#cloud-config\npackages: [nginx]\n", &[key.to_string()][..])
        );
        names.push(c.hostname);
    }
    names.sort();
    assert_eq!(names, ["web-tier-0", "web-tier-1"], "DNS labels: `_` is not allowed in host names");
    // Without first-boot data, no seed.
    let plain = site.veem.deploy.deploy(&acme(), &STANDARD.replace("shop", "plain")).await.unwrap();
    eventually("running", || site.veem.core.vee(&plain.vees[0]).unwrap().state == VeeState::Running).await;
    let host = site.veem.core.vee(&plain.vees[0]).unwrap().host().unwrap().to_string();
    assert_eq!(site.host(&host).spec(&plain.vees[0]).unwrap().cloud_init, None);
}

#[tokio::test]
async fn a_refusal_says_how_many_hosts_do_not_answer_without_naming_them() {
    let site = site().await;
    site.host("h2").fail("HostInfo", Code::Unavailable, "connection refused");
    for h in ["h1", "h2"] {
        site.veem.core.hosts.heartbeat(h, 3).await;
    }
    let huge = STANDARD.replace("memory_mib = 512", "memory_mib = 1048576");
    let r = site.veem.deploy.negotiate(&acme(), &huge).await;
    assert_eq!(r.verdict, crate::domain::Verdict::Reject);
    let last = r.reasons.last().unwrap();
    assert_eq!(
        last,
        "1 of the site's 2 hosts do not answer (the site's log names them with their endpoints)"
    );
    assert!(r.reasons.iter().all(|r| !r.contains("h2")), "{:?}", r.reasons);
}

#[tokio::test]
async fn a_repository_that_is_down_refuses_the_manifest_and_nothing_is_reserved() {
    let site = site().await;
    site.repo.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let e = site.veem.deploy.deploy(&acme(), STANDARD).await.unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("manifest field `component[0].image`: cannot check"), "{msg}");
    assert!(
        matches!(e, DeployError::Request(crate::error::VeemError::ManifestRefused(_))),
        "{e}"
    );
    assert!(site.veem.core.vees().is_empty(), "no VEE recorded");
    assert!(site
        .veem
        .core
        .store
        .list::<crate::model::ServiceRec>(crate::store::Tree::Services)
        .unwrap()
        .is_empty());
    assert_eq!(
        site.veem.core.planner().host_usage("h1", site.veem.core.now_slot()).unwrap().vcpus,
        0
    );
    assert!(site.hosts.iter().all(|h| h.calls().is_empty()), "no host was called");
}

#[tokio::test]
async fn an_image_the_repository_lacks_is_named_in_the_refusal() {
    let site = FakeSite::start(&["h1"], "").await;
    let e = format!("{:#}", site.veem.deploy.deploy(&acme(), STANDARD).await.unwrap_err());
    assert!(
        e.contains(&format!("`component[0].image`: {IMAGE} is not in the image repository")),
        "{e}"
    );
    assert!(site.veem.core.vees().is_empty());
}

#[tokio::test]
async fn a_host_that_refuses_leaves_the_vee_failed_with_its_reason_and_nothing_running() {
    let site = site().await;
    for h in &site.hosts {
        h.fail("Prepare", Code::Unavailable, "image pull: connection refused");
    }
    let svc = site.veem.deploy.deploy(&acme(), STANDARD).await.unwrap();
    let vee = svc.vees[0].clone();
    eventually("failed", || site.veem.core.vee(&vee).unwrap().state == VeeState::Failed).await;
    assert!(
        site.events(&vee)
            .iter()
            .any(|e| e.contains("deploying -> failed") && e.contains("image pull: connection refused")),
        "{:?}",
        site.events(&vee)
    );
    assert!(site.hosts.iter().all(|h| !h.runs(&vee)));
}

#[tokio::test]
async fn a_deploy_retried_with_its_request_id_deploys_once() {
    let site = site().await;
    let usage = |site: &FakeSite| {
        let now = site.veem.core.now_slot();
        let planner = site.veem.core.planner();
        planner.host_usage("h1", now).unwrap().vcpus + planner.host_usage("h2", now).unwrap().vcpus
    };
    // Two at once and one after, as a client whose answers were lost.
    let provider = acme();
    let (a, b) = tokio::join!(
        site.veem.deploy.deploy_request(&provider, STANDARD, "req-1"),
        site.veem.deploy.deploy_request(&provider, STANDARD, "req-1")
    );
    let first = a.unwrap();
    assert_eq!(b.unwrap().id, first.id);
    let again = site.veem.deploy.deploy_request(&acme(), STANDARD, "req-1").await.unwrap();
    assert_eq!((again.id.as_str(), &again.vees), (first.id.as_str(), &first.vees));
    assert_eq!(site.veem.core.vees().len(), first.vees.len(), "one set of VEEs");
    let reserved = usage(&site);
    assert_eq!(reserved as usize, first.vees.len(), "one vCPU per VEE, reserved once");

    // The same ID with another manifest: refused, nothing changes.
    let other = STANDARD.replace("name = \"shop\"", "name = \"other\"");
    let e = site.veem.deploy.deploy_request(&acme(), &other, "req-1").await.unwrap_err();
    let status = crate::api::status::status(e);
    assert_eq!(status.code(), Code::AlreadyExists, "{}", status.message());
    assert!(
        status.message().contains("req-1") && status.message().contains(&first.id),
        "{}",
        status.message()
    );
    // Another caller's ID space, and no ID at all: new services.
    let op = site.veem.deploy.deploy_request(&Role::Operator, STANDARD, "req-1").await.unwrap();
    let plain = site.veem.deploy.deploy(&acme(), STANDARD).await.unwrap();
    assert!(op.id != first.id && plain.id != first.id && op.id != plain.id);
    // A malformed ID names the field.
    let e = crate::api::status::status(site.veem.deploy.deploy_request(&acme(), STANDARD, "a b").await.unwrap_err());
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("field `request_id`"), "{}", e.message());
}

#[tokio::test]
async fn a_refused_deploy_records_no_request_and_its_retry_is_planned_anew() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    assert!(
        site.veem.deploy.deploy_request(&acme(), STANDARD, "req-2").await.is_err(),
        "the image is missing"
    );
    site.repo.blobs.lock().unwrap().insert(IMAGE.into());
    let svc = site.veem.deploy.deploy_request(&acme(), STANDARD, "req-2").await.unwrap();
    assert_eq!(
        site.veem.deploy.deploy_request(&acme(), STANDARD, "req-2").await.unwrap().id,
        svc.id
    );
}

/// Deploy plans on the planner as it is, and commits later (after the
/// networks are assigned under their lock): when another admission took
/// the planned host meanwhile, the commit finds the planner changed, writes
/// nothing, and Deploy plans again on the fresh state (issue 37: Nomad's
/// partial commit, retried). Nothing is lost: the other admission keeps
/// its host, the VEE is recorded where the planner holds it.
#[tokio::test]
async fn a_deploy_whose_commit_meets_a_changed_planner_plans_again_and_loses_nothing() {
    let site = site().await;
    let networks = site.veem.networks.ipam.lock().await;
    let veem = site.veem.clone();
    let deploy = tokio::spawn(async move { veem.deploy.deploy(&acme(), STANDARD).await });
    // The deploy has planned (packing: h1) and waits for the networks' lock.
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert!(!deploy.is_finished());
    let whole_host = STANDARD.replace("vcpus = 1", "vcpus = 4");
    let m = interfaces::manifest::Manifest::from_toml(&whole_host).unwrap();
    let other = site.veem.deploy.request(&m, "other");
    let taken = site.veem.core.planner().admit(&other);
    let crate::planner::Admission::Accepted(taken) = taken else {
        panic!("{taken:?}")
    };
    assert_eq!(taken.placements[0].host, "h1", "the host the deploy planned on");
    drop(networks);
    let svc = deploy.await.unwrap().expect("deployed on the second plan");
    let vee = site.veem.core.vee(&svc.vees[0]).unwrap();
    let p = site.veem.core.planner();
    assert_eq!(vee.host(), Some("h2"));
    assert_eq!(
        p.placement(&vee.id).map(|x| x.host),
        Some("h2".to_string()),
        "records and planner agree"
    );
    assert_eq!(
        p.placement(&taken.placements[0].vee).map(|x| x.host),
        Some("h1".to_string()),
        "the other admission kept"
    );
    p.check_invariants().unwrap();
    assert_eq!(
        site.veem
            .core
            .store
            .list::<crate::model::ServiceRec>(crate::store::Tree::Services)
            .unwrap()
            .len(),
        1
    );
}
