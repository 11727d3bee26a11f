//! The nftables table that keeps service networks apart and VEEs off the
//! host (Debian's `nftables`; one table per kernel, for every `vb*`
//! bridge).

use anyhow::{bail, Context, Result};

/// The isolation table:
/// - into the host, a VEE reaches only DHCP (udp 67) and DNS (port 53) of
///   its network's server, and the replies to what the host sent it: not
///   the host's other addresses or services;
/// - nothing is routed from one service network to another. Frames within
///   one network pass: the kernel hands bridged IPv4 to the forward hook
///   too (br_netfilter), with the bridge as both interfaces, so each
///   network's bridge is in the set `bridged` while it exists;
/// - out of the site, only VEEs with an external address (set `outbound`,
///   see [`super::external`]) and the replies to connections let in; into
///   a service network from outside, only the declared ports of external
///   addresses (connections the `vee_external` table forwarded);
/// - a network's VXLAN frames come in only from the VTEPs its member
///   table names (set `vxlan_from`: local UDP port . VNI . remote VTEP,
///   kept by [`super::vxlan`]): a copy fenced or withdrawn at another
///   site, or a host the table no longer names, is cut off the overlay as
///   soon as the table says so, and no VTEP reaches another network's VNI.
///
/// Each drop counts, so that a test sees a packet dropped, not lost.
pub const ISOLATION_RULES: &str = "table inet vee_isolation {
    set bridged {
        type ifname . ifname
        comment \"a network's own bridge, both ways: frames within the network\"
    }
    set outbound {
        type ipv4_addr
        comment \"VEEs with an external address: they reach the outside\"
    }
    set vxlan_ports {
        type inet_service
        comment \"UDP ports this kernel's VXLAN interfaces listen on\"
    }
    set vxlan_from {
        typeof udp dport . @th,96,24 . ip saddr
        comment \"local UDP port . VNI . remote VTEP: who may send a network's frames here\"
    }
    chain input {
        type filter hook input priority 0; policy accept;
        udp dport @vxlan_ports udp dport . @th,96,24 . ip saddr != @vxlan_from counter drop comment \"VXLAN frames only from the VTEPs the network's table names\"
        iifname \"vb*\" udp dport 67 accept
        iifname \"vb*\" meta l4proto { tcp, udp } th dport 53 accept
        iifname \"vb*\" ct state established,related accept
        iifname \"vb*\" counter drop comment \"a VEE reaches only DHCP and DNS on its host\"
    }
    chain forward {
        type filter hook forward priority 0; policy accept;
        iifname . oifname @bridged accept
        iifname \"vb*\" oifname \"vb*\" counter drop comment \"no path from one service network to another\"
        iifname \"vb*\" ct state established,related accept
        iifname \"vb*\" ip saddr @outbound accept
        iifname \"vb*\" counter drop comment \"no path out of a service network but an external address\"
        oifname \"vb*\" ct status dnat accept
        oifname \"vb*\" ct state established,related accept
        oifname \"vb*\" counter drop comment \"no path into a service network but declared ports\"
    }
}
";

/// Runs `nft -f -` with `script`.
pub(super) async fn nft(script: &str) -> Result<()> {
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

/// Makes table `family name` from `rules` unless it is there.
pub(super) async fn ensure_table(family: &str, name: &str, rules: &str) -> Result<()> {
    let listed = tokio::process::Command::new("nft")
        .args(["list", "table", family, name])
        .output()
        .await
        .context("run nft (Debian's nftables)")?;
    if !listed.status.success() {
        nft(rules).await?;
    }
    Ok(())
}

/// Makes the isolation table unless it is there, and lets frames within
/// `bridge` pass.
pub(super) async fn admit(bridge: &str) -> Result<()> {
    ensure_table("inet", "vee_isolation", ISOLATION_RULES).await?;
    nft(&format!(
        "add element inet vee_isolation bridged {{ \"{bridge}\" . \"{bridge}\" }}\n"
    ))
    .await
}

/// `bridge` is going: its frames are no longer let through.
pub(super) async fn forget(bridge: &str) {
    let _ = nft(&format!(
        "delete element inet vee_isolation bridged {{ \"{bridge}\" . \"{bridge}\" }}\n"
    ))
    .await;
}

/// Removes the table (no service network is left on this kernel).
pub(super) async fn remove() {
    let _ = nft("delete table inet vee_isolation\n").await;
}
