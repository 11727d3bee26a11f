//! Persistent state of the VEEM in sled: one tree per record kind, values
//! JSON. Survives restarts; every write is flushed before the caller goes on
//! (a `kill -9` loses nothing that was acknowledged).

use std::path::Path;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::model::EventRec;

/// The record kinds (sled trees).
#[derive(Clone, Copy, Debug)]
pub enum Tree {
    Services,
    Vees,
    Checkpoints,
    Migrations,
    Usage,
    Violations,
    Events,
    Meta,
    /// VEEs recovered away from a silent peer site (peer_watch::FenceRec).
    Fenced,
    /// The planner's header and entries (crate::planner_store).
    Planner,
}

impl Tree {
    fn name(self) -> &'static str {
        match self {
            Tree::Services => "services",
            Tree::Vees => "vees",
            Tree::Checkpoints => "checkpoints",
            Tree::Migrations => "migrations",
            Tree::Usage => "usage",
            Tree::Violations => "violations",
            Tree::Events => "events",
            Tree::Meta => "meta",
            Tree::Fenced => "fenced",
            Tree::Planner => "planner",
        }
    }
}

/// The VEEM's database.
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
}

impl Store {
    pub fn open(path: &Path) -> Result<Self> {
        // Every write flushes itself. The VEEM keeps its hot records in
        // memory, so sled's page cache stays small (64 MiB instead of
        // sled's 1 GiB default).
        let db = interfaces::database::open_database(path, 64).with_context(|| format!("open database {}", path.display()))?;
        Ok(Self { db })
    }

    fn tree(&self, t: Tree) -> Result<sled::Tree> {
        Ok(self.db.open_tree(t.name())?)
    }

    /// Calls `f` with every key and raw value of a tree, in key order,
    /// without holding them all in memory at once.
    pub fn scan(&self, t: Tree, mut f: impl FnMut(&str, &[u8]) -> Result<()>) -> Result<()> {
        for kv in self.tree(t)?.iter() {
            let (k, v) = kv?;
            f(&String::from_utf8_lossy(&k), &v)?;
        }
        Ok(())
    }

    /// Applies `batch` to tree `t` atomically (all of it or none of it
    /// after a crash) and flushes.
    pub fn apply(&self, t: Tree, batch: sled::Batch) -> Result<()> {
        self.tree(t)?.apply_batch(batch)?;
        self.db.flush()?;
        Ok(())
    }

    /// Writes `value` under `key` and flushes.
    pub fn put<T: Serialize>(&self, t: Tree, key: &str, value: &T) -> Result<()> {
        self.tree(t)?.insert(key.as_bytes(), serde_json::to_vec(value)?)?;
        self.db.flush()?;
        Ok(())
    }

    /// Writes `value` under `key` unless the key exists; true when written.
    pub fn put_new<T: Serialize>(&self, t: Tree, key: &str, value: &T) -> Result<bool> {
        let r = self
            .tree(t)?
            .compare_and_swap(key.as_bytes(), None as Option<&[u8]>, Some(serde_json::to_vec(value)?))?;
        self.db.flush()?;
        Ok(r.is_ok())
    }

    pub fn get<T: DeserializeOwned>(&self, t: Tree, key: &str) -> Result<Option<T>> {
        match self.tree(t)?.get(key.as_bytes())? {
            Some(v) => Ok(Some(
                serde_json::from_slice(&v).with_context(|| format!("{} record {key}", t.name()))?,
            )),
            None => Ok(None),
        }
    }

    /// Every record of a tree, in key order.
    pub fn list<T: DeserializeOwned>(&self, t: Tree) -> Result<Vec<T>> {
        self.tree(t)?.iter().values().map(|v| Ok(serde_json::from_slice(&v?)?)).collect()
    }

    pub fn remove(&self, t: Tree, key: &str) -> Result<()> {
        self.tree(t)?.remove(key.as_bytes())?;
        self.db.flush()?;
        Ok(())
    }

    /// Appends an event (keys are a monotonic sequence).
    pub fn append_event(&self, e: &EventRec) -> Result<()> {
        let id = self.db.generate_id()?;
        self.tree(Tree::Events)?.insert(id.to_be_bytes(), serde_json::to_vec(e)?)?;
        self.db.flush()?;
        Ok(())
    }

    /// Events in order.
    pub fn events(&self) -> Result<Vec<EventRec>> {
        self.list(Tree::Events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopen() {
        let t = tempfile::tempdir().unwrap();
        {
            let s = Store::open(t.path()).unwrap();
            s.put(Tree::Meta, "k", &42u32).unwrap();
            assert!(s.put_new(Tree::Meta, "n", &1u32).unwrap());
            assert!(!s.put_new(Tree::Meta, "n", &2u32).unwrap());
            s.append_event(&EventRec {
                vee_id: "v".into(),
                service_id: "s".into(),
                kind: "k".into(),
                detail: "".into(),
                at_ms: 1,
            })
            .unwrap();
        }
        let s = Store::open(t.path()).unwrap();
        assert_eq!(s.get::<u32>(Tree::Meta, "k").unwrap(), Some(42));
        assert_eq!(s.get::<u32>(Tree::Meta, "n").unwrap(), Some(1));
        assert_eq!(s.events().unwrap().len(), 1);
    }
}
