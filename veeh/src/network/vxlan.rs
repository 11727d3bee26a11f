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
use interfaces::vhi::NetworkMember;

use super::ip;

/// The VXLAN interface of network `vni` (at most 10 bytes).
pub fn vxlan_name(vni: u32) -> String {
    format!("vx{vni}")
}

/// The destination UDP port (IANA's VXLAN port).
pub const VXLAN_PORT: u16 = 4789;

const FLOOD: &str = "00:00:00:00:00:00";

/// Makes `vx<VNI>` unless it is there: local address `vtep`, the
/// network's MTU, a port of `bridge`, up.
pub(super) async fn ensure(vni: u32, vtep: &str, mtu: u32, bridge: &str) -> Result<()> {
    let vx = vxlan_name(vni);
    if ip(&["link", "show", "dev", &vx]).await.is_err() {
        let (id, port) = (vni.to_string(), VXLAN_PORT.to_string());
        let add = [
            "link",
            "add",
            &vx,
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
            if ip(&["link", "show", "dev", &vx]).await.is_err() {
                return Err(e);
            }
        }
    }
    ip(&["link", "set", "dev", &vx, "mtu", &mtu.to_string(), "master", bridge, "up"]).await?;
    Ok(())
}

/// Sets `vx<VNI>`'s forwarding entries to what `members` say (entries for
/// VTEPs and MACs no longer named go). Members behind `own_vtep` and not
/// running (no VTEP) need none.
pub(super) async fn set_forwarding(vni: u32, own_vtep: &str, members: &[NetworkMember]) -> Result<()> {
    let vx = vxlan_name(vni);
    let remote: Vec<&NetworkMember> = members.iter().filter(|m| !m.vtep.is_empty() && m.vtep != own_vtep).collect();
    let want: BTreeSet<(String, String)> = remote
        .iter()
        .map(|m| (m.mac.clone(), m.vtep.clone()))
        .chain(remote.iter().map(|m| (FLOOD.to_string(), m.vtep.clone())))
        .collect();
    let have = entries(&vx).await?;
    for (mac, dst) in have.difference(&want) {
        let _ = bridge(&["fdb", "del", mac, "dev", &vx, "dst", dst]).await;
    }
    for (mac, dst) in want.difference(&have) {
        // The flood entry lists every VTEP (append); a MAC lives behind one.
        let verb = if mac == FLOOD { "append" } else { "replace" };
        bridge(&["fdb", verb, mac, "dev", &vx, "dst", dst]).await?;
    }
    Ok(())
}

/// The forwarding entries of `vx` with a remote destination: (MAC, VTEP).
async fn entries(vx: &str) -> Result<BTreeSet<(String, String)>> {
    #[derive(serde::Deserialize)]
    struct Entry {
        mac: String,
        #[serde(default)]
        dst: Option<String>,
    }
    let out = bridge(&["-j", "fdb", "show", "dev", vx]).await?;
    let list: Vec<Entry> = serde_json::from_str(out.trim()).unwrap_or_default();
    Ok(list.into_iter().filter_map(|e| Some((e.mac, e.dst?))).collect())
}

/// Runs `bridge ARGS` (iproute2): its stdout, or an error with its stderr.
async fn bridge(args: &[&str]) -> Result<String> {
    super::run("bridge", args).await
}
