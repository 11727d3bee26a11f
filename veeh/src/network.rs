//! This host's side of a VEE's service networks: a Linux bridge per
//! network, `vb<VNI>` with the network's MTU, made (Debian's `ip`) before a
//! VEE with a NIC on it starts, is restored or arrives, and removed once no
//! interface is attached to it any more, so that nothing is left behind
//! when a network's last VEE leaves the host. Hosts sharing one kernel
//! (the lab's site A) share the bridge; it goes when the last NIC of any of
//! them leaves.

use anyhow::{bail, Context, Result};
use interfaces::vhi::Nic;

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

/// Makes sure the bridge of every NIC's network exists, is up and has the
/// NIC's MTU.
pub async fn ensure_bridges(nics: &[Nic]) -> Result<()> {
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
    }
    Ok(())
}

/// Removes the bridges of `nics` that no interface is attached to.
pub async fn release_bridges(nics: &[Nic]) {
    for n in nics {
        let br = bridge_name(n.vni);
        match ip(&["-o", "link", "show", "master", &br]).await {
            Ok(ports) if ports.trim().is_empty() => {
                if let Err(e) = ip(&["link", "del", "dev", &br]).await {
                    tracing::warn!(bridge = %br, error = %format!("{e:#}"), "cannot remove an unused bridge");
                }
            }
            _ => {}
        }
    }
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
