//! Pull: stream a blob into `DEST.partial` while hashing it, resume with
//! `Range` after a broken connection or from an earlier partial download,
//! verify the digest, then rename into place.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use reqwest::{header, Method, Response, StatusCode};

use super::sink::{HashingSink, Written};
use super::{check, protocol, retry, transport_after, Progress, RepoClient};
use crate::blob_id::BlobId;
use crate::error::{Error, Result};

/// How one download attempt ended, when not with the whole blob.
enum Failed {
    /// Worth another attempt that resumes where this one stopped.
    Transient(Error),
    /// The partial file does not fit the blob: start again from byte 0.
    Restart(String),
    /// Give up.
    Fatal(Error),
}

/// `dest` with `.partial` appended to its file name.
pub fn partial_path(dest: &Path) -> PathBuf {
    let mut name: OsString = dest.file_name().map(OsString::from).unwrap_or_default();
    name.push(".partial");
    dest.with_file_name(name)
}

impl RepoClient {
    /// Downloads blob `id` to `dest`. The content goes to `DEST.partial`
    /// (see [`partial_path`]) and is hashed on the fly; only content whose
    /// sha256 equals `id` is renamed to `dest` (atomically, replacing an
    /// existing file). An existing `DEST.partial` is resumed with a `Range`
    /// request, and so is a transfer cut by a connection error (retried with
    /// backoff). If a resumed prefix turns out not to belong to the blob, the
    /// download starts over once from byte 0. `progress` gets
    /// `(bytes on disk, blob size)`. Only one pull per `dest` may run at a time.
    /// Returns the blob's size in bytes.
    ///
    /// Errors: [`Error::BlobNotFound`]; [`Error::DigestMismatch`] if the
    /// content does not hash to `id` (the partial file is removed);
    /// [`Error::Io`] for local files; [`Error::Repository`] when the
    /// repository stays unreachable (the partial file is kept for a resume)
    /// or refuses the request.
    pub async fn pull(&self, id: &BlobId, dest: &Path, progress: Option<Progress<'_>>) -> Result<u64> {
        self.pull_within(id, dest, progress, None).await
    }

    /// [`RepoClient::pull`] of a blob of at most `max` bytes: a server
    /// that sends more is cut off (its bytes are not trusted until they
    /// hash to `id`, and a peer must not fill the disk first). Errors: as
    /// `pull`; [`Error::Repository`] past `max` (the partial file removed).
    pub async fn pull_at_most(&self, id: &BlobId, dest: &Path, max: u64) -> Result<u64> {
        self.pull_within(id, dest, None, Some(max)).await
    }

    async fn pull_within(&self, id: &BlobId, dest: &Path, progress: Option<Progress<'_>>, max: Option<u64>) -> Result<u64> {
        let partial = partial_path(dest);
        let mut written = self.pull_to_partial(id, &partial, progress, max).await?;
        if written.resumed_from > 0 && written.file.id != *id {
            tracing::warn!(%id, partial = %partial.display(), "resumed partial download did not match; starting over");
            remove(&partial)?;
            written = self.pull_to_partial(id, &partial, progress, max).await?;
        }
        if written.file.id != *id {
            remove(&partial)?;
            return Err(Error::DigestMismatch {
                id: id.to_string(),
                actual: written.file.id.to_string(),
            });
        }
        std::fs::rename(&partial, dest).map_err(|e| Error::io(dest, e))?;
        if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Make the rename durable; failure here does not undo the pull.
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        }
        tracing::info!(%id, dest = %dest.display(), size = written.file.len, "pulled blob");
        Ok(written.file.len)
    }

    /// Fills `partial` with the whole blob (as far as the server's content
    /// goes) and returns what is in it.
    async fn pull_to_partial(&self, id: &BlobId, partial: &Path, progress: Option<Progress<'_>>, max: Option<u64>) -> Result<Resumed> {
        let mut sink = HashingSink::resume(partial).map_err(|e| Error::io(partial, e))?;
        let resumed_from = sink.len();
        let mut restarted = false;
        let mut attempt = 1;
        loop {
            match self.download_attempt(id, &mut sink, progress, max).await {
                Ok(()) => break,
                Err(Failed::Transient(e)) if attempt < self.retry.attempts => {
                    tracing::debug!(%id, attempt, error = %e, "download interrupted; resuming");
                    tokio::time::sleep(self.retry.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(Failed::Restart(why)) if !restarted => {
                    tracing::warn!(%id, partial = %partial.display(), why, "restarting download from byte 0");
                    restarted = true;
                    sink.finish().await.map_err(|e| Error::io(partial, e))?;
                    remove(partial)?;
                    sink = HashingSink::resume(partial).map_err(|e| Error::io(partial, e))?;
                }
                Err(Failed::Transient(e) | Failed::Fatal(e)) => {
                    let e = match e {
                        Error::Repository { what, reason } if attempt > 1 => Error::Repository {
                            what,
                            reason: format!("{reason} (after {attempt} attempts)"),
                        },
                        e => e,
                    };
                    let len = sink.len();
                    let _ = sink.finish().await;
                    // A bounded pull (from a peer) is not resumed later.
                    if len == 0 || max.is_some() {
                        remove(partial)?;
                    }
                    return Err(e);
                }
                Err(Failed::Restart(why)) => {
                    return Err(Error::Repository {
                        what: format!("pull {id}"),
                        reason: why,
                    });
                }
            }
        }
        let file = sink.finish().await.map_err(|e| Error::io(partial, e))?;
        Ok(Resumed {
            file,
            resumed_from: if restarted { 0 } else { resumed_from },
        })
    }

    /// One GET from `sink.len()` on; appends to `sink`.
    async fn download_attempt(
        &self,
        id: &BlobId,
        sink: &mut HashingSink,
        progress: Option<Progress<'_>>,
        max: Option<u64>,
    ) -> Result<(), Failed> {
        let what = format!("pull {id}");
        let offset = sink.len();
        let mut req = self.request(Method::GET, &format!("/blobs/{id}"));
        if offset > 0 {
            req = req.header(header::RANGE, format!("bytes={offset}-"));
        }
        let resp = req.send().await.map_err(|e| classify(&what, e))?;
        let total = match resp.status() {
            StatusCode::OK if offset > 0 => return Err(Failed::Restart("repository ignored the Range request".into())),
            StatusCode::OK => resp.content_length(),
            StatusCode::PARTIAL_CONTENT => match content_range(&resp) {
                Some((Some((start, _)), total)) if start == offset => Some(total),
                other => return Err(Failed::Restart(format!("unexpected Content-Range {other:?} for offset {offset}"))),
            },
            StatusCode::RANGE_NOT_SATISFIABLE => match content_range(&resp) {
                Some((None, total)) if total == offset => return Ok(()),
                _ => return Err(Failed::Restart(format!("partial file ({offset} bytes) is longer than the blob"))),
            },
            s if retry::is_transient_status(s) => {
                return Err(Failed::Transient(Error::Repository {
                    what,
                    reason: s.to_string(),
                }))
            }
            _ => {
                return Err(Failed::Fatal(check(&what, Some(id), resp).await.err().unwrap_or_else(|| {
                    Error::Repository {
                        what: what.clone(),
                        reason: "unexpected reply".into(),
                    }
                })))
            }
        };
        let total = total.unwrap_or(0);
        let report = |done| {
            if let Some(p) = progress {
                p(done, total.max(done))
            }
        };
        report(offset);
        let mut body = resp.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| classify(&what, e))?;
            if let Some(max) = max.filter(|m| sink.len() + chunk.len() as u64 > *m) {
                return Err(Failed::Fatal(Error::Repository {
                    what,
                    reason: format!("the repository sent more than the {max} bytes the blob has"),
                }));
            }
            sink.write(chunk).await.map_err(|e| Failed::Fatal(Error::io(sink.path(), e)))?;
            report(sink.len());
        }
        if total > 0 && sink.len() < total {
            return Err(Failed::Transient(Error::Repository {
                what,
                reason: format!("connection closed after {} of {total} bytes", sink.len()),
            }));
        }
        Ok(())
    }
}

/// The content of a filled partial file and where this pull started in it.
struct Resumed {
    file: Written,
    resumed_from: u64,
}

fn classify(what: &str, e: reqwest::Error) -> Failed {
    let err = transport_after(what, &e, 1);
    if retry::is_transient(&e) {
        Failed::Transient(err)
    } else {
        Failed::Fatal(err)
    }
}

fn content_range(resp: &Response) -> Option<(Option<(u64, u64)>, u64)> {
    protocol::parse_content_range(resp.headers().get(header::CONTENT_RANGE)?.to_str().ok()?)
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_path_appends_suffix() {
        assert_eq!(partial_path(Path::new("/a/b.qcow2")), Path::new("/a/b.qcow2.partial"));
        assert_eq!(partial_path(Path::new("b")), Path::new("b.partial"));
    }
}
