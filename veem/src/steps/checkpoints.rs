//! Recording a checkpoint (issue 37: a leaf several workflows share): a
//! checkpoint taken here or at a peer site becomes the VEE's latest, its
//! blobs pinned in the image repository (and shared with the primary site
//! of a VEE run for a peer, whose hosts restore it anywhere); the latest
//! valid one, or a named one, is looked up for a restore. Usable where it
//! was taken as soon as it is recorded: the copy a peer site needs is made
//! after, in the background (`replication`, issue 55), and a checkpoint
//! taken at a peer counts at the primary only once it is in the primary's
//! repository.

pub mod replication;

use std::ops::Deref;
use std::sync::Arc;

use interfaces::BlobId;

use crate::core::{Core, RecordError};
use crate::domain::{Replication, ReplicationRec};
use crate::model::{CheckpointRec, VeeRec};
use crate::store::{StoreError, Tree, Writes};
use replication::Replicator;

/// Why a checkpoint was not found to restore from. Each variant's status
/// is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// No checkpoint with that ID.
    #[error("checkpoint {id} not found")]
    NotFound { id: String },
    /// The checkpoint named is another VEE's.
    #[error("checkpoint {id} is not of VEE {vee}")]
    NotOfVee { id: String, vee: String },
    /// The checkpoint named is not in this site's repository yet: its copy
    /// from `site` is awaited.
    #[error("checkpoint {id} of VEE {vee} is not in this site's repository yet (its copy from {site} is awaited)")]
    Awaited { id: String, vee: String, site: String },
    /// The VEE has no checkpoint this site may restore.
    #[error("VEE {vee} has no checkpoint")]
    None { vee: String },
    /// The checkpoint's record does not read (its format).
    #[error("checkpoint {id}: {reason}")]
    Unreadable { id: String, reason: String },
    /// The records could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a checkpoint's blobs were not shared with, copied to or pinned for
/// a site.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// A blob ID that is neither an image repository blob nor a registry
    /// image.
    #[error("blob ID {id:?}: {reason}")]
    BadId { id: String, reason: String },
    /// The image repository did not do it (`what`): it is down, or it (or
    /// the peer's) refused.
    #[error("{what}: {reason}")]
    Repository { what: String, reason: String },
    /// The checkpoint's record does not read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The records could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl BlobError {
    /// [`BlobError::Repository`] for `what`, from the repository's error.
    pub(crate) fn repository(what: String) -> impl FnOnce(anyhow::Error) -> BlobError {
        move |e| BlobError::Repository {
            what,
            reason: format!("{e:#}"),
        }
    }
}

impl CheckpointError {
    /// The VHI record of `cp` (see [`CheckpointRec::record`]), or
    /// [`CheckpointError::Unreadable`] naming it and why.
    pub fn record_of(cp: &CheckpointRec) -> Result<interfaces::vhi::CheckpointRecord, CheckpointError> {
        cp.record().map_err(|e| CheckpointError::Unreadable {
            id: cp.id.clone(),
            reason: format!("{e:#}"),
        })
    }
}

/// A VEE's checkpoint records: recorded (blobs pinned, shared with the primary site of a VEE run for a peer), replicated where a peer needs them (in the background, `replication`) and looked up. A leaf lifecycle, federation and recovery share. Calls only the core.
pub struct Checkpoints {
    core: Arc<Core>,
    /// The replications under way in this VEEM and the pass that starts
    /// them.
    pub(crate) replicator: Arc<Replicator>,
}

impl Deref for Checkpoints {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

/// Where a checkpoint being recorded comes from, which decides its
/// replication ([`ReplicationRec`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Taken by a host of this site: `local-only` for a VEE run for a peer
    /// with `replicate_checkpoints` (its copy at the primary follows),
    /// else `not-needed`.
    Here,
    /// Taken at peer site `site` for this one, which reported how far
    /// its copy here got (`None`: a peer of a version before this state,
    /// which replicated before it answered): `awaiting` until this site's
    /// repository holds it, unless the peer says it is there (or needs
    /// not be).
    Peer { site: String, replication: Option<Replication> },
    /// Handed over by the primary site (a restore it asked for): its
    /// repository holds it, `replicated`.
    Primary,
}

impl Checkpoints {
    pub fn new(core: Arc<Core>) -> Self {
        Self {
            replicator: Arc::new(Replicator::new(core.clone())),
            core,
        }
    }

    /// Records checkpoint `rec` of VEE `v` (taken here or `where_` at a
    /// peer site, as `origin` says) as its latest, pinning its blobs in the
    /// image repository (and sharing them with the primary site of a VEE
    /// run for a peer). Its copy at the primary is not waited for: the
    /// record is written `local-only` first and the copy started in the
    /// background (and by the replication pass, after a failure, a restart
    /// or a takeover). Errors: the record cannot be written.
    pub(crate) async fn record_checkpoint(
        &self,
        v: &mut VeeRec,
        rec: &interfaces::vhi::CheckpointRecord,
        where_: &str,
        origin: Origin,
    ) -> Result<CheckpointRec, RecordError> {
        let now = self.clock.now_ms();
        let replication = match (&origin, &v.for_peer) {
            (Origin::Here, Some(primary)) if self.cfg.replicate_checkpoints => ReplicationRec::new(Replication::LocalOnly, primary, now),
            (Origin::Here, _) => ReplicationRec::new(Replication::NotNeeded, "", now),
            (Origin::Peer { site, replication }, _) => match replication {
                None | Some(Replication::Replicated) => ReplicationRec::new(Replication::Replicated, site, now),
                Some(Replication::NotNeeded) => ReplicationRec::new(Replication::NotNeeded, site, now),
                Some(_) => ReplicationRec::new(Replication::Awaiting, site, now),
            },
            (Origin::Primary, primary) => ReplicationRec::new(Replication::Replicated, primary.as_deref().unwrap_or_default(), now),
        };
        let cp = CheckpointRec::with_replication(rec, replication);
        if let (Some(primary), Origin::Here) = (&v.for_peer, &origin) {
            // Taken for a peer: its primary site restores it anywhere.
            let blobs = vec![rec.memory_blob.clone(), rec.disk_blob.clone()];
            if let Err(e) = self.share_blobs(blobs, primary).await {
                tracing::warn!(vee = %v.id, %primary, error = %format!("{e:#}"), "cannot share checkpoint blobs with the primary site");
            }
        }
        // One awaited here is pinned once it is (the replication pass).
        if cp.replication.state.usable_here() {
            self.pin_blobs(&cp).await;
        }
        let mut w = Writes::default();
        w.put(Tree::Checkpoints, &cp.id, &cp)?;
        if !cp.replication.settled() {
            w.put(Tree::Replications, &cp.id, &cp.vee_id)?;
        }
        self.store.commit(w)?;
        self.forget_old_checkpoints(&v.id).await;
        v.latest_checkpoint = Some(cp.id.clone());
        v.last_checkpoint_ms = Some(self.clock.now_ms());
        self.save_vee(v)?;
        let replication = match cp.replication.state {
            Replication::NotNeeded => String::new(),
            state => format!(", {state}"),
        };
        self.event(
            &v.id,
            &v.service_id,
            "checkpointed",
            format!(
                "{} {where_} ({} ms downtime{replication})",
                cp.id,
                interfaces::time::ms_of_duration(&rec.downtime)
            ),
        );
        if cp.replication.state == Replication::LocalOnly {
            self.replicator.start(&cp.id);
        }
        Ok(cp)
    }

    /// Pins checkpoint `cp`'s blobs in this site's repository (a failure
    /// is logged: the pin is only garbage collection's hint).
    async fn pin_blobs(&self, cp: &CheckpointRec) {
        let Ok(rec) = cp.record() else { return };
        for blob in [&rec.memory_blob, &rec.disk_blob] {
            if let Ok(id) = blob.parse() {
                if let Err(e) = self.repo.pin(&id, &checkpoint_pin(&self.cfg.site_id, &cp.id)).await {
                    tracing::warn!(%blob, error = %e, "cannot pin checkpoint blob");
                }
            }
        }
    }

    /// The latest valid checkpoint of a VEE of the image it has now (not
    /// one from before a rolling update) that this site may restore (not
    /// one still `awaiting` its copy here), or the named one (refused
    /// while it awaits). Errors: no such checkpoint, another VEE's, one
    /// not here yet, or the store cannot be read.
    pub fn checkpoint_of(&self, vee_id: &str, id: Option<&str>) -> Result<Option<CheckpointRec>, CheckpointError> {
        if let Some(id) = id {
            let cp: CheckpointRec = self
                .store
                .get(Tree::Checkpoints, id)?
                .ok_or_else(|| CheckpointError::NotFound { id: id.into() })?;
            if cp.vee_id != vee_id {
                return Err(CheckpointError::NotOfVee {
                    id: id.into(),
                    vee: vee_id.into(),
                });
            }
            if !cp.replication.state.usable_here() {
                return Err(CheckpointError::Awaited {
                    id: id.into(),
                    vee: vee_id.into(),
                    site: cp.replication.site,
                });
            }
            return Ok(Some(cp));
        }
        let mut all: Vec<CheckpointRec> = self
            .store
            .list::<CheckpointRec>(Tree::Checkpoints)?
            .into_iter()
            .filter(|c| c.vee_id == vee_id && c.valid && c.replication.state.usable_here())
            .collect();
        if let Ok(v) = self.vee(vee_id) {
            all.retain(|c| c.image().is_none_or(|image| image == v.image));
        }
        all.sort_by_key(|c| c.taken_ms);
        Ok(all.pop())
    }

    /// Forgets the checkpoints of VEE `vee_id` beyond the newest
    /// `checkpoints_kept`: their blobs are unpinned (the image repository
    /// may collect them) and their records removed. One whose blobs cannot
    /// be unpinned now (the repository is down) is kept for the next time.
    /// None while a rollout of the VEE's component rolls (its old image's
    /// checkpoints stay until it ends: `crate::workflows::rollout`).
    pub(crate) async fn forget_old_checkpoints(&self, vee_id: &str) {
        if let Ok(v) = self.vee(vee_id) {
            let rollout = self.rollout(&v.service_id, &v.component).unwrap_or_default();
            if rollout.is_some_and(|r| r.state == crate::domain::rollout::RolloutState::Rolling) {
                return;
            }
        }
        let all = match self.store.list::<CheckpointRec>(Tree::Checkpoints) {
            Ok(all) => all,
            Err(e) => return tracing::warn!(vee = %vee_id, error = %format!("{e:#}"), "cannot list checkpoints"),
        };
        let mut mine: Vec<CheckpointRec> = all.into_iter().filter(|c| c.vee_id == vee_id).collect();
        mine.sort_by_key(|c| std::cmp::Reverse(c.taken_ms));
        for old in mine.into_iter().skip(self.cfg.checkpoints_kept.max(1)) {
            let blobs = old.record().map(|r| vec![r.memory_blob, r.disk_blob]).unwrap_or_default();
            let pin = checkpoint_pin(&self.cfg.site_id, &old.id);
            let ids = blob_ids(&blobs).unwrap_or_default();
            // Its artifact first: its blobs linked there stay until unlinked.
            if let Err(e) = self.repo.forget_checkpoint(&self.cfg.site_id, &old.id, &ids).await {
                tracing::warn!(checkpoint = %old.id, error = %format!("{e:#}"), "cannot remove an old checkpoint's artifact; kept for now");
                continue;
            }
            let mut unpinned = true;
            for id in ids {
                if let Err(e) = self.repo.unpin(&id, &pin).await {
                    tracing::warn!(%id, checkpoint = %old.id, error = %format!("{e:#}"), "cannot unpin an old checkpoint's blob; kept for now");
                    unpinned = false;
                }
            }
            if unpinned {
                let mut w = Writes::default();
                w.remove(Tree::Checkpoints, &old.id);
                w.remove(Tree::Replications, &old.id);
                match self.store.commit(w) {
                    Ok(_) => tracing::info!(vee = %vee_id, checkpoint = %old.id, "old checkpoint forgotten, its blobs unpinned"),
                    Err(e) => tracing::warn!(checkpoint = %old.id, error = %format!("{e:#}"), "cannot remove an old checkpoint"),
                }
            }
        }
    }

    /// With `replicate_checkpoints`, pushes checkpoint `blobs` (IDs; empty
    /// ones skipped) to peer `site`'s own repository (issue 39), now: a
    /// checkpoint a VEE is handed to a peer with, which the peer restores
    /// at once (a checkpoint taken here for a peer is copied to it in the
    /// background instead, `replication`); else nothing (the peer pulls
    /// them through when it needs them). Errors:
    /// a blob is not replicated (this site's repository is down, or the
    /// peer's refused it).
    pub(crate) async fn replicate_blobs(&self, blobs: Vec<String>, site: &str) -> Result<(), BlobError> {
        if !self.cfg.replicate_checkpoints {
            return Ok(());
        }
        for id in blob_ids(&blobs)? {
            self.repo
                .replicate(&id, site)
                .await
                .map_err(BlobError::repository(format!("replicating {id} to {site}'s repository")))?;
        }
        Ok(())
    }

    /// Lets peer `site` read `blobs` (IDs; empty ones are skipped) in the
    /// image repository, so that its hosts can pull them (issue 13 S3).
    /// Errors: a blob cannot be shared (the repository is down, or this
    /// site may not read it).
    pub(crate) async fn share_blobs(&self, blobs: Vec<String>, site: &str) -> Result<(), BlobError> {
        for id in blob_ids(&blobs)? {
            self.repo
                .share(&id, site)
                .await
                .map_err(BlobError::repository(format!("sharing {id} with {site} in the image repository")))?;
        }
        Ok(())
    }
}

/// The pin by which site `site` keeps the blobs of its checkpoint `id`.
pub(crate) fn checkpoint_pin(site: &str, id: &str) -> String {
    format!("{site}-checkpoint-{id}")
}

/// The IDs of `blobs`, the empty ones (no disk, no kernel) and registry
/// images (a peer pulls them from the registry) skipped. Errors: one is
/// neither, naming it.
pub(crate) fn blob_ids(blobs: &[String]) -> Result<Vec<BlobId>, BlobError> {
    let mut ids = Vec::new();
    for b in blobs.iter().filter(|b| !b.is_empty()) {
        let parsed = b.parse().map_err(|e: interfaces::manifest::Error| BlobError::BadId {
            id: b.clone(),
            reason: format!("{e:#}"),
        })?;
        match parsed {
            interfaces::manifest::ImageRef::Repository(id) => ids.push(id),
            interfaces::manifest::ImageRef::Registry(_) => {}
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests;
