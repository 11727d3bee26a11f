//! How many restores each destination host runs at once while failed
//! hosts' VEEs come back (`[recovery] parallel_per_host`): one semaphore per
//! host, shared by every recovery under way (two failed hosts whose VEEs
//! go to the same destination share its places), fair: a restore that asks
//! first gets the next place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The restore places of each destination host.
#[derive(Default)]
pub(crate) struct RestoreSlots {
    /// Host name -> (its bound, its semaphore). A host's bound follows its
    /// reported vCPUs: when it changes, the host gets a new semaphore (the
    /// restores holding places of the old one finish on it).
    by_host: Mutex<HashMap<String, (usize, Arc<Semaphore>)>>,
}

impl RestoreSlots {
    /// The semaphore of `host` with `bound` places.
    fn of(&self, host: &str, bound: usize) -> Arc<Semaphore> {
        let mut by_host = self.by_host.lock().unwrap();
        match by_host.get(host) {
            Some((b, sem)) if *b == bound => sem.clone(),
            _ => {
                let sem = Arc::new(Semaphore::new(bound));
                by_host.insert(host.to_string(), (bound, sem.clone()));
                sem
            }
        }
    }

    /// Waits for one of `bound` restore places on `host`, in the order
    /// asked; the place is given back when the permit drops. `None` only if
    /// the semaphore were closed (it never is): the restore runs anyway.
    pub(crate) async fn take(&self, host: &str, bound: usize) -> Option<OwnedSemaphorePermit> {
        self.of(host, bound).acquire_owned().await.ok()
    }
}
