//! An engine for the store's and the core's unit tests: the memory
//! engine, counting the whole-tree counts asked of it, and whose next
//! commit, once armed, waits until released (as a commit waits for etcd's
//! quorum or a slow disk).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;

use crate::store::{Engine, MemoryEngine, Result, Revision, Tree, Unchanged, Visit, Write};

/// See the module documentation.
#[derive(Default)]
pub struct ObservedEngine {
    inner: MemoryEngine,
    counts: AtomicUsize,
    gate: Mutex<Option<(Sender<()>, Receiver<()>)>>,
}

impl ObservedEngine {
    /// How many whole-tree counts were asked so far.
    pub fn counts(&self) -> usize {
        self.counts.load(Ordering::SeqCst)
    }

    /// Arms the gate: the receiver hears when the next commit waits, the
    /// sender lets it go on.
    pub fn arm(&self) -> (Receiver<()>, Sender<()>) {
        let (entered_tx, entered_rx) = channel();
        let (release_tx, release_rx) = channel();
        *self.gate.lock().unwrap() = Some((entered_tx, release_rx));
        (entered_rx, release_tx)
    }
}

impl Engine for ObservedEngine {
    fn get(&self, t: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.get(t, key)
    }
    fn scan(&self, t: Tree, f: Visit) -> Result<()> {
        self.inner.scan(t, f)
    }
    fn revision(&self) -> Result<Revision> {
        self.inner.revision()
    }
    fn commit(&self, writes: Vec<Write>, unchanged: &[Unchanged]) -> Result<Revision> {
        let gate = self.gate.lock().unwrap().take();
        if let Some((entered, release)) = gate {
            entered.send(()).unwrap();
            release.recv().unwrap();
        }
        self.inner.commit(writes, unchanged)
    }
    fn insert_new(&self, t: Tree, key: &[u8], value: Vec<u8>) -> Result<bool> {
        self.inner.insert_new(t, key, value)
    }
    fn next_id(&self) -> Result<u64> {
        self.inner.next_id()
    }
    fn scan_from(&self, t: Tree, start: &[u8], limit: usize, f: Visit) -> Result<()> {
        self.inner.scan_from(t, start, limit, f)
    }
    fn scan_back(&self, t: Tree, limit: usize, f: Visit) -> Result<()> {
        self.inner.scan_back(t, limit, f)
    }
    fn count(&self, t: Tree) -> Result<u64> {
        self.counts.fetch_add(1, Ordering::SeqCst);
        self.inner.count(t)
    }
    fn remove_before(&self, t: Tree, end: &[u8]) -> Result<Revision> {
        self.inner.remove_before(t, end)
    }
}
