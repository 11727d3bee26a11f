//! The control plane under chaos across sites (issue 52): site A's VEEM
//! killed (a failpoint aborts it, as kill -9 would) at each step of a
//! migration to its peer site B and of one coming home from B, then
//! started again, as a standby taking over would. Each time the VEE ends
//! running exactly once (on one site's host: not both, not none), where
//! site A says it runs; no migration is left approved or running at
//! either site; it can be checkpointed, and moved again (the next step
//! moves it).

use std::time::Duration;

use e2e::lab;
use e2e::site::{self, Veem, ACME, OPERATOR};
use e2e::two_sites::TwoSites;
use interfaces::vmi::*;

/// A site of the lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    A,
    B,
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_site_a_veem_killed_at_any_step_of_a_cross_site_migration_leaves_its_vee_running_once() {
    let _lab = lab::lock();
    let mut l = TwoSites::start("faults-xsite", "").await;
    let (_, vee) = l.deploy_one(&mut l.a.client(ACME).await).await;
    // (failpoint, where the migration goes, where the VEE ends): killed
    // once B prepared (rolled back), once the VEE was sent (completed),
    // once B or A's host completed it (recorded done); to B and home.
    for (point, to, ends) in [
        ("migration-after-prepare", Side::B, Side::A),
        ("migration-after-send", Side::B, Side::B),
        ("migration-after-send", Side::A, Side::A),
        ("migration-after-complete", Side::B, Side::B),
        ("migration-after-complete", Side::A, Side::A),
    ] {
        let after = format!("{point} to {to:?}");
        l.a.arm(point).await;
        let (to_site, to_host) = match to {
            Side::B => ("site-b", String::new()),
            Side::A => ("", l.a1.host.clone()),
        };
        // Approved before the VEEM dies: the migration runs on its own.
        let m = site::approved(&l.a, &vee, to_site, &to_host).await;
        l.a.restart_after_failpoint().await;
        let end = site::wait_migration(&l.a, &m.migration_id, Duration::from_secs(180)).await;
        let expected = if ends == to { MigrationState::Done } else { MigrationState::Failed };
        assert_eq!(end.state(), expected, "after {after}: {end:?}");
        runs_once(&l, &vee, ends, &after).await;
    }
}

/// `vee` runs at `side` alone and site A says so; no migration of it is
/// open at either site; a checkpoint of it is taken.
async fn runs_once(l: &TwoSites, vee: &str, side: Side, after: &str) {
    let info =
        l.a.wait_vee(vee, &format!("running after {after}"), Duration::from_secs(120), |i| {
            i.state() == VeeState::Running
        })
        .await;
    let (location, copies) = match side {
        Side::A => (format!("local ({})", l.a1.host), (1, 0)),
        Side::B => ("remote (site-b)".to_string(), (0, 1)),
    };
    assert_eq!(info.location, location, "after {after}");
    let count = |d: Vec<interfaces::vhi::DomainInfo>| d.iter().filter(|d| d.vee_id == vee).count();
    let (at_a, at_b) = (count(l.a1.domains().await), count(l.b1.domains().await));
    assert_eq!((at_a, at_b), copies, "after {after}: copies at A and at B");
    for veem in [&l.a, &l.b] {
        let open = open_migrations(veem, vee).await;
        assert!(open.is_empty(), "after {after}: at {}: {open:?}", veem.site_id);
    }
    site::vee_action(&mut l.a.client(ACME).await, vee, Action::Checkpoint)
        .await
        .unwrap_or_else(|e| panic!("after {after}: not checkpointable: {e:?}"));
}

/// The migrations of `vee` that `veem`'s operator sees approved or running.
async fn open_migrations(veem: &Veem, vee: &str) -> Vec<MigrationInfo> {
    let all = veem
        .client(OPERATOR)
        .await
        .list_migrations(ListMigrationsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .migrations;
    all.into_iter()
        .filter(|m| m.vee_id == vee && matches!(m.state(), MigrationState::Approved | MigrationState::Running))
        .collect()
}
