//! The error type shared by the components.

/// Errors shared by the VEE manager's components. Each variant names what was
/// wrong (the field, the ID) and why.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A manifest or a content ID refused (`vee_manifest::Error`: the
    /// field and the reason).
    #[error(transparent)]
    Manifest(#[from] vee_manifest::Error),
    /// A blob the image repository does not hold.
    #[error("blob {id} not found in the image repository")]
    BlobNotFound { id: String },
    /// Content whose digest differs from the ID it was declared or pulled as.
    #[error("blob {id}: content digest is {actual}, not the declared ID")]
    DigestMismatch { id: String, actual: String },
    /// The image repository refused or failed a request.
    #[error("image repository: {what}: {reason}")]
    Repository { what: String, reason: String },
    /// An OCI registry (`crate::registry`): not trusted, out of the
    /// provider's scope, not holding a VEE image, or refusing or failing a
    /// request.
    #[error("registry {registry}: {what}: {reason}")]
    Registry { registry: String, what: String, reason: String },
    /// A stored record or file written by a newer version of the software
    /// (its format version is above the one this version knows): refused,
    /// never misread.
    #[error("{what} has format version {found}, newer than this version reads (up to {known}); upgrade first")]
    FormatTooNew { what: String, found: u32, known: u32 },
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

/// The gRPC status a daemon answers for an error chain: the code of the
/// first link that `code_of` classifies, else of the first shared
/// [`Error`] in it (see [`Error::grpc_code`]), else `default`; the message
/// is the whole chain, at most [`crate::excerpt::MESSAGE_BYTES`]. Each
/// daemon passes its own typed errors in `code_of`: no status is chosen by
/// reading message text.
pub fn grpc_status(
    e: &anyhow::Error,
    code_of: impl Fn(&(dyn std::error::Error + 'static)) -> Option<tonic::Code>,
    default: tonic::Code,
) -> tonic::Status {
    let code = e
        .chain()
        .find_map(|c| {
            code_of(c)
                .or_else(|| c.downcast_ref::<Error>().and_then(Error::grpc_code))
                .or_else(|| c.is::<vee_manifest::Error>().then_some(tonic::Code::InvalidArgument))
        })
        .unwrap_or(default);
    tonic::Status::new(code, crate::excerpt::message(&format!("{e:#}")))
}

impl Error {
    /// The gRPC code of this error when a daemon answers with it; `None`
    /// when it depends on the call (repository and I/O failures).
    pub fn grpc_code(&self) -> Option<tonic::Code> {
        use tonic::Code;
        match self {
            Error::Manifest(_) => Some(Code::InvalidArgument),
            Error::BlobNotFound { .. } => Some(Code::NotFound),
            Error::DigestMismatch { .. } | Error::FormatTooNew { .. } => Some(Code::FailedPrecondition),
            Error::Repository { .. } | Error::Registry { .. } | Error::Io { .. } => None,
        }
    }

    /// `Ok(found)` if this version reads format `found` of `what` (it knows
    /// formats up to `known`; 0 is the unversioned format before versions
    /// were written), else [`Error::FormatTooNew`].
    pub fn check_format(what: impl Into<String>, found: u32, known: u32) -> Result<u32> {
        if found > known {
            return Err(Error::FormatTooNew {
                what: what.into(),
                found,
                known,
            });
        }
        Ok(found)
    }

    /// An [`Error::Io`] about `path`.
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}

/// `err` and its whole source chain, `"outer: inner: …"`, each message said
/// once (hyper and tonic repeat theirs one level down). A transport error's
/// own message ("transport error") rarely says why; its sources do.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut why = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let msg = s.to_string();
        if !why.ends_with(&msg) {
            why = format!("{why}: {msg}");
        }
        source = s.source();
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_format_is_refused_with_what_and_both_versions() {
        assert_eq!(Error::check_format("x", 0, 1).unwrap(), 0);
        assert_eq!(Error::check_format("x", 1, 1).unwrap(), 1);
        let e = Error::check_format("VEEM database /d", 7, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "VEEM database /d has format version 7, newer than this version reads (up to 1); upgrade first"
        );
    }

    #[test]
    fn a_chain_says_each_cause_once() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let outer = Error::Io {
            path: "/x".into(),
            source: inner,
        };
        // Io's own message already ends with its source's: said once.
        assert_eq!(chain(&outer), "/x: connection refused");
        let e = anyhow::anyhow!(outer).context("heartbeat");
        assert_eq!(chain(e.as_ref()), "heartbeat: /x: connection refused");
    }
}
