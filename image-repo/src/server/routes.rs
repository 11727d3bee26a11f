//! The `/v1` router and the small handlers: health, list, metadata, delete
//! and pins. Upload and download live in their own modules.

use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use interfaces::repo_client::types::validate_pin;
use interfaces::repo_client::BlobMeta;
use serde::Deserialize;

use super::auth::{require, Access};
use super::error::{parse_id, ApiError};
use super::store::Deleted;
use super::{download, upload, AppState};

/// The repository's HTTP API (see `interfaces::repo_client::protocol`).
pub fn router(app: AppState) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/blobs", get(list))
        .route("/v1/images", get(list))
        .route(
            "/v1/blobs/:id",
            get(download::download).head(download::download).put(upload::upload).delete(delete),
        )
        .route("/v1/blobs/:id/meta", get(meta))
        .route("/v1/blobs/:id/check", post(upload::check))
        .route("/v1/blobs/:id/pins/:pin", put(pin).delete(unpin))
        .fallback(|uri: Uri| async move { ApiError::no_route(uri.path()) })
        .layer(DefaultBodyLimit::disable())
        .with_state(app)
}

async fn health() -> &'static str {
    "ok"
}

async fn list(State(app): State<AppState>, headers: HeaderMap) -> Result<Json<Vec<BlobMeta>>, ApiError> {
    require(&app.config, &headers, Access::Read)?;
    app.store.list().map(Json).map_err(|e| ApiError::internal("listing blobs", e))
}

async fn meta(State(app): State<AppState>, Path(raw_id): Path<String>, headers: HeaderMap) -> Result<Json<BlobMeta>, ApiError> {
    require(&app.config, &headers, Access::Read)?;
    let id = parse_id(&raw_id)?;
    match app.store.get(&id) {
        Ok(Some(m)) => Ok(Json(m)),
        Ok(None) => Err(ApiError::not_found(&id)),
        Err(e) => Err(ApiError::internal(format!("reading metadata of {id}"), e)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    #[serde(default)]
    force: bool,
}

async fn delete(
    State(app): State<AppState>,
    Path(raw_id): Path<String>,
    query: Result<Query<DeleteQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    require(&app.config, &headers, Access::Write)?;
    let id = parse_id(&raw_id)?;
    let force = query.map_err(|e| ApiError::bad_request(e.body_text()))?.force;
    match app.store.delete(&id, force).await {
        Ok(Deleted::Removed(m)) => {
            tracing::info!(%id, name = %m.name, forced_pins = ?m.pins, "deleted blob");
            Ok(StatusCode::NO_CONTENT)
        }
        Ok(Deleted::NotFound) => Err(ApiError::not_found(&id)),
        Ok(Deleted::Pinned(pins)) => Err(ApiError::pinned(&id, &pins)),
        Err(e) => Err(ApiError::internal(format!("deleting {id}"), format!("{e:#}"))),
    }
}

async fn pin(State(app): State<AppState>, Path((raw_id, pin)): Path<(String, String)>, headers: HeaderMap) -> Result<StatusCode, ApiError> {
    set_pin(app, raw_id, pin, headers, true).await
}

async fn unpin(
    State(app): State<AppState>,
    Path((raw_id, pin)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    set_pin(app, raw_id, pin, headers, false).await
}

async fn set_pin(app: AppState, raw_id: String, pin: String, headers: HeaderMap, on: bool) -> Result<StatusCode, ApiError> {
    require(&app.config, &headers, Access::Write)?;
    let id = parse_id(&raw_id)?;
    validate_pin(&pin).map_err(|r| ApiError::bad_request(format!("pin name {pin:?}: {r}")))?;
    match app.store.set_pin(&id, &pin, on).await {
        Ok(Some(m)) => {
            tracing::info!(%id, pin, on, pins = ?m.pins, "pin changed");
            Ok(StatusCode::NO_CONTENT)
        }
        Ok(None) => Err(ApiError::not_found(&id)),
        Err(e) => Err(ApiError::internal(format!("updating pins of {id}"), format!("{e:#}"))),
    }
}
