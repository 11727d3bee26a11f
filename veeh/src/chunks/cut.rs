//! Cutting a file into chunks, following it while it is written.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fastcdc::v2020::StreamCDC;
use interfaces::chunks::{AVG_CHUNK, MAX_CHUNK, MIN_CHUNK};
use interfaces::BlobId;
use tokio::sync::mpsc;

use super::PartWriter;

/// How often a followed file is looked at again when it has not grown.
const FOLLOW_POLL: Duration = Duration::from_millis(10);

/// A chunk cut from a file: where it starts (bytes), its content and ID.
#[derive(Clone, Debug)]
pub struct Cut {
    pub offset: u64,
    pub data: Bytes,
    pub digest: BlobId,
}

/// A file read as it grows: at its end, it waits for more until `done`
/// is set, then reads what is left and ends.
struct Follow {
    file: File,
    done: Arc<AtomicBool>,
}

impl Read for Follow {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // `done` is read before the file: whatever was written before
            // it was set is then seen by this read.
            let done = self.done.load(Ordering::Acquire);
            let n = self.file.read(buf)?;
            if n > 0 || done {
                return Ok(n);
            }
            std::thread::sleep(FOLLOW_POLL);
        }
    }
}

/// Cuts the file at `path` into chunks (FastCDC with the sizes of
/// `interfaces::chunks`) and sends them on `tx` in order as each
/// completes; blocking (run it on a blocking thread). With `writing`, the
/// file is followed until the flag is set (see the module documentation
/// of `chunks`), and waited for until it exists. Each chunk is written to
/// `sink` too (a part of the host's cache, see `super::cache`). Returns
/// the file's size in bytes. Errors: the file cannot
/// be read; the receiver is gone (`BrokenPipe`).
pub fn cut_file(path: &Path, writing: Option<Arc<AtomicBool>>, sink: Option<&PartWriter>, tx: &mpsc::Sender<Cut>) -> io::Result<u64> {
    let done = writing.unwrap_or_else(|| Arc::new(AtomicBool::new(true)));
    // A followed file may not be there yet: its writer creates it.
    let file = loop {
        let done = done.load(Ordering::Acquire);
        match File::open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && !done => std::thread::sleep(FOLLOW_POLL),
            other => break other?,
        }
    };
    let chunker = StreamCDC::new(Follow { file, done }, MIN_CHUNK, AVG_CHUNK, MAX_CHUNK);
    let mut size = 0;
    for chunk in chunker {
        let chunk = chunk.map_err(|e| match e {
            fastcdc::v2020::Error::IoError(e) => e,
            other => io::Error::other(other.to_string()),
        })?;
        size = chunk.offset + chunk.length as u64;
        let data = Bytes::from(chunk.data);
        let cut = Cut {
            offset: chunk.offset,
            digest: BlobId::of(&data),
            data,
        };
        if let Some(sink) = sink {
            sink.put(cut.offset, &cut.data);
        }
        tx.blocking_send(cut)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the chunks' receiver is gone"))?;
    }
    Ok(size)
}

/// Reads `len` bytes at `offset` of `path` again (the first chunk of a
/// save image, see the module documentation of `chunks`).
pub fn reread(path: &Path, offset: u64, len: usize) -> io::Result<Cut> {
    use std::os::unix::fs::FileExt;
    let mut data = vec![0; len];
    File::open(path)?.read_exact_at(&mut data, offset)?;
    let data = Bytes::from(data);
    Ok(Cut {
        offset,
        digest: BlobId::of(&data),
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn pseudo_random(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn cuts(path: &Path, writing: Option<Arc<AtomicBool>>) -> (Vec<Cut>, u64) {
        let (tx, mut rx) = mpsc::channel(1024);
        let size = cut_file(path, writing, None, &tx).unwrap();
        drop(tx);
        let mut out = vec![];
        while let Ok(c) = rx.try_recv() {
            out.push(c);
        }
        (out, size)
    }

    #[test]
    fn chunks_cover_the_file_and_a_local_change_keeps_the_other_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut data = pseudo_random(12 << 20, 7);
        std::fs::write(&path, &data).unwrap();
        let (first, size) = cuts(&path, None);
        assert_eq!(size, data.len() as u64);
        let joined: Vec<u8> = first.iter().flat_map(|c| c.data.iter().copied()).collect();
        assert_eq!(joined, data);
        // 64 KiB rewritten in the middle: at most the chunks around it change.
        data[6 << 20..(6 << 20) + 65536].copy_from_slice(&pseudo_random(65536, 9));
        std::fs::write(&path, &data).unwrap();
        let (second, _) = cuts(&path, None);
        let old: std::collections::HashSet<_> = first.iter().map(|c| c.digest.clone()).collect();
        let new_bytes: usize = second.iter().filter(|c| !old.contains(&c.digest)).map(|c| c.data.len()).sum();
        assert!(new_bytes <= 3 * MAX_CHUNK as usize, "{new_bytes} bytes of new chunks");
        assert!(new_bytes < data.len() / 2);
    }

    #[test]
    fn a_followed_file_is_cut_as_it_grows_until_its_writer_is_done() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data = pseudo_random(9 << 20, 3);
        let mut file = File::create(&path).unwrap();
        let writing = Arc::new(AtomicBool::new(false));
        let (tx, mut rx) = mpsc::channel(1024);
        let (p, w) = (path.clone(), writing.clone());
        let reader = std::thread::spawn(move || cut_file(&p, Some(w), None, &tx).unwrap());
        for part in data.chunks(1 << 20) {
            file.write_all(part).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        // Chunks came out before the writer finished.
        let mut early = 0;
        while rx.try_recv().is_ok() {
            early += 1;
        }
        assert!(early > 0, "no chunk before the end of the writing");
        writing.store(true, Ordering::Release);
        assert_eq!(reader.join().unwrap(), data.len() as u64);
    }
}
