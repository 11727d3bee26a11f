//! Reconciliation against fake VEEHs: at start-up the records and what the
//! hosts run are made to agree, and a host that cannot be asked changes
//! nothing.

use tonic::Code;

use crate::model::VeeState;
use crate::sim::{FakeSite, STANDARD};
use crate::workflows::reconcile::Strays;

#[tokio::test]
async fn a_domain_no_record_places_on_the_host_is_destroyed() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    site.host("h1").script.lock().unwrap().running.insert("stray".into());
    site.veem.reconcile.reconcile(Strays::KeepWithoutRecords).await.unwrap();
    assert!(!site.host("h1").runs("stray"));
    assert!(site.host("h1").calls().contains(&"destroy stray".to_string()));
    assert!(site.host("h1").runs(&vee), "the recorded VEE is left alone");
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Running);
}

#[tokio::test]
async fn a_running_vee_its_host_does_not_run_is_failed_and_restored_there() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    site.host("h1").script.lock().unwrap().running.remove(&vee);
    site.veem.reconcile.reconcile(Strays::KeepWithoutRecords).await.unwrap();
    assert!(
        site.events(&vee).iter().any(|e| e.contains("not running on h1")),
        "{:?}",
        site.events(&vee)
    );
    crate::sim::eventually("restored on h1", || {
        site.veem.core.vee(&vee).unwrap().state == VeeState::Running && site.host("h1").runs(&vee)
    })
    .await;
    assert!(
        site.host("h1").calls().iter().any(|c| c.starts_with("restore")),
        "{:?}",
        site.host("h1").calls()
    );
}

#[tokio::test]
async fn a_host_that_cannot_be_asked_changes_no_record() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    site.host("h1").script.lock().unwrap().running.remove(&vee);
    site.host("h1").fail("ListDomains", Code::Unavailable, "connection refused");
    site.veem.reconcile.reconcile(Strays::KeepWithoutRecords).await.unwrap();
    assert_eq!(
        site.veem.core.vee(&vee).unwrap().state,
        VeeState::Running,
        "not knowing is not failing"
    );
}

#[tokio::test(start_paused = true)]
async fn the_hosts_are_listed_side_by_side_and_one_that_never_answers_holds_nothing() {
    let site = FakeSite::start(&["h1", "h2", "h3", "h4"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    for h in ["h1", "h2", "h3"] {
        let mut s = site.host(h).script.lock().unwrap();
        s.list_domains_ms = 5_000;
        s.running.insert(format!("stray-{h}"));
    }
    // h4 accepts the call and never answers it.
    site.host("h4").script.lock().unwrap().list_domains_ms = 3_600_000;
    site.host("h4").script.lock().unwrap().running.insert("stray-h4".into());

    let t0 = tokio::time::Instant::now();
    site.veem.reconcile.reconcile(Strays::KeepWithoutRecords).await.unwrap();
    let took = t0.elapsed();

    // Three listings of 5 s in a row and a host that never answers would
    // be 15 s and an hour; side by side, each host given 10 s: 10 s.
    assert!(took < std::time::Duration::from_secs(12), "reconcile took {took:?}");
    for h in ["h1", "h2", "h3"] {
        assert!(!site.host(h).runs(&format!("stray-{h}")), "the stray on {h} is destroyed");
    }
    assert!(
        site.host("h4").runs("stray-h4"),
        "nothing is done on a host that did not list its domains"
    );
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Running);
}

#[tokio::test]
async fn a_host_that_answers_as_another_is_never_acted_on() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    site.host("h1").script.lock().unwrap().running.insert("stray".into());
    for (host, at) in [("h9", "site-a"), ("h1", "site-b")] {
        // Behind h1's endpoint answers another site's or another host's VEEH
        // (a port clash): no heartbeat counts, nothing is destroyed there.
        site.host("h1").script.lock().unwrap().answers_as = Some((host.into(), at.into()));
        let (health, info) = site.veem.core.hosts.heartbeat("h1", 3).await;
        assert_eq!((health, info.is_some()), (crate::hosts::Health::Unknown, false), "{host}@{at}");
        let e = format!("{:#}", site.veem.core.hosts.identify("h1").await.unwrap_err());
        assert!(e.contains(&format!("answers as host \"{host}\" of site \"{at}\"")), "{e}");
        site.veem.reconcile.reconcile(Strays::Destroy).await.unwrap();
        assert!(site.host("h1").runs("stray") && site.host("h1").runs(&vee));
        assert!(!site
            .host("h1")
            .calls()
            .iter()
            .any(|c| c.starts_with("destroy") || c.starts_with("list")));
    }
    // Itself again: heard, and reconciled.
    site.host("h1").script.lock().unwrap().answers_as = None;
    assert_eq!(site.veem.core.hosts.heartbeat("h1", 3).await.0, crate::hosts::Health::Up);
    site.veem.reconcile.reconcile(Strays::KeepWithoutRecords).await.unwrap();
    assert!(!site.host("h1").runs("stray"));
}

#[tokio::test]
async fn an_empty_database_leaves_the_hosts_domains_alone_until_an_operator_says_so() {
    let site = FakeSite::start(&["h1"], "").await;
    site.host("h1").script.lock().unwrap().running.insert("someones-vee".into());
    site.veem.reconcile.reconcile(Strays::KeepWithoutRecords).await.unwrap();
    assert!(site.host("h1").runs("someones-vee"), "destroyed by a VEEM that knows nothing");
    assert!(
        site.events("someones-vee").iter().any(|e| e.contains("left alone")),
        "{:?}",
        site.events("someones-vee")
    );
    site.veem.reconcile.reconcile(Strays::Destroy).await.unwrap();
    assert!(!site.host("h1").runs("someones-vee"));
}

#[tokio::test]
async fn another_sites_database_is_refused() {
    let site = FakeSite::start(&["h1"], "").await;
    let mut cfg = site.veem.core.config().clone();
    cfg.site_id = "site-b".into();
    let e = format!("{:#}", site.restart_as(cfg).err().expect("refused"));
    assert!(e.contains("belongs to site \"site-a\", not to \"site-b\""), "{e}");
}

#[tokio::test]
async fn a_vee_destroyed_behind_the_veems_back_is_restored_on_its_host_within_two_rounds() {
    use crate::workflows::reconcile::DomainWatch;
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    site.veem.core.hosts.heartbeat("h1", 3).await;
    let mut watch = DomainWatch::default();
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert!(watch.missing.is_empty(), "its domain runs");
    site.host("h1").script.lock().unwrap().running.remove(&vee);
    // While an operation holds the VEE, its absence is not counted.
    let held = site.veem.core.lock_vee(&vee).await;
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert!(watch.missing.is_empty());
    drop(held);
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(watch.missing(&vee), Some(1));
    assert_eq!(
        site.veem.core.vee(&vee).unwrap().state,
        VeeState::Running,
        "one list may race an operation"
    );
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    crate::sim::eventually("restored", || {
        site.host("h1").runs(&vee) && site.veem.core.vee(&vee).unwrap().state == VeeState::Running
    })
    .await;
    assert!(site.host("h1").calls().iter().any(|c| c.starts_with(&format!("restore {vee}"))));
    assert!(
        site.events(&vee).iter().any(|e| e.contains("vanished from h1")),
        "{:?}",
        site.events(&vee)
    );
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert!(watch.missing.is_empty());
}

/// A takeover or restart in the middle of a checkpoint (the VEEM that
/// took it gone, its record never written) leaves the VEE running where
/// its domain runs, checkpointable again: never `checkpointing` for good.
#[tokio::test]
async fn a_checkpoint_a_takeover_cut_short_leaves_the_vee_running_and_checkpointable() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    let mut v = site.veem.core.vee(&vee).unwrap();
    site.veem.core.transition(&mut v, VeeState::Checkpointing, "on h1").unwrap();
    let site = site.restart();
    site.veem.reconcile.reconcile(Strays::Destroy).await.unwrap();
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Running);
    assert!(
        site.events(&vee).iter().any(|e| e.contains("a checkpoint cut short")),
        "{:?}",
        site.events(&vee)
    );
    site.veem.lifecycle.checkpoint_vee(&vee).await.expect("checkpointed again");
    assert!(site.host("h1").runs(&vee));
}

/// A VEE recorded migrating with no migration running for it (a
/// takeover came between) is running again where its domain runs.
#[tokio::test]
async fn a_vee_migrating_without_a_running_migration_is_running_where_its_domain_is() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    let mut v = site.veem.core.vee(&vee).unwrap();
    site.veem.core.transition(&mut v, VeeState::Migrating, "to h2").unwrap();
    let site = site.restart();
    site.veem.reconcile.reconcile(Strays::Destroy).await.unwrap();
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Running);
    let to = if site.veem.core.vee(&vee).unwrap().host() == Some("h1") {
        "h2"
    } else {
        "h1"
    };
    assert_eq!(site.migrate_to_host(&vee, to).await.state, crate::model::MigrationState::Done);
}

/// A migration approved just before a takeover (never started) is run by
/// the next VEEM, not left approved for good.
#[tokio::test]
async fn a_migration_approved_before_a_takeover_is_run_by_the_next_veem() {
    use crate::model::MigrationState;
    use crate::store::Tree;
    use crate::workflows::migration::{Dest, Proposer};
    let site = FakeSite::start(&["h1", "h2"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    let to = if site.veem.core.vee(&vee).unwrap().host() == Some("h1") {
        "h2"
    } else {
        "h1"
    };
    let mut m = site
        .veem
        .migration
        .propose(&vee, Dest::Host(to.into()), "maintenance", Proposer::Operator)
        .unwrap();
    // Approved as `approve` records it, with no task to run it (the VEEM
    // that approved it is gone).
    m.advance(MigrationState::Approved).unwrap();
    site.veem.core.store.put(Tree::Migrations, &m.id, &m).unwrap();
    let site = site.restart();
    site.veem.reconcile.reconcile(Strays::Destroy).await.unwrap();
    assert_eq!(site.finished(&m.id).await.state, MigrationState::Done);
    assert_eq!(site.veem.core.vee(&vee).unwrap().host(), Some(to));
    assert!(site.host(to).runs(&vee));
}

/// A migration within the site cut short once its VEE had left its source
/// (sent, perhaps completed at the destination) is recorded done as one
/// that ran to its end: the VEE's reservation moved with it, so that it
/// migrates on.
#[tokio::test]
async fn a_migration_cut_short_after_the_send_is_done_and_the_vee_migrates_on() {
    use interfaces::vhi::vhi_service_server::VhiService;
    use interfaces::vhi::{CompleteIncomingRequest, MigrateOutRequest};
    use tonic::Request;

    use crate::model::MigrationState;
    let site = FakeSite::start(&["h1", "h2"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    let from = site.veem.core.vee(&vee).unwrap().host().unwrap().to_string();
    let to = if from == "h1" { "h2" } else { "h1" };
    // Running, the VEE migrating, sent and completed by the hosts, and
    // nothing more recorded (the VEEM died).
    let m = site.migration_cut_short(&vee, to);
    let sent = MigrateOutRequest {
        vee_id: vee.clone(),
        ..Default::default()
    };
    drop(site.host(&from).migrate_out(Request::new(sent)).await.unwrap());
    let arrived = CompleteIncomingRequest { vee_id: vee.clone() };
    site.host(to).complete_incoming(Request::new(arrived)).await.unwrap();
    let site = site.restart();
    site.veem.reconcile.reconcile(Strays::Destroy).await.unwrap();
    let m = site.veem.migration.migration(&m.id).unwrap();
    assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.host()), (VeeState::Running, Some(to)));
    assert_eq!(site.migrate_to_host(&vee, &from).await.state, MigrationState::Done);
    assert!(site.host(&from).runs(&vee) && !site.host(to).runs(&vee));
}
