//! The in-site live migration workflow against fake VEEHs: the VEE moves
//! when both hosts do their part, and stays running where it was when the
//! destination refuses or the source fails mid-way.

use tonic::Code;

use crate::model::{Location, MigrationState, VeeState};
use crate::sim::{FakeSite, STANDARD};
use crate::workflows::migration::{Dest, Proposer};

/// A site of two hosts running one VEE; returns it, the VEE, its host and
/// the other host.
async fn one_vee_two_hosts() -> (FakeSite, String, String, String) {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    let from = site.veem.core.vee(&vee).unwrap().host().unwrap().to_string();
    let to = if from == "h1" { "h2" } else { "h1" }.to_string();
    (site, vee, from, to)
}

#[tokio::test]
async fn a_live_migration_moves_the_vee_and_its_reservation_to_the_destination() {
    let (site, vee, from, to) = one_vee_two_hosts().await;
    let m = site.migrate_to_host(&vee, &to).await;
    assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host(to.clone())));
    assert!(site.host(&to).runs(&vee) && !site.host(&from).runs(&vee));
    assert_eq!(site.veem.core.planner().placement(&vee).unwrap().host, to);
    assert_eq!(
        site.host(&to).calls(),
        [format!("prepare_incoming {vee}"), format!("complete_incoming {vee}")]
    );
}

#[tokio::test]
async fn a_destination_that_refuses_leaves_the_vee_running_where_it_was() {
    let (site, vee, from, to) = one_vee_two_hosts().await;
    site.host(&to)
        .fail("PrepareIncoming", Code::ResourceExhausted, "no room for 512 MiB");
    let m = site.migrate_to_host(&vee, &to).await;
    assert_eq!(m.state, MigrationState::Failed);
    assert!(
        m.detail.contains("destination refused") && m.detail.contains("no room for 512 MiB"),
        "{}",
        m.detail
    );
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host(from.clone())));
    assert!(site.host(&from).runs(&vee));
    assert!(
        !site.host(&from).calls().iter().any(|c| c.starts_with("migrate_out")),
        "nothing was sent"
    );
    assert_eq!(
        site.veem.core.planner().placement(&vee).unwrap().host,
        from,
        "the reservation stays"
    );
}

#[tokio::test]
async fn a_source_that_fails_mid_way_keeps_the_vee_and_the_destination_is_cleaned() {
    let (site, vee, from, to) = one_vee_two_hosts().await;
    site.host(&from)
        .fail("MigrateOut", Code::Internal, "migration stream: connection reset by peer");
    let m = site.migrate_to_host(&vee, &to).await;
    assert_eq!(m.state, MigrationState::Failed);
    assert!(m.detail.contains("connection reset by peer"), "{}", m.detail);
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host(from.clone())));
    assert!(site.host(&from).runs(&vee));
    assert!(
        site.host(&to).calls().contains(&format!("abort_incoming {vee}")),
        "what the destination prepared is removed: {:?}",
        site.host(&to).calls()
    );
    assert!(!site.host(&to).runs(&vee));
}

/// The source's VEEH (or, for a VEE coming home, the peer site's VEEM)
/// went away mid-send while the hypervisor finished the migration: the
/// VEE runs at the destination, which is completed, not aborted (an
/// abort would destroy its only copy: the chaos run, issue 52).
#[tokio::test]
async fn a_send_that_failed_while_the_vee_arrived_completes_at_the_destination() {
    let (site, vee, from, to) = one_vee_two_hosts().await;
    site.host(&from).fail("MigrateOut", Code::Unavailable, "transport error");
    site.host(&from).set_running(&vee, false);
    site.host(&to).set_running(&vee, true);
    let m = site.migrate_to_host(&vee, &to).await;
    assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host(to.clone())));
    assert!(site.host(&to).runs(&vee), "{:?}", site.host(&to).calls());
    assert!(site.host(&to).calls().contains(&format!("complete_incoming {vee}")));
    assert_eq!(site.veem.core.planner().placement(&vee).unwrap().host, to);
}

/// A destination that cannot take a VEE just sent (its VEEM in a
/// takeover, its VEEH restarting) is asked again, and the migration is
/// done once it takes it: the VEE is never recorded as staying at a source
/// that no longer runs it (whose site then started a second copy: the
/// chaos run, issue 52).
#[tokio::test]
async fn a_vee_sent_is_completed_once_its_destination_takes_it() {
    let (site, vee, from, to) = one_vee_two_hosts().await;
    site.host(&to).fail("CompleteIncoming", Code::Unavailable, "restarting");
    let m = site
        .veem
        .migration
        .propose(&vee, Dest::Host(to.clone()), "maintenance", Proposer::Operator)
        .unwrap();
    site.veem.migration.approve(&m.id, "operator").unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let open = site.veem.migration.migration(&m.id).unwrap();
    assert_eq!(open.state, MigrationState::Running, "{}", open.detail);
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Migrating);
    site.host(&to).script.lock().unwrap().failing.remove("CompleteIncoming");
    let m = site.finished(&m.id).await;
    assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host(to.clone())));
    assert!(site.host(&to).runs(&vee) && !site.host(&from).runs(&vee));
}

/// A migration left running that no task runs (its destination did not
/// take the VEE in time, or a host was silent when the VEEM started) is
/// settled by the leader's next round, not left for a person: done where
/// the VEE went; while an operation holds the VEE, left alone.
#[tokio::test]
async fn a_migration_left_running_is_settled_by_the_next_round() {
    let (site, vee, from, to) = one_vee_two_hosts().await;
    let m = site.migration_cut_short(&vee, &to);
    // The hypervisor moved it; nobody recorded it.
    site.host(&from).set_running(&vee, false);
    site.host(&to).set_running(&vee, true);
    let held = site.veem.core.lock_vee(&vee).await;
    site.veem.migration.settle_left().await.unwrap();
    assert_eq!(site.veem.migration.migration(&m.id).unwrap().state, MigrationState::Running);
    drop(held);
    site.veem.migration.settle_left().await.unwrap();
    let m = site.veem.migration.migration(&m.id).unwrap();
    assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host(to.clone())));
}

/// A VEEM restarted while its source host still sends the VEE (the
/// VEEH's migration outlives the VEEM that asked for it) neither aborts
/// the destination nor records the VEE as staying: it waits, and settles
/// the migration once the source has finished (done where the VEE went).
/// Before, the restart found the domain at its source, aborted the
/// destination and failed the migration while the hypervisor still moved
/// the VEE (`lab_failed_and_interrupted_migrations_leave_exactly_one_copy`).
#[tokio::test]
async fn a_restart_waits_for_a_source_still_sending_and_settles_after() {
    let (site, vee, from, to) = one_vee_two_hosts().await;
    let m = site.migration_cut_short(&vee, &to);
    site.host(&from).script.lock().unwrap().migrating_out.insert(vee.clone());
    let migration = &site.veem.migration;
    migration.settle_left_running(&migration.hosts_running().await, true).await.unwrap();
    assert_eq!(migration.migration(&m.id).unwrap().state, MigrationState::Running);
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Migrating);
    assert!(
        !site.host(&to).calls().contains(&format!("abort_incoming {vee}")),
        "{:?}",
        site.host(&to).calls()
    );
    // The hypervisor finished: the VEE left its source.
    site.host(&from).script.lock().unwrap().migrating_out.remove(&vee);
    site.host(&from).set_running(&vee, false);
    site.host(&to).set_running(&vee, true);
    migration.settle_left().await.unwrap();
    let m = migration.migration(&m.id).unwrap();
    assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
    let v = site.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host(to.clone())));
}

/// A send for a primary site that failed on this side while the source
/// host still sends the VEE (its VEEH's migration outlives the call) is
/// not recorded as staying at the source: the migration stays running for
/// the settling round, as a restart's settling leaves it.
#[tokio::test]
async fn a_send_for_the_primary_that_failed_while_the_source_still_sends_is_left_to_settle() {
    let (site, vee, from, _) = one_vee_two_hosts().await;
    let mut v = site.veem.core.vee(&vee).unwrap();
    v.for_peer = Some("site-a".into());
    site.veem.core.save_vee(&v).unwrap();
    site.host(&from).fail("MigrateOut", Code::Unavailable, "transport error");
    site.host(&from).script.lock().unwrap().migrating_out.insert(vee.clone());
    let m = site.veem.migration.send_vee("site-a", &vee, Default::default()).await.unwrap();
    assert_eq!(m.state, MigrationState::Running, "{}", m.detail);
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Migrating);
}

#[tokio::test]
async fn a_vee_whose_policy_forbids_moves_is_never_proposed() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    let pinned = STANDARD.replace("penalty_per_hour = 36.0", "penalty_per_hour = 36.0\nmigration = \"none\"");
    let vee = site.running_service(&pinned).remove(0);
    let e = site
        .veem
        .migration
        .propose(&vee, Dest::Host("h2".into()), "maintenance", Proposer::Operator)
        .unwrap_err();
    assert!(e.to_string().contains("migration policy is \"none\""), "{e}");
    assert!(migrations(&site).is_empty());
}

#[tokio::test]
async fn after_a_restart_the_migration_the_vee_and_the_reservation_agree() {
    let (site, vee, _, to) = one_vee_two_hosts().await;
    let m = site.migrate_to_host(&vee, &to).await;
    let site = site.restart();
    assert_eq!(site.veem.migration.migration(&m.id).unwrap().state, MigrationState::Done);
    assert_eq!(site.veem.core.vee(&vee).unwrap().location, Location::Host(to.clone()));
    assert_eq!(site.veem.core.planner().placement(&vee).unwrap().host, to, "committed with them");
}

/// Runs VEEs of `vcpus` each until one lands on `host`; returns its ID.
fn vee_of_on(site: &FakeSite, vcpus: u32, host: &str) -> String {
    for _ in 0..4 {
        let m = STANDARD.replace("vcpus = 1", &format!("vcpus = {vcpus}"));
        let vee = site.running_service(&m).remove(0);
        if site.veem.core.vee(&vee).unwrap().host() == Some(host) {
            return vee;
        }
    }
    panic!("no VEE of {vcpus} vCPUs landed on {host}");
}

#[tokio::test]
async fn a_callers_reason_never_skips_the_operator_only_the_planners_does() {
    let site = FakeSite::start(&["h1", "h2"], "[migration]\nauto_approve = [\"consolidation\"]\n").await;
    let vee = site.running_service(STANDARD).remove(0);
    let to = if site.veem.core.vee(&vee).unwrap().host() == Some("h1") {
        "h2"
    } else {
        "h1"
    };
    // A provider or an operator typing the policy's reason: still waits.
    for by in [Proposer::Provider("acme".into()), Proposer::Operator] {
        let m = site
            .veem
            .migration
            .propose(&vee, Dest::Host(to.into()), "consolidation", by.clone())
            .unwrap();
        assert_eq!(m.state, MigrationState::Proposed, "{by}");
        assert_eq!(m.detail, format!("proposed by {by}"));
        site.veem.migration.reject(&m.id, "operator", "test").unwrap();
    }
    // The planner's own proposal runs on the policy.
    let m = site
        .veem
        .migration
        .propose(&vee, Dest::Host(to.into()), "consolidation", Proposer::Planner)
        .unwrap();
    assert_eq!((m.state, m.decided_by.as_str()), (MigrationState::Approved, "site policy"));
    assert_eq!(site.finished(&m.id).await.state, MigrationState::Done);
}

#[tokio::test]
async fn a_move_the_planner_cannot_keep_is_refused_with_its_reason() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    // h1 keeps 1 vCPU free; a 2-vCPU VEE on h2 cannot go there.
    let _big = vee_of_on(&site, 3, "h1");
    let vee = vee_of_on(&site, 2, "h2");
    let e = site
        .veem
        .migration
        .propose(&vee, Dest::Host("h1".into()), "maintenance", Proposer::Operator)
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(e.contains("cannot move to h1") && e.contains("free in slot"), "{e}");
    assert!(migrations(&site).is_empty());
    // Without a destination the site finds none either, and says so.
    let e = site
        .veem
        .migration
        .propose_anywhere(&vee, "requested", Proposer::Provider("acme".into()))
        .unwrap_err();
    assert!(format!("{e:#}").contains("no other host of the site can take it"), "{e:#}");
}

#[tokio::test]
async fn without_a_destination_the_site_chooses_a_host_that_can_keep_the_vee() {
    let site = FakeSite::start(&["h1", "h2", "h3"], "").await;
    // h1 is nearly full, so a VEE on h2 goes to h3.
    let _big = vee_of_on(&site, 4, "h1");
    let vee = vee_of_on(&site, 2, "h2");
    let m = site
        .veem
        .migration
        .propose_anywhere(&vee, "requested", Proposer::Provider("acme".into()))
        .unwrap();
    assert_eq!((m.to.clone(), m.state), (Dest::Host("h3".into()), MigrationState::Proposed));
    site.veem.migration.approve(&m.id, "operator").unwrap();
    assert_eq!(site.finished(&m.id).await.state, MigrationState::Done);
    assert_eq!(site.veem.core.vee(&vee).unwrap().location, Location::Host("h3".into()));
}

/// STANDARD with a second instance, both bound to one host (instance-scope
/// host affinity), on a site of `h1`, `h2` and `h3`; returns the site, the
/// VEEs, their host and another host (h1 or h2).
async fn bound_pair() -> (FakeSite, Vec<String>, String, String) {
    let site = FakeSite::start(&["h1", "h2", "h3"], "").await;
    let m = STANDARD.replace("disk_gib = 1", "disk_gib = 1\ninstances = 2")
        + "[[constraint]]\nkind = \"affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"vm\"]\n";
    let vees = site.running_service(&m);
    let at = site.veem.core.vee(&vees[0]).unwrap().host().unwrap().to_string();
    assert_eq!(site.veem.core.vee(&vees[1]).unwrap().host(), Some(at.as_str()));
    let to = if at == "h1" { "h2" } else { "h1" }.to_string();
    (site, vees, at, to)
}

/// Every migration record of the site.
fn migrations(site: &FakeSite) -> Vec<crate::model::MigrationRec> {
    site.veem.core.store.list(crate::store::Tree::Migrations).unwrap()
}

/// An operator's proposal to move `vee` to host `to`.
fn propose(site: &FakeSite, vee: &str, to: &str) -> Result<crate::model::MigrationRec, super::MigrationError> {
    site.veem
        .migration
        .propose(vee, Dest::Host(to.into()), "maintenance", Proposer::Operator)
}

#[tokio::test]
async fn moving_one_vee_of_an_affinity_set_moves_the_set_together() {
    let (site, vees, _, to) = bound_pair().await;
    let to = to.as_str();
    let m = propose(&site, &vees[1], to).unwrap();
    assert_eq!(m.set.len(), 2, "{m:?}");
    assert!(m.detail.contains("moves with its affinity set"), "{}", m.detail);
    // One approval moves both, one after the other.
    site.veem.migration.approve(&m.id, "operator").unwrap();
    for id in &m.set {
        let done = site.finished(id).await;
        assert_eq!(done.state, MigrationState::Done, "{}", done.detail);
    }
    for v in &vees {
        assert_eq!(site.veem.core.vee(v).unwrap().location, Location::Host(to.into()), "{v}");
        assert_eq!(site.veem.core.planner().placement(v).unwrap().host, to, "the planner follows: {v}");
        assert!(site.host(to).runs(v));
    }
}

#[tokio::test]
async fn a_set_member_that_cannot_move_brings_the_moved_ones_back() {
    let (site, vees, from, to) = bound_pair().await;
    let to = to.as_str();
    // The destination takes the first member, then refuses the second.
    let m = propose(&site, &vees[0], to).unwrap();
    let (first, second) = (
        site.veem.migration.migration(&m.set[0]).unwrap(),
        site.veem.migration.migration(&m.set[1]).unwrap(),
    );
    site.host(to)
        .fail_for("PrepareIncoming", &second.vee_id, Code::ResourceExhausted, "no room");
    site.veem.migration.approve(&m.id, "operator").unwrap();
    let second = site.finished(&second.id).await;
    assert_eq!(second.state, MigrationState::Failed);
    // The first comes back: the set is never left split.
    crate::sim::eventually("the set is together again", || {
        vees.iter()
            .all(|v| site.veem.core.vee(v).unwrap().location == Location::Host(from.clone()))
    })
    .await;
    for v in &vees {
        assert_eq!(site.veem.core.vee(v).unwrap().state, VeeState::Running);
        assert_eq!(site.veem.core.planner().placement(v).unwrap().host, from);
    }
    let back: Vec<_> = migrations(&site).into_iter().filter(|b| b.reason == "affinity").collect();
    assert_eq!(back.len(), 1);
    assert_eq!(
        (back[0].vee_id.as_str(), back[0].state),
        (first.vee_id.as_str(), MigrationState::Done)
    );
}

#[tokio::test]
async fn a_set_that_does_not_fit_whole_is_refused_with_the_reason() {
    let (site, vees, _, to) = bound_pair().await;
    let to = to.as_str();
    // Another service takes most of the destination: one member fits.
    let big = STANDARD
        .replace("memory_mib = 512", "memory_mib = 3500")
        .replace("name = \"shop\"", "name = \"big\"");
    loop {
        let v = site.running_service(&big).remove(0);
        if site.veem.core.vee(&v).unwrap().host() == Some(to) {
            break;
        }
    }
    let e = propose(&site, &vees[0], to).unwrap_err();
    assert!(format!("{e:#}").contains("with its affinity set"), "{e:#}");
    assert!(migrations(&site).is_empty());
}

/// Telling a destination to drop what it prepared is retried three times a
/// second apart on the VEEM's clock (which a simulation drives), not on the
/// runtime's own timers.
#[tokio::test(start_paused = true)]
async fn an_abort_the_destination_refuses_is_retried_on_the_veems_clock() {
    let (site, vee, _, to) = one_vee_two_hosts().await;
    site.host(&to).fail("AbortIncoming", Code::Unavailable, "restarting");
    let before = site.clock.waits().len();
    let aborted = site.veem.migration.abort_at(&Dest::Host(to.clone()), &vee).await;
    assert!(aborted.is_err(), "{aborted:?}");
    let asked = site.host(&to).calls().iter().filter(|c| c.starts_with("abort_incoming")).count();
    assert_eq!(asked, 3);
    let second = std::time::Duration::from_secs(1);
    assert_eq!(site.clock.waits()[before..], [second, second]);
}
