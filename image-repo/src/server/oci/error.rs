//! Errors of the OCI Distribution API: a status and the specification's
//! body, `{"errors": [{"code", "message", "detail"}]}` (OCI Distribution
//! Specification v1.1, "Error Codes"). The `/v1` API's [`ApiError`]s of
//! the shared code (authentication, uploads, storage) map onto it in one
//! place, [`OciError::from_api`].

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use interfaces::repo_client::protocol::codes as v1;
use interfaces::BlobId;
use serde::Serialize;

use super::super::error::ApiError;

/// The codes of the specification's table, and `UNKNOWN` (500) as CNCF
/// Distribution sends it.
pub mod codes {
    pub const BLOB_UNKNOWN: &str = "BLOB_UNKNOWN";
    pub const BLOB_UPLOAD_INVALID: &str = "BLOB_UPLOAD_INVALID";
    pub const BLOB_UPLOAD_UNKNOWN: &str = "BLOB_UPLOAD_UNKNOWN";
    pub const DIGEST_INVALID: &str = "DIGEST_INVALID";
    pub const MANIFEST_BLOB_UNKNOWN: &str = "MANIFEST_BLOB_UNKNOWN";
    pub const MANIFEST_INVALID: &str = "MANIFEST_INVALID";
    pub const MANIFEST_UNKNOWN: &str = "MANIFEST_UNKNOWN";
    pub const NAME_INVALID: &str = "NAME_INVALID";
    pub const NAME_UNKNOWN: &str = "NAME_UNKNOWN";
    pub const SIZE_INVALID: &str = "SIZE_INVALID";
    pub const UNAUTHORIZED: &str = "UNAUTHORIZED";
    pub const DENIED: &str = "DENIED";
    pub const UNSUPPORTED: &str = "UNSUPPORTED";
    pub const TOO_MANY_REQUESTS: &str = "TOOMANYREQUESTS";
    pub const UNKNOWN: &str = "UNKNOWN";
}

/// The challenge of a 401 on `/v2`: Basic, with the token as password
/// (`skopeo --creds NAME:TOKEN`, `oras login -p TOKEN`); a client may also
/// send `Authorization: Bearer TOKEN` at once.
pub const CHALLENGE: &str = "Basic realm=\"image-repo\", charset=\"UTF-8\"";

/// An error answer of the OCI API.
#[derive(Debug)]
pub struct OciError {
    status: StatusCode,
    code: &'static str,
    message: String,
    detail: Option<serde_json::Value>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

#[derive(Serialize)]
struct Body<'a> {
    errors: [Info<'a>; 1],
}

#[derive(Serialize)]
struct Info<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a serde_json::Value>,
}

impl OciError {
    /// An answer with `status`, `code` and a sentence naming what and why.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            detail: None,
            headers: Vec::new(),
        }
    }

    /// With `detail` (JSON) in the body.
    pub fn detail(mut self, detail: serde_json::Value) -> Self {
        self.detail = Some(detail);
        self
    }

    /// With a header (`Range` of a 416 on an upload, `Location`).
    pub fn header(mut self, name: HeaderName, value: &str) -> Self {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.push((name, v));
        }
        self
    }

    /// 404 BLOB_UNKNOWN: `repo` holds no blob `id` the caller may read.
    pub fn blob_unknown(repo: &str, id: &BlobId) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            codes::BLOB_UNKNOWN,
            format!("blob {id} unknown to repository {repo}"),
        )
        .detail(serde_json::json!({ "digest": id.to_string() }))
    }

    /// 404 MANIFEST_UNKNOWN: `repo` holds no manifest `reference` (tag or
    /// digest) the caller may read.
    pub fn manifest_unknown(repo: &str, reference: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            codes::MANIFEST_UNKNOWN,
            format!("manifest {reference} unknown to repository {repo}"),
        )
    }

    /// 404 NAME_UNKNOWN: no repository `repo` the caller may read.
    pub fn name_unknown(repo: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, codes::NAME_UNKNOWN, format!("repository {repo} unknown"))
    }

    /// 400 with `code` about a bad request.
    pub fn bad(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 403 DENIED.
    pub fn denied(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, codes::DENIED, message)
    }

    /// 404 BLOB_UPLOAD_UNKNOWN: no such upload session of the caller's.
    pub fn upload_unknown(repo: &str, session: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            codes::BLOB_UPLOAD_UNKNOWN,
            format!("upload {session} unknown to repository {repo} (finished, cancelled, timed out, or another caller's)"),
        )
    }

    /// An error of the code shared with `/v1`, as the OCI API says it.
    pub fn from_api(e: ApiError) -> Self {
        let (status, code) = match e.code() {
            v1::UNAUTHORIZED => (StatusCode::UNAUTHORIZED, codes::UNAUTHORIZED),
            v1::FORBIDDEN => (StatusCode::FORBIDDEN, codes::DENIED),
            v1::NOT_FOUND => (StatusCode::NOT_FOUND, codes::BLOB_UNKNOWN),
            // The specification's answer to content that does not match
            // its digest is 400 DIGEST_INVALID (`/v1` says 422).
            v1::DIGEST_MISMATCH => (StatusCode::BAD_REQUEST, codes::DIGEST_INVALID),
            v1::INTERRUPTED | v1::TOO_SLOW => (e.status(), codes::BLOB_UPLOAD_INVALID),
            v1::INSUFFICIENT_STORAGE => (e.status(), codes::DENIED),
            v1::RANGE_NOT_SATISFIABLE => (e.status(), codes::SIZE_INVALID),
            v1::TOO_MANY_REQUESTS => (e.status(), codes::TOO_MANY_REQUESTS),
            v1::BAD_REQUEST => (e.status(), codes::UNSUPPORTED),
            _ => (e.status(), codes::UNKNOWN),
        };
        let mut out = Self::new(status, code, e.message());
        if let Some(range) = e.content_range() {
            out = out.header(header::CONTENT_RANGE, range);
        }
        if let Some(secs) = e.retry_after_secs() {
            out = out.header(header::RETRY_AFTER, &secs.to_string());
        }
        out
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<ApiError> for OciError {
    fn from(e: ApiError) -> Self {
        Self::from_api(e)
    }
}

impl IntoResponse for OciError {
    fn into_response(self) -> Response {
        if self.status.is_client_error() {
            tracing::info!(status = self.status.as_u16(), code = self.code, "{}", self.message);
        }
        let body = Body {
            errors: [Info {
                code: self.code,
                message: &self.message,
                detail: self.detail.as_ref(),
            }],
        };
        let mut resp = (self.status, Json(body)).into_response();
        let headers = resp.headers_mut();
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(CHALLENGE));
        }
        for (k, v) in self.headers {
            headers.insert(k, v);
        }
        resp
    }
}

/// A `.map_err` for the store's internal errors: 500 UNKNOWN, logged.
pub fn internal(context: impl Into<String>) -> impl FnOnce(anyhow::Error) -> OciError {
    let context = context.into();
    move |e| OciError::from_api(ApiError::internal(context, format!("{e:#}")))
}
