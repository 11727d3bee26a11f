//! Which endpoint of the OCI Distribution API a path names. Repository
//! names have slashes, so the router hands over everything after `/v2/`
//! and this reads it from the right (OCI Distribution Specification
//! v1.1, "Endpoints"; the grammar of names and tags is its own).

/// An endpoint, with its parts still unchecked but the repository's name.
#[derive(Debug, PartialEq, Eq)]
pub enum Endpoint<'a> {
    /// `/v2/NAME/blobs/DIGEST`
    Blob { name: &'a str, digest: &'a str },
    /// `/v2/NAME/blobs/uploads/`
    Uploads { name: &'a str },
    /// `/v2/NAME/blobs/uploads/SESSION`
    Upload { name: &'a str, session: &'a str },
    /// `/v2/NAME/manifests/REFERENCE` (a tag or a digest)
    Manifest { name: &'a str, reference: &'a str },
    /// `/v2/NAME/tags/list`
    Tags { name: &'a str },
    /// `/v2/NAME/referrers/DIGEST`
    Referrers { name: &'a str, digest: &'a str },
}

impl<'a> Endpoint<'a> {
    /// The repository the endpoint is in.
    pub fn name(&self) -> &'a str {
        match self {
            Endpoint::Blob { name, .. }
            | Endpoint::Uploads { name }
            | Endpoint::Upload { name, .. }
            | Endpoint::Manifest { name, .. }
            | Endpoint::Tags { name }
            | Endpoint::Referrers { name, .. } => name,
        }
    }
}

/// Longest repository name, in bytes (CNCF Distribution's limit).
pub const MAX_NAME: usize = 255;
/// Longest tag, in bytes (the specification's grammar).
pub const MAX_TAG: usize = 128;

/// Reads `rest`, the path after `/v2/`. `None`: no endpoint of the API.
pub fn parse(rest: &str) -> Option<Endpoint<'_>> {
    if let Some(name) = rest.strip_suffix("/tags/list") {
        return Some(Endpoint::Tags { name });
    }
    if let Some(name) = rest.strip_suffix("/blobs/uploads/").or_else(|| rest.strip_suffix("/blobs/uploads")) {
        return Some(Endpoint::Uploads { name });
    }
    let (head, last) = rest.rsplit_once('/')?;
    let (name, kind) = head.rsplit_once('/')?;
    match kind {
        "blobs" => Some(Endpoint::Blob { name, digest: last }),
        "manifests" => Some(Endpoint::Manifest { name, reference: last }),
        "referrers" => Some(Endpoint::Referrers { name, digest: last }),
        "uploads" => name.strip_suffix("/blobs").map(|name| Endpoint::Upload { name, session: last }),
        _ => None,
    }
}

/// Checks a repository name against the specification's grammar:
/// components of `[a-z0-9]+` joined by `.`, `_`, `__` or dashes, separated
/// by `/`, at most [`MAX_NAME`] bytes. ASCII only, so no invisible, bidi
/// or control character gets in. Errors: the reason.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!("must be 1 to {MAX_NAME} bytes"));
    }
    for component in name.split('/') {
        check_component(component).map_err(|why| format!("component {component:?} {why}"))?;
    }
    Ok(())
}

fn check_component(c: &str) -> Result<(), &'static str> {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = c.as_bytes();
    if bytes.is_empty() {
        return Err("is empty");
    }
    if !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return Err("must start and end with a lowercase letter or digit");
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if alnum(b) {
            i += 1;
            continue;
        }
        // A separator: `.`, `_`, `__` or one or more `-`, between alphanumerics.
        let run = bytes[i..].iter().take_while(|&&x| x == b).count();
        let ok = match b {
            b'.' => run == 1,
            b'_' => run <= 2,
            b'-' => true,
            _ => return Err("may hold only lowercase letters, digits and the separators . _ __ -"),
        };
        if !ok {
            return Err("has a separator repeated");
        }
        i += run;
    }
    Ok(())
}

/// Checks a tag: `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`. Errors: the reason.
pub fn check_tag(tag: &str) -> Result<(), String> {
    let b = tag.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    if b.is_empty() || b.len() > MAX_TAG {
        return Err(format!("must be 1 to {MAX_TAG} characters"));
    }
    if !word(b[0]) || !b.iter().all(|&c| word(c) || c == b'.' || c == b'-') {
        return Err("must match [a-zA-Z0-9_][a-zA-Z0-9._-]*".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_read_from_the_right() {
        let d = "sha256:0123";
        assert_eq!(
            parse(&format!("acme/os/blobs/{d}")),
            Some(Endpoint::Blob {
                name: "acme/os",
                digest: d
            })
        );
        // A repository may itself be called "blobs" or "manifests".
        assert_eq!(
            parse(&format!("acme/blobs/blobs/{d}")),
            Some(Endpoint::Blob {
                name: "acme/blobs",
                digest: d
            })
        );
        assert_eq!(parse("acme/os/blobs/uploads/"), Some(Endpoint::Uploads { name: "acme/os" }));
        assert_eq!(parse("acme/os/blobs/uploads"), Some(Endpoint::Uploads { name: "acme/os" }));
        assert_eq!(
            parse("acme/os/blobs/uploads/abc"),
            Some(Endpoint::Upload {
                name: "acme/os",
                session: "abc"
            })
        );
        assert_eq!(
            parse("a/manifests/manifests/v1"),
            Some(Endpoint::Manifest {
                name: "a/manifests",
                reference: "v1"
            })
        );
        assert_eq!(parse("acme/os/tags/list"), Some(Endpoint::Tags { name: "acme/os" }));
        assert_eq!(
            parse(&format!("x/referrers/{d}")),
            Some(Endpoint::Referrers { name: "x", digest: d })
        );
        assert_eq!(parse("acme/os/other/x"), None);
        assert_eq!(parse("acme"), None);
        assert_eq!(parse("x/uploads/abc"), None);
    }

    #[test]
    fn names_follow_the_grammar() {
        for ok in ["acme", "acme/debian-12", "a.b/c__d/e---f", "site-a/checkpoints", "0/1"] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Acme",
            "acme/",
            "/acme",
            "a//b",
            "a..b",
            "a___b",
            "-a",
            "a-",
            "a b",
            "a\u{202e}b",
            "caf\u{e9}",
            "a\0b",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"a".repeat(256)).is_err());
        assert!(check_name(&"a".repeat(255)).is_ok());
    }

    #[test]
    fn tags_follow_the_grammar() {
        for ok in ["latest", "v1.2-rc_3", "_x", "A"] {
            assert_eq!(check_tag(ok), Ok(()), "{ok}");
        }
        for bad in ["", ".x", "-x", "a/b", "a:b", "a\u{200b}"] {
            assert!(check_tag(bad).is_err(), "{bad:?}");
        }
        assert!(check_tag(&"a".repeat(129)).is_err());
    }
}
