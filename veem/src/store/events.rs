//! The event log in the store: the `events` tree, each event under its
//! sequence number (big-endian, from [`super::Engine::next_id`]: the key
//! order is the order of appending), its JSON the value. Read a page at a
//! time, from a sequence number on or the newest backwards, never the
//! whole tree; retention removes the oldest, a page at a time
//! ([`Store::prune_events`]). Nothing about the stored format changes: an
//! event's `seq` is its key.

use anyhow::Context;

use super::Result;
use serde::Deserialize;

use super::{Store, Tree};
use crate::model::EventRec;

/// Events removed by one commit of [`Store::prune_events`] at most.
pub const PRUNE_BATCH: usize = 1000;

/// The key of event `seq`.
fn key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// The event stored under `key` as `raw`, with its `seq`.
fn event(key: &[u8], raw: &[u8]) -> Result<EventRec> {
    let seq = <[u8; 8]>::try_from(key)
        .map(u64::from_be_bytes)
        .with_context(|| format!("event key {key:?} is not a sequence number"))?;
    let mut e: EventRec = serde_json::from_slice(raw).with_context(|| format!("event {seq}"))?;
    e.seq = seq;
    Ok(e)
}

/// What retention reads of an event: when it happened.
#[derive(Deserialize)]
struct At {
    at_ms: i64,
}

impl Store {
    /// Appends an event; returns its `seq` (higher than every event's
    /// appended before).
    pub fn append_event(&self, e: &EventRec) -> Result<u64> {
        let seq = self.engine.next_id()?;
        let value = serde_json::to_vec(e)?;
        // Held across the commit, so that a count cannot see this event
        // before the count it makes is kept (and count it twice).
        let mut held = self.events_held.lock().unwrap();
        match self.engine.commit(vec![(Tree::Events, key(seq).to_vec(), Some(value))], &[]) {
            Ok(_) => {
                if let Some(n) = held.as_mut() {
                    *n += 1;
                }
                Ok(seq)
            }
            Err(e) => {
                // Over etcd, a commit that failed may have landed: counted again.
                *held = None;
                Err(e)
            }
        }
    }

    /// Every event, oldest first: the whole log (tests, small logs; a
    /// reader of the VMI pages with [`Store::events_after`]).
    pub fn events(&self) -> Result<Vec<EventRec>> {
        let mut all = Vec::new();
        self.engine.scan(Tree::Events, &mut |k, v| {
            all.push(event(k, v)?);
            Ok(())
        })?;
        Ok(all)
    }

    /// The events after `seq` `after` (0: from the oldest kept), oldest
    /// first, `limit` at most; and whether more follow (reads `limit` + 1
    /// keys, deserialises `limit` events at most).
    pub fn events_after(&self, after: u64, limit: usize) -> Result<(Vec<EventRec>, bool)> {
        let Some(from) = after.checked_add(1) else {
            return Ok((Vec::new(), false));
        };
        let (mut page, mut more) = (Vec::new(), false);
        self.engine
            .scan_from(Tree::Events, &key(from), limit.saturating_add(1), &mut |k, v| {
                if page.len() == limit {
                    more = true;
                } else {
                    page.push(event(k, v)?);
                }
                Ok(())
            })?;
        Ok((page, more))
    }

    /// The newest `limit` events, the newest first.
    pub fn latest_events(&self, limit: usize) -> Result<Vec<EventRec>> {
        let mut page = Vec::new();
        self.engine.scan_back(Tree::Events, limit, &mut |k, v| {
            page.push(event(k, v)?);
            Ok(())
        })?;
        Ok(page)
    }

    /// How many events the log holds.
    pub fn event_count(&self) -> Result<u64> {
        self.engine.count(Tree::Events)
    }

    /// Retention: removes the oldest events until at most `keep` are left
    /// and none happened before `older_than_ms` (Unix ms), [`PRUNE_BATCH`]
    /// per commit; returns how many it removed. An event whose value does
    /// not read (it would break every read of the log) counts as old.
    ///
    /// The log is counted once (a scan of the whole tree on sled: 0.2 s of
    /// CPU at 100,000 events, every round before); from then on this
    /// store's appends and removals keep the count (an append holds it
    /// across its commit, so a count never sees an event it then adds
    /// again): this store is the log's only writer (a sled database is
    /// one process's; over etcd, the leader's store, a new one each term).
    pub fn prune_events(&self, keep: u64, older_than_ms: i64) -> Result<u64> {
        let mut removed = 0u64;
        loop {
            let held = {
                let mut held = self.events_held.lock().unwrap();
                match *held {
                    Some(n) => n,
                    None => *held.insert(self.engine.count(Tree::Events)?),
                }
            };
            let over = held.saturating_sub(keep);
            let mut oldest: Vec<(Vec<u8>, i64)> = Vec::new();
            self.engine.scan_from(Tree::Events, b"", PRUNE_BATCH, &mut |k, v| {
                let at = serde_json::from_slice::<At>(v).map_or(i64::MIN, |a| a.at_ms);
                oldest.push((k.to_vec(), at));
                Ok(())
            })?;
            let n = oldest
                .iter()
                .enumerate()
                .take_while(|(i, (_, at))| (*i as u64) < over || *at < older_than_ms)
                .count();
            let Some((last, _)) = n.checked_sub(1).map(|i| &oldest[i]) else {
                return Ok(removed);
            };
            // The keys up to `last`, itself included.
            let mut end = last.clone();
            end.push(0);
            if let Err(e) = self.engine.remove_before(Tree::Events, &end) {
                *self.events_held.lock().unwrap() = None;
                return Err(e);
            }
            if let Some(held) = self.events_held.lock().unwrap().as_mut() {
                *held = held.saturating_sub(n as u64);
            }
            removed += n as u64;
            if n < PRUNE_BATCH {
                return Ok(removed);
            }
        }
    }
}

#[cfg(test)]
mod tests;
