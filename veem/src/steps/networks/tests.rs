//! Service networks through Deploy, against fake VEEHs: what admission
//! assigns, that it is kept, and that a site out of addresses refuses a
//! service whole.

use crate::config::Role;
use crate::model::{ServiceRec, VeeState};
use crate::sim::{eventually, FakeSite, STANDARD};
use crate::store::Tree;

const IMAGE: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";

/// STANDARD's VEE (component `vm`) twice, on an internal and an external
/// network.
fn networked() -> String {
    STANDARD.replace(
        "disk_gib = 1\n",
        "disk_gib = 1\ninstances = 2\nnetworks = [\"backend\", \"public\"]\n",
    ) + "[[network]]\nname = \"backend\"\nkind = \"internal\"\n\
           [[network]]\nname = \"public\"\nkind = \"external\"\nports = [80]\n"
}

async fn site(networks: &str) -> FakeSite {
    let site = FakeSite::start(&["h1", "h2"], networks).await;
    site.repo.blobs.lock().unwrap().insert(IMAGE.into());
    site
}

const POOLS: &str = "[networks]\npool = \"10.240.0.0/23\"\nexternal_pool = \"192.0.2.0/29\"\n";

fn acme() -> Role {
    Role::Provider("acme".into())
}

#[tokio::test]
async fn deployed_vees_get_their_nics_and_keep_them_across_a_restart() {
    let site = site(POOLS).await;
    let svc = site.veem.deploy.deploy(&acme(), &networked()).await.unwrap();
    let nets: Vec<String> = svc.networks.iter().map(|n| format!("{} {} {}", n.name, n.cidr, n.vni)).collect();
    assert_eq!(nets, ["backend 10.240.0.0/24 100", "public 10.240.1.0/24 101"]);
    let v0 = site.veem.core.vee(&svc.vees[0]).unwrap();
    let v1 = site.veem.core.vee(&svc.vees[1]).unwrap();
    let show = |v: &crate::model::VeeRec| -> Vec<String> {
        v.nics
            .iter()
            .map(|n| format!("{} {} {} {:?}", n.network, n.mac, n.address, n.external.map(|a| a.to_string())))
            .collect()
    };
    assert_eq!(
        show(&v0),
        [
            "backend 02:00:00:64:00:02 10.240.0.2/24 None",
            "public 02:00:00:65:00:02 10.240.1.2/24 Some(\"192.0.2.1\")"
        ]
    );
    assert_eq!(v1.nics[1].external.unwrap().to_string(), "192.0.2.2");
    assert_eq!(v0.spec().nics[1].ports, [80], "the VEEH gets them in the spec");
    for id in &svc.vees {
        eventually("running", || site.veem.core.vee(id).unwrap().state == VeeState::Running).await;
    }
    let site = site.restart();
    assert_eq!(show(&site.veem.core.vee(&svc.vees[0]).unwrap()), show(&v0));
}

#[tokio::test]
async fn a_site_out_of_subnets_refuses_the_service_whole_and_an_ended_services_subnets_are_free_again() {
    // Room for one service's two /24s.
    let site = site(POOLS).await;
    let first = site.veem.deploy.deploy(&acme(), &networked()).await.unwrap();
    let usage = |site: &FakeSite| site.veem.core.planner().host_usage("h1", site.veem.core.now_slot()).unwrap().vcpus;
    let before = usage(&site);
    let e = format!("{:#}", site.veem.deploy.deploy(&acme(), &networked()).await.unwrap_err());
    assert!(
        e.contains("reject") && e.contains("manifest field `network[0].cidr`: the site's pool 10.240.0.0/23 has no free /24"),
        "{e}"
    );
    assert_eq!(
        site.veem.core.store.list::<ServiceRec>(Tree::Services).unwrap().len(),
        1,
        "no second service"
    );
    assert_eq!(site.veem.core.vees().len(), 2, "no VEE of it");
    assert_eq!(usage(&site), before, "its reservation released");
    for id in &first.vees {
        eventually("running", || site.veem.core.vee(id).unwrap().state == VeeState::Running).await;
        site.veem.stop.stop_here(id).await.unwrap();
    }
    let again = site.veem.deploy.deploy(&acme(), &networked()).await.unwrap();
    assert_eq!(again.networks[0].cidr.to_string(), "10.240.0.0/24", "the ended service's subnet");
}

#[tokio::test]
async fn an_external_network_at_a_site_without_external_addresses_is_refused() {
    let site = site("").await;
    let e = format!("{:#}", site.veem.deploy.deploy(&acme(), &networked()).await.unwrap_err());
    assert!(e.contains("`network[1].kind`: this site has no external addresses"), "{e}");
    assert!(site.veem.core.vees().is_empty());
}

#[tokio::test]
async fn each_host_gets_its_networks_member_tables_with_names_and_vteps() {
    let site = site(POOLS).await;
    for h in &site.hosts {
        site.veem.core.hosts.heartbeat(&h.name, 3).await; // the VEEM learns each host's VTEP
    }
    let svc = site.veem.deploy.deploy(&acme(), &networked()).await.unwrap();
    for id in &svc.vees {
        eventually("running", || site.veem.core.vee(id).unwrap().state == VeeState::Running).await;
    }
    let vees: Vec<_> = svc.vees.iter().map(|id| site.veem.core.vee(id).unwrap()).collect();
    let host = |v: &crate::model::VeeRec| site.hosts.iter().find(|h| Some(h.name.as_str()) == v.host()).unwrap().clone();
    // What every host carrying `backend` (VNI 100) must know: both VEEs,
    // by name, with the VTEP of the host each runs on.
    let mut sorted = vees.clone();
    sorted.sort_by_key(|v| v.instance);
    let want: Vec<String> = sorted
        .iter()
        .map(|v| {
            format!(
                "vm-{} {} {} {}",
                v.instance,
                v.nics[0].mac,
                v.nics[0].address.addr(),
                host(v).vtep()
            )
        })
        .collect();
    let show = |m: &[interfaces::vhi::NetworkMember]| -> Vec<String> {
        m.iter().map(|m| format!("{} {} {} {}", m.name, m.mac, m.address, m.vtep)).collect()
    };
    for v in &vees {
        let h = host(v);
        let spec = h.spec(&v.id).expect("the host got the VEE's spec");
        assert_eq!(spec.nics[0].domain, "shop.internal");
        assert_eq!(
            spec.nics[0].members.len(),
            2,
            "the spec names the whole network: {:?}",
            spec.nics[0].members
        );
        let table = h
            .script
            .lock()
            .unwrap()
            .networks
            .get(&100)
            .cloned()
            .expect("an UpdateNetwork for backend");
        assert_eq!(show(&table), want);
        let public = h.script.lock().unwrap().networks.get(&101).cloned().unwrap();
        assert!(public.iter().all(|m| m.name.starts_with("vm-")), "{public:?}");
    }
    // A host with no VEE of the service is not bothered.
    for h in &site.hosts {
        if !vees.iter().any(|v| v.host() == Some(h.name.as_str())) {
            assert!(!h.calls().iter().any(|c| c.starts_with("update_network")), "{:?}", h.calls());
        }
    }
}
