//! Content IDs of blobs in the image repository: `sha256:<64 lowercase hex>`
//! of the content (B §2: "the system ID defines the image").

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::Error;

/// A content ID `sha256:<64 hex>`. Parsing accepts only that exact shape
/// (lowercase hex), so an ID is always safe to use as a file name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BlobId([u8; 32]);

impl BlobId {
    /// The ID of `data`.
    pub fn of(data: &[u8]) -> Self {
        Self::from_digest(Sha256::digest(data).into())
    }

    /// The ID whose digest is `digest` (the output of a finished `Sha256`).
    pub fn from_digest(digest: [u8; 32]) -> Self {
        Self(digest)
    }

    /// The 64 hex digits without the `sha256:` prefix (used as a file name).
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for BlobId {
    type Err = Error;

    /// Errors: [`Error::InvalidBlobId`] unless `s` is `sha256:` followed by
    /// exactly 64 lowercase hex digits.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| Error::InvalidBlobId {
            id: s.to_string(),
            reason: why.to_string(),
        };
        let hexpart = s.strip_prefix("sha256:").ok_or_else(|| bad("must start with 'sha256:'"))?;
        if hexpart.len() != 64 {
            return Err(bad("digest must be 64 hex digits"));
        }
        if !hexpart.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(bad("digest must be lowercase hex"));
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(hexpart, &mut out).map_err(|e| bad(&e.to_string()))?;
        Ok(Self(out))
    }
}

impl TryFrom<String> for BlobId {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        s.parse()
    }
}

impl From<BlobId> for String {
    fn from(id: BlobId) -> String {
        id.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_matches_sha256_of_content() {
        let id = BlobId::of(b"hello");
        assert_eq!(
            id.to_string(),
            "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(id.to_string().parse::<BlobId>().unwrap(), id);
    }

    #[test]
    fn rejects_malformed_ids_with_reason() {
        for bad in [
            "",
            "md5:abc",
            "sha256:xyz",
            "sha256:../../etc/passwd",
            &format!("sha256:{}", "A".repeat(64)),
        ] {
            let err = bad.parse::<BlobId>().unwrap_err().to_string();
            assert!(err.contains("invalid blob ID"), "{bad}: {err}");
        }
    }
}
