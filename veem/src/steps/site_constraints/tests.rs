//! Site- and region-level constraints across peer sites.

use crate::model::Location;
use crate::sim::{FakeSite, STANDARD};
use crate::workflows::migration::{Dest, Proposer};

/// Peers site-b and site-c in region eu, site-d in region us.
const PEERS: &str = "[[peers]]\nsite_id = \"site-b\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"t\"\nregion = \"eu\"\n[peers.agreement]\nprice_per_vee_hour = 0.1\n\
[[peers]]\nsite_id = \"site-c\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"t\"\nregion = \"eu\"\n[peers.agreement]\nprice_per_vee_hour = 0.2\n\
[[peers]]\nsite_id = \"site-d\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"t\"\nregion = \"us\"\n[peers.agreement]\nprice_per_vee_hour = 0.3\n";

/// Two `vm` instances kept apart at `level`, free to go to peer sites.
/// (Admitted here as two local VEEs, their manifest then recorded with the
/// constraint: the rule is what is tested, not remote admission.)
fn apart(level: &str) -> String {
    format!(
        "{}[[constraint]]\nkind = \"anti-affinity\"\nlevel = \"{level}\"\nscope = \"instance\"\ncomponents = [\"vm\"]\n",
        free()
    )
}

/// Two `vm` instances free to go to peer sites.
fn free() -> String {
    STANDARD
        .replace("disk_gib = 1\n", "disk_gib = 1\ninstances = 2\n")
        .replace("penalty_per_hour = 36.0", "penalty_per_hour = 36.0\nmigration = \"federation\"")
}

/// Two running `vm` VEEs of a service whose manifest keeps them apart at
/// `level`.
fn admitted_apart(site: &FakeSite, level: &str) -> Vec<String> {
    let ids = site.running_service(&free());
    let v = site.veem.core.vee(&ids[0]).unwrap();
    let mut svc = site.veem.core.service(&v.service_id).unwrap();
    svc.manifest_toml = apart(level);
    let m = interfaces::manifest::Manifest::from_toml(&svc.manifest_toml).unwrap();
    svc.terms = Some(crate::domain::ServiceTerms::of(&m));
    site.veem.core.store.put(crate::store::Tree::Services, &svc.id, &svc).unwrap();
    ids
}

#[tokio::test]
async fn site_level_anti_affinity_never_puts_two_instances_at_one_peer() {
    let site = FakeSite::start(&["h1", "h2"], PEERS).await;
    let ids = admitted_apart(&site, "site");
    let mut vees: Vec<_> = ids.iter().map(|id| site.veem.core.vee(id).unwrap()).collect();
    vees[0].location = Location::Site("site-b".into());
    let constraints = site.veem.site_constraints.constraints_of(&vees[1]);
    let why = site
        .veem
        .site_constraints
        .site_refusal(&vees[1], "site-b", &vees, &constraints)
        .unwrap();
    assert_eq!(why, "site-level anti-affinity keeps vm-1 apart from vm-0 (at site site-b)");
    assert_eq!(
        site.veem.site_constraints.site_refusal(&vees[1], "site-c", &vees, &constraints),
        None
    );
    // A manual move there is refused with the reason; another peer is not.
    site.veem.core.save_vee(&vees[0]).unwrap();
    let e = site
        .veem
        .migration
        .propose(&vees[1].id, Dest::Site("site-b".into()), "maintenance", Proposer::Operator)
        .unwrap_err();
    assert!(format!("{e:#}").contains("apart from vm-0 (at site site-b)"), "{e:#}");
    site.veem
        .migration
        .propose(&vees[1].id, Dest::Site("site-c".into()), "maintenance", Proposer::Operator)
        .unwrap();
}

#[tokio::test]
async fn region_level_constraints_read_the_peers_region_labels() {
    let site = FakeSite::start(&["h1", "h2"], PEERS).await;
    let ids = admitted_apart(&site, "region");
    let mut vees: Vec<_> = ids.iter().map(|id| site.veem.core.vee(id).unwrap()).collect();
    vees[0].location = Location::Site("site-b".into());
    let constraints = site.veem.site_constraints.constraints_of(&vees[1]);
    // site-c shares site-b's region; site-d does not.
    let why = site
        .veem
        .site_constraints
        .site_refusal(&vees[1], "site-c", &vees, &constraints)
        .unwrap();
    assert_eq!(why, "region-level anti-affinity keeps vm-1 apart from vm-0 (at region eu)");
    assert_eq!(
        site.veem.site_constraints.site_refusal(&vees[1], "site-d", &vees, &constraints),
        None
    );
    // Affinity at site level: only where the other one is.
    let together: Vec<_> = constraints
        .iter()
        .map(|c| interfaces::manifest::Constraint {
            kind: interfaces::manifest::ConstraintKind::Affinity,
            level: interfaces::manifest::ConstraintLevel::Site,
            ..c.clone()
        })
        .collect();
    assert_eq!(site.veem.site_constraints.site_refusal(&vees[1], "site-b", &vees, &together), None);
    let why = site
        .veem
        .site_constraints
        .site_refusal(&vees[1], "site-d", &vees, &together)
        .unwrap();
    assert_eq!(why, "site-level affinity keeps vm-1 together with vm-0 (at site site-b)");
}
