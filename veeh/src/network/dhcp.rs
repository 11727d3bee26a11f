//! A service network's DHCP and DNS server on this kernel: dnsmasq (Debian's
//! `dnsmasq-base`) on the network's bridge, one per network, answering
//! only from the network's member table:
//! - DHCP for the reserved MAC -> address pairs only (`static` range, with
//!   the member's name as host name, the gateway as router, the network's
//!   MTU and the service's domain);
//! - DNS for the members' names, `<component>-<instance>` and
//!   `<component>-<instance>.<service>.internal` (docs/provider-guide.md "Service
//!   networks"); names of the service's domain are never forwarded.
//!
//! Its state is under `/run/vee-net/vb<VNI>/`: `hosts/members`
//! (`mac,address,name` lines), `names/members` (hosts-file lines),
//! `leases`, `dnsmasq.pid`. dnsmasq re-reads both directories when a file
//! in them changes (inotify), so a new table needs no restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use interfaces::vhi::NetworkMember;
use ipnet::Ipv4Net;

use super::bridge_name;

pub(super) const DHCP_ROOT: &str = "/run/vee-net";

/// Where this kernel keeps a network's DHCP and DNS state:
/// `/run/vee-net/vb<VNI>/`.
pub fn dhcp_dir(vni: u32) -> PathBuf {
    Path::new(DHCP_ROOT).join(bridge_name(vni))
}

/// The bridges that have state under `/run/vee-net` (whether or not the
/// bridge itself is still there).
pub(super) async fn with_state() -> Vec<String> {
    let mut found = Vec::new();
    if let Ok(mut dirs) = tokio::fs::read_dir(DHCP_ROOT).await {
        while let Ok(Some(d)) = dirs.next_entry().await {
            let br = d.file_name().to_string_lossy().into_owned();
            if br.starts_with("vb") {
                found.push(br);
            }
        }
    }
    found
}

/// One reservation: MAC -> (address, DNS label; empty: no name).
type Table = BTreeMap<String, (String, String)>;

/// Merges `members` into the network's table on this kernel and writes it
/// where dnsmasq reads it. A member replaces any entry with its MAC, and
/// any other MAC's entry holding its address or its name (the address or
/// name was given to it since); entries of VEEs no update mentions stay
/// until the network leaves this kernel.
pub(super) async fn write_members(vni: u32, domain: &str, members: &[NetworkMember]) -> Result<()> {
    let dir = dhcp_dir(vni);
    for sub in ["hosts", "names"] {
        tokio::fs::create_dir_all(dir.join(sub)).await?;
    }
    let mut table = read_table(&dir).await;
    for m in members {
        table.retain(|mac, (addr, name)| mac == &m.mac || (addr != &m.address && (m.name.is_empty() || name != &m.name)));
        table.insert(m.mac.clone(), (m.address.clone(), m.name.clone()));
    }
    let hosts: String = table
        .iter()
        .map(|(mac, (addr, name))| match name.as_str() {
            "" => format!("{mac},{addr}\n"),
            n => format!("{mac},{addr},{n}\n"),
        })
        .collect();
    let names: String = table
        .values()
        .filter(|(_, name)| !name.is_empty())
        .map(|(addr, name)| match domain {
            "" => format!("{addr} {name}\n"),
            d => format!("{addr} {name}.{d} {name}\n"),
        })
        .collect();
    // Written beside the watched directories, then renamed in: dnsmasq
    // never reads half a file.
    for (sub, text) in [("hosts", hosts), ("names", names)] {
        let tmp = dir.join(format!(".{sub}.tmp"));
        tokio::fs::write(&tmp, text).await?;
        tokio::fs::rename(&tmp, dir.join(sub).join("members")).await?;
    }
    Ok(())
}

async fn read_table(dir: &Path) -> Table {
    let text = tokio::fs::read_to_string(dir.join("hosts").join("members"))
        .await
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(',');
            let (mac, addr) = (f.next()?, f.next()?);
            Some((mac.to_string(), (addr.to_string(), f.next().unwrap_or("").to_string())))
        })
        .collect()
}

/// Starts the network's dnsmasq unless it runs: on the bridge only, DHCP
/// for the reservations in `hosts/`, DNS for the names in `names/` (the
/// service's domain answered locally, other names forwarded to the host's
/// resolvers), the gateway as DNS server and, with `router` (external
/// networks: the way out), as default router, the network's MTU. An
/// internal network gives no router: a VEE on an internal and an external
/// network gets one default route, the one that leads out.
pub(super) async fn ensure_server(vni: u32, subnet: &Ipv4Net, gateway: &str, router: bool, mtu: u32, domain: &str) -> Result<()> {
    let dir = dhcp_dir(vni);
    if running(&dir).await.is_some() {
        return Ok(());
    }
    let p = |f: &str| dir.join(f).display().to_string();
    let mut args = vec![
        "--conf-file=/dev/null".to_string(),
        format!("--interface={}", bridge_name(vni)),
        "--bind-interfaces".into(),
        "--except-interface=lo".into(),
        "--no-hosts".into(),
        format!("--hostsdir={}", p("names")),
        "--domain-needed".into(),
        format!("--dhcp-range={},static,{},1h", subnet.network(), subnet.netmask()),
        format!("--dhcp-hostsdir={}", p("hosts")),
        match router {
            true => format!("--dhcp-option=option:router,{gateway}"),
            false => "--dhcp-option=3".into(),
        },
        format!("--dhcp-option=option:dns-server,{gateway}"),
        format!("--dhcp-option=option:mtu,{mtu}"),
        "--dhcp-authoritative".into(),
        format!("--dhcp-leasefile={}", p("leases")),
        format!("--pid-file={}", p("dnsmasq.pid")),
    ];
    if !domain.is_empty() {
        args.push(format!("--domain={domain}"));
        args.push(format!("--local=/{domain}/"));
    }
    let out = tokio::process::Command::new("dnsmasq")
        .args(&args)
        .output()
        .await
        .context("run dnsmasq (dnsmasq-base)")?;
    if !out.status.success() {
        bail!("dnsmasq on {}: {}", bridge_name(vni), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The pid of the network's running dnsmasq, if one runs.
async fn running(dir: &Path) -> Option<String> {
    let pid = tokio::fs::read_to_string(dir.join("dnsmasq.pid")).await.ok()?;
    let pid = pid.trim().to_string();
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

/// Stops the network's dnsmasq (waiting, at most 2 s, for it to exit, so
/// that nothing of the network outlives the call) and removes its state.
pub(super) async fn remove(br: &str) {
    let dir = Path::new(DHCP_ROOT).join(br);
    if let Some(pid) = running(&dir).await {
        let _ = tokio::process::Command::new("kill").arg(&pid).status().await;
        for _ in 0..40 {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    let _ = tokio::fs::remove_dir_all(&dir).await;
}
