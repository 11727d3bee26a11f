//! The error type shared by the components.

/// Errors shared by the VEE manager's components. Each variant names what was
/// wrong (the field, the ID) and why.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A blob ID that is not `sha256:<64 lowercase hex>`.
    #[error("invalid blob ID {id:?}: {reason}")]
    InvalidBlobId { id: String, reason: String },
    /// A manifest field that fails validation; `field` is the path, e.g.
    /// `component[1].memory_mib`.
    #[error("manifest field `{field}`: {reason}")]
    InvalidManifest { field: String, reason: String },
    /// The manifest is not valid TOML or does not have the manifest's shape.
    #[error("manifest does not parse: {0}")]
    ManifestSyntax(String),
    /// A blob the image repository does not hold.
    #[error("blob {id} not found in the image repository")]
    BlobNotFound { id: String },
    /// Content whose digest differs from the ID it was declared or pulled as.
    #[error("blob {id}: content digest is {actual}, not the declared ID")]
    DigestMismatch { id: String, actual: String },
    /// The image repository refused or failed a request.
    #[error("image repository: {what}: {reason}")]
    Repository { what: String, reason: String },
    /// Anything on the local file system.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Result with the shared [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Io`] about `path`.
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}
