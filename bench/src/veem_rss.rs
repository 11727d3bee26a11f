//! The resident memory of the real `veem serve` daemon holding 100,000 VEEs.
//!
//! 1. A VEEM state directory is written with the `veem` library, through
//!    the same calls the daemon uses (`Veem::open`, `Veem::request`,
//!    `Planner::admit`, `save_vee`, `transition`, `event`,
//!    `persist_planner`): 10,000 hosts (32 vCPUs, 128 GiB, 2,000 GiB) in the
//!    planner and 25,000 services of 4 anti-affine VEEs (1 vCPU, 1 GiB,
//!    10 GiB; host anti-affinity, instance scope, as `planner.rs`), admitted
//!    for one day from now. Each VEE is recorded as `veem` records it when
//!    Deploy admits it and `deploy_vee` boots it: admitted, an `admitted`
//!    event, then admitted -> deploying -> running with their events. The
//!    planner is persisted once at the end (the daemon does so after every
//!    Deploy; the cost of one such write at this size is measured).
//! 2. `veem serve` (the sibling binary of this one) is started on it with an
//!    empty `[[hosts]]` list: it heartbeats and reconciles only configured
//!    hosts, so the 10,000 planner hosts cost it no network calls, and VEEs
//!    recorded running on hosts it does not know are left as they are. Its
//!    load time is from spawn until it answers a VMI call (ListMigrations
//!    with the operator's token). VmRSS is read from /proc/PID/status then,
//!    after an idle period (its scheduler, metering and peer-watch loops
//!    run), and after one ListServices listing every service and VEE.
//!    With `configured` ([`run`]), the VEEs are spread over fewer,
//!    larger hosts (64 vCPUs, 256 GiB; 2,000 of them in `vee-bench
//!    planner`), each one configured (`[[hosts]]`, plaintext) and answered
//!    by a fake VEEH in this process ([`crate::fake_hosts`]): heartbeats,
//!    start-up reconciliation, the domain watch and metering run against
//!    them, and the idle period is 60 s.
//! 3. The daemon is killed and the directory removed, also on error, panic
//!    or SIGINT / SIGTERM ([`Cleanup`]); the daemon also dies with this
//!    process (PR_SET_PDEATHSIG).
//!
//! The state directory (about 510 MiB at 100,000 VEEs) is under /dev/shm
//! when it exists, else under `target/bench`; `BENCH_VEEM_DIR` overrides.
//! sled flushes after every record: the 625,000 writes take about 25 s on
//! tmpfs and about twice that on the lab VM's disk. tmpfs pages are not
//! part of the daemon's VmRSS (sled reads with pread, no mmap).

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use interfaces::manifest::Manifest;
use interfaces::vmi::vmi_service_client::VmiServiceClient;
use prost::Message;
use serde_json::{json, Value};
use veem::config::VeemConfig;
use veem::manager::Veem;
use veem::model::VeeState;
use veem::peers::Bearer;
use veem::planner::{Admission, HostSpec, Profile, Resources};
use veem::store::Tree;

use crate::planner::{round1, round3};

const SITE: &str = "bench-site";
const OPERATOR: &str = "bench-operator-token";
/// Longest wait for the daemon to answer after its start, in seconds.
const LOAD_TIMEOUT_S: u64 = 900;
/// Idle period before the second VmRSS reading, in seconds: every
/// periodic loop of the daemon (metering: 10 s) runs at least once.
const IDLE_S: u64 = 12;
/// The idle period with hosts configured, in seconds: heartbeats (2 s),
/// the domain watch (2 s) and metering (10 s) run several rounds.
const IDLE_HOSTS_S: u64 = 60;
/// ListServices pages read one after another (each from the last's token).
const LIST_PAGES: usize = 5;

/// The services' manifest: 4 anti-affine VEEs; an explicit 6 h checkpoint
/// period so that no scheduled checkpoint falls due during the run.
pub(crate) const MANIFEST: &str = r#"
[service]
name = "bench-svc"
provider = "bench"

[sla]
guarantee = "standard"
checkpoint_interval = "6h"
migration = "site"
penalty_per_hour = 1.0

[[component]]
name = "vm"
instances = 4
vcpus = 1
memory_mib = 1024
disk_gib = 10
image = "sha256:5555555555555555555555555555555555555555555555555555555555555555"
kernel = "sha256:6666666666666666666666666666666666666666666666666666666666666666"
initrd = "sha256:7777777777777777777777777777777777777777777777777777777777777777"
cmdline = "console=ttyS0 quiet"

[[constraint]]
kind = "anti-affinity"
level = "host"
scope = "instance"
components = ["vm"]
"#;

/// VEEs per service in [`MANIFEST`].
pub(crate) const VEES_PER_SERVICE: usize = 4;

/// Kills the daemon and removes the state directory, once: on drop, or
/// from the SIGINT / SIGTERM handler (which skips the destructors).
struct Cleanup {
    dir: PathBuf,
    pid: AtomicU32,
    child: Mutex<Option<Child>>,
    done: AtomicBool,
    /// Keep the directory (`BENCH_VEEM_REUSE`: the next run starts from it).
    keep: bool,
}

impl Cleanup {
    fn run_now(&self) {
        if self.done.swap(true, Ordering::SeqCst) {
            return;
        }
        match self.child.try_lock() {
            Ok(mut c) => {
                if let Some(mut c) = c.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
            // Held by the main thread (handler): kill by PID.
            Err(_) => {
                let pid = self.pid.load(Ordering::SeqCst);
                if pid != 0 {
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                }
            }
        }
        if !self.keep && std::env::var_os("BENCH_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.run_now();
    }
}

/// A field of /proc/PID/status in MiB (`VmRSS`, `VmHWM`).
fn status_mib(pid: u32, field: &str) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).context("read /proc/PID/status")?;
    let kb = s
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))?;
    Ok(kb / 1024.0)
}

/// User + system CPU time of a process in seconds (/proc/PID/stat).
fn cpu_s(pid: u32) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = s.rsplit_once(')').context("/proc/PID/stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    Ok(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
}

/// Bytes of the files under `dir`, in MiB.
fn dir_mib(dir: &Path) -> f64 {
    fn walk(p: &Path) -> u64 {
        std::fs::read_dir(p)
            .map(|rd| {
                rd.flatten()
                    .map(|e| match e.metadata() {
                        Ok(m) if m.is_dir() => walk(&e.path()),
                        Ok(m) => m.len(),
                        Err(_) => 0,
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(dir) as f64 / (1024.0 * 1024.0)
}

fn base_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("BENCH_VEEM_DIR") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        return shm.to_path_buf();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("target/bench")
}

/// The daemon's config: no peers, the operator's token, the hosts
/// `hosts` (name, plaintext endpoint) if any.
fn write_config(dir: &Path, port: u16, hosts: &[(String, String)]) -> Result<PathBuf> {
    let vmi = vee_testkit::pki::site(SITE).vmi("127.0.0.1");
    let mut text = format!(
        "site_id = \"{SITE}\"\nlisten = \"127.0.0.1:{port}\"\ndb = \"{}\"\nimage_repo = \"http://127.0.0.1:9\"\ninsecure = {}\n\n[tls]\ncert = \"{}\"\nkey = \"{}\"\n[[tokens]]\ntoken = \"{OPERATOR}\"\nrole = \"operator\"\n",
        dir.join("state").display(),
        !hosts.is_empty(),
        vmi.cert.display(),
        vmi.key.display()
    );
    for (name, endpoint) in hosts {
        text.push_str(&format!("[[hosts]]\nname = \"{name}\"\nendpoint = \"{endpoint}\"\n"));
    }
    let path = dir.join("veem.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Writes the state of `hosts` hosts of `capacity` and `vees` running VEEs
/// with the `veem` library into the config's database; returns what it
/// measured and each host's VEEs (by host name, IDs sorted).
fn build_state(config: &Path, hosts: usize, vees: usize, capacity: Resources) -> Result<(Value, BTreeMap<String, Vec<String>>)> {
    let t_all = Instant::now();
    let veem = Veem::open(VeemConfig::load(config)?)?;
    let core = &veem.core;
    {
        let mut p = core.planner();
        let profile = Profile {
            arch: "x86_64".into(),
            machine: "pc-q35-8.2".into(),
            qemu_version: "8.2.2".into(),
            libvirt_version: "10.0.0".into(),
            accel: "kvm".into(),
            cpu_model: "host-model".into(),
        };
        for i in 0..hosts {
            p.add_host(HostSpec::new(format!("h{i:05}"), capacity, SITE, SITE).with_profile(profile.clone()))?;
        }
    }
    let m = Manifest::from_toml(MANIFEST).map_err(|e| anyhow::anyhow!("bench manifest: {e}"))?;
    let services = vees / VEES_PER_SERVICE;
    let (mut admit_s, mut written) = (0.0f64, 0usize);
    for s in 0..services {
        let req = veem.deploy.request(&m, &uuid::Uuid::new_v4().to_string());
        let t = Instant::now();
        let verdict = core.planner().admit(&req);
        admit_s += t.elapsed().as_secs_f64();
        let Admission::Accepted(a) = verdict else {
            bail!("service {s} of {services} not admitted: {verdict:?}")
        };
        let (svc, mut vs) = veem.deploy.admission_records(&m, MANIFEST, &req, Some(&a), None);
        // As `Veem::deploy`: VEE records, the service, `admitted` events.
        for v in &vs {
            core.save_vee(v)?;
        }
        core.store().put(Tree::Services, &svc.id, &svc)?;
        for v in &vs {
            core.event(&v.id, &svc.id, "admitted", format!("on {}", v.host().unwrap_or("?")));
        }
        // As `Veem::deploy_vee` once the host started it.
        for v in &mut vs {
            let on = format!("on {}", v.host().unwrap_or("?"));
            core.transition(v, VeeState::Deploying, on.clone())?;
            core.transition(v, VeeState::Running, on)?;
        }
        written += 1 + 6 * vs.len();
        if (s + 1) % 2500 == 0 {
            eprintln!(
                "veem-rss: {} of {services} services recorded ({:.0} s)",
                s + 1,
                t_all.elapsed().as_secs_f64()
            );
        }
    }
    let t = Instant::now();
    core.persist_planner()?;
    let persist_s = t.elapsed().as_secs_f64();
    // What one more Deploy writes, as Deploy does: its plan's planner
    // entries, its service and VEE records in one commit, the plan then
    // applied to the planner.
    // The median of 5 such Deploys.
    // The median of 5 such Deploys; then of 5 more, each after a
    // heartbeat round of every host (each host's measured load changes, as
    // a VEEH's does from one heartbeat to the next).
    let mut deploys = [Vec::new(), Vec::new()];
    for (k, times) in deploys.iter_mut().enumerate() {
        for round in 0..5 {
            if k == 1 {
                let mut p = core.planner();
                for i in 0..hosts {
                    let _ = p.set_measured_load(&format!("h{i:05}"), 0.2 + 0.01 * ((i + round) % 7) as f64);
                }
            }
            let req = veem.deploy.request(&m, &uuid::Uuid::new_v4().to_string());
            let plan = core
                .planner()
                .plan_admission(&req)
                .map_err(|a| anyhow::anyhow!("one more service not admitted: {a:?}"))?;
            let (svc, vs) = veem.deploy.admission_records(&m, MANIFEST, &req, Some(&plan.admitted), None);
            let t = Instant::now();
            core.commit_admission_plan(plan, &svc, &vs, veem::store::Writes::default())?
                .map_err(|s| anyhow::anyhow!("{s}"))?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
    }
    let [one, beaten] = deploys;
    let persist_one_s = one[one.len() / 2];
    let planner_mib = serde_json::to_vec(&*core.planner())?.len() as f64 / (1024.0 * 1024.0);
    let reservations = core.planner().reservation_count();
    let build_s = t_all.elapsed().as_secs_f64();
    let mut placed: BTreeMap<String, Vec<String>> = (0..hosts).map(|i| (format!("h{i:05}"), Vec::new())).collect();
    for v in core.vees() {
        if let Some(h) = v.host() {
            placed.entry(h.to_string()).or_default().push(v.id.clone());
        }
    }
    drop(veem); // closes (and flushes) the database before the daemon opens it
    let built = json!({
        "build_s": round3(build_s),
        "admission_s": round3(admit_s),
        "records_written": written,
        "reservations": reservations,
        "planner_json_mib": round1(planner_mib),
        "persist_planner_s": round3(persist_s),
        "persist_one_deploy_s": round3(persist_one_s),
        "persist_one_deploy_ms_all": one.iter().map(|s| round3(s * 1000.0)).collect::<Vec<_>>(),
        "persist_one_deploy_after_heartbeats_ms": round3(beaten[beaten.len() / 2] * 1000.0),
        "persist_one_deploy_after_heartbeats_ms_all": beaten.iter().map(|s| round3(s * 1000.0)).collect::<Vec<_>>(),
    });
    Ok((built, placed))
}

/// Starts `veem serve --config config`, killed if this process dies.
fn spawn_daemon(dir: &Path, config: &Path, cleanup: &Cleanup) -> Result<u32> {
    let log = std::fs::File::create(dir.join("veem.log"))?;
    let veem = vee_testkit::lab::try_binary("veem").map_err(anyhow::Error::msg)?;
    // A profiler's command line before the daemon's (`BENCH_VEEM_WRAP`,
    // e.g. "perf record -g -o FILE --"): its figures are then the wrapper's.
    let wrap = std::env::var("BENCH_VEEM_WRAP").unwrap_or_default();
    let mut words = wrap.split_whitespace();
    let mut cmd = match words.next() {
        Some(w) => {
            let mut c = Command::new(w);
            c.args(words).arg(veem);
            c
        }
        None => Command::new(veem),
    };
    cmd.args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log));
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd.spawn().context("start veem serve")?;
    let pid = child.id();
    eprintln!("veem-rss: veem serve started, pid {pid}");
    cleanup.pid.store(pid, Ordering::SeqCst);
    *cleanup.child.lock().unwrap() = Some(child);
    Ok(pid)
}

fn check_alive(dir: &Path, cleanup: &Cleanup) -> Result<()> {
    if let Some(c) = cleanup.child.lock().unwrap().as_mut() {
        if let Ok(Some(st)) = c.try_wait() {
            bail!(
                "veem serve exited ({st}); log:\n{}",
                std::fs::read_to_string(dir.join("veem.log")).unwrap_or_default()
            );
        }
    }
    Ok(())
}

type Client = VmiServiceClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>>;

/// Waits until the daemon answers ListMigrations with the operator token.
async fn wait_ready(dir: &Path, cleanup: &Cleanup, endpoint: &str) -> Result<Client> {
    let t = Instant::now();
    loop {
        check_alive(dir, cleanup)?;
        if let Ok(ch) = vee_testkit::pki::site(SITE).vmi_channel(endpoint, None).await {
            let mut c = VmiServiceClient::with_interceptor(ch, Bearer::new(OPERATOR)?).max_decoding_message_size(usize::MAX);
            if c.list_migrations(interfaces::vmi::ListMigrationsRequest::default()).await.is_ok() {
                return Ok(c);
            }
        }
        if t.elapsed() > Duration::from_secs(LOAD_TIMEOUT_S) {
            bail!("veem serve did not answer within {LOAD_TIMEOUT_S} s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the daemon on the state in `dir` and measures it, idle for
/// `idle_s` seconds; `calls` reads the fake hosts' calls answered
/// (GetHostInfo, ListDomains, Stats, ListStats), if there are any.
async fn measure(
    dir: &Path,
    config: &Path,
    endpoint: &str,
    cleanup: &Cleanup,
    idle_s: u64,
    calls: Option<&crate::fake_hosts::Calls>,
) -> Result<Value> {
    let t0 = Instant::now();
    let pid = spawn_daemon(dir, config, cleanup)?;
    let mut c = wait_ready(dir, cleanup, endpoint).await?;
    let load_s = t0.elapsed().as_secs_f64();
    let cpu_load_s = cpu_s(pid)?;
    let rss_ready = status_mib(pid, "VmRSS")?;
    eprintln!("veem-rss: veem serve answers after {load_s:.2} s; VmRSS {rss_ready:.1} MiB");
    // Idle: the scheduler (every 1 s), peer watch (2 s), heartbeats and the
    // domain watch (2 s) and metering (10 s) run; VmRSS sampled every 0.5 s.
    let calls0 = calls.map(|f| f());
    let cpu0 = cpu_s(pid)?;
    let mut rss_idle_max = rss_ready;
    for _ in 0..idle_s * 2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        rss_idle_max = rss_idle_max.max(status_mib(pid, "VmRSS")?);
    }
    let idle_cpu_pct = (cpu_s(pid)? - cpu0) / idle_s as f64 * 100.0;
    let rss_idle = status_mib(pid, "VmRSS")?;
    let idle_calls = calls.zip(calls0).map(|(f, c0)| {
        let c1 = f();
        json!({"get_host_info": c1[0] - c0[0], "list_domains": c1[1] - c0[1], "stats": c1[2] - c0[2], "list_stats": c1[3] - c0[3]})
    });
    eprintln!("veem-rss: after {idle_s} s idle: VmRSS {rss_idle:.1} MiB (max {rss_idle_max:.1}), CPU {idle_cpu_pct:.1} % of one core; host calls {idle_calls:?}");
    // Pages of ListServices (the default page size), each from the last's
    // token: the first's time, and the median of all.
    let (mut pages, mut token, mut first) = (Vec::new(), String::new(), None);
    for _ in 0..LIST_PAGES {
        let t = Instant::now();
        let list = c
            .list_services(interfaces::vmi::ListServicesRequest {
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .context("ListServices")?
            .into_inner();
        pages.push(t.elapsed().as_secs_f64());
        token = list.next_page_token.clone();
        first.get_or_insert(list);
        if token.is_empty() {
            break;
        }
    }
    let list = first.context("no ListServices page")?;
    let list_s = pages[0];
    let mut sorted = pages.clone();
    sorted.sort_by(f64::total_cmp);
    let page_median_s = sorted[sorted.len() / 2];
    let listed_vees: usize = list.services.iter().map(|s| s.vees.len()).sum();
    let running = list
        .services
        .iter()
        .filter(|s| s.state() == interfaces::vmi::ServiceState::Running)
        .count();
    let rss_list = status_mib(pid, "VmRSS")?;
    let hwm = status_mib(pid, "VmHWM")?;
    eprintln!(
        "veem-rss: ListServices: {} services, {listed_vees} VEEs in {list_s:.3} s (median of {} pages {page_median_s:.3} s); VmRSS {rss_list:.1} MiB (peak {hwm:.1})",
        list.services.len(),
        pages.len()
    );
    check_alive(dir, cleanup)?;
    let warnings = std::fs::read_to_string(dir.join("veem.log")).unwrap_or_default().lines().count();
    Ok(json!({
        "load_s": round3(load_s),
        "cpu_s_until_ready": round3(cpu_load_s),
        "rss_mib_ready": round1(rss_ready),
        "rss_mib_idle": round1(rss_idle),
        "rss_mib_idle_max": round1(rss_idle_max),
        "idle_s": idle_s,
        "idle_cpu_pct": round1(idle_cpu_pct),
        "idle_host_calls": idle_calls,
        "list_services_s": round3(list_s),
        "list_services_page_ms": pages.iter().map(|s| round3(s * 1000.0)).collect::<Vec<_>>(),
        "list_services_page_median_ms": round3(page_median_s * 1000.0),
        "list_services_services": list.services.len(),
        "list_services_running": running,
        "list_services_vees": listed_vees,
        "list_services_mib": round1(list.encoded_len() as f64 / (1024.0 * 1024.0)),
        "rss_mib_after_list_services": round1(rss_list),
        "hwm_mib": round1(hwm),
        "log_lines": warnings,
    }))
}

/// The whole measurement at `hosts` hosts and `vees` VEEs (a multiple of
/// 4), the hosts `configured` or not. JSON, units in the key suffixes (`_s` seconds, `_mib` MiB, `_pct`
/// percent of one core):
/// - `build`: writing the state in-process: `build_s`, `admission_s` (the
///   planner's share), `records_written` (VEE, service and event records),
///   `planner_json_mib` (the whole planner as JSON), `persist_planner_s`
///   (its first write, all of it) and `persist_one_deploy_s` (what one
///   more Deploy then writes: its plan's planner entries with its service
///   and VEE records in one commit, `Core::commit_admission_plan`);
///   `persist_one_deploy_after_heartbeats_ms` is the same after every
///   host's measured load changed, as heartbeats change it (ms);
/// - `db_mib`: the sled directory;
/// - `daemon`: `load_s` (spawn until the first VMI answer),
///   `cpu_s_until_ready`, VmRSS at that moment (`rss_mib_ready`), after
///   [`IDLE_S`] idle seconds (`rss_mib_idle`, the largest sample
///   `rss_mib_idle_max`, `idle_cpu_pct`), ListServices (`list_services_s`,
///   its size `list_services_mib`, the counts listed; then
///   `list_services_page_ms`, [`LIST_PAGES`] pages one after another, and
///   their median `list_services_page_median_ms`), VmRSS after it
///   (`rss_mib_after_list_services`), the peak VmHWM (`hwm_mib`) and,
///   with hosts configured, the fake hosts' calls over the idle period
///   (`idle_host_calls`).
///
/// `BENCH_VEEM_REUSE=DIR` keeps the state in DIR and starts the next run
/// from it (the daemon's own writes of the runs before included; with
/// `BENCH_VEEM_BUILD_ONLY` set too, the state is written and no daemon
/// started, so that runs can start from copies of it);
/// `BENCH_VEEM_WRAP` runs the daemon under a profiler.
pub fn run(hosts: usize, vees: usize, configured: bool) -> Result<Value> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let reuse = std::env::var_os("BENCH_VEEM_REUSE").map(PathBuf::from);
    let dir = reuse
        .clone()
        .unwrap_or_else(|| base_dir().join(format!("veem-rss-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])));
    std::fs::create_dir_all(&dir)?;
    let cleanup = Arc::new(Cleanup {
        dir: dir.clone(),
        pid: AtomicU32::new(0),
        child: Mutex::new(None),
        done: AtomicBool::new(false),
        keep: reuse.is_some(),
    });
    {
        let _g = rt.enter();
        use tokio::signal::unix::{signal, SignalKind};
        let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
        let c = cleanup.clone();
        rt.spawn(async move {
            let code = tokio::select! { _ = term.recv() => 143, _ = int.recv() => 130 };
            eprintln!("veem-rss: interrupted; killing veem serve, removing {}", c.dir.display());
            c.run_now();
            std::process::exit(code);
        });
    }
    let port = vee_testkit::lab::free_port();
    let config = write_config(&dir, port, &[])?;
    // Configured hosts: fewer, larger ones carry the VEEs (packed).
    let capacity = if configured {
        Resources::new(64, 256 * 1024, 4000)
    } else {
        Resources::new(32, 128 * 1024, 2000)
    };
    let saved = dir.join("built.json");
    let (built, placed): (Value, BTreeMap<String, Vec<String>>) = match std::fs::read(&saved) {
        Ok(b) if reuse.is_some() => serde_json::from_slice(&b)?,
        _ => {
            eprintln!("veem-rss: writing {hosts} hosts and {vees} VEEs into {}", dir.display());
            let b = build_state(&config, hosts, vees, capacity)?;
            if reuse.is_some() {
                std::fs::write(&saved, serde_json::to_vec(&b)?)?;
            }
            b
        }
    };
    let db_mib = dir_mib(&dir.join("state"));
    eprintln!("veem-rss: state written: {built}; database {db_mib:.1} MiB");
    if reuse.is_some() && std::env::var_os("BENCH_VEEM_BUILD_ONLY").is_some() {
        // The state alone, kept for runs to start from copies of it.
        return Ok(json!({ "build": built, "db_mib": round1(db_mib) }));
    }
    let (config, calls): (_, Option<crate::fake_hosts::Calls>) = if configured {
        let fakes = placed
            .into_iter()
            .map(|(name, vees)| crate::fake_hosts::FakeHost { name, vees })
            .collect();
        let (endpoints, calls) = crate::fake_hosts::start(&rt, SITE, (capacity.vcpus, capacity.memory_mib, capacity.disk_gib), fakes)?;
        (write_config(&dir, port, &endpoints)?, Some(calls))
    } else {
        (config, None)
    };
    let endpoint = format!("https://127.0.0.1:{port}");
    let idle_s = if configured { IDLE_HOSTS_S } else { IDLE_S };
    let daemon = rt.block_on(measure(&dir, &config, &endpoint, &cleanup, idle_s, calls.as_ref()))?;
    cleanup.run_now();
    Ok(json!({
        "hosts": hosts,
        "vees": vees,
        "services": vees / VEES_PER_SERVICE,
        "config_hosts": if configured { hosts } else { 0 },
        "state_dir": base_dir().display().to_string(),
        "db_mib": round1(db_mib),
        "build": built,
        "daemon": daemon,
    }))
}
