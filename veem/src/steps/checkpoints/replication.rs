//! A checkpoint's copies where peer sites need them, off its critical path
//! (issue 55): the checkpoint is recorded first (usable where it was
//! taken, `local-only`), then copied to the repository of the primary site
//! of a VEE run for a peer (`replicating` -> `replicated`, or `failed` and
//! retried after a growing wait, [`crate::domain::replication::ATTEMPTS`]
//! in all). At the primary, a checkpoint a peer took is `awaiting` until
//! its blobs are in the primary's own repository (pinned there: a pin
//! takes only a blob the repository holds), and is not restored from
//! until then.
//!
//! Nothing is detached: the record's state is written before each step,
//! the `replications` tree lists every checkpoint not settled, and the
//! pass ([`Replicator::pass`], every second from the loops) takes up what
//! a failure, a restart or a takeover left (an attempt `replicating` that
//! no task of this VEEM runs was cut short: it fails and starts again).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use super::{blob_ids, checkpoint_pin, BlobError, CheckpointError};
use crate::core::Core;
use crate::domain::{InvalidTransition, Replication};
use crate::model::CheckpointRec;
use crate::store::{StoreError, Tree, Writes};

/// Why a replication pass or attempt could not keep its records: the
/// store's error, or a change of a replication's state its table forbids.
/// (A copy that fails is not one: its record says so.)
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Transition(#[from] InvalidTransition),
}

/// The replications under way in this VEEM, and the pass that starts the
/// ones due (see the module doc).
pub struct Replicator {
    core: Arc<Core>,
    /// Checkpoint IDs whose attempt runs in a task of this VEEM.
    in_hand: Mutex<HashSet<String>>,
}

impl Replicator {
    pub fn new(core: Arc<Core>) -> Self {
        Self {
            core,
            in_hand: Mutex::default(),
        }
    }

    /// Starts an attempt at checkpoint `id`'s replication in a task of the
    /// core's task set (a stop drains it), unless one runs already; the
    /// attempt does nothing if the record says none is due.
    pub(crate) fn start(self: &Arc<Self>, id: &str) {
        if !self.in_hand.lock().unwrap().insert(id.to_string()) {
            return;
        }
        let (me, id) = (self.clone(), id.to_string());
        self.core.spawn(async move {
            if let Err(e) = me.attempt(&id).await {
                tracing::warn!(checkpoint = %id, error = %format!("{e:#}"), "checkpoint replication: cannot update the record; the pass tries again");
            }
            me.in_hand.lock().unwrap().remove(&id);
        });
    }

    /// One pass over the checkpoints not settled (the `replications`
    /// tree): an attempt started for each one due, one `replicating` that
    /// no task here runs taken up again, settled or forgotten ones taken
    /// off the list; the gauge of unsettled checkpoints by state set.
    /// Errors: the store cannot be read or written.
    pub async fn pass(self: &Arc<Self>) -> Result<(), ReplicationError> {
        let mut ids = Vec::new();
        self.core.store.scan(Tree::Replications, |key, _| {
            ids.push(key.to_string());
            Ok(())
        })?;
        let now = self.core.clock.now_ms();
        let mut counts: BTreeMap<Replication, i64> = BTreeMap::new();
        for id in ids {
            let Some(mut cp) = self.core.store.get::<CheckpointRec>(Tree::Checkpoints, &id)? else {
                self.core.store.remove(Tree::Replications, &id)?;
                continue;
            };
            if self.in_hand.lock().unwrap().contains(&id) {
                *counts.entry(cp.replication.state).or_default() += 1;
                continue;
            }
            if cp.replication.state == Replication::Replicating {
                // Cut short by a restart or a takeover: not the copy's
                // failure, so started again at once.
                cp.replication.failed(&id, now, "cut short (a restart or a takeover)".into())?;
                if cp.replication.retry_at_ms.is_some() {
                    cp.replication.retry_at_ms = Some(now);
                }
                self.write(&cp)?;
            }
            if cp.replication.settled() {
                self.core.store.remove(Tree::Replications, &id)?;
                continue;
            }
            *counts.entry(cp.replication.state).or_default() += 1;
            if cp.replication.due(now) {
                self.start(&id);
            }
        }
        self.core
            .metrics
            .checkpoints_unsettled(|state| counts.get(&state).copied().unwrap_or(0));
        Ok(())
    }

    /// One attempt at checkpoint `id`, if one is due: its blobs copied to
    /// the site that needs them, or (`awaiting`) looked for in this
    /// site's repository; the outcome in its record. Errors: the store
    /// cannot be read or written (the record then says what it said).
    async fn attempt(&self, id: &str) -> Result<(), ReplicationError> {
        let Some(mut cp) = self.core.store.get::<CheckpointRec>(Tree::Checkpoints, id)? else {
            return Ok(());
        };
        if !cp.replication.due(self.core.clock.now_ms()) {
            return Ok(());
        }
        let awaiting = cp.replication.state == Replication::Awaiting;
        cp.replication.start(id)?;
        self.write(&cp)?;
        let outcome = self.copy(&cp, awaiting).await;
        // Forgotten meanwhile (an older one beyond those kept): nothing to
        // write back.
        let Some(mut now_cp) = self.core.store.get::<CheckpointRec>(Tree::Checkpoints, id)? else {
            return Ok(());
        };
        let now = self.core.clock.now_ms();
        let (vee, service) = match self.core.vee(&cp.vee_id) {
            Ok(v) => (v.id, v.service_id),
            Err(_) => (cp.vee_id.clone(), String::new()),
        };
        match outcome {
            Ok(()) => {
                now_cp.replication.succeeded(id)?;
                self.write(&now_cp)?;
                let took_s = (now - now_cp.replication.recorded_ms).max(0) as f64 / 1000.0;
                self.core.metrics.checkpoint_replication("replicated", Some(took_s));
                let how = if awaiting {
                    "in this site's repository"
                } else {
                    "in its repository too"
                };
                self.core.event(
                    &vee,
                    &service,
                    "checkpoint-replicated",
                    format!(
                        "{id} {how}: {} {how_long:.3} s after it was recorded",
                        now_cp.replication.site,
                        how_long = took_s
                    ),
                );
            }
            Err(e) => {
                let error = format!("{e:#}");
                now_cp.replication.failed(id, now, error.clone())?;
                self.write(&now_cp)?;
                self.core.metrics.checkpoint_replication("failed", None);
                if now_cp.replication.given_up() {
                    self.core.metrics.checkpoint_replication("given-up", None);
                    self.core.event(
                        &vee,
                        &service,
                        "checkpoint-replication-failed",
                        format!("{id}: given up after {} attempts: {error}", now_cp.replication.attempts),
                    );
                } else {
                    tracing::warn!(checkpoint = %id, vee = %vee, site = %now_cp.replication.site, attempts = now_cp.replication.attempts, %error, "checkpoint replication failed; tried again later");
                }
            }
        }
        Ok(())
    }

    /// Copies checkpoint `cp`'s blobs to the repository of the site that
    /// needs them, or (`awaiting`) pins them in this site's, which holds
    /// them once they are pinned. Errors: a blob is not copied (this
    /// site's repository is down, the peer's refuses it) or not here yet.
    async fn copy(&self, cp: &CheckpointRec, awaiting: bool) -> Result<(), BlobError> {
        let rec = CheckpointError::record_of(cp)?;
        let blobs = blob_ids(&[rec.memory_blob, rec.disk_blob])?;
        let site = &cp.replication.site;
        for blob in blobs {
            if awaiting {
                let pin = checkpoint_pin(&self.core.cfg.site_id, &cp.id);
                self.core
                    .repo
                    .pin(&blob, &pin)
                    .await
                    .map_err(BlobError::repository(format!("{blob} from {site} is not in this site's repository yet")))?;
            } else {
                self.core
                    .repo
                    .replicate(&blob, site)
                    .await
                    .map_err(BlobError::repository(format!("replicating {blob} to {site}'s repository")))?;
            }
        }
        Ok(())
    }

    /// Writes record `cp`, listed in the `replications` tree while it is
    /// not settled and taken off it once it is, in one commit.
    fn write(&self, cp: &CheckpointRec) -> Result<(), StoreError> {
        let mut w = Writes::default();
        w.put(Tree::Checkpoints, &cp.id, cp)?;
        if cp.replication.settled() {
            w.remove(Tree::Replications, &cp.id);
        } else {
            w.put(Tree::Replications, &cp.id, &cp.vee_id)?;
        }
        self.core.store.commit(w).map(drop)
    }
}
