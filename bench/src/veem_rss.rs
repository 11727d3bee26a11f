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
//! 3. The daemon is killed and the directory removed, also on error, panic
//!    or SIGINT / SIGTERM ([`Cleanup`]); the daemon also dies with this
//!    process (PR_SET_PDEATHSIG).
//!
//! The state directory (about 510 MiB at 100,000 VEEs) is under /dev/shm
//! when it exists, else under `target/bench`; `BENCH_VEEM_DIR` overrides.
//! sled flushes after every record: the 625,000 writes take about 25 s on
//! tmpfs and about twice that on the lab VM's disk. tmpfs pages are not
//! part of the daemon's VmRSS (sled reads with pread, no mmap).

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
        if std::env::var_os("BENCH_KEEP").is_none() {
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

/// The daemon's config: no hosts, no peers, the operator's token.
fn write_config(dir: &Path, port: u16) -> Result<PathBuf> {
    let vmi = vee_testkit::pki::site(SITE).vmi("127.0.0.1");
    let text = format!(
        "site_id = \"{SITE}\"\nlisten = \"127.0.0.1:{port}\"\ndb = \"{}\"\nimage_repo = \"http://127.0.0.1:9\"\n\n[tls]\ncert = \"{}\"\nkey = \"{}\"\n[[tokens]]\ntoken = \"{OPERATOR}\"\nrole = \"operator\"\n",
        dir.join("state").display(),
        vmi.cert.display(),
        vmi.key.display()
    );
    let path = dir.join("veem.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Writes the state of `hosts` hosts and `vees` running VEEs with the
/// `veem` library into the config's database; returns what it measured.
fn build_state(config: &Path, hosts: usize, vees: usize) -> Result<Value> {
    let t_all = Instant::now();
    let veem = Veem::open(VeemConfig::load(config)?)?;
    {
        let mut p = veem.planner();
        let profile = Profile {
            arch: "x86_64".into(),
            machine: "pc-q35-8.2".into(),
            qemu_version: "8.2.2".into(),
            libvirt_version: "10.0.0".into(),
            accel: "kvm".into(),
            cpu_model: "host-model".into(),
        };
        for i in 0..hosts {
            p.add_host(HostSpec::new(format!("h{i:05}"), Resources::new(32, 128 * 1024, 2000), SITE, SITE).with_profile(profile.clone()))?;
        }
    }
    let m = Manifest::from_toml(MANIFEST).map_err(|e| anyhow::anyhow!("bench manifest: {e}"))?;
    let services = vees / VEES_PER_SERVICE;
    let (mut admit_s, mut written) = (0.0f64, 0usize);
    for s in 0..services {
        let req = veem.deploy.request(&m, &uuid::Uuid::new_v4().to_string());
        let t = Instant::now();
        let verdict = veem.planner().admit(&req);
        admit_s += t.elapsed().as_secs_f64();
        let Admission::Accepted(a) = verdict else {
            bail!("service {s} of {services} not admitted: {verdict:?}")
        };
        let (svc, mut vs) = veem.deploy.admission_records(&m, MANIFEST, &req, Some(&a), None);
        // As `Veem::deploy`: VEE records, the service, `admitted` events.
        for v in &vs {
            veem.save_vee(v)?;
        }
        veem.store().put(Tree::Services, &svc.id, &svc)?;
        for v in &vs {
            veem.event(&v.id, &svc.id, "admitted", format!("on {}", v.host().unwrap_or("?")));
        }
        // As `Veem::deploy_vee` once the host started it.
        for v in &mut vs {
            let on = format!("on {}", v.host().unwrap_or("?"));
            veem.transition(v, VeeState::Deploying, on.clone())?;
            veem.transition(v, VeeState::Running, on)?;
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
    veem.persist_planner()?;
    let persist_s = t.elapsed().as_secs_f64();
    // What one more Deploy writes, as Deploy does: its plan's planner
    // entries, its service and VEE records in one commit, the plan then
    // applied to the planner.
    // The median of 5 such Deploys.
    let mut one = Vec::new();
    for _ in 0..5 {
        let req = veem.deploy.request(&m, &uuid::Uuid::new_v4().to_string());
        let plan = veem
            .planner()
            .plan_admission(&req)
            .map_err(|a| anyhow::anyhow!("one more service not admitted: {a:?}"))?;
        let (svc, vs) = veem.deploy.admission_records(&m, MANIFEST, &req, Some(&plan.admitted), None);
        let t = Instant::now();
        veem.commit_admission_plan(plan, &svc, &vs, veem::store::Writes::default())?
            .map_err(|s| anyhow::anyhow!("{s}"))?;
        one.push(t.elapsed().as_secs_f64());
    }
    one.sort_by(f64::total_cmp);
    let persist_one_s = one[one.len() / 2];
    let planner_mib = serde_json::to_vec(&*veem.planner())?.len() as f64 / (1024.0 * 1024.0);
    let reservations = veem.planner().reservation_count();
    let build_s = t_all.elapsed().as_secs_f64();
    drop(veem); // closes (and flushes) the database before the daemon opens it
    Ok(json!({
        "build_s": round3(build_s),
        "admission_s": round3(admit_s),
        "records_written": written,
        "reservations": reservations,
        "planner_json_mib": round1(planner_mib),
        "persist_planner_s": round3(persist_s),
        "persist_one_deploy_s": round3(persist_one_s),
    }))
}

/// Starts `veem serve --config config`, killed if this process dies.
fn spawn_daemon(dir: &Path, config: &Path, cleanup: &Cleanup) -> Result<u32> {
    let log = std::fs::File::create(dir.join("veem.log"))?;
    let mut cmd = Command::new(vee_testkit::lab::try_binary("veem").map_err(anyhow::Error::msg)?);
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

/// Runs the daemon on the state in `dir` and measures it.
async fn measure(dir: &Path, config: &Path, endpoint: &str, cleanup: &Cleanup) -> Result<Value> {
    let t0 = Instant::now();
    let pid = spawn_daemon(dir, config, cleanup)?;
    let mut c = wait_ready(dir, cleanup, endpoint).await?;
    let load_s = t0.elapsed().as_secs_f64();
    let cpu_load_s = cpu_s(pid)?;
    let rss_ready = status_mib(pid, "VmRSS")?;
    eprintln!("veem-rss: veem serve answers after {load_s:.2} s; VmRSS {rss_ready:.1} MiB");
    // Idle: the scheduler (every 1 s), peer watch (2 s) and metering (10 s)
    // loops each list every VEE record; VmRSS sampled every 0.5 s.
    let cpu0 = cpu_s(pid)?;
    let mut rss_idle_max = rss_ready;
    for _ in 0..IDLE_S * 2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        rss_idle_max = rss_idle_max.max(status_mib(pid, "VmRSS")?);
    }
    let idle_cpu_pct = (cpu_s(pid)? - cpu0) / IDLE_S as f64 * 100.0;
    let rss_idle = status_mib(pid, "VmRSS")?;
    eprintln!("veem-rss: after {IDLE_S} s idle: VmRSS {rss_idle:.1} MiB (max {rss_idle_max:.1}), CPU {idle_cpu_pct:.0} % of one core");
    let t = Instant::now();
    let list = c
        .list_services(interfaces::vmi::ListServicesRequest::default())
        .await
        .context("ListServices")?
        .into_inner();
    let list_s = t.elapsed().as_secs_f64();
    let listed_vees: usize = list.services.iter().map(|s| s.vees.len()).sum();
    let running = list
        .services
        .iter()
        .filter(|s| s.state() == interfaces::vmi::ServiceState::Running)
        .count();
    let rss_list = status_mib(pid, "VmRSS")?;
    let hwm = status_mib(pid, "VmHWM")?;
    eprintln!(
        "veem-rss: ListServices: {} services, {listed_vees} VEEs in {list_s:.2} s; VmRSS {rss_list:.1} MiB (peak {hwm:.1})",
        list.services.len()
    );
    check_alive(dir, cleanup)?;
    let warnings = std::fs::read_to_string(dir.join("veem.log")).unwrap_or_default().lines().count();
    Ok(json!({
        "load_s": round3(load_s),
        "cpu_s_until_ready": round3(cpu_load_s),
        "rss_mib_ready": round1(rss_ready),
        "rss_mib_idle": round1(rss_idle),
        "rss_mib_idle_max": round1(rss_idle_max),
        "idle_s": IDLE_S,
        "idle_cpu_pct": round1(idle_cpu_pct),
        "list_services_s": round3(list_s),
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
/// 4). JSON, units in the key suffixes (`_s` seconds, `_mib` MiB, `_pct`
/// percent of one core):
/// - `build`: writing the state in-process: `build_s`, `admission_s` (the
///   planner's share), `records_written` (VEE, service and event records),
///   `planner_json_mib` (the whole planner as JSON), `persist_planner_s`
///   (its first write, all of it) and `persist_one_deploy_s` (what one
///   more Deploy then writes: its plan's planner entries with its service
///   and VEE records in one commit, `Core::commit_admission_plan`);
/// - `db_mib`: the sled directory;
/// - `daemon`: `load_s` (spawn until the first VMI answer),
///   `cpu_s_until_ready`, VmRSS at that moment (`rss_mib_ready`), after
///   [`IDLE_S`] idle seconds (`rss_mib_idle`, the largest sample
///   `rss_mib_idle_max`, `idle_cpu_pct`), ListServices (`list_services_s`,
///   its size `list_services_mib`, the counts listed), VmRSS after it
///   (`rss_mib_after_list_services`) and the peak VmHWM (`hwm_mib`).
pub fn run(hosts: usize, vees: usize) -> Result<Value> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let dir = base_dir().join(format!("veem-rss-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
    std::fs::create_dir_all(&dir)?;
    let cleanup = Arc::new(Cleanup {
        dir: dir.clone(),
        pid: AtomicU32::new(0),
        child: Mutex::new(None),
        done: AtomicBool::new(false),
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
    let config = write_config(&dir, port)?;
    eprintln!("veem-rss: writing {hosts} hosts and {vees} VEEs into {}", dir.display());
    let built = build_state(&config, hosts, vees)?;
    let db_mib = dir_mib(&dir.join("state"));
    eprintln!("veem-rss: state written: {built}; database {db_mib:.1} MiB");
    let endpoint = format!("https://127.0.0.1:{port}");
    let daemon = rt.block_on(measure(&dir, &config, &endpoint, &cleanup))?;
    cleanup.run_now();
    Ok(json!({
        "hosts": hosts,
        "vees": vees,
        "services": vees / VEES_PER_SERVICE,
        "config_hosts": 0,
        "state_dir": base_dir().display().to_string(),
        "db_mib": round1(db_mib),
        "build": built,
        "daemon": daemon,
    }))
}
