//! Retries with exponential backoff for connection errors.

use std::time::Duration;

/// How often and how patiently the client retries a request that failed on
/// the connection (refused, reset, timed out, cut mid-body) or got a 502,
/// 503 or 504. Answers of the repository such as 404 or 422 are never retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, at least 1.
    pub attempts: u32,
    /// Wait before the second attempt; doubled for each further one.
    pub initial_backoff: Duration,
    /// Upper bound of one wait.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 6 attempts, waiting 0.2 s, 0.4 s, 0.8 s, 1.6 s, 3.2 s (6.2 s in all).
    fn default() -> Self {
        Self {
            attempts: 6,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// No retries: one attempt.
    pub fn none() -> Self {
        Self {
            attempts: 1,
            ..Self::default()
        }
    }

    /// The wait after failed attempt number `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// True for transport errors worth another attempt.
pub(crate) fn is_transient(err: &reqwest::Error) -> bool {
    err.is_connect() || err.is_timeout() || err.is_request() || err.is_body() || err.is_decode()
}

/// True for HTTP statuses worth another attempt.
pub(crate) fn is_transient_status(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 502..=504)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(1), Duration::from_millis(200));
        assert_eq!(p.backoff(3), Duration::from_millis(800));
        assert_eq!(p.backoff(10), Duration::from_secs(5));
        assert_eq!(p.backoff(40), Duration::from_secs(5));
    }
}
