//! The VEEM's typed errors. Workflows return `anyhow::Error` chains; the
//! interfaces map them to status codes in one place
//! (`crate::api::status`).

/// What a VMI caller asked for that does not exist or is malformed.
#[derive(Debug, thiserror::Error)]
pub enum VeemError {
    /// No record of that kind with that ID (NotFound).
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    /// A request field that is missing or malformed (InvalidArgument).
    #[error("field `{field}`: {reason}")]
    InvalidField { field: String, reason: String },
    /// A manifest refused before planning, one reason per field
    /// (InvalidArgument).
    #[error("rejected: {}", .0.join("; "))]
    ManifestRefused(Vec<String>),
    /// A Deploy request ID already used by the caller for another
    /// manifest (AlreadyExists).
    #[error("request_id {0:?} was used for another manifest (service {1})")]
    RequestReused(String, String),
    /// A request ID (`vee-request-id`) already used by the caller for
    /// another call or other fields (AlreadyExists).
    #[error("request ID {id:?} (metadata `vee-request-id`) was used for another {method} call or other fields: give each change its own")]
    ReplyReused { id: String, method: String },
    /// A caller over its rate of something that writes (ResourceExhausted):
    /// `what` by `who`, over `per_minute` (the configuration's `limit`
    /// key); a token is back in `retry_s`.
    #[error("{what} by {who}: over the limit of {per_minute} per minute (`{limit}`): retry in {retry_s} s")]
    RateLimited {
        what: &'static str,
        who: String,
        per_minute: u32,
        limit: &'static str,
        retry_s: i64,
    },
}

impl VeemError {
    /// [`VeemError::NotFound`] of a `kind` ("VEE", "service", ...) `id`.
    pub fn not_found(kind: &'static str, id: impl Into<String>) -> Self {
        VeemError::NotFound { kind, id: id.into() }
    }

    /// [`VeemError::InvalidField`] for `field`.
    pub fn field(field: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        VeemError::InvalidField {
            field: field.into(),
            reason: reason.to_string(),
        }
    }
}
