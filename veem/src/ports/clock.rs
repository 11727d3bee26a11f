//! The time the workflows and loops read and wait on ([`Clock`]: the
//! system's, or a simulation's), and the timeouts and retries that wait on
//! it ([`within`], [`retry`]).

/// The time, for everything the workflows date or schedule.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Seconds since the Unix epoch.
    fn now(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }
    /// Resolves once `d` has passed on this clock: the workflows' and
    /// loops' waits (backoffs, periods, polls) go through it, so that a
    /// virtual clock can drive them.
    fn sleep(&self, d: std::time::Duration) -> futures::future::BoxFuture<'static, ()>;
    /// Resolves at `at_ms` (milliseconds since the Unix epoch) on this
    /// clock, at once when that has passed: a due time's timer.
    fn sleep_until(&self, at_ms: i64) -> futures::future::BoxFuture<'static, ()> {
        self.sleep(std::time::Duration::from_millis(at_ms.saturating_sub(self.now_ms()).max(0) as u64))
    }
    /// Milliseconds since `start_ms` (a time this clock gave), 0 when this
    /// clock went back meanwhile.
    fn since_ms(&self, start_ms: i64) -> u64 {
        self.now_ms().saturating_sub(start_ms).max(0) as u64
    }
}

/// `work`'s output if it ends within `d` on `clock`, else `None` (and
/// `work` is dropped): the workflows' and loops' timeouts, on the same
/// clock as their waits.
pub async fn within<F: std::future::Future>(clock: &dyn Clock, d: std::time::Duration, work: F) -> Option<F::Output> {
    tokio::select! {
        out = work => Some(out),
        () = clock.sleep(d) => None,
    }
}

/// `op` until it succeeds, as `policy` says, its waits on `clock`: the
/// workflows' retries, which a virtual clock drives as it drives their
/// other waits. Returns the first success or the last error.
pub async fn retry<T, E, F: std::future::Future<Output = Result<T, E>>>(
    clock: &dyn Clock,
    policy: interfaces::retry::RetryPolicy,
    op: impl FnMut() -> F,
) -> Result<T, E> {
    policy.run_while_on(op, |_| true, |d| clock.sleep(d)).await
}

/// [`Clock`] of the system.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }

    fn sleep(&self, d: std::time::Duration) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(d))
    }
}
