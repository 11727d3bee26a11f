//! A real VEEM's recovery of a failed host's VEEs, on the lab with the
//! e2e crate's daemons (`tests/src`): an image repository, two VEEHs of
//! site A (host 1 on site A's libvirtd, host 2 on its second) and a
//! `veem serve` over them, heartbeats every second and a host failed after
//! 3 missed ones (as `tests/tests/faults.rs`). Per repetition and count N
//! of `BENCH_RECOVERY_VEES` (default 1 and 10): host 2 stalls (SIGSTOP)
//! while a service of N tiny VEEs (128 MiB, no anti-affinity) is deployed,
//! so that all N run on host 1; host 2 comes back; each VEE is
//! checkpointed (VeeAction Checkpoint); then host 1 hangs: its VEEH
//! and its guests' QEMU processes stall (SIGSTOP; its libvirtd runs on).
//! The guests stall too because the lab's two hosts share this machine's
//! cores: guests of a hung host that ran on would take the CPU the other
//! host's restores need, which no real host failure does. The clock runs from that signal until the VEEM reports every one of the N
//! VEEs running on host 2 (ListVees polled every 100 ms): detection,
//! planning and the restores from the checkpoints. Host 1 then comes
//! back (fenced: its copies destroyed) and the service is deleted.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::daemons::{GuestIds, ImageRepo, Veeh};
use e2e::site::{self, host_of, Veem, ACME, OPERATOR};
use interfaces::vmi::*;
use serde_json::Value;
use vee_testkit::lab::{SITE_A2_URI, SITE_A_URI};

use super::lab::PIDS;
use super::Cleanup;
use crate::metric::{metric, ms};

/// VEE counts measured: `BENCH_RECOVERY_VEES`, a comma list (empty: none).
fn counts() -> Result<Vec<usize>> {
    let v = std::env::var("BENCH_RECOVERY_VEES").unwrap_or_else(|_| "1,10".into());
    v.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().with_context(|| format!("BENCH_RECOVERY_VEES: {s:?}")))
        .collect()
}

/// A service of `n` tiny VEEs without placement constraints.
fn manifest(name: &str, ids: &GuestIds, n: usize) -> String {
    format!(
        "[service]\nname = \"{name}\"\nprovider = \"acme\"\n[sla]\nguarantee = \"standard\"\nmigration = \"federation\"\npenalty_per_hour = 12.0\n[[component]]\nname = \"web\"\ninstances = {n}\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"{}\"\nkernel = \"{}\"\ninitrd = \"{}\"\ncmdline = \"{}\"\n",
        ids.disk, ids.kernel, ids.initrd, ids.cmdline
    )
}

/// The VEEM's heartbeats: every second, a host failed after this many
/// missed in a row. The e2e tests' 3 fail hosts that are only slow here (10
/// guests booting or checkpointing on 2 cores shared with other work),
/// and a host failed while its VEEs deploy loses them from the planner's
/// plan (its next failure finds "0 VEEs to recover").
const MISS_LIMIT: u32 = 5;

/// Two fresh VEEHs and a fresh VEEM over them (one per repetition: a
/// repetition that went wrong leaves nothing to the next).
struct Site {
    ids: GuestIds,
    hosts: [Veeh; 2],
    veem: Veem,
    pids: Vec<u32>,
}

impl Drop for Site {
    fn drop(&mut self) {
        for h in &self.hosts {
            h.signal("-CONT");
        }
        PIDS.lock().unwrap().retain(|p| !self.pids.contains(p));
    }
}

impl Site {
    async fn start(dir: &Path, repo: &ImageRepo, ids: &GuestIds) -> Self {
        let h1 = Veeh::start_sized(dir, "rec1", "site-a", SITE_A_URI, repo, (16, 4096)).await;
        let h2 = Veeh::start_sized(dir, "rec2", "site-a", SITE_A2_URI, repo, (16, 4096)).await;
        let port = site::port();
        let extra = format!("heartbeat_miss_limit = {MISS_LIMIT}\n");
        let cfg = site::write_config(dir, "site-a", port, repo, &[&h1, &h2], &[], &extra);
        let veem = Veem::start(dir, "site-a", port, cfg).await;
        let pids: Vec<u32> = [&h1.daemon, &h2.daemon, &veem.daemon].iter().filter_map(|d| d.pid()).collect();
        PIDS.lock().unwrap().extend(&pids);
        Self {
            ids: ids.clone(),
            hosts: [h1, h2],
            veem,
            pids,
        }
    }

    /// Waits (up to `timeout`) until the VEEM's view of host `i` satisfies
    /// `pred`.
    async fn host_when(&self, i: usize, what: &str, timeout: Duration, pred: impl Fn(&HostStatus) -> bool) -> Result<()> {
        let mut op = self.veem.client(OPERATOR).await;
        let t = Instant::now();
        loop {
            let hosts = op.list_hosts(ListHostsRequest::default()).await?.into_inner().hosts;
            if hosts.iter().any(|h| h.name == self.hosts[i].host && pred(h)) {
                return Ok(());
            }
            if t.elapsed() > timeout {
                bail!("host {} never {what} in {timeout:?}", self.hosts[i].host);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits (up to `timeout`) until every VEE of `service` runs on host
    /// `i` by the VEEM's records, polling every 100 ms.
    async fn all_running_on(&self, service: &str, n: usize, i: usize, timeout: Duration) -> Result<Vec<VeeInfo>> {
        let mut op = self.veem.client(OPERATOR).await;
        let host = self.hosts[i].host.clone();
        let t = Instant::now();
        loop {
            let vees = op
                .list_vees(ListVeesRequest {
                    service_id: service.into(),
                    ..Default::default()
                })
                .await?
                .into_inner()
                .vees;
            if vees.len() == n
                && vees
                    .iter()
                    .all(|v| v.state() == VeeState::Running && host_of(v).as_deref() == Some(host.as_str()))
            {
                return Ok(vees);
            }
            if t.elapsed() > timeout {
                let states: Vec<_> = vees.iter().map(|v| (v.state(), host_of(v))).collect();
                bail!("{service}: not all {n} VEEs running on {host} in {timeout:?}: {states:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Recovery metrics, each count's next to `one_restore` (seconds of one
/// VEE's restore through the VHI on a host that never saw its checkpoint,
/// 128 MiB, measured in the same run); N VEEs also next to one.
pub(super) async fn run(dir: &Path, cleanup: &Cleanup, reps: usize, one_restore: &[f64]) -> Result<Vec<Value>> {
    let counts = counts()?;
    if counts.is_empty() {
        return Ok(vec![]);
    }
    let dir = dir.join("recovery");
    std::fs::create_dir_all(&dir)?;
    let repo = ImageRepo::start(&dir).await;
    let repo_pid = repo.daemon.pid();
    PIDS.lock().unwrap().extend(repo_pid);
    let ids = repo.push_guest(&e2e::guest::image()).await;
    let mut samples: Vec<(usize, Vec<f64>)> = Vec::new();
    for n in counts {
        let (mut v, mut failures) = (Vec::new(), 0);
        while v.len() < reps {
            let i = v.len();
            eprintln!("vhi: recovery of {n} VEE(s), repetition {}/{reps}", i + 1);
            let site = Site::start(&dir.join(format!("{n}-{i}-{failures}")), &repo, &ids).await;
            match once(&site, cleanup, n, i).await {
                Ok(secs) => {
                    eprintln!("vhi: recovery of {n} VEE(s): {secs:.3} s");
                    v.push(secs);
                }
                Err(e) => {
                    failures += 1;
                    if failures > reps {
                        return Err(e.context(format!("recovery of {n} VEE(s)")));
                    }
                    eprintln!("vhi: recovery of {n} VEE(s): repetition discarded and run again: {e:#}");
                }
            }
        }
        samples.push((n, v));
    }
    drop(repo);
    PIDS.lock().unwrap().retain(|p| Some(*p) != repo_pid);

    let one = samples.iter().find(|(n, _)| *n == 1).map(|(_, v)| ms(v));
    let restore = ms(one_restore);
    let mut out = Vec::new();
    for (n, v) in &samples {
        let name = if *n == 1 {
            "recovery_1_vee_ms".to_string()
        } else {
            format!("recovery_{n}_vees_ms")
        };
        let what = format!(
            "host failure (its VEEH and guests stalled) to its {n} VEE(s) of 128 MiB running on another host by the VEEM's records (real veem, 1 s heartbeats, {MISS_LIMIT} missed)"
        );
        let tool = "one VEE's restore on another host (VHI Restore, restore_pulled_ms_128mib)";
        out.push(metric(
            &name,
            "ms",
            &what,
            &ms(v),
            (!restore.is_empty()).then_some((tool, &restore[..])),
        ));
        if let (true, Some(one)) = (*n != 1, &one) {
            out.push(metric(
                &format!("recovery_{n}_vees_vs_1_ms"),
                "ms",
                &what,
                &ms(v),
                Some(("the recovery of one VEE (recovery_1_vee_ms)", one)),
            ));
        }
    }
    Ok(out)
}

/// One repetition with `n` VEEs on a fresh site: the recovery's seconds.
/// Errors: a step failed, or host 1 was failed before its stall (slow, not
/// dead): the repetition measured nothing.
async fn once(site: &Site, cleanup: &Cleanup, n: usize, i: usize) -> Result<f64> {
    let [h1, h2] = &site.hosts;
    let mut acme = site.veem.client(ACME).await;
    // Every VEE on host 1: host 2 is down while the service is deployed.
    h2.signal("-STOP");
    let down = site
        .host_when(1, "down", Duration::from_secs(60), |h| h.health() != HostHealth::Up)
        .await;
    let svc = match down {
        Ok(()) => site::deploy(&mut acme, manifest(&format!("rec-{n}-{i}"), &site.ids, n)).await,
        Err(e) => {
            h2.signal("-CONT");
            return Err(e);
        }
    };
    h2.signal("-CONT");
    let svc = svc.map_err(|e| anyhow::anyhow!("deploy: {e}"))?;
    let service = svc.service_id.clone();
    for v in &svc.vees {
        for uri in [SITE_A_URI, SITE_A2_URI] {
            cleanup.track(uri, &format!("vee-{}", v.vee_id));
        }
    }
    let res = async {
        site.all_running_on(&service, n, 0, Duration::from_secs(300)).await?;
        site.host_when(1, "up again", Duration::from_secs(60), |h| h.health() == HostHealth::Up)
            .await?;
        for v in &svc.vees {
            site::vee_action(&mut acme, &v.vee_id, Action::Checkpoint)
                .await
                .map_err(|e| anyhow::anyhow!("checkpoint of {}: {e}", v.vee_id))?;
        }
        if site.veem.daemon.log_text().contains(&format!("failed host={}", h1.host)) {
            bail!("host 1 was failed (slow heartbeats) before its stall");
        }
        // The failure: host 1 hangs, its VEEH and its guests.
        let guests = qemu_pids(svc.vees.iter().map(|v| v.vee_id.as_str()));
        let t = Instant::now();
        h1.signal("-STOP");
        signal(&guests, "-STOP");
        let r = site.all_running_on(&service, n, 1, Duration::from_secs(300)).await;
        let secs = t.elapsed().as_secs_f64();
        signal(&guests, "-CONT");
        h1.signal("-CONT");
        r?;
        site.host_when(0, "back (fenced)", Duration::from_secs(120), |h| h.health() == HostHealth::Up)
            .await?;
        Ok(secs)
    }
    .await;
    let _ = acme
        .delete_service(DeleteServiceRequest {
            service_id: service.clone(),
        })
        .await;
    res
}

/// The PIDs of the QEMU processes running the domains of `vees` (on any
/// of the lab's libvirtds: before the failure, host 1's).
fn qemu_pids<'a>(vees: impl Iterator<Item = &'a str>) -> Vec<String> {
    vees.flat_map(|id| {
        let out = std::process::Command::new("pgrep")
            .args(["-f", &format!("guest=vee-{id}")])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.split_whitespace().map(str::to_string).collect::<Vec<_>>()
    })
    .collect()
}

/// Sends `sig` (`-STOP`, `-CONT`) to every process of `pids`.
fn signal(pids: &[String], sig: &str) {
    if !pids.is_empty() {
        let _ = std::process::Command::new("kill").arg(sig).args(pids).status();
    }
}
