//! What a host needs to push a checkpoint in chunks (`crate::chunks`):
//! which chunks the repository lacks, and a chunk pushed from memory.

use bytes::Bytes;
use reqwest::{header, Method};

use super::protocol::{MissingQuery, MissingReply, MAX_MISSING_QUERY};
use super::{check, transport, BlobMeta, PushMeta, RepoClient};
use crate::blob_id::BlobId;
use crate::error::{Error, Result};

impl RepoClient {
    /// Of `digests`, those this caller must push (not stored, or not
    /// readable by it), in their order; asked [`MAX_MISSING_QUERY`] at a
    /// time. The repository starts the collection grace of the others
    /// again, so that an index listing them can follow.
    /// Errors: [`Error::Repository`] when unreachable or refused.
    pub async fn missing(&self, digests: &[BlobId]) -> Result<Vec<BlobId>> {
        let mut out = Vec::new();
        for part in digests.chunks(MAX_MISSING_QUERY) {
            let what = format!("which of {} chunks the repository lacks", part.len());
            let body = MissingQuery { digests: part.to_vec() };
            let resp = self
                .send(&what, || self.request(Method::POST, "/blobs/missing").json(&body))
                .await?;
            let resp = check(&what, None, resp).await?;
            let reply: MissingReply = resp.json().await.map_err(|e| transport(&what, &e))?;
            out.extend(reply.missing);
        }
        Ok(out)
    }

    /// Pushes `content`, whose content ID is `id`, with `meta` (a chunk
    /// or a chunk index). Errors: as [`RepoClient::push_file`];
    /// [`Error::DigestMismatch`] when `content` is not `id`.
    pub async fn push_bytes(&self, id: &BlobId, content: Bytes, meta: &PushMeta) -> Result<()> {
        let what = format!("push {id}");
        meta.validate().map_err(|(field, reason)| Error::Repository {
            what: what.clone(),
            reason: format!("field `{field}`: {reason}"),
        })?;
        let query = super::protocol::meta_to_query(meta);
        let path = format!("/blobs/{id}");
        let resp = self
            .send(&what, || {
                self.request(Method::PUT, &path)
                    .query(&query)
                    .header(header::CONTENT_TYPE, "application/octet-stream")
                    .body(content.clone())
            })
            .await?;
        let resp = check(&what, Some(id), resp).await?;
        let stored: BlobMeta = resp.json().await.map_err(|e| transport(&what, &e))?;
        if &stored.id != id {
            return Err(Error::Repository {
                what,
                reason: format!("repository answered with blob {}", stored.id),
            });
        }
        Ok(())
    }
}

impl RepoClient {
    /// Blob `id` into memory, verified: a chunk or a chunk index of at
    /// most `max` bytes. Errors: [`Error::BlobNotFound`];
    /// [`Error::Repository`] past `max` or when unreachable;
    /// [`Error::DigestMismatch`] when the content is not `id`.
    pub async fn fetch_at_most(&self, id: &BlobId, max: u64) -> Result<Bytes> {
        use futures::StreamExt;
        let what = format!("pull {id}");
        let path = format!("/blobs/{id}");
        let resp = self.send(&what, || self.request(Method::GET, &path)).await?;
        let resp = check(&what, Some(id), resp).await?;
        let mut body = resp.bytes_stream();
        let mut out = bytes::BytesMut::new();
        while let Some(part) = body.next().await {
            let part = part.map_err(|e| transport(&what, &e))?;
            if (out.len() + part.len()) as u64 > max {
                return Err(Error::Repository {
                    what,
                    reason: format!("the blob is over {max} bytes"),
                });
            }
            out.extend_from_slice(&part);
        }
        let out = out.freeze();
        let actual = BlobId::of(&out);
        if &actual != id {
            return Err(Error::DigestMismatch {
                id: id.to_string(),
                actual: actual.to_string(),
            });
        }
        Ok(out)
    }
}
