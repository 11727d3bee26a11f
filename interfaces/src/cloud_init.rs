//! What a VEE's guest is given at first boot, as cloud-init's NoCloud data
//! source reads it (the standard stock cloud images expect): the VEEM fills
//! [`vhi::CloudInit`] from the manifest (`user_data`,
//! `ssh_authorized_keys`) and the VEE's name; the VEEH writes it to a seed
//! disk (ISO 9660, volume label `cidata`: `meta-data` with `instance-id`,
//! `local-hostname` and `public-keys`, and `user-data` as given).

use crate::vhi;
pub use vee_manifest::cloud_init::{check, MAX_SSH_KEYS, MAX_SSH_KEY_BYTES, MAX_USER_DATA_BYTES};
use vee_manifest::{Error, Result};

/// Checks a VHI `CloudInit` as it arrives from a VEEM or a peer: the host
/// name is a DNS label (1-63 of `[a-z0-9-]`, not starting or ending with
/// `-`), and [`check`] on the rest, under field path `prefix`.
pub fn check_wire(prefix: &str, c: &vhi::CloudInit) -> Result<()> {
    let h = &c.hostname;
    let label = !h.is_empty()
        && h.len() <= 63
        && h.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !h.starts_with('-')
        && !h.ends_with('-');
    if !label {
        return Err(Error::InvalidManifest {
            field: format!("{prefix}.hostname"),
            reason: format!("{h:?} is not a DNS label"),
        });
    }
    check(prefix, (!c.user_data.is_empty()).then_some(&c.user_data), &c.ssh_authorized_keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBf0a7bYk5Yd0n9y5fQz1c6b3kKp7m5ZtQm1X2h3Y4Z5 alice@laptop";

    #[test]
    fn a_wire_host_name_must_be_a_dns_label() {
        let mut c = vhi::CloudInit {
            hostname: "web-0".into(),
            user_data: String::new(),
            ssh_authorized_keys: vec![KEY.into()],
        };
        check_wire("cloud_init", &c).unwrap();
        for bad in ["", "Web-0", "-web", "a.b", &"a".repeat(64)] {
            c.hostname = bad.into();
            assert!(check_wire("cloud_init", &c).is_err(), "{bad:?}");
        }
    }
}
