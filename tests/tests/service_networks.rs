//! Service networks through a real VEEM, two real VEEHs and tiny guests:
//! two VEEs of one service on different hosts reach each other by address
//! and by DNS name over their internal network, from inside the guests
//! (the guest's `/cgi-bin/probe`); another provider's VEE cannot reach
//! them (its packets are counted by the isolation table's drop rule) nor
//! resolve their names; when the services end, nothing of their networks
//! is left on the host. On an external network, a client outside (the
//! lab's `vee-outside` namespace) reaches the declared ports of a VEE's
//! external address and nothing else, the VEE reaches the outside, and a
//! TCP connection from outside stays open through an in-site live
//! migration.

use std::time::Duration;

use e2e::daemons::{console, ImageRepo, Veeh};
use e2e::net::{dropped, http_get, outside, sh, wait_http, Forwarding, TickClient, OUTSIDE};
use e2e::site::{self, host_of, Veem, ACME, GLOBEX};
use e2e::{guest, lab};
use interfaces::vmi::*;

const BOOT: Duration = Duration::from_secs(180);

/// Service `name` of `provider`: components `web` and `db`, one instance
/// each, on network `backend`, on different hosts.
fn manifest(name: &str, provider: &str, ids: &e2e::daemons::GuestIds) -> String {
    let component = |c: &str| {
        format!(
            "[[component]]\nname = \"{c}\"\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"{}\"\nkernel = \"{}\"\ninitrd = \"{}\"\ncmdline = \"{}\"\nnetworks = [\"backend\"]\n",
            ids.disk, ids.kernel, ids.initrd, ids.cmdline
        )
    };
    format!(
        "[service]\nname = \"{name}\"\nprovider = \"{provider}\"\n[sla]\nguarantee = \"standard\"\npenalty_per_hour = 1.0\n\
         [[network]]\nname = \"backend\"\nkind = \"internal\"\n{}{}\
         [[constraint]]\nkind = \"anti-affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"web\", \"db\"]\n",
        component("web"),
        component("db"),
    )
}

/// The VEE's address on its first NIC, without the prefix.
fn address(v: &VeeInfo) -> String {
    v.nics[0].address.split('/').next().unwrap().to_string()
}

/// What VEE `from` (by address) answers to probe `query` from inside.
async fn probe(from: &str, query: &str) -> String {
    http_get(&format!("http://{from}/cgi-bin/probe?{query}"))
        .await
        .unwrap_or_else(|| format!("no answer from {from}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_vees_of_a_service_reach_each_other_by_name_across_hosts_and_no_one_else_does() {
    let _lab = lab::lock();
    let _forwarding = Forwarding::on();
    let dir = lab::test_dir("service-networks");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "a1", "site-a", lab::SITE_A_URI, &repo).await;
    let a2 = Veeh::start(&dir, "a2", "site-a", lab::SITE_A_URI, &repo).await;
    let port = site::port();
    let pools = "[networks]\nexternal_pool = \"10.80.2.0/28\"\n";
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&a1, &a2], &[], pools);
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    let mut globex = veem.client(GLOBEX).await;
    let shop = site::deploy(&mut acme, manifest("shop", "acme", &ids)).await.unwrap();
    // The other provider's network is external: its VEEs have a default
    // route, so their packets towards shop's network do reach the host.
    let external = manifest("other", "globex", &ids).replace("kind = \"internal\"\n", "kind = \"external\"\nports = [80]\n");
    let other = site::deploy(&mut globex, external).await.unwrap();

    // Every VEE runs and takes its reserved address by DHCP.
    let mut vees = Vec::new();
    for v in shop.vees.iter().chain(&other.vees) {
        let info = veem.wait_vee(&v.vee_id, "running", BOOT, |i| i.state() == VeeState::Running).await;
        let host = if host_of(&info) == Some(a1.host.clone()) { &a1 } else { &a2 };
        let want = format!("net eth0 {}", info.nics[0].address);
        let mut c = host.client().await;
        let start = std::time::Instant::now();
        loop {
            let text = console(&mut c, &v.vee_id).await;
            if text.contains(&want) {
                break;
            }
            assert!(start.elapsed() < BOOT, "{want:?} not on the console:\n{}", site::tail(&text, 800));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        vees.push(info);
    }
    let find = |svc: &str, c: &str| vees.iter().find(|v| v.service_id == svc && v.component == c).unwrap();
    let (web, db) = (find(&shop.service_id, "web"), find(&shop.service_id, "db"));
    let stranger = find(&other.service_id, "web");
    assert_ne!(host_of(web), host_of(db), "anti-affinity: web and db on different hosts");
    let (web_ip, db_ip, stranger_ip) = (address(web), address(db), address(stranger));
    // The guest's web server answers from the host.
    let page = http_get(&format!("http://{web_ip}/")).await.expect("web-0's HTTP answer");
    assert!(page.starts_with("tick ") && page.contains("web-0"), "{page}");

    // web-0 reaches db-0 by address and by name, over TCP.
    let by_ip = probe(&web_ip, &format!("ping={db_ip}")).await;
    assert!(by_ip.starts_with("PROBE-OK"), "web-0 -> {db_ip}: {by_ip}");
    for name in ["db-0", "db-0.shop.internal"] {
        let dns = probe(&web_ip, &format!("dns={name}")).await;
        assert_eq!(dns.trim(), format!("PROBE-OK {db_ip}"), "{name} resolves to db-0's address");
    }
    let tcp = probe(&web_ip, "tcp=db-0:7000").await;
    assert!(tcp.starts_with(&format!("PROBE-OK {db_ip} tick 1")), "web-0 -> db-0:7000: {tcp}");

    // Another provider's VEE: its packets to them are dropped on the way,
    // and their names are not in its network's DNS.
    let before = dropped("forward");
    let denied = probe(&stranger_ip, &format!("ping={db_ip}")).await;
    assert!(denied.starts_with("PROBE-FAILED"), "{stranger_ip} reached db-0: {denied}");
    let denied = probe(&stranger_ip, &format!("tcp={web_ip}:7000")).await;
    assert!(denied.starts_with("PROBE-FAILED"), "{stranger_ip} reached web-0: {denied}");
    assert!(dropped("forward") > before, "the isolation table dropped them");
    assert!(probe(&stranger_ip, "dns=db-0.shop.internal").await.starts_with("PROBE-FAILED"));
    // Its own db-0 is another VEE: names are per service.
    let own_db = address(find(&other.service_id, "db"));
    assert_eq!(probe(&stranger_ip, "dns=db-0").await.trim(), format!("PROBE-OK {own_db}"));

    // The services end: nothing of their networks is left.
    for v in &vees {
        site::vee_action(&mut acme, &v.vee_id, Action::Stop).await.ok();
        site::vee_action(&mut globex, &v.vee_id, Action::Stop).await.ok();
    }
    for v in &vees {
        veem.wait_vee(&v.vee_id, "ended", Duration::from_secs(60), |i| {
            matches!(i.state(), VeeState::Stopped | VeeState::Terminated)
        })
        .await;
    }
    let vnis: Vec<u32> = vees.iter().map(|v| v.nics[0].vni).collect();
    let mut left = String::new();
    for _ in 0..50 {
        left = leftovers(&vnis);
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(left.is_empty(), "left behind:\n{left}");
    drop((a1, a2, veem));
    let _ = std::fs::remove_dir_all(&dir);
}

/// What is left on this kernel of the networks with VNIs `vnis`: links
/// (bridges, VXLAN), nftables rules naming their bridges, dnsmasq
/// processes, DHCP state.
fn leftovers(vnis: &[u32]) -> String {
    let mut left = String::new();
    let (_, links) = sh("ip -o link show");
    let (_, rules) = sh("nft list ruleset");
    let (_, procs) = sh("ps -eo args");
    for vni in vnis {
        for dev in [format!("vb{vni}"), format!("vx{vni}")] {
            let named = |l: &&str| l.split([' ', ':', '"', '@', '=']).any(|w| w == dev);
            for l in links
                .lines()
                .filter(named)
                .chain(rules.lines().filter(named))
                .chain(procs.lines().filter(named))
            {
                left += &format!("{l}\n");
            }
        }
        let state = veeh::network::dhcp_dir(*vni);
        if state.exists() {
            left += &format!("{}\n", state.display());
        }
    }
    left
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_the_outside_reaches_declared_ports_only_and_a_tcp_connection_survives_live_migration_and_a_restore_keeps_the_addresses() {
    let _lab = lab::lock();
    assert!(outside("true").0, "no namespace {OUTSIDE}: run scripts/setup-host");
    let dir = lab::test_dir("external-networks");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let mut a1 = Veeh::start(&dir, "a1", "site-a", lab::SITE_A_URI, &repo).await;
    // The second host runs on the lab's other libvirtd (a live migration
    // needs two), in the same network namespace (site A's second host).
    let mut a2 = Veeh::start(&dir, "a2", "site-a", lab::SITE_A2_URI, &repo).await;
    let port = site::port();
    let pools = "[networks]\nexternal_pool = \"10.80.1.0/28\"\n";
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&a1, &a2], &[], pools);
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    // Port 7000 (the tick stream) is declared; port 80, where the guest
    // serves HTTP too, is not.
    let m = manifest("front", "acme", &ids)
        .replace("kind = \"internal\"\n", "kind = \"external\"\nports = [7000]\n")
        .replace("components = [\"web\", \"db\"]", "components = [\"web\"]");
    let svc = site::deploy(&mut acme, m).await.unwrap();
    let id = &svc.vees[0].vee_id;
    let info = veem.wait_vee(id, "running", BOOT, |i| i.state() == VeeState::Running).await;
    let (internal, external) = (address(&info), info.nics[0].external_address.clone());
    assert!(external.starts_with("10.80.1."), "{external}");
    let page = wait_http(&format!("http://{internal}/"), Duration::from_secs(60))
        .await
        .map(|(p, _)| p);
    assert!(page.is_some_and(|p| p.starts_with("tick ")), "the guest serves HTTP at {internal}");

    // From outside: the declared port answers at the external address; the
    // undeclared one does not, nor does the internal address.
    let (ok, first) = outside(&format!("sh -c 'busybox nc {external} 7000 </dev/null | head -n 1'"));
    assert!(ok && first.starts_with("tick 1"), "declared port 7000 from outside: {first}");
    let (reached, text) = outside(&format!("curl -s -m 3 http://{external}/"));
    assert!(!reached, "undeclared port 80 answered from outside: {text}");
    let (reached, text) = outside(&format!("curl -s -m 3 http://{internal}/"));
    assert!(!reached, "the internal address answered from outside: {text}");

    // From inside: the VEE reaches the outside through its external
    // address (the outside has no route back to the internal one).
    let mut server = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            OUTSIDE,
            "sh",
            "-c",
            "echo hello-from-outside | busybox nc -l -p 9000",
        ])
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = probe(&internal, "tcp=10.79.0.2:9000").await;
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.contains("PROBE-OK 10.79.0.2 hello-from-outside"), "{out}");

    // A client outside holds a TCP connection to the VEE while it
    // live-migrates to the other host: the ticks go on, on that connection.
    let client = TickClient::connect(&external, 7000);
    for _ in 0..100 {
        if client.count() >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let from = host_of(&info).unwrap();
    let to = if from == a1.host { a2.host.clone() } else { a1.host.clone() };
    let mut op = veem.client(site::OPERATOR).await;
    let mig = op
        .migrate(MigrateRequest {
            vee_id: id.clone(),
            to_host: to.clone(),
            to_site: String::new(),
            reason: "maintenance".into(),
        })
        .await
        .unwrap()
        .into_inner();
    if mig.state() == MigrationState::Proposed {
        op.approve_migration(ApproveMigrationRequest {
            migration_id: mig.migration_id.clone(),
        })
        .await
        .unwrap();
    }
    veem.wait_vee(id, "migrated", BOOT, |i| {
        host_of(i).as_deref() == Some(&to) && i.state() == VeeState::Running
    })
    .await;
    let seen = client.count();
    for _ in 0..100 {
        if client.count() >= seen + 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (ticks, gap) = client.ticks_and_gap();
    println!(
        "TCP tick stream through the in-site live migration: {} ticks, largest gap {gap:?}",
        ticks.len()
    );
    assert!(
        ticks.len() >= seen + 10,
        "the stream stopped after the migration: {} ticks",
        ticks.len()
    );
    assert_eq!(
        ticks,
        (1..=ticks.len() as u64).collect::<Vec<_>>(),
        "one connection, no reset, no tick lost"
    );
    drop(client);

    // A checkpoint, then the host it runs on fails: the VEEM restores it on
    // the other host with the same MAC and addresses, and it answers there,
    // inside and from outside.
    site::vee_action(&mut acme, id, Action::Checkpoint).await.unwrap();
    let (failed, uri) = if to == a1.host {
        (&mut a1, lab::SITE_A_URI)
    } else {
        (&mut a2, lab::SITE_A2_URI)
    };
    failed.daemon.kill();
    veeh::hypervisor::Hypervisor::open(uri, &to).unwrap().destroy(id).unwrap();
    let down = std::time::Instant::now();
    let back = veem
        .wait_vee(id, "restored on the other host", BOOT, |i| {
            i.state() == VeeState::Running && host_of(i).is_some_and(|h| h != to)
        })
        .await;
    let nic = |i: &VeeInfo| (i.nics[0].mac.clone(), i.nics[0].address.clone(), i.nics[0].external_address.clone());
    assert_eq!(nic(&back), nic(&info), "MAC, address and external address kept");
    wait_http(&format!("http://{internal}/"), Duration::from_secs(30))
        .await
        .expect("the restored VEE answers HTTP at its address");
    let answered = down.elapsed();
    println!("after the host failure the VEE answered HTTP again in {answered:?}");
    let (ok, first) = outside(&format!("sh -c 'busybox nc {external} 7000 </dev/null | head -n 1'"));
    assert!(
        ok && first.starts_with("tick 1"),
        "declared port 7000 from outside after the restore: {first}"
    );

    site::vee_action(&mut acme, id, Action::Stop).await.unwrap();
    veem.wait_vee(id, "ended", Duration::from_secs(60), |i| {
        matches!(i.state(), VeeState::Stopped | VeeState::Terminated)
    })
    .await;
    let (_, rules) = sh("nft list ruleset");
    assert!(!rules.contains(&external), "the external address's forwarding is gone:\n{rules}");
    drop((a1, a2, veem));
    let _ = std::fs::remove_dir_all(&dir);
}
