//! How a call of the store failed, by what its caller can do about it: a
//! condition that no longer holds (read again, plan again), a store that
//! does not answer or a VEEM that no longer leads (another moment, another
//! VEEM), or a failure of the engine itself. The VMI maps each variant to
//! one status (`crate::api::status`).

use super::engine::Conflict;
use super::etcd::{Fenced, StoreUnavailable};

/// A store call's failure (every [`super::Store`] and
/// [`super::Engine`] method answers it).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A record the commit was conditioned on was written since it was
    /// read (another VEEM of the site): nothing written; read again.
    #[error(transparent)]
    Conflict(#[from] Conflict),
    /// The site's control plane store does not answer (`what` the call
    /// was): nothing the caller can count on was written; read-only until
    /// it answers.
    #[error("{what}: {source}")]
    Unavailable {
        what: String,
        #[source]
        source: StoreUnavailable,
    },
    /// This VEEM no longer leads the site: nothing written.
    #[error(transparent)]
    Fenced(#[from] Fenced),
    /// The engine failed otherwise (I/O, a record that does not read, a
    /// refusal the engine does not explain, a visitor's own error).
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl StoreError {
    /// [`StoreError::Unavailable`] of call `what` for `reason`.
    pub fn unavailable(what: impl Into<String>, reason: impl Into<String>) -> Self {
        StoreError::Unavailable {
            what: what.into(),
            source: StoreUnavailable(reason.into()),
        }
    }

    /// Whether the call may succeed as it is later or at another VEEM
    /// (unavailable, fenced, or a conflict once read again).
    pub fn is_transient(&self) -> bool {
        !matches!(self, StoreError::Failed(_))
    }
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        StoreError::Failed(e.into())
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Failed(e.into())
    }
}

impl From<interfaces::Error> for StoreError {
    fn from(e: interfaces::Error) -> Self {
        StoreError::Failed(e.into())
    }
}
