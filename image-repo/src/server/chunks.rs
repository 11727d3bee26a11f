//! Checkpoints in chunks (`interfaces::chunks`) over HTTP: which chunks a
//! caller must push (`POST /v1/blobs/missing`), the bounds of a chunk and
//! of an index, and an index stored only when every chunk it lists is
//! there for its uploader (the checkpoint's commit point). What keeps
//! chunks and who reads them through an index: `super::store` and
//! [`super::chunk_refs`]; their collection: `super::gc`.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use interfaces::chunks::{ChunkIndex, MAX_CHUNK, MAX_INDEX_BYTES};
use interfaces::repo_client::protocol::{MissingQuery, MissingReply, MAX_MISSING_QUERY};
use interfaces::repo_client::{BlobKind, PushMeta};
use interfaces::BlobId;

use super::auth::{caller, Caller};
use super::error::ApiError;
use super::store::{Stored, TempFile};
use super::{App, AppState};

/// Most bytes of a `missing` query's body: [`MAX_MISSING_QUERY`] digests
/// of 74 bytes (`"sha256:<64 hex>",`) with room for white space.
pub const MAX_MISSING_BODY: usize = MAX_MISSING_QUERY * 128;

/// The most bytes a blob of `kind` may have, for the kinds that have a
/// bound: a chunk ([`MAX_CHUNK`]), a chunk index ([`MAX_INDEX_BYTES`]).
pub fn bound(kind: BlobKind) -> Option<u64> {
    match kind {
        BlobKind::CheckpointChunk => Some(u64::from(MAX_CHUNK)),
        BlobKind::CheckpointIndex => Some(MAX_INDEX_BYTES),
        _ => None,
    }
}

/// 413 for `len` bytes (in `field`) of a blob of `kind`, if over its
/// [`bound`].
pub fn within_bound(kind: BlobKind, field: &str, len: u64) -> Result<(), ApiError> {
    match bound(kind) {
        Some(max) if len > max => Err(ApiError::too_large(
            field,
            &format!("{len} bytes; a {kind} has at most {max}; nothing stored"),
        )),
        _ => Ok(()),
    }
}

/// `POST /v1/blobs/missing`: of the digests of a JSON [`MissingQuery`]
/// (at most [`MAX_MISSING_QUERY`]), those the caller must push — not
/// stored, or not readable by it, so that nothing tells it whether others'
/// content exists — in order. The others' collection grace starts again,
/// so that an index listing them can follow. Errors: 401; 400 naming
/// `digests` for a body that is not such a query or holds too many.
pub async fn missing(State(app): State<AppState>, headers: HeaderMap, body: Body) -> Result<Json<MissingReply>, ApiError> {
    let who = caller(&app.config, &headers)?;
    let too_many = || format!("at most {MAX_MISSING_QUERY} digests ({MAX_MISSING_BODY} bytes) per query");
    // A body that stalls is cut by the router's `body_idle_timeout`: 408.
    let raw = axum::body::to_bytes(body, MAX_MISSING_BODY).await.map_err(|e| {
        if crate::server::error::stalled(&e) {
            let idle = app.config.body_idle_timeout.as_secs();
            return ApiError::too_slow("missing query", 0, &format!("no byte of its body for {idle} s (body_idle_timeout)"));
        }
        ApiError::bad_field("digests", &format!("{} (or the body broke off: {e})", too_many()))
    })?;
    let query: MissingQuery =
        serde_json::from_slice(&raw).map_err(|e| ApiError::bad_field("digests", &format!("not a query of digests: {e}")))?;
    if query.digests.len() > MAX_MISSING_QUERY {
        return Err(ApiError::bad_field("digests", &format!("{} digests; {}", query.digests.len(), too_many())));
    }
    let (missing, present) = app
        .store
        .present(&who, &query.digests)
        .await
        .map_err(|e| ApiError::internal("finding missing chunks", format!("{e:#}")))?;
    app.metrics.deduplicated_bytes.inc_by(present);
    tracing::debug!(by = %who.name, asked = query.digests.len(), missing = missing.len(), present, "missing query");
    Ok(Json(MissingReply { missing }))
}

/// Stores the verified upload `temp` (`size` bytes) of a chunk index as
/// `id` (`super::store::Store::commit_index`). Errors: 400 naming the
/// field of an index that does not parse, 409 naming the first chunk that
/// is not there for `who`, 500 reading or storing.
pub async fn commit_index(
    app: &App,
    temp: TempFile,
    id: &BlobId,
    size: u64,
    meta: PushMeta,
    who: &Caller,
) -> Result<Stored, ApiError> {
    within_bound(BlobKind::CheckpointIndex, "body", size)?;
    let raw = tokio::fs::read(temp.path())
        .await
        .map_err(|e| ApiError::internal(format!("reading chunk index {id}"), e))?;
    let index = ChunkIndex::parse(&raw).map_err(|e| {
        let field = if e.field.is_empty() { "index" } else { e.field.as_str() };
        ApiError::bad_field(field, &format!("{}; nothing stored", e.reason))
    })?;
    drop(raw);
    app.store
        .commit_index(temp, id, size, meta, who, &index)
        .await
        .map_err(|e| ApiError::internal(format!("storing {id}"), format!("{e:#}")))?
        .map_err(|u| ApiError::chunk_missing(id, &u.chunk, &u.reason))
}
