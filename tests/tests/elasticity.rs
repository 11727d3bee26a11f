//! Elasticity on real guests (issue 40): a tiny guest made busy by its
//! first-boot script makes `web` grow from 1 to 2 within the rule's `for`
//! plus an evaluation period, and shrink again once both are idle and the
//! cooldown is over; `veem scale` beyond what the site can hold is refused
//! and changes nothing.

use std::time::{Duration, Instant};

use e2e::daemons::{ImageRepo, Veeh};
use e2e::net::{outside, OUTSIDE};
use e2e::site::{self, manifest, Veem, ACME};
use e2e::{guest, lab};
use interfaces::vmi::*;
use veem::peers::PeerClient;

/// The guest spins (a shell loop) for its first `busy_s` seconds.
fn busy_for(busy_s: u32) -> String {
    format!(
        "user_data = \"\"\"\n#!/bin/sh\n( end=$(( $(date +%s) + {busy_s} )); while [ $(date +%s) -lt $end ]; do :; done; echo 'vee-guest: idle now' ) &\n\"\"\"\n"
    )
}

/// The live (not terminated) VEEs of `service`.
async fn live(c: &mut PeerClient, service: &str) -> Vec<VeeInfo> {
    let vees = site::vees(c, service).await;
    vees.into_iter().filter(|v| v.state() != VeeState::Terminated).collect()
}

/// Waits up to `timeout` until `service` has `n` live VEEs, all running.
async fn wait_running(c: &mut PeerClient, service: &str, n: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let vees = live(c, service).await;
        if vees.len() == n && vees.iter().all(|v| v.state() == VeeState::Running) {
            return;
        }
        let seen: Vec<String> = vees.iter().map(|v| v.state().as_str_name().to_string()).collect();
        assert!(
            Instant::now() < deadline,
            "not {n} running VEEs of {service} after {timeout:?}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn elasticity_events(c: &mut PeerClient, service: &str) -> Vec<String> {
    site::history(c, service)
        .await
        .into_iter()
        .filter(|e| e.kind.starts_with("elasticity"))
        .map(|e| format!("{}: {}", e.kind, e.detail))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_busy_guest_makes_web_grow_and_it_shrinks_when_idle() {
    let _lab = lab::lock();
    let site = ElasticSite::start("elasticity", "").await;
    let (dir, ids, port) = (&site.dir, &site.ids, site.port);
    let mut acme = site.veem.client(ACME).await;
    let (for_s, cooldown_s) = (9, 15);
    let rule = format!(
        "[[elasticity]]\ncomponent = \"web\"\nmin = 1\nmax = 2\nmetric = \"cpu_utilization\"\n\
         scale_out_above = 0.5\nscale_in_below = 0.2\nfor = \"{for_s}s\"\ncooldown = \"{cooldown_s}s\"\n"
    );
    let m = manifest("elastic", "acme", ids, 1, "").replace("[[constraint]]", &format!("{}[[constraint]]", busy_for(30))) + &rule;
    let svc = site::deploy(&mut acme, m).await.unwrap();
    wait_running(&mut acme, &svc.service_id, 1, Duration::from_secs(180)).await;
    let running = Instant::now();

    // Busy: a second instance within `for` plus an evaluation period (and
    // the two metering rounds a rate needs, 3 s each).
    wait_running(&mut acme, &svc.service_id, 2, Duration::from_secs(180)).await;
    let grown = running.elapsed();
    let events = elasticity_events(&mut acme, &svc.service_id).await;
    assert!(
        events[0].contains("web 1 -> 2: cpu_utilization") && events[0].contains("above 0.5"),
        "{events:?}"
    );
    println!("scale-out: {grown:.1?} after the first instance ran (for {for_s}s, metering 3s, evaluation 2s)");
    // The guest's boot until its script spins, two metering rounds, `for`,
    // an evaluation: well under a minute.
    assert!(grown < Duration::from_secs(60), "{grown:?}");

    // Both idle: back to one, the higher index stopped.
    let deadline = Instant::now() + Duration::from_secs(240);
    while live(&mut acme, &svc.service_id).await.len() != 1 {
        assert!(
            Instant::now() < deadline,
            "not shrunk: {:?}",
            elasticity_events(&mut acme, &svc.service_id).await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let left = live(&mut acme, &svc.service_id).await;
    assert_eq!(left[0].vee_id, svc.vees[0].vee_id, "the first instance stays");
    let events = elasticity_events(&mut acme, &svc.service_id).await;
    assert!(
        events.iter().any(|e| e.contains("web 2 -> 1") && e.contains("below 0.2")),
        "{events:?}"
    );
    println!("scale-in: {:.1?} after the first instance ran", running.elapsed());

    // By hand beyond what two hosts hold (one instance per host): refused,
    // nothing changes.
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let endpoint = site::endpoint("site-a", port);
    let out = site::cli_at(&endpoint, &home, ACME, &["scale", &svc.service_id, "web", "3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("no host can take it"), "{stderr}");
    assert_eq!(live(&mut acme, &svc.service_id).await.len(), 1);
}

/// A KPI from inside the guest, derived from a file the test changes: the
/// guest's first-boot script reads a number from a server in the lab's
/// outside namespace (which serves the file) every second and writes it as
/// `active_sessions N` to its KPI channel (`org.vee.kpi.0`); the test
/// writes 7 into the file and a rule on `active_sessions` grows `web`.
/// The VEE's Stats carry the KPI.
#[tokio::test(flavor = "multi_thread")]
async fn lab_a_kpi_from_inside_the_guest_drives_a_rule() {
    let _lab = lab::lock();
    assert!(outside("true").0, "no namespace {OUTSIDE}: run scripts/setup-host");
    let site = ElasticSite::start("elasticity-kpi", "[networks]\nexternal_pool = \"10.80.5.0/28\"\n").await;
    let ids = &site.ids;
    let mut acme = site.veem.client(ACME).await;
    // The file, served to each connection on 10.79.0.2:9100 (outside).
    let file = site.dir.join("sessions");
    std::fs::write(&file, "0\n").unwrap();
    let server = Outside::serve(9100, &file);
    let rule = "[[elasticity]]\ncomponent = \"web\"\nmin = 1\nmax = 2\nmetric = \"active_sessions\"\n\
                scale_out_above = 5\nfor = \"4s\"\ncooldown = \"600s\"\n";
    let script = kpi_script("timeout 2 nc 10.79.0.2 9100 </dev/null");
    let m = manifest("kpi", "acme", ids, 1, "")
        .replace("cmdline = ", "networks = [\"public\"]\ncmdline = ")
        .replace(
            "[[constraint]]",
            &format!("{script}[[network]]\nname = \"public\"\nkind = \"external\"\nports = [80]\n[[constraint]]"),
        )
        + rule;
    let svc = site::deploy(&mut acme, m).await.unwrap();
    wait_running(&mut acme, &svc.service_id, 1, Duration::from_secs(180)).await;
    // Reporting 0 for a while: nothing grows.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        live(&mut acme, &svc.service_id).await.len(),
        1,
        "{:?}",
        elasticity_events(&mut acme, &svc.service_id).await
    );
    std::fs::write(&file, "7\n").unwrap();
    let changed = Instant::now();
    wait_running(&mut acme, &svc.service_id, 2, Duration::from_secs(120)).await;
    let events = elasticity_events(&mut acme, &svc.service_id).await;
    assert!(events[0].contains("web 1 -> 2: active_sessions 7.000 above 5"), "{events:?}");
    println!(
        "KPI scale-out: {:.1?} after the test wrote 7 into the file (for 4s, rules every 2s)",
        changed.elapsed()
    );
    // The VEEH hands the KPI over with the VEE's Stats.
    let mut seen = None;
    for h in &site.hosts {
        let req = interfaces::vhi::StatsRequest {
            vee_id: svc.vees[0].vee_id.clone(),
        };
        if let Ok(s) = h.client().await.stats(req).await {
            seen = Some(s.into_inner().kpis);
        }
    }
    let kpis = seen.expect("the first instance's host answers");
    assert!(kpis.iter().any(|k| k.name == "active_sessions" && k.value == 7.0), "{kpis:?}");
    drop(server);
}

/// A scheduled rule raises the count at its time: two daily schedules,
/// one instance from the current minute on and two from a minute ahead
/// (at least 20 s ahead); `web` runs one instance until then and two
/// after it.
#[tokio::test(flavor = "multi_thread")]
async fn lab_a_scheduled_rule_raises_the_count_at_its_time() {
    use chrono::Timelike;
    let _lab = lab::lock();
    let site = ElasticSite::start("elasticity-schedule", "").await;
    let mut acme = site.veem.client(ACME).await;
    let now = chrono::Utc::now();
    let this_minute = now.with_second(0).unwrap().with_nanosecond(0).unwrap();
    let mut at = this_minute + chrono::Duration::minutes(1);
    if at - now < chrono::Duration::seconds(20) {
        at += chrono::Duration::minutes(1);
    }
    let daily = |t: chrono::DateTime<chrono::Utc>| format!("{} {} * * *", t.minute(), t.hour());
    let rules = format!(
        "[[elasticity]]\ncomponent = \"web\"\nschedule = \"{}\"\ninstances = 1\n\
         [[elasticity]]\ncomponent = \"web\"\nschedule = \"{}\"\ninstances = 2\n",
        daily(this_minute),
        daily(at)
    );
    let m = manifest("scheduled", "acme", &site.ids, 1, "") + &rules;
    let svc = site::deploy(&mut acme, m).await.unwrap();
    wait_running(&mut acme, &svc.service_id, 1, Duration::from_secs(180)).await;
    let before = (at - chrono::Utc::now()).to_std().unwrap_or_default();
    if before > Duration::from_secs(3) {
        tokio::time::sleep(before - Duration::from_secs(3)).await;
        assert_eq!(live(&mut acme, &svc.service_id).await.len(), 1, "grown before its time");
    }
    wait_running(&mut acme, &svc.service_id, 2, Duration::from_secs(180)).await;
    let late = chrono::Utc::now() - at;
    let events = elasticity_events(&mut acme, &svc.service_id).await;
    assert!(
        events[0].contains("web 1 -> 2: scheduled: at least 2 instances since"),
        "{events:?}"
    );
    println!(
        "scheduled rule at {}: web ran 2 instances {:.1} s after its time",
        at.format("%H:%M"),
        late.num_milliseconds() as f64 / 1000.0
    );
}

/// A first-boot script that writes `active_sessions N` to the guest's KPI
/// port every second, N what shell command `value` prints (0 when it
/// prints nothing); the port found by its name in sysfs, as the tiny
/// guest has no udev.
fn kpi_script(value: &str) -> String {
    format!(
        "user_data = \"\"\"\n#!/bin/sh\nfor p in /sys/class/virtio-ports/*; do [ \"$(cat $p/name)\" = org.vee.kpi.0 ] && port=/dev/${{p##*/}}; done\n\
         ( while true; do n=$({value}); echo \"active_sessions ${{n:-0}}\" > $port; sleep 1; done ) &\n\"\"\"\n"
    )
}

/// [`kpi_script`] reporting 7 while `seven_while` (a shell test) holds,
/// else 0.
fn report_kpi(seven_while: &str) -> String {
    kpi_script(&format!("if {seven_while}; then echo 7; else echo 0; fi"))
}

/// A server in the outside namespace that sends `file`'s content to each
/// connection on `port` (busybox nc); stopped when dropped.
struct Outside(std::process::Child);

impl Outside {
    fn serve(port: u16, file: &std::path::Path) -> Self {
        let child = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                OUTSIDE,
                "busybox",
                "nc",
                "-ll",
                "-p",
                &port.to_string(),
                "-e",
                "cat",
            ])
            .arg(file)
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        Self(child)
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Site A of two VEEHs on the lab's first libvirtd, its VEEM deciding
/// elasticity rules every 2 s, the tiny guest in its repository.
struct ElasticSite {
    dir: std::path::PathBuf,
    ids: e2e::daemons::GuestIds,
    hosts: [Veeh; 2],
    veem: Veem,
    port: u16,
    _repo: ImageRepo,
}

impl ElasticSite {
    /// Site A for test `name`, with `extra` configuration.
    async fn start(name: &str, extra: &str) -> Self {
        let dir = lab::test_dir(name);
        let repo = ImageRepo::start(&dir).await;
        let ids = repo.push_guest(&guest::image()).await;
        let hosts = [
            Veeh::start(&dir, &format!("{name}-1"), "site-a", lab::SITE_A_URI, &repo).await,
            Veeh::start(&dir, &format!("{name}-2"), "site-a", lab::SITE_A_URI, &repo).await,
        ];
        let port = site::port();
        let cfg = site::write_config(
            &dir,
            "site-a",
            port,
            &repo,
            &[&hosts[0], &hosts[1]],
            &[],
            &format!("elasticity_interval = \"2s\"\n{extra}"),
        );
        let veem = Veem::start(&dir, "site-a", port, cfg).await;
        Self {
            dir,
            ids,
            hosts,
            veem,
            port,
            _repo: repo,
        }
    }
}

/// A KPI reported from inside a VEE running at site B drives a rule
/// evaluated at site A, its primary: the guest reports `active_sessions
/// 0`, and 7 once `/busy` exists, which the provider creates from the
/// VEE's serial console (through site A, relayed from site B) after it
/// was live migrated to site B; site B reads the KPI and sends it back
/// with the usage records; site A grows `web` with an instance of its
/// own. The delay from the guest's report being read at B to its arrival
/// at A is printed.
#[tokio::test(flavor = "multi_thread")]
async fn lab_a_kpi_from_a_vee_at_site_b_drives_a_rule_at_site_a() {
    let _lab = lab::lock();
    let l = e2e::two_sites::TwoSites::start("elasticity-peer", "elasticity_interval = \"2s\"\n").await;
    let mut acme = l.a.client(ACME).await;
    let rule = "[[elasticity]]\ncomponent = \"web\"\nmin = 1\nmax = 2\nmetric = \"active_sessions\"\n\
                scale_out_above = 5\nfor = \"4s\"\ncooldown = \"600s\"\n";
    let script = report_kpi("[ -e /busy ]");
    let m = manifest("kpi-peer", "acme", &l.ids, 1, "").replace("[[constraint]]", &format!("{script}[[constraint]]")) + rule;
    let svc = site::deploy(&mut acme, m).await.unwrap();
    let vee = svc.vees[0].vee_id.clone();
    wait_running(&mut acme, &svc.service_id, 1, Duration::from_secs(180)).await;
    let migrated = site::migrate_approved(&l.a, &vee, "site-b", "").await;
    assert_eq!(migrated.state(), MigrationState::Done, "{}", migrated.detail);
    assert!(elasticity_events(&mut acme, &svc.service_id).await.is_empty());
    let console = e2e::console::Console::attach(&mut acme, &vee).await.unwrap();
    console.type_line("touch /busy && echo made-$((6*7))").await;
    console.wait_for("made-42", Duration::from_secs(30)).await;
    wait_running(&mut acme, &svc.service_id, 2, Duration::from_secs(240)).await;
    let events = elasticity_events(&mut acme, &svc.service_id).await;
    assert!(events[0].contains("web 1 -> 2: active_sessions 7.000 above 5"), "{events:?}");
    let mut op = l.a.client(site::OPERATOR).await;
    let first = op.get_vee(GetVeeRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
    assert_eq!(first.location, "remote (site-b)", "the KPI's VEE runs at site B");
    // Site A had the KPI from site B: its log says how late.
    let log = l.a.daemon.log_text();
    let delays: Vec<i64> = log
        .lines()
        .filter(|line| line.contains("KPIs from a peer site") && line.contains(&vee))
        .filter_map(|line| {
            line.split("delay_ms=")
                .nth(1)?
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(!delays.is_empty(), "site A logged no KPIs from site B");
    println!(
        "KPI from site B to site A: delay {} ms at most over {} records (usage_interval 3 s at B)",
        delays.iter().max().unwrap(),
        delays.len()
    );
}
