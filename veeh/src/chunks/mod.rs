//! A checkpoint's parts as content-addressed chunks (`interfaces::chunks`):
//! cut as QEMU writes them (`cut`), only the chunks the repository lacks
//! sent, several at a time (`push`), kept on the host (`cache`), and a
//! part assembled again from its chunks for a restore, from the cache or
//! fetched in parallel (`assemble`), or streamed to QEMU through a FIFO
//! while it loads (`stream`).
//!
//! The memory state is cut while libvirt writes it: the file is followed
//! as it grows, so its chunks are hashed and uploaded during the snapshot
//! rather than after it. libvirt marks the save image complete by
//! rewriting its first bytes when it is done (`LibvirtQemudPart` becomes
//! `LibvirtQemudSave`); the first chunk is therefore read again once the
//! snapshot has returned. Its boundary does not move: FastCDC looks for
//! cut points only past the minimum chunk size (64 KiB), and the gear hash
//! there depends on the last 64 bytes alone.

pub mod assemble;
pub mod cache;
pub mod cut;
pub mod push;
pub mod stream;

pub use assemble::assemble;
pub use cache::{ChunkCache, PartWriter};
pub use cut::{cut_file, Cut};
pub use push::{chunk_meta, part_key, push_chunks, push_index, replace_first, Pushed};
pub use stream::Feed;
