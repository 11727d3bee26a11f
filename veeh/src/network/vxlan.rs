//! A service network's segment across hosts: a kernel VXLAN interface
//! `vx<VNI>` on the network's bridge, with this host's VTEP as its local
//! address (UDP port 4789) and no learning: its forwarding entries come
//! from the VEEM only (static FDB, head-end replication, no multicast):
//! - one all-zero entry per other VTEP carrying the network, for
//!   broadcast, unknown unicast and multicast (ARP, DHCP);
//! - one entry per member VEE running behind another VTEP, its MAC -> that
//!   VTEP.
//!
//! Hosts sharing one kernel (the lab's site A) share the interface, and
//! members behind this kernel's own VTEP need no entry: the bridge reaches
//! them directly.

use std::collections::BTreeSet;

use anyhow::Result;
use interfaces::vhi::{NetworkMember, Vtep};

use super::ip;

/// The VXLAN interface of this site's network `vni` (at most 10 bytes).
pub fn vxlan_name(vni: u32) -> String {
    format!("vx{vni}")
}

/// IANA's VXLAN port: this site's own networks, and the port of a member
/// VTEP whose port is 0.
pub const VXLAN_PORT: u16 = 4789;

const FLOOD: &str = "00:00:00:00:00:00";

/// The UDP port `port` means (0: [`VXLAN_PORT`]).
fn udp_port(port: u32) -> u32 {
    if port == 0 {
        u32::from(VXLAN_PORT)
    } else {
        port
    }
}

/// Makes VXLAN interface `vx` unless it is there: VNI `vni`, local address
/// `vtep`, listening on UDP `port` (0: 4789), the network's MTU, a port of
/// `bridge`, up.
pub(super) async fn ensure(vx: &str, vni: u32, port: u32, vtep: &str, mtu: u32, bridge: &str) -> Result<()> {
    if ip(&["link", "show", "dev", vx]).await.is_err() {
        let (id, port) = (vni.to_string(), udp_port(port).to_string());
        let add = [
            "link",
            "add",
            vx,
            "type",
            "vxlan",
            "id",
            &id,
            "local",
            vtep,
            "dstport",
            &port,
            "nolearning",
        ];
        if let Err(e) = ip(&add).await {
            // Another VEEH on this kernel may make it at the same moment.
            if ip(&["link", "show", "dev", vx]).await.is_err() {
                return Err(e);
            }
        }
    }
    ip(&["link", "set", "dev", vx, "mtu", &mtu.to_string(), "master", bridge, "up"]).await?;
    super::isolation::nft(&format!("add element inet vee_isolation vxlan_ports {{ {} }}\n", udp_port(port))).await
}

/// One forwarding entry: (MAC, VTEP address, UDP port).
type Entry = (String, String, u32);

/// Sets `vx`'s forwarding entries to what `members` and `stretched_to`
/// say (entries no longer named go): a flood entry per VTEP other than
/// `own_vtep` (the members', and the peer sites' the network is stretched
/// to), and per member behind such a VTEP its MAC -> that VTEP. Members
/// behind `own_vtep` and not running (no VTEP) need none. Frames of
/// network `vni` on `vx`'s UDP `port` (0: 4789) come in from those VTEPs
/// only (the isolation table's `vxlan_from`).
pub(super) async fn set_forwarding(
    vx: &str,
    (vni, port): (u32, u32),
    own_vtep: &str,
    members: &[NetworkMember],
    stretched_to: &[Vtep],
) -> Result<()> {
    let remote: Vec<&NetworkMember> = members.iter().filter(|m| !m.vtep.is_empty() && m.vtep != own_vtep).collect();
    let floods = remote.iter().map(|m| (m.vtep.clone(), m.vtep_port)).chain(
        stretched_to
            .iter()
            .filter(|v| v.address != own_vtep)
            .map(|v| (v.address.clone(), v.port)),
    );
    let want: BTreeSet<Entry> = remote
        .iter()
        .map(|m| (m.mac.clone(), m.vtep.clone(), udp_port(m.vtep_port)))
        .chain(floods.map(|(dst, port)| (FLOOD.to_string(), dst, udp_port(port))))
        .collect();
    let have = entries(vx).await?;
    for (mac, dst, port) in have.difference(&want) {
        let _ = bridge(&["fdb", "del", mac, "dev", vx, "dst", dst, "port", &port.to_string()]).await;
    }
    for (mac, dst, port) in want.difference(&have) {
        // The flood entry lists every VTEP (append); a MAC lives behind one.
        let verb = if mac == FLOOD { "append" } else { "replace" };
        bridge(&["fdb", verb, mac, "dev", vx, "dst", dst, "port", &port.to_string()]).await?;
    }
    let senders: BTreeSet<String> = want.iter().filter(|(m, _, _)| m == FLOOD).map(|(_, d, _)| d.clone()).collect();
    set_senders(udp_port(port), vni, &senders).await
}

/// The isolation table's `vxlan_from` for network `vni` on local UDP
/// `port`: exactly `vteps`.
async fn set_senders(port: u32, vni: u32, vteps: &BTreeSet<String>) -> Result<()> {
    let have = senders(port, vni).await?;
    let element = |v: &String| format!("{port} . {vni} . {v}");
    let mut script = String::new();
    for gone in have.difference(vteps) {
        script += &format!("delete element inet vee_isolation vxlan_from {{ {} }}\n", element(gone));
    }
    for new in vteps.difference(&have) {
        script += &format!("add element inet vee_isolation vxlan_from {{ {} }}\n", element(new));
    }
    if script.is_empty() {
        return Ok(());
    }
    super::isolation::nft(&script).await
}

/// The remote VTEPs `vxlan_from` lets send network `vni`'s frames to
/// local UDP `port`.
async fn senders(port: u32, vni: u32) -> Result<BTreeSet<String>> {
    let out = super::run("nft", &["-j", "list", "set", "inet", "vee_isolation", "vxlan_from"]).await?;
    let v: serde_json::Value = serde_json::from_str(out.trim())?;
    let elems = v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["set"]["elem"].as_array())
        .flatten();
    let mut found = BTreeSet::new();
    for e in elems {
        let concat = e["concat"].as_array().or_else(|| e["elem"]["val"]["concat"].as_array());
        if let Some([p, n, addr]) = concat.map(Vec::as_slice) {
            if p.as_u64() == Some(u64::from(port)) && n.as_u64() == Some(u64::from(vni)) {
                if let Some(a) = addr.as_str() {
                    found.insert(a.to_string());
                }
            }
        }
    }
    Ok(found)
}

/// The forwarding entries of `vx` with a remote destination (an entry
/// made without a port has the interface's own).
async fn entries(vx: &str) -> Result<BTreeSet<Entry>> {
    #[derive(serde::Deserialize)]
    struct FdbEntry {
        mac: String,
        #[serde(default)]
        dst: Option<String>,
        #[serde(default)]
        port: Option<u32>,
    }
    let own_port = dstport(vx).await.unwrap_or(u32::from(VXLAN_PORT));
    let out = bridge(&["-j", "fdb", "show", "dev", vx]).await?;
    let list: Vec<FdbEntry> = serde_json::from_str(out.trim()).unwrap_or_default();
    Ok(list
        .into_iter()
        .filter_map(|e| Some((e.mac, e.dst?, e.port.unwrap_or(own_port))))
        .collect())
}

/// The UDP port VXLAN interface `vx` listens on.
async fn dstport(vx: &str) -> Option<u32> {
    let out = ip(&["-d", "-j", "link", "show", "dev", vx]).await.ok()?;
    let v: serde_json::Value = serde_json::from_str(out.trim()).ok()?;
    v[0]["linkinfo"]["info_data"]["port"].as_u64().map(|p| p as u32)
}

/// Runs `bridge ARGS` (iproute2): its stdout, or an error with its stderr.
async fn bridge(args: &[&str]) -> Result<String> {
    super::run("bridge", args).await
}
