//! Service networks in the VHI benchmark: a VEE with one NIC on a service
//! network, through the VHI, against raw `virsh create` of the same domain
//! XML on the same bridge (made by the VEEH's own network code), each to
//! the first HTTP answer of the guest at its reserved address; then, for
//! the VEE, the gap a TCP client sees in the guest's tick stream (TCP 7000,
//! a line every 200 ms) during a live migration A -> B, next to the
//! downtime libvirt reports for that migration.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use interfaces::vhi::*;
use tokio::io::AsyncBufReadExt;
use vee_testkit::lab::SITE_A_URI;

use super::lab::{short_id, virsh};
use super::raw::{new_overlay, raw_xml};
use super::{row, Ctx, BOOT_TIMEOUT};

/// The benchmark's network: VNI, and the guest's address on it.
struct Net {
    nic: Nic,
    ip: String,
}

fn net() -> Net {
    let r = uuid::Uuid::new_v4();
    let (vni, x) = (60_000 + u32::from(r.as_bytes()[0]) * 16, u32::from(r.as_bytes()[1]) % 250);
    Net {
        nic: Nic {
            network: "bench".into(),
            vni,
            mac: format!("02:00:{:02x}:{:02x}:00:02", (vni >> 8) & 0xff, vni & 0xff),
            address: format!("10.254.{x}.2/24"),
            gateway: format!("10.254.{x}.1"),
            mtu: 1450,
            ..Default::default()
        },
        ip: format!("10.254.{x}.2"),
    }
}

/// Seconds from `t` until the guest at `ip` answers HTTP.
async fn first_http(ip: &str, t: Instant) -> Result<f64> {
    let client = reqwest::Client::builder().timeout(Duration::from_millis(500)).build()?;
    while t.elapsed() < BOOT_TIMEOUT {
        if let Ok(r) = client.get(format!("http://{ip}/")).send().await {
            if r.status().is_success() {
                return Ok(t.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("no HTTP answer from {ip} in {BOOT_TIMEOUT:?}")
}

/// Samples: (deploy to HTTP, ours), (the same, raw), (client TCP gap),
/// (libvirt's downtime).
#[derive(Default)]
struct NetSamples(Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);

pub(super) async fn run(ctx: &mut Ctx, reps: usize) -> Result<Vec<serde_json::Value>> {
    let mut s = NetSamples::default();
    for i in 0..reps {
        eprintln!("vhi: network repetition {}/{reps}", i + 1);
        let n = net();
        ours(ctx, &n, &mut s).await.context("service network: VHI")?;
        raw(ctx, &n, &mut s, i).await.context("service network: raw virsh")?;
    }
    Ok(vec![
        row(
            "VEE with a NIC: deploy to first HTTP answer at its reserved address (VHI Prepare+Create+Start, DHCP)",
            &s.0,
            "virsh create of the same domain XML on the same bridge, to first HTTP answer",
            &s.1,
        ),
        row(
            "TCP client's largest gap in a 200 ms tick stream during live migration A->B",
            &s.2,
            "libvirt's reported downtime of that migration (MigrateOut downtime_ms)",
            &s.3,
        ),
    ])
}

async fn ours(ctx: &mut Ctx, n: &Net, s: &mut NetSamples) -> Result<()> {
    let mut spec = ctx.ids.spec();
    spec.nics = vec![n.nic.clone()];
    let vee = spec.vee_id.clone();
    ctx.cleanup.track(SITE_A_URI, &format!("vee-{vee}"));
    ctx.cleanup.track(vee_testkit::lab::SITE_B_URI, &format!("vee-{vee}"));
    ctx.current = Some(vee.clone());
    let t = Instant::now();
    ctx.ca.prepare(spec.clone()).await?;
    ctx.ca.create(spec.clone()).await?;
    ctx.ca.start(VeeRef { vee_id: vee.clone() }).await?;
    s.0.push(first_http(&n.ip, t).await?);
    ctx.net_template = Some(std::fs::read_to_string(ctx.template_dir.with_file_name(&vee).join("domain.xml"))?);

    // A client of the tick stream, each line timed.
    let stream = tokio::net::TcpStream::connect((n.ip.as_str(), 7000)).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stream).lines();
        while let Ok(Some(_)) = lines.next_line().await {
            if tx.send(Instant::now()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    while seen.len() < 5 {
        seen.push(rx.recv().await.context("the tick stream ended")?);
    }
    let last = ctx.migrate_to_b(&spec).await?;
    let after = seen.len() + 10;
    while seen.len() < after {
        let next = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
        seen.push(next.ok().flatten().context("the tick stream ended with the migration")?);
    }
    reader.abort();
    let gap = seen.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
    s.2.push(gap.as_secs_f64());
    s.3.push(last.downtime_ms as f64 / 1000.0);
    ctx.cb.destroy(DestroyRequest { vee_id: vee, remove: true }).await?;
    ctx.current = None;
    Ok(())
}

async fn raw(ctx: &mut Ctx, n: &Net, s: &mut NetSamples, i: usize) -> Result<()> {
    let template = ctx.net_template.take().context("no domain XML of the VEE")?;
    let name = format!("benchnet-{}-{i}", short_id());
    ctx.cleanup.track(SITE_A_URI, &name);
    let dir = ctx.cleanup.dir.join(format!("rawnet-{i}"));
    std::fs::create_dir_all(&dir)?;
    new_overlay(&ctx.base, &dir.join("overlay.qcow2"), ctx.overlay_size)?;
    let vee_id = template
        .split("<uuid>")
        .nth(1)
        .and_then(|r| r.split("</uuid>").next())
        .context("domain XML without a UUID")?
        .to_string();
    let xml = raw_xml(&template, &ctx.template_dir.with_file_name(&vee_id), &vee_id, &dir, &name);
    let path = dir.join("domain.xml");
    std::fs::write(&path, xml)?;
    // The same bridge, DHCP reservation and isolation, made by the VEEH's
    // code (not timed: the VEE's run above made them too, before its start).
    let nics = [n.nic.clone()];
    veeh::network::ensure_networks("127.0.0.1", &nics).await?;
    let t = Instant::now();
    virsh(SITE_A_URI, &["create", path.to_str().unwrap()])?;
    let booted = first_http(&n.ip, t).await;
    virsh(SITE_A_URI, &["destroy", &name])?;
    veeh::network::release_networks(&nics).await;
    s.1.push(booted?);
    Ok(())
}
