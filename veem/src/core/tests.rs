//! Unit tests of the core: admissions committed whole, transitions
//! checked, two VEEMs over one database, the task set a stop drains.

use crate::model::VeeState;
use crate::sim::{FakeSite, STANDARD};

#[tokio::test]
async fn an_admissions_records_and_reservation_are_all_committed_and_read_back_after_a_restart() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    let vees = site.running_service(STANDARD);
    let service = site.veem.core.vee(&vees[0]).unwrap().service_id;
    let site = site.restart();
    assert_eq!(site.veem.core.service(&service).unwrap().vees, vees);
    assert!(site.veem.core.vee(&vees[0]).is_ok());
    assert!(
        site.veem.core.planner().placement(&vees[0]).is_some(),
        "the reservation was committed with them"
    );
}

#[tokio::test]
async fn an_invalid_transition_is_refused_and_changes_nothing() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    let mut v = site.veem.core.vee(&vee).unwrap();
    let events = || {
        site.veem
            .core
            .store
            .events()
            .unwrap()
            .into_iter()
            .filter(|e| e.vee_id == vee)
            .count()
    };
    let before = events();
    let e = site
        .veem
        .core
        .transition(&mut v, VeeState::Pending, "back to the start")
        .unwrap_err();
    assert!(matches!(e, crate::core::RecordError::Transition(_)), "{e:#}");
    assert_eq!(v.state, VeeState::Running);
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Running, "nothing stored");
    assert_eq!(events(), before, "no event");
}

/// Two VEEMs of one site over one database (as a standby that took
/// over will be): a record one wrote after the other read it is not
/// overwritten by the other's stale copy, whichever write path it
/// takes; the stale VEEM reads the record again and goes on from it.
#[tokio::test]
async fn a_record_another_veem_wrote_since_it_was_read_is_not_overwritten() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    let other = site.another_veem();
    let mut theirs = other.core.vee(&vee).unwrap();
    other
        .core
        .transition(&mut theirs, VeeState::Suspended, "by the other VEEM")
        .unwrap();
    let stored = || {
        site.veem
            .core
            .store
            .get::<crate::model::VeeRec>(crate::store::Tree::Vees, &vee)
            .unwrap()
            .unwrap()
            .state
    };

    let mut mine = site.veem.core.vee(&vee).unwrap();
    assert_eq!(mine.state, VeeState::Running, "this VEEM's copy is stale");
    let e = site
        .veem
        .core
        .transition(&mut mine, VeeState::Stopped, "from a stale copy")
        .unwrap_err();
    assert!(
        matches!(e, crate::core::RecordError::Store(crate::store::StoreError::Conflict(_))),
        "{e:#}"
    );
    assert_eq!(mine.state, VeeState::Running, "the caller's copy as it was");
    assert_eq!(stored(), VeeState::Suspended, "the other VEEM's write stands");
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Suspended, "read again");

    // The commit of several records (a VEE, the planner, a migration
    // record) is refused whole the same way.
    let mut theirs = other.core.vee(&vee).unwrap();
    other
        .core
        .transition(&mut theirs, VeeState::Running, "resumed by the other VEEM")
        .unwrap();
    let mut mine = site.veem.core.vee(&vee).unwrap();
    let mut extra = crate::store::Writes::default();
    extra.put(crate::store::Tree::Meta, "marker", &1u32).unwrap();
    let e = site
        .veem
        .core
        .transition_committing(&mut mine, VeeState::Stopped, "", extra)
        .unwrap_err();
    assert!(
        matches!(e, crate::core::RecordError::Store(crate::store::StoreError::Conflict(_))),
        "{e:#}"
    );
    assert_eq!(
        site.veem.core.store.get::<u32>(crate::store::Tree::Meta, "marker").unwrap(),
        None,
        "nothing of it written"
    );
    assert_eq!(stored(), VeeState::Running);

    let mut current = site.veem.core.vee(&vee).unwrap();
    site.veem
        .core
        .transition(&mut current, VeeState::Stopped, "from what is stored")
        .unwrap();
    assert_eq!(stored(), VeeState::Stopped);
}

/// A stop waits for the background work under way, and cuts what
/// outlives the grace period (issue 37: no detached task).
#[tokio::test]
async fn a_stop_drains_the_background_work_and_cuts_it_after_the_grace_period() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    let site = FakeSite::start(&["h1"], "").await;
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    site.veem.core.spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        d.store(true, Ordering::SeqCst);
    });
    site.veem.core.spawn(std::future::pending());
    let cut = site.veem.core.drain_tasks(Duration::from_millis(500)).await;
    assert!(done.load(Ordering::SeqCst), "the finite task was waited for");
    assert_eq!(cut, 1, "the endless one is cut");
}

/// A VEE record's commit that waits (for etcd, a slow disk) holds no lock
/// of the record cache: the site's other work reads its records meanwhile,
/// and the record is the written one once the commit ends.
#[tokio::test]
async fn a_commit_under_way_does_not_hold_up_readers_of_the_records() {
    let engine = std::sync::Arc::new(crate::sim::ObservedEngine::default());
    let store = crate::store::Store::on(engine.clone(), "gated").unwrap();
    let site = FakeSite::start_on("site-a", &["h1"], "", store);
    let vee = site.running_service(STANDARD).remove(0);
    let (entered, release) = engine.arm();
    let writer = {
        let (veem, mut v) = (site.veem.clone(), site.veem.core.vee(&vee).unwrap());
        std::thread::spawn(move || veem.core.transition(&mut v, VeeState::Suspended, "slowly written"))
    };
    entered.recv_timeout(std::time::Duration::from_secs(5)).expect("the commit waits");
    let (answer, read) = std::sync::mpsc::channel();
    {
        let (veem, vee) = (site.veem.clone(), vee.clone());
        std::thread::spawn(move || answer.send(veem.core.vee(&vee).map(|v| v.state).ok()));
    }
    let during = read.recv_timeout(std::time::Duration::from_secs(2));
    release.send(()).unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(
        during,
        Ok(Some(VeeState::Running)),
        "read while the commit waited: the record as it was"
    );
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Suspended);
}
