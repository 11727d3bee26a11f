//! How a call of the core on the site's records failed, by what its caller
//! can do about it: no such record, a change the state table forbids, or
//! the store's refusal (`crate::store::StoreError`: a conflict to read
//! again, a store that does not answer, a VEEM that no longer leads).

use crate::domain::InvalidTransition;
use crate::store::StoreError;

/// A record call's failure ([`super::Core::vee`], `service`, `save_vee`,
/// `transition`, ...).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// No record of that kind (`VEE`, `service`) with that ID.
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    /// The state table does not allow the change: nothing changed.
    #[error(transparent)]
    Transition(#[from] InvalidTransition),
    /// The store refused or failed: nothing written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The store error in `e`'s chain, if any, itself or a record call's (for
/// code that still carries `anyhow` chains: what it can act on is this
/// variant).
pub fn store_error_in(e: &anyhow::Error) -> Option<&StoreError> {
    e.chain().find_map(|c| match c.downcast_ref::<RecordError>() {
        Some(RecordError::Store(s)) => Some(s),
        Some(_) => None,
        None => c.downcast_ref::<StoreError>(),
    })
}

impl RecordError {
    /// [`RecordError::NotFound`] of a `kind` ("VEE", "service") `id`.
    pub fn not_found(kind: &'static str, id: impl Into<String>) -> Self {
        RecordError::NotFound { kind, id: id.into() }
    }
}
