//! Checkpoints in chunks, as a VEEH pushes them (`interfaces::chunks`):
//! chunks first (those `missing` names), then the index listing them.

use interfaces::chunks::ChunkIndex;
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::BlobId;

/// The second site of tests that need one (`[[tokens]]` in
/// [`SITE_B_CONFIG`]).
pub const SITE_B_TOKEN: &str = "test-site-b-token-0123456789";
/// The configuration lines of site `site-b`'s token.
pub const SITE_B_CONFIG: &str = "[[tokens]]\nname = \"site-b\"\nrole = \"site\"\ntoken = \"test-site-b-token-0123456789\"\n";

/// Chunk `n` of the tests' checkpoints: `len` bytes of its own.
pub fn chunk(n: u64, len: usize) -> Vec<u8> {
    super::content(1000 + n, len)
}

/// The index of `chunks` (in file order) and its bytes.
pub fn index_of(chunks: &[&[u8]]) -> (ChunkIndex, Vec<u8>) {
    let index = ChunkIndex::of(interfaces::artifact::MEMORY_STATE, chunks);
    let raw = index.to_bytes();
    (index, raw)
}

/// Pushes `chunks` as a host does: those the repository says it lacks,
/// then their index; the index's ID and how many chunks were sent.
pub async fn push_checkpoint(client: &RepoClient, chunks: &[&[u8]]) -> (BlobId, usize) {
    let ids: Vec<BlobId> = chunks.iter().map(|c| BlobId::of(c)).collect();
    let missing = client.missing(&ids).await.unwrap();
    for c in chunks {
        let id = BlobId::of(c);
        if missing.contains(&id) {
            let meta = PushMeta::new("vee-1-memory-chunk", BlobKind::CheckpointChunk);
            client.push_bytes(&id, c.to_vec().into(), &meta).await.unwrap();
        }
    }
    let (_, raw) = index_of(chunks);
    let id = BlobId::of(&raw);
    let meta = PushMeta::new("vee-1-memory", BlobKind::CheckpointIndex);
    client.push_bytes(&id, raw.into(), &meta).await.unwrap();
    (id, missing.len())
}

/// Reads index `id` and every chunk it lists through `client`, and
/// checks that they assemble to `expected`.
pub async fn assemble(client: &RepoClient, dir: &std::path::Path, id: &BlobId, expected: &[&[u8]]) {
    let file = dir.join(format!("index-{}", id.hex()));
    client.pull(id, &file, None).await.unwrap();
    let index = ChunkIndex::parse(&std::fs::read(&file).unwrap()).unwrap();
    let mut whole = Vec::new();
    for (_, c) in index.offsets() {
        let part = dir.join(format!("chunk-{}", c.digest.hex()));
        client
            .pull(&c.digest, &part, None)
            .await
            .unwrap_or_else(|e| panic!("chunk {} of index {id}: {e}", c.digest));
        whole.extend(std::fs::read(&part).unwrap());
        let _ = std::fs::remove_file(&part);
    }
    assert_eq!(whole, expected.concat(), "index {id} assembles to other bytes");
}
