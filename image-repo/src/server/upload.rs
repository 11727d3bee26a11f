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
use interfaces::repo_client::{BlobKind, BlobMeta, PushMeta};
use interfaces::BlobId;

use super::auth::{caller, Caller};
use super::error::{parse_id, ApiError};
use super::quota::{Reservation, Room};
use super::store::{Stored, TempFile};
use super::{App, AppState};

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
    let meta = meta_from_query(&pairs, &["size"]).map_err(|(f, r)| ApiError::bad_field(&f, &r))?;
    let size = pairs
        .iter()
        .find(|(k, _)| k == "size")
        .ok_or_else(|| ApiError::bad_field("size", "is required"))?
        .1
        .parse::<u64>()
        .map_err(|e| ApiError::bad_field("size", &e.to_string()))?;
    super::chunks::within_bound(meta.kind, "size", size)?;
    // "Stored" only for a caller that may read it: anyone else learns
    // nothing of others' blobs, and shows it holds the content by sending it.
    let here = app
        .store
        .get(&id)
        .map_err(|e| ApiError::internal(format!("reading metadata of {id}"), e))?;
    if super::download::readable_meta(&app, &who, here, &id).is_ok() {
        return Ok(Json(CheckReply { exists: true }));
    }
    fits(&app, &format!("blob {id}"), size)?;
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
    let what = format!("upload of {id}");
    let _in_flight = app.in_flight.enter(&who.name)?;
    let mut incoming = Incoming::start(&app, &what)?.bounded(meta.kind);
    incoming.receive(&app, &what, &headers, body).await?;
    let stored = incoming.store(&app, &what, &id, meta, &who).await?;
    Ok(match stored {
        Stored::New(m) => (StatusCode::CREATED, Json(who.view(m))),
        Stored::Existing(m) => (StatusCode::OK, Json(who.view(m))),
    })
}

/// An upload under way: the temporary file its bytes go to (hashed as
/// they come) and the room it holds against the quota. Dropped unstored,
/// it leaves nothing behind. One `PUT /v1` makes one; an OCI upload
/// session keeps one across its requests (`oci::uploads`).
pub struct Incoming {
    temp: TempFile,
    sink: HashingSink,
    held: Reservation,
    /// The most bytes it may have, and the kind that bounds it.
    max: Option<(u64, BlobKind)>,
}

impl Incoming {
    /// A new, empty upload. `what` names it in errors. Errors: 507/500
    /// if the temporary file cannot be created.
    pub fn start(app: &App, what: &str) -> Result<Self, ApiError> {
        let temp = app.store.temp_file();
        let sink = HashingSink::create_new(temp.path()).map_err(|e| storage_error(what, e, "creating the temporary file"))?;
        let held = app.quota.start(temp.path());
        Ok(Self {
            temp,
            sink,
            held,
            max: None,
        })
    }

    /// This upload, of a blob of `kind`, bounded as that kind is
    /// (`super::chunks::bound`): more is refused with 413.
    pub fn bounded(mut self, kind: BlobKind) -> Self {
        self.max = super::chunks::bound(kind).map(|max| (max, kind));
        self
    }

    /// Bytes received so far.
    pub fn len(&self) -> u64 {
        self.sink.len()
    }

    /// Whether nothing was received yet.
    pub fn is_empty(&self) -> bool {
        self.sink.is_empty()
    }

    /// Appends a request's body, within the room on disk and the quota
    /// (held as bytes are promised: its `Content-Length` at once, else step
    /// by step, so that uploads side by side cannot each take the same
    /// room) and at the least pace (R7). Errors: 400 for a `Content-Length`
    /// that is not a number or not what came, 507 without room (the rest
    /// of the body is read out so that the client gets the answer), 408
    /// too slow, 400 a broken body. After an error the upload is unusable.
    pub async fn receive(&mut self, app: &App, what: &str, headers: &HeaderMap, body: Body) -> Result<(), ApiError> {
        let declared = match headers.get(header::CONTENT_LENGTH) {
            Some(v) => Some(
                v.to_str()
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| ApiError::bad_request("Content-Length is not a number"))?,
            ),
            None => None,
        };
        // Known lengths are refused at once, before a byte is stored. A
        // body over its kind's bound but small enough is read out, so that
        // the client, still sending, gets the answer, not a broken pipe.
        let mut refused = None;
        if let Some(len) = declared {
            if let Some((_, kind)) = self.max {
                if let Err(e) = super::chunks::within_bound(kind, "Content-Length", self.sink.len() + len) {
                    if len > DRAIN_LIMIT {
                        return Err(e);
                    }
                    refused = Some(e);
                }
            }
            if refused.is_none() {
                fits(app, what, len)?;
            }
        }
        let before = self.sink.len();
        if let (Some(len), None) = (declared, &refused) {
            let need = (before + len).saturating_sub(self.held.bytes());
            hold(app, &mut self.held, need)
                .map_err(|why| ApiError::insufficient_storage(format!("no room for {what}: {why}; nothing stored")))?;
        }
        let mut stream = body.into_data_stream();
        let pace = BodyPace::new(&app.config);
        let mut received = 0u64;
        while refused.is_none() {
            // A byte at least every `body_idle_timeout`: the router's
            // stall timeout fails the body otherwise.
            let chunk = match stream.next().await {
                None => break,
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) if crate::server::error::stalled(&e) => {
                    return Err(ApiError::too_slow(
                        what,
                        received,
                        &format!("no byte for {} s", pace.idle.as_secs()),
                    ))
                }
                Some(Err(e)) => return Err(ApiError::interrupted(what, received, &interfaces::error::chain(&e))),
            };
            received += chunk.len() as u64;
            if let Some(why) = pace.too_slow(received) {
                return Err(ApiError::too_slow(what, received, &why));
            }
            let total = before + received;
            if let Some((_, kind)) = self.max {
                if let Err(e) = super::chunks::within_bound(kind, "body", total) {
                    refused = Some(e);
                    break;
                }
            }
            if total > self.held.bytes() {
                // A step ahead, else just what came.
                let need = total - self.held.bytes();
                if hold(app, &mut self.held, need.max(QUOTA_STEP)).is_err() {
                    if let Err(why) = hold(app, &mut self.held, need) {
                        refused = Some(ApiError::insufficient_storage(format!(
                            "{what} exceeds the room left ({why}); nothing stored"
                        )));
                        break;
                    }
                }
            }
            if let Err(e) = self.sink.write(chunk).await {
                refused = Some(storage_error(what, e, "writing the upload"));
                break;
            }
        }
        if let Some(err) = refused {
            // Read out the rest so that the client, still sending, gets
            // this answer rather than a reset connection.
            let mut drained = 0u64;
            while let Some(Ok(chunk)) = stream.next().await {
                drained += chunk.len() as u64;
                if drained > DRAIN_LIMIT {
                    break;
                }
            }
            return Err(err);
        }
        if let Some(declared) = declared.filter(|d| *d != received) {
            return Err(ApiError::interrupted(what, received, &format!("Content-Length was {declared}")));
        }
        Ok(())
    }

    /// Finishes the file and makes it visible as `id` if its content
    /// hashes to `id` (owned by `who` if new); a chunk index only when
    /// every chunk it lists is there (`super::chunks::commit_index`).
    /// Errors: 422 (v1's digest_mismatch) with the actual digest, 507/500
    /// writing or storing; for an index, 400 or 409 naming the field or
    /// chunk.
    pub async fn store(self, app: &App, what: &str, id: &BlobId, meta: PushMeta, who: &Caller) -> Result<Stored, ApiError> {
        let Self { temp, sink, held, .. } = self;
        let written = sink.finish().await.map_err(|e| storage_error(what, e, "writing the upload"))?;
        if written.id != *id {
            app.metrics.verification_failed("upload");
            return Err(ApiError::digest_mismatch(id, &written.id, written.len));
        }
        let stored = if meta.kind == BlobKind::CheckpointIndex {
            super::chunks::commit_index(app, temp, id, written.len, meta, who).await?
        } else {
            app.store
                .commit(temp, id, written.len, meta, who)
                .await
                .map_err(|e| ApiError::internal(format!("storing {id}"), format!("{e:#}")))?
        };
        // Stored: its bytes count as stored from now on, not as held.
        drop(held);
        app.metrics.received_bytes.inc_by(written.len);
        match &stored {
            Stored::New(m) => tracing::info!(%id, name = %m.name, kind = %m.kind, size = m.size, by = %who.name, "stored blob"),
            Stored::Existing(_) => tracing::info!(%id, by = %who.name, "blob pushed again; kept the stored copy"),
        }
        Ok(stored)
    }
}

/// Bytes an upload without a declared length holds at a time (16 MiB).
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

/// Holds `more` bytes for `held` within the quota and the free space of
/// the data disk beyond its reserve, as they are now ([`Reservation::grow`]).
/// Errors: which room is lacking, for the 507 message.
pub(crate) fn hold(app: &App, held: &mut Reservation, more: u64) -> Result<(), String> {
    let stored = || app.store.total_size();
    let disk = || app.store.free_bytes().unwrap_or(0).saturating_sub(app.config.reserve.0);
    let room = Room {
        max: app.config.max_size.map(|s| s.0),
        stored: &stored,
        disk: &disk,
    };
    held.grow(more, &room)
}

/// Whether `len` bytes of an upload (`what`) fit the free space less the
/// reserve and the quota as they are now, before any byte is read (the
/// room is then held as the bytes come: [`Reservation::grow`]). Errors:
/// 507 naming what is lacking.
pub(crate) fn fits(app: &App, what: &str, len: u64) -> Result<(), ApiError> {
    let free = app
        .store
        .free_bytes()
        .map_err(|e| ApiError::internal("reading free space of the data disk", e))?;
    let reserve = app.config.reserve.0;
    let no_room = |why: String| Err(ApiError::insufficient_storage(format!("no room for {what} of {len} bytes: {why}")));
    if len > free.saturating_sub(reserve) {
        return no_room(format!("{free} bytes free on the data disk, {reserve} kept in reserve"));
    }
    if let Some(max) = app.config.max_size.map(|s| s.0) {
        let used = app.store.total_size();
        if len > max.saturating_sub(used) {
            return no_room(format!("quota of {max} bytes with {used} used"));
        }
    }
    Ok(())
}

/// 507 for a full disk, 500 for any other I/O error.
fn storage_error(what: &str, e: io::Error, doing: &str) -> ApiError {
    if e.raw_os_error().is_some_and(|n| DISK_FULL_ERRNOS.contains(&n)) {
        ApiError::insufficient_storage(format!("disk full during {what} ({doing}: {e}); nothing stored"))
    } else {
        ApiError::internal(format!("{doing} ({what})"), e)
    }
}
