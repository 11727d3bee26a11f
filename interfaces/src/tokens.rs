//! Bearer tokens as daemons configure them: in clear (`token`) or, so that
//! the configuration at rest does not hold them, as their SHA-256
//! (`token_sha256`, 64 hex digits). A presented token is hashed and compared
//! with every known digest in constant time (`subtle`), so neither the
//! answer's time nor an early exit tells how close a guess came.

use subtle::ConstantTimeEq;

/// Shortest token accepted in clear, in bytes.
pub const MIN_TOKEN_LEN: usize = 8;

/// The token in file `path`: its first line, trimmed. A token file keeps a
/// token off the command line, where every user of the machine sees it
/// (`ps`). Errors: the file cannot be read, or its first line is empty.
pub fn read_file(path: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read token file {}", path.display()))?;
    let token = text.lines().next().unwrap_or_default().trim().to_string();
    anyhow::ensure!(!token.is_empty(), "token file {} is empty", path.display());
    Ok(token)
}

/// The secret in file `path` that a daemon's configuration names: its
/// first line ([`read_file`]), refused when every user of the machine may
/// read the file (its mode gives others read), as OpenSSH refuses such a
/// key. Errors: that, or [`read_file`]'s.
pub fn read_secret(path: &std::path::Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?
        .permissions()
        .mode()
        & 0o777;
    anyhow::ensure!(
        mode & 0o004 == 0,
        "{} is readable by every user of the machine (mode {mode:04o}): `chmod o-r` it, and give it to the daemon's group",
        path.display()
    );
    read_file(path)
}

/// Warns that configuration field `field` holds a secret in clear, which
/// `instead` (a file holding it) keeps out of the configuration.
pub fn warn_secret_in_clear(field: &str, instead: &str) {
    tracing::warn!("field `{field}`: a secret in the configuration; give `{instead}` (a file only the daemon may read) instead");
}

/// The error for a token given on the command line as `flag`: refused,
/// since every user of the machine sees it in `ps`; `instead` says how to
/// give it.
pub fn refuse_on_argv(flag: &str, instead: &str) -> anyhow::Error {
    anyhow::anyhow!("{flag}: a token on the command line is visible to every user of the machine (ps); give it with {instead}")
}

/// The SHA-256 of a bearer token.
pub fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// [`digest`] in hex, as `token_sha256` takes it.
pub fn digest_hex(token: &str) -> String {
    hex::encode(digest(token))
}

/// The digest a configuration entry gives: exactly one of `token` (in
/// clear, at least [`MIN_TOKEN_LEN`] visible ASCII characters; the
/// caller's check warns of it once, see [`warn_if_clear`]) and
/// `token_sha256` (64 hex digits). Errors name `field` (e.g. `tokens[2]`)
/// and the reason.
pub fn configured(field: &str, token: Option<&str>, token_sha256: Option<&str>) -> Result<[u8; 32], String> {
    match (token, token_sha256) {
        (Some(t), None) => {
            if t.len() < MIN_TOKEN_LEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!(
                    "field `{field}.token`: must be at least {MIN_TOKEN_LEN} visible ASCII characters"
                ));
            }
            Ok(digest(t))
        }
        (None, Some(h)) => hex::decode(h)
            .ok()
            .and_then(|d| <[u8; 32]>::try_from(d).ok())
            .ok_or_else(|| format!("field `{field}.token_sha256`: must be 64 hex digits")),
        _ => Err(format!("field `{field}`: give one of `token_sha256` and `token`")),
    }
}

/// Logs a warning for an entry `field` whose token is given in clear
/// (`hash_command` makes its `token_sha256`); for a configuration's check.
pub fn warn_if_clear(field: &str, token: Option<&str>, hash_command: &str) {
    if token.is_some() {
        tracing::warn!("field `{field}.token`: a token in clear; give its `token_sha256` instead ({hash_command})");
    }
}

/// The index of the first of `known` digests that `presented` hashes to.
/// Every digest is compared, in constant time.
pub fn find<'a>(presented: &str, known: impl IntoIterator<Item = &'a [u8; 32]>) -> Option<usize> {
    let presented = digest(presented);
    let mut found = None;
    for (i, k) in known.into_iter().enumerate() {
        if bool::from(k.ct_eq(&presented)) && found.is_none() {
            found = Some(i);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("peer.token");
        std::fs::write(&f, "s3cret-token\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = format!("{:#}", read_secret(&f).unwrap_err());
        assert!(e.contains("readable by every user") && e.contains("0644"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(read_secret(&f).unwrap(), "s3cret-token");
    }

    #[test]
    fn entries_and_lookup() {
        let a = configured("tokens[0]", Some("alpha-token"), None).unwrap();
        let b = configured("tokens[1]", None, Some(&digest_hex("beta-token"))).unwrap();
        assert_eq!(find("beta-token", [&a, &b]), Some(1));
        assert_eq!(find("alpha-token", [&a, &b]), Some(0));
        assert_eq!(find("gamma-token", [&a, &b]), None);
        let e = configured("tokens[2]", Some("short"), None).unwrap_err();
        assert!(e.contains("`tokens[2].token`") && e.contains("at least 8"), "{e}");
        let e = configured("tokens[3]", None, Some("abc")).unwrap_err();
        assert!(e.contains("`tokens[3].token_sha256`: must be 64 hex digits"), "{e}");
        let e = configured("tokens[4]", None, None).unwrap_err();
        assert!(e.contains("give one of"), "{e}");
        assert!(configured("t", Some("x-token-x"), Some(&digest_hex("x"))).is_err());
    }
}
