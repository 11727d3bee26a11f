//! This host's side of a VEE's service networks, made (Debian's `ip`,
//! `bridge`, `nft` and `dnsmasq`) before a VEE with a NIC on a network
//! starts, is restored or arrives, and removed once no VEE's interface is
//! on the network's bridge any more, so that nothing is left behind when a
//! network's last VEE leaves the host. Per network:
//! - a Linux bridge `vb<VNI>` with the network's MTU and gateway address;
//! - its VXLAN interface `vx<VNI>` joining the network's segment on the
//!   other hosts that carry it ([`vxlan`]);
//! - its DHCP and DNS server, answering from the network's member table
//!   ([`dhcp`]);
//! - its place in the isolation table ([`isolation`]);
//! - on an external network, each VEE's external address: declared ports
//!   in, the VEE out ([`external`]).
//!
//! A primary site's network stretched to this (peer) site
//! (`Nic.overlay_port` set) is a bridge `vs<port>-<VNI hex>` with its VXLAN
//! interface `vt<port>-<VNI hex>` on the framework agreement's port and
//! nothing else: no address (this site's own VEEs and host have no route
//! into it), no DHCP or DNS (the primary's answer over the overlay), no
//! external address (it stays at the primary, which forwards it over the
//! overlay).
//!
//! Hosts sharing one kernel (the lab's site A) share all of these, and
//! they go when the last NIC of any of them leaves.

pub mod dhcp;
pub mod external;
pub mod isolation;
pub mod probe;
pub mod vxlan;

use anyhow::{bail, Context, Result};
use interfaces::vhi::{NetworkHome, NetworkMember, NetworkUpdate, Nic, Vtep};
use ipnet::Ipv4Net;

pub use dhcp::dhcp_dir;
pub use isolation::ISOLATION_RULES;
pub use vxlan::vxlan_name;

/// The bridge of this site's network with VNI `vni` (at most 10 bytes: a
/// valid interface name).
pub fn bridge_name(vni: u32) -> String {
    format!("vb{vni}")
}

/// The bridge of a network on this host: this site's own (`overlay_port`
/// 0, [`bridge_name`]) or a primary site's stretched here through the
/// framework agreement's UDP port, `vs<port>-<VNI hex>` (at most 14 bytes:
/// a peer's VNI may be one of this site's own).
pub fn bridge_of(vni: u32, overlay_port: u32) -> String {
    if overlay_port == 0 {
        bridge_name(vni)
    } else {
        format!("vs{overlay_port}-{vni:x}")
    }
}

/// Runs `tool ARGS`: its stdout, or an error with its stderr.
async fn run(tool: &str, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(tool)
        .args(args)
        .output()
        .await
        .with_context(|| format!("run {tool} (iproute2)"))?;
    if !out.status.success() {
        bail!("{tool} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `ip ARGS`.
async fn ip(args: &[&str]) -> Result<String> {
    run("ip", args).await
}

/// Held while this kernel's service networks change: VEEHs sharing one
/// kernel (the lab's site A) would otherwise make one network's bridge,
/// VXLAN interface or DHCP/DNS server twice at once (an exclusive
/// `flock` on `/run/vee-net/.lock`).
async fn kernel_lock() -> Result<nix::fcntl::Flock<std::fs::File>> {
    tokio::task::spawn_blocking(|| {
        std::fs::create_dir_all(dhcp::DHCP_ROOT)?;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(std::path::Path::new(dhcp::DHCP_ROOT).join(".lock"))?;
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| anyhow::anyhow!("lock {}/.lock: {e}", dhcp::DHCP_ROOT))
    })
    .await?
}

async fn exists(dev: &str) -> bool {
    ip(&["link", "show", "dev", dev]).await.is_ok()
}

/// Makes `nics`' networks ready on this host before their VEE starts, is
/// restored or arrives, `vtep` being this host's VTEP: each network's
/// bridge exists, is up with the NIC's MTU and holds the gateway address;
/// its VXLAN interface is on it with the forwarding entries of the
/// members running elsewhere; its DHCP and DNS server runs with the
/// network's member table (the NIC's own reservation included).
pub async fn ensure_networks(vtep: &str, nics: &[Nic]) -> Result<()> {
    let _one_at_a_time = kernel_lock().await?;
    for n in nics {
        let net: Ipv4Net = n.address.parse().with_context(|| format!("NIC address {:?}", n.address))?;
        let stretched = n.overlay_port != 0;
        let home = (!stretched).then(|| NetworkHome {
            subnet: net.trunc().to_string(),
            gateway: n.gateway.clone(),
            mtu: n.mtu,
            external: !n.external_address.is_empty(),
        });
        ensure_network(vtep, (n.vni, n.overlay_port), n.mtu, home.as_ref()).await?;
        let mut members = n.members.clone();
        if !members.iter().any(|m| m.mac == n.mac) {
            members.push(NetworkMember {
                mac: n.mac.clone(),
                address: net.addr().to_string(),
                ..Default::default()
            });
        }
        apply_members(vtep, n.vni, n.overlay_port, &n.domain, &members, &n.stretched_to).await?;
        if let Some(home) = &home {
            serve(n.vni, home, &n.domain).await?;
            external::ensure(n).await?;
        }
    }
    Ok(())
}

/// Starts the DHCP and DNS server of this site's network `vni` (once its
/// member table is written) unless it runs.
async fn serve(vni: u32, home: &NetworkHome, domain: &str) -> Result<()> {
    let subnet: Ipv4Net = home.subnet.parse().with_context(|| format!("subnet {:?}", home.subnet))?;
    dhcp::ensure_server(vni, &subnet, &home.gateway, home.external, home.mtu, domain).await
}

/// Network `vni` on UDP `overlay_port` on this host: the bridge (up, with
/// `mtu`), its place in the isolation table, its VXLAN interface; with
/// `home` (this site's own network), also the gateway address.
async fn ensure_network(vtep: &str, (vni, overlay_port): (u32, u32), mtu: u32, home: Option<&NetworkHome>) -> Result<()> {
    let br = bridge_of(vni, overlay_port);
    if !exists(&br).await {
        // Another VEEH on this kernel may make it at the same moment.
        if let Err(e) = ip(&["link", "add", "name", &br, "type", "bridge"]).await {
            if !exists(&br).await {
                return Err(e);
            }
        }
    }
    ip(&["link", "set", "dev", &br, "mtu", &mtu.to_string(), "up"]).await?;
    if let Some(h) = home {
        let subnet: Ipv4Net = h.subnet.parse().with_context(|| format!("subnet {:?}", h.subnet))?;
        let gateway: std::net::Ipv4Addr = h.gateway.parse().with_context(|| format!("gateway {:?}", h.gateway))?;
        ip(&["addr", "replace", &format!("{gateway}/{}", subnet.prefix_len()), "dev", &br]).await?;
    }
    isolation::admit(&br).await?;
    vxlan::ensure(&vxlan_of(&br), vni, overlay_port, vtep, mtu, &br).await
}

/// A network's new member table (VHI `UpdateNetwork`): DHCP, DNS and
/// VXLAN forwarding follow it. Nothing happens on a host that does not
/// carry the network (no bridge).
pub async fn update_network(vtep: &str, u: &NetworkUpdate) -> Result<()> {
    if u.vni == 0 || u.vni >= 1 << 24 {
        return Err(crate::error::HostError::field("vni", format!("{} is not a 24-bit VNI", u.vni)).into());
    }
    check_members("update", &u.domain, &u.members)?;
    check_overlay("update", u.overlay_port, &u.stretched_to)?;
    let _one_at_a_time = kernel_lock().await?;
    let br = bridge_of(u.vni, u.overlay_port);
    let marker = dhcp::dhcp_dir(u.vni).join(ANCHORED);
    match &u.anchor {
        Some(home) if u.overlay_port == 0 => {
            ensure_network(vtep, (u.vni, 0), home.mtu, Some(home)).await?;
            apply_members(vtep, u.vni, 0, &u.domain, &u.members, &u.stretched_to).await?;
            serve(u.vni, home, &u.domain).await?;
            std::fs::write(&marker, b"")?;
            return Ok(());
        }
        Some(_) => {
            return Err(crate::error::HostError::field("update.anchor", "a network stretched here has its home at its primary site").into())
        }
        None if marker.exists() => {
            let _ = std::fs::remove_file(&marker);
            if unused(&br).await {
                remove_network(&br).await;
                return Ok(());
            }
        }
        None => {}
    }
    if !exists(&br).await {
        return Ok(());
    }
    apply_members(vtep, u.vni, u.overlay_port, &u.domain, &u.members, &u.stretched_to).await
}

/// In a network's state directory: the host keeps the network's home part
/// for members abroad (`NetworkUpdate.anchor`), with or without a NIC here.
const ANCHORED: &str = "anchored";

/// A network's member table on this host: the VXLAN forwarding entries;
/// on this site's own network also the DHCP reservations and DNS names,
/// and the external addresses of members running at peer sites.
async fn apply_members(
    vtep: &str,
    vni: u32,
    overlay_port: u32,
    domain: &str,
    members: &[NetworkMember],
    stretched_to: &[Vtep],
) -> Result<()> {
    if overlay_port == 0 {
        dhcp::write_members(vni, domain, members).await?;
        external::forward_abroad(members).await?;
    }
    vxlan::set_forwarding(
        &vxlan_of(&bridge_of(vni, overlay_port)),
        (vni, overlay_port),
        vtep,
        members,
        stretched_to,
    )
    .await
}

/// `nics` left this host (their VEE's domain is gone): a network whose
/// bridge no VEE uses any more goes with its VXLAN interface, DHCP and DNS
/// server and state.
pub async fn release_networks(nics: &[Nic]) {
    let _one_at_a_time = kernel_lock().await;
    for n in nics {
        if n.overlay_port == 0 {
            external::release(n).await;
        }
        let br = bridge_of(n.vni, n.overlay_port);
        if unused(&br).await {
            remove_network(&br).await;
        }
    }
    if !nics.is_empty() && !any_bridge_left().await {
        isolation::remove().await;
        external::remove().await;
    }
}

/// The VXLAN interface on bridge `br` (`vb<VNI>` -> `vx<VNI>`, a
/// stretched network's `vs<port>-<VNI hex>` -> `vt<port>-<VNI hex>`).
fn vxlan_of(br: &str) -> String {
    match br.strip_prefix("vs") {
        Some(rest) => format!("vt{rest}"),
        None => format!("vx{}", br.trim_start_matches("vb")),
    }
}

/// Whether bridge `br` has no port but its VXLAN interface (no NIC on it)
/// and is no anchor for members abroad.
async fn unused(br: &str) -> bool {
    if let Some(vni) = br.strip_prefix("vb").and_then(|v| v.parse().ok()) {
        if dhcp::dhcp_dir(vni).join(ANCHORED).exists() {
            return false;
        }
    }
    let vx = vxlan_of(br);
    match ip(&["-o", "link", "show", "master", br]).await {
        Ok(ports) => ports
            .lines()
            .all(|l| l.split(": ").nth(1).is_some_and(|p| p.split('@').next() == Some(vx.as_str()))),
        Err(_) => false,
    }
}

/// Removes bridge `br` with its VXLAN interface, DHCP and DNS server and
/// state.
async fn remove_network(br: &str) {
    dhcp::remove(br).await;
    isolation::forget(br).await;
    let vx = vxlan_of(br);
    for dev in [vx.as_str(), br] {
        if exists(dev).await {
            if let Err(e) = ip(&["link", "del", "dev", dev]).await {
                tracing::warn!(dev, error = %format!("{e:#}"), "cannot remove an unused network interface");
            }
        }
    }
}

/// What a crash (of a VEEH, or of a test half-way) can leave on this
/// kernel: `vb*` bridges no NIC uses, with their VXLAN interfaces, DHCP
/// servers and state, state whose bridge is gone, and the isolation table
/// with no bridge left. Removed at VEEH start-up; returns the bridges
/// swept. (A bridge another VEEH of this kernel made an instant ago for a
/// VEE it is about to start has no NIC yet either: that start fails and is
/// retried.)
pub async fn sweep_unused() -> Vec<String> {
    let _one_at_a_time = kernel_lock().await;
    let mut swept = Vec::new();
    for br in vb_bridges().await.unwrap_or_default() {
        if unused(&br).await {
            remove_network(&br).await;
            swept.push(br);
        }
    }
    for br in dhcp::with_state().await {
        if !exists(&br).await {
            remove_network(&br).await;
            swept.push(br);
        }
    }
    if !any_bridge_left().await {
        isolation::remove().await;
        external::remove().await;
    }
    swept
}

/// The names of this kernel's service network bridges (`vb*`, and `vs*`
/// of networks stretched here).
async fn vb_bridges() -> Result<Vec<String>> {
    let list = ip(&["-o", "link", "show", "type", "bridge"]).await?;
    Ok(list
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .filter(|name| name.starts_with("vb") || name.starts_with("vs"))
        .map(str::to_string)
        .collect())
}

/// Whether a `vb*` bridge is left (yes when `ip` cannot say).
async fn any_bridge_left() -> bool {
    vb_bridges().await.map_or(true, |b| !b.is_empty())
}

/// Checks a member table and domain from the VEEM before any of it reaches
/// a command line or dnsmasq's files: MACs, IPv4 addresses and VTEPs,
/// names that are DNS labels (a-z, 0-9, '-'), a domain of such labels.
/// Errors name the field (`FIELD.members[i].name`).
pub fn check_members(field: &str, domain: &str, members: &[NetworkMember]) -> Result<(), crate::error::HostError> {
    use crate::error::HostError;
    let label = |s: &str| !s.is_empty() && s.len() <= 63 && s.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    if !domain.is_empty() && !domain.split('.').all(label) {
        return Err(HostError::field(
            format!("{field}.domain"),
            format!("{domain:?} is not a DNS domain of a-z, 0-9, '-'"),
        ));
    }
    for (i, m) in members.iter().enumerate() {
        let f = |name: &str| format!("{field}.members[{i}].{name}");
        if !is_mac(&m.mac) {
            return Err(HostError::field(
                f("mac"),
                format!("{:?} is not a MAC like 02:00:00:64:00:02", m.mac),
            ));
        }
        if m.address.parse::<std::net::Ipv4Addr>().is_err() {
            return Err(HostError::field(f("address"), format!("{:?} is not an IPv4 address", m.address)));
        }
        if !m.vtep.is_empty() && m.vtep.parse::<std::net::Ipv4Addr>().is_err() {
            return Err(HostError::field(f("vtep"), format!("{:?} is not an IPv4 address", m.vtep)));
        }
        if m.vtep_port > u32::from(u16::MAX) {
            return Err(HostError::field(f("vtep_port"), format!("{} is not a UDP port", m.vtep_port)));
        }
        if !m.external_address.is_empty() && m.external_address.parse::<std::net::Ipv4Addr>().is_err() {
            return Err(HostError::field(
                f("external_address"),
                format!("{:?} is not an IPv4 address", m.external_address),
            ));
        }
        if let Some(p) = m.ports.iter().find(|p| **p == 0 || **p > u32::from(u16::MAX)) {
            return Err(HostError::field(f("ports"), format!("{p} is not a TCP port")));
        }
        if !m.name.is_empty() && !label(&m.name) {
            return Err(HostError::field(
                f("name"),
                format!("{:?} is not a DNS label of a-z, 0-9, '-'", m.name),
            ));
        }
    }
    Ok(())
}

/// Checks the overlay fields of a NIC or network update from the VEEM: the
/// agreement's UDP port and the peer VTEPs (addresses reach `bridge`'s
/// command line). Errors name the field (`FIELD.stretched_to[i].address`).
pub fn check_overlay(field: &str, overlay_port: u32, stretched_to: &[Vtep]) -> Result<(), crate::error::HostError> {
    use crate::error::HostError;
    if overlay_port > u32::from(u16::MAX) {
        return Err(HostError::field(
            format!("{field}.overlay_port"),
            format!("{overlay_port} is not a UDP port"),
        ));
    }
    for (i, v) in stretched_to.iter().enumerate() {
        if v.address.parse::<std::net::Ipv4Addr>().is_err() {
            return Err(HostError::field(
                format!("{field}.stretched_to[{i}].address"),
                format!("{:?} is not an IPv4 address", v.address),
            ));
        }
        if v.port > u32::from(u16::MAX) {
            return Err(HostError::field(
                format!("{field}.stretched_to[{i}].port"),
                format!("{} is not a UDP port", v.port),
            ));
        }
    }
    Ok(())
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
        assert_eq!(vxlan_name(16_777_215), "vx16777215");
    }

    #[test]
    fn member_tables_that_could_inject_into_dnsmasq_files_are_refused() {
        let ok = NetworkMember {
            name: "web-0".into(),
            mac: "02:00:00:64:00:02".into(),
            address: "10.240.0.2".into(),
            vtep: "10.77.0.1".into(),
            ..Default::default()
        };
        assert!(check_members("nics[0]", "shop.internal", std::slice::from_ref(&ok)).is_ok());
        for (bad, field) in [
            (
                NetworkMember {
                    name: "web-0\n10.0.0.9 evil".into(),
                    ..ok.clone()
                },
                "nics[0].members[0].name",
            ),
            (
                NetworkMember {
                    name: "Web_0".into(),
                    ..ok.clone()
                },
                "nics[0].members[0].name",
            ),
            (
                NetworkMember {
                    mac: "02:00:00:64:00:02,x".into(),
                    ..ok.clone()
                },
                "nics[0].members[0].mac",
            ),
            (
                NetworkMember {
                    address: "10.240.0.2,set".into(),
                    ..ok.clone()
                },
                "nics[0].members[0].address",
            ),
            (
                NetworkMember {
                    vtep: "host-a".into(),
                    ..ok.clone()
                },
                "nics[0].members[0].vtep",
            ),
        ] {
            let e = check_members("nics[0]", "shop.internal", &[bad]).unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
        let e = check_members("nics[0]", "shop.internal/ --x", &[ok]).unwrap_err().to_string();
        assert!(e.contains("nics[0].domain"), "{e}");
    }
}
