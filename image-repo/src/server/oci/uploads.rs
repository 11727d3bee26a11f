//! Blob uploads of the OCI API: `POST /v2/NAME/blobs/uploads/` opens a
//! session (or stores a monolithic upload with `?digest=`, or mounts a
//! blob the caller may read with `?mount=`), `PATCH` appends chunks in
//! order, `PUT ?digest=` closes it, `GET` tells how far it got, `DELETE`
//! cancels it (OCI Distribution Specification v1.1, "Pushing blobs").
//!
//! A session's bytes go to one [`Incoming`] (a temporary file hashed as
//! it grows, and the room it holds), as a `/v1` upload's do: nothing is
//! visible until the closing digest matches. Sessions are the caller's
//! own, at most `max_uploads_per_caller` at once; one without a request
//! for `upload_session_timeout` is dropped, with its file and its room
//! ([`Sessions::sweep`]), so stalled clients cannot hold them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use interfaces::repo_client::{BlobKind, PushMeta};
use interfaces::BlobId;
use uuid::Uuid;

use super::error::{codes, internal, OciError};
use super::{form_pairs, parse_digest, Access};
use crate::server::download::DIGEST_HEADER;
use crate::server::upload::Incoming;

/// The header naming an upload session (Docker's, kept by clients).
const UPLOAD_UUID_HEADER: &str = "docker-upload-uuid";

/// A session's upload: `None` once it is being stored.
type Session = Arc<tokio::sync::Mutex<Option<Incoming>>>;

/// The open upload sessions.
#[derive(Default)]
pub struct Sessions {
    table: Mutex<HashMap<Uuid, Entry>>,
}

struct Entry {
    owner: String,
    name: String,
    touched: Arc<Mutex<Instant>>,
    session: Session,
}

impl Sessions {
    /// Drops the sessions without a request for `timeout` (not those with
    /// a request under way); how many.
    pub fn sweep(&self, timeout: Duration) -> usize {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let before = table.len();
        table.retain(|id, e| {
            let idle = e.touched.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
            let keep = idle < timeout || e.session.try_lock().is_err();
            if !keep {
                tracing::info!(session = %id, repository = %e.name, owner = %e.owner, idle_s = idle.as_secs(), "upload session timed out; dropped");
            }
            keep
        });
        before - table.len()
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn open(&self, access: &Access<'_>, incoming: Incoming) -> Result<Uuid, OciError> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let max = access.app.config.max_uploads_per_caller;
        if table.values().filter(|e| e.owner == access.who.name).count() >= max {
            return Err(OciError::new(
                StatusCode::TOO_MANY_REQUESTS,
                codes::TOO_MANY_REQUESTS,
                format!(
                    "{} has {max} uploads open (max_uploads_per_caller): finish or cancel one",
                    access.who.name
                ),
            )
            .header(header::RETRY_AFTER, "1"));
        }
        let id = Uuid::new_v4();
        table.insert(
            id,
            Entry {
                owner: access.who.name.clone(),
                name: access.name.to_string(),
                touched: Arc::new(Mutex::new(Instant::now())),
                session: Arc::new(tokio::sync::Mutex::new(Some(incoming))),
            },
        );
        Ok(id)
    }

    /// The caller's session `raw` in this repository.
    fn find(&self, access: &Access<'_>, raw: &str) -> Result<(Uuid, Arc<Mutex<Instant>>, Session), OciError> {
        let unknown = || OciError::upload_unknown(access.name, raw);
        let id = raw.parse::<Uuid>().map_err(|_| unknown())?;
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let e = table
            .get(&id)
            .filter(|e| e.owner == access.who.name && e.name == access.name)
            .ok_or_else(unknown)?;
        *e.touched.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        Ok((id, e.touched.clone(), e.session.clone()))
    }

    fn remove(&self, id: &Uuid) {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }
}

/// `POST /v2/NAME/blobs/uploads/[?digest=D | ?mount=D[&from=REPO]]`.
pub async fn start(access: &Access<'_>, query: &str, headers: &HeaderMap, body: Body) -> Result<Response, OciError> {
    access.must_own("push blobs")?;
    let pairs = form_pairs(query);
    let get = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    if let Some(mount) = get("mount") {
        let id = parse_digest(mount)?;
        if mountable(access, &id, get("from")) {
            access
                .app
                .store
                .repos()
                .link_blob(access.name, &id)
                .await
                .map_err(internal(format!("linking {id}")))?;
            tracing::info!(%id, repository = access.name, by = %access.who.name, from = get("from"), "blob mounted");
            return Ok(created(access.name, &id));
        }
        // Not mountable: an upload session instead, as the specification says.
    }
    if let Some(digest) = get("digest") {
        let id = parse_digest(digest)?;
        let what = format!("upload of {id} to {}", access.name);
        let mut incoming = Incoming::start(access.app, &what)?;
        incoming.receive(access.app, &what, headers, body).await?;
        return store(access, &what, incoming, &id).await;
    }
    let incoming = Incoming::start(access.app, &format!("upload to {}", access.name))?;
    let id = access.app.uploads.open(access, incoming)?;
    tracing::info!(session = %id, repository = access.name, by = %access.who.name, "upload session opened");
    Ok(progress(access.name, &id, 0))
}

/// Whether the caller may mount blob `id` into the repository: it may
/// read it in `from`, or, without `from`, anywhere by the rules of `/v1`.
fn mountable(access: &Access<'_>, id: &BlobId, from: Option<&str>) -> bool {
    match from {
        Some(from) => {
            super::path::check_name(from).is_ok()
                && Access {
                    app: access.app,
                    who: access.who,
                    name: from,
                }
                .blob(id)
                .is_ok()
        }
        None => access.app.store.get(id).ok().flatten().is_some_and(|m| access.who.may_read(&m)),
    }
}

/// `GET .../uploads/SESSION`: 204 with the `Range` received.
pub async fn status(access: &Access<'_>, raw: &str) -> Result<Response, OciError> {
    let (id, _, session) = access.app.uploads.find(access, raw)?;
    let len = session
        .lock()
        .await
        .as_ref()
        .ok_or_else(|| OciError::upload_unknown(access.name, raw))?
        .len();
    let mut resp = progress(access.name, &id, len);
    *resp.status_mut() = StatusCode::NO_CONTENT;
    Ok(resp)
}

/// `PATCH .../uploads/SESSION`: appends the body, which must start where
/// the upload is (`Content-Range: A-B` with A the bytes so far, if given).
/// 202 with the new `Range`; 416 with the current one for a chunk out of
/// order. Any other failure ends the session.
pub async fn patch(access: &Access<'_>, raw: &str, headers: &HeaderMap, body: Body) -> Result<Response, OciError> {
    let (id, touched, session) = access.app.uploads.find(access, raw)?;
    let mut guard = session.lock().await;
    let incoming = guard.as_mut().ok_or_else(|| OciError::upload_unknown(access.name, raw))?;
    let len = incoming.len();
    if let Some(range) = headers.get(header::CONTENT_RANGE) {
        let start = range
            .to_str()
            .ok()
            .and_then(|r| r.trim().trim_start_matches("bytes ").split_once('-'))
            .and_then(|(a, _)| a.parse::<u64>().ok());
        if start != Some(len) {
            return Err(OciError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                codes::BLOB_UPLOAD_INVALID,
                format!("upload {id}: the chunk's Content-Range {range:?} does not start at {len}, the bytes received so far"),
            )
            .header(header::LOCATION, &location(access.name, &id))
            .header(header::RANGE, &range_value(len)));
        }
    }
    let what = format!("upload {id} to {}", access.name);
    if let Err(e) = incoming.receive(access.app, &what, headers, body).await {
        access.app.uploads.remove(&id);
        return Err(e.into());
    }
    *touched.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    Ok(progress(access.name, &id, incoming.len()))
}

/// `PUT .../uploads/SESSION?digest=D`: appends the body, if any, and
/// stores the whole as blob `D` if it hashes to `D`. 201, or 400
/// DIGEST_INVALID (nothing stored, the session ended).
pub async fn finish(access: &Access<'_>, raw: &str, query: &str, headers: &HeaderMap, body: Body) -> Result<Response, OciError> {
    let pairs = form_pairs(query);
    let digest = pairs
        .iter()
        .find(|(k, _)| k == "digest")
        .map(|(_, v)| v.as_str())
        .ok_or_else(|| OciError::bad(codes::DIGEST_INVALID, "closing an upload needs ?digest="))?;
    let digest = parse_digest(digest)?;
    let (id, _, session) = access.app.uploads.find(access, raw)?;
    // The session ends here, stored or not.
    access.app.uploads.remove(&id);
    let taken = session.lock().await.take();
    let mut incoming = taken.ok_or_else(|| OciError::upload_unknown(access.name, raw))?;
    let what = format!("upload {id} to {}", access.name);
    incoming.receive(access.app, &what, headers, body).await?;
    store(access, &what, incoming, &digest).await
}

/// `DELETE .../uploads/SESSION`: 204; the bytes and the room go.
pub async fn cancel(access: &Access<'_>, raw: &str) -> Result<Response, OciError> {
    let (id, _, _) = access.app.uploads.find(access, raw)?;
    access.app.uploads.remove(&id);
    tracing::info!(session = %id, repository = access.name, "upload cancelled");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Stores a finished upload as `id` and links it into the repository.
async fn store(access: &Access<'_>, what: &str, incoming: Incoming, id: &BlobId) -> Result<Response, OciError> {
    let meta = PushMeta::new(access.name, BlobKind::OciBlob);
    incoming.store(access.app, what, id, meta, access.who).await?;
    access
        .app
        .store
        .repos()
        .link_blob(access.name, id)
        .await
        .map_err(internal(format!("linking {id}")))?;
    Ok(created(access.name, id))
}

/// 201 Created at the blob's address.
fn created(name: &str, id: &BlobId) -> Response {
    let mut resp = StatusCode::CREATED.into_response();
    let h = resp.headers_mut();
    if let Ok(v) = format!("/v2/{name}/blobs/{id}").parse() {
        h.insert(header::LOCATION, v);
    }
    if let Ok(v) = id.to_string().parse() {
        h.insert(DIGEST_HEADER, v);
    }
    resp
}

/// 202 Accepted with the session's address and the bytes it has.
fn progress(name: &str, id: &Uuid, len: u64) -> Response {
    let mut resp = StatusCode::ACCEPTED.into_response();
    let h = resp.headers_mut();
    for (k, v) in [
        (header::LOCATION.as_str(), location(name, id)),
        (header::RANGE.as_str(), range_value(len)),
        (UPLOAD_UUID_HEADER, id.to_string()),
    ] {
        if let Ok(v) = v.parse() {
            h.insert(k, v);
        }
    }
    resp
}

fn location(name: &str, id: &Uuid) -> String {
    format!("/v2/{name}/blobs/uploads/{id}")
}

/// `0-LAST` of `len` bytes received (`0-0` for none, as Distribution says).
fn range_value(len: u64) -> String {
    format!("0-{}", len.saturating_sub(1))
}
