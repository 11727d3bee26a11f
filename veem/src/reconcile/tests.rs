//! Reconciliation against fake VEEHs: at start-up the records and what the
//! hosts run are made to agree, and a host that cannot be asked changes
//! nothing.

use tonic::Code;

use crate::fakes::{FakeSite, STANDARD};
use crate::model::VeeState;

#[tokio::test]
async fn a_domain_no_record_places_on_the_host_is_destroyed() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    site.host("h1").script.lock().unwrap().running.insert("stray".into());
    site.veem.reconcile().await.unwrap();
    assert!(!site.host("h1").runs("stray"));
    assert!(site.host("h1").calls().contains(&"destroy stray".to_string()));
    assert!(site.host("h1").runs(&vee), "the recorded VEE is left alone");
    assert_eq!(site.veem.vee(&vee).unwrap().state, VeeState::Running);
}

#[tokio::test]
async fn a_running_vee_its_host_does_not_run_is_failed() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    site.host("h1").script.lock().unwrap().running.remove(&vee);
    site.veem.reconcile().await.unwrap();
    assert_eq!(site.veem.vee(&vee).unwrap().state, VeeState::Failed);
    assert!(
        site.events(&vee).iter().any(|e| e.contains("not running on h1")),
        "{:?}",
        site.events(&vee)
    );
}

#[tokio::test]
async fn a_host_that_cannot_be_asked_changes_no_record() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    site.host("h1").script.lock().unwrap().running.remove(&vee);
    site.host("h1").fail("ListDomains", Code::Unavailable, "connection refused");
    site.veem.reconcile().await.unwrap();
    assert_eq!(site.veem.vee(&vee).unwrap().state, VeeState::Running, "not knowing is not failing");
}
