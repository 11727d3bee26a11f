//! Rolling image updates against fake VEEHs (issue 40, item 4): instances
//! replaced in place one at a time, each waited for until it answers; a
//! new image that does not answer stops the rollout and the instance goes
//! back; a rollback; refusals that name the field.

use crate::config::Role;
use crate::domain::rollout::{RolloutRec, RolloutState};
use crate::model::{VeeRec, VeeState};
use crate::sim::{eventually, FakeSite, STANDARD};
use crate::workflows::rollout::UpdateRequest;

const OLD: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";
const NEW: &str = "sha256:6666666666666666666666666666666666666666666666666666666666666666";
const POOLS: &str = "[networks]\npool = \"10.240.0.0/23\"\nexternal_pool = \"192.0.2.0/29\"\n";

/// STANDARD's `vm` as `web`, two instances on a host each, port 80 on an
/// external network.
fn web() -> String {
    STANDARD
        .replace("name = \"vm\"", "name = \"web\"")
        .replace("disk_gib = 1\n", "disk_gib = 1\ninstances = 2\nnetworks = [\"public\"]\n")
        + "[[network]]\nname = \"public\"\nkind = \"external\"\nports = [80]\n\
           [[constraint]]\nkind = \"anti-affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"web\"]\n"
}

async fn deployed() -> (FakeSite, String, Vec<VeeRec>) {
    let site = FakeSite::start(&["h1", "h2", "h3"], POOLS).await;
    site.repo.blobs.lock().unwrap().extend([OLD.to_string(), NEW.to_string()]);
    let svc = site.veem.deploy.deploy(&Role::Provider("acme".into()), &web()).await.unwrap();
    for id in &svc.vees {
        eventually("running", || site.veem.core.vee(id).unwrap().state == VeeState::Running).await;
    }
    let vees = instances(&site, &svc.id);
    assert!(vees.iter().all(|v| v.image == OLD));
    (site, svc.id, vees)
}

fn instances(site: &FakeSite, service: &str) -> Vec<VeeRec> {
    let mut v = site
        .veem
        .core
        .vees_where(|v| v.service_id == service && v.state != VeeState::Terminated);
    v.sort_by_key(|v| v.instance);
    v
}

fn request(service: &str, image: &str) -> UpdateRequest {
    UpdateRequest {
        service_id: service.into(),
        component: "web".into(),
        image: image.into(),
        ..Default::default()
    }
}

async fn ended(site: &FakeSite, service: &str) -> RolloutRec {
    eventually("rollout ended", || {
        site.veem.rollouts.rollout(service, "web").unwrap().unwrap().state != RolloutState::Rolling
    })
    .await;
    site.veem.rollouts.rollout(service, "web").unwrap().unwrap()
}

/// Every event of the VEEs `ids`, in order, as `INDEX kind: detail`.
fn log(site: &FakeSite, vees: &[VeeRec]) -> Vec<String> {
    let all = site.veem.core.store.events().unwrap();
    all.into_iter()
        .filter_map(|e| {
            let v = vees.iter().find(|v| v.id == e.vee_id)?;
            Some(format!("{} {}: {}", v.instance, e.kind, e.detail))
        })
        .collect()
}

#[tokio::test]
async fn replaces_each_instance_in_place_one_at_a_time_after_the_last_answers() {
    let (site, service, before) = deployed().await;
    let reservations = |vees: &[VeeRec]| -> Vec<String> {
        let p = site.veem.core.planner.lock().unwrap();
        vees.iter().map(|v| format!("{:?}", p.reservation(&v.id))).collect()
    };
    let reserved = reservations(&before);
    let rec = site.veem.rollouts.update(request(&service, NEW)).await.unwrap();
    assert_eq!((rec.state, rec.from_image.as_str(), rec.instances), (RolloutState::Rolling, OLD, 2));
    // No scaling meanwhile (unless it ended already: the fakes are quick).
    if let Err(e) = site.veem.scaling.scale(&service, "web", 3).await {
        assert!(format!("{e:#}").contains("being updated"), "{e:#}");
    }
    let rec = ended(&site, &service).await;
    assert_eq!(rec.state, RolloutState::Done, "{}", rec.reason);
    assert_eq!(rec.replaced, [before[0].id.clone(), before[1].id.clone()], "lowest index first");
    let after = instances(&site, &service);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&a.id, a.instance, &a.nics, &a.location),
            (&b.id, b.instance, &b.nics, &b.location),
            "in place"
        );
        assert_eq!((a.image.as_str(), a.state), (NEW, VeeState::Running));
        let h = site.host(a.host().unwrap());
        assert_eq!(h.spec(&a.id).unwrap().image, NEW, "booted from the new image");
        let calls = h.calls();
        let at = |c: &str| calls.iter().position(|x| *x == format!("{c} {}", a.id)).unwrap_or(usize::MAX);
        assert!(
            at("shutdown") < at("destroy") && at("destroy") < calls.len(),
            "a clean shutdown first: {calls:?}"
        );
        assert!(calls.contains(&format!("probe {}", a.id)), "{calls:?}");
    }
    // One at a time: instance 1 went down only after instance 0 answered.
    let log = log(&site, &before);
    let replaced0 = log.iter().position(|e| e.starts_with("0 replaced")).unwrap();
    let down1 = log
        .iter()
        .position(|e| e.starts_with("1 ") && e.contains("rolling update"))
        .unwrap();
    assert!(replaced0 < down1, "{log:#?}");
    // The reservations did not move; new instances get the new image.
    assert_eq!(reservations(&after), reserved);
    site.veem.scaling.scale(&service, "web", 3).await.unwrap();
    let third = instances(&site, &service)[2].clone();
    assert_eq!(third.image, NEW);
    // A rollout waits for every instance to run.
    if site.veem.core.vee(&third.id).unwrap().state != VeeState::Running {
        let e = site
            .veem
            .rollouts
            .update(UpdateRequest {
                rollback: true,
                ..request(&service, "")
            })
            .await
            .unwrap_err();
        assert!(format!("{e:#}").contains("every instance must run at this site"), "{e:#}");
    }
    eventually("running", || site.veem.core.vee(&third.id).unwrap().state == VeeState::Running).await;

    // Rollback: the old image again, everywhere.
    let back = site
        .veem
        .rollouts
        .update(UpdateRequest {
            rollback: true,
            ..request(&service, "")
        })
        .await
        .unwrap();
    assert_eq!((back.from_image.as_str(), back.to_image.as_str(), back.instances), (NEW, OLD, 3));
    assert_eq!(ended(&site, &service).await.state, RolloutState::Done);
    assert!(instances(&site, &service).iter().all(|v| v.image == OLD));
}

#[tokio::test]
async fn an_image_that_does_not_answer_stops_the_rollout_and_goes_back() {
    let (site, service, before) = deployed().await;
    site.clock.follow_runtime();
    for h in &site.hosts {
        h.script.lock().unwrap().silent_images.insert(NEW.into());
    }
    let r = UpdateRequest {
        ready_timeout_s: 1,
        ..request(&service, NEW)
    };
    site.veem.rollouts.update(r).await.unwrap();
    let rec = ended(&site, &service).await;
    assert_eq!(rec.state, RolloutState::Failed);
    assert!(rec.replaced.is_empty());
    assert!(
        rec.reason.contains("instance 0")
            && rec.reason.contains("port 80 did not answer within 1 s")
            && rec.reason.contains(&format!("it runs {OLD} again")),
        "{}",
        rec.reason
    );
    let after = instances(&site, &service);
    assert!(after.iter().all(|v| v.image == OLD && v.state == VeeState::Running), "{after:?}");
    let first = site.host(after[0].host().unwrap());
    assert_eq!(first.spec(&after[0].id).unwrap().image, OLD, "booted from the old image again");
    let second = site.host(after[1].host().unwrap()).calls();
    assert!(
        !second.contains(&format!("shutdown {}", before[1].id)),
        "instance 1 untouched: {second:?}"
    );
    // Deploying again is no breach of the window (it ran before).
    let mut v = after[0].clone();
    assert!(v.image_since_ms.is_some());
    v.state = VeeState::Deploying;
    let now_ms = v.window_start_unix * 1000 + 3_600_000;
    assert_eq!(crate::steps::sla::ongoing_breach(&v, now_ms), None);
    v.image_since_ms = None;
    assert!(crate::steps::sla::ongoing_breach(&v, now_ms).is_some(), "the check itself");
}

#[tokio::test]
async fn bad_requests_name_the_field_and_change_nothing() {
    let (site, service, _) = deployed().await;
    let e = |r: UpdateRequest| {
        let veem = site.veem.rollouts.clone();
        async move { format!("{:#}", veem.update(r).await.unwrap_err()) }
    };
    let other = "sha256:7777777777777777777777777777777777777777777777777777777777777777";
    let msg = e(request(&service, other)).await;
    assert!(
        msg.contains("field `image`") && msg.contains("not in the image repository"),
        "{msg}"
    );
    let msg = e(request(&service, "latest")).await;
    assert!(msg.contains("field `image`"), "{msg}");
    let msg = e(request(&service, OLD)).await;
    assert!(msg.contains("field `image`") && msg.contains("already"), "{msg}");
    let msg = e(UpdateRequest {
        rollback: true,
        ..request(&service, "")
    })
    .await;
    assert!(msg.contains("field `rollback`") && msg.contains("never updated"), "{msg}");
    let msg = e(UpdateRequest {
        component: "db".into(),
        ..request(&service, NEW)
    })
    .await;
    assert!(msg.contains("field `component`"), "{msg}");
    let msg = e(UpdateRequest {
        ready_timeout_s: 100_000,
        ..request(&service, NEW)
    })
    .await;
    assert!(msg.contains("field `ready_timeout`"), "{msg}");
    assert!(site.veem.rollouts.rollout(&service, "web").unwrap().is_none());
}
