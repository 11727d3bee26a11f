//! A checkpoint's memory state or disk overlay as content-addressed chunks:
//! the chunk index a host uploads after the chunks it lists, and its checks.
//!
//! A VEEH cuts the file into chunks with content-defined boundaries
//! (FastCDC, Xia et al., "FastCDC: a Fast and Efficient Content-Defined
//! Chunking Approach for Data Deduplication", USENIX ATC 2016; the
//! 2020 variant of the `fastcdc` crate), so that what did not change
//! between two checkpoints of a VEE cuts into the same chunks and is not
//! sent again (Proxmox Backup Server does the same for its dynamic
//! archives). Each chunk is a blob of kind `checkpoint-chunk`; the index,
//! a blob of kind `checkpoint-index`, lists them in file order and is what
//! a checkpoint record names (`memory_blob`, `disk_blob`) and what the
//! VEEM pins. The repository accepts an index only when every chunk it
//! lists is stored (the checkpoint's commit point), keeps a chunk while a
//! kept index lists it, and lets whoever may read an index read its
//! chunks.
//!
//! The index is JSON:
//! `{"format_version": 1, "media_type": "...", "size": BYTES,
//! "chunks": [{"digest": "sha256:...", "size": BYTES}, ...]}`.

use serde::{Deserialize, Serialize};

use crate::blob_id::BlobId;

/// The format of a chunk index this version writes; a newer one is
/// refused ([`ChunkIndex::parse`]).
pub const CHUNK_INDEX_FORMAT: u32 = 1;

/// The media type of a chunk index (as an OCI layer of a checkpoint's
/// artifact).
pub const CHUNK_INDEX_MEDIA_TYPE: &str = "application/vnd.vee.checkpoint.chunks.v1+json";

/// The smallest chunk the chunker cuts, in bytes (64 KiB), but the last.
pub const MIN_CHUNK: u32 = 64 * 1024;
/// The chunk size the chunker aims at, in bytes (256 KiB): what a guest
/// changes between two checkpoints is scattered over its memory, and
/// chunks of 1 MiB (4 MiB at most) sent again 45 % of an idle 128 MiB
/// guest's memory state where these send (docs/benchmarks.md).
pub const AVG_CHUNK: u32 = 256 * 1024;
/// The largest chunk, in bytes (1 MiB): a chunk blob above it is refused.
pub const MAX_CHUNK: u32 = 1024 * 1024;
/// The most chunks an index lists: a 64 GiB file in chunks of the
/// average size.
pub const MAX_CHUNKS: usize = 262_144;
/// The largest index blob, in bytes (32 MiB).
pub const MAX_INDEX_BYTES: u64 = 32 * 1024 * 1024;

/// One chunk of an index: its content ID and size in bytes. Its offset in
/// the file is the sum of the sizes before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    pub digest: BlobId,
    pub size: u64,
}

/// A file as its chunks, in order (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkIndex {
    /// [`CHUNK_INDEX_FORMAT`] when written.
    pub format_version: u32,
    /// What the assembled file is (`artifact::MEMORY_STATE`,
    /// `artifact::DISK_OVERLAY`).
    pub media_type: String,
    /// The assembled file's size in bytes: the sum of the chunks' sizes.
    pub size: u64,
    pub chunks: Vec<ChunkRef>,
}

/// Why an index blob is refused: the field and the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("chunk index field `{field}`: {reason}")]
pub struct BadIndex {
    pub field: String,
    pub reason: String,
}

fn bad(field: impl Into<String>, reason: impl Into<String>) -> BadIndex {
    BadIndex {
        field: field.into(),
        reason: reason.into(),
    }
}

impl ChunkIndex {
    /// An index of `chunks` in file order, of this version's format.
    pub fn new(media_type: &str, chunks: Vec<ChunkRef>) -> Self {
        Self {
            format_version: CHUNK_INDEX_FORMAT,
            media_type: media_type.to_string(),
            size: chunks.iter().map(|c| c.size).sum(),
            chunks,
        }
    }

    /// The index of `chunks`, a file's content in order (their digests
    /// computed here).
    pub fn of<C: AsRef<[u8]>>(media_type: &str, chunks: &[C]) -> Self {
        let refs = chunks
            .iter()
            .map(|c| ChunkRef {
                digest: BlobId::of(c.as_ref()),
                size: c.as_ref().len() as u64,
            })
            .collect();
        Self::new(media_type, refs)
    }

    /// The index as its blob's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a chunk index serializes")
    }

    /// Reads and checks an index blob. Errors ([`BadIndex`]): more than
    /// [`MAX_INDEX_BYTES`], not JSON of this shape, a newer format, more
    /// than [`MAX_CHUNKS`] chunks, an empty or oversized chunk (above
    /// [`MAX_CHUNK`]), a `size` other than the chunks' sum.
    pub fn parse(bytes: &[u8]) -> Result<Self, BadIndex> {
        if bytes.len() as u64 > MAX_INDEX_BYTES {
            return Err(bad("", format!("the index is over {MAX_INDEX_BYTES} bytes")));
        }
        let index: Self = serde_json::from_slice(bytes).map_err(|e| bad("", format!("not a chunk index: {e}")))?;
        if index.format_version == 0 || index.format_version > CHUNK_INDEX_FORMAT {
            return Err(bad(
                "format_version",
                format!(
                    "{} is not a format this version reads (1 to {CHUNK_INDEX_FORMAT})",
                    index.format_version
                ),
            ));
        }
        if index.chunks.len() > MAX_CHUNKS {
            return Err(bad("chunks", format!("{} chunks, at most {MAX_CHUNKS}", index.chunks.len())));
        }
        if index.media_type.len() > 255 {
            return Err(bad("media_type", "over 255 bytes"));
        }
        for (i, c) in index.chunks.iter().enumerate() {
            if c.size == 0 || c.size > u64::from(MAX_CHUNK) {
                return Err(bad(
                    format!("chunks[{i}].size"),
                    format!("{} is not within 1 to {MAX_CHUNK} bytes", c.size),
                ));
            }
        }
        let sum: u64 = index.chunks.iter().map(|c| c.size).sum();
        if sum != index.size {
            return Err(bad("size", format!("{} is not the chunks' sum, {sum}", index.size)));
        }
        Ok(index)
    }

    /// Each chunk with its offset in the assembled file, in bytes.
    pub fn offsets(&self) -> impl Iterator<Item = (u64, &ChunkRef)> {
        self.chunks.iter().scan(0u64, |at, c| {
            let here = *at;
            *at += c.size;
            Some((here, c))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(data: &[u8]) -> ChunkRef {
        ChunkRef {
            digest: BlobId::of(data),
            size: data.len() as u64,
        }
    }

    #[test]
    fn an_index_round_trips_and_gives_offsets() {
        let index = ChunkIndex::new("m", vec![chunk(b"abc"), chunk(b"de")]);
        assert_eq!(index.size, 5);
        let back = ChunkIndex::parse(&index.to_bytes()).unwrap();
        assert_eq!(back, index);
        let offsets: Vec<u64> = back.offsets().map(|(o, _)| o).collect();
        assert_eq!(offsets, [0, 3]);
    }

    #[test]
    fn a_bad_index_names_the_field() {
        let mut index = ChunkIndex::new("m", vec![chunk(b"abc")]);
        index.size = 4;
        assert_eq!(ChunkIndex::parse(&index.to_bytes()).unwrap_err().field, "size");
        let mut newer = ChunkIndex::new("m", vec![chunk(b"abc")]);
        newer.format_version = CHUNK_INDEX_FORMAT + 1;
        assert_eq!(ChunkIndex::parse(&newer.to_bytes()).unwrap_err().field, "format_version");
        let mut huge = ChunkIndex::new("m", vec![chunk(b"abc")]);
        huge.chunks[0].size = u64::from(MAX_CHUNK) + 1;
        huge.size = huge.chunks[0].size;
        assert_eq!(ChunkIndex::parse(&huge.to_bytes()).unwrap_err().field, "chunks[0].size");
        assert!(ChunkIndex::parse(b"{\"chunks\": 3}").is_err());
        let many = ChunkIndex::new("m", vec![chunk(b"a"); MAX_CHUNKS + 1]);
        assert_eq!(ChunkIndex::parse(&many.to_bytes()).unwrap_err().field, "chunks");
    }
}
