//! Moving a site's records from one engine to another (`veem store
//! migrate`, issue 38 item 6): from the embedded sled database to the
//! site's etcd cluster, or back. Every record of every tree is copied in
//! commits of [`BATCH`] (under etcd's default of 128 operations a
//! transaction), then read back from both and compared one by one. The
//! source must be at the current format (it is opened as a `Store`, which
//! migrates it) and the target empty; neither may be in use (sled refuses
//! a database another process holds; an etcd prefix with a leader or a
//! candidate in its election is refused).

use anyhow::{bail, Result};

use super::{Engine, Tree};

/// Records a commit of the copy holds at most.
pub const BATCH: usize = 100;

/// What a copy did, tree by tree.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// (tree name, records copied and found equal in the target).
    pub trees: Vec<(&'static str, usize)>,
}

impl Copied {
    /// Records copied in all.
    pub fn total(&self) -> usize {
        self.trees.iter().map(|(_, n)| n).sum()
    }
}

/// Every record of tree `t` of `e`, in key order.
fn records(e: &dyn Engine, t: Tree) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut all = Vec::new();
    e.scan(t, &mut |k, v| {
        all.push((k.to_vec(), v.to_vec()));
        Ok(())
    })?;
    Ok(all)
}

/// Copies every record of `from` into `to`, which must hold none, then
/// checks them one by one. Errors: `to` holds records (nothing copied), a
/// commit fails (what was copied stays: the target is not in use, and the
/// copy can be made again into an emptied one), or a record read back
/// differs (named).
pub fn copy(from: &dyn Engine, to: &dyn Engine) -> Result<Copied> {
    for t in Tree::ALL {
        let mut any = false;
        let _ = to.scan(t, &mut |_, _| {
            any = true;
            bail!("one is enough")
        });
        if any {
            bail!("the target already holds {} records: it must be empty", t.name());
        }
    }
    let mut copied = Copied::default();
    for t in Tree::ALL {
        let src = records(from, t)?;
        for chunk in src.chunks(BATCH) {
            let writes = chunk.iter().map(|(k, v)| (t, k.clone(), Some(v.clone()))).collect();
            to.commit(writes, &[])?;
        }
        let dst = records(to, t)?;
        if dst.len() != src.len() {
            bail!("{}: {} records copied, {} found in the target", t.name(), src.len(), dst.len());
        }
        for ((k, v), (k2, v2)) in src.iter().zip(&dst) {
            if k != k2 || v != v2 {
                bail!("{} record {:?} differs in the target", t.name(), String::from_utf8_lossy(k));
            }
        }
        copied.trees.push((t.name(), src.len()));
    }
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryEngine, SledEngine, Store, Writes};

    #[test]
    fn every_record_goes_over_and_back_and_a_target_in_use_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sled = std::sync::Arc::new(SledEngine::open(&dir.path().join("db")).unwrap());
        let store = Store::on(sled.clone(), "sled").unwrap();
        let mut w = Writes::default();
        for i in 0..(BATCH * 2 + 7) {
            w.put(Tree::Vees, &format!("v{i:04}"), &i).unwrap();
        }
        w.put(Tree::Services, "s1", &"shop").unwrap();
        store.commit(w).unwrap();
        store
            .append_event(&crate::model::EventRec {
                vee_id: "v0000".into(),
                service_id: "s1".into(),
                kind: "state".into(),
                detail: "admitted -> running".into(),
                at_ms: 5,
                seq: 0,
            })
            .unwrap();
        let memory = MemoryEngine::default();
        let there = copy(&*sled, &memory).unwrap();
        assert!(
            there.trees.contains(&("vees", BATCH * 2 + 7)) && there.trees.contains(&("events", 1)),
            "{there:?}"
        );
        let back = Store::on(std::sync::Arc::new(memory), "memory").unwrap();
        assert_eq!(back.get::<usize>(Tree::Vees, "v0042").unwrap(), Some(42));
        assert_eq!(back.events().unwrap().len(), 1);
        // Into a store that holds records: refused, nothing copied.
        let e = copy(&*sled, &*sled).unwrap_err();
        assert!(e.to_string().contains("must be empty"), "{e}");
    }
}
