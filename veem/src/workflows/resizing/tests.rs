//! Resizing a running VEE against fake VEEHs (issue 40, item 5): within
//! its maxima, admitted by the planner, undone when the host cannot.

use super::ResizeError;
use crate::api::status::status;
use crate::config::Role;
use crate::model::VeeState;
use crate::sim::{eventually, FakeSite, STANDARD};

const IMAGE: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";

/// STANDARD's `vm` (1 vCPU, 512 MiB) that may grow to 2 vCPUs and 2048 MiB.
fn resizable() -> String {
    STANDARD.replace("disk_gib = 1\n", "disk_gib = 1\nmax_vcpus = 2\nmax_memory_mib = 2048\n")
}

/// A site of fake hosts `hosts` (4 vCPUs, 4096 MiB each) with the image.
async fn site(hosts: &[&str]) -> FakeSite {
    let site = FakeSite::start(hosts, "").await;
    site.repo.blobs.lock().unwrap().insert(IMAGE.into());
    site
}

async fn running(site: &FakeSite, manifest: &str) -> String {
    let svc = site.veem.deploy.deploy(&Role::Provider("acme".into()), manifest).await.unwrap();
    let id = svc.vees[0].clone();
    eventually("running", || site.veem.core.vee(&id).unwrap().state == VeeState::Running).await;
    id
}

#[tokio::test]
async fn grows_and_shrinks_in_place_within_its_maxima() {
    let site = site(&["h1"]).await;
    let id = running(&site, &resizable()).await;
    let v = site.veem.core.vee(&id).unwrap();
    assert_eq!((v.vcpus, v.memory_mib, v.max_vcpus, v.max_memory_mib), (1, 512, 2, 2048));
    let h = site.host(v.host().unwrap());
    let spec = h.spec(&id).unwrap();
    assert_eq!(
        (spec.max_vcpus, spec.max_memory_mib),
        (2, 2048),
        "the domain is made with the maxima"
    );

    let v = site.veem.resizing.resize(&id, Some(2), Some(1536)).await.unwrap();
    assert_eq!((v.vcpus, v.memory_mib), (2, 1536));
    assert!(
        h.calls().contains(&format!("resize {id} vcpus=2 memory_mib=1536")),
        "{:?}",
        h.calls()
    );
    let r = site.veem.core.planner.lock().unwrap().reservation(&id).unwrap().resources;
    assert_eq!((r.vcpus, r.memory_mib), (2, 1536), "the planner holds the new size");
    assert!(site
        .events(&id)
        .iter()
        .any(|e| e.starts_with("resized: 1 -> 2 vCPUs, 512 -> 1536 MiB")));
    let v = site.veem.resizing.resize(&id, None, Some(512)).await.unwrap();
    assert_eq!((v.vcpus, v.memory_mib), (2, 512));

    // Beyond its maxima, or zero: the field named, nothing changed.
    for (vcpus, memory, field) in [(Some(3), None, "vcpus"), (None, Some(4096), "memory_mib"), (Some(0), None, "vcpus")] {
        let err = site.veem.resizing.resize(&id, vcpus, memory).await.unwrap_err();
        assert!(matches!(&err, ResizeError::Field { field: f, .. } if *f == field), "{err}");
        let s = status(err);
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(s.message().contains(&format!("field `{field}`")), "{}", s.message());
    }
    assert_eq!(site.veem.core.vee(&id).unwrap().memory_mib, 512);
}

#[tokio::test]
async fn no_room_on_its_host_or_a_host_that_cannot_changes_nothing() {
    // One host of 4096 MiB; another VEE holds 3200 MiB: 384 MiB free.
    let site = site(&["h1"]).await;
    let big = STANDARD
        .replace("memory_mib = 512", "memory_mib = 3200")
        .replace("name = \"vm\"", "name = \"big\"");
    running(&site, &big).await;
    let id = running(&site, &resizable()).await;
    let err = site.veem.resizing.resize(&id, None, Some(1024)).await.unwrap_err();
    assert!(matches!(err, ResizeError::NoRoom { .. }), "{err}");
    let s = status(err);
    assert_eq!(s.code(), tonic::Code::FailedPrecondition);
    assert!(s.message().contains("no room for") && s.message().contains("h1"), "{}", s.message());
    let r = site.veem.core.planner.lock().unwrap().reservation(&id).unwrap().resources;
    assert_eq!(r.memory_mib, 512);

    // The host refuses (a guest without the balloon driver, a machine
    // without hot-plug): the reservation goes back.
    site.hosts[0].fail("Resize", tonic::Code::FailedPrecondition, "unsupported: vCPU hot-plug");
    let s = status(site.veem.resizing.resize(&id, Some(2), None).await.unwrap_err());
    assert_eq!(s.code(), tonic::Code::FailedPrecondition, "the host's refusal is the site's");
    assert!(
        s.message().contains("was not resized on h1") && s.message().contains("vCPU hot-plug"),
        "{}",
        s.message()
    );
    let r = site.veem.core.planner.lock().unwrap().reservation(&id).unwrap().resources;
    assert_eq!(r.vcpus, 1, "given back");
    assert_eq!(site.veem.core.vee(&id).unwrap().vcpus, 1);

    // A host that does not answer: not a refusal, try again later.
    site.hosts[0].fail("Resize", tonic::Code::Unavailable, "connection refused");
    let s = status(site.veem.resizing.resize(&id, Some(2), None).await.unwrap_err());
    assert_eq!(s.code(), tonic::Code::Unavailable, "{}", s.message());
    assert_eq!(
        site.veem.core.planner.lock().unwrap().reservation(&id).unwrap().resources.vcpus,
        1,
        "given back"
    );
}

/// A VEEM that died in the middle of a resize (its reservation resized,
/// its record not) left the two apart: the next VEEM gives the
/// reservation back to the record's size and resizes the domain to it.
#[tokio::test]
async fn a_resize_cut_short_by_a_takeover_is_rolled_back_to_the_record() {
    let site = site(&["h1"]).await;
    let id = running(&site, &resizable()).await;
    let now = site.veem.core.now_slot();
    site.veem.core.planner.lock().unwrap().resize_vee(&id, 2, 1024, now).unwrap();
    site.veem.core.persist_planner().unwrap();
    let site = site.restart();
    assert_eq!(site.veem.resizing.roll_back_cut_short().await, 1);
    let held = site.veem.core.planner.lock().unwrap().reservation(&id).unwrap().resources;
    assert_eq!((held.vcpus, held.memory_mib), (1, 512), "the reservation of the record's size");
    assert!(
        site.host("h1").calls().iter().any(|c| c.starts_with("resize")),
        "{:?}",
        site.host("h1").calls()
    );
    assert!(
        site.events(&id).iter().any(|e| e.contains("a resize cut short")),
        "{:?}",
        site.events(&id)
    );
    // At rest, nothing to roll back.
    assert_eq!(site.veem.resizing.roll_back_cut_short().await, 0);
}
