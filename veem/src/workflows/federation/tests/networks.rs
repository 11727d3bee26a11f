//! A VEE on service networks goes to a peer site only over an agreed
//! overlay; its networks are stretched there (the peer's host gets the
//! primary's member tables on the agreed port), the primary's hosts
//! send its frames and its external address there, and a refusal
//! leaves nothing stretched.
use super::*;
use crate::config::Role;
use crate::sim::eventually;

const IMAGE: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";
const OVERLAY_B: &str = "[peers.overlay]\nvtep = \"198.51.100.2\"\nport = 4790\n";
const OVERLAY_A: &str = "[peers.overlay]\nvtep = \"198.51.100.1\"\nport = 4790\n";
const POOLS: &str = "[networks]\npool = \"10.240.0.0/23\"\nexternal_pool = \"192.0.2.0/29\"\n";

/// `vm` x2 on `backend` and the external `public`, movable to peers.
fn networked() -> String {
    federated().replace(
        "disk_gib = 1\n",
        "disk_gib = 1\ninstances = 2\nnetworks = [\"backend\", \"public\"]\n",
    ) + "[[network]]\nname = \"backend\"\nkind = \"internal\"\n\
           [[network]]\nname = \"public\"\nkind = \"external\"\nports = [80]\n"
}

/// Site A (a1, a2; `a_overlay`: its agreed overlay with B) running the
/// networked service, site B (b1); the VEE to move (`vm-1`) and the
/// host of the other.
async fn sites(a_overlay: &str) -> (FakeSite, FakeSite, String, String) {
    let a = FakeSite::start_site("site-a", &["a1", "a2"], &format!("{A_PEERS_WITH_B}{a_overlay}{POOLS}"));
    let b = FakeSite::start_site("site-b", &["b1"], &format!("{B_TRUSTS_A}{OVERLAY_A}"));
    a.peer_with(&b, "a-to-b-token");
    a.repo.blobs.lock().unwrap().insert(IMAGE.into());
    for h in &a.hosts {
        a.veem.core.hosts.heartbeat(&h.name, 3).await;
    }
    let svc = a.veem.deploy.deploy(&Role::Provider("acme".into()), &networked()).await.unwrap();
    for id in &svc.vees {
        eventually("running", || a.veem.core.vee(id).unwrap().state == VeeState::Running).await;
    }
    let vees: Vec<_> = svc.vees.iter().map(|id| a.veem.core.vee(id).unwrap()).collect();
    let moving = vees.iter().find(|v| v.instance == 1).unwrap().id.clone();
    let other = vees.iter().find(|v| v.instance == 0).unwrap().host().unwrap().to_string();
    (a, b, moving, other)
}

/// `networked()` with its two instances on different hosts.
fn apart() -> String {
    networked() + "[[constraint]]\nkind = \"anti-affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"vm\"]\n"
}

/// Site A with one host (a1) and B (b1, refusing VEEs if `b_refuses`):
/// `apart()` cannot run whole at A. Deploys it; the result.
async fn one_host_at_a(
    b_refuses: bool,
) -> (
    FakeSite,
    FakeSite,
    Result<crate::model::ServiceRec, crate::workflows::deploy::DeployError>,
) {
    let a = FakeSite::start_site("site-a", &["a1"], &format!("{A_PEERS_WITH_B}{OVERLAY_B}{POOLS}"));
    let b = FakeSite::start_site("site-b", &["b1"], &format!("{B_TRUSTS_A}{OVERLAY_A}"));
    a.peer_with(&b, "a-to-b-token");
    a.repo.blobs.lock().unwrap().insert(IMAGE.into());
    a.veem.core.hosts.heartbeat("a1", 3).await;
    if b_refuses {
        b.host("b1").fail("Prepare", tonic::Code::ResourceExhausted, "no room");
    }
    let svc = a.veem.deploy.deploy(&Role::Provider("acme".into()), &apart()).await;
    (a, b, svc)
}

#[tokio::test]
async fn a_remote_placement_a_crash_cut_short_is_taken_back_from_the_peer() {
    use crate::steps::intents::Intent;
    use crate::store::Tree;
    let (a, b, svc) = one_host_at_a(false).await;
    let svc = svc.unwrap();
    let intents = |a: &FakeSite| a.veem.core.store.list::<Intent>(Tree::Intents).unwrap();
    assert!(intents(&a).is_empty(), "the admission's commit ends its intent");
    let at_b = svc
        .vees
        .iter()
        .map(|id| a.veem.core.vee(id).unwrap())
        .find(|v| v.location == Location::Site("site-b".into()))
        .unwrap();
    assert!(b.veem.core.vee(&at_b.id).is_ok());
    // A Deploy under way writes its intent while the VEEM runs: the
    // periodic retry (of what start-up could not undo) leaves it, and the
    // VEE B booted for it.
    let under_way = Intent::RemotePlacement {
        service_id: "under-way".into(),
        vees: vec![at_b.id.clone()],
        created_ms: 0,
    };
    a.veem.intents.begin_intent(&under_way).unwrap();
    assert_eq!(a.veem.intents.retry_left().await.unwrap(), 0);
    assert!(b.veem.core.vee(&at_b.id).is_ok(), "a step under way was taken for a crash's");
    assert_eq!(intents(&a), vec![under_way.clone()]);
    a.veem.intents.drop_intent(&under_way).unwrap();
    // As a VEEM killed after B booted the VEE and before its commit
    // leaves it: the intent, naming a VEE B runs and one it never got.
    a.veem
        .intents
        .begin_intent(&Intent::RemotePlacement {
            service_id: "cut-short".into(),
            vees: vec![at_b.id.clone(), "never-placed".into()],
            created_ms: 0,
        })
        .unwrap();
    assert_eq!(a.veem.intents.undo_intents().await.unwrap(), 0);
    assert!(b.veem.core.vee(&at_b.id).is_err(), "B took it back");
    assert!(
        b.host("b1")
            .calls()
            .iter()
            .any(|c| c.starts_with("destroy") && c.contains(&at_b.id)),
        "{:?}",
        b.host("b1").calls()
    );
    assert!(intents(&a).is_empty());
}

#[tokio::test]
async fn a_service_placed_in_part_at_a_peer_has_its_networks_stretched_there() {
    let (a, b, svc) = one_host_at_a(false).await;
    let svc = svc.unwrap();
    assert_eq!(svc.networks.len(), 2);
    let vees: Vec<_> = svc.vees.iter().map(|id| a.veem.core.vee(id).unwrap()).collect();
    let (vm0, vm1) = (&vees[0], &vees[1]);
    assert_eq!((vm1.state, &vm1.location), (VeeState::Running, &Location::Site("site-b".into())));
    eventually("vm-0 running", || a.veem.core.vee(&vm0.id).unwrap().state == VeeState::Running).await;
    // B's host booted vm-1 on the primary's networks: its NICs as
    // assigned at A, the primary's tables (vm-0 behind a1's VTEP), on
    // the agreed port, without the external address.
    let spec = b.host("b1").spec(&vm1.id).expect("b1 booted vm-1");
    assert_eq!(spec.nics.len(), 2);
    for (nic, rec) in spec.nics.iter().zip(&vm1.nics) {
        assert_eq!(
            (nic.vni, nic.mac.as_str(), nic.address.as_str()),
            (rec.vni, rec.mac.as_str(), rec.address.to_string().as_str())
        );
        assert_eq!(nic.overlay_port, 4790);
        assert!(nic.external_address.is_empty());
        let at_a1 = nic.members.iter().find(|m| m.name == "vm-0").expect("vm-0 in the table");
        assert_eq!(at_a1.vtep, a.host("a1").vtep());
    }
    assert_eq!(b.veem.core.vee(&vm1.id).unwrap().nics[0].primary_members.len(), 2);
    // a1 sends vm-1's frames and its external address to B.
    let script = a.host("a1").script.clone();
    eventually("a1's tables", || {
        script.lock().unwrap().networks.get(&101).is_some_and(|t| t.len() == 2)
    })
    .await;
    let script = script.lock().unwrap();
    let public = script.networks[&101].iter().find(|m| m.name == "vm-1").unwrap().clone();
    assert_eq!((public.vtep.as_str(), public.vtep_port), ("198.51.100.2", 4790));
    assert_eq!(public.external_address, vm1.nics[1].external.unwrap().to_string());
    assert_eq!(script.stretched_to[&100].len(), 1);
}

#[tokio::test]
async fn a_service_whose_peer_refuses_its_part_is_refused_whole_and_leaves_nothing() {
    let (a, b, svc) = one_host_at_a(true).await;
    let e = format!("{:#}", svc.unwrap_err());
    assert!(e.contains("no peer site takes the other 1") && e.contains("no room"), "{e}");
    assert!(a.veem.core.vees().is_empty(), "site A recorded {:?}", a.veem.core.vees());
    assert!(a.veem.networks.networks_taken().unwrap().subnets.is_empty());
    assert!(
        a.host("a1").calls().iter().all(|c| !c.starts_with("prepare")),
        "{:?}",
        a.host("a1").calls()
    );
    assert!(b.veem.core.vees().is_empty(), "site B keeps {:?}", b.veem.core.vees());
    // The same service deploys once B has room.
    b.host("b1").script.lock().unwrap().failing.clear();
    let svc = a.veem.deploy.deploy(&Role::Provider("acme".into()), &apart()).await.unwrap();
    assert_eq!(svc.vees.len(), 2);
}

#[tokio::test]
async fn a_live_migration_to_a_peer_stretches_the_networks_there() {
    let (a, b, vee, other) = sites(OVERLAY_B).await;
    let m = migrate_to_b(&a, &vee).await;
    assert_eq!(m.state, MigrationState::Done, "{}", m.detail);
    // The peer's host: the primary's tables, on the agreed port, no
    // external address (it stays at the primary).
    let spec = b.host("b1").spec(&vee).expect("b1 prepared the VEE");
    let v = a.veem.core.vee(&vee).unwrap();
    for (nic, rec) in spec.nics.iter().zip(&v.nics) {
        assert_eq!((nic.vni, nic.mac.as_str(), nic.overlay_port), (rec.vni, rec.mac.as_str(), 4790));
        assert_eq!(nic.members.len(), 2, "the primary's table: {:?}", nic.members);
        assert!(nic.external_address.is_empty() && nic.ports.is_empty());
    }
    // The primary's host of the other VEE: the moved one behind B's
    // VTEP and port, its external address forwarded there.
    let host = a.host(&other);
    let script = host.script.lock().unwrap();
    let moved = |vni: u32| script.networks[&vni].iter().find(|m| m.name == "vm-1").cloned().unwrap();
    let (backend, public) = (moved(100), moved(101));
    assert_eq!((backend.vtep.as_str(), backend.vtep_port), ("198.51.100.2", 4790));
    assert!(backend.external_address.is_empty());
    assert_eq!(
        (public.external_address.as_str(), public.ports.as_slice()),
        ("192.0.2.2", &[80][..])
    );
    let to_b = &script.stretched_to[&100];
    assert_eq!(
        to_b.iter().map(|v| (v.address.as_str(), v.port)).collect::<Vec<_>>(),
        [("198.51.100.2", 4790)]
    );
}

#[tokio::test]
async fn a_vee_restored_at_a_peer_from_a_checkpoint_is_on_its_networks_there() {
    use interfaces::vhi::CheckpointRecord;
    let (a, b, vee, other) = sites(OVERLAY_B).await;
    let host = a.veem.core.vee(&vee).unwrap().host().unwrap().to_string();
    let cp = crate::model::CheckpointRec::new(&CheckpointRecord {
        checkpoint_id: uuid::Uuid::new_v4().to_string(),
        vee_id: vee.clone(),
        memory_blob: format!("sha256:{}", "1".repeat(64)),
        take_time: interfaces::time::timestamp_ms(chrono::Utc::now().timestamp_millis()),
        host,
        ..Default::default()
    });
    a.veem.core.store.put(crate::store::Tree::Checkpoints, &cp.id, &cp).unwrap();
    // Its host failed and no host here can take it.
    a.veem.federation.recover_at_peer(&vee, None).await.unwrap();
    let v = a.veem.core.vee(&vee).unwrap();
    assert_eq!((v.state, &v.location), (VeeState::Running, &Location::Site("site-b".into())));
    assert!(
        b.host("b1").calls().contains(&format!("restore {vee} fence=")),
        "{:?}",
        b.host("b1").calls()
    );
    let spec = b.host("b1").spec(&vee).unwrap();
    for (nic, rec) in spec.nics.iter().zip(&v.nics) {
        assert_eq!((nic.mac.as_str(), nic.overlay_port), (rec.mac.as_str(), 4790));
        let vm0 = nic.members.iter().find(|m| m.name == "vm-0").unwrap();
        assert_eq!(vm0.vtep, a.host(&other).vtep());
    }
    let table = a.host(&other).script.lock().unwrap().networks[&100].clone();
    let vm1 = table.iter().find(|m| m.name == "vm-1").unwrap();
    assert_eq!((vm1.vtep.as_str(), vm1.vtep_port), ("198.51.100.2", 4790));
}

#[tokio::test]
async fn a_peer_that_refuses_leaves_nothing_stretched() {
    let (a, b, vee, other) = sites(OVERLAY_B).await;
    b.host("b1").fail("PrepareIncoming", tonic::Code::ResourceExhausted, "no room");
    let m = migrate_to_b(&a, &vee).await;
    assert_eq!(m.state, MigrationState::Failed);
    let v = a.veem.core.vee(&vee).unwrap();
    assert_eq!(v.state, VeeState::Running);
    assert!(matches!(v.location, Location::Host(_)));
    let script = a.host(&other).script.clone();
    let script = script.lock().unwrap();
    assert!(script.stretched_to[&100].is_empty(), "still stretched: {:?}", script.stretched_to);
    assert!(script.networks[&100]
        .iter()
        .all(|m| m.vtep_port == 0 && m.external_address.is_empty()));
}

#[tokio::test]
async fn with_every_vee_abroad_a_host_here_anchors_the_networks_until_one_comes_home() {
    let (a, _b, vm1, _) = sites(OVERLAY_B).await;
    let service = a.veem.core.vee(&vm1).unwrap().service_id;
    let vm0 = a.veem.core.service(&service).unwrap().vees.into_iter().find(|v| v != &vm1).unwrap();
    let anchored = |h: &str| a.host(h).script.lock().unwrap().anchored.get(&100).copied();
    assert_eq!(migrate_to_b(&a, &vm1).await.state, MigrationState::Done);
    assert_ne!(anchored("a1"), Some(true), "vm-0 still runs here: no anchor");
    assert_ne!(anchored("a2"), Some(true));
    assert_eq!(migrate_to_b(&a, &vm0).await.state, MigrationState::Done);
    // All abroad: the first host up keeps the home part.
    assert_eq!((anchored("a1"), anchored("a2")), (Some(true), None));
    assert_eq!(a.veem.core.service(&service).unwrap().anchor.as_deref(), Some("a1"));
    // vm-0 comes home to a2: a1 lets the network go.
    let m = a
        .veem
        .migration
        .propose(&vm0, Dest::Host("a2".into()), "home", Proposer::Operator)
        .unwrap();
    a.veem.migration.approve(&m.id, "operator").unwrap();
    assert_eq!(a.finished(&m.id).await.state, MigrationState::Done);
    assert_eq!((anchored("a1"), anchored("a2")), (Some(false), Some(false)));
    assert_eq!(a.veem.core.service(&service).unwrap().anchor, None);
}

#[tokio::test]
async fn a_silent_peers_copy_is_cut_off_the_overlay_before_the_vee_runs_here_again() {
    let (a, _b, vee, other) = sites(OVERLAY_B).await;
    assert_eq!(migrate_to_b(&a, &vee).await.state, MigrationState::Done);
    let host = a.host(&other);
    let before = host.calls().len();
    // Site B went silent; site A recovers the VEE at home.
    a.veem.peer_watch.recover_from_peer(&vee, "site-b").await.unwrap();
    let v = a.veem.core.vee(&vee).unwrap();
    assert_eq!(v.state, VeeState::Running, "recovered at home");
    // The first update after the silence already drops site B: the
    // VEEM sends it before it asks any host to run the VEE again.
    let after: Vec<String> = host.calls()[before..].to_vec();
    let update = after.iter().position(|c| c.starts_with("update_network vb100")).expect("an update");
    assert_eq!(after[update], "update_network vb100 to=", "{after:?}");
    if v.host() == Some(other.as_str()) {
        let run = after.iter().position(|c| c.contains(&vee) && !c.starts_with("update")).unwrap();
        assert!(update < run, "{after:?}");
    }
    let table = host.script.lock().unwrap().networks[&100].clone();
    let m = table.iter().find(|m| m.name == "vm-1").unwrap();
    assert!(m.vtep_port == 0 && m.vtep != "198.51.100.2", "{m:?}");
}

#[tokio::test]
async fn a_peer_running_a_vee_of_the_service_learns_the_primarys_table_changes() {
    let (a, b, vm1, other) = sites(OVERLAY_B).await;
    assert_eq!(migrate_to_b(&a, &vm1).await.state, MigrationState::Done);
    // vm-0 moves between site A's hosts: its VTEP changes.
    let service = a.veem.core.vee(&vm1).unwrap().service_id;
    let vm0 = a.veem.core.service(&service).unwrap().vees.into_iter().find(|v| v != &vm1).unwrap();
    let to = if other == "a1" { "a2" } else { "a1" };
    assert_eq!(a.migrate_to_host(&vm0, to).await.state, MigrationState::Done);
    let vtep = a.host(to).vtep();
    let at_b = b.host("b1").script.lock().unwrap().networks[&100].clone();
    let vm0_there = at_b.iter().find(|m| m.name == "vm-0").expect("vm-0 in B's table");
    assert_eq!(vm0_there.vtep, vtep, "B's host sends vm-0's frames to its new host");
    let kept = b.veem.core.vee(&vm1).unwrap();
    assert_eq!(kept.nics[0].primary_members, at_b, "B's record keeps the table for later specs");
}
