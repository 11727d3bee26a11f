//! External networks on this kernel: each VEE interface on an external
//! network has an external address (from the site's external pool) that
//! the site routes to its hosts. Here, in the nftables table `ip
//! vee_external`:
//! - the declared TCP ports of the external address are forwarded to the
//!   VEE's internal address (DNAT, map `forwards`), and nothing else;
//! - the VEE reaches the outside with its external address as source
//!   (SNAT, map `sources`); the isolation table lets out only the VEEs in
//!   set `outbound` (its `forward` chain).
//!
//! Hosts sharing one kernel share the table; a VEE's entries go when its
//! last tap leaves the kernel, not when one VEEH lets it go (after an
//! in-site migration in the lab both hosts are this kernel).

use anyhow::{Context, Result};
use interfaces::vhi::{NetworkMember, Nic};

use super::isolation::nft;

/// The table (made with the first external interface on this kernel).
pub const EXTERNAL_RULES: &str = "table ip vee_external {
    map forwards {
        type ipv4_addr . inet_service : ipv4_addr
        comment \"external address . declared TCP port : the VEE's internal address\"
    }
    map sources {
        type ipv4_addr : ipv4_addr
        comment \"a VEE's internal address : its external address\"
    }
    chain prerouting {
        type nat hook prerouting priority dstnat; policy accept;
        meta l4proto tcp dnat to ip daddr . tcp dport map @forwards
    }
    chain postrouting {
        type nat hook postrouting priority srcnat; policy accept;
        iifname \"vb*\" oifname != \"vb*\" snat to ip saddr map @sources
    }
}
";

/// The internal and external addresses of `n` (None: not external).
fn addresses(n: &Nic) -> Option<(String, String)> {
    if n.external_address.is_empty() {
        return None;
    }
    let internal = n.address.split('/').next()?.to_string();
    Some((internal, n.external_address.clone()))
}

/// Forwards `n`'s declared ports and lets it out through its external
/// address (nothing for an internal network's NIC).
pub(super) async fn ensure(n: &Nic) -> Result<()> {
    let Some((internal, external)) = addresses(n) else {
        return Ok(());
    };
    forward(&internal, &external, &n.ports).await
}

/// The external addresses of `members` that run at peer sites (the
/// primary site's table says so by giving them): they stay here and
/// forward to the member's internal address, which this kernel reaches
/// over the network's bridge and the overlay (like RESERVOIR's virtual
/// application network: the outside never sees the move).
pub(super) async fn forward_abroad(members: &[NetworkMember]) -> Result<()> {
    for m in members.iter().filter(|m| !m.external_address.is_empty()) {
        forward(&m.address, &m.external_address, &m.ports).await?;
    }
    Ok(())
}

/// `external . port : internal` for each declared port, `internal`'s
/// traffic out as `external`. Turns on IPv4 forwarding, as any router.
async fn forward(internal: &str, external: &str, ports: &[u32]) -> Result<()> {
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").context("turn on IPv4 forwarding")?;
    super::isolation::ensure_table("ip", "vee_external", EXTERNAL_RULES).await?;
    let forwards: Vec<String> = ports.iter().map(|p| format!("{external} . {p} : {internal}")).collect();
    nft(&format!(
        "add element ip vee_external forwards {{ {} }}\n\
         add element ip vee_external sources {{ {internal} : {external} }}\n\
         add element inet vee_isolation outbound {{ {internal} }}\n",
        forwards.join(", ")
    ))
    .await
}

/// Removes `n`'s forwarding, unless a tap with its MAC is still on this
/// kernel (the VEE moved to another host of it).
pub(super) async fn release(n: &Nic) {
    let Some((internal, external)) = addresses(n) else {
        return;
    };
    if tap_here(&n.mac).await {
        return;
    }
    for p in &n.ports {
        let _ = nft(&format!("delete element ip vee_external forwards {{ {external} . {p} }}\n")).await;
    }
    let _ = nft(&format!("delete element ip vee_external sources {{ {internal} }}\n")).await;
    let _ = nft(&format!("delete element inet vee_isolation outbound {{ {internal} }}\n")).await;
}

/// Whether a tap of the VEE with MAC `mac` is on this kernel (libvirt
/// gives a tap the guest's MAC with `fe` as its first byte).
async fn tap_here(mac: &str) -> bool {
    let tap = format!("fe{}", &mac[2..]);
    super::ip(&["-o", "link", "show"])
        .await
        .is_ok_and(|l| l.contains(&format!("link/ether {tap} ")))
}

/// Removes the table (no service network is left on this kernel).
pub(super) async fn remove() {
    let _ = nft("delete table ip vee_external\n").await;
}
