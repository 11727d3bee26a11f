//! The in-site live migration workflow against fake VEEHs: the VEE moves
//! when both hosts do their part, and stays running where it was when the
//! destination refuses or the source fails mid-way.

use tonic::Code;

use crate::fakes::{FakeSite, STANDARD};
use crate::migration::Dest;
use crate::model::{Location, MigrationState, VeeState};

/// A site of two hosts running one VEE; returns it, the VEE, its host and
/// the other host.
async fn one_vee_two_hosts() -> (FakeSite, String, String, String) {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    let from = site.veem.vee(&vee).unwrap().host().unwrap().to_string();
    let to = if from == "h1" { "h2" } else { "h1" }.to_string();
    (site, vee, from, to)
}

/// Proposes and approves moving `vee` to host `to`; the migration once it
/// ended.
async fn migrate(site: &FakeSite, vee: &str, to: &str) -> crate::model::MigrationRec {
    let m = site.veem.propose(vee, Dest::Host(to.into()), "maintenance", "test").unwrap();
    site.veem.approve(&m.id, "operator").unwrap();
    site.finished(&m.id).await
}

#[tokio::test]
async fn a_live_migration_moves_the_vee_and_its_reservation_to_the_destination() {
    let (site, vee, from, to) = one_vee_two_hosts().await;
    let m = migrate(&site, &vee, &to).await;
    assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
    let v = site.veem.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host(to.clone())));
    assert!(site.host(&to).runs(&vee) && !site.host(&from).runs(&vee));
    assert_eq!(site.veem.planner().placement(&vee).unwrap().host, to);
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
    let m = migrate(&site, &vee, &to).await;
    assert_eq!(m.state, MigrationState::Failed);
    assert!(
        m.detail.contains("destination refused") && m.detail.contains("no room for 512 MiB"),
        "{}",
        m.detail
    );
    let v = site.veem.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host(from.clone())));
    assert!(site.host(&from).runs(&vee));
    assert!(
        !site.host(&from).calls().iter().any(|c| c.starts_with("migrate_out")),
        "nothing was sent"
    );
    assert_eq!(site.veem.planner().placement(&vee).unwrap().host, from, "the reservation stays");
}

#[tokio::test]
async fn a_source_that_fails_mid_way_keeps_the_vee_and_the_destination_is_cleaned() {
    let (site, vee, from, to) = one_vee_two_hosts().await;
    site.host(&from)
        .fail("MigrateOut", Code::Internal, "migration stream: connection reset by peer");
    let m = migrate(&site, &vee, &to).await;
    assert_eq!(m.state, MigrationState::Failed);
    assert!(m.detail.contains("connection reset by peer"), "{}", m.detail);
    let v = site.veem.vee(&vee).unwrap();
    assert_eq!((v.state, v.location), (VeeState::Running, Location::Host(from.clone())));
    assert!(site.host(&from).runs(&vee));
    assert!(
        site.host(&to).calls().contains(&format!("abort_incoming {vee}")),
        "what the destination prepared is removed: {:?}",
        site.host(&to).calls()
    );
    assert!(!site.host(&to).runs(&vee));
}

#[tokio::test]
async fn a_vee_whose_policy_forbids_moves_is_never_proposed() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    let pinned = STANDARD.replace("penalty_per_hour = 36.0", "penalty_per_hour = 36.0\nmigration = \"none\"");
    let vee = site.running_service(&pinned).remove(0);
    let e = site.veem.propose(&vee, Dest::Host("h2".into()), "maintenance", "test").unwrap_err();
    assert!(e.to_string().contains("migration policy is \"none\""), "{e}");
    assert!(site
        .veem
        .store
        .list::<crate::model::MigrationRec>(crate::store::Tree::Migrations)
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn after_a_restart_the_migration_the_vee_and_the_reservation_agree() {
    let (site, vee, _, to) = one_vee_two_hosts().await;
    let m = migrate(&site, &vee, &to).await;
    let site = site.restart();
    assert_eq!(site.veem.migration(&m.id).unwrap().state, MigrationState::Done);
    assert_eq!(site.veem.vee(&vee).unwrap().location, Location::Host(to.clone()));
    assert_eq!(site.veem.planner().placement(&vee).unwrap().host, to, "committed with them");
}
