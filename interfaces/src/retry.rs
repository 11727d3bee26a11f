//! The one retry schedule of the workspace: a number of attempts with
//! exponential backoff, used by the image-repository client (connection
//! errors) and by the VEEM's recovery (restores on a host).

use std::time::Duration;

/// How often and how patiently to retry: `attempts` in all, waiting
/// `initial_backoff` after the first failure and twice as long after each
/// further one, never longer than `max_backoff`. What is worth a retry is
/// the caller's to decide.
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
