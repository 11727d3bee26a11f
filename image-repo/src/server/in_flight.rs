//! Uploads in flight: requests whose bodies are being received (`PUT
//! /v1/blobs/ID`; on `/v2` the POST, PATCH and PUT of uploads and the PUT
//! of manifests). Each holds a connection slot and a writer thread of the
//! blocking pool while its body comes, so a caller that opens hundreds of
//! uploads and stalls them would take every slot of its address and
//! hundreds of threads (520 such uploads took the pool from 12 to 138
//! threads, and health, HEAD and GET from that address found no slot).
//! They are bounded per caller (`max_uploads_in_flight_per_caller`) and in
//! all (`max_uploads_in_flight`): one more is answered 429 with
//! `Retry-After` before a byte of its body is read or a file is made, and
//! its connection then closes (hyper does not wait for a body nobody
//! reads), which frees its slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::error::ApiError;

/// Seconds a refused upload is told to wait (`Retry-After`).
pub const RETRY_AFTER_S: u64 = 1;

/// The uploads under way, per caller and in all.
pub struct UploadsInFlight {
    max: usize,
    max_per_caller: usize,
    counts: Arc<Mutex<Counts>>,
}

#[derive(Default)]
struct Counts {
    all: usize,
    by_caller: HashMap<String, usize>,
}

/// One upload in flight, counted until dropped.
pub struct InFlight {
    counts: Arc<Mutex<Counts>>,
    caller: String,
}

impl UploadsInFlight {
    /// At most `max` uploads at once, `max_per_caller` of one caller.
    pub fn new(max: usize, max_per_caller: usize) -> Self {
        Self {
            max,
            max_per_caller,
            counts: Default::default(),
        }
    }

    /// Counts an upload of `caller` (a token's name) until the returned
    /// guard is dropped. Errors: 429 with `Retry-After`, naming the limit
    /// reached and its configuration key, when `caller` has
    /// `max_per_caller` uploads under way or all callers `max`.
    pub fn enter(&self, caller: &str) -> Result<InFlight, ApiError> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let mine = counts.by_caller.get(caller).copied().unwrap_or(0);
        let refuse = |why: String| Err(ApiError::too_many_requests(why).retry_after(RETRY_AFTER_S));
        if mine >= self.max_per_caller {
            return refuse(format!(
                "{caller} has {mine} uploads under way, the most one caller may have (max_uploads_in_flight_per_caller): retry once one has finished"
            ));
        }
        if counts.all >= self.max {
            return refuse(format!(
                "{} uploads are under way, the most the repository takes at once (max_uploads_in_flight): retry once one has finished",
                counts.all
            ));
        }
        counts.all += 1;
        *counts.by_caller.entry(caller.to_string()).or_default() += 1;
        Ok(InFlight {
            counts: self.counts.clone(),
            caller: caller.to_string(),
        })
    }

    /// Uploads under way now.
    pub fn len(&self) -> usize {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).all
    }

    /// Whether none is under way.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.all = counts.all.saturating_sub(1);
        if let Some(n) = counts.by_caller.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                counts.by_caller.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_are_bounded_per_caller_and_in_all_until_they_end() {
        let limits = UploadsInFlight::new(3, 2);
        let a = [limits.enter("acme").unwrap(), limits.enter("acme").unwrap()];
        let e = limits.enter("acme").err().unwrap();
        assert_eq!(e.status(), 429);
        assert!(e.message().contains("max_uploads_in_flight_per_caller"), "{e}");
        let b = limits.enter("site-a").unwrap();
        let e = limits.enter("globex").err().unwrap();
        assert!(e.message().contains("(max_uploads_in_flight)"), "{e}");
        assert_eq!(limits.len(), 3);
        drop(a);
        assert_eq!(limits.len(), 1);
        let _again = limits.enter("acme").unwrap();
        drop(b);
        assert_eq!(limits.len(), 1);
    }
}
