//! Group commit: the syncs that make commits durable, shared by the
//! commits that wait for one at the same time (as a database's log writer
//! does). A checkpoint pushes thousands of chunks, several at once; each
//! commit's own directory sync and database flush cost a few ms of disk
//! latency apiece, under the store's lock, and bounded a host's pushes to
//! about 130 MiB/s of 256 KiB chunks where the same pushes without syncs
//! ran at over 500 MiB/s. A commit now makes its change under the lock,
//! releases it, and waits for a sync that started after its change: one
//! running already does not count, one that starts later covers every
//! change made before it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::{watch, Mutex};

/// The sync a group shares (see the module documentation): run on a
/// blocking thread, never two at once.
pub struct GroupCommit {
    sync: Arc<dyn Fn() -> Result<()> + Send + Sync>,
    /// Tickets handed out: one per [`GroupCommit::durable`] call.
    requested: AtomicU64,
    /// The highest ticket a finished sync covers.
    done: watch::Sender<u64>,
    /// Held by the one caller running a sync.
    running: Mutex<()>,
}

impl GroupCommit {
    /// A group commit over `sync` (it makes every change made before it
    /// started durable).
    pub fn new(sync: impl Fn() -> Result<()> + Send + Sync + 'static) -> Self {
        Self {
            sync: Arc::new(sync),
            requested: AtomicU64::new(0),
            done: watch::channel(0).0,
            running: Mutex::new(()),
        }
    }

    /// Returns once a sync that started after this call has finished:
    /// whatever the caller changed before calling is durable. The caller
    /// whose turn it is runs the sync for everyone waiting. Errors: that
    /// sync's (each waiter it covered then tries on its own turn).
    pub async fn durable(&self) -> Result<()> {
        let ticket = self.requested.fetch_add(1, Ordering::AcqRel) + 1;
        loop {
            if *self.done.borrow() >= ticket {
                return Ok(());
            }
            let _turn = self.running.lock().await;
            if *self.done.borrow() >= ticket {
                return Ok(());
            }
            // Every ticket handed out by now is covered: their changes
            // were made before this sync starts.
            let covers = self.requested.load(Ordering::Acquire);
            let sync = self.sync.clone();
            tokio::task::spawn_blocking(move || sync()).await.context("sync task")??;
            self.done.send_modify(|d| *d = (*d).max(covers));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// Sixteen commits waiting while a sync runs share the next one:
    /// two syncs in all, not sixteen; each call returns only after a sync
    /// that started after it asked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn waiters_at_once_share_syncs_and_each_is_covered() {
        let syncs = Arc::new(AtomicUsize::new(0));
        // Opened by the test: the first sync waits until every call asked.
        let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, o) = (syncs.clone(), open.clone());
        let g = Arc::new(GroupCommit::new(move || {
            while !o.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            s.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }));
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (g, s) = (g.clone(), syncs.clone());
                tokio::spawn(async move {
                    let before = s.load(Ordering::SeqCst);
                    g.durable().await.unwrap();
                    assert!(s.load(Ordering::SeqCst) > before);
                })
            })
            .collect();
        while g.requested.load(Ordering::SeqCst) < 16 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        open.store(true, Ordering::SeqCst);
        for t in tasks {
            t.await.unwrap();
        }
        let n = syncs.load(Ordering::SeqCst);
        assert!((1..=2).contains(&n), "{n} syncs for 16 waiters");
        // One more call alone gets a sync of its own.
        g.durable().await.unwrap();
        assert_eq!(syncs.load(Ordering::SeqCst), n + 1);
    }

    /// A failed sync fails the caller that ran it; the next caller syncs
    /// again.
    #[tokio::test]
    async fn a_failed_sync_is_an_error_and_the_next_call_syncs_again() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let g = GroupCommit::new(move || match c.fetch_add(1, Ordering::SeqCst) {
            0 => anyhow::bail!("disk full"),
            _ => Ok(()),
        });
        assert!(g.durable().await.unwrap_err().to_string().contains("disk full"));
        g.durable().await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
