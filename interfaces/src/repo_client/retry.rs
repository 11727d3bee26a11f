//! What the repository client retries (connection errors, 429 and
//! 502-504), on the schedule of [`RetryPolicy`].

pub use crate::retry::RetryPolicy;

/// True for transport errors worth another attempt.
pub(crate) fn is_transient(err: &reqwest::Error) -> bool {
    err.is_connect() || err.is_timeout() || err.is_request() || err.is_body() || err.is_decode()
}

/// True for HTTP statuses worth another attempt: 429 (the repository's
/// bound on uploads in flight, per token and in all) and 502-504.
pub(crate) fn is_transient_status(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 502..=504)
}

#[cfg(test)]
mod tests {
    #[test]
    fn too_many_requests_and_gateway_errors_are_tried_again_others_not() {
        for (code, again) in [(429, true), (502, true), (503, true), (504, true), (400, false), (401, false), (500, false), (507, false)] {
            let s = reqwest::StatusCode::from_u16(code).unwrap();
            assert_eq!(super::is_transient_status(s), again, "{code}");
        }
    }
}
