//! Garbage collection (issue 39): what the repository may drop, and what
//! it never does. A blob is collected only if nothing says it is needed:
//!
//! - it is a checkpoint's blob (`checkpoint-memory`, `checkpoint-disk`,
//!   `checkpoint-index`, `checkpoint-chunk`) or content of the OCI API
//!   (`oci-blob`, `manifest`): images, kernels and initrds pushed through
//!   `/v1` are their owners' to delete;
//! - it has no pin: the VEEMs pin the blobs of the checkpoints they keep
//!   (`SITE-checkpoint-ID`), and a pin is how anyone says "needed";
//! - no OCI repository holds it (a blob or manifest linked in a repository
//!   is that repository's until it is deleted there);
//! - a chunk: no stored chunk index lists it (the VEEMs pin the indexes,
//!   not the chunks);
//! - it is not public, and it was last used more than `grace` ago: stored,
//!   pushed again, or found by `POST /v1/blobs/missing` (a checkpoint
//!   pushed but not yet pinned, an upload's blobs before their manifest,
//!   a chunk a host was told not to send, before the index listing it).
//!
//! Indexes go first, then chunks: a chunk only the indexes removed listed
//! goes in the same collection. Each removal goes through the store's
//! collect, which checks the pins, links, indexes and last use again
//! under its lock: a pin set, an index stored or a `missing` query
//! meanwhile keeps the blob.

use std::collections::HashSet;
use std::time::Duration;

use interfaces::repo_client::{BlobKind, BlobMeta};
use interfaces::BlobId;

use super::error::ApiError;
use super::store::Deleted;
use super::App;

/// What a collection removed (or, dry, would remove).
pub use interfaces::repo_client::protocol::GcReply as Collected;

/// Whether `m` may be collected, given the digests OCI repositories hold
/// and the time before which it must have been stored.
pub fn collectable(m: &BlobMeta, linked: &HashSet<BlobId>, stored_before: chrono::DateTime<chrono::Utc>) -> bool {
    matches!(
        m.kind,
        BlobKind::CheckpointMemory
            | BlobKind::CheckpointDisk
            | BlobKind::CheckpointIndex
            | BlobKind::CheckpointChunk
            | BlobKind::OciBlob
            | BlobKind::Manifest
    ) && m.pins.is_empty()
        && !m.public
        && !linked.contains(&m.id)
        && m.created < stored_before
}

/// Removes (unless `dry_run`) every [`collectable`] blob last used more
/// than `grace` ago: first all but chunks, then the chunks no index left
/// lists. Errors: 500 reading or deleting.
pub async fn collect(app: &App, grace: Duration, dry_run: bool) -> Result<Collected, ApiError> {
    let internal = |e: anyhow::Error| ApiError::internal("garbage collection", format!("{e:#}"));
    let linked = app.store.repos().linked().map_err(internal)?;
    let before = chrono::Utc::now() - chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::MAX);
    let mut out = Collected {
        dry_run,
        ..Default::default()
    };
    // The indexes removed (or, dry, that would be): they hold no chunk.
    let mut gone = HashSet::new();
    for chunks in [false, true] {
        let mut after = None;
        loop {
            let unused = |m: &BlobMeta| {
                (m.kind == BlobKind::CheckpointChunk) == chunks
                    && collectable(m, &linked, before)
                    && app.store.last_used(m).is_ok_and(|t| t < before)
                    && (!chunks || app.store.listing(&m.id, &gone, 1).is_ok_and(|l| l.is_empty()))
            };
            let (page, next) = app.store.page(after.as_ref(), 1000, 10_000, unused).map_err(internal)?;
            for m in page {
                if dry_run {
                    out.bytes += m.size;
                    if m.kind == BlobKind::CheckpointIndex {
                        gone.insert(m.id.clone());
                    }
                    out.removed.push(m.id);
                    continue;
                }
                match app.store.collect(&m.id, before).await.map_err(internal)? {
                    Deleted::Removed(m) => {
                        tracing::info!(id = %m.id, kind = %m.kind, size = m.size, "garbage collected");
                        out.bytes += m.size;
                        out.removed.push(m.id);
                    }
                    // Pinned, linked, listed, used or deleted meanwhile:
                    // kept, or gone already.
                    Deleted::Pinned(_) | Deleted::Held(_) | Deleted::Listed(_) | Deleted::Used | Deleted::NotFound => {}
                }
            }
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(kind: BlobKind, age_s: i64) -> BlobMeta {
        BlobMeta {
            id: BlobId::of(format!("{kind}{age_s}").as_bytes()),
            name: "x".into(),
            kind,
            format: None,
            size: 10,
            created: chrono::Utc::now() - chrono::Duration::seconds(age_s),
            labels: Default::default(),
            pins: vec![],
            owner: "site-a".into(),
            public: false,
            readers: vec![],
        }
    }

    #[test]
    fn only_old_unpinned_unlinked_private_checkpoints_and_oci_content_go() {
        let before = chrono::Utc::now() - chrono::Duration::seconds(3600);
        let none = HashSet::new();
        assert!(collectable(&blob(BlobKind::CheckpointMemory, 7200), &none, before));
        assert!(collectable(&blob(BlobKind::OciBlob, 7200), &none, before));
        // Too young, an image, pinned, public, linked: kept.
        assert!(!collectable(&blob(BlobKind::CheckpointMemory, 60), &none, before));
        assert!(!collectable(&blob(BlobKind::Disk, 7200), &none, before));
        let mut pinned = blob(BlobKind::CheckpointDisk, 7200);
        pinned.pins.push("site-a-checkpoint-1".into());
        assert!(!collectable(&pinned, &none, before));
        let mut public = blob(BlobKind::Manifest, 7200);
        public.public = true;
        assert!(!collectable(&public, &none, before));
        let linked_blob = blob(BlobKind::OciBlob, 7200);
        let linked = HashSet::from([linked_blob.id.clone()]);
        assert!(!collectable(&linked_blob, &linked, before));
    }
}
