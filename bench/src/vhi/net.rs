//! Service networks in the VHI benchmark: a VEE with one NIC on a service
//! network, through the VHI, against raw `virsh create` of the same domain
//! XML on the same bridge (made by the VEEH's own network code), each to
//! the first HTTP answer of the guest at its reserved address; then, for
//! the VEE, the gap a TCP client sees in the guest's tick stream (TCP 7000,
//! a line every 200 ms) during a cross-site live migration A -> B with the
//! network stretched to site B over the WAN (as a VEEM does it: A anchors
//! the network's home part and floods to B, B's host gets A's table on the
//! agreed overlay port), next to the downtime libvirt reports for that
//! migration; and that migration's total time next to `virsh migrate
//! --live --p2p --copy-storage-inc` of the raw domain, with the same
//! bridge and VXLAN made by hand at site B.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use interfaces::vhi::*;
use tokio::io::AsyncBufReadExt;
use vee_testkit::lab::{Place, SITE_A_ADDR, SITE_A_URI, SITE_B_ADDR, SITE_B_URI};

use super::lab::{run_cmd, short_id, virsh};
use super::raw::{new_overlay, raw_xml};
use super::{Ctx, BOOT_TIMEOUT};
use crate::metric::{metric, ms};

/// The benchmark's network: VNI, and the guest's address on it.
struct Net {
    nic: Nic,
    ip: String,
}

impl Net {
    /// Its bridge at site A.
    fn nic_bridge(&self) -> String {
        veeh::network::bridge_name(self.nic.vni)
    }
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
    let client = interfaces::tls::http_client().timeout(Duration::from_millis(500)).build()?;
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
/// (libvirt's downtime), (cross-site migration total, ours), (the same,
/// raw virsh).
#[derive(Default)]
struct NetSamples(Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);

/// The overlay port the benchmark's sites agree (as the lab's tests do).
const OVERLAY_PORT: u32 = 4790;

/// The benchmark VEE as the network's only member, behind `vtep`:`port`.
fn member(n: &Net, vtep: &str, port: u32) -> NetworkMember {
    NetworkMember {
        name: "bench-0".into(),
        mac: n.nic.mac.clone(),
        address: n.ip.clone(),
        vtep: vtep.into(),
        vtep_port: port,
        ..Default::default()
    }
}

/// The update a VEEM sends site A's host while the network's only VEE is
/// (about to be) at site B: A keeps the home part (anchor) and floods to B.
fn stretched_at_a(n: &Net, member: NetworkMember) -> NetworkUpdate {
    let net: ipnet::Ipv4Net = n.nic.address.parse().expect("the bench's address");
    NetworkUpdate {
        vni: n.nic.vni,
        members: vec![member],
        stretched_to: vec![Vtep {
            address: SITE_B_ADDR.into(),
            port: OVERLAY_PORT,
        }],
        anchor: Some(NetworkHome {
            subnet: net.trunc().to_string(),
            gateway: n.nic.gateway.clone(),
            mtu: n.nic.mtu,
            external: false,
        }),
        ..Default::default()
    }
}

pub(super) async fn run(ctx: &mut Ctx, reps: usize) -> Result<Vec<serde_json::Value>> {
    let mut s = NetSamples::default();
    for i in 0..reps {
        eprintln!("vhi: network repetition {}/{reps}", i + 1);
        let n = net();
        ours(ctx, &n, &mut s).await.context("service network: VHI")?;
        raw(ctx, &n, &mut s, i).await.context("service network: raw virsh")?;
    }
    Ok(vec![
        metric(
            "nic_deploy_first_http_ms",
            "ms",
            "VEE with a NIC: deploy to first HTTP answer at its reserved address (VHI Prepare+Create+Start, DHCP)",
            &ms(&s.0),
            Some((
                "virsh create of the same domain XML on the same bridge, to first HTTP answer",
                &ms(&s.1),
            )),
        ),
        metric(
            "cross_site_migration_tcp_gap_ms",
            "ms",
            "TCP client's largest gap in a 200 ms tick stream during cross-site live migration A->B (network stretched over the WAN)",
            &ms(&s.2),
            Some(("libvirt's reported downtime of that migration (MigrateOut downtime_ms)", &ms(&s.3))),
        ),
        metric(
            "cross_site_migration_nic_ms",
            "ms",
            "cross-site live migration A->B of a VEE with a NIC, network stretched (VHI PrepareIncoming+MigrateOut+CompleteIncoming)",
            &ms(&s.4),
            Some((
                "virsh migrate --live --p2p --copy-storage-inc of the same domain, bridge and VXLAN at B made by hand",
                &ms(&s.5),
            )),
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
    ctx.ca.prepare(interfaces::vhi::PrepareRequest { spec: Some(spec.clone()) }).await?;
    ctx.ca.create(interfaces::vhi::CreateRequest { spec: Some(spec.clone()) }).await?;
    ctx.ca.start(StartRequest { vee_id: vee.clone() }).await?;
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
    // Stretched to B first, as a VEEM does; B's host gets A's table.
    ctx.ca.update_network(network(stretched_at_a(n, member(n, SITE_A_ADDR, 0)))).await?;
    let mut at_b = spec.clone();
    at_b.nics[0].overlay_port = OVERLAY_PORT;
    at_b.nics[0].members = vec![member(n, SITE_A_ADDR, 0)];
    let t = Instant::now();
    let last = ctx.migrate_to_b(&spec, &at_b).await?;
    s.4.push(t.elapsed().as_secs_f64());
    ctx.ca
        .update_network(network(stretched_at_a(n, member(n, SITE_B_ADDR, OVERLAY_PORT))))
        .await?;
    let after = seen.len() + 10;
    while seen.len() < after {
        let next = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
        seen.push(next.ok().flatten().context("the tick stream ended with the migration")?);
    }
    reader.abort();
    let gap = seen.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
    s.2.push(gap.as_secs_f64());
    s.3.push(interfaces::time::ms_of_duration(&last.downtime) as f64 / 1000.0);
    ctx.cb.destroy(DestroyRequest { vee_id: vee, remove: true }).await?;
    // No member left: site A lets the network go.
    ctx.ca
        .update_network(network(NetworkUpdate {
            vni: n.nic.vni,
            ..Default::default()
        }))
        .await?;
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
    s.1.push(booted?);
    // The same cross-site move by hand: site B's bridge and VXLAN
    // interface on the overlay port, flooding to A; A floods to B and
    // takes B's frames.
    let (vni, hex) = (n.nic.vni, format!("{:x}", n.nic.vni));
    let (br, vt) = (format!("vs{OVERLAY_PORT}-{hex}"), format!("vt{OVERLAY_PORT}-{hex}"));
    let at_b = format!(
        "ip link add {br} type bridge && ip link set {br} mtu 1450 up && \
         ip link add {vt} type vxlan id {vni} local {SITE_B_ADDR} dstport {OVERLAY_PORT} nolearning && \
         ip link set {vt} mtu 1450 master {br} up && \
         bridge fdb append 00:00:00:00:00:00 dev {vt} dst {SITE_A_ADDR} port 4789"
    );
    let at_a = format!(
        "bridge fdb append 00:00:00:00:00:00 dev vx{vni} dst {SITE_B_ADDR} port {OVERLAY_PORT} && \
         nft add element inet vee_isolation vxlan_from {{ 4789 . {vni} . {SITE_B_ADDR} }}"
    );
    run_at_b(&at_b)?;
    let stretched = run_cmd("sh", &["-c", &at_a]);
    let db = dir.join("at-b");
    std::fs::create_dir_all(&db)?;
    new_overlay(&ctx.base, &db.join("overlay.qcow2"), ctx.overlay_size)?;
    let moved = stretched.and_then(|_| {
        super::raw::migrate_to_b(
            &name,
            &[
                (dir.display().to_string() + "/", db.display().to_string() + "/"),
                (format!("bridge='{}'", n.nic_bridge()), format!("bridge='{br}'")),
            ],
            &dir,
        )
    });
    let _ = virsh(SITE_B_URI, &["destroy", &name]);
    let _ = virsh(SITE_A_URI, &["destroy", &name]);
    let _ = run_at_b(&format!("ip link del {vt}; ip link del {br}"));
    let _ = run_cmd(
        "sh",
        &[
            "-c",
            &format!("bridge fdb del 00:00:00:00:00:00 dev vx{vni} dst {SITE_B_ADDR} port {OVERLAY_PORT}"),
        ],
    );
    veeh::network::release_networks(&nics).await;
    s.5.push(moved?.0);
    Ok(())
}

/// Runs `sh -c SCRIPT` in site B's namespaces.
fn run_at_b(script: &str) -> Result<()> {
    let enter = Place::SiteB.enter().map_err(anyhow::Error::msg)?;
    let args: Vec<&str> = enter[1..].iter().map(String::as_str).chain(["sh", "-c", script]).collect();
    run_cmd(&enter[0], &args).map(|_| ())
}

/// The VHI request that carries `update`.
fn network(update: NetworkUpdate) -> UpdateNetworkRequest {
    UpdateNetworkRequest { network: Some(update) }
}
