//! The `/v1` router and the small handlers: health, list, metadata, delete,
//! pins and sharing. Upload and download live in their own modules; who
//! may do what is in [`super::auth`].

use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use interfaces::repo_client::types::validate_pin;
use interfaces::repo_client::BlobMeta;
use serde::Deserialize;
use tower_http::timeout::RequestBodyTimeoutLayer;

use super::auth::{caller, caller_as, Caller, Role};
use super::download::{readable, readable_or_pulled};
use super::error::{parse_id, ApiError};
use super::store::{Deleted, LimitReached};
use super::{download, upload, AppState};

/// The repository's HTTP API (see `interfaces::repo_client::protocol`).
pub fn router(app: AppState) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        // Probes for supervisors, as the VEEM's: no token.
        .route("/healthz", get(health))
        .route("/readyz", get(health))
        .route("/v1/blobs", get(list))
        .route("/v1/images", get(list))
        .route(
            "/v1/blobs/{id}",
            get(download::download).head(download::download).put(upload::upload).delete(delete),
        )
        .route("/v1/blobs/missing", post(super::chunks::missing))
        .route("/v1/blobs/{id}/meta", get(meta))
        .route("/v1/blobs/{id}/check", post(upload::check))
        .route("/v1/blobs/{id}/pins/{pin}", put(pin).delete(unpin))
        .route("/v1/blobs/{id}/readers/{name}", put(share))
        .route("/v1/blobs/{id}/grant", post(grant))
        .route("/v1/blobs/{id}/public", put(publish).delete(unpublish))
        .route("/v1/blobs/{id}/replicate", post(replicate))
        .route("/v1/gc", post(collect))
        .merge(super::oci::routes())
        .fallback(|uri: Uri| async move { ApiError::no_route(uri.path()) })
        .layer(axum::middleware::from_fn_with_state(app.clone(), super::connections::throttle_auth))
        .layer(DefaultBodyLimit::disable())
        // Every request body, wherever it goes: one that brings no byte
        // for `body_idle_timeout` fails (`error::stalled`), so a stalled
        // client holds no request, slot or upload share past it.
        .layer(RequestBodyTimeoutLayer::new(app.config.body_idle_timeout))
        .with_state(app)
}

async fn health() -> &'static str {
    "ok"
}

/// Records a list page holds at most (and when the client names no `n`).
const PAGE: usize = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    n: Option<usize>,
    last: Option<String>,
}

/// `GET /v1/blobs?n=N&last=ID`: a page of the blobs the caller may read,
/// in digest order, at most [`PAGE`]; `Link: <...>; rel="next"` names the
/// next page while records follow (one answer held every record before
/// issue 39: 11 MB at 100,000). Read on a blocking thread, looking at no
/// more than ten pages' worth of records per request.
async fn list(
    State(app): State<AppState>,
    query: Result<Query<PageQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let who = caller(&app.config, &headers)?;
    let q = query.map_err(|e| ApiError::bad_request(e.body_text()))?.0;
    let n = q.n.unwrap_or(PAGE).min(PAGE);
    let after = q.last.as_deref().map(parse_id).transpose()?;
    let reader = who.clone();
    let (items, next) = tokio::task::spawn_blocking(move || app.store.page(after.as_ref(), n, 10 * PAGE, |m| reader.may_read(m)))
        .await
        .map_err(|e| ApiError::internal("listing blobs", e))?
        .map_err(|e| ApiError::internal("listing blobs", format!("{e:#}")))?;
    let items: Vec<BlobMeta> = items.into_iter().map(|m| who.view(m)).collect();
    let mut resp = Json(items).into_response();
    if let Some(next) = next {
        let link = format!("</v1/blobs?n={n}&last={next}>; rel=\"next\"");
        if let Ok(v) = HeaderValue::from_str(&link) {
            resp.headers_mut().insert(header::LINK, v);
        }
    }
    Ok(resp)
}

async fn meta(State(app): State<AppState>, Path(raw_id): Path<String>, headers: HeaderMap) -> Result<Json<BlobMeta>, ApiError> {
    let who = caller(&app.config, &headers)?;
    let id = parse_id(&raw_id)?;
    Ok(Json(who.view(readable_or_pulled(&app, &who, &id).await?)))
}

/// `PUT /v1/blobs/{id}/readers/{name}`: `name` may read the blob too. For
/// its owner and the operator, and for a site sharing what it may read
/// (a checkpoint or image of a VEE it hands to a peer site).
async fn share(
    State(app): State<AppState>,
    Path((raw_id, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let who = caller(&app.config, &headers)?;
    let id = parse_id(&raw_id)?;
    validate_pin(&name).map_err(|r| ApiError::bad_request(format!("reader name {name:?}: {r}")))?;
    let m = readable(&app, &who, &id)?;
    if !(who.may_manage(&m) || who.role == Role::Site) {
        return Err(ApiError::forbidden(format!("{} may read blob {id} but not share it", who.name)));
    }
    app.store
        .add_reader(&id, &name)
        .await
        .map_err(|e| store_error(e, format!("sharing {id}")))?
        .ok_or_else(|| ApiError::not_found(&id))?;
    tracing::info!(%id, by = %who.name, with = %name, "blob shared");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantQuery {
    #[serde(rename = "for")]
    provider: String,
}

/// `POST /v1/blobs/{id}/grant?for=PROVIDER`: a site (or the operator)
/// asks whether service provider `PROVIDER` may read the blob, before it
/// deploys a manifest that names it. 204 if it may — it is public, or
/// `PROVIDER` has a token here and may read it — and the caller may read
/// it from then on, to pull it on its hosts; 404 if not (or no such blob).
async fn grant(
    State(app): State<AppState>,
    Path(raw_id): Path<String>,
    query: Result<Query<GrantQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let who = caller_as(&app.config, &headers, &[Role::Site, Role::Operator], "ask what a provider may read")?;
    let id = parse_id(&raw_id)?;
    let provider = query.map_err(|e| ApiError::bad_request(e.body_text()))?.0.provider;
    // A blob this repository lacks: a peer site's repository may have it
    // for the provider (which lets this site read it there); then it is
    // pulled through, the provider's here as there, with a token here or
    // not.
    let mut granted_at_peer = false;
    if app
        .store
        .get(&id)
        .map_err(|e| ApiError::internal(format!("reading metadata of {id}"), e))?
        .is_none()
        && app.peers.serve(&who)
    {
        if let Some(peer) = app.peers.grant(&id, &provider).await {
            granted_at_peer = app.peers.pull_through_from(&app, peer, &id, &provider).await?.is_some();
        }
    }
    // A public blob is every provider's, with a token here or not.
    let m = readable(&app, &Caller::operator(), &id)?;
    let provider_reads = match super::auth::provider(&app.config, &provider) {
        Some(p) => app
            .store
            .may_read(&p, &m)
            .map_err(|e| ApiError::internal(format!("reading metadata of {id}"), format!("{e:#}")))?,
        None => false,
    };
    if !(m.public || granted_at_peer || provider_reads) {
        return Err(ApiError::not_found(&id));
    }
    if who.role == Role::Site {
        app.store
            .add_reader(&id, &who.name)
            .await
            .map_err(|e| store_error(e, format!("sharing {id}")))?;
    }
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplicateQuery {
    to: String,
}

/// `POST /v1/blobs/{id}/replicate?to=PEER`: a site (or the operator) has
/// blob `id` pushed to peer site `PEER`'s repository, readable by that
/// site there (`super::peers`). 204; 502 naming the peer's answer.
async fn replicate(
    State(app): State<AppState>,
    Path(raw_id): Path<String>,
    query: Result<Query<ReplicateQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let who = caller_as(
        &app.config,
        &headers,
        &[Role::Site, Role::Operator],
        "replicate blobs to peer sites",
    )?;
    let id = parse_id(&raw_id)?;
    let to = query.map_err(|e| ApiError::bad_request(e.body_text()))?.0.to;
    let m = readable(&app, &who, &id)?;
    app.peers.replicate(&app, &m, &to).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GcQuery {
    /// Blobs stored less than this long ago are kept (`30m`, `1h`;
    /// default 1 h).
    grace: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /v1/gc?grace=1h&dry_run=true`: garbage collection (the operator
/// only; what it keeps: `super::gc`). JSON `{"removed", "bytes", "dry_run"}`.
async fn collect(
    State(app): State<AppState>,
    query: Result<Query<GcQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Json<super::gc::Collected>, ApiError> {
    caller_as(&app.config, &headers, &[Role::Operator], "collect garbage")?;
    let q = query.map_err(|e| ApiError::bad_request(e.body_text()))?.0;
    let grace = match q.grace {
        Some(g) => humantime::parse_duration(&g).map_err(|e| ApiError::bad_field("grace", &e.to_string()))?,
        None => std::time::Duration::from_secs(3600),
    };
    let out = super::gc::collect(&app, grace, q.dry_run).await?;
    tracing::info!(
        removed = out.removed.len(),
        bytes = out.bytes,
        dry_run = out.dry_run,
        "garbage collection"
    );
    Ok(Json(out))
}

async fn publish(State(app): State<AppState>, Path(raw_id): Path<String>, headers: HeaderMap) -> Result<StatusCode, ApiError> {
    set_public(app, raw_id, headers, true).await
}

async fn unpublish(State(app): State<AppState>, Path(raw_id): Path<String>, headers: HeaderMap) -> Result<StatusCode, ApiError> {
    set_public(app, raw_id, headers, false).await
}

/// `PUT|DELETE /v1/blobs/{id}/public`: the operator only.
async fn set_public(app: AppState, raw_id: String, headers: HeaderMap, public: bool) -> Result<StatusCode, ApiError> {
    caller_as(&app.config, &headers, &[Role::Operator], "mark blobs public")?;
    let id = parse_id(&raw_id)?;
    app.store
        .set_public(&id, public)
        .await
        .map_err(|e| ApiError::internal(format!("marking {id} public"), format!("{e:#}")))?
        .ok_or_else(|| ApiError::not_found(&id))?;
    tracing::info!(%id, public, "visibility changed");
    Ok(StatusCode::NO_CONTENT)
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
    let who = caller(&app.config, &headers)?;
    let id = parse_id(&raw_id)?;
    let force = query.map_err(|e| ApiError::bad_request(e.body_text()))?.force;
    let m = readable(&app, &who, &id)?;
    if !who.may_manage(&m) {
        return Err(ApiError::forbidden(format!(
            "blob {id} belongs to {}; {} may not delete it",
            m.owner, who.name
        )));
    }
    match app.store.delete(&id, force).await {
        Ok(Deleted::Removed(m)) => {
            tracing::info!(%id, name = %m.name, forced_pins = ?m.pins, "deleted blob");
            Ok(StatusCode::NO_CONTENT)
        }
        Ok(Deleted::NotFound) => Err(ApiError::not_found(&id)),
        Ok(Deleted::Pinned(pins)) => Err(ApiError::pinned(&id, &pins)),
        Ok(Deleted::Held(holders)) => Err(ApiError::in_repositories(&id, &holders)),
        Ok(Deleted::Listed(indexes)) => Err(ApiError::in_indexes(&id, &indexes)),
        // Only garbage collection's delete keeps a blob used meanwhile.
        Ok(Deleted::Used) => Err(ApiError::internal(format!("deleting {id}"), "kept as used")),
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

/// Pins: whoever may read the blob (a site keeps the checkpoints it
/// records; a provider its images).
async fn set_pin(app: AppState, raw_id: String, pin: String, headers: HeaderMap, on: bool) -> Result<StatusCode, ApiError> {
    let who = caller(&app.config, &headers)?;
    let id = parse_id(&raw_id)?;
    validate_pin(&pin).map_err(|r| ApiError::bad_request(format!("pin name {pin:?}: {r}")))?;
    readable(&app, &who, &id)?;
    match app.store.set_pin(&id, &pin, on, app.config.max_pins_per_blob).await {
        Ok(Some(m)) => {
            tracing::info!(%id, pin, on, pins = ?m.pins, "pin changed");
            Ok(StatusCode::NO_CONTENT)
        }
        Ok(None) => Err(ApiError::not_found(&id)),
        Err(e) => Err(store_error(e, format!("updating pins of {id}"))),
    }
}

/// 409 for a record at one of its bounds, else 500 with `context`.
fn store_error(e: anyhow::Error, context: String) -> ApiError {
    match e.downcast_ref::<LimitReached>() {
        Some(limit) => ApiError::conflict(limit.to_string()),
        None => ApiError::internal(context, format!("{e:#}")),
    }
}
