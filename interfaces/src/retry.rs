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

    /// A fixed schedule: `attempts` in all, `wait` apart.
    pub fn fixed(attempts: u32, wait: Duration) -> Self {
        Self {
            attempts,
            initial_backoff: wait,
            max_backoff: wait,
        }
    }

    /// Runs `op` until it succeeds, at most `attempts` times (at least
    /// once), waiting [`RetryPolicy::backoff`] after each failure but the
    /// last; returns the first success or the last error.
    pub async fn run<T, E, F: std::future::Future<Output = Result<T, E>>>(&self, op: impl FnMut() -> F) -> Result<T, E> {
        self.run_while(op, |_| true).await
    }

    /// [`RetryPolicy::run`], retrying only errors `transient` says are
    /// worth it (it is asked only when another attempt is left); any other
    /// error is returned at once.
    pub async fn run_while<T, E, F: std::future::Future<Output = Result<T, E>>>(
        &self,
        op: impl FnMut() -> F,
        transient: impl Fn(&E) -> bool,
    ) -> Result<T, E> {
        self.run_while_on(op, transient, tokio::time::sleep).await
    }

    /// [`RetryPolicy::run_while`] waiting with `sleep` (a caller's own
    /// clock, so that a virtual clock drives its retries too).
    pub async fn run_while_on<T, E, F, S>(
        &self,
        mut op: impl FnMut() -> F,
        transient: impl Fn(&E) -> bool,
        sleep: impl Fn(Duration) -> S,
    ) -> Result<T, E>
    where
        F: std::future::Future<Output = Result<T, E>>,
        S: std::future::Future<Output = ()>,
    {
        let mut attempt = 1;
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if attempt >= self.attempts || !transient(&e) => return Err(e),
                Err(_) => {
                    sleep(self.backoff(attempt)).await;
                    attempt += 1;
                }
            }
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

    #[tokio::test(start_paused = true)]
    async fn run_while_returns_an_error_not_worth_a_retry_at_once() {
        let calls = std::cell::Cell::new(0);
        let p = RetryPolicy::fixed(5, Duration::from_secs(1));
        let r: Result<u32, &str> = p
            .run_while(
                || {
                    calls.set(calls.get() + 1);
                    let e = if calls.get() < 3 { "busy" } else { "refused" };
                    async move { Err(e) }
                },
                |e| *e == "busy",
            )
            .await;
        assert_eq!((r, calls.get()), (Err("refused"), 3));
    }

    #[tokio::test(start_paused = true)]
    async fn run_stops_at_the_first_success_or_after_the_last_attempt() {
        let calls = std::cell::Cell::new(0);
        let p = RetryPolicy::fixed(3, Duration::from_secs(1));
        let started = tokio::time::Instant::now();
        let r: Result<u32, &str> = p
            .run(|| {
                calls.set(calls.get() + 1);
                async { Err("no") }
            })
            .await;
        assert_eq!((r, calls.get()), (Err("no"), 3));
        assert_eq!(started.elapsed(), Duration::from_secs(2), "no wait after the last attempt");
        calls.set(0);
        let r: Result<u32, &str> = p
            .run(|| {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move {
                    if n == 2 {
                        Ok(7)
                    } else {
                        Err("no")
                    }
                }
            })
            .await;
        assert_eq!((r, calls.get()), (Ok(7), 2));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(1), Duration::from_millis(200));
        assert_eq!(p.backoff(3), Duration::from_millis(800));
        assert_eq!(p.backoff(10), Duration::from_secs(5));
        assert_eq!(p.backoff(40), Duration::from_secs(5));
    }
}
