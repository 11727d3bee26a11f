//! The key-value engines a [`super::Store`] keeps its records in: the
//! store's port. An engine holds ordered trees of byte values under byte
//! keys, applies a set of writes across trees at once, writes a key only
//! if it is absent, and gives increasing numbers; the `Store` above it
//! adds the record kinds, JSON values, the format version and migrations.
//!
//! Every commit makes a new store revision, higher than every one before
//! (as etcd's), and every key remembers the revision that last wrote it.
//! A commit may carry conditions ([`Unchanged`]: this key was not written
//! after the revision I read it at), checked in the same atomic step as
//! its writes: a compare-and-swap over several records, so that a writer
//! whose reads are stale (another VEEM wrote meanwhile) writes nothing and
//! gets [`Conflict`] (DESIGN.md §10, §11).
//!
//! sled is the embedded default ([`SledEngine`]); [`MemoryEngine`] keeps
//! nothing across a restart (tests, and a model of what an engine must
//! do). Another engine (etcd, a SQL database) implements [`Engine`] and
//! passes the same contract (`sim::engine_contract`: sled and memory in the
//! unit tests, etcd in `tests/tests/store_etcd.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use sled::Transactional;

use super::{StoreError, Tree};

/// A store call's result.
type Result<T, E = StoreError> = std::result::Result<T, E>;

/// One write of a commit: `(tree, key, value)`; a `None` value removes
/// the key.
pub type Write = (Tree, Vec<u8>, Option<Vec<u8>>);

/// What [`Engine::scan`] calls with each key and value.
pub type Visit<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> anyhow::Result<()>;

/// A store revision: the number of the commit that made it (0: nothing
/// committed yet). Every commit makes a higher one.
pub type Revision = u64;

/// A commit's condition: key `key` of tree `tree` was not written (put or
/// removed) after revision `since`, the revision at which the writer read
/// it, and found then (`existed`) or not. `since` 0: the key was never
/// written. (An engine that keeps the revision of a removal, as sled and
/// memory do, needs no more; etcd forgets it, and checks instead that a
/// key seen then is still there.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unchanged {
    pub tree: Tree,
    pub key: Vec<u8>,
    pub since: Revision,
    pub existed: bool,
}

/// A commit refused, with nothing written, because a record it was
/// conditioned on was written after the writer read it (by another writer
/// of the same database: another VEEM of the site).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the {tree} record {key:?} was written at revision {written}, after revision {since} at which it was read (another VEEM of this site wrote it): nothing committed", tree = tree.name())]
pub struct Conflict {
    pub tree: Tree,
    pub key: String,
    pub since: Revision,
    pub written: Revision,
}

impl Conflict {
    fn of(c: &Unchanged, written: Revision) -> Self {
        Conflict {
            tree: c.tree,
            key: String::from_utf8_lossy(&c.key).into_owned(),
            since: c.since,
            written,
        }
    }
}

/// What a [`super::Store`] needs of its storage. Every method that writes
/// is durable when it returns (a crash right after loses nothing it
/// acknowledged).
pub trait Engine: Send + Sync {
    /// The value under `key` in tree `t`, if any.
    fn get(&self, t: Tree, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Calls `f` with every key and value of tree `t`, in key (byte)
    /// order; an error of `f` stops the scan and is returned.
    fn scan(&self, t: Tree, f: Visit) -> Result<()>;
    /// The revision of the last commit (0 before the first): what a
    /// reader notes before it reads, to condition its commit on
    /// ([`Unchanged`]).
    fn revision(&self) -> Result<Revision>;
    /// When every condition of `unchanged` holds, applies `writes` in
    /// order, across trees, all at once (after a crash either all of them
    /// are there or none) and returns the new revision, which every key
    /// written now carries. Errors: [`Conflict`] (in the error's chain)
    /// when a condition does not hold, and then nothing is written; the
    /// engine's own.
    fn commit(&self, writes: Vec<Write>, unchanged: &[Unchanged]) -> Result<Revision>;
    /// Writes `value` under `key` in tree `t` unless the key exists (a
    /// commit of its own); true when it wrote.
    fn insert_new(&self, t: Tree, key: &[u8], value: Vec<u8>) -> Result<bool>;
    /// A number greater than every number this engine gave before, also
    /// across restarts.
    fn next_id(&self) -> Result<u64>;
    /// Calls `f` with the keys of tree `t` from `start` on (`start`
    /// itself included), in key order, and their values: `limit` of them
    /// at most, so that a reader of a large tree (the event log) reads a
    /// page, not the tree. An error of `f` stops the scan.
    fn scan_from(&self, t: Tree, start: &[u8], limit: usize, f: Visit) -> Result<()>;
    /// Calls `f` with the last `limit` keys of tree `t` and their values,
    /// the last key first.
    fn scan_back(&self, t: Tree, limit: usize, f: Visit) -> Result<()>;
    /// How many keys tree `t` holds.
    fn count(&self, t: Tree) -> Result<u64>;
    /// Removes every key of tree `t` before `end` (in byte order) in one
    /// commit, which it returns (the revision as it was when there was
    /// nothing to remove). The caller bounds how many keys that is
    /// (retention removes a page at a time).
    fn remove_before(&self, t: Tree, end: &[u8]) -> Result<Revision>;
}

/// [`Engine`] in sled: one sled tree per [`Tree`], each write flushed.
/// The revisions live in one more sled tree ([`REVISIONS`]): under the
/// empty key the last commit's revision, under `<tree> 0x00 <key>` the
/// revision that last wrote each key (events aside: they are only
/// appended, never a condition), written in the transaction of the commit.
///
/// Dropped, it closes its database with a snapshot of its state
/// ([`interfaces::database::close_database`]), so that the next start does
/// not replay the log of this run.
pub struct SledEngine {
    /// The database and its revisions' tree; taken when dropped.
    open: Option<(sled::Db, sled::Tree)>,
    path: PathBuf,
}

/// The sled tree of the revisions (no record kind has this name).
const REVISIONS: &str = "_revisions";
/// The key, in [`REVISIONS`], of the last commit's revision.
const LAST: &[u8] = b"";

/// The key of `key` of tree `t` in the revisions.
fn revision_key(t: Tree, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(t.name().len() + 1 + key.len());
    k.extend_from_slice(t.name().as_bytes());
    k.push(0);
    k.extend_from_slice(key);
    k
}

fn revision_of(raw: Option<sled::IVec>) -> Revision {
    raw.and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

impl SledEngine {
    /// Opens (or creates) the sled database at `path` with a 16 MiB page
    /// cache (the VEEM keeps its hot records in memory; sled's default is
    /// 1 GiB; at 100,000 VEEs 64 MiB held some 30 MiB more and read no
    /// faster). Errors: the database cannot be opened (in use, damaged).
    pub fn open(path: &Path) -> Result<Self> {
        let db = interfaces::database::open_database(path, 16).with_context(|| format!("open database {}", path.display()))?;
        let revisions = db.open_tree(REVISIONS)?;
        Ok(Self {
            open: Some((db, revisions)),
            path: path.to_path_buf(),
        })
    }

    /// The database and its revisions' tree (there until dropped).
    fn handles(&self) -> (&sled::Db, &sled::Tree) {
        let (db, revisions) = self.open.as_ref().expect("a SledEngine is open until dropped");
        (db, revisions)
    }

    fn tree(&self, t: Tree) -> Result<sled::Tree> {
        Ok(self.handles().0.open_tree(t.name())?)
    }
}

impl Drop for SledEngine {
    fn drop(&mut self) {
        let Some((db, revisions)) = self.open.take() else { return };
        drop(revisions);
        if let Err(e) = interfaces::database::close_database(db, &self.path) {
            tracing::warn!(path = %self.path.display(), "database closed without its snapshot (the next start replays its log): {e}");
        }
    }
}

type Tx = sled::transaction::ConflictableTransactionError<Conflict>;

impl Engine for SledEngine {
    fn get(&self, t: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree(t)?.get(key)?.map(|v| v.to_vec()))
    }

    fn scan(&self, t: Tree, f: Visit) -> Result<()> {
        for kv in self.tree(t)?.iter() {
            let (k, v) = kv?;
            f(&k, &v)?;
        }
        Ok(())
    }

    fn revision(&self) -> Result<Revision> {
        Ok(revision_of(self.handles().1.get(LAST)?))
    }

    fn commit(&self, writes: Vec<Write>, unchanged: &[Unchanged]) -> Result<Revision> {
        if writes.is_empty() && unchanged.is_empty() {
            return self.revision();
        }
        let mut kinds: Vec<Tree> = Vec::new();
        for (t, _, _) in &writes {
            if !kinds.contains(t) {
                kinds.push(*t);
            }
        }
        let mut trees = kinds.iter().map(|t| self.tree(*t)).collect::<Result<Vec<_>>>()?;
        trees.push(self.handles().1.clone());
        let committed = trees.as_slice().transaction(|tx| {
            let revisions = &tx[kinds.len()];
            for c in unchanged {
                let written = revision_of(revisions.get(revision_key(c.tree, &c.key))?);
                if written > c.since {
                    return Err(Tx::Abort(Conflict::of(c, written)));
                }
            }
            let last = revision_of(revisions.get(LAST)?);
            if writes.is_empty() {
                return Ok(last);
            }
            let next = last + 1;
            for (t, key, value) in &writes {
                let i = kinds.iter().position(|k| k == t).expect("tree listed");
                match value {
                    Some(v) => tx[i].insert(key.as_slice(), v.as_slice())?,
                    None => tx[i].remove(key.as_slice())?,
                };
                if t.versioned() {
                    revisions.insert(revision_key(*t, key), &next.to_be_bytes())?;
                }
            }
            revisions.insert(LAST, &next.to_be_bytes())?;
            Ok(next)
        });
        let revision = match committed {
            Ok(r) => r,
            Err(sled::transaction::TransactionError::Abort(conflict)) => return Err(conflict.into()),
            Err(sled::transaction::TransactionError::Storage(e)) => {
                return Err(anyhow::Error::from(e).context(format!("commit of {} records", writes.len())).into())
            }
        };
        self.handles().0.flush()?;
        Ok(revision)
    }

    fn insert_new(&self, t: Tree, key: &[u8], value: Vec<u8>) -> Result<bool> {
        let trees = [self.tree(t)?, self.handles().1.clone()];
        let wrote = trees
            .as_slice()
            .transaction(|tx| {
                if tx[0].get(key)?.is_some() {
                    return Ok(false);
                }
                let next = revision_of(tx[1].get(LAST)?) + 1;
                tx[0].insert(key, value.as_slice())?;
                tx[1].insert(revision_key(t, key), &next.to_be_bytes())?;
                tx[1].insert(LAST, &next.to_be_bytes())?;
                Ok::<bool, Tx>(true)
            })
            .map_err(|e| anyhow::anyhow!("insert of {} record: {e:?}", t.name()))?;
        self.handles().0.flush()?;
        Ok(wrote)
    }

    fn next_id(&self) -> Result<u64> {
        Ok(self.handles().0.generate_id()?)
    }

    fn scan_from(&self, t: Tree, start: &[u8], limit: usize, f: Visit) -> Result<()> {
        for kv in self.tree(t)?.range(start..).take(limit) {
            let (k, v) = kv?;
            f(&k, &v)?;
        }
        Ok(())
    }

    fn scan_back(&self, t: Tree, limit: usize, f: Visit) -> Result<()> {
        for kv in self.tree(t)?.iter().rev().take(limit) {
            let (k, v) = kv?;
            f(&k, &v)?;
        }
        Ok(())
    }

    fn count(&self, t: Tree) -> Result<u64> {
        Ok(self.tree(t)?.len() as u64)
    }

    fn remove_before(&self, t: Tree, end: &[u8]) -> Result<Revision> {
        let keys = self.tree(t)?.range(..end).keys().collect::<Result<Vec<_>, _>>()?;
        self.commit(keys.into_iter().map(|k| (t, k.to_vec(), None)).collect(), &[])
    }
}

/// [`Engine`] in memory: everything is lost when it is dropped.
#[derive(Default)]
pub struct MemoryEngine {
    state: Mutex<Memory>,
}

#[derive(Default)]
struct Memory {
    /// The values by tree name and key.
    records: BTreeMap<(&'static str, Vec<u8>), Vec<u8>>,
    /// The revision that last wrote each key.
    written: BTreeMap<(&'static str, Vec<u8>), Revision>,
    /// The last commit's revision.
    revision: Revision,
    /// The last number given.
    id: u64,
}

impl Engine for MemoryEngine {
    fn get(&self, t: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.state.lock().unwrap().records.get(&(t.name(), key.to_vec())).cloned())
    }

    fn scan(&self, t: Tree, f: Visit) -> Result<()> {
        // A copy: `f` may write to the engine.
        let records: Vec<(Vec<u8>, Vec<u8>)> = {
            let state = self.state.lock().unwrap();
            let from = (t.name(), Vec::new());
            state
                .records
                .range(from..)
                .take_while(|((tree, _), _)| *tree == t.name())
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect()
        };
        Ok(records.iter().try_for_each(|(k, v)| f(k, v))?)
    }

    fn revision(&self) -> Result<Revision> {
        Ok(self.state.lock().unwrap().revision)
    }

    fn commit(&self, writes: Vec<Write>, unchanged: &[Unchanged]) -> Result<Revision> {
        let mut state = self.state.lock().unwrap();
        for c in unchanged {
            let written = state.written.get(&(c.tree.name(), c.key.clone())).copied().unwrap_or(0);
            if written > c.since {
                return Err(Conflict::of(c, written).into());
            }
        }
        if writes.is_empty() {
            return Ok(state.revision);
        }
        state.revision += 1;
        let next = state.revision;
        for (t, key, value) in writes {
            if t.versioned() {
                state.written.insert((t.name(), key.clone()), next);
            }
            match value {
                Some(v) => state.records.insert((t.name(), key), v),
                None => state.records.remove(&(t.name(), key)),
            };
        }
        Ok(next)
    }

    fn insert_new(&self, t: Tree, key: &[u8], value: Vec<u8>) -> Result<bool> {
        let mut state = self.state.lock().unwrap();
        if state.records.contains_key(&(t.name(), key.to_vec())) {
            return Ok(false);
        }
        state.revision += 1;
        let next = state.revision;
        state.written.insert((t.name(), key.to_vec()), next);
        state.records.insert((t.name(), key.to_vec()), value);
        Ok(true)
    }

    fn next_id(&self) -> Result<u64> {
        let mut state = self.state.lock().unwrap();
        state.id += 1;
        Ok(state.id)
    }

    fn scan_from(&self, t: Tree, start: &[u8], limit: usize, f: Visit) -> Result<()> {
        let records = self.copy(t, start, |r| r.take(limit).collect());
        Ok(records.iter().try_for_each(|(k, v)| f(k, v))?)
    }

    fn scan_back(&self, t: Tree, limit: usize, f: Visit) -> Result<()> {
        let records = self.copy(t, b"", |r| r.rev().take(limit).collect());
        Ok(records.iter().try_for_each(|(k, v)| f(k, v))?)
    }

    fn count(&self, t: Tree) -> Result<u64> {
        Ok(self.copy(t, b"", |r| r.map(|_| (Vec::new(), Vec::new())).collect()).len() as u64)
    }

    fn remove_before(&self, t: Tree, end: &[u8]) -> Result<Revision> {
        let keys = self.copy(t, b"", |r| r.take_while(|(k, _)| k.as_slice() < end).collect());
        self.commit(keys.into_iter().map(|(k, _)| (t, k, None)).collect(), &[])
    }
}

impl MemoryEngine {
    /// What `pick` takes of the records of tree `t` from key `start` on
    /// (it may read them backwards), copied: a visitor may write to the
    /// engine. (A model of an engine: the records of the trees after
    /// `t` are skipped over.)
    fn copy(
        &self,
        t: Tree,
        start: &[u8],
        pick: impl FnOnce(&mut dyn DoubleEndedIterator<Item = (Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let state = self.state.lock().unwrap();
        let mine: Vec<(Vec<u8>, Vec<u8>)> = state
            .records
            .range((t.name(), start.to_vec())..)
            .take_while(|((tree, _), _)| *tree == t.name())
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect();
        pick(&mut mine.into_iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_keeps_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        crate::sim::engine_contract(&SledEngine::open(&dir.path().join("db")).unwrap());
        crate::sim::engine_contract(&MemoryEngine::default());
    }

    #[test]
    fn sled_keeps_its_records_and_numbers_across_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let first = {
            let e = SledEngine::open(dir.path()).unwrap();
            let revision = e.commit(vec![(Tree::Meta, b"k".to_vec(), Some(b"v".to_vec()))], &[]).unwrap();
            (e.next_id().unwrap(), revision)
        };
        let e = SledEngine::open(dir.path()).unwrap();
        assert_eq!(e.get(Tree::Meta, b"k").unwrap().as_deref(), Some(&b"v"[..]));
        assert!(e.next_id().unwrap() > first.0);
        assert_eq!(e.revision().unwrap(), first.1, "the revision too");
        let stale = Unchanged {
            tree: Tree::Meta,
            key: b"k".to_vec(),
            since: first.1 - 1,
            existed: false,
        };
        assert!(e.commit(vec![], &[stale]).is_err(), "and what wrote each key");
    }
}
