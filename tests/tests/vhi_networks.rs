//! A VEE's NICs on a real VEEH and libvirtd: each is a virtio interface
//! with the VEEM's MAC on its network's bridge `vb<VNI>` (the network's
//! MTU), which the VEEH makes before the VEE starts and removes when the
//! VEE leaves. The network's DHCP server gives the guest its reserved
//! address, and the NICs' traffic is metered.

use std::process::Command;
use std::time::Duration;

use e2e::daemons::{checkpoint, console, destroy, migrate, wait_tick, ImageRepo, Veeh};
use e2e::{guest, lab};
use interfaces::vhi::*;

/// `ip ARGS`: (success, stdout).
fn ip(args: &[&str]) -> (bool, String) {
    let out = Command::new("ip").args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A NIC on network `vni` whose subnet is 10.250.`net`.0/24 (this test's
/// own), at address .2.
fn nic(vni: u32, mac: &str, net: u32) -> Nic {
    Nic {
        network: format!("net-{vni}"),
        vni,
        mac: mac.into(),
        address: format!("10.250.{net}.2/24"),
        gateway: format!("10.250.{net}.1"),
        mtu: 1450,
        ..Default::default()
    }
}

/// The ports of bridge `br` that are VEEs' taps (not its VXLAN interface).
fn taps(br: &str) -> Vec<String> {
    let (_, ports) = ip(&["-o", "link", "show", "master", br]);
    ports.lines().filter(|l| !l.contains(": vx")).map(str::to_string).collect()
}

/// A subnet number for this run (0..=254).
fn subnet() -> u32 {
    u32::from(uuid::Uuid::new_v4().as_bytes()[1]) % 250
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_vee_with_nics_runs_on_its_networks_bridges_which_go_when_it_leaves() {
    let _lab = lab::lock();
    let dir = lab::test_dir("vhi-nics");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "a1", "site-a", lab::SITE_A_URI, &repo).await;
    let mut c = a1.client().await;
    // VNIs of this run only (a bridge of another test is never touched).
    let vni = 20_000 + u32::from(uuid::Uuid::new_v4().as_bytes()[0]) * 16;
    let (br0, br1) = (format!("vb{vni}"), format!("vb{}", vni + 1));
    let mut spec = ids.spec("svc-nics");
    let net = subnet();
    spec.nics = vec![nic(vni, "02:00:4e:20:00:02", net), nic(vni + 1, "02:00:4e:21:00:02", net + 1)];
    let vee = spec.vee_id.clone();
    c.create(interfaces::vhi::CreateRequest { spec: Some(spec.clone()) }).await.unwrap();
    assert!(!ip(&["link", "show", "dev", &br0]).0, "no bridge before the VEE starts");
    c.start(StartRequest { vee_id: vee.clone() }).await.unwrap();
    let xml = Command::new("virsh")
        .args(["-c", lab::SITE_A_URI, "dumpxml", &format!("vee-{}", spec.vee_id)])
        .output()
        .unwrap();
    let xml = String::from_utf8_lossy(&xml.stdout);
    for (mac, br) in [("02:00:4e:20:00:02", &br0), ("02:00:4e:21:00:02", &br1)] {
        assert!(xml.contains(&format!("<mac address='{mac}'/>")), "{xml}");
        assert!(xml.contains(&format!("<source bridge='{br}'/>")), "{xml}");
        let (ok, bridge) = ip(&["-o", "link", "show", "dev", br]);
        assert!(ok && bridge.contains("mtu 1450") && bridge.contains(",UP"), "{bridge}");
        let ports = taps(br);
        assert_eq!(ports.len(), 1, "the VEE's tap is the bridge's one VEE port: {ports:?}");
        let vx = br.replacen("vb", "vx", 1);
        let (_, link) = ip(&["-d", "-o", "link", "show", "dev", &vx]);
        assert!(
            link.contains(&format!("master {br}")) && link.contains("mtu 1450") && link.contains(&format!("vxlan id {}", &br[2..])),
            "the network's VXLAN interface is on its bridge: {link}"
        );
    }
    assert!(xml.contains("<model type='virtio'/>"), "{xml}");
    // The guest asks DHCP for an address; the network's server answers
    // with the reserved one, and the guest says so on its console.
    wait_tick(&mut c, &spec.vee_id, 3, Duration::from_secs(120)).await;
    let want = format!("net eth0 10.250.{net}.2/24");
    let mut text = String::new();
    for _ in 0..60 {
        text = console(&mut c, &spec.vee_id).await;
        if text.contains(&want) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(text.contains(&want), "no `{want}` on the console:\n{text}");
    // Its traffic is metered from the interface counters (not 0, as before
    // NICs): the DHCP exchange at least.
    let stats = c.stats(StatsRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
    assert!(stats.net_rx_bytes > 0 && stats.net_tx_bytes > 0, "metered: {stats:?}");
    destroy(&mut c, &spec.vee_id).await;
    for (br, v) in [(&br0, vni), (&br1, vni + 1)] {
        assert!(!ip(&["link", "show", "dev", br]).0, "{br} left behind");
        let dir = format!("/run/vee-net/vb{v}");
        assert!(!std::path::Path::new(&dir).exists(), "{dir} left behind");
    }
    let dhcp = Command::new("pgrep").args(["-f", &format!("interface={br0}")]).output().unwrap();
    assert!(dhcp.stdout.is_empty(), "the network's DHCP server is gone");
    // A spec with a malformed NIC is refused naming the field.
    let mut bad = ids.spec("svc-nics");
    bad.nics = vec![nic(vni, "02:00:4E:20:00:02", net)];
    let e = c.create(interfaces::vhi::CreateRequest { spec: Some(bad) }).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("nics[0].mac"), "{}", e.message());
    drop(a1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The domain XML of `vee` at `uri`.
fn dumpxml(uri: &str, vee: &str) -> String {
    let out = Command::new("virsh")
        .args(["-c", uri, "dumpxml", &format!("vee-{vee}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_live_migration_and_restore_elsewhere_keep_the_nic_and_its_bridge() {
    let _lab = lab::lock();
    let dir = lab::test_dir("vhi-nics-move");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "a1", "site-a", lab::SITE_A_URI, &repo).await;
    // The second host of site A: same kernel, so one bridge to look at.
    let b1 = Veeh::start(&dir, "a2", "site-a", lab::SITE_A2_URI, &repo).await;
    let (mut ca, mut cb) = (a1.client().await, b1.client().await);
    let vni = 24_000 + u32::from(uuid::Uuid::new_v4().as_bytes()[0]) * 16;
    let br = format!("vb{vni}");
    let mac = "02:00:5d:c0:00:02";
    let mut spec = ids.spec("svc-nics-move");
    spec.nics = vec![nic(vni, mac, subnet())];
    let vee = spec.vee_id.clone();
    ca.create(interfaces::vhi::CreateRequest { spec: Some(spec.clone()) })
        .await
        .unwrap();
    ca.start(StartRequest { vee_id: vee.clone() }).await.unwrap();
    wait_tick(&mut ca, &vee, 3, Duration::from_secs(120)).await;

    // Live migration to the second host ("B"): its VEEH readies the bridge,
    // the NIC keeps its MAC, and the bridge stays while B's tap is on it.
    let target = cb
        .prepare_incoming(interfaces::vhi::PrepareIncomingRequest { spec: Some(spec.clone()) })
        .await
        .unwrap()
        .into_inner();
    let progress = migrate(&mut ca, &vee, target, 0).await;
    let last = progress.last().unwrap();
    assert_eq!(last.phase(), MigrationPhase::Done, "{}", last.error);
    cb.complete_incoming(CompleteIncomingRequest { vee_id: vee.clone() }).await.unwrap();
    let xml = dumpxml(lab::SITE_A2_URI, &vee);
    assert!(
        xml.contains(&format!("<mac address='{mac}'/>")) && xml.contains(&format!("<source bridge='{br}'/>")),
        "{xml}"
    );
    assert_eq!(taps(&br).len(), 1, "B's tap, only");
    // The guest sends nothing of its own once it has its lease; right after
    // the switch-over the bridge knows its MAC behind B's tap: QEMU's
    // self-announce after a migration (on by default, no flag needed).
    let tap = taps(&br)[0].split(": ").nth(1).unwrap().split('@').next().unwrap().to_string();
    let mut fdb = String::new();
    for _ in 0..40 {
        fdb = String::from_utf8_lossy(&Command::new("bridge").args(["fdb", "show", "br", &br]).output().unwrap().stdout).into_owned();
        if fdb.lines().any(|l| l.starts_with(mac) && l.contains(&format!("dev {tap} "))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        fdb.lines().any(|l| l.starts_with(mac) && l.contains(&format!("dev {tap} "))),
        "the guest's MAC is not learned behind B's tap {tap}:\n{fdb}"
    );
    wait_tick(&mut cb, &vee, 1, Duration::from_secs(30)).await;

    // Checkpoint at B, B's copy gone (the bridge with it), restore at A:
    // the same MAC on the bridge again.
    let cp = checkpoint(&mut cb, &vee).await;
    destroy(&mut cb, &vee).await;
    assert!(!ip(&["link", "show", "dev", &br]).0, "no NIC left on {br}");
    ca.restore(RestoreRequest {
        spec: Some(spec.clone()),
        checkpoint: Some(cp),
        fence_owner: String::new(),
    })
    .await
    .unwrap();
    let xml = dumpxml(lab::SITE_A_URI, &vee);
    assert!(
        xml.contains(&format!("<mac address='{mac}'/>")) && xml.contains(&format!("<source bridge='{br}'/>")),
        "{xml}"
    );
    wait_tick(&mut ca, &vee, 1, Duration::from_secs(30)).await;
    destroy(&mut ca, &vee).await;
    assert!(!ip(&["link", "show", "dev", &br]).0, "{br} left behind");
    drop((a1, b1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_starting_veeh_sweeps_the_networks_a_crash_left_behind() {
    let _lab = lab::lock();
    let dir = lab::test_dir("vhi-nics-sweep");
    let repo = ImageRepo::start(&dir).await;
    // What a VEEH killed half-way leaves: a network made for a VEE that
    // never started (no NIC on the bridge), its DHCP server and state.
    let vni = 26_000 + u32::from(uuid::Uuid::new_v4().as_bytes()[0]) * 16;
    let br = format!("vb{vni}");
    veeh::network::ensure_networks("127.0.0.1", &[nic(vni, "02:00:65:90:00:02", subnet())])
        .await
        .unwrap();
    let state = veeh::network::dhcp_dir(vni);
    let server = || {
        let out = Command::new("pgrep").args(["-f", &format!("interface={br} ")]).output().unwrap();
        !out.stdout.is_empty()
    };
    assert!(ip(&["link", "show", "dev", &br]).0 && state.exists() && server());
    let a1 = Veeh::start(&dir, "a1", "site-a", lab::SITE_A_URI, &repo).await;
    assert!(!ip(&["link", "show", "dev", &br]).0, "{br} left behind");
    assert!(!state.exists(), "{} left behind", state.display());
    assert!(!server(), "its DHCP server left behind");
    assert!(a1.daemon.log_text().contains("removed networks a crash left behind"));
    drop(a1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_an_anchored_network_keeps_its_home_part_with_no_vee_here_until_let_go() {
    let _lab = lab::lock();
    // Every VEE of the network runs at a peer site: this host keeps its
    // gateway and DHCP/DNS server (UpdateNetwork with an anchor).
    let vni = 28_000 + u32::from(uuid::Uuid::new_v4().as_bytes()[0]) * 16;
    let (net, br) = (subnet(), format!("vb{vni}"));
    let n = nic(vni, "02:00:6d:60:00:02", net);
    let abroad = NetworkMember {
        name: "web-1".into(),
        mac: n.mac.clone(),
        address: format!("10.250.{net}.2"),
        vtep: "10.77.0.2".into(),
        vtep_port: 4790,
        ..Default::default()
    };
    let update = |anchor: bool| NetworkUpdate {
        vni,
        domain: "span.internal".into(),
        members: vec![abroad.clone()],
        stretched_to: vec![Vtep {
            address: "10.77.0.2".into(),
            port: 4790,
        }],
        anchor: anchor.then(|| NetworkHome {
            subnet: format!("10.250.{net}.0/24"),
            gateway: format!("10.250.{net}.1"),
            mtu: 1450,
            external: false,
        }),
        ..Default::default()
    };
    veeh::network::update_network("10.77.0.1", &update(true)).await.unwrap();
    let (_, addrs) = ip(&["-o", "addr", "show", "dev", &br]);
    assert!(addrs.contains(&format!("10.250.{net}.1/24")), "the gateway is here: {addrs}");
    let (_, fdb) = ip(&["-o", "link", "show", "master", &br]);
    assert!(fdb.contains(&format!("vx{vni}")), "{fdb}");
    let dhcp = Command::new("pgrep").args(["-f", &format!("interface={br}")]).output().unwrap();
    assert!(!dhcp.stdout.is_empty(), "the network's DHCP server runs here");
    let out = Command::new("bridge")
        .args(["fdb", "show", "dev", &format!("vx{vni}")])
        .output()
        .unwrap();
    let fdb = String::from_utf8_lossy(&out.stdout);
    assert!(
        fdb.contains("02:00:6d:60:00:02 dst 10.77.0.2 port 4790"),
        "web-1 is behind site B: {fdb}"
    );
    // A VEE comes and goes here meanwhile: the anchored network stays.
    veeh::network::ensure_networks("10.77.0.1", std::slice::from_ref(&n)).await.unwrap();
    veeh::network::release_networks(std::slice::from_ref(&n)).await;
    assert!(ip(&["link", "show", "dev", &br]).0, "an anchored network went with a VEE");
    // Let go (web-1 came home elsewhere, or ended): it goes.
    veeh::network::update_network("10.77.0.1", &update(false)).await.unwrap();
    assert!(!ip(&["link", "show", "dev", &br]).0, "{br} left behind");
    assert!(!veeh::network::dhcp_dir(vni).exists(), "its state left behind");
}
