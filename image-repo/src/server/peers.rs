//! The repositories of peer sites (issue 39: one repository per site, no
//! federation-wide single point of failure). A blob this repository lacks
//! is fetched from a peer by digest when its own site (a `site` token, or
//! the operator) asks for it: pull-through, with this site's credential
//! at the peer (the framework agreement's). The bytes are trusted because
//! they hash to the digest, never because of where they came from: at
//! most the size the peer declared is read, into a temporary file, and
//! only a file whose hash matches is stored; a mismatch is logged and the
//! next peer tried. A service provider's request never reaches a peer:
//! the credential there is the site's, not the provider's.
//!
//! The other way, [`Peers::replicate`] pushes a blob (a checkpoint a peer
//! may have to restore) to a peer's repository and lets the peer site read
//! it there, before the checkpoint counts for that peer.
//!
//! A chunk index (`interfaces::chunks`) goes with its chunks: replicated,
//! the peer is asked which it lacks (`missing`) and sent only those before
//! the index; pulled through, the chunks this repository lacks come from
//! the same peer before the index is stored, so that a restore here finds
//! every chunk. Reading the index lets the peer site read its chunks.

use std::collections::HashSet;
use std::path::Path;

use interfaces::chunks::ChunkIndex;
use interfaces::repo_client::{BlobKind, BlobMeta, PushMeta, RepoClient};
use interfaces::BlobId;

use super::auth::{Caller, Role};
use super::config::PeerEntry;
use super::error::ApiError;
use super::quota::Reservation;
use super::store::{Stored, TempFile};
use super::App;

/// One peer site's repository.
pub struct Peer {
    /// The peer's site ID.
    pub name: String,
    client: RepoClient,
}

/// The peers of the configuration, in its order (the order they are asked).
#[derive(Default)]
pub struct Peers {
    peers: Vec<Peer>,
}

impl Peers {
    /// Clients of `entries`. Errors: a token file or CA unreadable, a bad
    /// URL, naming the peer.
    pub fn new(entries: &[PeerEntry]) -> anyhow::Result<Self> {
        let mut peers = Vec::new();
        for e in entries {
            let client =
                RepoClient::with_ca(&e.url, Some(e.token()?), e.ca.as_deref()).map_err(|err| anyhow::anyhow!("peers {}: {err}", e.name))?;
            peers.push(Peer {
                name: e.name.clone(),
                client,
            });
        }
        Ok(Self { peers })
    }

    /// Whether pull-through may serve `who`: the site's own callers.
    pub fn serve(&self, who: &Caller) -> bool {
        !self.peers.is_empty() && matches!(who.role, Role::Site | Role::Operator)
    }

    /// Fetches blob `id` from the first peer that has it for this site,
    /// verified, into the store as `owner`'s (readable by `reader` too).
    /// `None` if no peer has it (or none holds its digest's bytes).
    /// Errors: 507 if it does not fit, 500 storing it.
    pub async fn pull_through(&self, app: &App, id: &BlobId, owner: &str, reader: Option<&str>) -> Result<Option<BlobMeta>, ApiError> {
        for peer in &self.peers {
            match self.pull_from(app, peer, id, owner).await {
                Ok(Some(m)) => {
                    if let Some(r) = reader.filter(|r| *r != m.owner) {
                        app.store
                            .add_reader(id, r)
                            .await
                            .map_err(|e| ApiError::internal(format!("sharing {id}"), format!("{e:#}")))?;
                    }
                    return app
                        .store
                        .get(id)
                        .map_err(|e| ApiError::internal("reading metadata", format!("{e:#}")));
                }
                Ok(None) => {}
                Err(e) if e.status().is_server_error() || e.status().as_u16() == 507 => return Err(e),
                Err(e) => tracing::warn!(%id, peer = %peer.name, "pull-through refused: {e}"),
            }
        }
        Ok(None)
    }

    /// One peer's copy of `id`, if it has one that verifies (for an index,
    /// with every chunk it lists).
    async fn pull_from(&self, app: &App, peer: &Peer, id: &BlobId, owner: &str) -> Result<Option<BlobMeta>, ApiError> {
        let Some((temp, held, meta)) = self.fetch(app, peer, id).await? else {
            return Ok(None);
        };
        let by = Caller {
            name: owner.to_string(),
            role: Role::Provider,
        };
        let push = PushMeta {
            name: meta.name.clone(),
            kind: meta.kind,
            format: meta.format.clone(),
            labels: meta.labels.clone(),
        };
        let stored = if meta.kind == BlobKind::CheckpointIndex {
            if !self.pull_chunks(app, peer, temp.path(), id, &by).await? {
                return Ok(None);
            }
            match super::chunks::commit_index(app, temp, id, meta.size, push, &by).await {
                Ok(stored) => stored,
                Err(e) if e.status().is_client_error() => {
                    tracing::warn!(%id, peer = %peer.name, "pulled-through chunk index refused: {e}");
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        } else {
            app.store
                .commit(temp, id, meta.size, push, &by)
                .await
                .map_err(|e| ApiError::internal(format!("storing {id}"), format!("{e:#}")))?
        };
        drop(held);
        app.metrics.received_bytes.inc_by(meta.size);
        let m = match stored {
            Stored::New(m) | Stored::Existing(m) => m,
        };
        tracing::info!(%id, peer = %peer.name, size = m.size, owner, "blob pulled through from a peer site");
        Ok(Some(m))
    }

    /// One peer's copy of `id` in a temporary file, verified, with the
    /// room it holds and the peer's record of it; `None` if the peer does
    /// not have it for this site, or its copy does not verify.
    /// Errors: 507 if it does not fit.
    async fn fetch(&self, app: &App, peer: &Peer, id: &BlobId) -> Result<Option<(TempFile, Reservation, BlobMeta)>, ApiError> {
        let meta = match peer.client.head(id).await {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::warn!(%id, peer = %peer.name, error = %e, "peer repository did not answer");
                return Ok(None);
            }
        };
        if let Err(e) = super::chunks::within_bound(meta.kind, "size", meta.size) {
            tracing::warn!(%id, peer = %peer.name, "pull-through refused: {e}");
            return Ok(None);
        }
        let what = format!("pull-through of {id} from {}", peer.name);
        super::upload::fits(app, &what, meta.size)?;
        let temp = app.store.temp_file();
        let mut held = app.quota.start(temp.path());
        super::upload::hold(app, &mut held, meta.size)
            .map_err(|why| ApiError::insufficient_storage(format!("no room for {what}: {why}; nothing stored")))?;
        let pulled = peer.client.pull_at_most(id, temp.path(), meta.size).await;
        let _ = std::fs::remove_file(interfaces::repo_client::pull::partial_path(temp.path()));
        if let Err(e) = pulled {
            if matches!(e, interfaces::Error::DigestMismatch { .. }) {
                app.metrics.verification_failed("peer");
            }
            // A digest mismatch, a peer sending more than it declared, a
            // broken transfer: nothing is kept, the next peer is asked.
            tracing::warn!(%id, peer = %peer.name, error = %e, "pull-through failed; nothing stored");
            return Ok(None);
        }
        Ok(Some((temp, held, meta)))
    }

    /// Pulls from `peer` the chunks that the index in `file` lists and
    /// that `by` may not read here yet; whether every one is here now.
    async fn pull_chunks(&self, app: &App, peer: &Peer, file: &Path, index_id: &BlobId, by: &Caller) -> Result<bool, ApiError> {
        let raw = tokio::fs::read(file)
            .await
            .map_err(|e| ApiError::internal(format!("reading chunk index {index_id}"), e))?;
        let index = match ChunkIndex::parse(&raw) {
            Ok(index) => index,
            Err(e) => {
                tracing::warn!(id = %index_id, peer = %peer.name, "pulled-through chunk index refused: {e}");
                return Ok(false);
            }
        };
        let internal = |e: anyhow::Error| ApiError::internal(format!("pulling the chunks of {index_id}"), format!("{e:#}"));
        let (mut pulled, mut bytes) = (0usize, 0u64);
        let mut seen = HashSet::new();
        for c in index.chunks.iter().map(|c| &c.digest).filter(|c| seen.insert(*c)) {
            let here = app.store.get(c).map_err(internal)?;
            if here.is_some_and(|m| app.store.may_read(by, &m).unwrap_or(false)) {
                continue;
            }
            let Some((temp, held, meta)) = self.fetch(app, peer, c).await? else {
                tracing::warn!(id = %index_id, chunk = %c, peer = %peer.name, "peer lacks a chunk of the index; nothing stored");
                return Ok(false);
            };
            if meta.kind != BlobKind::CheckpointChunk {
                tracing::warn!(id = %index_id, chunk = %c, peer = %peer.name, kind = %meta.kind, "not a chunk; nothing stored");
                return Ok(false);
            }
            let push = PushMeta::new(meta.name.clone(), BlobKind::CheckpointChunk);
            app.store.commit(temp, c, meta.size, push, by).await.map_err(internal)?;
            drop(held);
            app.metrics.received_bytes.inc_by(meta.size);
            pulled += 1;
            bytes += meta.size;
        }
        tracing::info!(id = %index_id, peer = %peer.name, chunks = index.chunks.len(), pulled, bytes, "chunks of an index pulled through");
        Ok(true)
    }

    /// Asks the peers whether service provider `provider` may read `id`
    /// there (a peer that says yes lets this site read it from then on);
    /// the first such peer's name.
    pub async fn grant(&self, id: &BlobId, provider: &str) -> Option<&str> {
        for peer in &self.peers {
            match peer.client.grant_for(id, provider).await {
                Ok(true) => return Some(&peer.name),
                Ok(false) => {}
                Err(e) => tracing::warn!(%id, peer = %peer.name, error = %e, "peer repository did not answer a grant"),
            }
        }
        None
    }

    /// Pulls `id` through from peer `from` only (after its grant).
    pub async fn pull_through_from(&self, app: &App, from: &str, id: &BlobId, owner: &str) -> Result<Option<BlobMeta>, ApiError> {
        match self.peers.iter().find(|p| p.name == from) {
            Some(peer) => self.pull_from(app, peer, id, owner).await,
            None => Ok(None),
        }
    }

    /// Pushes blob `meta` (stored here) to peer `to`'s repository and lets
    /// the peer site read it there. Errors: 404 for a peer not configured;
    /// 502 naming the peer and why when its repository refuses or is
    /// unreachable.
    pub async fn replicate(&self, app: &App, meta: &BlobMeta, to: &str) -> Result<(), ApiError> {
        let id = &meta.id;
        let peer = self
            .peers
            .iter()
            .find(|p| p.name == to)
            .ok_or_else(|| ApiError::bad_request(format!("no peer repository named {to:?} is configured ([[peers]])")))?;
        let failed = |e: interfaces::Error| ApiError::bad_gateway(format!("replicating {id} to {to}: {e}"));
        if meta.kind == BlobKind::CheckpointIndex {
            replicate_chunks(app, peer, meta).await?;
        }
        // Names of blobs pushed through /v2 are repository names, with '/'.
        let mut push = PushMeta::new(meta.name.replace('/', "_"), meta.kind);
        push.format = meta.format.clone();
        push.labels = meta.labels.clone();
        if matches!(meta.kind, BlobKind::OciBlob | BlobKind::Manifest) {
            push.format = None;
        }
        let pushed = peer.client.push_file(&app.store.blob_path(id), &push).await.map_err(failed)?;
        if pushed != *id {
            return Err(ApiError::internal(
                format!("replicating {id}"),
                format!("the stored content hashes to {pushed}"),
            ));
        }
        peer.client.share(id, &peer.name).await.map_err(failed)?;
        tracing::info!(%id, peer = %to, size = meta.size, "blob replicated to a peer site");
        Ok(())
    }
}

/// Sends to `peer` the chunks that index `meta` lists and that the peer
/// lacks for this site (asked with `missing`), before the index itself.
/// Errors: 502 naming the peer; 500 for an index or chunk unreadable here.
async fn replicate_chunks(app: &App, peer: &Peer, meta: &BlobMeta) -> Result<(), ApiError> {
    let id = &meta.id;
    let failed = |e: interfaces::Error| ApiError::bad_gateway(format!("replicating {id} to {}: {e}", peer.name));
    let internal = |e: String| ApiError::internal(format!("replicating {id}"), e);
    let raw = tokio::fs::read(app.store.blob_path(id)).await.map_err(|e| internal(e.to_string()))?;
    let index = ChunkIndex::parse(&raw).map_err(|e| internal(e.to_string()))?;
    let mut seen = HashSet::new();
    let digests: Vec<BlobId> = index.chunks.iter().map(|c| c.digest.clone()).filter(|c| seen.insert(c.clone())).collect();
    let missing = peer.client.missing(&digests).await.map_err(failed)?;
    let mut bytes = 0u64;
    for c in &missing {
        let m = app
            .store
            .get(c)
            .map_err(|e| internal(format!("{e:#}")))?
            .ok_or_else(|| internal(format!("chunk {c} it lists is not stored here")))?;
        let content = tokio::fs::read(app.store.blob_path(c)).await.map_err(|e| internal(format!("chunk {c}: {e}")))?;
        bytes += content.len() as u64;
        let push = PushMeta::new(m.name.replace('/', "_"), BlobKind::CheckpointChunk);
        peer.client.push_bytes(c, content.into(), &push).await.map_err(failed)?;
    }
    tracing::info!(%id, peer = %peer.name, chunks = digests.len(), sent = missing.len(), bytes, "chunks of an index replicated");
    Ok(())
}
