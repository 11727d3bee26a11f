//! Where a component's image comes from (issue 39, item 2): a content ID
//! in the site's own image repository (`sha256:<hex>`, B §2: "the system ID
//! defines the image"), or a VEE image artifact in an OCI registry the site
//! trusts, `REGISTRY/REPOSITORY@sha256:<hex>` or `REGISTRY/REPOSITORY:TAG`.
//! A tag is resolved to its digest once, at admission; the digest is what
//! the VEE keeps. The reference grammar is the OCI Distribution
//! Specification's, parsed by `oci-spec`; the registry must be explicit
//! (no implied `docker.io`) and so must the tag (no implied `latest`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::blob_id::BlobId;
use crate::error::Error;

/// Longest image reference accepted, in bytes.
pub const MAX_IMAGE_REF_BYTES: usize = 512;

/// See the module documentation. Serialized as its string form.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ImageRef {
    /// `sha256:<hex>`: a blob in the site's image repository.
    Repository(BlobId),
    /// An image artifact in an OCI registry.
    Registry(RegistryImage),
}

/// `REGISTRY/REPOSITORY` with a tag, a digest or both (a tag resolved at
/// admission keeps only the digest: [`RegistryImage::resolved`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RegistryImage {
    /// The registry's host, with its port if not 443 (`registry.example.com:5000`).
    pub registry: String,
    /// The repository in it (`acme/web`).
    pub repository: String,
    /// The tag, when named by one.
    pub tag: Option<String>,
    /// The image manifest's digest, when named by one.
    pub digest: Option<BlobId>,
}

impl RegistryImage {
    /// This image by `digest` alone (a tag resolved).
    pub fn resolved(&self, digest: BlobId) -> Self {
        Self {
            tag: None,
            digest: Some(digest),
            ..self.clone()
        }
    }

    /// The repository's first path component (`acme` of `acme/web`): the
    /// namespace a registry's `scope = "provider"` checks against the
    /// provider.
    pub fn namespace(&self) -> &str {
        self.repository.split('/').next().unwrap_or_default()
    }
}

impl fmt::Display for RegistryImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

impl ImageRef {
    /// The content ID when this is an image of the site's repository.
    pub fn blob(&self) -> Option<&BlobId> {
        match self {
            Self::Repository(id) => Some(id),
            Self::Registry(_) => None,
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Repository(id) => write!(f, "{id}"),
            Self::Registry(r) => write!(f, "{r}"),
        }
    }
}

impl fmt::Debug for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<BlobId> for ImageRef {
    fn from(id: BlobId) -> Self {
        Self::Repository(id)
    }
}

impl FromStr for ImageRef {
    type Err = Error;

    /// Errors: [`Error::InvalidImageRef`] naming the reason: neither a
    /// content ID nor a reference, no explicit registry or tag, a digest
    /// other than sha256, longer than [`MAX_IMAGE_REF_BYTES`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: String| Error::InvalidImageRef {
            reference: crate::excerpt::excerpt(s, crate::excerpt::QUOTE_CHARS).into_owned(),
            reason: why,
        };
        if s.starts_with("sha256:") {
            return s.parse().map(Self::Repository);
        }
        if s.len() > MAX_IMAGE_REF_BYTES {
            return Err(bad(format!("{} bytes long; at most {MAX_IMAGE_REF_BYTES}", s.len())));
        }
        let shape = "a content ID (sha256:<64 hex>) or an image reference REGISTRY/REPOSITORY@sha256:<hex> or REGISTRY/REPOSITORY:TAG";
        let r = oci_spec::distribution::Reference::from_str(s).map_err(|e| bad(format!("neither {shape}: {e}")))?;
        let first = s.split('/').next().unwrap_or_default();
        if !s.contains('/') || !(first.contains('.') || first.contains(':') || first == "localhost") {
            return Err(bad(format!("names no registry; give {shape}")));
        }
        let name = s.split('@').next().unwrap_or_default();
        let tagged = name.rsplit('/').next().is_some_and(|last| last.contains(':'));
        if !tagged && r.digest().is_none() {
            return Err(bad("names neither a tag nor a digest (no `latest` is implied)".into()));
        }
        let digest = match r.digest() {
            Some(d) => Some(d.parse::<BlobId>().map_err(|e| bad(format!("digest: {e}")))?),
            None => None,
        };
        Ok(Self::Registry(RegistryImage {
            registry: r.registry().to_string(),
            repository: r.repository().to_string(),
            tag: if tagged { r.tag().map(str::to_string) } else { None },
            digest,
        }))
    }
}

impl TryFrom<String> for ImageRef {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        s.parse()
    }
}

impl From<ImageRef> for String {
    fn from(r: ImageRef) -> String {
        r.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    #[test]
    fn content_ids_and_references_round_trip() {
        for s in [
            format!("sha256:{HEX}"),
            format!("registry.example.com:5000/acme/web@sha256:{HEX}"),
            "127.0.0.1:5000/acme/web:v1".to_string(),
            "localhost/web:1.2".to_string(),
            format!("reg.example/acme/web:v1@sha256:{HEX}"),
        ] {
            let r: ImageRef = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(r.to_string(), s);
        }
        let ImageRef::Registry(r) = "reg.example:5000/acme/web:v1".parse().unwrap() else {
            panic!()
        };
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("reg.example:5000", "acme/web", Some("v1"))
        );
        assert_eq!(r.namespace(), "acme");
        let d: BlobId = format!("sha256:{HEX}").parse().unwrap();
        assert_eq!(r.resolved(d).to_string(), format!("reg.example:5000/acme/web@sha256:{HEX}"));
    }

    #[test]
    fn refuses_implied_registries_tags_and_other_digests_with_the_reason() {
        for (s, why) in [
            ("acme/web:v1", "names no registry"),
            ("web:v1", "names no registry"),
            ("reg.example/acme/web", "neither a tag nor a digest"),
            ("reg.example/Acme/web:v1", "neither a content ID"),
            ("reg.example/acme/web@md5:abc", "neither a content ID"),
            ("sha256:abc", "invalid blob ID"),
            ("reg.example/acme/web:v1\u{202e}", "neither a content ID"),
        ] {
            let e = s.parse::<ImageRef>().unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
        let long = format!("reg.example/{}:v1", "a".repeat(600));
        assert!(long.parse::<ImageRef>().unwrap_err().to_string().contains("at most 512"));
    }
}
