//! What the repository client retries (connection errors, 502-504), on
//! the schedule of [`RetryPolicy`].

pub use crate::retry::RetryPolicy;

/// True for transport errors worth another attempt.
pub(crate) fn is_transient(err: &reqwest::Error) -> bool {
    err.is_connect() || err.is_timeout() || err.is_request() || err.is_body() || err.is_decode()
}

/// True for HTTP statuses worth another attempt.
pub(crate) fn is_transient_status(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 502..=504)
}
