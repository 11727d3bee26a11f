//! The baseline: raw `virsh` on a copy of the VEEH's own domain.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use vee_testkit::guest::last_tick;
use vee_testkit::lab::{SITE_A_URI, SITE_B_URI};

use super::lab::{completed_downtime_ms, file_wait_tick, run_cmd, short_id, timed_virsh, virsh};
use super::{Ctx, Samples, BOOT_TIMEOUT};

/// The raw copy of the VEEH's domain: its XML with the VEE directory, name
/// and UUID replaced and the VEEH's ownership metadata removed.
pub(super) fn raw_xml(template: &str, vee_dir: &Path, vee_id: &str, raw_dir: &Path, name: &str) -> String {
    let mut x = template.replace(&vee_dir.display().to_string(), &raw_dir.display().to_string());
    if let (Some(a), Some(b)) = (x.find("<metadata"), x.find("</metadata>")) {
        x.replace_range(a..b + "</metadata>".len(), "");
    }
    x = x.replace(&format!("<name>vee-{vee_id}</name>"), &format!("<name>{name}</name>"));
    x.replace(&format!("<uuid>{vee_id}</uuid>"), &format!("<uuid>{}</uuid>", uuid::Uuid::new_v4()))
}

pub(super) fn new_overlay(base: &Path, overlay: &Path, size: u64) -> Result<()> {
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
pub(super) async fn raw(ctx: &mut Ctx, s: &mut Samples, i: usize) -> Result<()> {
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

    // Stop-and-save (its timings are the checkpoint metrics' of
    // [`super::sizes`]); then restore.
    let state = da.join("save.state");
    virsh(SITE_A_URI, &["save", &name, state.to_str().unwrap()])?;
    let before = last_tick(&String::from_utf8_lossy(&std::fs::read(&console)?)).map_or(0, |t| t.0);
    s.restore.1.push(timed_virsh(SITE_A_URI, &["restore", state.to_str().unwrap()])?);
    let _ = std::fs::remove_file(&state);
    file_wait_tick(&console, before + 2, Duration::from_secs(60)).await?;

    // Live migration to site B with the incremental storage copy.
    new_overlay(&ctx.base, &db.join("overlay.qcow2"), ctx.overlay_size)?;
    let (secs, downtime) = migrate_to_b(&name, &[(da.display().to_string(), db.display().to_string())], &rd)?;
    s.migrate.1.push(secs);
    s.mig_downtime.1.push(downtime);
    let now = file_wait_tick(&db.join("console.log"), 1, Duration::from_secs(60)).await?;
    file_wait_tick(&db.join("console.log"), now + 1, Duration::from_secs(60)).await?;
    virsh(SITE_B_URI, &["destroy", &name])?;
    let _ = std::fs::remove_dir_all(&rd);
    Ok(())
}

/// libvirt's live external snapshot of domain `name` at site A, its memory
/// and new top layer in `dir`: (wall time, libvirt's downtime if it gave
/// one), in seconds; then the chain merged back and the files removed
/// (not measured).
pub(super) fn live_snapshot(name: &str, dir: &Path) -> Result<(f64, Option<f64>)> {
    let (mem, top) = (dir.join("cp.mem"), dir.join("cp-top.qcow2"));
    let memspec = format!("file={},snapshot=external", mem.display());
    let diskspec = format!("vda,snapshot=external,file={}", top.display());
    let t = Instant::now();
    virsh(
        SITE_A_URI,
        &[
            "snapshot-create-as",
            name,
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
    let downtime = completed_downtime_ms(SITE_A_URI, name).map(|ms| ms / 1000.0);
    virsh(
        SITE_A_URI,
        &["blockcommit", name, "vda", "--active", "--shallow", "--pivot", "--wait"],
    )?;
    let _ = std::fs::remove_file(&top);
    let _ = std::fs::remove_file(&mem);
    Ok((wall, downtime))
}

/// `virsh migrate --live --p2p --copy-storage-inc` of domain `name` from
/// site A to site B (to site B's end of the WAN, as the VEEH's migration
/// does), its migratable XML with each `(from, to)` of `replace` applied
/// (written into `dir`): (seconds, libvirt's downtime in seconds).
pub(super) fn migrate_to_b(name: &str, replace: &[(String, String)], dir: &Path) -> Result<(f64, f64)> {
    let mut dest = virsh(SITE_A_URI, &["dumpxml", "--migratable", name])?;
    for (from, to) in replace {
        dest = dest.replace(from, to);
    }
    let dest_path = dir.join("dest.xml");
    std::fs::write(&dest_path, dest)?;
    let migrate_uri = format!("tcp://{}", vee_testkit::lab::SITE_B_ADDR);
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
            &migrate_uri,
            "--disks-uri",
            &migrate_uri,
            name,
            SITE_B_URI,
        ],
    )?;
    let secs = t.elapsed().as_secs_f64();
    Ok((secs, completed_downtime_ms(SITE_B_URI, name).map(|ms| ms / 1000.0).unwrap_or(0.0)))
}
