//! Following a site's records in etcd as they change: one read of some
//! trees at one revision ([`EtcdEngine::read_trees`]), then etcd's watch
//! of the site's prefix from the next revision ([`EtcdEngine::watch_after`]),
//! each change in revision order ([`Changes`]). A standby keeps its
//! record cache and planner current this way (`crate::core::replica`).
//!
//! etcd 3.4 has what this needs (Watch with a start revision, compaction
//! reported as a cancelled watch with `compact_revision`); its progress
//! requests may answer before the events they cover (fixed in 3.4.25),
//! so a follower knows it is current by a write it waits to see
//! ([`crate::core::replica`]'s barrier), not by them.

use anyhow::Result;
use etcd_client::{Client, EventType, WatchOptions};

use super::{range_end, EtcdEngine, Failure, StoreUnavailable};
use crate::store::{Revision, Tree};

/// The largest watch answer read (etcd's values are at most 1.5 MiB by
/// default; one answer carries a revision's events).
const WATCH_MESSAGE_BYTES: usize = 256 << 20;

/// One change of a record: its tree, key, value (`None`: removed) and the
/// revision that made it.
#[derive(Debug)]
pub struct Change {
    pub tree: Tree,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
    pub revision: Revision,
}

/// Why a watch ended.
#[derive(Debug, thiserror::Error)]
pub enum WatchEnded {
    /// The revisions after the one it started from were compacted away:
    /// read the trees again.
    #[error("etcd compacted the revisions up to {0}: the records must be read again")]
    Compacted(Revision),
    /// The stream broke (a member went away): watch again from the last
    /// revision seen, on another member.
    #[error("the watch of the site's records broke: {0}")]
    Broken(String),
}

/// The changes of a site's records after a revision, in order.
pub struct Changes {
    stream: etcd_client::WatchStream,
    prefix: Vec<u8>,
}

impl EtcdEngine {
    /// Reads every record of `trees` at one revision, giving each (tree,
    /// key, value) to `f`; returns that revision. Errors: the store's
    /// ([`StoreUnavailable`]), or `f`'s.
    pub fn read_trees(&self, trees: &[Tree], mut f: impl FnMut(Tree, &[u8], &[u8]) -> Result<()>) -> Result<Revision> {
        let mut at = None;
        for t in trees {
            let r = self.scan_at(*t, at, &mut |k, v| f(*t, k, v))?;
            at.get_or_insert(r);
        }
        match at {
            Some(r) => Ok(r.max(0) as u64),
            None => Ok(self.revision_now()?),
        }
    }

    /// The changes of the site's records after revision `after`, watched
    /// through `client` (a [`EtcdEngine::waiting_client`]: a watch waits
    /// on purpose). Errors: no member answers ([`StoreUnavailable`]).
    pub async fn watch_after(&self, client: &Client, after: Revision) -> Result<Changes> {
        let prefix = self.prefix.clone();
        let options = WatchOptions::new()
            .with_range(range_end(&prefix))
            .with_start_revision(after as i64 + 1);
        let stream = client
            .watch_client()
            .max_decoding_message_size(WATCH_MESSAGE_BYTES)
            .watch(prefix.clone(), Some(options))
            .await
            .map_err(|e| match Failure::of(&e) {
                Failure::Unavailable(m) | Failure::Refused(m) => anyhow::Error::from(StoreUnavailable(m)).context("etcd watch"),
            })?;
        Ok(Changes { stream, prefix })
    }
}

impl Changes {
    /// The next revisions' changes of records (those of the prefix's
    /// other keys, the election's, left out), in revision order, with the
    /// last revision they bring (every change up to it is then given;
    /// 0 when the answer brought none). Errors: [`WatchEnded`].
    pub async fn next(&mut self) -> Result<(Revision, Vec<Change>), WatchEnded> {
        let answer = match self.stream.message().await {
            Ok(Some(a)) => a,
            Ok(None) => return Err(WatchEnded::Broken("the stream ended".into())),
            Err(e) => return Err(WatchEnded::Broken(e.to_string())),
        };
        if answer.canceled() {
            return Err(match answer.compact_revision() {
                r if r > 0 => WatchEnded::Compacted(r as u64),
                _ => WatchEnded::Broken(format!("cancelled: {}", answer.cancel_reason())),
            });
        }
        let mut out = Vec::with_capacity(answer.events().len());
        let mut last = 0;
        for e in answer.events() {
            let Some(kv) = e.kv() else { continue };
            last = last.max(kv.mod_revision().max(0) as u64);
            let Some((tree, key)) = self.record_of(kv.key()) else {
                continue;
            };
            out.push(Change {
                tree,
                key: key.to_vec(),
                value: (e.event_type() == EventType::Put).then(|| kv.value().to_vec()),
                revision: kv.mod_revision().max(0) as u64,
            });
        }
        Ok((last, out))
    }

    /// The tree and key of a record's etcd key `<prefix>/<tree>/<key>`.
    fn record_of<'a>(&self, k: &'a [u8]) -> Option<(Tree, &'a [u8])> {
        let rest = k.strip_prefix(self.prefix.as_slice())?;
        let slash = rest.iter().position(|b| *b == b'/')?;
        let tree = Tree::ALL.into_iter().find(|t| t.name().as_bytes() == &rest[..slash])?;
        Some((tree, &rest[slash + 1..]))
    }
}
