//! Push: hash the file, ask the repository whether it would accept it, then
//! stream it with its declared digest.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::{header, Method, StatusCode};
use tokio_util::io::ReaderStream;

use super::{check, protocol, retry, sink, transport, transport_after, BlobMeta, Progress, PushMeta, RepoClient};
use crate::blob_id::BlobId;
use crate::error::{Error, Result};

/// Size of the chunks read from the file while uploading, in bytes.
const UPLOAD_CHUNK: usize = 256 * 1024;
/// How often the progress callback is called during an upload.
const PROGRESS_TICK: Duration = Duration::from_millis(100);

impl RepoClient {
    /// Pushes the file at `path` with `meta`: computes its sha256 first, then
    /// streams it to the repository, which stores it only if the content
    /// matches that digest. Content the repository already holds is not sent
    /// again (its first metadata stays). Returns the ID.
    ///
    /// Errors: [`Error::Io`] if the file cannot be read;
    /// [`Error::Repository`] naming the field for invalid `meta`, or with the
    /// server's reason (401, no room, ...); [`Error::DigestMismatch`] if the
    /// file changed while being pushed.
    pub async fn push_file(&self, path: &Path, meta: &PushMeta) -> Result<BlobId> {
        self.push_file_with_progress(path, meta, None).await
    }

    /// [`RepoClient::push_file`] that reports `(bytes sent, file size)` to
    /// `progress` about ten times a second.
    pub async fn push_file_with_progress(&self, path: &Path, meta: &PushMeta, progress: Option<Progress<'_>>) -> Result<BlobId> {
        let what = format!("push {}", path.display());
        meta.validate().map_err(|(field, reason)| Error::Repository {
            what: what.clone(),
            reason: format!("field `{field}`: {reason}"),
        })?;
        let written = sink::hash_file(path).await.map_err(|e| Error::io(path, e))?;
        let (id, size) = (written.id, written.len);
        let report = |done| {
            if let Some(p) = progress {
                p(done, size)
            }
        };
        if self.check_push(&id, size, meta).await? {
            tracing::info!(%id, "blob already in the repository, not sent again");
            report(size);
            return Ok(id);
        }
        let what = format!("push {id} ({})", path.display());
        let query = protocol::meta_to_query(meta);
        let mut attempt = 1;
        loop {
            let sent = Arc::new(AtomicU64::new(0));
            let file = tokio::fs::File::open(path).await.map_err(|e| Error::io(path, e))?;
            let counter = sent.clone();
            let body = ReaderStream::with_capacity(file, UPLOAD_CHUNK).inspect(move |chunk| {
                if let Ok(c) = chunk {
                    counter.fetch_add(c.len() as u64, Ordering::Relaxed);
                }
            });
            let request = self
                .request(Method::PUT, &format!("/blobs/{id}"))
                .query(&query)
                .header(header::CONTENT_LENGTH, size)
                .header(header::CONTENT_TYPE, "application/octet-stream")
                .body(reqwest::Body::wrap_stream(body))
                .send();
            tokio::pin!(request);
            let mut tick = tokio::time::interval(PROGRESS_TICK);
            let outcome = loop {
                tokio::select! {
                    outcome = &mut request => break outcome,
                    _ = tick.tick() => report(sent.load(Ordering::Relaxed)),
                }
            };
            let transient = match &outcome {
                Ok(resp) => retry::is_transient_status(resp.status()),
                Err(e) => retry::is_transient(e),
            };
            if transient && attempt < self.retry.attempts {
                tracing::debug!(%id, attempt, "retrying push");
                tokio::time::sleep(self.retry.backoff(attempt)).await;
                attempt += 1;
                continue;
            }
            let resp = outcome.map_err(|e| transport_after(&what, &e, attempt))?;
            let status = resp.status();
            let resp = check(&what, Some(&id), resp).await?;
            let stored: BlobMeta = resp.json().await.map_err(|e| transport(&what, &e))?;
            if stored.id != id {
                return Err(Error::Repository {
                    what,
                    reason: format!("repository answered with blob {}", stored.id),
                });
            }
            report(size);
            tracing::info!(%id, size, new = status == StatusCode::CREATED, "pushed blob");
            return Ok(id);
        }
    }
}
