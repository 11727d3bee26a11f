//! The VHI of a real `veeh` next to raw `virsh` on the identical domain, in
//! the same run, on the lab's two sites, as named metrics
//! ([`crate::metric`]). Per repetition, one VEE through the VHI and one raw
//! domain (the VEEH's own domain XML, renamed and on a fresh overlay of the
//! same cached base image) go through: boot to the first console tick,
//! restore on the same host, live migration A -> B; then checkpoints and
//! restores at each guest memory size ([`sizes`]), the service network's
//! metrics ([`net`]) and a real VEEM's recovery of a failed host's VEEs
//! ([`recovery`]). One guest runs at a time (2 cores) but in the recovery.
//! Every domain and file made here is removed at the end, also on error or
//! panic ([`Cleanup`]).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::vhi::vhi_service_client::VhiServiceClient;
use interfaces::vhi::*;
use serde_json::Value;
use tonic::transport::Channel;
use vee_testkit::lab::{free_port, repo_root, SITE_A_URI, SITE_B_URI};

use crate::metric::{metric, ms};

const BOOT_TIMEOUT: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(50);

mod lab;
mod net;
mod raw;
mod recovery;
mod sizes;

use lab::*;

/// Samples of one repetition each.
#[derive(Default)]
struct Samples {
    boot: (Vec<f64>, Vec<f64>),
    restore: (Vec<f64>, Vec<f64>),
    migrate: (Vec<f64>, Vec<f64>),
    mig_downtime: (Vec<f64>, Vec<f64>),
}

impl Samples {
    /// Keeps the first `n` repetitions' samples.
    fn truncate(&mut self, n: usize) {
        for v in [
            &mut self.boot.0,
            &mut self.boot.1,
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
    ca: VhiServiceClient<Channel>,
    cb: VhiServiceClient<Channel>,
    /// Site A's second host (its second libvirtd): restores of a
    /// checkpoint it never saw.
    a2: VhiServiceClient<Channel>,
    /// Host A's VEEH's state directory.
    a_state: PathBuf,
    /// The repository's `/metrics`.
    repo_metrics: String,
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
    /// The domain XML of the last VEE with a NIC (the network rows' raw
    /// baseline).
    net_template: Option<String>,
}

impl Ctx {
    /// Live-migrates `spec`'s VEE from A to B through the VHI (B prepares
    /// `at_b`, the VEE as site B describes it; A migrates out, B
    /// completes): the last progress report. On failure B's preparation
    /// and A's copy are removed.
    async fn migrate_to_b(&mut self, spec: &VeeSpec, at_b: &VeeSpec) -> Result<MigrationProgress> {
        let vee = spec.vee_id.clone();
        let target = self
            .cb
            .prepare_incoming(interfaces::vhi::PrepareIncomingRequest { spec: Some(at_b.clone()) })
            .await?
            .into_inner();
        let req = MigrateOutRequest {
            vee_id: vee.clone(),
            target: Some(target),
            max_downtime: interfaces::time::duration_ms(0),
            bandwidth_mib_s: 0,
        };
        let mut stream = self.ca.migrate_out(req).await?.into_inner();
        let mut last = None;
        while let Some(p) = stream.next().await {
            last = Some(p?);
        }
        let last = last.context("MigrateOut sent nothing")?;
        if last.phase() != MigrationPhase::Done {
            let _ = self.cb.abort_incoming(AbortIncomingRequest { vee_id: vee.clone() }).await;
            let _ = self.ca.destroy(DestroyRequest { vee_id: vee, remove: true }).await;
            bail!("migration {}: {}", last.phase(), last.error);
        }
        self.cb.complete_incoming(CompleteIncomingRequest { vee_id: vee }).await?;
        Ok(last)
    }

    /// After a failed repetition: waits (up to 2 min) for both libvirtds,
    /// then removes the repetition's VEE through both VEEHs and destroys
    /// every tracked domain.
    async fn remove_leftovers(&mut self) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(120) && !(virsh(SITE_A_URI, &["list"]).is_ok() && virsh(SITE_B_URI, &["list"]).is_ok()) {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if let Some(vee) = self.current.take() {
            let _ = self.cb.abort_incoming(AbortIncomingRequest { vee_id: vee.clone() }).await;
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
            cloud_init: None,
            ..Default::default()
        }
    }
}

/// The parts of the run: `BENCH_VHI_PARTS`, a comma list of `base`
/// (deploy, restore on the same host, migration), `sizes` ([`sizes`]),
/// `net` ([`net`]), `recovery` ([`recovery`]); default all.
fn parts() -> std::collections::BTreeSet<String> {
    std::env::var("BENCH_VHI_PARTS")
        .unwrap_or_else(|_| "base,sizes,net,recovery".into())
        .split(',')
        .map(|p| p.trim().to_string())
        .collect()
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
    // At site A's end of the WAN: site B's VEEH pulls across it.
    let listen = format!("{}:{port}", vee_testkit::lab::SITE_A_ADDR);
    let token = format!("bench-{}", short_id());
    let data = dir.join("repo");
    let (tls, repo_ca) = vee_testkit::pki::repo(vee_testkit::lab::SITE_A_ADDR);
    let (cert, key) = (tls.cert.to_str().unwrap(), tls.key.to_str().unwrap());
    let token_file = dir.join("repo.token");
    std::fs::write(&token_file, &token)?;
    // Its metrics listener: the bytes it received (the checkpoint metrics).
    let metrics_listen = format!("127.0.0.1:{}", free_port());
    let repo_config = dir.join("repo.toml");
    std::fs::write(&repo_config, format!("[metrics]\nlisten = \"{metrics_listen}\"\n"))?;
    let mut repo_daemon = Daemon::spawn(
        vee_testkit::lab::Place::SiteA,
        "image-repo",
        "image-repo",
        &[
            "serve",
            "--config",
            repo_config.to_str().unwrap(),
            "--listen",
            &listen,
            "--data",
            data.to_str().unwrap(),
            "--token-file",
            token_file.to_str().unwrap(),
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ],
        &dir,
    )?;
    let url = format!("https://{listen}");
    let repo = RepoClient::with_ca(&url, Some(token.clone()), Some(&repo_ca))?;
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

    let a = start_veeh(&dir, "bench-a", "site-a", SITE_A_URI, &url, &token, &repo_ca).await?;
    let b = start_veeh(&dir, "bench-b", "site-b", SITE_B_URI, &url, &token, &repo_ca).await?;
    let a2 = start_veeh(&dir, "bench-a2", "site-a", vee_testkit::lab::SITE_A2_URI, &url, &token, &repo_ca).await?;
    let (mut ca, cb) = (a.client().await?, b.client().await?);

    // Warm-up (not measured): the first deploy pulls the images into A's
    // cache; its domain XML is the raw baseline's template.
    eprintln!("vhi: warm-up deploy (fills the image cache)");
    let spec = ids.spec();
    cleanup.track(SITE_A_URI, &format!("vee-{}", spec.vee_id));
    ca.prepare(interfaces::vhi::PrepareRequest { spec: Some(spec.clone()) }).await?;
    ca.create(interfaces::vhi::CreateRequest { spec: Some(spec.clone()) }).await?;
    ca.start(StartRequest {
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
        a2: a2.client().await?,
        a_state: a.state_dir.clone(),
        repo_metrics: format!("http://{metrics_listen}/metrics"),
        cleanup: cleanup.clone(),
        template,
        template_dir,
        template_id: spec.vee_id.clone(),
        base,
        overlay_size,
        current: None,
        net_template: None,
    };
    let mut s = Samples::default();
    // Another user of the lab (a test restarting libvirtd, say) can break a
    // repetition: it is then discarded, its domains removed, and run again,
    // up to `reps` extra attempts in all.
    let parts = parts();
    let (mut i, mut failures) = (0, 0);
    while i < reps && parts.contains("base") {
        eprintln!("vhi: repetition {}/{reps}: ours", i + 1);
        let mut res = ours(&mut ctx, &mut s).await.with_context(|| format!("repetition {}: VHI", i + 1));
        if res.is_ok() {
            eprintln!("vhi: repetition {}/{reps}: raw virsh", i + 1);
            res = raw::raw(&mut ctx, &mut s, i)
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
            "vhi: repetition {} (ours / virsh, s): boot {:.3}/{:.3} restore {:.3}/{:.3} migrate {:.3}/{:.3} mig-downtime {:.3}/{:.3}",
            i + 1,
            s.boot.0[i],
            s.boot.1[i],
            s.restore.0[i],
            s.restore.1[i],
            s.migrate.0[i],
            s.migrate.1[i],
            s.mig_downtime.0[i],
            s.mig_downtime.1[i]
        );
        i += 1;
    }
    let sized = if parts.contains("sizes") {
        sizes::run(&mut ctx, reps).await?
    } else {
        vec![]
    };
    let net_rows = if parts.contains("net") {
        net::run(&mut ctx, reps).await?
    } else {
        vec![]
    };
    drop((a, b, a2, repo_daemon));
    // The recovery next to one VEE's restore on a host that never saw its
    // checkpoint (the 128 MiB guest's, this run).
    let one_restore: Vec<f64> = sized
        .iter()
        .find(|m| m["name"] == "restore_pulled_ms_128mib")
        .and_then(|m| m["samples"].as_array())
        .map(|a| a.iter().filter_map(|x| x.as_f64()).map(|x| x / 1000.0).collect())
        .unwrap_or_default();
    let recovered = if parts.contains("recovery") {
        recovery::run(&cleanup.dir, &cleanup, reps, &one_restore).await?
    } else {
        vec![]
    };

    let mut rows = if !parts.contains("base") {
        vec![]
    } else {
        vec![
            metric(
                "deploy_first_tick_ms",
                "ms",
                "VEE deploy to first console tick, images cached (VHI Prepare+Create+Start), 128 MiB guest",
                &ms(&s.boot.0),
                Some((
                    "virsh create of the same domain XML on a fresh overlay, to first tick",
                    &ms(&s.boot.1),
                )),
            ),
            metric(
                "restore_same_host_ms",
                "ms",
                "restore on the host that took the checkpoint, incl. pull from image-repo (VHI Restore), 128 MiB guest",
                &ms(&s.restore.0),
                Some(("virsh restore of a local state file", &ms(&s.restore.1))),
            ),
            metric(
                "migration_total_ms",
                "ms",
                "live migration A->B with incremental disk copy, total (MigrateOut total), 128 MiB guest",
                &ms(&s.migrate.0),
                Some(("virsh migrate --live --p2p --copy-storage-inc --xml DEST.xml", &ms(&s.migrate.1))),
            ),
            metric(
                "migration_downtime_ms",
                "ms",
                "live migration A->B guest downtime (MigrateOut downtime), 128 MiB guest",
                &ms(&s.mig_downtime.0),
                Some((
                    "virsh migrate --live --p2p --copy-storage-inc (domjobinfo --completed at B)",
                    &ms(&s.mig_downtime.1),
                )),
            ),
        ]
    };
    rows.extend(sized);
    rows.extend(net_rows);
    rows.extend(recovered);
    Ok(rows)
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
    ca.prepare(interfaces::vhi::PrepareRequest { spec: Some(spec.clone()) }).await?;
    ca.create(interfaces::vhi::CreateRequest { spec: Some(spec.clone()) }).await?;
    ca.start(StartRequest { vee_id: vee.clone() }).await?;
    vhi_wait_tick(ca, &vee, 1, BOOT_TIMEOUT).await?;
    s.boot.0.push(t.elapsed().as_secs_f64());

    vhi_wait_tick(ca, &vee, 3, Duration::from_secs(60)).await?;
    let cp = ca
        .checkpoint(CheckpointRequest {
            vee_id: vee.clone(),
            stop_after: false,
        })
        .await?
        .into_inner();

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

    let last = ctx.migrate_to_b(&spec, &spec).await?;
    s.migrate.0.push(interfaces::time::ms_of_duration(&last.total) as f64 / 1000.0);
    s.mig_downtime
        .0
        .push(interfaces::time::ms_of_duration(&last.downtime) as f64 / 1000.0);
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
