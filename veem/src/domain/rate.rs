//! Token buckets by caller: what limits how fast one caller may make the
//! VEEM do something that writes (a console session writes two events).
//! Pure: the caller gives the time.

use std::collections::HashMap;

/// Callers whose buckets are remembered before the full ones are
/// forgotten (a full bucket is what a new caller gets anyway).
const REMEMBERED: usize = 4096;

/// One bucket per caller, of `per_minute` tokens, refilled at
/// `per_minute` a minute.
#[derive(Debug)]
pub struct Buckets {
    per_minute: u32,
    /// Tokens left and when they were counted (Unix ms), by caller.
    by_caller: HashMap<String, (f64, i64)>,
}

impl Buckets {
    /// Buckets of `per_minute` tokens (at least 1).
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute: per_minute.max(1),
            by_caller: HashMap::new(),
        }
    }

    /// The limit, a minute.
    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Takes a token of `caller`'s bucket at `now_ms`; when there is none,
    /// takes nothing and errors with the milliseconds until there is one.
    pub fn take(&mut self, caller: &str, now_ms: i64) -> Result<(), i64> {
        let full = f64::from(self.per_minute);
        let per_ms = full / 60_000.0;
        if self.by_caller.len() >= REMEMBERED && !self.by_caller.contains_key(caller) {
            self.by_caller
                .retain(|_, (tokens, at)| *tokens + (now_ms - *at).max(0) as f64 * per_ms < full);
        }
        let (tokens, at) = self.by_caller.entry(caller.to_string()).or_insert((full, now_ms));
        *tokens = (*tokens + (now_ms - *at).max(0) as f64 * per_ms).min(full);
        *at = now_ms.max(*at);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *tokens) / per_ms).ceil() as i64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_holds_its_rate_refills_and_is_one_a_caller() {
        let mut b = Buckets::new(3);
        for _ in 0..3 {
            assert_eq!(b.take("acme", 0), Ok(()));
        }
        assert_eq!(b.take("acme", 0), Err(20_000), "one token every 20 s");
        assert_eq!(b.take("other", 0), Ok(()), "another caller's own bucket");
        assert_eq!(b.take("acme", 19_999), Err(1));
        assert_eq!(b.take("acme", 20_000), Ok(()));
        assert_eq!(b.take("acme", 20_000), Err(20_000));
        assert_eq!(b.take("acme", 10 * 60_000), Ok(()), "refilled, never above the rate");
        assert_eq!(b.take("acme", 10 * 60_000), Ok(()));
        assert_eq!(b.take("acme", 10 * 60_000), Ok(()));
        assert!(b.take("acme", 10 * 60_000).is_err());
    }
}
