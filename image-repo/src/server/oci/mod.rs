//! The OCI Distribution API v1.1 (`/v2/`) over the same store as `/v1`
//! (issue 39): blobs (HEAD, GET with `Range`, DELETE), uploads (monolithic,
//! chunked, cross-repository mount), manifests by digest and by tag, tag
//! lists and the referrers API, with the specification's error bodies
//! ([`error`]) and paginated lists. Every call needs a token, as `Bearer`
//! or as the password of `Basic` ([`super::auth::caller`]).
//!
//! Repositories map onto the owners of `/v1` ([`Access`]): the first
//! component of a repository's name is a namespace, the name of a token
//! (`acme/debian`, `site-a/checkpoints`). A caller pushes, deletes and
//! lists tags in its own namespace (the operator in every one); it reads
//! a blob or manifest of any repository that holds it if it may read that
//! blob by the rules of `/v1` (owner, reader, public). Anything else it
//! may not read answers as unknown.

pub mod blobs;
pub mod error;
pub mod lists;
pub mod manifests;
pub mod path;
pub mod uploads;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use interfaces::repo_client::BlobMeta;
use interfaces::BlobId;

use self::error::{codes, internal, OciError};
use self::path::Endpoint;
use super::auth::{caller, Caller, Role};
use super::repositories::ManifestRecord;
use super::{App, AppState};

/// The header every `/v2` answer carries, by which clients know a registry.
pub const API_VERSION_HEADER: &str = "docker-distribution-api-version";

/// Items of a list page when the client names no `n`, and at most.
pub const PAGE: usize = 1000;

/// The `/v2` routes, to merge into the repository's router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v2", get(base))
        .route("/v2/", get(base))
        .route("/v2/{*rest}", any(dispatch))
}

/// `GET /v2/`: 200 for a known token, else 401 with the challenge.
async fn base(State(app): State<AppState>, headers: HeaderMap) -> Response {
    with_version(match caller(&app.config, &headers) {
        Ok(_) => (StatusCode::OK, axum::Json(serde_json::json!({}))).into_response(),
        Err(e) => OciError::from_api(e).into_response(),
    })
}

/// Every other `/v2` path: the endpoint and the method pick the handler.
async fn dispatch(
    State(app): State<AppState>,
    method: Method,
    Path(rest): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_version(match route(&app, &method, &rest, &uri, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    })
}

async fn route(app: &App, method: &Method, rest: &str, uri: &Uri, headers: &HeaderMap, body: Body) -> Result<Response, OciError> {
    let who = caller(&app.config, headers)?;
    let endpoint = path::parse(rest).ok_or_else(|| {
        OciError::new(
            StatusCode::NOT_FOUND,
            codes::UNSUPPORTED,
            format!("no endpoint of the OCI Distribution API at /v2/{rest}"),
        )
    })?;
    let name = endpoint.name();
    path::check_name(name).map_err(|why| OciError::bad(codes::NAME_INVALID, format!("repository name {name:?}: {why}")))?;
    let access = Access { app, who: &who, name };
    let query = uri.query().unwrap_or("");
    // A request that brings a body counts as an upload in flight while
    // it is answered (`in_flight`): 429 beyond the caller's share.
    let _in_flight = match (&endpoint, method.as_str()) {
        (Endpoint::Uploads { .. }, "POST") | (Endpoint::Upload { .. }, "PATCH" | "PUT") | (Endpoint::Manifest { .. }, "PUT") => {
            Some(app.in_flight.enter(&who.name)?)
        }
        _ => None,
    };
    match (endpoint, method.as_str()) {
        (Endpoint::Blob { digest, .. }, "GET" | "HEAD") => blobs::get(&access, method, headers, digest).await,
        (Endpoint::Blob { digest, .. }, "DELETE") => blobs::delete(&access, digest).await,
        (Endpoint::Uploads { .. }, "POST") => uploads::start(&access, query, headers, body).await,
        (Endpoint::Upload { session, .. }, "GET") => uploads::status(&access, session).await,
        (Endpoint::Upload { session, .. }, "PATCH") => uploads::patch(&access, session, headers, body).await,
        (Endpoint::Upload { session, .. }, "PUT") => uploads::finish(&access, session, query, headers, body).await,
        (Endpoint::Upload { session, .. }, "DELETE") => uploads::cancel(&access, session).await,
        (Endpoint::Manifest { reference, .. }, "GET" | "HEAD") => manifests::get(&access, method, reference).await,
        (Endpoint::Manifest { reference, .. }, "PUT") => manifests::put(&access, reference, headers, body).await,
        (Endpoint::Manifest { reference, .. }, "DELETE") => manifests::delete(&access, reference).await,
        (Endpoint::Tags { .. }, "GET") => lists::tags(&access, query).await,
        (Endpoint::Referrers { digest, .. }, "GET") => lists::referrers(&access, digest, query).await,
        (_, m) => Err(OciError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            codes::UNSUPPORTED,
            format!("{m} is not a method of /v2/{rest}"),
        )),
    }
}

fn with_version(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(API_VERSION_HEADER, HeaderValue::from_static("registry/2.0"));
    resp
}

/// A caller in a repository: what it may do there.
pub struct Access<'a> {
    /// The server.
    pub app: &'a App,
    /// Who calls.
    pub who: &'a Caller,
    /// The repository's name (checked).
    pub name: &'a str,
}

impl Access<'_> {
    /// Whether the caller may push to, delete from and list the
    /// repository: the operator, or the owner of its namespace.
    pub fn owns(&self) -> bool {
        owns(self.who, self.name)
    }

    /// Errors: 403 DENIED unless the caller [`owns`](Self::owns) the repository.
    pub fn must_own(&self, doing: &str) -> Result<(), OciError> {
        if self.owns() {
            Ok(())
        } else {
            Err(OciError::denied(format!(
                "{} may not {doing} in repository {}: its namespace is {:?}, not the caller's",
                self.who.name,
                self.name,
                self.name.split('/').next().unwrap_or_default()
            )))
        }
    }

    /// Whether the caller may read `m` here (the repository holds it).
    pub fn may_read(&self, m: &BlobMeta) -> bool {
        self.owns() || self.who.may_read(m)
    }

    /// The record of blob `id` if the repository holds it and the caller
    /// may read it. Errors: 404 BLOB_UNKNOWN otherwise.
    pub fn blob(&self, id: &BlobId) -> Result<BlobMeta, OciError> {
        let repos = self.app.store.repos();
        let linked = repos
            .has_blob(self.name, id)
            .map_err(internal(format!("reading repository {}", self.name)))?;
        self.readable(linked, id).ok_or_else(|| OciError::blob_unknown(self.name, id))
    }

    /// The blob record and the manifest record of manifest `id` if the
    /// repository holds it and the caller may read it. Errors: 404
    /// MANIFEST_UNKNOWN otherwise.
    pub fn manifest(&self, id: &BlobId) -> Result<(BlobMeta, ManifestRecord), OciError> {
        let repos = self.app.store.repos();
        let record = repos
            .manifest(self.name, id)
            .map_err(internal(format!("reading repository {}", self.name)))?;
        record
            .and_then(|r| self.readable(true, id).map(|m| (m, r)))
            .ok_or_else(|| OciError::manifest_unknown(self.name, &id.to_string()))
    }

    fn readable(&self, linked: bool, id: &BlobId) -> Option<BlobMeta> {
        if !linked {
            return None;
        }
        // A store error reads as unknown here; it is logged.
        match self.app.store.get(id) {
            Ok(m) => m.filter(|m| self.may_read(m)),
            Err(e) => {
                tracing::error!(%id, error = %format!("{e:#}"), "reading metadata");
                None
            }
        }
    }
}

/// Whether `who` owns repository `name`'s namespace (or is the operator).
pub fn owns(who: &Caller, name: &str) -> bool {
    who.role == Role::Operator || name.split('/').next() == Some(who.name.as_str())
}

/// Parses a digest of the API. Errors: 400 DIGEST_INVALID naming it.
pub fn parse_digest(raw: &str) -> Result<BlobId, OciError> {
    raw.parse::<BlobId>()
        .map_err(|e| OciError::bad(codes::DIGEST_INVALID, format!("digest {raw:?}: {e}")))
}

/// `n` and `last` of a list's query: at most [`PAGE`] items.
/// Errors: 400 naming the field.
pub fn page_query(query: &str) -> Result<(usize, Option<String>), OciError> {
    let mut n = PAGE;
    let mut last = None;
    for (k, v) in form_pairs(query) {
        match k.as_str() {
            "n" => {
                n = v
                    .parse::<usize>()
                    .map_err(|e| OciError::bad(codes::UNSUPPORTED, format!("query field `n`: {e}")))?
                    .min(PAGE)
            }
            "last" => last = Some(v),
            _ => {}
        }
    }
    Ok((n, last))
}

/// The pairs of a query string, decoded.
pub fn form_pairs(query: &str) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&format!("/?{query}").parse().unwrap_or_default())
        .map(|q| q.0)
        .unwrap_or_default()
}
