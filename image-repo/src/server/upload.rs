//! Upload: stream the body into a temporary file while hashing it; only
//! content whose digest equals the declared ID is renamed into place.
//! Anything else (mismatch, broken connection, full disk, quota) removes the
//! temporary file and answers with the reason.

use std::io;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use futures::StreamExt;
use interfaces::repo_client::protocol::{meta_from_query, CheckReply};
use interfaces::repo_client::sink::HashingSink;
use interfaces::repo_client::{BlobMeta, PushMeta};
use interfaces::BlobId;

use super::auth::caller;
use super::error::{parse_id, ApiError};
use super::store::Stored;
use super::AppState;

/// `ENOSPC` and `EDQUOT`: the disk or the user's disk quota is full.
const DISK_FULL_ERRNOS: [i32; 2] = [28, 122];

/// Most bytes of a refused upload read and discarded before answering (64 MiB).
const DRAIN_LIMIT: u64 = 64 << 20;

type QueryPairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// `POST /v1/blobs/{id}/check?size=N&<meta>`: would this push be accepted?
/// Lets a client learn about 401, bad metadata or lack of room before it
/// streams gigabytes, and skip content the repository already has.
pub async fn check(
    State(app): State<AppState>,
    Path(raw_id): Path<String>,
    query: QueryPairs,
    headers: HeaderMap,
) -> Result<Json<CheckReply>, ApiError> {
    let who = caller(&app.config, &headers)?;
    let id = parse_id(&raw_id)?;
    let pairs = query.map_err(|e| ApiError::bad_request(e.body_text()))?.0;
    meta_from_query(&pairs, &["size"]).map_err(|(f, r)| ApiError::bad_field(&f, &r))?;
    let size = pairs
        .iter()
        .find(|(k, _)| k == "size")
        .ok_or_else(|| ApiError::bad_field("size", "is required"))?
        .1
        .parse::<u64>()
        .map_err(|e| ApiError::bad_field("size", &e.to_string()))?;
    // "Stored" only for a caller that may read it: anyone else learns
    // nothing of others' blobs, and shows it holds the content by sending it.
    if app
        .store
        .get(&id)
        .map_err(|e| ApiError::internal(format!("reading metadata of {id}"), e))?
        .is_some_and(|m| who.may_read(&m))
    {
        return Ok(Json(CheckReply { exists: true }));
    }
    room(&app, &id, Some(size))?;
    Ok(Json(CheckReply { exists: false }))
}

/// `PUT /v1/blobs/{id}?<meta>`: stores the body as blob `id`. 201 with the
/// new record, 200 with the existing record if the content was already
/// stored (both pushes of the same content succeed, one copy is kept).
pub async fn upload(
    State(app): State<AppState>,
    Path(raw_id): Path<String>,
    query: QueryPairs,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<BlobMeta>), ApiError> {
    let who = caller(&app.config, &headers)?;
    let id = parse_id(&raw_id)?;
    let pairs = query.map_err(|e| ApiError::bad_request(e.body_text()))?.0;
    let meta: PushMeta = meta_from_query(&pairs, &[]).map_err(|(f, r)| ApiError::bad_field(&f, &r))?;
    let declared = match headers.get(header::CONTENT_LENGTH) {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| ApiError::bad_request("Content-Length is not a number"))?,
        ),
        None => None,
    };
    let limit = room(&app, &id, declared)?;
    // The quota is held as bytes are promised, not checked once: uploads
    // side by side cannot each take the same room.
    let mut held = app.quota.start();
    let grow = |held: &mut super::quota::Reservation, more: u64| match app.config.max_size.map(|s| s.0) {
        None => Ok(()),
        Some(max) => held.grow(max, more, || app.store.total_size()),
    };
    if let Some(len) = declared {
        grow(&mut held, len).map_err(|why| ApiError::insufficient_storage(format!("no room for blob {id}: {why}; nothing stored")))?;
    }

    let temp = app.store.temp_file();
    let mut sink = HashingSink::create_new(temp.path()).map_err(|e| storage_error(&id, e, "creating the temporary file"))?;
    let mut stream = body.into_data_stream();
    let pace = BodyPace::new(&app.config);
    let mut received = 0u64;
    let mut refused = None;
    loop {
        let chunk = match tokio::time::timeout(pace.idle, stream.next()).await {
            Err(_) => {
                // Cut off: no answer is owed to a client that stopped sending.
                return Err(ApiError::too_slow(&id, received, &format!("no byte for {} s", pace.idle.as_secs())));
            }
            Ok(None) => break,
            Ok(Some(chunk)) => chunk.map_err(|e| ApiError::interrupted(&id, received, &interfaces::error::chain(&e)))?,
        };
        received += chunk.len() as u64;
        if let Some(why) = pace.too_slow(received) {
            return Err(ApiError::too_slow(&id, received, &why));
        }
        if received > limit.bytes {
            refused = Some(ApiError::insufficient_storage(format!(
                "upload of {id} exceeds the room left ({}); nothing stored",
                limit.why
            )));
            break;
        }
        if received > held.bytes() {
            // A step ahead, else just what came.
            let need = received - held.bytes();
            if grow(&mut held, need.max(QUOTA_STEP)).is_err() {
                if let Err(why) = grow(&mut held, need) {
                    refused = Some(ApiError::insufficient_storage(format!(
                        "upload of {id} exceeds the room left ({why}); nothing stored"
                    )));
                    break;
                }
            }
        }
        if let Err(e) = sink.write(chunk).await {
            refused = Some(storage_error(&id, e, "writing the upload"));
            break;
        }
    }
    if let Some(err) = refused {
        // Free the space at once, then read out the rest so that the client,
        // still sending, gets this answer rather than a reset connection.
        drop(sink);
        drop(temp);
        drop(held);
        let mut drained = 0u64;
        while let Ok(Some(Ok(chunk))) = tokio::time::timeout(pace.idle, stream.next()).await {
            drained += chunk.len() as u64;
            if drained > DRAIN_LIMIT {
                break;
            }
        }
        return Err(err);
    }
    let written = sink.finish().await.map_err(|e| storage_error(&id, e, "writing the upload"))?;
    if let Some(declared) = declared.filter(|d| *d != written.len) {
        return Err(ApiError::interrupted(&id, written.len, &format!("Content-Length was {declared}")));
    }
    if written.id != id {
        return Err(ApiError::digest_mismatch(&id, &written.id, written.len));
    }
    let stored = app
        .store
        .commit(temp, &id, written.len, meta, &who)
        .await
        .map_err(|e| ApiError::internal(format!("storing {id}"), format!("{e:#}")))?;
    Ok(match stored {
        Stored::New(m) => {
            tracing::info!(%id, name = %m.name, kind = %m.kind, size = m.size, "stored blob");
            (StatusCode::CREATED, Json(who.view(m)))
        }
        Stored::Existing(m) => {
            tracing::info!(%id, "blob pushed again; kept the stored copy");
            (StatusCode::OK, Json(who.view(m)))
        }
    })
}

/// Bytes an upload without a declared length reserves against the quota
/// at a time (16 MiB).
const QUOTA_STEP: u64 = 16 << 20;

/// How fast an upload's body must come (R7): a byte at least every `idle`,
/// and, once `idle` has passed, `min_rate` bytes per second on average.
struct BodyPace {
    idle: std::time::Duration,
    min_rate: u64,
    start: std::time::Instant,
}

impl BodyPace {
    fn new(config: &super::Config) -> Self {
        Self {
            idle: config.body_idle_timeout,
            min_rate: config.min_upload_bytes_per_s,
            start: std::time::Instant::now(),
        }
    }

    /// Why `received` bytes so far is too slow, if it is.
    fn too_slow(&self, received: u64) -> Option<String> {
        let elapsed = self.start.elapsed();
        if elapsed <= self.idle {
            return None;
        }
        let rate = received as f64 / elapsed.as_secs_f64();
        (rate < self.min_rate as f64).then(|| {
            format!(
                "{rate:.0} bytes/s over {:.0} s, below the least rate of {} bytes/s",
                elapsed.as_secs_f64(),
                self.min_rate
            )
        })
    }
}

/// How many bytes an upload may take, and why not more.
struct Room {
    bytes: u64,
    why: String,
}

/// The room for an upload: free space less the reserve, capped by the
/// quota. Errors: 507 if `len` is known and does not fit.
fn room(app: &AppState, id: &BlobId, len: Option<u64>) -> Result<Room, ApiError> {
    let free = app
        .store
        .free_bytes()
        .map_err(|e| ApiError::internal("reading free space of the data disk", e))?;
    let reserve = app.config.reserve.0;
    let mut room = Room {
        bytes: free.saturating_sub(reserve),
        why: format!("{free} bytes free on the data disk, {reserve} kept in reserve"),
    };
    if let Some(max) = app.config.max_size.map(|s| s.0) {
        let used = app.store.total_size().map_err(|e| ApiError::internal("reading stored sizes", e))?;
        let left = max.saturating_sub(used);
        if left < room.bytes {
            room = Room {
                bytes: left,
                why: format!("quota of {max} bytes with {used} used"),
            };
        }
    }
    match len {
        Some(len) if len > room.bytes => Err(ApiError::insufficient_storage(format!(
            "no room for blob {id} of {len} bytes: {}",
            room.why
        ))),
        _ => Ok(room),
    }
}

/// 507 for a full disk, 500 for any other I/O error.
fn storage_error(id: &BlobId, e: io::Error, doing: &str) -> ApiError {
    if e.raw_os_error().is_some_and(|n| DISK_FULL_ERRNOS.contains(&n)) {
        ApiError::insufficient_storage(format!("disk full while storing {id} ({doing}: {e}); nothing stored"))
    } else {
        ApiError::internal(format!("{doing} of {id}"), e)
    }
}
