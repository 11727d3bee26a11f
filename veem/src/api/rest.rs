//! The VMI's provider operations as REST and JSON, for `curl` and HTTP
//! clients: deploy, negotiate, list, show, the actions on a VEE and the
//! migrations. Served on the VMI's own port, with its TLS (HTTP/2 and
//! HTTP/1.1, over TLS too), beside gRPC.
//! Each route calls the gRPC handler in-process, so the token, the
//! caller's role and what it may see are checked exactly as for gRPC; the
//! answers are the JSON the CLI prints with `-o json` (`crate::api::model`),
//! lists with `next_page_token`. `docs/openapi.json` describes every route
//! ([`ROUTES`]); `GET /v1/openapi.json` serves it without a token.
//!
//! Errors are Google's JSON error (AIP-193): `{"error": {"code": HTTP
//! status, "status": "NOT_FOUND", "message": "..."}}`, the gRPC code mapped
//! to the HTTP status as grpc-gateway maps it.

// Errors carry tonic's `Status`, as the gRPC handlers return it.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use interfaces::vmi::vmi_service_server::VmiService as _;
use interfaces::vmi::{self, Action};
use serde::Serialize;
use tonic::{Code, Status};

use crate::api::model::{Event, Migration, Negotiation, Rollout, Service, Usage, Vee};
use crate::api::server::VmiService;

/// The OpenAPI 3.1 description of the routes.
pub const OPENAPI: &str = include_str!("../../../docs/openapi.json");

/// Every route as `METHOD PATH` in OpenAPI's path syntax: what
/// `docs/openapi.json` must describe (a test checks both ways).
pub const ROUTES: &[&str] = &[
    "GET /v1/openapi.json",
    "GET /v1/services",
    "POST /v1/services",
    "POST /v1/negotiations",
    "GET /v1/services/{service_id}",
    "GET /v1/services/{service_id}/vees",
    "GET /v1/services/{service_id}/usage",
    "GET /v1/vees",
    "GET /v1/vees/{vee_id}",
    "POST /v1/vees/{vee_id}/{action}",
    "GET /v1/migrations",
    "POST /v1/migrations/{migration_id}/approve",
    "POST /v1/migrations/{migration_id}/reject",
    "DELETE /v1/services/{service_id}",
    "POST /v1/services/{service_id}/components/{component}/scale",
    "POST /v1/services/{service_id}/components/{component}/update",
    "GET /v1/services/{service_id}/components/{component}/rollout",
    "GET /v1/events",
];

type Vmi = Arc<VmiService>;

/// The REST routes over `vmi`'s handlers. Every request's body is read
/// whole first, at most `max_body` bytes (larger: 413), so that a route
/// that needs none still answers over HTTP/2 instead of resetting the
/// stream; a path no route has is 404, a route's path with another method
/// 405 (with `Allow`), both as Google's JSON error.
pub fn router(vmi: Arc<VmiService>, max_body: usize) -> Router {
    Router::new()
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/services", get(list_services).post(deploy))
        .route("/v1/negotiations", post(negotiate))
        .route("/v1/services/{service_id}", get(get_service).delete(undeploy))
        .route("/v1/services/{service_id}/vees", get(list_service_vees))
        .route("/v1/services/{service_id}/components/{component}/scale", post(scale))
        .route("/v1/services/{service_id}/components/{component}/update", post(update))
        .route("/v1/services/{service_id}/components/{component}/rollout", get(get_rollout))
        .route("/v1/services/{service_id}/usage", get(get_usage))
        .route("/v1/vees", get(list_vees))
        .route("/v1/vees/{vee_id}", get(get_vee))
        .route("/v1/vees/{vee_id}/{action}", post(vee_action))
        .route("/v1/migrations", get(list_migrations))
        .route("/v1/events", get(list_events))
        .route("/v1/migrations/{migration_id}/approve", post(approve))
        .route("/v1/migrations/{migration_id}/reject", post(reject))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(vmi)
        .layer(axum::middleware::from_fn_with_state(max_body, whole_body))
}

/// Reads the request's body whole (at most `max` bytes) before its route
/// runs, and answers what axum's extractors refuse (a body not UTF-8, a
/// query or path parameter that does not parse: their plain-text
/// rejections) in the JSON error shape too. Errors: 413 above `max`; 400
/// when the body cannot be read.
async fn whole_body(State(max): State<usize>, req: axum::extract::Request, next: axum::middleware::Next) -> Result<Response, RestError> {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, max).await.map_err(|e| {
        let too_large = std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            RestError::http(
                StatusCode::PAYLOAD_TOO_LARGE,
                Code::ResourceExhausted,
                format!("the body is larger than {max} bytes (listener.max_body_size)"),
            )
        } else {
            Status::invalid_argument(format!("the body cannot be read: {e}")).into()
        }
    })?;
    let resp = next
        .run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await;
    let json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json || !(resp.status().is_client_error() || resp.status().is_server_error()) {
        return Ok(resp);
    }
    // A rejection's text is short (axum's own words, with the part of
    // the input that did not parse); read it bounded all the same.
    let http = resp.status();
    let text = axum::body::to_bytes(resp.into_body(), 64 * 1024).await.unwrap_or_default();
    let code = match http {
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => Code::Unimplemented,
        StatusCode::PAYLOAD_TOO_LARGE => Code::ResourceExhausted,
        s if s.is_server_error() => Code::Internal,
        _ => Code::InvalidArgument,
    };
    Err(RestError::http(http, code, String::from_utf8_lossy(&text).into_owned()))
}

/// A path no route has: 404.
async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> RestError {
    Status::not_found(format!(
        "no route {method} {}: the routes are in /v1/openapi.json",
        interfaces::excerpt::excerpt(uri.path(), interfaces::excerpt::QUOTE_CHARS)
    ))
    .into()
}

/// A route's path with a method it does not take: 405 (axum adds `Allow`).
async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> RestError {
    RestError::http(
        StatusCode::METHOD_NOT_ALLOWED,
        Code::Unimplemented,
        format!(
            "{method} is not a method of {}: see Allow, or /v1/openapi.json",
            interfaces::excerpt::excerpt(uri.path(), interfaces::excerpt::QUOTE_CHARS)
        ),
    )
}

/// An error as Google's JSON error: a gRPC status, answered with the HTTP
/// status grpc-gateway maps its code to unless given one.
pub struct RestError {
    status: Status,
    http: Option<StatusCode>,
}

impl RestError {
    /// An error answered with `http`, `code` named in its body.
    pub(crate) fn http(http: StatusCode, code: Code, message: String) -> Self {
        Self {
            status: Status::new(code, message),
            http: Some(http),
        }
    }
}

impl From<Status> for RestError {
    fn from(status: Status) -> Self {
        Self { status, http: None }
    }
}

/// The HTTP status of a gRPC code (grpc-gateway's mapping).
fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `NOT_FOUND` for `Code::NotFound`: the code's name in Google's errors.
fn status_name(code: Code) -> String {
    let words = format!("{code:?}");
    let mut name = String::new();
    for (i, c) in words.char_indices() {
        if c.is_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

impl IntoResponse for RestError {
    /// The message is bounded (`interfaces::excerpt::message`), whatever
    /// the handler quoted.
    fn into_response(self) -> Response {
        let http = self.http.unwrap_or_else(|| http_status(self.status.code()));
        let body = serde_json::json!({"error": {
            "code": http.as_u16(),
            "status": status_name(self.status.code()),
            "message": interfaces::excerpt::message(self.status.message()),
        }});
        (http, Json(body)).into_response()
    }
}

type Answer<T> = Result<Json<T>, RestError>;

/// `msg` as a gRPC request with the caller's `Authorization` header and
/// its `Idempotency-Key`, the request ID of a call that changes something
/// (`api::server::replies`: asked again with the same key, the call's
/// first answer).
fn grpc<T>(headers: &HeaderMap, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    for (header, key) in [
        (axum::http::header::AUTHORIZATION.as_str(), "authorization"),
        ("idempotency-key", crate::api::server::replies::REQUEST_ID),
    ] {
        if let Some(v) = headers.get(header).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()) {
            r.metadata_mut().insert(key, v);
        }
    }
    r
}

/// A page of a list: `{"items": [...], "next_page_token": "..."}` (the
/// token `null` on the last page).
#[derive(Serialize)]
struct Page<T> {
    items: Vec<T>,
    next_page_token: Option<String>,
}

fn page<T>(items: Vec<T>, next: String) -> Page<T> {
    Page {
        items,
        next_page_token: (!next.is_empty()).then_some(next),
    }
}

/// Query parameters of a list.
#[derive(serde::Deserialize, Default)]
struct PageQuery {
    #[serde(default)]
    page_size: i32,
    #[serde(default)]
    page_token: String,
}

async fn openapi() -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], OPENAPI)
}

async fn list_services(State(vmi): State<Vmi>, headers: HeaderMap, Query(q): Query<PageQuery>) -> Answer<Page<Service>> {
    let req = vmi::ListServicesRequest {
        page_size: q.page_size,
        page_token: q.page_token,
    };
    let r = vmi.list_services(grpc(&headers, req)).await?.into_inner();
    Ok(Json(page(r.services.iter().map(Service::from).collect(), r.next_page_token)))
}

/// `POST /v1/services?request_id=ID` with the service manifest (TOML) as
/// the body: deploys it.
async fn deploy(
    State(vmi): State<Vmi>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
    manifest_toml: String,
) -> Answer<Service> {
    let req = vmi::DeployRequest {
        manifest_toml,
        request_id: q.get("request_id").cloned().unwrap_or_default(),
    };
    let s = vmi.deploy(grpc(&headers, req)).await?.into_inner();
    Ok(Json(Service::from(&s)))
}

/// `POST /v1/negotiations` with the manifest as the body: the verdict,
/// nothing reserved.
async fn negotiate(State(vmi): State<Vmi>, headers: HeaderMap, manifest_toml: String) -> Answer<Negotiation> {
    let r = vmi
        .negotiate(grpc(&headers, vmi::NegotiateRequest { manifest_toml }))
        .await?
        .into_inner();
    Ok(Json(Negotiation::from(&r)))
}

async fn get_service(State(vmi): State<Vmi>, headers: HeaderMap, Path(service_id): Path<String>) -> Answer<Service> {
    let s = vmi
        .get_service(grpc(&headers, vmi::GetServiceRequest { service_id }))
        .await?
        .into_inner();
    Ok(Json(Service::from(&s)))
}

/// `DELETE /v1/services/{id}`: undeploys it (every VEE stops; the service
/// stays listed, terminated).
async fn undeploy(State(vmi): State<Vmi>, headers: HeaderMap, Path(service_id): Path<String>) -> Answer<Service> {
    let s = vmi
        .delete_service(grpc(&headers, vmi::DeleteServiceRequest { service_id }))
        .await?
        .into_inner();
    Ok(Json(Service::from(&s)))
}

/// The body of a scale: `{"instances": N}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ScaleBody {
    instances: u32,
}

/// `POST /v1/services/{id}/components/{component}/scale` with
/// `{"instances": N}`: scales the component (VMI ScaleComponent).
async fn scale(
    State(vmi): State<Vmi>,
    headers: HeaderMap,
    Path((service_id, component)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Answer<Service> {
    let b: ScaleBody = serde_json::from_slice(&body).map_err(|e| {
        Status::invalid_argument(format!(
            "the body must be {{\"instances\": N}} (N from 0): {}",
            interfaces::excerpt::message(&e.to_string())
        ))
    })?;
    let req = vmi::ScaleComponentRequest {
        service_id,
        component,
        instances: b.instances,
    };
    let s = vmi.scale_component(grpc(&headers, req)).await?.into_inner();
    Ok(Json(Service::from(&s)))
}

/// The body of an update: `{"image": ID}` or `{"rollback": true}`, with
/// `max_unavailable` and `ready_timeout_s` optional.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    #[serde(default)]
    image: String,
    #[serde(default)]
    max_unavailable: u32,
    #[serde(default)]
    rollback: bool,
    #[serde(default)]
    ready_timeout_s: u64,
}

/// `POST /v1/services/{id}/components/{component}/update`: starts a
/// rolling image update (VMI UpdateComponent).
async fn update(
    State(vmi): State<Vmi>,
    headers: HeaderMap,
    Path((service_id, component)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Answer<Rollout> {
    let b: UpdateBody = serde_json::from_slice(&body).map_err(|e| {
        Status::invalid_argument(format!(
            "the body must be {{\"image\": ID}} or {{\"rollback\": true}}, with \"max_unavailable\" and \"ready_timeout_s\" optional: {}",
            interfaces::excerpt::message(&e.to_string())
        ))
    })?;
    let req = vmi::UpdateComponentRequest {
        service_id,
        component,
        image: b.image,
        max_unavailable: b.max_unavailable,
        rollback: b.rollback,
        ready_timeout: interfaces::time::duration_s(b.ready_timeout_s),
    };
    let r = vmi.update_component(grpc(&headers, req)).await?.into_inner();
    Ok(Json(Rollout::from(&r)))
}

/// `GET /v1/services/{id}/components/{component}/rollout`: the latest
/// rollout (VMI GetRollout).
async fn get_rollout(State(vmi): State<Vmi>, headers: HeaderMap, Path((service_id, component)): Path<(String, String)>) -> Answer<Rollout> {
    let req = vmi::GetRolloutRequest { service_id, component };
    let r = vmi.get_rollout(grpc(&headers, req)).await?.into_inner();
    Ok(Json(Rollout::from(&r)))
}

async fn vees(vmi: &VmiService, headers: &HeaderMap, service_id: String, q: PageQuery) -> Answer<Page<Vee>> {
    let req = vmi::ListVeesRequest {
        service_id,
        page_size: q.page_size,
        page_token: q.page_token,
    };
    let r = vmi.list_vees(grpc(headers, req)).await?.into_inner();
    Ok(Json(page(r.vees.iter().map(Vee::from).collect(), r.next_page_token)))
}

/// `GET /v1/events`'s query: ListEvents' fields.
#[derive(serde::Deserialize, Default)]
struct EventsQuery {
    #[serde(default)]
    service_id: String,
    #[serde(default)]
    page_size: i32,
    #[serde(default)]
    page_token: String,
    #[serde(default)]
    after_seq: u64,
    #[serde(default)]
    latest: bool,
}

async fn list_events(State(vmi): State<Vmi>, headers: HeaderMap, Query(q): Query<EventsQuery>) -> Answer<Page<Event>> {
    let req = vmi::ListEventsRequest {
        service_id: q.service_id,
        page_size: q.page_size,
        page_token: q.page_token,
        after_seq: q.after_seq,
        latest: q.latest,
    };
    let r = vmi.list_events(grpc(&headers, req)).await?.into_inner();
    Ok(Json(page(r.events.iter().map(Event::from).collect(), r.next_page_token)))
}

async fn list_vees(State(vmi): State<Vmi>, headers: HeaderMap, Query(q): Query<PageQuery>) -> Answer<Page<Vee>> {
    vees(&vmi, &headers, String::new(), q).await
}

async fn list_service_vees(
    State(vmi): State<Vmi>,
    headers: HeaderMap,
    Path(service_id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Answer<Page<Vee>> {
    // `/v1/services//vees` names no service (an empty ID would list all).
    if service_id.is_empty() {
        return Err(Status::not_found("service \"\" not found").into());
    }
    vees(&vmi, &headers, service_id, q).await
}

async fn get_usage(State(vmi): State<Vmi>, headers: HeaderMap, Path(service_id): Path<String>) -> Answer<Usage> {
    let u = vmi
        .get_usage(grpc(&headers, vmi::GetUsageRequest { service_id }))
        .await?
        .into_inner();
    Ok(Json(Usage::from(&u)))
}

async fn get_vee(State(vmi): State<Vmi>, headers: HeaderMap, Path(vee_id): Path<String>) -> Answer<Vee> {
    let v = vmi.get_vee(grpc(&headers, vmi::GetVeeRequest { vee_id })).await?.into_inner();
    Ok(Json(Vee::from(&v)))
}

/// The optional body of `POST /v1/vees/{id}/{action}`: `migrate` takes
/// `to_host`, `to_site` (the operator) and `reason`; `restore` takes
/// `checkpoint_id` (absent: the latest).
#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct ActionBody {
    checkpoint_id: String,
    to_host: String,
    to_site: String,
    reason: String,
    /// resize: vCPUs and MiB wanted (0 or absent: as it is).
    vcpus: u32,
    memory_mib: u64,
}

/// The optional body of `POST /v1/migrations/{id}/reject`.
#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct RejectBody {
    reason: String,
}

/// The optional JSON body `text` (empty: every field absent). Errors: not
/// JSON of a `T`, naming what is wrong.
fn json_body<T: serde::de::DeserializeOwned + Default>(text: &str) -> Result<T, RestError> {
    if text.trim().is_empty() {
        return Ok(T::default());
    }
    serde_json::from_str(text).map_err(|e| Status::invalid_argument(format!("body: {e}")).into())
}

/// `POST /v1/vees/{id}/{action}`: stop, suspend, resume, checkpoint,
/// restore, resize (answer: the VEE) or migrate (answer: the migration).
async fn vee_action(
    State(vmi): State<Vmi>,
    headers: HeaderMap,
    Path((vee_id, action)): Path<(String, String)>,
    body: String,
) -> Result<Response, RestError> {
    let body: ActionBody = json_body(&body)?;
    if action == "migrate" {
        let req = vmi::MigrateRequest {
            vee_id,
            to_host: body.to_host,
            to_site: body.to_site,
            reason: body.reason,
        };
        let m = vmi.migrate(grpc(&headers, req)).await?.into_inner();
        return Ok(Json(Migration::from(&m)).into_response());
    }
    if action == "resize" {
        let req = vmi::ResizeVeeRequest {
            vee_id,
            vcpus: body.vcpus,
            memory_mib: body.memory_mib,
        };
        let v = vmi.resize_vee(grpc(&headers, req)).await?.into_inner();
        return Ok(Json(Vee::from(&v)).into_response());
    }
    let parsed = match action.as_str() {
        "stop" => Action::Stop,
        "suspend" => Action::Suspend,
        "resume" => Action::Resume,
        "checkpoint" => Action::Checkpoint,
        "restore" => Action::Restore,
        other => {
            return Err(Status::not_found(format!(
                "no action {other:?}: stop, suspend, resume, checkpoint, restore, resize or migrate"
            ))
            .into())
        }
    };
    let req = vmi::VeeActionRequest {
        vee_id,
        action: parsed as i32,
        checkpoint_id: body.checkpoint_id,
    };
    let v = vmi.vee_action(grpc(&headers, req)).await?.into_inner();
    Ok(Json(Vee::from(&v)).into_response())
}

async fn list_migrations(State(vmi): State<Vmi>, headers: HeaderMap, Query(q): Query<PageQuery>) -> Answer<Page<Migration>> {
    let req = vmi::ListMigrationsRequest {
        page_size: q.page_size,
        page_token: q.page_token,
    };
    let r = vmi.list_migrations(grpc(&headers, req)).await?.into_inner();
    Ok(Json(page(r.migrations.iter().map(Migration::from).collect(), r.next_page_token)))
}

async fn approve(State(vmi): State<Vmi>, headers: HeaderMap, Path(migration_id): Path<String>) -> Answer<Migration> {
    let req = vmi::ApproveMigrationRequest { migration_id };
    let m = vmi.approve_migration(grpc(&headers, req)).await?.into_inner();
    Ok(Json(Migration::from(&m)))
}

/// `POST /v1/migrations/{id}/reject` with `{"reason": "..."}` (optional).
async fn reject(State(vmi): State<Vmi>, headers: HeaderMap, Path(migration_id): Path<String>, body: String) -> Answer<Migration> {
    let body: RejectBody = json_body(&body)?;
    let req = vmi::RejectMigrationRequest {
        migration_id,
        reason: body.reason,
    };
    let m = vmi.reject_migration(grpc(&headers, req)).await?.into_inner();
    Ok(Json(Migration::from(&m)))
}

#[cfg(test)]
mod tests;
