//! Client of the image repository (DESIGN.md §3): push, pull with on-the-fly
//! sha256 verification and resume, metadata, delete and pins.
//!
//! ```no_run
//! # async fn demo() -> interfaces::Result<()> {
//! use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
//! let repo = RepoClient::new("http://127.0.0.1:7480", Some("secret".into()))?;
//! let id = repo.push_file("disk.qcow2".as_ref(), &PushMeta::new("disk.qcow2", BlobKind::Disk)).await?;
//! repo.pull(&id, "/var/cache/veeh/disk.qcow2".as_ref(), None).await?;
//! # Ok(()) }
//! ```

mod chunks;
mod oci;
pub mod pull;
mod push;

pub mod protocol;
pub mod retry;
pub mod sink;
pub mod types;

use std::fmt;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, StatusCode};

use crate::blob_id::BlobId;
use crate::error::{Error, Result};
use protocol::{codes, ErrorBody, API_PREFIX};

pub use retry::RetryPolicy;
pub use types::{BlobKind, BlobMeta, PushMeta, OPERATOR};

/// Progress callback: `(bytes done, bytes in total)`. For a resumed pull,
/// `done` starts at the length already on disk.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Send + Sync);

/// Timeout for establishing a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout for one read on an established connection (a stalled transfer).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Handle on one image repository. Cheap to clone (the connection pool is
/// shared).
#[derive(Clone)]
pub struct RepoClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    retry: RetryPolicy,
}

impl fmt::Debug for RepoClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RepoClient")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("retry", &self.retry)
            .finish()
    }
}

impl RepoClient {
    /// A client of the repository at `base_url` (e.g. `http://10.0.0.5:7480`,
    /// a path prefix is kept),
    /// sending `token` as bearer token when given (needed to push, delete and
    /// pin, and to read from a repository that protects reads). Retries with
    /// [`RetryPolicy::default`].
    ///
    /// Errors: [`Error::Repository`] if `base_url` is not an `http` URL
    /// (`https` needs [`RepoClient::with_ca`]) or the token is not a valid
    /// header value.
    pub fn new(base_url: &str, token: Option<String>) -> Result<Self> {
        Self::with_ca(base_url, token, None)
    }

    /// As [`RepoClient::new`], and for an `https` URL the repository's
    /// certificate must be of `ca` (a PEM file) for the URL's host (rustls;
    /// no other roots are trusted). Errors: [`Error::Repository`] for an
    /// `https` URL without `ca` or an unreadable `ca`, another scheme, or a
    /// token that is not a valid header value.
    pub fn with_ca(base_url: &str, token: Option<String>, ca: Option<&std::path::Path>) -> Result<Self> {
        let bad = |reason: String| Error::Repository {
            what: format!("repository URL {base_url:?}"),
            reason,
        };
        let url = reqwest::Url::parse(base_url).map_err(|e| bad(e.to_string()))?;
        let mut builder = crate::tls::http_client();
        match (url.scheme(), ca) {
            // No CA of any kind: the client trusts nothing.
            ("http", _) => builder = builder.tls_certs_only([]),
            ("https", Some(ca)) => {
                let pem = std::fs::read(ca).map_err(|e| bad(format!("cannot read CA {}: {e}", ca.display())))?;
                let cert = reqwest::Certificate::from_pem(&pem).map_err(|e| bad(format!("CA {}: {e}", ca.display())))?;
                builder = builder.tls_certs_only([cert]).https_only(true);
            }
            ("https", None) => return Err(bad("is https: give the CA of the repository's certificate".into())),
            (other, _) => return Err(bad(format!("scheme must be http or https, not {other}"))),
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad("must not have a query or fragment".into()));
        }
        if let Some(t) = &token {
            if t.is_empty() || reqwest::header::HeaderValue::from_str(&format!("Bearer {t}")).is_err() {
                return Err(Error::Repository {
                    what: "repository token".into(),
                    reason: "must be non-empty visible ASCII".into(),
                });
            }
        }
        let http = builder
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| bad(e.to_string()))?;
        Ok(Self {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            token,
            retry: RetryPolicy::default(),
        })
    }

    /// The same client with another retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The repository's base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Metadata of blob `id`, or `None` if the repository does not hold it.
    /// Errors: [`Error::Repository`] when unreachable or refused (401).
    pub async fn head(&self, id: &BlobId) -> Result<Option<BlobMeta>> {
        let what = format!("metadata of {id}");
        let resp = self.send(&what, || self.request(Method::GET, &format!("/blobs/{id}/meta"))).await?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let resp = check(&what, Some(id), resp).await?;
        resp.json().await.map(Some).map_err(|e| transport(&what, &e))
    }

    /// Metadata of every blob, sorted by name then ID.
    /// Errors: [`Error::Repository`] when unreachable or refused.
    pub async fn list(&self) -> Result<Vec<BlobMeta>> {
        let what = "list of blobs".to_string();
        let mut all: Vec<BlobMeta> = Vec::new();
        let mut path = "/blobs".to_string();
        loop {
            let resp = self.send(&what, || self.request(Method::GET, &path)).await?;
            let resp = check(&what, None, resp).await?;
            // The server pages the list; `Link: </v1/blobs?...>; rel="next"`.
            let next = resp
                .headers()
                .get(reqwest::header::LINK)
                .and_then(|v| v.to_str().ok())
                .and_then(protocol::next_link)
                .map(str::to_string);
            let page: Vec<BlobMeta> = resp.json().await.map_err(|e| transport(&what, &e))?;
            all.extend(page);
            match next {
                Some(p) => path = p,
                None => break,
            }
        }
        all.sort_by(|a, b| (&a.name, &a.id).cmp(&(&b.name, &b.id)));
        Ok(all)
    }

    /// Deletes blob `id` and its metadata. A blob with pins is deleted only
    /// with `force`. Errors: [`Error::BlobNotFound`]; [`Error::Repository`]
    /// naming the pins when pinned, or on 401.
    pub async fn delete(&self, id: &BlobId, force: bool) -> Result<()> {
        let what = format!("delete {id}");
        let path = format!("/blobs/{id}{}", if force { "?force=true" } else { "" });
        let resp = self.send(&what, || self.request(Method::DELETE, &path)).await?;
        check(&what, Some(id), resp).await.map(drop)
    }

    /// Sets pin `pin` on blob `id` (idempotent); a pinned blob is deleted only
    /// with force. Errors: [`Error::BlobNotFound`]; [`Error::Repository`] for
    /// an invalid pin name (see [`types::validate_pin`]) or on 401.
    pub async fn pin(&self, id: &BlobId, pin: &str) -> Result<()> {
        self.pin_request(Method::PUT, id, pin).await
    }

    /// Clears pin `pin` of blob `id` (idempotent: clearing an absent pin
    /// succeeds). Errors: as for [`RepoClient::pin`].
    pub async fn unpin(&self, id: &BlobId, pin: &str) -> Result<()> {
        self.pin_request(Method::DELETE, id, pin).await
    }

    async fn pin_request(&self, method: Method, id: &BlobId, pin: &str) -> Result<()> {
        let verb = if method == Method::PUT { "pin" } else { "unpin" };
        let what = format!("{verb} {id} as {pin:?}");
        types::validate_pin(pin).map_err(|reason| Error::Repository {
            what: what.clone(),
            reason,
        })?;
        let path = format!("/blobs/{id}/pins/{pin}");
        let resp = self.send(&what, || self.request(method.clone(), &path)).await?;
        check(&what, Some(id), resp).await.map(drop)
    }

    /// Lets `reader` (a site ID or provider ID) read blob `id` too: a site
    /// shares what it hands to a peer site. Errors: [`Error::BlobNotFound`]
    /// if the caller may not read it; [`Error::Repository`] if it may read
    /// but not share it (403), or for a bad name.
    pub async fn share(&self, id: &BlobId, reader: &str) -> Result<()> {
        let what = format!("share {id} with {reader:?}");
        types::validate_pin(reader).map_err(|reason| Error::Repository {
            what: what.clone(),
            reason,
        })?;
        let path = format!("/blobs/{id}/readers/{reader}");
        let resp = self.send(&what, || self.request(Method::PUT, &path)).await?;
        check(&what, Some(id), resp).await.map(drop)
    }

    /// Has the repository collect garbage (the operator only): blobs
    /// stored more than `grace` ago that nothing needs (image-repo's
    /// `server::gc`); with `dry_run` only listed. Errors:
    /// [`Error::Repository`] when refused or unreachable.
    pub async fn gc(&self, grace: Duration, dry_run: bool) -> Result<protocol::GcReply> {
        let what = "garbage collection".to_string();
        let path = format!("/gc?grace={}s&dry_run={dry_run}", grace.as_secs());
        let resp = self.send(&what, || self.request(Method::POST, &path)).await?;
        let resp = check(&what, None, resp).await?;
        resp.json().await.map_err(|e| transport(&what, &e))
    }

    /// Asks this (the site's own) repository to push blob `id` to peer site
    /// `to`'s repository and let that site read it there: a checkpoint the
    /// peer may have to restore. Errors: [`Error::BlobNotFound`];
    /// [`Error::Repository`] naming the peer's refusal (502) or for a peer
    /// not configured.
    pub async fn replicate(&self, id: &BlobId, to: &str) -> Result<()> {
        let what = format!("replicate {id} to {to:?}");
        types::validate_pin(to).map_err(|reason| Error::Repository {
            what: what.clone(),
            reason,
        })?;
        let path = format!("/blobs/{id}/replicate?to={to}");
        let resp = self.send(&what, || self.request(Method::POST, &path)).await?;
        check(&what, Some(id), resp).await.map(drop)
    }

    /// Whether service provider `provider` may read blob `id` (a site asks
    /// before it deploys a manifest; from then on the site may read it
    /// too). False for no such blob or none the provider may read.
    /// Errors: [`Error::Repository`] when unreachable or refused.
    pub async fn grant_for(&self, id: &BlobId, provider: &str) -> Result<bool> {
        let what = format!("may {provider:?} read {id}");
        let path = format!("/blobs/{id}/grant");
        let resp = self
            .send(&what, || self.request(Method::POST, &path).query(&[("for", provider)]))
            .await?;
        match check(&what, Some(id), resp).await {
            Ok(_) => Ok(true),
            Err(Error::BlobNotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Marks blob `id` readable by every caller (`public`) or not; the
    /// operator's token only. Errors: [`Error::BlobNotFound`];
    /// [`Error::Repository`] for another token (403).
    pub async fn set_public(&self, id: &BlobId, public: bool) -> Result<()> {
        let what = format!("mark {id} {}", if public { "public" } else { "private" });
        let method = if public { Method::PUT } else { Method::DELETE };
        let path = format!("/blobs/{id}/public");
        let resp = self.send(&what, || self.request(method.clone(), &path)).await?;
        check(&what, Some(id), resp).await.map(drop)
    }

    /// Asks whether a push of `id` with `size` bytes and `meta` would be
    /// accepted (token, metadata, room) before sending any content.
    /// Returns true if the blob is already stored.
    /// Errors: [`Error::Repository`] with the server's reason.
    pub async fn check_push(&self, id: &BlobId, size: u64, meta: &PushMeta) -> Result<bool> {
        let what = format!("push {id}");
        let mut query = protocol::meta_to_query(meta);
        query.push(("size".into(), size.to_string()));
        let path = format!("/blobs/{id}/check");
        let resp = self.send(&what, || self.request(Method::POST, &path).query(&query)).await?;
        let resp = check(&what, Some(id), resp).await?;
        let reply: protocol::CheckReply = resp.json().await.map_err(|e| transport(&what, &e))?;
        Ok(reply.exists)
    }

    /// A request to `API_PREFIX + path` with the bearer token.
    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let req = self.http.request(method, format!("{}{API_PREFIX}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Sends the request built by `build`, retrying transient failures.
    async fn send(&self, what: &str, build: impl Fn() -> RequestBuilder) -> Result<Response> {
        let mut attempt = 1;
        loop {
            let outcome = build().send().await;
            let retry = match &outcome {
                Ok(resp) => retry::is_transient_status(resp.status()),
                Err(e) => retry::is_transient(e),
            };
            if !retry || attempt >= self.retry.attempts {
                return outcome.map_err(|e| transport_after(what, &e, attempt));
            }
            tracing::debug!(what, attempt, "retrying image repository request");
            tokio::time::sleep(self.retry.backoff(attempt)).await;
            attempt += 1;
        }
    }
}

/// Passes a successful response through; turns an error status into the
/// matching [`Error`] (404 of a blob -> [`Error::BlobNotFound`], 422 ->
/// [`Error::DigestMismatch`], else [`Error::Repository`] with the server's
/// message).
async fn check(what: &str, id: Option<&BlobId>, resp: Response) -> Result<Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let text = resp.text().await.unwrap_or_default();
    let body: Option<ErrorBody> = serde_json::from_str(&text).ok();
    let code = body.as_ref().map(|b| b.code.as_str()).unwrap_or("");
    match (id, code) {
        (Some(id), codes::NOT_FOUND) => return Err(Error::BlobNotFound { id: id.to_string() }),
        (Some(id), codes::DIGEST_MISMATCH) => {
            let actual = body.as_ref().and_then(|b| b.actual.clone()).unwrap_or_else(|| "unknown".into());
            return Err(Error::DigestMismatch {
                id: id.to_string(),
                actual,
            });
        }
        _ => {}
    }
    let message = match body {
        Some(b) => b.error,
        None if text.trim().is_empty() => "no details".to_string(),
        None => text.trim().chars().take(300).collect(),
    };
    Err(Error::Repository {
        what: what.to_string(),
        reason: format!("{status}: {message}"),
    })
}

fn transport(what: &str, err: &reqwest::Error) -> Error {
    transport_after(what, err, 1)
}

/// A transport error with its whole source chain (reqwest's own message alone
/// rarely says why).
fn transport_after(what: &str, err: &reqwest::Error, attempts: u32) -> Error {
    let mut reason = crate::error::chain(err);
    if attempts > 1 {
        reason.push_str(&format!(" (after {attempts} attempts)"));
    }
    Error::Repository {
        what: what.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_accepts_http_urls_only_and_keeps_a_prefix() {
        let c = RepoClient::new("http://10.0.0.5:7480/repo/", None).unwrap();
        assert_eq!(c.base_url(), "http://10.0.0.5:7480/repo");
        for bad in ["https://x", "ftp://x", "http://x/?a=b", "not a url"] {
            let err = RepoClient::new(bad, None).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
        let err = RepoClient::new("http://x", Some("bad\ntoken".into())).unwrap_err().to_string();
        assert!(err.contains("token"), "{err}");
        let debug = format!("{:?}", RepoClient::new("http://x", Some("secret".into())).unwrap());
        assert!(!debug.contains("secret"), "{debug}");
    }
}
