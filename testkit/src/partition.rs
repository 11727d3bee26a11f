//! Network partitions of test runs: an nftables table of its own
//! (Debian's `nft`, which `scripts/setup-host` installs) that drops every
//! loopback TCP packet to or from some ports, for as long as the
//! [`Partition`] lives. A client whose way in to a server is cut off this
//! way sees what a partition shows: its connections hang, new ones get no
//! answer; the server and its other clients go on.

use std::io::Write;
use std::process::{Command, Stdio};

/// A partition under way (see the module doc); dropping it heals it.
pub struct Partition {
    table: String,
}

impl Partition {
    /// Cuts off TCP `ports` on this machine (both ways: to and from
    /// them), in table `inet <name>`. Errors: `nft` is missing or refuses
    /// the rules (its message).
    pub fn cut(name: &str, ports: &[u16]) -> Result<Self, String> {
        let set = ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", ");
        let rules = format!(
            "table inet {name} {{\n  chain out {{\n    type filter hook output priority 0; policy accept;\n    tcp dport {{ {set} }} drop\n    tcp sport {{ {set} }} drop\n  }}\n}}\n"
        );
        let mut nft = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("nft: {e}"))?;
        nft.stdin
            .take()
            .expect("piped")
            .write_all(rules.as_bytes())
            .map_err(|e| e.to_string())?;
        let out = nft.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("nft refused {rules:?}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(Partition { table: name.to_string() })
    }
}

/// Heals the partition: the table goes.
impl Drop for Partition {
    fn drop(&mut self) {
        let _ = Command::new("nft").args(["delete", "table", "inet", &self.table]).status();
    }
}
