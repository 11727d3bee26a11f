//! A part assembled from its chunks for a restore.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use interfaces::chunks::{ChunkIndex, MAX_CHUNK, MAX_INDEX_BYTES};
use interfaces::repo_client::RepoClient;
use interfaces::BlobId;

use super::ChunkCache;

/// Chunk downloads in flight at once.
const PARALLEL: usize = 8;

/// What assembling a part did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Assembled {
    /// The part's size in bytes.
    pub size: u64,
    /// Bytes fetched from the repository (chunks and index).
    pub fetched: u64,
}

/// The chunk index `index_id`, fetched and parsed, and its size in bytes.
/// Errors: the index is missing, too large or malformed (naming its
/// field).
pub async fn index(client: &RepoClient, index_id: &BlobId) -> Result<(ChunkIndex, u64)> {
    let raw = client
        .fetch_at_most(index_id, MAX_INDEX_BYTES)
        .await
        .with_context(|| format!("chunk index {index_id}"))?;
    let index = ChunkIndex::parse(&raw).with_context(|| format!("chunk index {index_id}"))?;
    Ok((index, raw.len() as u64))
}

/// Chunk `digest` of `size` bytes, and the bytes fetched for it: from
/// `cache` (0), else from the repository, verified by its digest and size.
/// Errors: the chunk is missing or not what the index says.
pub async fn chunk(client: &RepoClient, cache: &Arc<ChunkCache>, digest: &BlobId, size: u64) -> Result<(Bytes, u64)> {
    let (c, d) = (cache.clone(), digest.clone());
    let cached = tokio::task::spawn_blocking(move || c.get(&d)).await?;
    let (data, fetched) = match cached {
        Some(data) => (data, 0),
        None => {
            let data = client
                .fetch_at_most(digest, u64::from(MAX_CHUNK))
                .await
                .with_context(|| format!("chunk {digest}"))?;
            (data, size)
        }
    };
    anyhow::ensure!(
        data.len() as u64 == size,
        "chunk {digest}: {} bytes, the index says {size}",
        data.len()
    );
    Ok((data, fetched))
}

/// Writes the part whose chunk index is `index_id` to `dest` (created or
/// truncated): copied from `cache` when it holds the part whole, else each
/// distinct chunk once, from `cache` or fetched ([`chunk`]), [`PARALLEL`]
/// at a time, and kept in `cache` under `key`. `fetched` counts what came
/// from the repository. Errors: as [`index`] and [`chunk`], or `dest`
/// cannot be written.
pub async fn assemble(client: &RepoClient, cache: &Arc<ChunkCache>, index_id: &BlobId, key: &str, dest: &Path) -> Result<Assembled> {
    if let Some(part) = cache.whole(index_id) {
        let d = dest.to_path_buf();
        match tokio::task::spawn_blocking(move || std::fs::copy(&part, &d)).await? {
            Ok(size) => return Ok(Assembled { size, fetched: 0 }),
            // Evicted since: assembled from its chunks.
            Err(e) => tracing::info!(index = %index_id, error = %e, "a cached checkpoint part went before its copy"),
        }
    }
    let (index, index_bytes) = self::index(client, index_id).await?;
    let file = std::fs::File::create(dest).with_context(|| format!("create {}", dest.display()))?;
    file.set_len(index.size)?;
    let file = Arc::new(file);
    let sink = cache.sink(key);
    // Each distinct chunk once, with every offset it is found at.
    let mut at: HashMap<BlobId, usize> = HashMap::new();
    let mut wanted: Vec<(BlobId, u64, Vec<u64>)> = Vec::new();
    for (offset, c) in index.offsets() {
        let i = *at.entry(c.digest.clone()).or_insert_with(|| {
            wanted.push((c.digest.clone(), c.size, vec![]));
            wanted.len() - 1
        });
        wanted[i].2.push(offset);
    }
    let fetched = futures::stream::iter(wanted)
        .map(|(digest, size, offsets)| {
            let (file, sink) = (file.clone(), sink.clone());
            async move {
                let (data, fetched) = chunk(client, cache, &digest, size).await?;
                tokio::task::spawn_blocking(move || {
                    for o in &offsets {
                        if let Some(sink) = &sink {
                            sink.put(*o, &data);
                        }
                    }
                    // The file starts sparse: a chunk of zeros (a mapped-ram
                    // image's untouched pages) is a hole already.
                    if data.iter().all(|b| *b == 0) {
                        return Ok(());
                    }
                    offsets.iter().try_for_each(|o| file.write_all_at(&data, *o))
                })
                .await??;
                anyhow::Ok(fetched)
            }
        })
        .buffer_unordered(PARALLEL)
        .try_fold(0, |sum, n| async move { Ok(sum + n) })
        .await?;
    let size = index.size;
    if let Some(sink) = sink {
        sink.keep(index_id.clone(), index);
    }
    Ok(Assembled {
        size,
        fetched: fetched + index_bytes,
    })
}
