//! The lab this benchmark drives: its daemons (killed by the signal
//! handler too), the cleanup of every domain and file it made, virsh, and
//! polling a guest's console for its ticks.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use interfaces::vhi::vhi_service_client::VhiServiceClient;
use interfaces::vhi::ConsoleRequest;
use tonic::transport::Channel;
use vee_testkit::guest::last_tick;
use vee_testkit::lab::{free_port, Place, SITE_A_PEER_URI, SITE_A_URI, SITE_B_URI};

use super::POLL;

pub(super) fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

/// Runs `cmd args…`; its stdout, or an error with its stderr.
pub(super) fn run_cmd(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd).args(args).output().with_context(|| format!("run {cmd}"))?;
    if !out.status.success() {
        bail!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(super) fn virsh(uri: &str, args: &[&str]) -> Result<String> {
    let mut a = vec!["-q", "-c", uri];
    a.extend_from_slice(args);
    run_cmd("virsh", &a)
}

/// Wall time of `virsh -c uri args…` in seconds.
pub(super) fn timed_virsh(uri: &str, args: &[&str]) -> Result<f64> {
    let t = Instant::now();
    virsh(uri, args)?;
    Ok(t.elapsed().as_secs_f64())
}

/// libvirt's "Total downtime" (ms) of the last completed job of `dom`.
pub(super) fn completed_downtime_ms(uri: &str, dom: &str) -> Option<f64> {
    let out = virsh(uri, &["domjobinfo", dom, "--completed"]).ok()?;
    out.lines().find_map(|l| {
        let v = l.trim().strip_prefix("Total downtime:")?;
        v.split_whitespace().next()?.parse().ok()
    })
}

/// PIDs of the daemons this run started and still runs (killed by the
/// SIGTERM / SIGINT handler, which skips the destructors).
pub(super) static PIDS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// A daemon whose PID the signal handler knows while it runs.
pub(super) struct Daemon(vee_testkit::daemon::Daemon);

impl Daemon {
    /// Starts `bin` at `place` of the lab (site B: in its namespaces).
    pub(super) fn spawn(place: Place, name: &str, bin: &str, args: &[&str], dir: &Path) -> Result<Self> {
        let d = vee_testkit::daemon::Daemon::try_spawn_at(place, name, bin, args, dir).map_err(anyhow::Error::msg)?;
        PIDS.lock().unwrap().extend(d.pid());
        Ok(Self(d))
    }

    pub(super) fn check_alive(&mut self) -> Result<()> {
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
pub(super) struct Cleanup {
    pub(super) dir: PathBuf,
    /// (libvirt URI, domain name) to destroy if still there.
    pub(super) domains: std::sync::Mutex<Vec<(String, String)>>,
    pub(super) keep_dir: bool,
    pub(super) done: std::sync::atomic::AtomicBool,
}

impl Cleanup {
    /// Kills the daemons still running, destroys the domains, removes the
    /// directory; once.
    pub(super) fn run_now(&self) {
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

    pub(super) fn track(&self, uri: &str, dom: &str) {
        self.domains.lock().unwrap().push((uri.into(), dom.into()));
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.run_now();
    }
}

pub(super) struct Veeh {
    _daemon: Daemon,
    pub(super) state_dir: PathBuf,
    pub(super) endpoint: String,
    host: String,
    site: String,
}

impl Veeh {
    /// A VHI client, as its site's VEEM (mutual TLS).
    pub(super) async fn client(&self) -> Result<VhiServiceClient<Channel>, tonic::transport::Error> {
        vee_testkit::pki::site(&self.site)
            .vhi_service_client(&self.endpoint, &self.host)
            .await
    }
}

/// Starts VEEH `name` of `site` on libvirt `uri`, pulling from the
/// repository at `repo_url` (HTTPS, its certificate of `repo_ca`) with
/// `token`.
pub(super) async fn start_veeh(dir: &Path, name: &str, site: &str, uri: &str, repo_url: &str, token: &str, repo_ca: &Path) -> Result<Veeh> {
    let port = free_port();
    let host = format!("{name}-{}", short_id());
    let state_dir = dir.join(&host);
    std::fs::create_dir_all(&state_dir)?;
    let place = Place::of_uri(uri);
    let addr = place.addr();
    let peer_uri = if uri == SITE_A_URI { SITE_A_PEER_URI } else { uri };
    let tls = vee_testkit::pki::site(site).host(&host);
    let cfg = format!(
        "host = \"{host}\"\nsite_id = \"{site}\"\nlibvirt_uri = \"{uri}\"\npeer_libvirt_uri = \"{peer_uri}\"\nlisten = \"{addr}:{port}\"\nstate_dir = \"{}\"\nmigration_address = \"{addr}\"\naccel = \"auto\"\nimage_repo = \"{repo_url}\"\nimage_repo_token = \"{token}\"\nimage_repo_ca = \"{}\"\n[capacity]\nvcpus = 2\nmemory_mib = 4096\ndisk_gib = 20\n[tls]\n{}",
        state_dir.display(),
        repo_ca.display(),
        vee_testkit::pki::toml(&tls)
    );
    let cfg_path = dir.join(format!("{host}.toml"));
    std::fs::write(&cfg_path, cfg)?;
    let mut daemon = Daemon::spawn(place, &host, "veeh", &["serve", "--config", cfg_path.to_str().unwrap()], dir)?;
    let endpoint = format!("https://{addr}:{port}");
    let t = Instant::now();
    while vee_testkit::pki::site(site).vhi_service_client(&endpoint, &host).await.is_err() {
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
        host,
        site: site.into(),
    })
}

pub(super) async fn console(c: &mut VhiServiceClient<Channel>, vee: &str) -> String {
    c.console(ConsoleRequest {
        vee_id: vee.into(),
        tail_bytes: 2048,
    })
    .await
    .map(|r| r.into_inner().text)
    .unwrap_or_default()
}

/// Polls the VHI console until a tick >= `min`; returns it.
pub(super) async fn vhi_wait_tick(c: &mut VhiServiceClient<Channel>, vee: &str, min: u64, timeout: Duration) -> Result<u64> {
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
pub(super) async fn file_wait_tick(path: &Path, min: u64, timeout: Duration) -> Result<u64> {
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

pub(super) fn tail(s: &str) -> String {
    let n = s.len().saturating_sub(600);
    s[s.char_indices().map(|(i, _)| i).find(|i| *i >= n).unwrap_or(0)..].to_string()
}
