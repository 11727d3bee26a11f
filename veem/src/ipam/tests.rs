use std::collections::HashSet;

use interfaces::manifest::Manifest;
use proptest::prelude::*;

use super::*;

const ID: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// `web` × `web_n` on [backend, public], `db` × `db_n` on [backend];
/// `extra` goes into the backend network's table.
fn manifest(web_n: u32, db_n: u32, extra: &str) -> Manifest {
    Manifest::from_toml(&format!(
        "[service]\nname = \"shop\"\nprovider = \"acme\"\n[sla]\nguarantee = \"standard\"\n\
         [[component]]\nname = \"web\"\ninstances = {web_n}\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"{ID}\"\nnetworks = [\"backend\", \"public\"]\n\
         [[component]]\nname = \"db\"\ninstances = {db_n}\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"{ID}\"\nnetworks = [\"backend\"]\n\
         [[network]]\nname = \"backend\"\nkind = \"internal\"\n{extra}\
         [[network]]\nname = \"public\"\nkind = \"external\"\nports = [80, 7000]\n"
    ))
    .unwrap()
}

fn pool(external: Option<&str>) -> NetworkPool {
    NetworkPool {
        external_pool: external.map(|e| e.parse().unwrap()),
        ..NetworkPool::default()
    }
}

/// The VEEs of `m` in admission order (component order, then instance).
fn order(m: &Manifest) -> Vec<&str> {
    let mut v: Vec<&str> = m
        .components
        .iter()
        .flat_map(|c| std::iter::repeat_n(c.name.as_str(), c.instances as usize))
        .collect();
    v.sort();
    v
}

#[test]
fn a_service_gets_subnets_vnis_addresses_macs_and_external_addresses() {
    let m = manifest(1, 2, "");
    let (nets, nics) = assign(&m, &pool(Some("192.0.2.0/29")), &Taken::default(), &order(&m)).unwrap();
    assert_eq!(nets[0].cidr.to_string(), "10.240.0.0/24");
    assert_eq!(nets[1].cidr.to_string(), "10.240.1.0/24");
    assert_eq!(
        (nets[0].gateway.to_string(), nets[0].vni, nets[1].vni),
        ("10.240.0.1".into(), 100, 101)
    );
    // db, db, web: db-0 and db-1 first on backend, then web.
    let addr = |v: usize, n: usize| nics[v][n].address.to_string();
    assert_eq!(
        [addr(0, 0), addr(1, 0), addr(2, 0)],
        ["10.240.0.2/24", "10.240.0.3/24", "10.240.0.4/24"]
    );
    let web = &nics[2];
    assert_eq!(
        (web[0].network.as_str(), web[1].network.as_str()),
        ("backend", "public"),
        "NIC order"
    );
    assert_eq!(web[1].address.to_string(), "10.240.1.2/24");
    assert_eq!(web[1].external.unwrap().to_string(), "192.0.2.1");
    assert_eq!(web[1].ports, [80, 7000]);
    assert_eq!((web[0].external, web[0].ports.len()), (None, 0), "internal: no external address");
    assert_eq!(web[0].mac, "02:00:00:64:00:04");
    assert_eq!(web[1].mac, "02:00:00:65:00:02");
    assert!(nics.iter().flatten().all(|n| n.mtu == 1450));
}

#[test]
fn what_live_services_hold_is_skipped() {
    let m = manifest(1, 1, "");
    let taken = Taken {
        subnets: vec!["10.240.0.0/23".parse().unwrap()],
        vnis: [100, 102].into(),
        external: ["192.0.2.1".parse().unwrap()].into(),
    };
    let (nets, nics) = assign(&m, &pool(Some("192.0.2.0/29")), &taken, &order(&m)).unwrap();
    assert_eq!(nets[0].cidr.to_string(), "10.240.2.0/24");
    assert_eq!((nets[0].vni, nets[1].vni), (101, 103));
    assert_eq!(nics[1][1].external.unwrap().to_string(), "192.0.2.2");
}

#[test]
fn refusals_name_the_network_and_the_reason() {
    let m = manifest(1, 1, "cidr = \"10.240.0.0/24\"\n");
    let taken = Taken {
        subnets: vec!["10.240.0.128/25".parse().unwrap()],
        ..Taken::default()
    };
    let e = assign(&m, &pool(Some("192.0.2.0/29")), &taken, &order(&m)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "manifest field `network[0].cidr`: 10.240.0.0/24 overlaps a subnet another service holds at this site"
    );
    let m = manifest(1, 1, "");
    let e = assign(&m, &pool(None), &Taken::default(), &order(&m)).unwrap_err();
    assert_eq!(e, IpamError::NoExternalPool { index: 1 });
    let full = NetworkPool {
        pool: "10.240.0.0/23".parse().unwrap(),
        ..pool(Some("192.0.2.0/29"))
    };
    let taken = Taken {
        subnets: vec!["10.240.1.0/24".parse().unwrap()],
        ..Taken::default()
    };
    let e = assign(&m, &full, &taken, &order(&m)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "manifest field `network[1].cidr`: the site's pool 10.240.0.0/23 has no free /24"
    );
    // A /30 external pool has two addresses; three web instances need three.
    let m = manifest(3, 1, "");
    let e = assign(&m, &pool(Some("192.0.2.0/30")), &Taken::default(), &order(&m)).unwrap_err();
    assert!(matches!(e, IpamError::ExternalExhausted { index: 1, .. }), "{e}");
    let m = manifest(300, 1, "");
    let e = assign(&m, &pool(Some("10.0.0.0/16")), &Taken::default(), &order(&m)).unwrap_err();
    assert_eq!(
        e,
        IpamError::TooMany {
            index: 0,
            attached: 301,
            prefix: 24
        }
    );
}

proptest! {
    /// Services admitted one after another (each taking what the ones
    /// before hold) never share a subnet, a VNI, a MAC or an external
    /// address, and each address lies in its subnet, not the gateway.
    #[test]
    fn admissions_never_hand_out_anything_twice(sizes in proptest::collection::vec((1u32..4, 1u32..5), 1..8)) {
        let p = pool(Some("192.0.2.0/24"));
        let mut taken = Taken::default();
        let (mut macs, mut externals) = (HashSet::new(), HashSet::new());
        for (web, db) in sizes {
            let m = manifest(web, db, "");
            let (nets, nics) = assign(&m, &p, &taken, &order(&m)).unwrap();
            for n in &nets {
                prop_assert!(!taken.subnets.iter().any(|t| overlaps(t, &n.cidr)));
                prop_assert!(taken.vnis.insert(n.vni));
                taken.subnets.push(n.cidr);
            }
            for nic in nics.iter().flatten() {
                prop_assert!(macs.insert(nic.mac.clone()), "MAC {} twice", nic.mac);
                let net = nets.iter().find(|n| n.name == nic.network).unwrap();
                prop_assert!(net.cidr.contains(&nic.address.addr()) && nic.address.addr() != net.gateway);
                if let Some(e) = nic.external {
                    prop_assert!(externals.insert(e));
                    taken.external.insert(e);
                }
            }
        }
    }
}

/// Scaling out: one more `web` takes the lowest free address of each of
/// its networks (a gap a scaled-in instance left first), a MAC of that
/// offset and a free external address; a full network is refused by name.
#[test]
fn more_nics_take_the_lowest_free_addresses_and_keep_the_others() {
    let m = manifest(2, 1, "cidr = \"10.9.0.0/29\"\n");
    let p = pool(Some("192.0.2.0/29"));
    let (nets, nics) = assign(&m, &p, &Taken::default(), &order(&m)).unwrap();
    // db-0 .2, web-0 .3, web-1 .4 on backend; web-0 went away (.3 free).
    let mut used: BTreeSet<Ipv4Addr> = [&nics[0], &nics[2]]
        .iter()
        .flat_map(|n| n.iter().map(|x| x.address.addr()))
        .collect();
    let mut external: BTreeSet<Ipv4Addr> = nics[2].iter().filter_map(|n| n.external).collect();
    let web = vec!["backend".to_string(), "public".to_string()];
    let more = more_nics(&web, &nets, &p, &mut used, &mut external).unwrap();
    assert_eq!(more[0].address.to_string(), "10.9.0.3/29");
    assert_eq!(more[0].mac, mac(nets[0].vni, 3));
    assert_eq!(more[0].gateway, nets[0].gateway);
    let taken_ext = nics[2][1].external.unwrap();
    assert!(more[1].external.is_some_and(|a| a != taken_ext));
    // A /29 holds five VEEs: .2 to .6.
    for expected in ["10.9.0.5/29", "10.9.0.6/29"] {
        let n = more_nics(&web[..1], &nets, &p, &mut used, &mut external).unwrap();
        assert_eq!(n[0].address.to_string(), expected);
    }
    let e = more_nics(&web[..1], &nets, &p, &mut used, &mut external).unwrap_err();
    assert!(e.to_string().contains("\"backend\" (10.9.0.0/29) has no free address"), "{e}");
}
