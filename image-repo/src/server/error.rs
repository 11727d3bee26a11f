//! Errors of the HTTP handlers: a status, a machine-readable code and a
//! sentence naming the ID or field and the reason, sent as a JSON
//! [`ErrorBody`].

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use interfaces::repo_client::protocol::{codes, ErrorBody};
use interfaces::BlobId;

use super::repositories::{Held, Holders};

/// An error answer of the repository.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    actual: Option<String>,
    content_range: Option<String>,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            actual: None,
            content_range: None,
            retry_after: None,
        }
    }

    /// This error with `Retry-After: secs` (a 429 or 503).
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// 400: malformed ID, metadata or request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, codes::BAD_REQUEST, message)
    }

    /// 400 about one field: "`field`: reason".
    pub fn bad_field(field: &str, reason: &str) -> Self {
        Self::bad_request(format!("field `{field}`: {reason}"))
    }

    /// 401: missing or wrong bearer token.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, codes::UNAUTHORIZED, message)
    }

    /// 429: the caller's address failed to authenticate too often, or the
    /// caller has too many uploads under way.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, codes::TOO_MANY_REQUESTS, message)
    }

    /// 403: the caller may see the blob (or call) but not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, codes::FORBIDDEN, message)
    }

    /// 404: no such blob, or none the caller may read.
    pub fn not_found(id: &BlobId) -> Self {
        Self::new(StatusCode::NOT_FOUND, codes::NOT_FOUND, format!("blob {id} not found"))
    }

    /// 404 for a path the API does not have.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            codes::NOT_FOUND,
            format!("no such API path {path:?}; paths start with /v1 (the repository's own API) or /v2 (the OCI Distribution API)"),
        )
    }

    /// 422: the content hashes to `actual`, not to the declared `id`.
    pub fn digest_mismatch(id: &BlobId, actual: &BlobId, len: u64) -> Self {
        let mut e = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            codes::DIGEST_MISMATCH,
            format!("blob {id}: the {len} bytes received hash to {actual}, not the declared ID; nothing stored"),
        );
        e.actual = Some(actual.to_string());
        e
    }

    /// 409: the record is at one of its bounds (pins, readers per blob).
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, codes::LIMIT_REACHED, message)
    }

    /// 409: delete of a pinned blob without force.
    pub fn pinned(id: &BlobId, pins: &[String]) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            codes::PINNED,
            format!("blob {id} is pinned by {}; unpin it or delete with force", pins.join(", ")),
        )
    }

    /// 409: delete of a blob OCI repositories hold without force; names
    /// them (at most [`Holders::MAX`]).
    pub fn in_repositories(id: &BlobId, holders: &Holders) -> Self {
        let names: Vec<String> = holders
            .items
            .iter()
            .map(|(repo, held)| match held {
                Held::Blob => format!("{repo} (a blob)"),
                Held::Manifest => format!("{repo} (a manifest)"),
            })
            .collect();
        let more = if holders.more { " and more" } else { "" };
        Self::new(
            StatusCode::CONFLICT,
            codes::IN_REPOSITORY,
            format!(
                "blob {id} is held by the OCI repositories {}{more}; delete it there (DELETE /v2/NAME/blobs/{id}, or the manifest) or delete with force, which removes it from them too",
                names.join(", ")
            ),
        )
    }

    /// 409: delete of a chunk that stored chunk indexes list (the first
    /// few) without force.
    pub fn in_indexes(id: &BlobId, indexes: &[BlobId]) -> Self {
        let names: Vec<String> = indexes.iter().map(ToString::to_string).collect();
        Self::new(
            StatusCode::CONFLICT,
            codes::IN_INDEX,
            format!(
                "blob {id} is a chunk the chunk indexes {} list; delete them first, or delete with force (which leaves them incomplete)",
                names.join(", ")
            ),
        )
    }

    /// 409: chunk index `index` lists `chunk`, which is not there for its
    /// uploader (`reason`); nothing stored.
    pub fn chunk_missing(index: &BlobId, chunk: &BlobId, reason: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            codes::CHUNK_MISSING,
            format!("chunk index {index}: field `chunks`: chunk {chunk} {reason}; nothing stored"),
        )
    }

    /// 413: a body over its bound, about one field: "`field`: reason".
    pub fn too_large(field: &str, reason: &str) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, codes::TOO_LARGE, format!("field `{field}`: {reason}"))
    }

    /// 400: the upload body ended early or broke off. `upload` names it
    /// (`upload of sha256:...`).
    pub fn interrupted(upload: &str, received: u64, why: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            codes::INTERRUPTED,
            format!("{upload} interrupted after {received} bytes ({why}); nothing stored"),
        )
    }

    /// 408: the upload's body went idle or came in too slowly (`why`).
    pub fn too_slow(upload: &str, received: u64, why: &str) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            codes::TOO_SLOW,
            format!("{upload} cut off after {received} bytes: {why}; nothing stored"),
        )
    }

    /// 507: no room (disk full, reserve or quota).
    pub fn insufficient_storage(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INSUFFICIENT_STORAGE, codes::INSUFFICIENT_STORAGE, message)
    }

    /// 416: the range lies outside the blob of `size` bytes.
    pub fn range_not_satisfiable(id: &BlobId, range: &str, size: u64) -> Self {
        let mut e = Self::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            codes::RANGE_NOT_SATISFIABLE,
            format!("blob {id}: range {range:?} is outside its {size} bytes"),
        );
        e.content_range = Some(format!("bytes */{size}"));
        e
    }

    /// 502: a peer site's repository refused or did not answer.
    pub fn bad_gateway(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, codes::PEER, message)
    }

    /// 500: logs `err` with `context` and answers with both.
    pub fn internal(context: impl Into<String>, err: impl std::fmt::Display) -> Self {
        let context = context.into();
        tracing::error!(%err, "{context}");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, format!("{context}: {err}"))
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The machine-readable code (`interfaces::repo_client::protocol::codes`).
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The sentence for humans.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The `Content-Range` a 416 carries.
    pub fn content_range(&self) -> Option<&str> {
        self.content_range.as_deref()
    }

    /// The seconds of the `Retry-After` it carries.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.code, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_client_error() {
            tracing::info!(status = self.status.as_u16(), code = self.code, "{}", self.message);
        }
        let body = ErrorBody {
            code: self.code.to_string(),
            error: self.message,
            actual: self.actual,
        };
        let mut resp = (self.status, Json(body)).into_response();
        let headers = resp.headers_mut();
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"image-repo\""));
        }
        if let Some(range) = self.content_range.and_then(|r| HeaderValue::from_str(&r).ok()) {
            headers.insert(header::CONTENT_RANGE, range);
        }
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, secs.into());
        }
        resp
    }
}

/// Parses an ID from a path segment. Errors: 400 with the parse error.
pub fn parse_id(raw: &str) -> Result<BlobId, ApiError> {
    raw.parse()
        .map_err(|e: interfaces::manifest::Error| ApiError::bad_request(e.to_string()))
}

/// Whether a request body failed because it brought no byte for
/// `body_idle_timeout` (the router's `RequestBodyTimeoutLayer`), rather
/// than broke off.
pub(crate) fn stalled(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = source {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        source = e.source();
    }
    false
}

