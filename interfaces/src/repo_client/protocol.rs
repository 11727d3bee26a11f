//! The HTTP protocol of the image repository, shared by the client and the
//! server so both sides agree on paths, query fields and error bodies.
//!
//! | method | path | what |
//! | --- | --- | --- |
//! | GET | `/v1/health` | `ok`, never needs a token |
//! | GET | `/v1/blobs?n=N&last=ID` (alias `/v1/images`) | JSON list of [`BlobMeta`](super::BlobMeta), a page in digest order (at most 1,000); `Link: <...>; rel="next"` while more follow |
//! | POST | `/v1/blobs/{id}/check?size=N&<meta>` | would a push of `{id}` be accepted? JSON [`CheckReply`] |
//! | PUT | `/v1/blobs/{id}?<meta>` | upload; 201 stored, 200 already present, 422 digest mismatch, 413 a chunk or chunk index over its bound; a chunk index: 400 naming the field, 409 `chunk_missing` naming the first chunk not there for the uploader |
//! | GET, HEAD | `/v1/blobs/{id}` | content, `Range: bytes=` honoured (206, 416) |
//! | GET | `/v1/blobs/{id}/meta` | JSON [`BlobMeta`](super::BlobMeta) |
//! | DELETE | `/v1/blobs/{id}?force=true` | 204; 409 while pinned, held by an OCI repository or (a chunk) listed by a stored chunk index, and not forced |
//! | PUT, DELETE | `/v1/blobs/{id}/pins/{pin}` | set or clear a pin (idempotent), 204 |
//! | PUT | `/v1/blobs/{id}/readers/{name}` | share: `{name}` may read the blob too, 204 |
//! | POST | `/v1/blobs/{id}/grant?for={provider}` | a site asks whether a provider may read the blob: 204 (and the site may read it from then on) or 404 |
//! | PUT, DELETE | `/v1/blobs/{id}/public` | the operator marks a blob readable by every caller, or not, 204 |
//! | POST | `/v1/gc?grace=1h&dry_run=true` | the operator collects garbage: JSON [`GcReply`] |
//! | POST | `/v1/blobs/missing` | of the digests in a JSON [`MissingQuery`] (at most [`MAX_MISSING_QUERY`]), those the caller must push: not stored, or not readable by the caller; the others' collection grace starts again. JSON [`MissingReply`] |
//! | POST | `/v1/blobs/{id}/replicate?to={peer}` | a site pushes the blob to peer site `{peer}`'s repository and lets that site read it there, 204; 502 if the peer refuses |
//!
//! `<meta>` is `name=..&kind=..&format=..&label.<key>=<value>...`. Errors carry
//! a JSON [`ErrorBody`]. Every call but health needs `Authorization: Bearer
//! <token>`; the token names a caller (operator, site or provider). A blob
//! belongs to whoever pushed it first; it is read by its owner, the
//! operator, its readers, and by every caller once public. Anyone else gets
//! 404 for it, as if it did not exist, and does not see it in the list.

use serde::{Deserialize, Serialize};

use super::types::{BlobKind, PushMeta};

/// Prefix of every versioned path.
pub const API_PREFIX: &str = "/v1";
/// Query field prefix of labels: `label.os=debian`.
pub const LABEL_PREFIX: &str = "label.";
/// Bytes of the longest query a push's metadata makes ([`meta_to_query`],
/// percent-encoded: up to three bytes for each byte of a name or label
/// value), with the `size` of an upload check: 54,418 for a name of
/// [`MAX_NAME_LEN`](super::types::MAX_NAME_LEN) bytes and
/// [`MAX_LABELS`](super::types::MAX_LABELS) labels of the longest keys and
/// values. A repository's limit on request heads leaves room for it, so
/// that every metadata the limits accept can be pushed.
pub const MAX_META_QUERY_LEN: usize = {
    use super::types::{MAX_LABELS, MAX_LABEL_KEY_LEN, MAX_LABEL_VALUE_LEN, MAX_NAME_LEN};
    // name=N, &kind=K (at most 32), &format=F (at most 16), &size=S (32).
    let fixed = "name=".len() + 3 * MAX_NAME_LEN + 32 + 16 + 32;
    let label = "&".len() + LABEL_PREFIX.len() + MAX_LABEL_KEY_LEN + "=".len() + 3 * MAX_LABEL_VALUE_LEN;
    fixed + MAX_LABELS * label
};
/// Response header naming the content ID of a blob download.
pub const CONTENT_ID_HEADER: &str = "x-content-id";

/// Body of every error response.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable code, e.g. `not_found`, `digest_mismatch`.
    pub code: String,
    /// Sentence for humans naming the ID or field and the reason.
    pub error: String,
    /// For `digest_mismatch`: the digest the content really had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<String>,
}

/// Reply of garbage collection (`POST /v1/gc?grace=1h&dry_run=true`):
/// what it removed, or would remove.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GcReply {
    /// The blobs, by ID.
    pub removed: Vec<crate::BlobId>,
    /// Their bytes.
    pub bytes: u64,
    /// Whether nothing was removed, only listed.
    pub dry_run: bool,
}

/// Reply of the upload check (`POST /v1/blobs/{id}/check`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckReply {
    /// The blob is already stored: a push can be skipped.
    pub exists: bool,
}

/// The most digests one [`MissingQuery`] may carry.
pub const MAX_MISSING_QUERY: usize = 4096;

/// Body of `POST /v1/blobs/missing`: the chunks a host is about to list in
/// a chunk index (`crate::chunks`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MissingQuery {
    /// At most [`MAX_MISSING_QUERY`] content IDs.
    pub digests: Vec<crate::blob_id::BlobId>,
}

/// Reply of `POST /v1/blobs/missing`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MissingReply {
    /// Those of the query the caller must push, in the query's order.
    pub missing: Vec<crate::blob_id::BlobId>,
}

/// Error codes the server sends in [`ErrorBody::code`].
pub mod codes {
    /// Malformed ID, metadata or request.
    pub const BAD_REQUEST: &str = "bad_request";
    /// Missing or wrong bearer token.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// No such blob, or none the caller may read.
    pub const NOT_FOUND: &str = "not_found";
    /// The caller may read the blob but not do this to it.
    pub const FORBIDDEN: &str = "forbidden";
    /// Content does not hash to the declared ID.
    pub const DIGEST_MISMATCH: &str = "digest_mismatch";
    /// Delete of a pinned blob without force.
    pub const PINNED: &str = "pinned";
    /// Delete of a blob an OCI repository holds (linked, or a manifest
    /// there) without force.
    pub const IN_REPOSITORY: &str = "in_repository";
    /// The upload ended before its declared length.
    pub const INTERRUPTED: &str = "upload_interrupted";
    /// No room for the blob (disk full or quota).
    pub const INSUFFICIENT_STORAGE: &str = "insufficient_storage";
    /// The upload's body went idle, or came in slower than the least rate.
    pub const TOO_SLOW: &str = "upload_too_slow";
    /// A peer site's repository refused or did not answer.
    pub const PEER: &str = "peer_failed";
    /// Delete of a chunk stored chunk indexes list, without force.
    pub const IN_INDEX: &str = "in_chunk_index";
    /// A chunk index listing a chunk that is not stored, or that the
    /// uploader may not read (push it first).
    pub const CHUNK_MISSING: &str = "chunk_missing";
    /// A body over its bound (a chunk, a chunk index, a `missing` query).
    pub const TOO_LARGE: &str = "too_large";
    /// A record at one of its bounds (pins or readers per blob).
    pub const LIMIT_REACHED: &str = "limit_reached";
    /// Too many failed authentications from the caller's address.
    pub const TOO_MANY_REQUESTS: &str = "too_many_requests";
    /// Range outside the blob.
    pub const RANGE_NOT_SATISFIABLE: &str = "range_not_satisfiable";
    /// Anything else on the server.
    pub const INTERNAL: &str = "internal";
}

/// The path after the API prefix of a `Link: <PATH>; rel="next"` header
/// value, if it names a next page of this API.
pub fn next_link(link: &str) -> Option<&str> {
    let (target, params) = link.split_once(';')?;
    if params.trim() != "rel=\"next\"" {
        return None;
    }
    target.trim().strip_prefix('<')?.strip_suffix('>')?.strip_prefix(API_PREFIX)
}

/// Query pairs that carry `meta` on an upload.
pub fn meta_to_query(meta: &PushMeta) -> Vec<(String, String)> {
    let mut q = vec![("name".to_string(), meta.name.clone()), ("kind".to_string(), meta.kind.to_string())];
    if let Some(f) = &meta.format {
        q.push(("format".into(), f.clone()));
    }
    for (k, v) in &meta.labels {
        q.push((format!("{LABEL_PREFIX}{k}"), v.clone()));
    }
    q
}

/// Reads the upload metadata from query pairs (other keys listed in
/// `extra` are skipped) and validates it. Errors: `(field, reason)`.
pub fn meta_from_query(pairs: &[(String, String)], extra: &[&str]) -> Result<PushMeta, (String, String)> {
    let mut name = None;
    let mut kind = None;
    let mut format = None;
    let mut labels = std::collections::BTreeMap::new();
    for (k, v) in pairs {
        let dup = |f: &str| (f.to_string(), "given more than once".to_string());
        match k.as_str() {
            "name" => {
                if name.replace(v.clone()).is_some() {
                    return Err(dup("name"));
                }
            }
            "kind" => {
                let parsed = v.parse::<BlobKind>().map_err(|r| ("kind".to_string(), r))?;
                if kind.replace(parsed).is_some() {
                    return Err(dup("kind"));
                }
            }
            "format" => {
                if format.replace(v.clone()).is_some() {
                    return Err(dup("format"));
                }
            }
            _ if k.starts_with(LABEL_PREFIX) => {
                let key = &k[LABEL_PREFIX.len()..];
                if labels.insert(key.to_string(), v.clone()).is_some() {
                    return Err(dup(k));
                }
            }
            _ if extra.contains(&k.as_str()) => {}
            _ => return Err((k.clone(), "unknown query field".to_string())),
        }
    }
    let meta = PushMeta {
        name: name.ok_or_else(|| ("name".to_string(), "is required".to_string()))?,
        kind: kind.ok_or_else(|| ("kind".to_string(), "is required".to_string()))?,
        format,
        labels,
    };
    meta.validate()?;
    Ok(meta)
}

/// Parses a `Content-Range` header of a 206 (`bytes START-END/TOTAL`) or a
/// 416 (`bytes */TOTAL`) reply into `(Some((start, end_inclusive)), total)`
/// or `(None, total)`. Returns `None` if the header is not of that shape.
pub fn parse_content_range(value: &str) -> Option<(Option<(u64, u64)>, u64)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let total = total.parse().ok()?;
    if range == "*" {
        return Some((None, total));
    }
    let (s, e) = range.split_once('-')?;
    Some((Some((s.parse().ok()?, e.parse().ok()?)), total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_through_query() {
        let mut meta = PushMeta::new("debian.qcow2", BlobKind::Disk);
        meta.format = Some("qcow2".into());
        meta.labels.insert("os".into(), "debian".into());
        let q = meta_to_query(&meta);
        assert_eq!(meta_from_query(&q, &[]).unwrap(), meta);
    }

    /// The largest metadata the limits accept, each byte of its name and
    /// label values percent-encoded, fits [`MAX_META_QUERY_LEN`].
    #[test]
    fn the_largest_metadata_fits_the_longest_query() {
        use crate::repo_client::types::{MAX_LABELS, MAX_LABEL_KEY_LEN, MAX_LABEL_VALUE_LEN, MAX_NAME_LEN};
        let widest = |bytes: usize| "\u{4e2d}".repeat(bytes / 3) + &"%".repeat(bytes % 3);
        let mut meta = PushMeta::new(widest(MAX_NAME_LEN), BlobKind::CheckpointMemory);
        meta.format = Some("qcow2".into());
        for i in 0..MAX_LABELS {
            let key = format!("{i:02}{}", "k".repeat(MAX_LABEL_KEY_LEN - 2));
            meta.labels.insert(key, widest(MAX_LABEL_VALUE_LEN));
        }
        meta.validate().unwrap();
        let mut url = reqwest::Url::parse("http://repo/v1/blobs/x/check").unwrap();
        url.query_pairs_mut()
            .extend_pairs(meta_to_query(&meta))
            .append_pair("size", &u64::MAX.to_string());
        let query = url.query().unwrap().len();
        assert!(query <= MAX_META_QUERY_LEN, "{query} > {MAX_META_QUERY_LEN}");
        assert!(query + 1024 > MAX_META_QUERY_LEN, "{query}: the bound is loose");
        assert_eq!(MAX_META_QUERY_LEN, 54_418);
    }

    #[test]
    fn query_errors_name_the_field() {
        let q = vec![("name".to_string(), "a/b".to_string()), ("kind".to_string(), "disk".to_string())];
        assert_eq!(meta_from_query(&q, &[]).unwrap_err().0, "name");
        let q = vec![("name".to_string(), "a".to_string())];
        assert_eq!(meta_from_query(&q, &[]).unwrap_err(), ("kind".into(), "is required".into()));
        let q = vec![
            ("name".into(), "a".into()),
            ("kind".into(), "disk".into()),
            ("size".into(), "1".into()),
        ];
        assert_eq!(meta_from_query(&q, &[]).unwrap_err().0, "size");
        assert!(meta_from_query(&q, &["size"]).is_ok());
    }

    #[test]
    fn content_range_shapes() {
        assert_eq!(parse_content_range("bytes 10-19/100"), Some((Some((10, 19)), 100)));
        assert_eq!(parse_content_range("bytes */100"), Some((None, 100)));
        assert_eq!(parse_content_range("items 1-2/3"), None);
    }
}
