//! The key-value engines a [`super::Store`] keeps its records in. An
//! engine holds ordered trees of byte values under byte keys, applies a
//! set of writes across trees at once, writes a key only if it is absent,
//! and gives increasing numbers; the `Store` above it adds the record
//! kinds, JSON values, the format version and migrations. sled is the
//! embedded default ([`SledEngine`]); [`MemoryEngine`] keeps nothing
//! across a restart (tests, and a model of what an engine must do). Another
//! engine (etcd, a SQL database) implements [`Engine`] and passes
//! `tests::every_engine_keeps_the_contract`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use sled::Transactional;

use super::Tree;

/// One write of a commit: `(tree, key, value)`; a `None` value removes
/// the key.
pub type Write = (Tree, Vec<u8>, Option<Vec<u8>>);

/// What [`Engine::scan`] calls with each key and value.
pub type Visit<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> Result<()>;

/// What a [`super::Store`] needs of its storage. Every method that writes
/// is durable when it returns (a crash right after loses nothing it
/// acknowledged).
pub trait Engine: Send + Sync {
    /// The value under `key` in tree `t`, if any.
    fn get(&self, t: Tree, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Calls `f` with every key and value of tree `t`, in key (byte)
    /// order; an error of `f` stops the scan and is returned.
    fn scan(&self, t: Tree, f: Visit) -> Result<()>;
    /// Applies `writes` in order, across trees, all at once: after a crash
    /// either all of them are there or none.
    fn commit(&self, writes: Vec<Write>) -> Result<()>;
    /// Writes `value` under `key` in tree `t` unless the key exists; true
    /// when it wrote.
    fn insert_new(&self, t: Tree, key: &[u8], value: Vec<u8>) -> Result<bool>;
    /// A number greater than every number this engine gave before, also
    /// across restarts.
    fn next_id(&self) -> Result<u64>;
}

/// [`Engine`] in sled: one sled tree per [`Tree`], each write flushed.
pub struct SledEngine {
    db: sled::Db,
}

impl SledEngine {
    /// Opens (or creates) the sled database at `path` with a 64 MiB page
    /// cache (the VEEM keeps its hot records in memory; sled's default is
    /// 1 GiB). Errors: the database cannot be opened (in use, damaged).
    pub fn open(path: &Path) -> Result<Self> {
        let db = interfaces::database::open_database(path, 64).with_context(|| format!("open database {}", path.display()))?;
        Ok(Self { db })
    }

    fn tree(&self, t: Tree) -> Result<sled::Tree> {
        Ok(self.db.open_tree(t.name())?)
    }
}

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

    fn commit(&self, writes: Vec<Write>) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut kinds: Vec<Tree> = Vec::new();
        for (t, _, _) in &writes {
            if !kinds.contains(t) {
                kinds.push(*t);
            }
        }
        if let [t] = kinds[..] {
            // One tree: a batch is as atomic, and cheaper for the
            // planner's first full write (100,000s of records).
            let mut batch = sled::Batch::default();
            for (_, key, value) in writes {
                match value {
                    Some(v) => batch.insert(key, v),
                    None => batch.remove(key),
                }
            }
            self.tree(t)?.apply_batch(batch)?;
            self.db.flush()?;
            return Ok(());
        }
        let trees = kinds.iter().map(|t| self.tree(*t)).collect::<Result<Vec<_>>>()?;
        trees
            .as_slice()
            .transaction(|tx| {
                for (t, key, value) in &writes {
                    let i = kinds.iter().position(|k| k == t).expect("tree listed");
                    match value {
                        Some(v) => tx[i].insert(key.as_slice(), v.as_slice())?,
                        None => tx[i].remove(key.as_slice())?,
                    };
                }
                Ok::<(), sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| anyhow::anyhow!("commit of {} records: {e:?}", writes.len()))?;
        self.db.flush()?;
        Ok(())
    }

    fn insert_new(&self, t: Tree, key: &[u8], value: Vec<u8>) -> Result<bool> {
        let r = self.tree(t)?.compare_and_swap(key, None as Option<&[u8]>, Some(value))?;
        self.db.flush()?;
        Ok(r.is_ok())
    }

    fn next_id(&self) -> Result<u64> {
        Ok(self.db.generate_id()?)
    }
}

/// [`Engine`] in memory: everything is lost when it is dropped.
#[derive(Default)]
pub struct MemoryEngine {
    /// The values by tree name and key, and the last number given.
    state: Mutex<(Records, u64)>,
}

type Records = BTreeMap<(&'static str, Vec<u8>), Vec<u8>>;

impl Engine for MemoryEngine {
    fn get(&self, t: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.state.lock().unwrap().0.get(&(t.name(), key.to_vec())).cloned())
    }

    fn scan(&self, t: Tree, f: Visit) -> Result<()> {
        // A copy: `f` may write to the engine.
        let records: Vec<(Vec<u8>, Vec<u8>)> = {
            let state = self.state.lock().unwrap();
            let from = (t.name(), Vec::new());
            state
                .0
                .range(from..)
                .take_while(|((tree, _), _)| *tree == t.name())
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect()
        };
        records.iter().try_for_each(|(k, v)| f(k, v))
    }

    fn commit(&self, writes: Vec<Write>) -> Result<()> {
        let mut state = self.state.lock().unwrap();
        for (t, key, value) in writes {
            match value {
                Some(v) => state.0.insert((t.name(), key), v),
                None => state.0.remove(&(t.name(), key)),
            };
        }
        Ok(())
    }

    fn insert_new(&self, t: Tree, key: &[u8], value: Vec<u8>) -> Result<bool> {
        let mut state = self.state.lock().unwrap();
        let entry = state.0.entry((t.name(), key.to_vec()));
        match entry {
            std::collections::btree_map::Entry::Occupied(_) => Ok(false),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(value);
                Ok(true)
            }
        }
    }

    fn next_id(&self) -> Result<u64> {
        let mut state = self.state.lock().unwrap();
        state.1 += 1;
        Ok(state.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every engine must do, as the `Store` relies on it.
    fn keeps_the_contract(e: &dyn Engine) {
        assert_eq!(e.get(Tree::Vees, b"v1").unwrap(), None);
        e.commit(vec![
            (Tree::Vees, b"v2".to_vec(), Some(b"two".to_vec())),
            (Tree::Vees, b"v1".to_vec(), Some(b"one".to_vec())),
            (Tree::Services, b"s1".to_vec(), Some(b"svc".to_vec())),
            (Tree::Services, b"s1".to_vec(), None),
            (Tree::Services, b"s2".to_vec(), Some(b"svc2".to_vec())),
        ])
        .unwrap();
        assert_eq!(e.get(Tree::Vees, b"v1").unwrap().as_deref(), Some(&b"one"[..]));
        assert_eq!(e.get(Tree::Services, b"s1").unwrap(), None, "a later write of the same key wins");
        // Trees are apart and in key order.
        let mut seen = Vec::new();
        e.scan(Tree::Vees, &mut |k, v| {
            seen.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [(b"v1".to_vec(), b"one".to_vec()), (b"v2".to_vec(), b"two".to_vec())]);
        let stop = e.scan(Tree::Vees, &mut |_, _| anyhow::bail!("enough"));
        assert!(stop.is_err());
        assert!(e.insert_new(Tree::Meta, b"n", b"1".to_vec()).unwrap());
        assert!(!e.insert_new(Tree::Meta, b"n", b"2".to_vec()).unwrap());
        assert_eq!(e.get(Tree::Meta, b"n").unwrap().as_deref(), Some(&b"1"[..]));
        let (a, b) = (e.next_id().unwrap(), e.next_id().unwrap());
        assert!(b > a);
    }

    #[test]
    fn every_engine_keeps_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        keeps_the_contract(&SledEngine::open(&dir.path().join("db")).unwrap());
        keeps_the_contract(&MemoryEngine::default());
    }

    #[test]
    fn sled_keeps_its_records_and_numbers_across_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let first = {
            let e = SledEngine::open(dir.path()).unwrap();
            e.commit(vec![(Tree::Meta, b"k".to_vec(), Some(b"v".to_vec()))]).unwrap();
            e.next_id().unwrap()
        };
        let e = SledEngine::open(dir.path()).unwrap();
        assert_eq!(e.get(Tree::Meta, b"k").unwrap().as_deref(), Some(&b"v"[..]));
        assert!(e.next_id().unwrap() > first);
    }
}
