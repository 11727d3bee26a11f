//! This host's side of a VEE's service networks: a Linux bridge per
//! network, `vb<VNI>` with the network's MTU and gateway address, and a
//! DHCP server on it (dnsmasq from Debian's `dnsmasq-base`) that answers
//! only the reserved MAC -> address pairs of the VEEs here, so that stock
//! guest images that use DHCP get the address the VEEM assigned; an
//! nftables table keeps VEEs off the host and the networks apart
//! ([`ISOLATION_RULES`]). Made
//! (Debian's `ip`) before a VEE with a NIC on it starts, is restored or
//! arrives; removed once no interface is attached to the bridge any more,
//! so that nothing is left behind when a network's last VEE leaves the
//! host. Hosts sharing one kernel (the lab's site A) share the bridge, its
//! DHCP server and its state under `/run/vee-net/vb<VNI>/`; they go when
//! the last NIC of any of them leaves.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use interfaces::vhi::Nic;
use ipnet::Ipv4Net;

/// The bridge of the network with VNI `vni` (at most 10 bytes: a valid
/// interface name).
pub fn bridge_name(vni: u32) -> String {
    format!("vb{vni}")
}

/// Runs `ip ARGS`: its stdout, or an error with its stderr.
async fn ip(args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new("ip")
        .args(args)
        .output()
        .await
        .context("run ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn exists(bridge: &str) -> bool {
    ip(&["link", "show", "dev", bridge]).await.is_ok()
}

/// Where this kernel keeps a network's DHCP state: `/run/vee-net/vb<VNI>/`
/// (the reservations `hosts/<VEE ID>`, the leases, dnsmasq's pid).
pub fn dhcp_dir(vni: u32) -> PathBuf {
    Path::new(DHCP_ROOT).join(bridge_name(vni))
}

const DHCP_ROOT: &str = "/run/vee-net";

/// Makes `vee_id`'s NICs reachable on this host before it starts, is
/// restored or arrives: each network's bridge exists, is up with the NIC's
/// MTU and holds the gateway address; the NIC's MAC -> address pair is
/// reserved with the network's DHCP server (dnsmasq on the bridge, started
/// here if it is not running), which answers reserved pairs only.
pub async fn ensure_networks(vee_id: &str, nics: &[Nic]) -> Result<()> {
    for n in nics {
        let br = bridge_name(n.vni);
        if !exists(&br).await {
            // Another VEEH on this kernel may make it at the same moment.
            if let Err(e) = ip(&["link", "add", "name", &br, "type", "bridge"]).await {
                if !exists(&br).await {
                    return Err(e);
                }
            }
        }
        let mtu = n.mtu.to_string();
        ip(&["link", "set", "dev", &br, "mtu", &mtu, "up"]).await?;
        let net: Ipv4Net = n.address.parse().with_context(|| format!("NIC address {:?}", n.address))?;
        let gateway = format!("{}/{}", n.gateway, net.prefix_len());
        ip(&["addr", "replace", &gateway, "dev", &br]).await?;
        ensure_isolation(&br).await?;
        let dir = dhcp_dir(n.vni);
        tokio::fs::create_dir_all(dir.join("hosts")).await?;
        tokio::fs::write(dir.join("hosts").join(vee_id), format!("{},{}\n", n.mac, net.addr())).await?;
        ensure_dhcp(n, &net, &dir).await?;
    }
    Ok(())
}

/// Starts the network's dnsmasq unless it runs: DHCP only (`--port=0`),
/// on the bridge only, for the reservations in `hosts/` (re-read when they
/// change), with the gateway as router and the network's MTU.
async fn ensure_dhcp(n: &Nic, net: &Ipv4Net, dir: &Path) -> Result<()> {
    let pidfile = dir.join("dnsmasq.pid");
    if let Ok(pid) = tokio::fs::read_to_string(&pidfile).await {
        if Path::new(&format!("/proc/{}", pid.trim())).exists() {
            return Ok(());
        }
    }
    let p = |f: &str| dir.join(f).display().to_string();
    let out = tokio::process::Command::new("dnsmasq")
        .args([
            "--conf-file=/dev/null".to_string(),
            format!("--interface={}", bridge_name(n.vni)),
            "--bind-interfaces".into(),
            "--except-interface=lo".into(),
            "--port=0".into(),
            format!("--dhcp-range={},static,{},1h", net.network(), net.netmask()),
            format!("--dhcp-hostsdir={}", p("hosts")),
            format!("--dhcp-option=option:router,{}", n.gateway),
            format!("--dhcp-option=option:mtu,{}", n.mtu),
            "--dhcp-authoritative".into(),
            format!("--dhcp-leasefile={}", p("leases")),
            format!("--pid-file={}", p("dnsmasq.pid")),
        ])
        .output()
        .await
        .context("run dnsmasq (dnsmasq-base)")?;
    if !out.status.success() {
        bail!("dnsmasq on {}: {}", bridge_name(n.vni), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// `vee_id`'s NICs left this host (its domain is gone): their
/// reservations go; a bridge no NIC uses any more goes with its DHCP
/// server and state.
pub async fn release_networks(vee_id: &str, nics: &[Nic]) {
    for n in nics {
        let dir = dhcp_dir(n.vni);
        let _ = tokio::fs::remove_file(dir.join("hosts").join(vee_id)).await;
        let br = bridge_name(n.vni);
        if unused(&br).await {
            remove_network(&br).await;
        }
    }
    if !nics.is_empty() && !any_bridge_left().await {
        let _ = nft("delete table inet vee_isolation\n").await;
    }
}

/// Whether bridge `br` has no port (no NIC on it).
async fn unused(br: &str) -> bool {
    matches!(ip(&["-o", "link", "show", "master", br]).await, Ok(ports) if ports.trim().is_empty())
}

/// Removes bridge `br` with its DHCP server and state.
async fn remove_network(br: &str) {
    let dir = Path::new(DHCP_ROOT).join(br);
    if let Ok(pid) = tokio::fs::read_to_string(dir.join("dnsmasq.pid")).await {
        let pid = pid.trim().to_string();
        let _ = tokio::process::Command::new("kill").arg(&pid).status().await;
        // It exits on SIGTERM; wait for it (at most 2 s), so that nothing
        // of the network outlives this call.
        for _ in 0..40 {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    let _ = tokio::fs::remove_dir_all(&dir).await;
    let _ = nft(&format!("delete element inet vee_isolation bridged {{ \"{br}\" . \"{br}\" }}\n")).await;
    if exists(br).await {
        if let Err(e) = ip(&["link", "del", "dev", br]).await {
            tracing::warn!(bridge = %br, error = %format!("{e:#}"), "cannot remove an unused bridge");
        }
    }
}

/// What a crash (of a VEEH, or of a test half-way) can leave on this
/// kernel: `vb*` bridges no NIC uses, with their DHCP servers and state,
/// state whose bridge is gone, and the isolation table with no bridge
/// left. Removed at VEEH start-up; returns the bridges swept. (A bridge
/// another VEEH of this kernel made an instant ago for a VEE it is about to
/// start has no port yet either: that start fails and is retried.)
pub async fn sweep_unused() -> Vec<String> {
    let mut swept = Vec::new();
    for br in vb_bridges().await.unwrap_or_default() {
        if unused(&br).await {
            remove_network(&br).await;
            swept.push(br);
        }
    }
    if let Ok(mut dirs) = tokio::fs::read_dir(DHCP_ROOT).await {
        while let Ok(Some(d)) = dirs.next_entry().await {
            let br = d.file_name().to_string_lossy().into_owned();
            if br.starts_with("vb") && !exists(&br).await {
                remove_network(&br).await;
                swept.push(br);
            }
        }
    }
    if !any_bridge_left().await {
        let _ = nft("delete table inet vee_isolation\n").await;
    }
    swept
}

/// The nftables table that keeps service networks apart (one per kernel,
/// for every `vb*` bridge):
/// - into the host, a VEE reaches only DHCP (udp 67) and the replies to
///   what the host sent it: not the host's other addresses or services;
/// - nothing is routed from one service network to another. Frames within
///   one network pass: the kernel hands bridged IPv4 to the forward hook
///   too (br_netfilter), with the bridge as both interfaces, so each
///   network's bridge is in the set `bridged` while it exists.
///
/// Each drop counts, so that a test sees a packet dropped, not lost.
pub const ISOLATION_RULES: &str = "table inet vee_isolation {
    set bridged {
        type ifname . ifname
        comment \"a network's own bridge, both ways: frames within the network\"
    }
    chain input {
        type filter hook input priority 0; policy accept;
        iifname \"vb*\" udp dport 67 accept
        iifname \"vb*\" ct state established,related accept
        iifname \"vb*\" counter drop comment \"a VEE reaches only DHCP on its host\"
    }
    chain forward {
        type filter hook forward priority 0; policy accept;
        iifname . oifname @bridged accept
        iifname \"vb*\" counter drop comment \"no path out of a service network\"
    }
}
";

/// Runs `nft -f -` with `script`.
async fn nft(script: &str) -> Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("run nft (Debian's nftables)")?;
    child.stdin.take().context("nft stdin")?.write_all(script.as_bytes()).await?;
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        bail!("nft: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Makes the isolation table unless it is there, and lets frames within
/// `bridge` pass.
async fn ensure_isolation(bridge: &str) -> Result<()> {
    let listed = tokio::process::Command::new("nft")
        .args(["list", "table", "inet", "vee_isolation"])
        .output()
        .await
        .context("run nft (Debian's nftables)")?;
    if !listed.status.success() {
        nft(ISOLATION_RULES).await?;
    }
    nft(&format!(
        "add element inet vee_isolation bridged {{ \"{bridge}\" . \"{bridge}\" }}\n"
    ))
    .await
}

/// The names of this kernel's `vb*` bridges.
async fn vb_bridges() -> Result<Vec<String>> {
    let list = ip(&["-o", "link", "show", "type", "bridge"]).await?;
    Ok(list
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .filter(|name| name.starts_with("vb"))
        .map(str::to_string)
        .collect())
}

/// Whether a `vb*` bridge is left (yes when `ip` cannot say).
async fn any_bridge_left() -> bool {
    vb_bridges().await.map_or(true, |b| !b.is_empty())
}

/// `aa:bb:cc:dd:ee:ff` in lower-case hex.
pub fn is_mac(s: &str) -> bool {
    s.len() == 17
        && s.split(':').count() == 6
        && s.split(':')
            .all(|b| b.len() == 2 && b.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_checked_and_bridges_named_by_vni() {
        assert!(is_mac("02:00:00:64:00:02"));
        for bad in [
            "02:00:00:64:00",
            "02:00:00:64:00:0g",
            "02-00-00-64-00-02",
            "02:00:00:64:00:02:",
            "02:00:00:64:00:0A",
        ] {
            assert!(!is_mac(bad), "{bad}");
        }
        assert_eq!(bridge_name(16_777_215), "vb16777215");
    }
}
