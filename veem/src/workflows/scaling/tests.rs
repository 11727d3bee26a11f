//! Scaling a component by hand against fake VEEHs (issue 40, item 1):
//! growing through the planner with the service's constraints and
//! networks, all or nothing; shrinking the highest indices with a clean
//! stop; survivors keep their index, name and addresses.

use crate::config::Role;
use crate::model::{VeeRec, VeeState};
use crate::sim::{eventually, FakeSite, STANDARD};

const IMAGE: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";
const POOLS: &str = "[networks]\npool = \"10.240.0.0/23\"\nexternal_pool = \"192.0.2.0/29\"\n";

/// STANDARD's `vm` as `web`, `n` instances on one host each, on an
/// internal and an external network.
fn web(n: u32) -> String {
    STANDARD.replace("name = \"vm\"", "name = \"web\"").replace(
        "disk_gib = 1\n",
        &format!("disk_gib = 1\ninstances = {n}\nnetworks = [\"backend\", \"public\"]\nuser_data = \"#cloud-config\\n\"\n"),
    ) + "[[network]]\nname = \"backend\"\nkind = \"internal\"\n\
           [[network]]\nname = \"public\"\nkind = \"external\"\nports = [80]\n\
           [[constraint]]\nkind = \"anti-affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"web\"]\n"
}

async fn site(hosts: &[&str]) -> FakeSite {
    let site = FakeSite::start(hosts, POOLS).await;
    site.repo.blobs.lock().unwrap().insert(IMAGE.into());
    site
}

/// The live instances of `service`, by index: (index, host, addresses).
fn instances(site: &FakeSite, service: &str) -> Vec<(u32, String, Vec<String>)> {
    let mut v: Vec<VeeRec> = site
        .veem
        .core
        .vees_where(|v| v.service_id == service && v.state != VeeState::Terminated);
    v.sort_by_key(|v| v.instance);
    v.iter()
        .map(|v| {
            let nics = v.nics.iter().map(|n| format!("{} {:?}", n.address, n.external)).collect();
            (v.instance, v.host().unwrap_or("-").to_string(), nics)
        })
        .collect()
}

async fn all_running(site: &FakeSite, service: &str) {
    for v in site
        .veem
        .core
        .vees_where(|v| v.service_id == service && v.state != VeeState::Terminated)
    {
        eventually("running", || site.veem.core.vee(&v.id).unwrap().state == VeeState::Running).await;
    }
}

#[tokio::test]
async fn grows_through_the_planner_and_shrinks_the_highest_indices() {
    let site = site(&["h1", "h2", "h3"]).await;
    let svc = site.veem.deploy.deploy(&Role::Provider("acme".into()), &web(1)).await.unwrap();
    all_running(&site, &svc.id).await;
    let first = instances(&site, &svc.id);
    let grown = site.veem.scaling.scale(&svc.id, "web", 3).await.unwrap();
    assert_eq!(grown.vees.len(), 3);
    all_running(&site, &svc.id).await;
    let three = instances(&site, &svc.id);
    assert_eq!(three[0], first[0], "the first instance is where it was, as it was");
    assert_eq!(three.iter().map(|i| i.0).collect::<Vec<_>>(), [0, 1, 2]);
    // Anti-affinity with the instance already placed: one host each.
    let hosts: std::collections::BTreeSet<&String> = three.iter().map(|i| &i.1).collect();
    assert_eq!(hosts.len(), 3);
    // Each new one has its own addresses and its own host name.
    let addresses: std::collections::BTreeSet<&String> = three.iter().flat_map(|i| &i.2).collect();
    assert_eq!(addresses.len(), 6, "{three:?}");
    let v2 = site.veem.core.vees_where(|v| v.service_id == svc.id && v.instance == 2).remove(0);
    let spec = site.host(v2.host().unwrap()).spec(&v2.id).unwrap();
    assert_eq!(spec.cloud_init.unwrap().hostname, "web-2");
    // The member tables the hosts hold list all three.
    let vni = grown.networks[0].vni;
    eventually("three members", || {
        let h = site.host(v2.host().unwrap());
        let s = h.script.lock().unwrap();
        s.networks.get(&vni).is_some_and(|m| m.len() == 3)
    })
    .await;

    // A fourth does not fit (one host each): refused, nothing changes.
    let before = (instances(&site, &svc.id), site.veem.core.planner.lock().unwrap().revision());
    let e = site.veem.scaling.scale(&svc.id, "web", 4).await.unwrap_err();
    assert!(format!("{e:#}").contains("no host can take it"), "{e:#}");
    assert_eq!(
        (instances(&site, &svc.id), site.veem.core.planner.lock().unwrap().revision()),
        before
    );

    // Down to 1: instances 2 and 1 stop cleanly; 0 stays as it was.
    let victims: Vec<VeeRec> = site.veem.core.vees_where(|v| v.service_id == svc.id && v.instance > 0);
    site.veem.scaling.scale(&svc.id, "web", 1).await.unwrap();
    assert_eq!(instances(&site, &svc.id), first);
    for v in &victims {
        assert_eq!(site.veem.core.vee(&v.id).unwrap().state, VeeState::Terminated);
        let calls = site.host(v.host().unwrap()).calls();
        assert!(calls.contains(&format!("shutdown {}", v.id)), "{calls:?}");
        assert!(site.veem.core.planner.lock().unwrap().reservation(&v.id).is_none());
    }
    // Up again: the free indices and addresses are reused.
    site.veem.scaling.scale(&svc.id, "web", 2).await.unwrap();
    let again = instances(&site, &svc.id);
    assert_eq!(again[1].0, 1);
    assert_eq!(again[1].2, three[1].2, "instance 1 gets the lowest free addresses again");
}

#[tokio::test]
async fn bad_requests_name_the_field() {
    let site = site(&["h1"]).await;
    let svc = site.veem.deploy.deploy(&Role::Provider("acme".into()), &web(1)).await.unwrap();
    let e = site.veem.scaling.scale(&svc.id, "db", 2).await.unwrap_err().to_string();
    assert!(e.contains("field `component`"), "{e}");
    let e = site.veem.scaling.scale(&svc.id, "web", 1_000_000).await.unwrap_err().to_string();
    assert!(e.contains("field `instances`"), "{e}");
    let e = site.veem.scaling.scale("nope", "web", 2).await.unwrap_err().to_string();
    assert!(e.contains("not found"), "{e}");
    // The same count: nothing to do.
    let same = site.veem.scaling.scale(&svc.id, "web", 1).await.unwrap();
    assert_eq!(same.vees, svc.vees);
}

/// Site A's agreement with site B, and B's with A (B admits A's VEEs).
const A_PEERS_WITH_B: &str = "[[peers]]\nsite_id = \"site-b\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"a-to-b-token\"\n\
    [peers.agreement]\nprice_per_vee_hour = 0.1\n";
const B_TRUSTS_A: &str = "[[tokens]]\ntoken = \"a-to-b-token\"\nrole = \"peer\"\nname = \"site-a\"\n\
    [[peers]]\nsite_id = \"site-a\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"b-to-a-token\"\n\
    [peers.agreement]\nprice_per_vee_hour = 0.1\n";

/// A full site grows at its peer when the service's SLA allows peer sites:
/// the new instance runs at site B with its own addresses, the member
/// tables name it, and shrinking stops it there.
#[tokio::test]
async fn a_scale_out_the_site_cannot_hold_goes_to_a_peer_site() {
    let a = FakeSite::start_site("site-a", &["a1"], &format!("{POOLS}{A_PEERS_WITH_B}"));
    let b = FakeSite::start_site("site-b", &["b1"], B_TRUSTS_A);
    for s in [&a, &b] {
        s.repo.blobs.lock().unwrap().insert(IMAGE.into());
    }
    a.peer_with(&b, "a-to-b-token");
    // Without service networks (stretching them to a peer needs an
    // overlay in the agreement).
    let m = STANDARD
        .replace("name = \"vm\"", "name = \"web\"")
        .replace("penalty_per_hour = 36.0", "penalty_per_hour = 36.0\nmigration = \"federation\"")
        + "[[constraint]]\nkind = \"anti-affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"web\"]\n";
    let svc = a.veem.deploy.deploy(&Role::Provider("acme".into()), &m).await.unwrap();
    all_running(&a, &svc.id).await;
    // One host, one instance per host: the second goes to site B.
    let grown = a.veem.scaling.scale(&svc.id, "web", 2).await.unwrap();
    assert_eq!(grown.vees.len(), 2);
    let second = a.veem.core.vees_where(|v| v.service_id == svc.id && v.instance == 1).remove(0);
    assert_eq!(
        (second.state, second.location.clone()),
        (VeeState::Running, crate::model::Location::Site("site-b".into()))
    );
    assert!(b.host("b1").runs(&second.id), "site B runs it");
    let at_b = b.veem.core.vee(&second.id).unwrap();
    assert_eq!(at_b.for_peer.as_deref(), Some("site-a"));
    assert!(a
        .veem
        .core
        .store
        .list::<crate::steps::intents::Intent>(crate::store::Tree::Intents)
        .unwrap()
        .is_empty());
    // Back to one: stopped at site B.
    a.veem.scaling.scale(&svc.id, "web", 1).await.unwrap();
    assert_eq!(a.veem.core.vee(&second.id).unwrap().state, VeeState::Terminated);
    eventually("gone from B", || !b.host("b1").runs(&second.id)).await;

    // Without peer sites in its SLA: refused with the planner's reason,
    // nothing asked of site B.
    let local = STANDARD
        .replace("name = \"shop\"", "name = \"local\"")
        .replace("name = \"vm\"", "name = \"web\"")
        .replace("memory_mib = 512", "memory_mib = 3000");
    let svc2 = a.veem.deploy.deploy(&Role::Provider("acme".into()), &local).await.unwrap();
    let at_b = b.veem.core.vees_where(|_| true).len();
    let e = format!("{:#}", a.veem.scaling.scale(&svc2.id, "web", 2).await.unwrap_err());
    assert!(e.contains("cannot grow") && !e.contains("peer site"), "{e}");
    assert_eq!(b.veem.core.vees_where(|_| true).len(), at_b);
}
