//! What a VEE's guest may be given at first boot, as checked in a
//! manifest: cloud-init user data and SSH keys (cloud-init's NoCloud data
//! source reads them; `interfaces::cloud_init` checks the VHI's form).

use crate::error::{Error, Result};

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
}
