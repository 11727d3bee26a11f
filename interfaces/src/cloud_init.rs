//! What a VEE's guest is given at first boot, as cloud-init's NoCloud data
//! source reads it (the standard stock cloud images expect): the VEEM fills
//! [`vhi::CloudInit`] from the manifest (`user_data`,
//! `ssh_authorized_keys`) and the VEE's name; the VEEH writes it to a seed
//! disk (ISO 9660, volume label `cidata`: `meta-data` with `instance-id`,
//! `local-hostname` and `public-keys`, and `user-data` as given).

use crate::error::{Error, Result};
use crate::vhi;

/// Largest user data, in bytes (OpenStack's limit: 64 KiB).
pub const MAX_USER_DATA_BYTES: usize = 65_536;
/// Most SSH keys of one VEE.
pub const MAX_SSH_KEYS: usize = 64;
/// Longest SSH public key line, in bytes (an 16384-bit RSA key fits).
pub const MAX_SSH_KEY_BYTES: usize = 4096;
/// Key types OpenSSH's `authorized_keys` accepts.
const SSH_KEY_TYPES: &[&str] = &[
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

fn invalid(field: String, reason: impl Into<String>) -> Error {
    Error::InvalidManifest {
        field,
        reason: reason.into(),
    }
}

/// Checks user data and SSH keys under field path `prefix` (e.g.
/// `component[0]`): user data at most [`MAX_USER_DATA_BYTES`] with no NUL;
/// at most [`MAX_SSH_KEYS`] keys, each one line `TYPE BASE64 [COMMENT]` of a
/// type OpenSSH accepts. Errors: [`Error::InvalidManifest`] naming the field
/// (`component[0].ssh_authorized_keys[1]`) and the reason.
pub fn check(prefix: &str, user_data: Option<&str>, keys: &[String]) -> Result<()> {
    if let Some(u) = user_data {
        if u.len() > MAX_USER_DATA_BYTES {
            return Err(invalid(
                format!("{prefix}.user_data"),
                format!("{} bytes long; at most {MAX_USER_DATA_BYTES}", u.len()),
            ));
        }
        if u.contains('\0') {
            return Err(invalid(format!("{prefix}.user_data"), "contains a NUL character"));
        }
    }
    if keys.len() > MAX_SSH_KEYS {
        return Err(invalid(
            format!("{prefix}.ssh_authorized_keys"),
            format!("{} keys; at most {MAX_SSH_KEYS}", keys.len()),
        ));
    }
    for (i, k) in keys.iter().enumerate() {
        let field = || format!("{prefix}.ssh_authorized_keys[{i}]");
        if k.len() > MAX_SSH_KEY_BYTES {
            return Err(invalid(field(), format!("{} bytes long; at most {MAX_SSH_KEY_BYTES}", k.len())));
        }
        if k.chars().any(char::is_control) {
            return Err(invalid(field(), "must be one line with no control characters"));
        }
        let mut parts = k.split(' ');
        let (kind, body) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        if !SSH_KEY_TYPES.contains(&kind) {
            return Err(invalid(
                field(),
                format!("key type {kind:?} is not one of {}", SSH_KEY_TYPES.join(", ")),
            ));
        }
        if body.len() < 16 || !body.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b)) {
            return Err(invalid(
                field(),
                "must be `TYPE BASE64-KEY [COMMENT]`, as in an authorized_keys line",
            ));
        }
    }
    Ok(())
}

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
        return Err(invalid(format!("{prefix}.hostname"), format!("{h:?} is not a DNS label")));
    }
    check(prefix, (!c.user_data.is_empty()).then_some(&c.user_data), &c.ssh_authorized_keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBf0a7bYk5Yd0n9y5fQz1c6b3kKp7m5ZtQm1X2h3Y4Z5 alice@laptop";

    fn rejects(user_data: Option<&str>, keys: &[&str], field: &str, reason: &str) {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        match check("component[0]", user_data, &keys) {
            Err(Error::InvalidManifest { field: f, reason: r }) => {
                assert_eq!(f, field);
                assert!(r.contains(reason), "{r}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn user_data_and_keys_are_checked_naming_the_field() {
        check("component[0]", Some("#cloud-config\nruncmd: [ls]\n"), &[KEY.to_string()]).unwrap();
        let big = "x".repeat(MAX_USER_DATA_BYTES + 1);
        rejects(Some(&big), &[], "component[0].user_data", "at most 65536");
        rejects(Some("a\0b"), &[], "component[0].user_data", "NUL");
        rejects(
            None,
            &[KEY, "ssh-dss AAAAB3NzaC1kc3MAAACBAP"],
            "component[0].ssh_authorized_keys[1]",
            "not one of",
        );
        rejects(None, &["ssh-rsa not-base64!"], "component[0].ssh_authorized_keys[0]", "BASE64");
        rejects(
            None,
            &[&format!("{KEY}\nssh-rsa AAAA")],
            "component[0].ssh_authorized_keys[0]",
            "one line",
        );
    }

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
