//! A part streamed to libvirt through a FIFO for a restore, so that QEMU
//! loads the memory state while its chunks are still being read from the
//! cache or fetched: the restore starts as soon as the disk is in place
//! rather than after the whole memory state was written to a file.
//!
//! A sequential save image is read front to back, so a pipe serves it.
//! libvirt may open the path more than once (libvirt 11 reads the header
//! and domain XML in one open, then opens it again for QEMU; `virsh
//! save-image-dumpxml` opens it too), each open reading from byte 0. Each
//! open is therefore a session of its own: once a reader is there, a new
//! FIFO is put at the path (so the next open never shares this one's
//! pipe, nor what is left in it), and the session writes the part from
//! its first byte until the end or until its reader closes. A mapped-ram
//! image is read at fixed offsets and needs a file (`super::assemble`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use interfaces::chunks::{ChunkIndex, ChunkRef};
use interfaces::repo_client::RepoClient;
use tokio::io::AsyncWriteExt;

use super::assemble::chunk;
use super::{ChunkCache, PartWriter};

/// Chunks read ahead of the one a session writes.
const AHEAD: usize = 8;

/// The pipe's buffer asked for, bytes (Linux's default is 64 KiB).
const PIPE_BYTES: i32 = 1 << 20;

/// How often the FIFO is tried for a new reader.
const POLL: Duration = Duration::from_millis(2);

/// A FIFO at `path` that serves a part to whoever opens it, while
/// [`Feed::serve`] runs. Dropping it removes the FIFO.
pub struct Feed<'a> {
    path: PathBuf,
    client: &'a RepoClient,
    cache: &'a Arc<ChunkCache>,
    index: &'a ChunkIndex,
    /// Where each chunk read is kept (a part of `cache`).
    sink: Option<Arc<PartWriter>>,
    /// Bytes fetched from the repository (not the cache) so far.
    pub fetched: AtomicU64,
}

impl<'a> Feed<'a> {
    /// Makes the FIFO `path` (replacing what is there) for the part
    /// `index` lists, each chunk read written to `sink` too. Errors: the
    /// FIFO cannot be made.
    pub fn new(
        path: &Path,
        client: &'a RepoClient,
        cache: &'a Arc<ChunkCache>,
        index: &'a ChunkIndex,
        sink: Option<Arc<PartWriter>>,
    ) -> Result<Self> {
        let _ = std::fs::remove_file(path);
        make_fifo(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            client,
            cache,
            index,
            sink,
            fetched: AtomicU64::new(0),
        })
    }

    /// Serves every open of the FIFO until dropped; returns only with
    /// an error: a chunk that cannot be read (missing, not what the index
    /// says), or the FIFO itself failing. A reader that closes early ends
    /// its session quietly.
    pub async fn serve(&self) -> anyhow::Error {
        let mut sessions = FuturesUnordered::new();
        loop {
            // Every session's end is taken (not only a failed one's): a
            // select whose pattern missed would wait for the next reader
            // alone, and starve the sessions under way.
            tokio::select! {
                Some(done) = sessions.next(), if !sessions.is_empty() => {
                    if let Err(e) = done {
                        return e;
                    }
                }
                reader = self.accept() => match reader {
                    Ok(tx) => sessions.push(self.session(tx)),
                    Err(e) => return e,
                },
            }
        }
    }

    /// Waits for a reader, then puts a fresh FIFO at the path for the next.
    async fn accept(&self) -> Result<tokio::net::unix::pipe::Sender> {
        loop {
            match tokio::net::unix::pipe::OpenOptions::new().open_sender(&self.path) {
                Ok(tx) => {
                    // A larger pipe: fewer wake-ups of QEMU and of this
                    // writer (the system's pipe-max-size may refuse it).
                    let _ = nix::fcntl::fcntl(std::os::fd::AsRawFd::as_raw_fd(&tx), nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES));
                    let fresh = self.path.with_extension("next");
                    let _ = std::fs::remove_file(&fresh);
                    make_fifo(&fresh)?;
                    std::fs::rename(&fresh, &self.path).with_context(|| format!("replace the FIFO {}", self.path.display()))?;
                    return Ok(tx);
                }
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENXIO as i32) => tokio::time::sleep(POLL).await,
                Err(e) => return Err(e).with_context(|| format!("open the FIFO {}", self.path.display())),
            }
        }
    }

    /// Writes the part from its first byte to `tx`, reading [`AHEAD`]
    /// chunks ahead, until the end or until the reader closes. The reads
    /// go on while a write waits for the reader.
    async fn session(&self, mut tx: tokio::net::unix::pipe::Sender) -> Result<()> {
        let (client, cache) = (self.client, self.cache);
        let (ready, mut next) = tokio::sync::mpsc::channel(AHEAD);
        let read = async move {
            let sink = &self.sink;
            let offsets: Vec<(u64, ChunkRef)> = self.index.offsets().map(|(o, c)| (o, c.clone())).collect();
            let mut chunks = futures::stream::iter(offsets)
                .map(move |(offset, c)| async move {
                    let (data, fetched) = chunk(client, cache, &c.digest, c.size).await?;
                    if let Some(sink) = sink.clone() {
                        let data = data.clone();
                        tokio::task::spawn_blocking(move || sink.put(offset, &data)).await?;
                    }
                    anyhow::Ok((data, fetched))
                })
                .buffered(AHEAD);
            while let Some(got) = chunks.next().await {
                // The writer is gone (its reader closed, or a chunk failed).
                if ready.send(got).await.is_err() {
                    break;
                }
            }
        };
        let write = async move {
            while let Some(got) = next.recv().await {
                let (data, fetched) = got?;
                self.fetched.fetch_add(fetched, Ordering::Relaxed);
                match tx.write_all(&data).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                    Err(e) => return Err(e).context("write to the restore's FIFO"),
                }
            }
            Ok(())
        };
        tokio::join!(read, write).1
    }
}

impl Drop for Feed<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(self.path.with_extension("next"));
    }
}

fn make_fifo(path: &Path) -> Result<()> {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR)
        .with_context(|| format!("make the FIFO {}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use bytes::Bytes;
    use interfaces::chunks::ChunkIndex;
    use interfaces::BlobId;

    use super::*;

    /// Reads `path` (a FIFO) in a thread: at most `limit` bytes, then closes.
    fn reader(path: &Path, limit: usize) -> std::thread::JoinHandle<Vec<u8>> {
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let mut out = vec![];
            std::fs::File::open(&path)
                .unwrap()
                .take(limit as u64)
                .read_to_end(&mut out)
                .unwrap();
            out
        })
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn each_open_reads_the_part_from_its_first_byte() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(ChunkCache::open(&dir.path().join("chunks"), 1 << 30).unwrap());
        // Five chunks, the second of zeros (a pipe has no holes).
        let parts: Vec<Bytes> = vec![
            (0..300_000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into(),
            vec![0u8; 200_000].into(),
            (0..150_000u32).map(|i| (i % 13) as u8).collect::<Vec<u8>>().into(),
            // More than the pipe holds (1 MiB): a session that nobody
            // reads waits in its write.
            (0..1_000_000u32).map(|i| (i % 7) as u8).collect::<Vec<u8>>().into(),
            (0..1_000_000u32).map(|i| (i % 11) as u8).collect::<Vec<u8>>().into(),
        ];
        let whole: Vec<u8> = parts.concat();
        let index = ChunkIndex::of("application/octet-stream", &parts);
        let index_id = BlobId::of(&index.to_bytes());
        // Every chunk is in the cache, in another VEE's part.
        let other = dir.path().join("other.state");
        std::fs::write(&other, &whole).unwrap();
        cache
            .stage(&other, true)
            .unwrap()
            .commit("vee-0-memory", &index_id, &index)
            .unwrap();
        // Never called: every chunk is in the cache.
        let client = RepoClient::new("http://127.0.0.1:9", None).unwrap();
        let fifo = dir.path().join("restore.state");
        let sink = Arc::new(cache.writer("vee-1-memory").unwrap());
        let feed = Feed::new(&fifo, &client, &cache, &index, Some(sink.clone())).unwrap();
        let readers = async {
            // libvirt's first open reads the header and closes early; the
            // next reads it all from byte 0, then a third does again.
            let head = tokio::task::spawn_blocking({
                let f = fifo.clone();
                move || reader(&f, 92).join().unwrap()
            });
            let head = head.await.unwrap();
            let all = tokio::task::spawn_blocking({
                let f = fifo.clone();
                move || reader(&f, usize::MAX).join().unwrap()
            });
            let all = all.await.unwrap();
            let again = tokio::task::spawn_blocking({
                let f = fifo.clone();
                move || reader(&f, usize::MAX).join().unwrap()
            });
            (head, all, again.await.unwrap())
        };
        let (head, all, again) = tokio::select! {
            r = readers => r,
            e = feed.serve() => panic!("the feed stopped: {e:#}"),
        };
        assert_eq!(head, whole[..92]);
        assert_eq!(all.len(), whole.len());
        assert!(all == whole && again == whole, "a later open reads the part from its first byte");
        assert_eq!(feed.fetched.load(Ordering::Relaxed), 0, "everything came from the cache");
        // A reader that closes while the next one reads (libvirt's header
        // read ending once QEMU's read began) does not stall the next.
        let overlapping = async {
            let f = fifo.clone();
            let first = tokio::task::spawn_blocking(move || std::fs::File::open(&f).unwrap()).await.unwrap();
            let f = fifo.clone();
            // The second reads slowly: it is still reading when the first
            // goes.
            let second = tokio::task::spawn_blocking(move || {
                let mut file = std::fs::File::open(&f).unwrap();
                let (mut out, mut buf) = (vec![], vec![0u8; 65536]);
                loop {
                    let n = file.read(&mut buf).unwrap();
                    if n == 0 {
                        return out;
                    }
                    out.extend_from_slice(&buf[..n]);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            });
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            drop(first);
            tokio::time::timeout(std::time::Duration::from_secs(20), second).await
        };
        let second = tokio::select! {
            r = overlapping => r.expect("the second reader stalled when the first closed").unwrap(),
            e = feed.serve() => panic!("the feed stopped: {e:#}"),
        };
        assert!(second == whole, "the second reader reads the part whole");
        drop(feed);
        assert!(!fifo.exists(), "the FIFO goes with the feed");
        // What the sessions read is a part of its own now.
        sink.finish(&index_id, &index).unwrap();
        let kept = cache.whole(&index_id).unwrap();
        assert!(kept.ends_with("1.part"), "{}", kept.display());
        assert!(std::fs::read(kept).unwrap() == whole);
    }
}
