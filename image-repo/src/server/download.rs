//! Download: `GET` and `HEAD` of a blob's content, with single `Range`
//! requests (`bytes=A-B`, `bytes=A-`, `bytes=-N`) for resuming.

use std::io::SeekFrom;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use interfaces::repo_client::protocol::CONTENT_ID_HEADER;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::io::ReaderStream;

use interfaces::repo_client::BlobMeta;

use super::auth::{caller, Caller};
use super::error::{parse_id, ApiError};
use super::{App, AppState};

/// Size of the chunks read from disk and sent, in bytes.
const DOWNLOAD_CHUNK: usize = 512 * 1024;

/// Which bytes of a blob a request asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Wanted {
    /// No (usable) range: the whole blob, 200.
    Full,
    /// Bytes `start..=end`, 206.
    Part { start: u64, end: u64 },
    /// A range outside the blob, 416.
    Unsatisfiable,
}

/// Reads a `Range` header against a blob of `size` bytes. Ranges this server
/// does not serve (other units, several ranges, malformed) are ignored, as
/// RFC 9110 allows, and the whole blob is sent.
pub fn parse_range(value: &str, size: u64) -> Wanted {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return Wanted::Full;
    };
    if spec.contains(',') {
        return Wanted::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Wanted::Full;
    };
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(start), Ok(end)) if start <= end => {
            if start >= size {
                Wanted::Unsatisfiable
            } else {
                Wanted::Part {
                    start,
                    end: end.min(size - 1),
                }
            }
        }
        (Ok(start), Err(_)) if b.is_empty() => {
            if start >= size {
                Wanted::Unsatisfiable
            } else {
                Wanted::Part { start, end: size - 1 }
            }
        }
        (Err(_), Ok(n)) if a.is_empty() => {
            if n == 0 || size == 0 {
                Wanted::Unsatisfiable
            } else {
                Wanted::Part {
                    start: size.saturating_sub(n),
                    end: size - 1,
                }
            }
        }
        _ => Wanted::Full,
    }
}

/// `GET` / `HEAD /v1/blobs/{id}`.
pub async fn download(
    State(app): State<AppState>,
    method: Method,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let who = caller(&app.config, &headers)?;
    let id = parse_id(&raw_id)?;
    let meta = readable_or_pulled(&app, &who, &id).await?;
    send(&app, &method, &headers, &meta).await
}

/// [`readable`], after fetching `id` from a peer site's repository when
/// this one lacks it and `who` is this site's (`super::peers`).
pub async fn readable_or_pulled(app: &App, who: &Caller, id: &interfaces::BlobId) -> Result<BlobMeta, ApiError> {
    let here = app
        .store
        .get(id)
        .map_err(|e| ApiError::internal(format!("reading metadata of {id}"), e))?;
    if here.is_none() && app.peers.serve(who) {
        let pulled = app.peers.pull_through(app, id, &who.name, None).await?;
        return readable_meta(app, who, pulled, id);
    }
    readable_meta(app, who, here, id)
}

/// `m` if `who` may read it, directly or, for a chunk, through an index
/// (`super::store::Store::may_read`); else 404 as if it did not exist,
/// so that IDs of others' blobs cannot be probed. Errors: 404, 500.
pub fn readable_meta(app: &App, who: &Caller, m: Option<BlobMeta>, id: &interfaces::BlobId) -> Result<BlobMeta, ApiError> {
    match m {
        Some(m) if app.store.may_read(who, &m).map_err(|e| ApiError::internal(format!("reading metadata of {id}"), format!("{e:#}")))? => Ok(m),
        _ => Err(ApiError::not_found(id)),
    }
}

/// The content of the blob `meta` describes, whole or the part a `Range`
/// header asks for (also for the OCI API's blob GET and HEAD). It needs a
/// token, so it is `Cache-Control: private`: a shared cache must not
/// serve it to others (it said `public` before issue 39). Errors: 404 if
/// the content went away, 416 outside the blob, 500 reading it.
pub async fn send(app: &App, method: &Method, headers: &HeaderMap, meta: &BlobMeta) -> Result<Response, ApiError> {
    let id = &meta.id;
    let size = meta.size;
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (status, start, len) = match range.map(|r| parse_range(r, size)).unwrap_or(Wanted::Full) {
        Wanted::Full => (StatusCode::OK, 0, size),
        Wanted::Part { start, end } => (StatusCode::PARTIAL_CONTENT, start, end - start + 1),
        Wanted::Unsatisfiable => return Err(ApiError::range_not_satisfiable(id, range.unwrap_or(""), size)),
    };

    let mut resp = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, len)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::ETAG, format!("\"{id}\""))
        .header(header::CACHE_CONTROL, PRIVATE_IMMUTABLE)
        .header(CONTENT_ID_HEADER, id.to_string())
        .header(DIGEST_HEADER, id.to_string());
    if status == StatusCode::PARTIAL_CONTENT {
        resp = resp.header(header::CONTENT_RANGE, format!("bytes {start}-{}/{size}", start + len - 1));
    }
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        let path = app.store.blob_path(id);
        let mut file = match tokio::fs::File::open(&path).await {
            Ok(f) => f,
            // Deleted between the metadata lookup and the open.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ApiError::not_found(id)),
            Err(e) => return Err(ApiError::internal(format!("opening content of {id}"), e)),
        };
        if start > 0 {
            file.seek(SeekFrom::Start(start))
                .await
                .map_err(|e| ApiError::internal(format!("seeking in content of {id}"), e))?;
        }
        tracing::info!(%id, start, len, "sending blob");
        app.metrics.sent_bytes.inc_by(len);
        Body::from_stream(ReaderStream::with_capacity(file.take(len), DOWNLOAD_CHUNK))
    };
    let mut resp = resp.body(body).map_err(|e| ApiError::internal("building response", e))?;
    if method == Method::HEAD {
        // Keep the length of the content, not of the empty body.
        resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    Ok(resp)
}

/// `Cache-Control` of content addressed by digest that needs a token.
pub const PRIVATE_IMMUTABLE: &str = "private, max-age=31536000, immutable";

/// The header naming a blob's or manifest's digest in the OCI API (the
/// name comes from Docker's registry API, which the specification keeps).
pub const DIGEST_HEADER: &str = "docker-content-digest";

/// The record of `id` if `who` may read it ([`readable_meta`]).
/// Errors: 404 otherwise.
pub fn readable(app: &AppState, who: &Caller, id: &interfaces::BlobId) -> Result<BlobMeta, ApiError> {
    let m = app
        .store
        .get(id)
        .map_err(|e| ApiError::internal(format!("reading metadata of {id}"), e))?;
    readable_meta(app, who, m, id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Wanted::Part { start: 0, end: 9 });
        assert_eq!(parse_range("bytes=90-", 100), Wanted::Part { start: 90, end: 99 });
        assert_eq!(parse_range("bytes=90-500", 100), Wanted::Part { start: 90, end: 99 });
        assert_eq!(parse_range("bytes=-10", 100), Wanted::Part { start: 90, end: 99 });
        assert_eq!(parse_range("bytes=-1000", 100), Wanted::Part { start: 0, end: 99 });
        assert_eq!(parse_range("bytes=100-", 100), Wanted::Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 100), Wanted::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-", 0), Wanted::Unsatisfiable);
        assert_eq!(parse_range("bytes=5-1", 100), Wanted::Full);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), Wanted::Full);
        assert_eq!(parse_range("items=0-1", 100), Wanted::Full);
        assert_eq!(parse_range("bytes=x-", 100), Wanted::Full);
    }
}
