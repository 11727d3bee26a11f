//! Pushing a part's chunks: only those the repository lacks, several at a
//! time, then the index that lists them all.

use std::collections::HashSet;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use interfaces::chunks::{ChunkIndex, ChunkRef};
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::BlobId;
use tokio::sync::mpsc;

use super::cut::Cut;

/// Chunks asked about in one `missing` query while the cutter goes on.
const BATCH: usize = 32;
/// Chunk uploads in flight at once.
const PARALLEL: usize = 8;

/// A part's chunks in file order, and what pushing them sent.
#[derive(Debug, Default)]
pub struct Pushed {
    pub refs: Vec<ChunkRef>,
    /// Bytes of chunk content sent to the repository.
    pub sent: u64,
    /// Chunks sent (the others were there already).
    pub chunks_sent: usize,
}

/// The key of a VEE's part in the host's cache (`vee-<id>-memory`): a
/// newer part of the same key supersedes the older (`super::cache`).
pub fn part_key(vee_id: &str, part: crate::repository::Part) -> String {
    format!("vee-{vee_id}-{}", part.name())
}

/// The metadata a chunk is pushed with: kind `checkpoint-chunk`, labelled
/// with its VEE.
pub fn chunk_meta(vee_id: &str) -> PushMeta {
    let mut meta = PushMeta::new(format!("vee-{vee_id}-chunk"), BlobKind::CheckpointChunk);
    meta.labels.insert("vee".into(), vee_id.to_string());
    meta
}

/// Receives one part's cuts from `rx` in order until the cutter ends, and
/// pushes those the repository lacks (`RepoClient::missing`, asked of
/// what the cutter has ready, up to [`BATCH`] at once), [`PARALLEL`] at a
/// time. The stages overlap: the next batch is asked about while the last
/// one's chunks upload. With `hold_first`, the first chunk is listed but
/// not sent: the caller reads it again once it is final
/// ([`replace_first`]). Errors: the repository refuses or is unreachable.
pub async fn push_chunks(client: &RepoClient, rx: mpsc::Receiver<Cut>, meta: &PushMeta, hold_first: bool) -> Result<Pushed> {
    let mut refs = Vec::new();
    // Chunks asked about already: sent, or there.
    let mut asked: HashSet<BlobId> = HashSet::new();
    let (sent, chunks_sent) = tokio_stream::wrappers::ReceiverStream::new(rx)
        .ready_chunks(BATCH)
        .map(|batch| {
            let mut ask: Vec<Cut> = Vec::new();
            for c in batch {
                refs.push(ChunkRef {
                    digest: c.digest.clone(),
                    size: c.data.len() as u64,
                });
                let held = hold_first && c.offset == 0;
                if !held && asked.insert(c.digest.clone()) {
                    ask.push(c);
                }
            }
            async move {
                if ask.is_empty() {
                    return Ok(futures::stream::iter(Vec::new()));
                }
                let ids: Vec<BlobId> = ask.iter().map(|c| c.digest.clone()).collect();
                let missing: HashSet<BlobId> = client.missing(&ids).await?.into_iter().collect();
                ask.retain(|c| missing.contains(&c.digest));
                anyhow::Ok(futures::stream::iter(ask))
            }
        })
        .buffered(1)
        .map_ok(|cuts| cuts.map(anyhow::Ok))
        .try_flatten()
        .map_ok(|c| async move {
            let n = c.data.len() as u64;
            client
                .push_bytes(&c.digest, c.data, meta)
                .await
                .with_context(|| format!("push chunk {} at byte {}", c.digest, c.offset))?;
            anyhow::Ok(n)
        })
        .try_buffer_unordered(PARALLEL)
        .try_fold((0, 0), |(sum, count), n| async move { Ok((sum + n, count + 1)) })
        .await?;
    Ok(Pushed { refs, sent, chunks_sent })
}

/// Puts `first`, the first chunk read again once final, in place of the
/// held one, and pushes it unless the repository has it.
pub async fn replace_first(client: &RepoClient, pushed: &mut Pushed, first: super::Cut, meta: &PushMeta) -> Result<()> {
    let Some(slot) = pushed.refs.first_mut() else {
        return Ok(());
    };
    anyhow::ensure!(slot.size == first.data.len() as u64, "the first chunk changed its size");
    slot.digest = first.digest.clone();
    if !client.missing(std::slice::from_ref(&first.digest)).await?.is_empty() {
        let n = first.data.len() as u64;
        client
            .push_bytes(&first.digest, first.data, meta)
            .await
            .context("push the first chunk")?;
        pushed.sent += n;
        pushed.chunks_sent += 1;
    }
    Ok(())
}

/// Pushes `index` as a blob of kind `checkpoint-index` named `name`: the
/// part's commit point, which the repository accepts only when it holds
/// every chunk. Returns its ID and size in bytes.
pub async fn push_index(client: &RepoClient, name: String, vee_id: &str, index: &ChunkIndex) -> Result<(BlobId, u64)> {
    let raw = index.to_bytes();
    let id = BlobId::of(&raw);
    let size = raw.len() as u64;
    let mut meta = PushMeta::new(name, BlobKind::CheckpointIndex);
    meta.labels.insert("vee".into(), vee_id.to_string());
    client.push_bytes(&id, raw.into(), &meta).await.context("push the chunk index")?;
    Ok((id, size))
}
