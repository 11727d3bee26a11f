//! What is wrong with a manifest or a content ID: the field path and the
//! reason, input quoted by bounded excerpts (`crate::excerpt`).

/// A manifest or content ID refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A blob ID that is not `sha256:<64 lowercase hex>`.
    #[error("invalid blob ID {id:?}: {reason}")]
    InvalidBlobId { id: String, reason: String },
    /// An image that is neither a content ID nor an OCI image reference
    /// with an explicit registry and tag or digest (`crate::image_ref`).
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidImageRef { reference: String, reason: String },
    /// A manifest field that fails validation; `field` is the path, e.g.
    /// `component[1].memory_mib`.
    #[error("manifest field `{field}`: {reason}")]
    InvalidManifest { field: String, reason: String },
    /// The manifest is not valid TOML or does not have the manifest's shape.
    #[error("manifest does not parse: {0}")]
    ManifestSyntax(String),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
