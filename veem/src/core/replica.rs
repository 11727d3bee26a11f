//! A standby's copy of what a leader's core starts from (issue 38, item
//! 2): every VEE record, with the revision that last wrote it, and the
//! planner's header and entries, read once from the site's etcd cluster
//! and then kept current from etcd's watch ([`crate::store::Changes`]).
//! When the standby is elected it takes this copy instead of reading and
//! decoding every record again ([`Replica::take`]), after seeing its own
//! barrier write come through the watch: every write before it (the old
//! leader's last ones) is then in the copy.
//!
//! A copy it cannot trust (a record it could not decode, a store of
//! another format, a watch that ended) is not taken: the leader then
//! reads the store as a restarted VEEM does ([`super::Loaded::read`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::records::VeeRecords;
use super::Loaded;
use crate::model::VeeRec;
use crate::planner::{Planner, PlannerEntry, PlannerHeader};
use crate::planner_store::{decode_entry, decode_header, PlannerStore, HEADER};
use crate::ports::{within as within_on, Clock};
use crate::store::{Change, EtcdEngine, Revision, Store, Tree, WatchEnded, Writes, FORMAT_KEY, FORMAT_VERSION};

/// The trees a core starts from.
const TREES: [Tree; 3] = [Tree::Meta, Tree::Vees, Tree::Planner];

/// The key of the barrier a new leader writes ([`Replica::take`]) in the
/// meta tree.
const BARRIER_KEY: &str = "_takeover";

/// The copy (see the module doc).
#[derive(Default)]
struct SiteCopy {
    records: VeeRecords,
    header: Option<PlannerHeader>,
    entries: HashMap<String, PlannerEntry>,
    /// Why it cannot be taken, if it cannot.
    unusable: Option<String>,
}

impl SiteCopy {
    /// Applies the change of `tree`'s `key` to `value` (`None`: removed)
    /// at `revision`.
    fn apply(&mut self, tree: Tree, key: &[u8], value: Option<&[u8]>, revision: Revision) {
        if let Err(e) = self.try_apply(tree, key, value, revision) {
            self.unusable.get_or_insert(format!("{e:#}"));
        }
    }

    fn try_apply(&mut self, tree: Tree, key: &[u8], value: Option<&[u8]>, revision: Revision) -> Result<()> {
        // The watch brings every tree's changes; the others' keys need not
        // be text (an event's is its number, 8 bytes big-endian).
        if !TREES.contains(&tree) {
            return Ok(());
        }
        let key = std::str::from_utf8(key).with_context(|| format!("a key of tree {} that is not UTF-8", tree.name()))?;
        match (tree, value) {
            (Tree::Vees, Some(v)) => {
                let rec: VeeRec = serde_json::from_slice(v).with_context(|| format!("vees record {key}"))?;
                self.records.insert(rec, revision);
            }
            (Tree::Vees, None) => self.records.remove(key, revision),
            (Tree::Planner, Some(v)) if key == HEADER => self.header = Some(decode_header(v)?),
            (Tree::Planner, None) if key == HEADER => self.header = None,
            (Tree::Planner, Some(v)) => {
                self.entries.insert(key.to_string(), decode_entry(key, v)?);
            }
            (Tree::Planner, None) => {
                self.entries.remove(key);
            }
            (Tree::Meta, v) if key == FORMAT_KEY => {
                let found: Option<u32> = v.map(serde_json::from_slice).transpose().context("format version")?;
                anyhow::ensure!(
                    found == Some(FORMAT_VERSION),
                    "the store is of format {found:?}, not {FORMAT_VERSION}"
                );
            }
            _ => {}
        }
        Ok(())
    }
}

/// A standby's copy, kept current in the background until taken or
/// dropped.
pub struct Replica {
    copy: Arc<Mutex<SiteCopy>>,
    /// The revision the copy is current at (every change up to it
    /// applied); 0 until it is first read.
    current: watch::Receiver<Revision>,
    stop: CancellationToken,
    /// Its waits: the retries of its reads and watches, the takeover's
    /// wait for the barrier.
    clock: Arc<dyn Clock>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Replica {
    /// Starts reading the site's records of `engine` and following their
    /// changes (an open-ended window's renewal due `renew_ahead_s` seconds
    /// before its end, as the core's records say). A failed read is tried
    /// again each second; a broken watch is watched again from the last
    /// revision seen, a compacted one read again; every wait on `clock`.
    pub fn follow(engine: Arc<EtcdEngine>, renew_ahead_s: i64, clock: Arc<dyn Clock>) -> Self {
        let copy = Arc::new(Mutex::new(SiteCopy::default()));
        let (tx, current) = watch::channel(0);
        let stop = CancellationToken::new();
        tokio::spawn({
            let (copy, stop, clock) = (copy.clone(), stop.clone(), clock.clone());
            async move {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = keep_current(engine, renew_ahead_s, copy, tx, &*clock) => {}
                }
            }
        });
        Self { copy, current, stop, clock }
    }

    /// The revision the copy is current at (0: not read yet).
    pub fn current(&self) -> Revision {
        *self.current.borrow()
    }

    /// Waits, at most `within`, until the copy is current at `revision`
    /// or later. Returns whether it is.
    pub async fn wait_for(&self, revision: Revision, within: Duration) -> bool {
        let mut current = self.current.clone();
        within_on(&*self.clock, within, current.wait_for(|r| *r >= revision))
            .await
            .is_some_and(|r| r.is_ok())
    }

    /// Takes the copy for a new leader over `store` (fenced by its
    /// election key): writes a barrier (a fenced commit, so every earlier
    /// write of the site, the old leader's last ones too, has a lower
    /// revision), waits at most `within` for the watch to bring it, and
    /// hands over the records and the planner. `Ok(None)`, with the reason
    /// logged, when the copy cannot be taken (not read yet, behind, or
    /// unusable): read the store instead. Errors: the barrier cannot be
    /// written (the store does not answer, or this VEEM no longer leads).
    pub async fn take(self, store: &Store, epoch: i64, within: Duration) -> Result<Option<Loaded>> {
        if self.current() == 0 {
            // Not read once yet (the site's first VEEM, elected at once):
            // reading the store is no slower.
            return Ok(None);
        }
        let mut w = Writes::default();
        w.put(Tree::Meta, BARRIER_KEY, &epoch)?;
        let barrier = {
            let store = store.clone();
            tokio::task::spawn_blocking(move || store.commit(w)).await??
        };
        if !self.wait_for(barrier, within).await {
            tracing::warn!(
                barrier,
                current = self.current(),
                ?within,
                "the standby's copy did not reach the takeover's barrier: reading the store"
            );
            return Ok(None);
        }
        self.stop.cancel();
        let copy = std::mem::take(&mut *self.copy.lock().unwrap());
        if let Some(why) = copy.unusable {
            tracing::warn!(%why, "the standby's copy cannot be used: reading the store");
            return Ok(None);
        }
        let Some(header) = copy.header else {
            // No planner saved yet (or the legacy layout): read the store.
            return Ok(None);
        };
        let planner = Planner::from_parts(header, copy.entries.into_values());
        let planner_store = PlannerStore::written(store, &planner);
        Ok(Some(Loaded {
            records: copy.records,
            planner: Some(planner),
            planner_store,
        }))
    }
}

/// Reads the trees into `copy` and follows their changes, until stopped.
async fn keep_current(
    engine: Arc<EtcdEngine>,
    renew_ahead_s: i64,
    copy: Arc<Mutex<SiteCopy>>,
    current: watch::Sender<Revision>,
    clock: &dyn Clock,
) {
    let client = loop {
        match engine.waiting_client().await {
            Ok(c) => break c,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "standby: no etcd client yet");
                clock.sleep(Duration::from_secs(1)).await;
            }
        }
    };
    'read: loop {
        let read = {
            let (engine, copy) = (engine.clone(), copy.clone());
            tokio::task::spawn_blocking(move || {
                let mut fresh = SiteCopy {
                    records: VeeRecords::new(Vec::new(), renew_ahead_s, 0),
                    ..SiteCopy::default()
                };
                let at = engine.read_trees(&TREES, |t, k, v| {
                    fresh.apply(t, k, Some(v), 0);
                    Ok(())
                })?;
                // Each record read counts as written at the read's revision
                // (a commit conditioned on it then holds to no later write).
                fresh.records.set_revisions(at);
                *copy.lock().unwrap() = fresh;
                anyhow::Ok(at)
            })
            .await
        };
        let mut at = match read {
            Ok(Ok(at)) => at,
            Ok(Err(e)) => {
                tracing::warn!(error = %format!("{e:#}"), "standby: cannot read the site's records; trying again");
                clock.sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(e) => {
                tracing::error!(error = %e, "standby: reading the site's records panicked");
                return;
            }
        };
        current.send_replace(at);
        tracing::info!(
            revision = at,
            records = copy.lock().unwrap().records.len(),
            "standby: the site's records read; following their changes"
        );
        loop {
            let mut changes = match engine.watch_after(&client, at).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "standby: cannot watch the site's records; trying again");
                    clock.sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            loop {
                match changes.next().await {
                    Ok((revision, list)) => {
                        apply_all(&copy, &list);
                        if revision > at {
                            at = revision;
                            current.send_replace(at);
                        }
                    }
                    Err(WatchEnded::Compacted(r)) => {
                        tracing::warn!(
                            compacted = r,
                            "standby: etcd compacted the revisions it follows: reading the records again"
                        );
                        continue 'read;
                    }
                    Err(e @ WatchEnded::Broken(_)) => {
                        tracing::warn!(error = %e, revision = at, "standby: watching again");
                        clock.sleep(Duration::from_millis(200)).await;
                        break;
                    }
                }
            }
        }
    }
}

fn apply_all(copy: &Mutex<SiteCopy>, list: &[Change]) {
    let mut copy = copy.lock().unwrap();
    for c in list {
        copy.apply(c.tree, &c.key, c.value.as_deref(), c.revision);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watch brings other trees' changes too: an event's key is its
    /// number in 8 bytes, not text, and must not make the copy unusable
    /// (it did for about every other event: a takeover then read the
    /// whole store again).
    #[test]
    fn other_trees_changes_leave_the_copy_usable() {
        let mut copy = SiteCopy::default();
        copy.apply(Tree::Events, &200u64.to_be_bytes(), Some(b"{}"), 7);
        copy.apply(Tree::Usage, &[0xff, 0xfe], None, 8);
        assert_eq!(copy.unusable, None);
        // A key of a tree it keeps that is not text still is.
        copy.apply(Tree::Vees, &[0xff], None, 9);
        assert!(copy.unusable.unwrap().contains("tree vees"));
    }
}
