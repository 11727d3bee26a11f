//! The VHI of a real `veeh` next to raw `virsh` on the identical domain, in
//! the same run, on the lab's two sites. Per repetition, one VEE through
//! the VHI and one raw domain (the VEEH's own domain XML, renamed and on a
//! fresh overlay of the same cached base image) go through: boot to the
//! first console tick, live checkpoint, restore, live migration A -> B.
//! One guest runs at a time (2 cores). Every domain and file made here is
//! removed at the end, also on error or panic ([`Cleanup`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::vhi::vhi_client::VhiClient;
use interfaces::vhi::*;
use serde_json::{json, Value};
use tonic::transport::Channel;
use vee_testkit::guest::last_tick;
use vee_testkit::lab::{free_port, repo_root, SITE_A_URI, SITE_B_URI};

const BOOT_TIMEOUT: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(50);

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

/// Runs `cmd args…`; its stdout, or an error with its stderr.
fn run_cmd(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd).args(args).output().with_context(|| format!("run {cmd}"))?;
    if !out.status.success() {
        bail!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn virsh(uri: &str, args: &[&str]) -> Result<String> {
    let mut a = vec!["-q", "-c", uri];
    a.extend_from_slice(args);
    run_cmd("virsh", &a)
}

/// Wall time of `virsh -c uri args…` in seconds.
fn timed_virsh(uri: &str, args: &[&str]) -> Result<f64> {
    let t = Instant::now();
    virsh(uri, args)?;
    Ok(t.elapsed().as_secs_f64())
}

/// libvirt's "Total downtime" (ms) of the last completed job of `dom`.
fn completed_downtime_ms(uri: &str, dom: &str) -> Option<f64> {
    let out = virsh(uri, &["domjobinfo", dom, "--completed"]).ok()?;
    out.lines().find_map(|l| {
        let v = l.trim().strip_prefix("Total downtime:")?;
        v.split_whitespace().next()?.parse().ok()
    })
}

/// PIDs of the daemons this run started and still runs (killed by the
/// SIGTERM / SIGINT handler, which skips the destructors).
static PIDS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// A daemon whose PID the signal handler knows while it runs.
struct Daemon(vee_testkit::daemon::Daemon);

impl Daemon {
    fn spawn(name: &str, bin: &str, args: &[&str], dir: &Path) -> Result<Self> {
        let d = vee_testkit::daemon::Daemon::try_spawn(name, bin, args, dir).map_err(anyhow::Error::msg)?;
        PIDS.lock().unwrap().extend(d.pid());
        Ok(Self(d))
    }

    fn check_alive(&mut self) -> Result<()> {
        self.0.check_alive().map_err(anyhow::Error::msg)
    }
}

impl Drop for Daemon {
    /// Forgets the PID; the inner daemon is killed next.
    fn drop(&mut self) {
        if let Some(pid) = self.0.pid() {
            PIDS.lock().unwrap().retain(|p| *p != pid);
        }
    }
}

/// Removes, on drop, every domain this run created (by name) at both sites
/// and the work directory.
struct Cleanup {
    dir: PathBuf,
    /// (libvirt URI, domain name) to destroy if still there.
    domains: std::sync::Mutex<Vec<(String, String)>>,
    keep_dir: bool,
    done: std::sync::atomic::AtomicBool,
}

impl Cleanup {
    /// Kills the daemons still running, destroys the domains, removes the
    /// directory; once.
    fn run_now(&self) {
        if self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        for pid in PIDS.lock().unwrap().drain(..) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        for (uri, dom) in self.domains.lock().unwrap().iter() {
            for site in [uri.as_str(), SITE_A_URI, SITE_B_URI] {
                let _ = Command::new("virsh")
                    .args(["-q", "-c", site, "destroy", dom])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn track(&self, uri: &str, dom: &str) {
        self.domains.lock().unwrap().push((uri.into(), dom.into()));
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.run_now();
    }
}

struct Veeh {
    _daemon: Daemon,
    state_dir: PathBuf,
    endpoint: String,
}

async fn start_veeh(dir: &Path, name: &str, site: &str, uri: &str, repo_url: &str, token: &str) -> Result<Veeh> {
    let port = free_port();
    let host = format!("{name}-{}", short_id());
    let state_dir = dir.join(&host);
    std::fs::create_dir_all(&state_dir)?;
    let cfg = format!(
        "host = \"{host}\"\nsite_id = \"{site}\"\nlibvirt_uri = \"{uri}\"\nlisten = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"\nmigration_address = \"127.0.0.1\"\naccel = \"auto\"\nimage_repo = \"{repo_url}\"\nimage_repo_token = \"{token}\"\n[capacity]\nvcpus = 2\nmemory_mib = 1024\ndisk_gib = 20\n",
        state_dir.display()
    );
    let cfg_path = dir.join(format!("{host}.toml"));
    std::fs::write(&cfg_path, cfg)?;
    let mut daemon = Daemon::spawn(&host, "veeh", &["serve", "--config", cfg_path.to_str().unwrap()], dir)?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let t = Instant::now();
    while VhiClient::connect(endpoint.clone()).await.is_err() {
        daemon.check_alive()?;
        if t.elapsed() > Duration::from_secs(30) {
            bail!("veeh {host} did not answer in 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Veeh {
        _daemon: daemon,
        state_dir,
        endpoint,
    })
}

async fn console(c: &mut VhiClient<Channel>, vee: &str) -> String {
    c.console(ConsoleRequest {
        vee_id: vee.into(),
        tail_bytes: 2048,
    })
    .await
    .map(|r| r.into_inner().text)
    .unwrap_or_default()
}

/// Polls the VHI console until a tick >= `min`; returns it.
async fn vhi_wait_tick(c: &mut VhiClient<Channel>, vee: &str, min: u64, timeout: Duration) -> Result<u64> {
    let t = Instant::now();
    loop {
        let text = console(c, vee).await;
        if let Some(n) = last_tick(&text).map(|t| t.0).filter(|n| *n >= min) {
            return Ok(n);
        }
        if t.elapsed() > timeout {
            bail!("VEE {vee} did not reach tick {min} in {timeout:?}; console tail:\n{}", tail(&text));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Polls a console log file until a tick >= `min`; returns it.
async fn file_wait_tick(path: &Path, min: u64, timeout: Duration) -> Result<u64> {
    let t = Instant::now();
    loop {
        let text = std::fs::read(path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        if let Some(n) = last_tick(&text).map(|t| t.0).filter(|n| *n >= min) {
            return Ok(n);
        }
        if t.elapsed() > timeout {
            bail!("{} did not reach tick {min} in {timeout:?}; tail:\n{}", path.display(), tail(&text));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn tail(s: &str) -> String {
    let n = s.len().saturating_sub(600);
    s[s.char_indices().map(|(i, _)| i).find(|i| *i >= n).unwrap_or(0)..].to_string()
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if s.is_empty() {
        return 0.0;
    }
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn row(name: &str, ours: &[f64], baseline: &str, base: &[f64]) -> Value {
    let (o, b) = (r3(median(ours)), r3(median(base)));
    let ratio = if b > 0.0 { json!(r3(o / b)) } else { Value::Null };
    json!({
        "name": name, "ours_s": o, "baseline": baseline, "baseline_s": b, "ratio": ratio,
        "reps": ours.len().min(base.len()),
        "ours_samples_s": ours.iter().map(|x| r3(*x)).collect::<Vec<_>>(),
        "baseline_samples_s": base.iter().map(|x| r3(*x)).collect::<Vec<_>>(),
    })
}

/// The raw copy of the VEEH's domain: its XML with the VEE directory, name
/// and UUID replaced and the VEEH's ownership metadata removed.
fn raw_xml(template: &str, vee_dir: &Path, vee_id: &str, raw_dir: &Path, name: &str) -> String {
    let mut x = template.replace(&vee_dir.display().to_string(), &raw_dir.display().to_string());
    if let (Some(a), Some(b)) = (x.find("<metadata"), x.find("</metadata>")) {
        x.replace_range(a..b + "</metadata>".len(), "");
    }
    x = x.replace(&format!("<name>vee-{vee_id}</name>"), &format!("<name>{name}</name>"));
    x.replace(&format!("<uuid>{vee_id}</uuid>"), &format!("<uuid>{}</uuid>", uuid::Uuid::new_v4()))
}

/// Samples of one repetition each.
#[derive(Default)]
struct Samples {
    boot: (Vec<f64>, Vec<f64>),
    checkpoint: (Vec<f64>, Vec<f64>),
    save: Vec<f64>,
    cp_downtime: (Vec<f64>, Vec<f64>),
    restore: (Vec<f64>, Vec<f64>),
    migrate: (Vec<f64>, Vec<f64>),
    mig_downtime: (Vec<f64>, Vec<f64>),
    raw_cp_downtime_from_libvirt: bool,
}

impl Samples {
    /// Keeps the first `n` repetitions' samples.
    fn truncate(&mut self, n: usize) {
        for v in [
            &mut self.boot.0,
            &mut self.boot.1,
            &mut self.checkpoint.0,
            &mut self.checkpoint.1,
            &mut self.save,
            &mut self.cp_downtime.0,
            &mut self.cp_downtime.1,
            &mut self.restore.0,
            &mut self.restore.1,
            &mut self.migrate.0,
            &mut self.migrate.1,
            &mut self.mig_downtime.0,
            &mut self.mig_downtime.1,
        ] {
            v.truncate(n);
        }
    }
}

struct Ctx {
    ids: GuestIds,
    ca: VhiClient<Channel>,
    cb: VhiClient<Channel>,
    cleanup: std::sync::Arc<Cleanup>,
    /// Domain XML, VEE directory and ID of the warm-up VEE (the template).
    template: String,
    template_dir: PathBuf,
    template_id: String,
    /// The cached base image and the overlays' virtual size.
    base: PathBuf,
    overlay_size: u64,
    /// The VEE of the current repetition.
    current: Option<String>,
}

impl Ctx {
    /// After a failed repetition: waits (up to 2 min) for both libvirtds,
    /// then removes the repetition's VEE through both VEEHs and destroys
    /// every tracked domain.
    async fn remove_leftovers(&mut self) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(120) && !(virsh(SITE_A_URI, &["list"]).is_ok() && virsh(SITE_B_URI, &["list"]).is_ok()) {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if let Some(vee) = self.current.take() {
            let _ = self.cb.abort_incoming(VeeRef { vee_id: vee.clone() }).await;
            let _ = self
                .ca
                .destroy(DestroyRequest {
                    vee_id: vee.clone(),
                    remove: true,
                })
                .await;
            let _ = self.cb.destroy(DestroyRequest { vee_id: vee, remove: true }).await;
        }
        for (uri, dom) in self.cleanup.domains.lock().unwrap().iter() {
            let _ = Command::new("virsh")
                .args(["-q", "-c", uri, "destroy", dom])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

#[derive(Clone)]
struct GuestIds {
    kernel: String,
    initrd: String,
    disk: String,
    cmdline: String,
}

impl GuestIds {
    fn spec(&self) -> VeeSpec {
        VeeSpec {
            vee_id: uuid::Uuid::new_v4().to_string(),
            service_id: "svc-bench".into(),
            vcpus: 1,
            memory_mib: 128,
            disk_gib: 1,
            image: self.disk.clone(),
            kernel: self.kernel.clone(),
            initrd: self.initrd.clone(),
            cmdline: self.cmdline.clone(),
            nics: vec![],
        }
    }
}

pub async fn run(reps: usize) -> Result<Vec<Value>> {
    let guest = std::env::var_os("GUEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/guest"));
    for f in ["vmlinuz", "initrd.img", "disk.qcow2"] {
        if !guest.join(f).exists() {
            bail!("{} missing: run scripts/build-guest-image", guest.join(f).display());
        }
    }
    let base_dir = std::env::var_os("BENCH_VHI_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/bench"));
    let dir = base_dir.join(format!("vhi-{}", short_id()));
    std::fs::create_dir_all(&dir)?;
    let cleanup = std::sync::Arc::new(Cleanup {
        dir: dir.clone(),
        domains: Default::default(),
        keep_dir: std::env::var_os("BENCH_KEEP").is_some(),
        done: Default::default(),
    });
    // SIGTERM / SIGINT: clean up (the destructors would not run), then exit.
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
        let c = cleanup.clone();
        tokio::spawn(async move {
            let code = tokio::select! { _ = term.recv() => 143, _ = int.recv() => 130 };
            eprintln!("vhi: interrupted; removing this run's domains, daemons and files");
            tokio::task::spawn_blocking(move || c.run_now()).await.ok();
            std::process::exit(code);
        });
    }

    // Image repository and the guest's images in it.
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let token = format!("bench-{}", short_id());
    let data = dir.join("repo");
    let mut repo_daemon = Daemon::spawn(
        "image-repo",
        "image-repo",
        &["serve", "--listen", &listen, "--data", data.to_str().unwrap(), "--token", &token],
        &dir,
    )?;
    let url = format!("http://{listen}");
    let repo = RepoClient::new(&url, Some(token.clone()))?;
    let t = Instant::now();
    while repo.list().await.is_err() {
        repo_daemon.check_alive()?;
        if t.elapsed() > Duration::from_secs(20) {
            bail!("image-repo did not answer");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kernel = repo
        .push_file(&guest.join("vmlinuz"), &PushMeta::new("vee-guest-kernel", BlobKind::Kernel))
        .await?
        .to_string();
    let initrd = repo
        .push_file(&guest.join("initrd.img"), &PushMeta::new("vee-guest-initrd", BlobKind::Initrd))
        .await?
        .to_string();
    let mut meta = PushMeta::new("vee-guest-disk", BlobKind::Disk);
    meta.format = Some("qcow2".into());
    let disk = repo.push_file(&guest.join("disk.qcow2"), &meta).await?.to_string();
    let ids = GuestIds {
        kernel,
        initrd,
        disk,
        cmdline: "console=ttyS0 quiet".into(),
    };

    let a = start_veeh(&dir, "bench-a", "site-a", SITE_A_URI, &url, &token).await?;
    let b = start_veeh(&dir, "bench-b", "site-b", SITE_B_URI, &url, &token).await?;
    let (mut ca, cb) = (
        VhiClient::connect(a.endpoint.clone()).await?,
        VhiClient::connect(b.endpoint.clone()).await?,
    );

    // Warm-up (not measured): the first deploy pulls the images into A's
    // cache; its domain XML is the raw baseline's template.
    eprintln!("vhi: warm-up deploy (fills the image cache)");
    let spec = ids.spec();
    cleanup.track(SITE_A_URI, &format!("vee-{}", spec.vee_id));
    ca.prepare(spec.clone()).await?;
    ca.create(spec.clone()).await?;
    ca.start(VeeRef {
        vee_id: spec.vee_id.clone(),
    })
    .await?;
    vhi_wait_tick(&mut ca, &spec.vee_id, 1, BOOT_TIMEOUT).await?;
    let template_dir = a.state_dir.join("vees").join(&spec.vee_id);
    let template = std::fs::read_to_string(template_dir.join("domain.xml")).context("the VEEH's domain.xml")?;
    let info: Value = serde_json::from_str(&run_cmd(
        "qemu-img",
        &["info", "--output=json", "-U", template_dir.join("overlay.qcow2").to_str().unwrap()],
    )?)?;
    let base = info["full-backing-filename"]
        .as_str()
        .or(info["backing-filename"].as_str())
        .context("overlay has no backing file")?
        .into();
    let overlay_size = info["virtual-size"].as_u64().context("overlay virtual size")?;
    ca.destroy(DestroyRequest {
        vee_id: spec.vee_id.clone(),
        remove: true,
    })
    .await?;

    let mut ctx = Ctx {
        ids,
        ca,
        cb,
        cleanup: cleanup.clone(),
        template,
        template_dir,
        template_id: spec.vee_id.clone(),
        base,
        overlay_size,
        current: None,
    };
    let mut s = Samples {
        raw_cp_downtime_from_libvirt: true,
        ..Default::default()
    };
    // Another user of the lab (a test restarting libvirtd, say) can break a
    // repetition: it is then discarded, its domains removed, and run again,
    // up to `reps` extra attempts in all.
    let (mut i, mut failures) = (0, 0);
    while i < reps {
        eprintln!("vhi: repetition {}/{reps}: ours", i + 1);
        let mut res = ours(&mut ctx, &mut s).await.with_context(|| format!("repetition {}: VHI", i + 1));
        if res.is_ok() {
            eprintln!("vhi: repetition {}/{reps}: raw virsh", i + 1);
            res = raw(&mut ctx, &mut s, i)
                .await
                .with_context(|| format!("repetition {}: raw virsh", i + 1));
        }
        if let Err(e) = res {
            failures += 1;
            if failures > reps {
                return Err(e);
            }
            eprintln!(
                "vhi: repetition {} failed, discarded and run again ({failures} failure(s) so far): {e:#}",
                i + 1
            );
            s.truncate(i);
            ctx.remove_leftovers().await;
            continue;
        }
        eprintln!(
            "vhi: repetition {} (ours / virsh, s): boot {:.3}/{:.3} checkpoint {:.3}/{:.3} save {:.3} cp-downtime {:.3}/{:.3} restore {:.3}/{:.3} migrate {:.3}/{:.3} mig-downtime {:.3}/{:.3}",
            i + 1, s.boot.0[i], s.boot.1[i], s.checkpoint.0[i], s.checkpoint.1[i], s.save[i], s.cp_downtime.0[i], s.cp_downtime.1[i],
            s.restore.0[i], s.restore.1[i], s.migrate.0[i], s.migrate.1[i], s.mig_downtime.0[i], s.mig_downtime.1[i]
        );
        i += 1;
    }
    drop((a, b, repo_daemon));

    let cp_dt_base = if s.raw_cp_downtime_from_libvirt {
        "virsh snapshot-create-as --live (libvirt's downtime)"
    } else {
        "virsh snapshot-create-as --live (wall time, libvirt gave no downtime)"
    };
    Ok(vec![
        row(
            "VEE deploy to first console tick, images cached (VHI Prepare+Create+Start)",
            &s.boot.0,
            "virsh create of the same domain XML on a fresh overlay, to first tick",
            &s.boot.1,
        ),
        row(
            "live checkpoint incl. push of memory+disk to image-repo (VHI Checkpoint)",
            &s.checkpoint.0,
            "virsh snapshot-create-as --live --memspec/--diskspec external, no upload",
            &s.checkpoint.1,
        ),
        row(
            "live checkpoint incl. push (VHI Checkpoint) vs stop-and-save",
            &s.checkpoint.0,
            "virsh save + cp overlay (guest stopped)",
            &s.save,
        ),
        row(
            "checkpoint guest downtime (CheckpointRecord.downtime_ms)",
            &s.cp_downtime.0,
            cp_dt_base,
            &s.cp_downtime.1,
        ),
        row(
            "restore incl. pull from image-repo (VHI Restore)",
            &s.restore.0,
            "virsh restore of a local state file",
            &s.restore.1,
        ),
        row(
            "live migration A->B with incremental disk copy, total (MigrateOut total_ms)",
            &s.migrate.0,
            "virsh migrate --live --p2p --copy-storage-inc --xml DEST.xml",
            &s.migrate.1,
        ),
        row(
            "live migration A->B guest downtime (MigrateOut downtime_ms)",
            &s.mig_downtime.0,
            "virsh migrate --live --p2p --copy-storage-inc (domjobinfo --completed at B)",
            &s.mig_downtime.1,
        ),
    ])
}

/// One repetition through the VHI.
async fn ours(ctx: &mut Ctx, s: &mut Samples) -> Result<()> {
    let spec = ctx.ids.spec();
    let vee = spec.vee_id.clone();
    let dom = format!("vee-{vee}");
    ctx.cleanup.track(SITE_A_URI, &dom);
    ctx.cleanup.track(SITE_B_URI, &dom);
    ctx.current = Some(vee.clone());
    let ca = &mut ctx.ca;

    let t = Instant::now();
    ca.prepare(spec.clone()).await?;
    ca.create(spec.clone()).await?;
    ca.start(VeeRef { vee_id: vee.clone() }).await?;
    vhi_wait_tick(ca, &vee, 1, BOOT_TIMEOUT).await?;
    s.boot.0.push(t.elapsed().as_secs_f64());

    vhi_wait_tick(ca, &vee, 3, Duration::from_secs(60)).await?;
    let t = Instant::now();
    let cp = ca
        .checkpoint(CheckpointRequest {
            vee_id: vee.clone(),
            stop_after: false,
        })
        .await?
        .into_inner();
    s.checkpoint.0.push(t.elapsed().as_secs_f64());
    s.cp_downtime.0.push(cp.downtime_ms as f64 / 1000.0);

    ca.destroy(DestroyRequest {
        vee_id: vee.clone(),
        remove: true,
    })
    .await?;
    let t = Instant::now();
    let st = ca
        .restore(RestoreRequest {
            spec: Some(spec.clone()),
            checkpoint: Some(cp),
            fence_owner: String::new(),
        })
        .await?
        .into_inner();
    s.restore.0.push(t.elapsed().as_secs_f64());
    if st.state() != VeeState::Running {
        bail!("restored VEE is {:?}", st.state());
    }
    let now = vhi_wait_tick(ca, &vee, 1, Duration::from_secs(60)).await?;
    vhi_wait_tick(ca, &vee, now + 1, Duration::from_secs(60)).await?;

    let target = ctx.cb.prepare_incoming(spec.clone()).await?.into_inner();
    let req = MigrateOutRequest {
        vee_id: vee.clone(),
        target: Some(target),
        max_downtime_ms: 0,
        bandwidth_mib_s: 0,
    };
    let mut stream = ca.migrate_out(req).await?.into_inner();
    let mut last = None;
    while let Some(p) = stream.next().await {
        last = Some(p?);
    }
    let last = last.context("MigrateOut sent nothing")?;
    if last.phase() != interfaces::vhi::MigrationPhase::Done {
        let _ = ctx.cb.abort_incoming(VeeRef { vee_id: vee.clone() }).await;
        let _ = ca
            .destroy(DestroyRequest {
                vee_id: vee.clone(),
                remove: true,
            })
            .await;
        bail!("migration {}: {}", last.phase(), last.error);
    }
    ctx.cb.complete_incoming(VeeRef { vee_id: vee.clone() }).await?;
    s.migrate.0.push(last.total_ms as f64 / 1000.0);
    s.mig_downtime.0.push(last.downtime_ms as f64 / 1000.0);
    let now = vhi_wait_tick(&mut ctx.cb, &vee, 1, Duration::from_secs(60)).await?;
    vhi_wait_tick(&mut ctx.cb, &vee, now + 1, Duration::from_secs(60)).await?;
    ctx.cb
        .destroy(DestroyRequest {
            vee_id: vee.clone(),
            remove: true,
        })
        .await?;
    ctx.current = None;
    Ok(())
}

fn new_overlay(base: &Path, overlay: &Path, size: u64) -> Result<()> {
    run_cmd(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-F",
            "qcow2",
            "-b",
            base.to_str().unwrap(),
            overlay.to_str().unwrap(),
            &size.to_string(),
        ],
    )?;
    Ok(())
}

/// One repetition with raw virsh on a copy of the VEEH's domain.
async fn raw(ctx: &mut Ctx, s: &mut Samples, i: usize) -> Result<()> {
    let name = format!("benchraw-{}-{i}", short_id());
    ctx.cleanup.track(SITE_A_URI, &name);
    ctx.cleanup.track(SITE_B_URI, &name);
    let rd = ctx.cleanup.dir.join(format!("raw-{i}"));
    let (da, db) = (rd.join("a"), rd.join("b"));
    let _ = std::fs::remove_dir_all(&rd);
    std::fs::create_dir_all(&da)?;
    std::fs::create_dir_all(&db)?;
    let console = da.join("console.log");
    new_overlay(&ctx.base, &da.join("overlay.qcow2"), ctx.overlay_size)?;
    let xml = raw_xml(&ctx.template, &ctx.template_dir, &ctx.template_id, &da, &name);
    if !xml.contains(&da.join("overlay.qcow2").display().to_string()) || !xml.contains(&console.display().to_string()) {
        bail!(
            "the VEEH's domain XML does not name its overlay and console under {}",
            ctx.template_dir.display()
        );
    }
    let xml_path = da.join("domain.xml");
    std::fs::write(&xml_path, &xml)?;

    // Boot to the first tick.
    let t = Instant::now();
    virsh(SITE_A_URI, &["create", xml_path.to_str().unwrap()])?;
    file_wait_tick(&console, 1, BOOT_TIMEOUT).await?;
    s.boot.1.push(t.elapsed().as_secs_f64());
    file_wait_tick(&console, 3, Duration::from_secs(60)).await?;

    // Live external snapshot; then merge the chain back (not measured).
    let (mem, top) = (da.join("cp.mem"), da.join("cp-top.qcow2"));
    let memspec = format!("file={},snapshot=external", mem.display());
    let diskspec = format!("vda,snapshot=external,file={}", top.display());
    let t = Instant::now();
    virsh(
        SITE_A_URI,
        &[
            "snapshot-create-as",
            &name,
            "cp1",
            "--live",
            "--memspec",
            &memspec,
            "--diskspec",
            &diskspec,
            "--no-metadata",
        ],
    )?;
    let wall = t.elapsed().as_secs_f64();
    s.checkpoint.1.push(wall);
    match completed_downtime_ms(SITE_A_URI, &name) {
        Some(ms) => s.cp_downtime.1.push(ms / 1000.0),
        None => {
            s.raw_cp_downtime_from_libvirt = false;
            s.cp_downtime.1.push(wall)
        }
    }
    virsh(
        SITE_A_URI,
        &["blockcommit", &name, "vda", "--active", "--shallow", "--pivot", "--wait"],
    )?;
    let _ = std::fs::remove_file(&top);
    let _ = std::fs::remove_file(&mem);

    // Stop-and-save plus a copy of the overlay; then restore.
    let state = da.join("save.state");
    let t = Instant::now();
    virsh(SITE_A_URI, &["save", &name, state.to_str().unwrap()])?;
    std::fs::copy(da.join("overlay.qcow2"), da.join("overlay.saved.qcow2"))?;
    s.save.push(t.elapsed().as_secs_f64());
    let _ = std::fs::remove_file(da.join("overlay.saved.qcow2"));
    let before = last_tick(&String::from_utf8_lossy(&std::fs::read(&console)?)).map_or(0, |t| t.0);
    s.restore.1.push(timed_virsh(SITE_A_URI, &["restore", state.to_str().unwrap()])?);
    let _ = std::fs::remove_file(&state);
    file_wait_tick(&console, before + 2, Duration::from_secs(60)).await?;

    // Live migration to site B with the incremental storage copy.
    new_overlay(&ctx.base, &db.join("overlay.qcow2"), ctx.overlay_size)?;
    let dest = virsh(SITE_A_URI, &["dumpxml", "--migratable", &name])?.replace(&da.display().to_string(), &db.display().to_string());
    let dest_path = rd.join("dest.xml");
    std::fs::write(&dest_path, dest)?;
    let t = Instant::now();
    virsh(
        SITE_A_URI,
        &[
            "migrate",
            "--live",
            "--p2p",
            "--copy-storage-inc",
            "--xml",
            dest_path.to_str().unwrap(),
            "--migrateuri",
            "tcp://127.0.0.1",
            "--disks-uri",
            "tcp://127.0.0.1",
            &name,
            SITE_B_URI,
        ],
    )?;
    s.migrate.1.push(t.elapsed().as_secs_f64());
    s.mig_downtime
        .1
        .push(completed_downtime_ms(SITE_B_URI, &name).map(|ms| ms / 1000.0).unwrap_or(0.0));
    let now = file_wait_tick(&db.join("console.log"), 1, Duration::from_secs(60)).await?;
    file_wait_tick(&db.join("console.log"), now + 1, Duration::from_secs(60)).await?;
    virsh(SITE_B_URI, &["destroy", &name])?;
    let _ = std::fs::remove_dir_all(&rd);
    Ok(())
}
