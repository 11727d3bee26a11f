//! Service networks stretched across sites (E PIII §II: "overlay networks
//! must span across sites and allow VMs to keep all private and public IP
//! addresses, even during migration"), on the lab's WAN: site B in its own
//! network namespace. A service runs at site A (web x2 on `backend` and the
//! external `public`, db x1 on `backend`); a client outside holds a TCP
//! connection to web-1's external address and polls its HTTP; web-1 is
//! live-migrated to site B with an operator's approval and home again. The
//! same connection keeps receiving ticks, HTTP keeps answering, web-1
//! reaches db-0 by name and address from B, its MAC and addresses stay, and
//! site B keeps nothing of the network once web-1 has left. The same holds
//! when site B withdraws web-1 (site A takes it home).

use std::time::Duration;

use e2e::daemons::{ImageRepo, Veeh};
use e2e::net::{http_get, outside, sh, HttpPoller, TickClient};
use e2e::site::{self, host_of, Veem, ACME, OPERATOR};
use e2e::{guest, lab};
use interfaces::vmi::*;

const BOOT: Duration = Duration::from_secs(180);

/// Service `name` of acme: `web` x2 on `backend` and `public` (external,
/// ports 80 and 7000), `db` x1 on `backend`.
fn manifest(name: &str, ids: &e2e::daemons::GuestIds) -> String {
    let component = |c: &str, n: u32, nets: &str| {
        format!(
            "[[component]]\nname = \"{c}\"\ninstances = {n}\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"{}\"\nkernel = \"{}\"\ninitrd = \"{}\"\ncmdline = \"{}\"\nnetworks = [{nets}]\n",
            ids.disk, ids.kernel, ids.initrd, ids.cmdline
        )
    };
    format!(
        "[service]\nname = \"{name}\"\nprovider = \"acme\"\n[sla]\nguarantee = \"standard\"\nmigration = \"federation\"\npenalty_per_hour = 1.0\n\
         [[network]]\nname = \"backend\"\nkind = \"internal\"\n\
         [[network]]\nname = \"public\"\nkind = \"external\"\nports = [80, 7000]\n{}{}",
        component("web", 2, "\"backend\", \"public\""),
        component("db", 1, "\"backend\""),
    )
}

/// `v`'s NIC on `network`: (MAC, address without prefix, external address).
fn nic(v: &VeeInfo, network: &str) -> (String, String, String) {
    let n = v.nics.iter().find(|n| n.network == network).unwrap();
    (
        n.mac.clone(),
        n.address.split('/').next().unwrap().into(),
        n.external_address.clone(),
    )
}

/// What the VEE at internal address `from` answers to probe `query` (the
/// guest's `/cgi-bin/probe`, reached from site A's host).
async fn probe(from: &str, query: &str) -> String {
    http_get(&format!("http://{from}/cgi-bin/probe?{query}"))
        .await
        .unwrap_or_else(|| format!("no answer from {from}"))
}

/// Site B's links whose names start with `prefix`.
fn site_b_links(prefix: &str) -> Vec<String> {
    let (_, links) = sh("ip -n vee-siteb -o link show");
    links
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap().to_string())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// Whether site B has no stretched network left (bridge `vs*`, VXLAN
/// `vt*`), waiting up to 5 s for it.
async fn no_stretch_at_b() -> bool {
    for _ in 0..20 {
        if site_b_links("vs").is_empty() && site_b_links("vt").is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// Site B's own tenant (globex, a VEE on its own external network, whose
/// VNI and MACs are the same as A's `backend`: each site numbers its own)
/// cannot reach `targets` (addresses of acme's VEEs at B): its probes
/// fail, and site B has no route into the stretched network.
async fn stranger_at_b_cannot_reach(s: &Span, targets: &[&str]) {
    let m = format!(
        "[service]\nname = \"stranger\"\nprovider = \"globex\"\n[sla]\nguarantee = \"standard\"\npenalty_per_hour = 1.0\n\
         [[network]]\nname = \"front\"\nkind = \"external\"\nports = [80]\n\
         [[component]]\nname = \"web\"\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"{}\"\nkernel = \"{}\"\ninitrd = \"{}\"\ncmdline = \"{}\"\nnetworks = [\"front\"]\n",
        s.ids.disk, s.ids.kernel, s.ids.initrd, s.ids.cmdline
    );
    let mut globex = s.b.client(site::GLOBEX).await;
    let svc = site::deploy(&mut globex, m).await.unwrap();
    let id = svc.vees[0].vee_id.clone();
    let info = s.b.wait_vee(&id, "running", BOOT, |i| i.state() == VeeState::Running).await;
    let (_, _, ext) = nic(&info, "front");
    let backend_vni = s.vee("web", 1).nics.iter().find(|n| n.network == "backend").unwrap().vni;
    println!("site B's own network has VNI {}; site A's backend {backend_vni}", info.nics[0].vni);
    // Site A's end of the WAN reaches B's external pool through B.
    let _route = Route::add("10.80.4.0/28", lab::SITE_B_ADDR);
    let probe_url = |q: &str| format!("http://{ext}/cgi-bin/probe?{q}");
    let start = std::time::Instant::now();
    while http_get(&probe_url("ping=127.0.0.1")).await.is_none() {
        assert!(start.elapsed() < BOOT, "the stranger at {ext} does not answer");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for target in targets {
        for q in [format!("ping={target}"), format!("tcp={target}:7000")] {
            let r = http_get(&probe_url(&q)).await.unwrap_or_default();
            assert!(r.starts_with("PROBE-FAILED"), "site B's tenant: {q}: {r}");
        }
    }
    // No path in: site B's kernel routes nothing into a stretched network
    // (its bridge has no address), and only the network's own frames are
    // let through the bridge.
    for target in targets {
        let (_, route) = sh(&format!("ip -n vee-siteb route get {target}"));
        assert!(
            !route.contains(" dev vs"),
            "site B routes {target} into the stretched network: {route}"
        );
    }
    site::vee_action(&mut globex, &id, Action::Stop).await.unwrap();
}

/// A route of the root namespace for one test, removed on drop.
struct Route(String);

impl Route {
    fn add(to: &str, via: &str) -> Route {
        let (ok, out) = sh(&format!("ip route replace {to} via {via}"));
        assert!(ok, "{out}");
        Route(to.into())
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        let _ = sh(&format!("ip route del {}", self.0));
    }
}

/// After a move of web-1: the tick stream went on on the same connection
/// (every tick, in order), HTTP from outside answered, web-1 reaches db-0
/// by name and address. Returns the client-side gap.
async fn assert_kept(what: &str, client: &TickClient, http: &HttpPoller, web1: &str, db0: &str) -> Duration {
    let seen = client.count();
    client.wait_count(seen + 10, Duration::from_secs(30)).await;
    let (ticks, gap) = client.ticks_and_gap();
    assert!(ticks.len() >= seen + 10, "{what}: the stream stopped: {} ticks", ticks.len());
    assert_eq!(
        ticks,
        (1..=ticks.len() as u64).collect::<Vec<_>>(),
        "{what}: one connection, no reset, no reconnect, no tick lost"
    );
    let (tries, failed, longest) = http.summary();
    println!("{what}: TCP tick stream gap {gap:?}; HTTP from outside {failed} of {tries} tries failed, longest outage {longest:?}");
    for _ in 0..20 {
        if http.last_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(http.last_ok(), "{what}: HTTP from outside does not answer");
    assert!(longest < Duration::from_secs(5), "{what}: HTTP from outside failed for {longest:?}");
    let by_ip = probe(web1, &format!("ping={db0}")).await;
    assert!(by_ip.starts_with("PROBE-OK"), "{what}: web-1 -> {db0}: {by_ip}");
    let by_name = probe(web1, "dns=db-0").await;
    assert_eq!(by_name.trim(), format!("PROBE-OK {db0}"), "{what}: db-0 resolves for web-1");
    let tcp = probe(web1, "tcp=db-0:7000").await;
    assert!(
        tcp.starts_with(&format!("PROBE-OK {db0} tick 1")),
        "{what}: web-1 -> db-0:7000: {tcp}"
    );
    gap
}

/// The two sites of these tests and the service at A.
struct Span {
    dir: std::path::PathBuf,
    _repo: ImageRepo,
    /// Site A's hosts.
    hosts: Vec<Veeh>,
    _b1: Veeh,
    a: Veem,
    b: Veem,
    ids: e2e::daemons::GuestIds,
    vees: Vec<VeeInfo>,
}

/// Site A (`hosts` on site A's libvirtd, 2 vCPUs each; `a_extra` in its
/// VEEM's config) and site B (b1, in site B's namespaces), peers with an
/// overlay agreed both ways; the service `span` deployed (at A, or the part
/// A cannot take at B) and running, web-1 answering HTTP at its public
/// address and resolving db-0.
async fn span(name: &str, a_extra: &str, hosts: &[&str]) -> Span {
    let dir = lab::test_dir(name);
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let mut a_hosts = Vec::new();
    for h in hosts {
        a_hosts.push(Veeh::start(&dir, h, "site-a", lab::SITE_A_URI, &repo).await);
    }
    let b1 = Veeh::start(&dir, "b1", "site-b", lab::SITE_B_URI, &repo).await;
    let (pa, pb) = (site::port(), site::port());
    let (to_b, to_a) = site::peer_links(pa, pb, true);
    let a_extra = format!("{a_extra}[networks]\nexternal_pool = \"10.80.3.0/28\"\n");
    let ca = site::write_config(&dir, "site-a", pa, &repo, &a_hosts.iter().collect::<Vec<_>>(), &[to_b], &a_extra);
    // Each site numbers its own networks; site B's come from another pool
    // than A's, so that its tenant probing acme's addresses is not probing
    // its own.
    let b_pools = "[networks]\npool = \"10.250.0.0/16\"\nexternal_pool = \"10.80.4.0/28\"\n";
    let cb = site::write_config(&dir, "site-b", pb, &repo, &[&b1], &[to_a], b_pools);
    let a = Veem::start(&dir, "site-a", pa, ca).await;
    let b = Veem::start(&dir, "site-b", pb, cb).await;
    let mut acme = a.client(ACME).await;
    let svc = site::deploy(&mut acme, manifest("span", &ids)).await.unwrap();
    let mut vees = Vec::new();
    for v in &svc.vees {
        vees.push(a.wait_vee(&v.vee_id, "running", BOOT, |i| i.state() == VeeState::Running).await);
    }
    let s = Span {
        dir,
        _repo: repo,
        hosts: a_hosts,
        _b1: b1,
        a,
        b,
        ids,
        vees,
    };
    let (_, web1_ip, _) = nic(&s.vee("web", 1), "public");
    let page = e2e::net::wait_http(&format!("http://{web1_ip}/"), BOOT).await.map(|(p, _)| p);
    assert!(page.is_some_and(|p| p.contains("web-1")), "web-1 serves HTTP at {web1_ip}");
    assert!(
        probe(&web1_ip, "dns=db-0").await.starts_with("PROBE-OK"),
        "web-1 resolves db-0 at A"
    );
    s
}

impl Span {
    fn vee(&self, component: &str, instance: u32) -> VeeInfo {
        self.vees
            .iter()
            .find(|v| v.component == component && v.instance == instance)
            .unwrap()
            .clone()
    }

    /// Stops the service; removes the test's directory.
    async fn end(self) {
        let mut acme = self.a.client(ACME).await;
        for v in &self.vees {
            site::vee_action(&mut acme, &v.vee_id, Action::Stop).await.ok();
        }
        for v in &self.vees {
            self.a
                .wait_vee(&v.vee_id, "ended", Duration::from_secs(60), |i| {
                    matches!(i.state(), VeeState::Stopped | VeeState::Terminated)
                })
                .await;
        }
        let dir = self.dir.clone();
        drop(self);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_web_1_live_migrates_to_site_b_and_home_keeping_its_addresses_and_tcp_connection() {
    let _lab = lab::lock();
    assert!(outside("true").0, "no namespace vee-outside: run scripts/setup-host");
    let s = span("overlay", "", &["a1", "a2"]).await;
    let (a, a1, a2) = (&s.a, &s.hosts[0], &s.hosts[1]);
    let (web1, db0) = (s.vee("web", 1), s.vee("db", 0));
    let (web1_mac, web1_ip, web1_ext) = nic(&web1, "public");
    let (web1_backend_mac, web1_backend_ip, _) = nic(&web1, "backend");
    let (_, db0_ip, _) = nic(&db0, "backend");

    // The outside's client: a TCP connection to web-1's external address,
    // and HTTP polled there.
    let client = TickClient::connect(&web1_ext, 7000);
    client.wait_count(5, Duration::from_secs(20)).await;
    assert!(client.count() >= 5, "no ticks from {web1_ext}:7000");
    let http = HttpPoller::start(&format!("http://{web1_ext}/"));

    // To site B, approved by site A's operator.
    let out = site::migrate_approved(a, &web1.vee_id, "site-b", "").await;
    assert_eq!(out.state(), MigrationState::Done, "{}", out.detail);
    let at_b = a
        .wait_vee(&web1.vee_id, "at site B", BOOT, |i| i.location == "remote (site-b)")
        .await;
    assert_eq!(nic(&at_b, "public"), (web1_mac.clone(), web1_ip.clone(), web1_ext.clone()));
    assert_eq!(nic(&at_b, "backend").0, web1_backend_mac);
    // The guest at B has the same MACs (its domain there) and answers at the
    // same addresses, over the overlay.
    let (_, xml) = sh(&format!("virsh -c {} dumpxml vee-{}", lab::SITE_B_URI, web1.vee_id));
    for mac in [&web1_mac, &web1_backend_mac] {
        assert!(xml.contains(&format!("<mac address='{mac}'/>")), "MAC {mac} at B:\n{xml}");
    }
    assert!(!site_b_links("vs").is_empty(), "site B carries the stretched networks");
    let gap = assert_kept("to site B", &client, &http, &web1_ip, &db0_ip).await;
    let page = http_get(&format!("http://{web1_backend_ip}/")).await.unwrap_or_default();
    assert!(page.contains("web-1"), "web-1 at its backend address from A: {page}");
    println!(
        "cross-site live migration A -> B: client-side TCP gap {} ms, libvirt's downtime {} ms, total {} ms",
        gap.as_millis(),
        interfaces::time::ms_of_duration(&out.downtime),
        interfaces::time::ms_of_duration(&out.total)
    );
    stranger_at_b_cannot_reach(&s, &[&web1_ip, &web1_backend_ip]).await;

    // Home again, to a host of site A.
    let home = if host_of(&web1).as_deref() == Some(a1.host.as_str()) {
        &a2.host
    } else {
        &a1.host
    };
    let back = site::migrate_approved(a, &web1.vee_id, "", home).await;
    assert_eq!(back.state(), MigrationState::Done, "{}", back.detail);
    let at_a = a
        .wait_vee(&web1.vee_id, "home", BOOT, |i| host_of(i).as_deref() == Some(home.as_str()))
        .await;
    assert_eq!(nic(&at_a, "public"), (web1_mac.clone(), web1_ip.clone(), web1_ext.clone()));
    let gap_home = assert_kept("home to site A", &client, &http, &web1_ip, &db0_ip).await;
    println!(
        "cross-site live migration B -> A: client-side TCP gap {} ms, libvirt's downtime {} ms, total {} ms",
        gap_home.as_millis(),
        interfaces::time::ms_of_duration(&back.downtime),
        interfaces::time::ms_of_duration(&back.total)
    );
    // Site B's part of the overlay went with the last VEE of the network.
    assert!(no_stretch_at_b().await, "site B keeps {:?}", site_b_links("v"));

    // Out again, and site B's operator gives it back (withdraw): site A
    // takes it home by live migration, the same connection going on.
    let again = site::migrate_approved(a, &web1.vee_id, "site-b", "").await;
    assert_eq!(again.state(), MigrationState::Done, "{}", again.detail);
    a.wait_vee(&web1.vee_id, "at site B", BOOT, |i| i.location == "remote (site-b)")
        .await;
    let mut b_op = s.b.client(OPERATOR).await;
    site::vee_action(&mut b_op, &web1.vee_id, Action::Withdraw).await.unwrap();
    let withdrawn = a
        .wait_vee(&web1.vee_id, "home after the withdrawal", BOOT, |i| {
            i.state() == VeeState::Running && host_of(i).is_some()
        })
        .await;
    assert_eq!(nic(&withdrawn, "public"), (web1_mac.clone(), web1_ip.clone(), web1_ext.clone()));
    let gap_withdrawn = assert_kept("withdrawn by site B", &client, &http, &web1_ip, &db0_ip).await;
    println!("withdrawn by site B and home: client-side TCP gap {} ms", gap_withdrawn.as_millis());
    assert!(no_stretch_at_b().await, "site B keeps {:?}", site_b_links("v"));
    drop((client, http));
    s.end().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_cross_site_migration_whose_destination_dies_leaves_web_1_at_a_and_nothing_at_b() {
    let _lab = lab::lock();
    // 4 MiB/s: the copy lasts long enough to kill the destination mid-way.
    let s = span("overlay-fail", "[migration]\nbandwidth_mib_s = 4\n", &["a1", "a2"]).await;
    let web1 = s.vee("web", 1);
    let (_, web1_ip, web1_ext) = nic(&web1, "public");
    let (_, db0_ip, _) = nic(&s.vee("db", 0), "backend");
    let client = TickClient::connect(&web1_ext, 7000);
    client.wait_count(5, Duration::from_secs(20)).await;
    let http = HttpPoller::start(&format!("http://{web1_ext}/"));

    // The destination QEMU (site B's, started with -incoming) is killed.
    let name = format!("guest=vee-{}", web1.vee_id);
    let killer = std::thread::spawn(move || {
        for _ in 0..600 {
            let out = std::process::Command::new("pgrep")
                .args(["-f", &format!("{name}.*-incoming")])
                .output()
                .unwrap();
            if let Some(pid) = String::from_utf8_lossy(&out.stdout).split_whitespace().next() {
                std::thread::sleep(Duration::from_secs(2));
                return sh(&format!("kill -9 {pid}")).0;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    });
    let out = site::migrate_approved(&s.a, &web1.vee_id, "site-b", "").await;
    assert!(killer.join().unwrap(), "never saw site B's incoming QEMU");
    assert_eq!(out.state(), MigrationState::Failed, "{out:?}");
    let info =
        s.a.wait_vee(&web1.vee_id, "running at A", BOOT, |i| {
            i.state() == VeeState::Running && host_of(i).is_some()
        })
        .await;
    assert_eq!(host_of(&info), host_of(&web1), "web-1 stays where it was");
    assert_kept("failed move to site B", &client, &http, &web1_ip, &db0_ip).await;
    // Nothing of the overlay is left at B, and A no longer floods to B.
    assert!(no_stretch_at_b().await, "site B keeps {:?}", site_b_links("v"));
    let (_, fdb) = sh("bridge fdb show");
    assert!(
        !fdb.lines().any(|l| l.contains(&format!("dst {}", lab::SITE_B_ADDR))),
        "site A still sends to site B:\n{fdb}"
    );
    drop((client, http));
    s.end().await;
}

/// Waits (up to [`BOOT`]) until the VEE at `from` answers probe `query`
/// with an answer starting with `expected`; the last answer.
async fn probe_until(from: &str, query: &str, expected: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        let r = probe(from, query).await;
        if r.starts_with(expected) || start.elapsed() > BOOT {
            return r;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Stops `vee` through its primary site and waits until site B keeps
/// nothing of the stretched networks.
async fn stop_and_check_b_is_clean(s: &Span, vee: &str) {
    let mut acme = s.a.client(ACME).await;
    site::vee_action(&mut acme, vee, Action::Stop).await.unwrap();
    s.a.wait_vee(vee, "stopped", Duration::from_secs(60), |i| {
        matches!(i.state(), VeeState::Stopped | VeeState::Terminated)
    })
    .await;
    assert!(no_stretch_at_b().await, "site B keeps {:?}", site_b_links("v"));
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_vee_placed_at_site_b_is_on_its_services_networks_and_no_one_elses() {
    let _lab = lab::lock();
    // Site A's one host takes web-0 and web-1 (2 vCPUs): db-0 is placed at
    // site B, on the networks site A assigned.
    let s = span("overlay-place", "", &["a1"]).await;
    let (web0, web1, db0) = (s.vee("web", 0), s.vee("web", 1), s.vee("db", 0));
    assert_eq!(db0.location, "remote (site-b)");
    assert!(host_of(&web0).is_some() && host_of(&web1).is_some(), "{web0:?} {web1:?}");
    let (db0_mac, db0_ip, _) = nic(&db0, "backend");
    let (_, web0_ip, _) = nic(&web0, "backend");
    let (_, web1_ip, _) = nic(&web1, "public");
    let (_, xml) = sh(&format!("virsh -c {} dumpxml vee-{}", lab::SITE_B_URI, db0.vee_id));
    assert!(xml.contains(&format!("<mac address='{db0_mac}'/>")), "db-0's MAC at B:\n{xml}");
    // web-1 at A reaches db-0 at B over the overlay, by name and address
    // (db-0's lease came from site A over the overlay too).
    let tcp = probe_until(&web1_ip, "tcp=db-0:7000", &format!("PROBE-OK {db0_ip} tick")).await;
    assert!(tcp.starts_with(&format!("PROBE-OK {db0_ip} tick")), "web-1 -> db-0:7000: {tcp}");
    let ping = probe(&web1_ip, &format!("ping={db0_ip}")).await;
    assert!(ping.starts_with("PROBE-OK"), "web-1 -> {db0_ip}: {ping}");
    // And db-0 reaches web-0 at A: its name from site A's DNS (web-0 may
    // still be booting: nothing above waited for it).
    let back = probe_until(&db0_ip, "tcp=web-0:7000", &format!("PROBE-OK {web0_ip} tick")).await;
    assert!(back.starts_with(&format!("PROBE-OK {web0_ip} tick")), "db-0 -> web-0:7000: {back}");
    stranger_at_b_cannot_reach(&s, &[&db0_ip]).await;
    stop_and_check_b_is_clean(&s, &db0.vee_id).await;
    s.end().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_vee_restored_at_site_b_from_a_checkpoint_keeps_its_addresses_and_its_service() {
    let _lab = lab::lock();
    let mut s = span("overlay-recover", "", &["a1", "a2"]).await;
    // The VEE alone on its host: when that host fails, the other (2 of 2
    // vCPUs taken) cannot take it, and site B restores it.
    let on = |v: &VeeInfo| s.vees.iter().filter(|o| host_of(o) == host_of(v)).count();
    let alone = s.vees.iter().find(|v| on(v) == 1).expect("a VEE alone on its host").clone();
    let other = s.vees.iter().find(|v| v.vee_id != alone.vee_id).unwrap().clone();
    let name = format!("{}-{}", alone.component, alone.instance);
    println!("{name} is alone on its host; the other host runs two VEEs");
    let mut acme = s.a.client(ACME).await;
    let cp = site::vee_action(&mut acme, &alone.vee_id, Action::Checkpoint)
        .await
        .unwrap()
        .latest_checkpoint;
    let host = host_of(&alone).unwrap();
    s.hosts.iter_mut().find(|h| h.host == host).unwrap().daemon.kill();
    veeh::hypervisor::Hypervisor::open(lab::SITE_A_URI, &host)
        .unwrap()
        .destroy(&alone.vee_id)
        .unwrap();
    let at_b =
        s.a.wait_vee(&alone.vee_id, "restored at site B", BOOT, |i| {
            i.state() == VeeState::Running && i.location == "remote (site-b)"
        })
        .await;
    assert_eq!(at_b.latest_checkpoint, cp);
    for n in &alone.nics {
        assert_eq!(nic(&at_b, &n.network), nic(&alone, &n.network), "{name}'s NIC on {}", n.network);
    }
    // Its service reaches it over the overlay, by name and address, and it
    // reaches them.
    let (_, ip, _) = nic(&alone, "backend");
    let (_, other_ip, _) = nic(&other, "backend");
    let tcp = probe_until(&other_ip, &format!("tcp={name}:7000"), &format!("PROBE-OK {ip} tick")).await;
    assert!(tcp.starts_with(&format!("PROBE-OK {ip} tick")), "-> {name}:7000 at B: {tcp}");
    let ping = probe(&ip, &format!("ping={other_ip}")).await;
    assert!(ping.starts_with("PROBE-OK"), "{name} at B -> {other_ip}: {ping}");
    // A web VEE keeps its external address at site A.
    if let Some(n) = alone.nics.iter().find(|n| n.network == "public") {
        let page = e2e::net::wait_http(&format!("http://{}/", n.external_address), BOOT)
            .await
            .map(|(p, _)| p);
        assert!(
            page.is_some_and(|p| p.contains(&name)),
            "{name} at B answers HTTP at {}",
            n.external_address
        );
    }
    stop_and_check_b_is_clean(&s, &alone.vee_id).await;
    s.end().await;
}
