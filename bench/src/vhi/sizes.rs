//! Checkpoints and restores at each guest memory size of
//! `BENCH_VHI_SIZES` (MiB; default 128 and 1024), through the VHI and with
//! raw virsh on the same domain, in the same run. The guests are the tiny
//! test guest with more memory; one of 512 MiB or more first fills 700/1024
//! of its memory with random bytes (a tmpfs file written by `busybox dd
//! if=/dev/urandom`, typed into its serial console), so that its memory is
//! mostly in use, as a real workload's would be. Per repetition and size:
//!
//! - through the VHI, on host A: three checkpoints in a row (the first;
//!   a second of the idle guest; a third after the guest rewrote 64 MiB of
//!   its memory, of its filled file; a 128 MiB guest writes a new file of
//!   a quarter of its memory, 32 MiB, as 64 MiB would not fit): the first's wall time (the Checkpoint call, upload included)
//!   and downtime (the record's), and the bytes the repository received
//!   for each (its `image_repo_received_bytes_total`, as a delta: what a
//!   checkpoint sends, whatever it sends); then the third checkpoint
//!   restored on host A2 (site A's second libvirtd, a VEEH that never saw
//!   it): the first restore there (pulled) and a second one of the same
//!   checkpoint on the same host (cached, when the VEEH caches);
//! - with raw virsh on a copy of that VEE's domain XML: `snapshot-create-as
//!   --live --memspec --diskspec` (wall time, libvirt's downtime), `save`
//!   and a copy of the overlay, `restore` of that local file, and `save
//!   --image-format sparse --parallel-channels N` and the copy.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use interfaces::vhi::*;
use serde_json::Value;
use vee_testkit::lab::SITE_A_URI;

use super::lab::{file_wait_tick, short_id, tail, timed_virsh, virsh};
use super::raw::{live_snapshot, new_overlay, raw_xml};
use super::{Ctx, BOOT_TIMEOUT};
use crate::metric::{metric, ms};

/// Memory sizes measured (MiB): `BENCH_VHI_SIZES`, a comma list.
pub(super) fn sizes() -> Result<Vec<u64>> {
    let v = std::env::var("BENCH_VHI_SIZES").unwrap_or_else(|_| "128,1024".into());
    v.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().with_context(|| format!("BENCH_VHI_SIZES: {s:?}")))
        .collect()
}

/// `virsh save --parallel-channels` of the baseline: `BENCH_SAVE_CHANNELS`.
fn channels() -> String {
    std::env::var("BENCH_SAVE_CHANNELS").unwrap_or_else(|_| "2".into())
}

/// The variant suffix of `mib`: `1gib`, `128mib`.
pub(super) fn tag(mib: u64) -> String {
    if mib.is_multiple_of(1024) {
        format!("{}gib", mib / 1024)
    } else {
        format!("{mib}mib")
    }
}

/// MiB of random bytes a guest of `mib` fills before its first
/// checkpoint (none below 512 MiB).
fn fill_mib(mib: u64) -> u64 {
    if mib >= 512 {
        mib * 700 / 1024
    } else {
        0
    }
}

/// What the guest runs to fill its memory, if it does.
fn fill_cmd(mib: u64) -> Option<String> {
    let n = fill_mib(mib);
    (n > 0).then(|| {
        format!(
            "mkdir -p /run/f && mount -t tmpfs -o size={}m f /run/f && busybox dd if=/dev/urandom of=/run/f/fill bs=1M count={n} 2>/dev/null",
            n + 64
        )
    })
}

/// MiB the guest rewrites between two checkpoints: 64, or a quarter of
/// a smaller guest's memory (a 128 MiB guest writing 64 MiB into a tmpfs
/// runs out of memory: its kernel and initramfs hold about half).
fn dirty_mib(mib: u64) -> u64 {
    64.min(mib / 4)
}

/// What the guest runs to rewrite [`dirty_mib`] of its memory.
fn dirty_cmd(mib: u64) -> String {
    let n = dirty_mib(mib);
    if fill_mib(mib) >= n {
        format!("busybox dd if=/dev/urandom of=/run/f/fill bs=1M count={n} conv=notrunc 2>/dev/null")
    } else {
        format!(
            "mkdir -p /run/f && mount -t tmpfs -o size={}m f /run/f && busybox dd if=/dev/urandom of=/run/f/dirty bs=1M count={n} 2>/dev/null",
            n + 8
        )
    }
}

static MARK: AtomicU64 = AtomicU64::new(1);

/// The pty of `dom`'s serial console at `uri`.
fn pty_of(uri: &str, dom: &str) -> Result<PathBuf> {
    let xml = virsh(uri, &["dumpxml", dom])?;
    let at = xml.find("<source path='/dev/pts/").context("the domain's console has no pty")?;
    let rest = &xml[at + "<source path='".len()..];
    Ok(PathBuf::from(&rest[..rest.find('\'').context("pty path")?]))
}

/// Types `cmd` into the root shell on `dom`'s serial console (its pty) and
/// waits until the guest printed that it succeeded (a mark the typed line
/// itself does not contain) in the console log `log`. The pty is held
/// open meanwhile, and what comes out of it read and dropped: QEMU reads
/// a pty's input only once it saw the other end open (it polls every
/// second), and the log has every byte anyway.
async fn in_guest(uri: &str, dom: &str, log: &Path, cmd: &str, timeout: Duration) -> Result<()> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let n = 100_000 + MARK.fetch_add(1, Ordering::SeqCst);
    let line = format!("{cmd} && echo mark-$(({n} + 1))\n");
    let want = format!("mark-{}", n + 1);
    let pty = pty_of(uri, dom)?;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(&pty)
        .with_context(|| format!("opening {}", pty.display()))?;
    let mut buf = [0u8; 4096];
    let t = Instant::now();
    let mut typed = false;
    loop {
        while matches!(f.read(&mut buf), Ok(n) if n > 0) {}
        if !typed && t.elapsed() > Duration::from_millis(1500) {
            f.write_all(line.as_bytes())
                .with_context(|| format!("typing into {}", pty.display()))?;
            typed = true;
        }
        let text = String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned();
        if typed && text.contains(&want) {
            return Ok(());
        }
        if t.elapsed() > timeout {
            bail!("{dom}: `{cmd}` did not finish in {timeout:?}; console tail:\n{}", tail(&text));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The last tick in a console log.
fn last_tick_of(log: &Path) -> u64 {
    vee_testkit::guest::last_tick(&String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default())).map_or(0, |t| t.0)
}

/// Samples of one size.
#[derive(Default)]
struct S {
    wall: Vec<f64>,
    /// The second (idle) checkpoint's wall time, s.
    second_wall: Vec<f64>,
    downtime: Vec<f64>,
    first: Vec<f64>,
    idle: Vec<f64>,
    dirty: Vec<f64>,
    pulled: Vec<f64>,
    cached: Vec<f64>,
    snap: Vec<f64>,
    snap_down: Vec<f64>,
    save: Vec<f64>,
    psave: Vec<f64>,
    restore: Vec<f64>,
}

/// The VEE of a repetition, as the raw baseline copies it.
struct Template {
    xml: String,
    dir: PathBuf,
    id: String,
}

pub(super) async fn run(ctx: &mut Ctx, reps: usize) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for mib in sizes()? {
        let mut s = S::default();
        for i in 0..reps {
            eprintln!("vhi: {mib} MiB, repetition {}/{reps}: ours", i + 1);
            let t = ours(ctx, mib, &mut s).await.with_context(|| format!("{mib} MiB: VHI"))?;
            eprintln!("vhi: {mib} MiB, repetition {}/{reps}: raw virsh", i + 1);
            raw(ctx, mib, &t, i, &mut s)
                .await
                .with_context(|| format!("{mib} MiB: raw virsh"))?;
            eprintln!(
                "vhi: {mib} MiB, repetition {} (ms; MiB): checkpoint {:.0}, second {:.0} (snapshot {:.0}, save {:.0}, parallel save {:.0}) downtime {:.1}/{:.1} bytes first {:.1} idle {:.1} dirty {:.1} restore pulled {:.0} cached {:.0} (virsh {:.0})",
                i + 1,
                s.wall[i] * 1e3,
                s.second_wall[i] * 1e3,
                s.snap[i] * 1e3,
                s.save[i] * 1e3,
                s.psave[i] * 1e3,
                s.downtime[i] * 1e3,
                s.snap_down[i] * 1e3,
                s.first[i] / 1048576.0,
                s.idle[i] / 1048576.0,
                s.dirty[i] / 1048576.0,
                s.pulled[i] * 1e3,
                s.cached[i] * 1e3,
                s.restore[i] * 1e3
            );
        }
        out.extend(metrics(mib, &s));
    }
    Ok(out)
}

fn metrics(mib: u64, s: &S) -> Vec<Value> {
    let v = tag(mib);
    let guest = match fill_mib(mib) {
        0 => format!("{mib} MiB guest"),
        f => format!("{mib} MiB guest, {f} MiB of it random"),
    };
    let ch = channels();
    let cp = "live checkpoint incl. push of memory+disk to image-repo (VHI Checkpoint)";
    vec![
        metric(
            &format!("checkpoint_wall_ms_{v}"),
            "ms",
            &format!("{cp}, {guest}"),
            &ms(&s.wall),
            Some((
                "virsh snapshot-create-as --live --memspec/--diskspec external, no upload",
                &ms(&s.snap),
            )),
        ),
        metric(
            &format!("checkpoint_second_wall_ms_{v}"),
            "ms",
            &format!("{cp}, the second one (of the idle guest: only the chunks the repository lacks go), {guest}"),
            &ms(&s.second_wall),
            Some((
                "virsh snapshot-create-as --live --memspec/--diskspec external, no upload",
                &ms(&s.snap),
            )),
        ),
        metric(
            &format!("checkpoint_wall_vs_save_ms_{v}"),
            "ms",
            &format!("{cp} vs stop-and-save, {guest}"),
            &ms(&s.wall),
            Some(("virsh save + cp overlay (guest stopped)", &ms(&s.save))),
        ),
        metric(
            &format!("checkpoint_wall_vs_parallel_save_ms_{v}"),
            "ms",
            &format!("{cp} vs parallel stop-and-save, {guest}"),
            &ms(&s.wall),
            Some((
                &format!("virsh save --image-format sparse --parallel-channels {ch} + cp overlay (guest stopped)"),
                &ms(&s.psave),
            )),
        ),
        metric(
            &format!("checkpoint_downtime_ms_{v}"),
            "ms",
            &format!("checkpoint guest downtime (CheckpointRecord.downtime), {guest}"),
            &ms(&s.downtime),
            Some(("virsh snapshot-create-as --live (libvirt's downtime)", &ms(&s.snap_down))),
        ),
        metric(
            &format!("checkpoint_second_bytes_idle_{v}"),
            "bytes",
            &format!("bytes image-repo received for a second checkpoint of the idle guest, {guest}"),
            &s.idle,
            Some(("the first checkpoint (image-repo received bytes)", &s.first)),
        ),
        metric(
            &format!("checkpoint_second_bytes_dirty{}_{v}", dirty_mib(mib)),
            "bytes",
            &format!(
                "bytes image-repo received for a checkpoint after the guest rewrote {} MiB, {guest}",
                dirty_mib(mib)
            ),
            &s.dirty,
            Some(("the first checkpoint (image-repo received bytes)", &s.first)),
        ),
        metric(
            &format!("restore_pulled_ms_{v}"),
            "ms",
            &format!("first restore of a checkpoint on a host (VHI Restore, pull included), {guest}"),
            &ms(&s.pulled),
            Some(("virsh restore of a local state file", &ms(&s.restore))),
        ),
        metric(
            &format!("restore_cached_ms_{v}"),
            "ms",
            &format!("second restore of the same checkpoint on the same host (VHI Restore), {guest}"),
            &ms(&s.cached),
            Some(("virsh restore of a local state file", &ms(&s.restore))),
        ),
    ]
}

/// `image_repo_received_bytes_total` now.
async fn received(ctx: &Ctx) -> Result<f64> {
    let text = interfaces::tls::http_client()
        .build()?
        .get(&ctx.repo_metrics)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    text.lines()
        .find_map(|l| l.strip_prefix("image_repo_received_bytes_total ")?.trim().parse().ok())
        .context("image-repo's metrics have no image_repo_received_bytes_total")
}

/// A checkpoint through the VHI at A: the record, its wall time (s) and
/// the bytes the repository received meanwhile.
async fn checkpoint(ctx: &mut Ctx, vee: &str) -> Result<(CheckpointRecord, f64, f64)> {
    let before = received(ctx).await?;
    let t = Instant::now();
    let cp = ctx
        .ca
        .checkpoint(CheckpointRequest {
            vee_id: vee.into(),
            stop_after: false,
        })
        .await?
        .into_inner();
    let wall = t.elapsed().as_secs_f64();
    Ok((cp, wall, received(ctx).await? - before))
}

/// A restore through the VHI at A2: its wall time (s), once the guest
/// ticks on.
async fn restore_a2(ctx: &mut Ctx, spec: &VeeSpec, cp: &CheckpointRecord) -> Result<f64> {
    let t = Instant::now();
    let st = ctx
        .a2
        .restore(RestoreRequest {
            spec: Some(spec.clone()),
            checkpoint: Some(cp.clone()),
            fence_owner: String::new(),
        })
        .await?
        .into_inner();
    let secs = t.elapsed().as_secs_f64();
    if st.state() != VeeState::Running {
        bail!("restored VEE is {:?}", st.state());
    }
    let now = super::lab::vhi_wait_tick(&mut ctx.a2, &spec.vee_id, 1, Duration::from_secs(60)).await?;
    super::lab::vhi_wait_tick(&mut ctx.a2, &spec.vee_id, now + 1, Duration::from_secs(60)).await?;
    ctx.a2
        .destroy(DestroyRequest {
            vee_id: spec.vee_id.clone(),
            remove: true,
        })
        .await?;
    Ok(secs)
}

async fn ours(ctx: &mut Ctx, mib: u64, s: &mut S) -> Result<Template> {
    let mut spec = ctx.ids.spec();
    spec.memory_mib = mib;
    let vee = spec.vee_id.clone();
    let dom = format!("vee-{vee}");
    for uri in [SITE_A_URI, vee_testkit::lab::SITE_A2_URI] {
        ctx.cleanup.track(uri, &dom);
    }
    ctx.current = Some(vee.clone());
    ctx.ca.prepare(PrepareRequest { spec: Some(spec.clone()) }).await?;
    ctx.ca.create(CreateRequest { spec: Some(spec.clone()) }).await?;
    ctx.ca.start(StartRequest { vee_id: vee.clone() }).await?;
    super::lab::vhi_wait_tick(&mut ctx.ca, &vee, 1, BOOT_TIMEOUT).await?;
    let dir = ctx.a_state.join("vees").join(&vee);
    let log = dir.join("console.log");
    let template = Template {
        xml: std::fs::read_to_string(dir.join("domain.xml")).context("the VEEH's domain.xml")?,
        dir,
        id: vee.clone(),
    };
    if let Some(cmd) = fill_cmd(mib) {
        in_guest(SITE_A_URI, &dom, &log, &cmd, Duration::from_secs(600)).await?;
    }
    file_wait_tick(&log, last_tick_of(&log) + 1, Duration::from_secs(60)).await?;

    let (cp1, wall, first) = checkpoint(ctx, &vee).await?;
    file_wait_tick(&log, last_tick_of(&log) + 2, Duration::from_secs(60)).await?;
    let (_, second_wall, idle) = checkpoint(ctx, &vee).await?;
    in_guest(SITE_A_URI, &dom, &log, &dirty_cmd(mib), Duration::from_secs(300)).await?;
    let (cp3, _, dirty) = checkpoint(ctx, &vee).await?;
    ctx.ca
        .destroy(DestroyRequest {
            vee_id: vee.clone(),
            remove: true,
        })
        .await?;
    s.wall.push(wall);
    s.second_wall.push(second_wall);
    s.downtime.push(interfaces::time::ms_of_duration(&cp1.downtime) as f64 / 1000.0);
    s.first.push(first);
    s.idle.push(idle);
    s.dirty.push(dirty);
    s.pulled.push(restore_a2(ctx, &spec, &cp3).await.context("first restore on A2")?);
    s.cached.push(restore_a2(ctx, &spec, &cp3).await.context("second restore on A2")?);
    ctx.current = None;
    Ok(template)
}

async fn raw(ctx: &mut Ctx, mib: u64, t: &Template, i: usize, s: &mut S) -> Result<()> {
    let name = format!("benchraw-{}-{mib}-{i}", short_id());
    ctx.cleanup.track(SITE_A_URI, &name);
    let rd = ctx.cleanup.dir.join(format!("raw-{mib}-{i}"));
    let _ = std::fs::remove_dir_all(&rd);
    std::fs::create_dir_all(&rd)?;
    let log = rd.join("console.log");
    let overlay = rd.join("overlay.qcow2");
    new_overlay(&ctx.base, &overlay, ctx.overlay_size)?;
    let xml = raw_xml(&t.xml, &t.dir, &t.id, &rd, &name);
    if !xml.contains(&overlay.display().to_string()) || !xml.contains(&log.display().to_string()) {
        bail!(
            "the VEEH's domain XML does not name its overlay and console under {}",
            t.dir.display()
        );
    }
    let xml_path = rd.join("domain.xml");
    std::fs::write(&xml_path, &xml)?;
    virsh(SITE_A_URI, &["create", xml_path.to_str().unwrap()])?;
    file_wait_tick(&log, 1, BOOT_TIMEOUT).await?;
    if let Some(cmd) = fill_cmd(mib) {
        in_guest(SITE_A_URI, &name, &log, &cmd, Duration::from_secs(600)).await?;
    }
    file_wait_tick(&log, last_tick_of(&log) + 1, Duration::from_secs(60)).await?;

    let (wall, downtime) = live_snapshot(&name, &rd)?;
    s.snap.push(wall);
    s.snap_down.push(downtime.unwrap_or(wall));

    // Stop-and-save with a copy of the overlay; the restore of that file.
    let state = rd.join("save.state");
    let saved = rd.join("overlay.saved.qcow2");
    let t0 = Instant::now();
    virsh(SITE_A_URI, &["save", &name, state.to_str().unwrap()])?;
    std::fs::copy(&overlay, &saved)?;
    s.save.push(t0.elapsed().as_secs_f64());
    let _ = std::fs::remove_file(&saved);
    let before = last_tick_of(&log);
    s.restore.push(timed_virsh(SITE_A_URI, &["restore", state.to_str().unwrap()])?);
    let _ = std::fs::remove_file(&state);
    file_wait_tick(&log, before + 2, Duration::from_secs(60)).await?;

    // The parallel save (QEMU's mapped-ram with multifd channels).
    let t0 = Instant::now();
    virsh(
        SITE_A_URI,
        &[
            "save",
            &name,
            state.to_str().unwrap(),
            "--image-format",
            "sparse",
            "--parallel-channels",
            &channels(),
        ],
    )?;
    std::fs::copy(&overlay, &saved)?;
    s.psave.push(t0.elapsed().as_secs_f64());
    let _ = std::fs::remove_dir_all(&rd);
    Ok(())
}
