//! `PUT`, `GET`, `HEAD` and `DELETE /v2/NAME/manifests/REFERENCE`, a tag
//! or a digest (OCI Distribution Specification v1.1, "Pushing manifests",
//! "Pulling manifests", "Deleting manifests").
//!
//! A manifest is checked before anything is visible: at most
//! [`MAX_MANIFEST`] bytes, one of [`MEDIA_TYPES`] (the `mediaType` it
//! declares must be its `Content-Type`), parsed by `oci-spec`, its digest
//! the one named, and every blob it references (config, layers) or
//! manifest (an index's) already in the repository with the size its
//! descriptor says. Its `subject` need not exist yet (the specification
//! allows a referrer before its subject); it is recorded for the
//! referrers API and the answer says `OCI-Subject`. Its bytes are a blob
//! of the store (kind `manifest`, owned by the pusher, counted by the
//! quota).

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use interfaces::repo_client::types::is_hidden;
use interfaces::repo_client::{BlobKind, PushMeta};
use interfaces::BlobId;
use oci_spec::image::{Descriptor, ImageIndex, ImageManifest};

use super::error::{codes, internal, OciError};
use super::{parse_digest, path, Access};
use crate::server::download::{DIGEST_HEADER, PRIVATE_IMMUTABLE};
use crate::server::repositories::ManifestRecord;
use crate::server::upload::Incoming;

/// Largest manifest accepted, in bytes (4 MiB, what the specification
/// says registries should accept at least).
pub const MAX_MANIFEST: usize = 4 << 20;

/// The OCI image manifest's media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI image index's media type.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker's image manifest, version 2 schema 2 (what older tools push).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker's manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The manifest media types accepted.
pub const MEDIA_TYPES: [&str; 4] = [OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST];

/// The header of a push's answer naming the subject it refers to, by
/// which a client knows the registry keeps referrers itself.
const SUBJECT_HEADER: &str = "oci-subject";

/// A reference: a tag or a digest.
enum Reference<'a> {
    Tag(&'a str),
    Digest(BlobId),
}

fn reference(raw: &str) -> Result<Reference<'_>, OciError> {
    if raw.contains(':') {
        return Ok(Reference::Digest(parse_digest(raw)?));
    }
    path::check_tag(raw).map_err(|why| OciError::bad(codes::MANIFEST_INVALID, format!("tag {raw:?}: {why}")))?;
    Ok(Reference::Tag(raw))
}

/// `PUT`: 201 with the manifest's `Location` and digest.
pub async fn put(access: &Access<'_>, raw: &str, headers: &HeaderMap, body: Body) -> Result<Response, OciError> {
    access.must_own("push manifests")?;
    let reference = reference(raw)?;
    let bytes = axum::body::to_bytes(body, MAX_MANIFEST).await.map_err(|e| {
        if crate::server::error::stalled(&e) {
            let idle = access.app.config.body_idle_timeout.as_secs();
            return OciError::new(
                StatusCode::REQUEST_TIMEOUT,
                codes::MANIFEST_INVALID,
                format!("manifest {raw}: cut off, no byte of its body for {idle} s (body_idle_timeout); nothing stored"),
            );
        }
        OciError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            codes::SIZE_INVALID,
            format!("manifest {raw}: larger than {MAX_MANIFEST} bytes, or its body broke off"),
        )
    })?;
    let id = BlobId::of(&bytes);
    if let Reference::Digest(named) = &reference {
        if *named != id {
            return Err(OciError::bad(
                codes::DIGEST_INVALID,
                format!("manifest pushed as {named} hashes to {id}; nothing stored"),
            ));
        }
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim().to_string());
    let record = check(access, &bytes, content_type.as_deref())?;
    let what = format!("manifest {id} in {}", access.name);
    let mut incoming = Incoming::start(access.app, &what)?;
    let len = HeaderMap::from_iter([(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()))]);
    incoming.receive(access.app, &what, &len, Body::from(bytes)).await?;
    incoming
        .store(access.app, &what, &id, PushMeta::new(access.name, BlobKind::Manifest), access.who)
        .await?;
    let tag = match reference {
        Reference::Tag(t) => Some(t),
        Reference::Digest(_) => None,
    };
    access
        .app
        .store
        .repos()
        .put_manifest(access.name, &id, &record, tag)
        .await
        .map_err(internal(format!("recording {what}")))?;
    tracing::info!(%id, repository = access.name, tag, media_type = %record.media_type, subject = ?record.subject, by = %access.who.name, "manifest pushed");
    let mut resp = StatusCode::CREATED.into_response();
    let h = resp.headers_mut();
    set(h, header::LOCATION.as_str(), &format!("/v2/{}/manifests/{id}", access.name));
    set(h, DIGEST_HEADER, &id.to_string());
    if let Some(subject) = &record.subject {
        set(h, SUBJECT_HEADER, &subject.to_string());
    }
    Ok(resp)
}

/// Parses and checks a manifest's bytes; its record. Errors: 400
/// MANIFEST_INVALID (what is wrong), MANIFEST_BLOB_UNKNOWN (which blob).
fn check(access: &Access<'_>, bytes: &[u8], content_type: Option<&str>) -> Result<ManifestRecord, OciError> {
    let invalid = |why: String| OciError::bad(codes::MANIFEST_INVALID, why);
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| invalid(format!("manifest is not JSON: {e}")))?;
    let declared = value.get("mediaType").and_then(|m| m.as_str());
    let media_type = match (declared, content_type) {
        (Some(d), Some(c)) if d != c => {
            return Err(invalid(format!("the manifest's mediaType {d:?} is not its Content-Type {c:?}")));
        }
        (Some(m), _) | (None, Some(m)) => m.to_string(),
        (None, None) => return Err(invalid("the manifest has neither a mediaType nor a Content-Type".into())),
    };
    let mut record = ManifestRecord {
        media_type,
        artifact_type: None,
        size: bytes.len() as u64,
        subject: None,
        annotations: Default::default(),
    };
    let (subject, annotations) = match record.media_type.as_str() {
        OCI_MANIFEST | DOCKER_MANIFEST => {
            let m = ImageManifest::from_reader(bytes).map_err(|e| invalid(format!("not an image manifest: {e}")))?;
            schema_2(m.schema_version())?;
            for d in std::iter::once(m.config()).chain(m.layers()) {
                referenced_blob(access, d)?;
            }
            // The referrers API reports an image manifest without an
            // artifactType by its config's media type.
            record.artifact_type = Some(m.artifact_type().as_ref().unwrap_or(m.config().media_type()).to_string());
            (m.subject().clone(), m.annotations().clone())
        }
        OCI_INDEX | DOCKER_LIST => {
            let i = ImageIndex::from_reader(bytes).map_err(|e| invalid(format!("not an image index: {e}")))?;
            schema_2(i.schema_version())?;
            for d in i.manifests() {
                referenced_manifest(access, d)?;
            }
            record.artifact_type = i.artifact_type().as_ref().map(|t| t.to_string());
            (i.subject().clone(), i.annotations().clone())
        }
        other => {
            return Err(invalid(format!(
                "media type {other:?} is not a manifest this repository keeps ({})",
                MEDIA_TYPES.join(", ")
            )))
        }
    };
    if let Some(s) = subject {
        record.subject = Some(parse_digest(s.digest().as_ref())?);
    }
    record.annotations = annotations.unwrap_or_default().into_iter().collect();
    bounded(&record).map_err(invalid)?;
    Ok(record)
}

/// Most annotations of a manifest, longest key and value in bytes: the
/// referrers answer carries them for up to a page of manifests.
pub const MAX_ANNOTATIONS: usize = 64;
const MAX_ANNOTATION_KEY: usize = 128;
const MAX_ANNOTATION_VALUE: usize = 1024;
/// Longest media type or artifact type, in bytes (RFC 6838: 127 a side).
const MAX_MEDIA_TYPE: usize = 255;

/// Checks what the repository keeps of a manifest and shows in lists:
/// its media and artifact types (`type/subtype`, visible ASCII, at most
/// 255 bytes) and its annotations (at most 64; keys of 128 bytes without
/// whitespace, values of 1 KiB, neither with control, bidirectional or
/// invisible characters). Errors: the reason.
fn bounded(r: &ManifestRecord) -> Result<(), String> {
    for (field, t) in [("mediaType", Some(&r.media_type)), ("artifactType", r.artifact_type.as_ref())] {
        let Some(t) = t else { continue };
        let ok = !t.is_empty() && t.len() <= MAX_MEDIA_TYPE && t.bytes().all(|b| b.is_ascii_graphic()) && t.matches('/').count() == 1;
        if !ok {
            return Err(format!(
                "{field} {t:.64?} is not a media type (type/subtype, visible ASCII, at most {MAX_MEDIA_TYPE} bytes)"
            ));
        }
    }
    if r.annotations.len() > MAX_ANNOTATIONS {
        return Err(format!("{} annotations; at most {MAX_ANNOTATIONS}", r.annotations.len()));
    }
    for (k, v) in &r.annotations {
        if k.is_empty() || k.len() > MAX_ANNOTATION_KEY || k.chars().any(|c| c.is_whitespace() || is_hidden(c)) {
            return Err(format!(
                "annotation key {k:.64?}: 1 to {MAX_ANNOTATION_KEY} bytes, without whitespace, control, bidirectional or invisible characters"
            ));
        }
        if v.len() > MAX_ANNOTATION_VALUE || v.chars().any(is_hidden) {
            return Err(format!(
                "annotation {k}: a value of at most {MAX_ANNOTATION_VALUE} bytes without control, bidirectional or invisible characters"
            ));
        }
    }
    Ok(())
}

fn schema_2(v: u32) -> Result<(), OciError> {
    if v == 2 {
        Ok(())
    } else {
        Err(OciError::bad(codes::MANIFEST_INVALID, format!("schemaVersion is {v}, not 2")))
    }
}

/// A descriptor's blob must be in the repository, of its size.
fn referenced_blob(access: &Access<'_>, d: &Descriptor) -> Result<(), OciError> {
    let id = parse_digest(d.digest().as_ref())?;
    let meta = access.blob(&id).map_err(|_| blob_unknown(access, &id))?;
    same_size(&id, d.size(), meta.size)
}

/// An index's descriptor's manifest must be in the repository, of its size.
fn referenced_manifest(access: &Access<'_>, d: &Descriptor) -> Result<(), OciError> {
    let id = parse_digest(d.digest().as_ref())?;
    let (_, record) = access.manifest(&id).map_err(|_| blob_unknown(access, &id))?;
    same_size(&id, d.size(), record.size)
}

fn blob_unknown(access: &Access<'_>, id: &BlobId) -> OciError {
    OciError::bad(
        codes::MANIFEST_BLOB_UNKNOWN,
        format!(
            "the manifest references {id}, which repository {} does not hold: push it first",
            access.name
        ),
    )
    .detail(serde_json::json!({ "digest": id.to_string() }))
}

fn same_size(id: &BlobId, declared: u64, actual: u64) -> Result<(), OciError> {
    if declared == actual {
        Ok(())
    } else {
        Err(OciError::bad(
            codes::MANIFEST_INVALID,
            format!("the descriptor of {id} says {declared} bytes; the repository holds {actual}"),
        ))
    }
}

/// `GET` / `HEAD`: the manifest's bytes with its media type and digest.
pub async fn get(access: &Access<'_>, method: &Method, raw: &str) -> Result<Response, OciError> {
    let (id, by_tag) = match reference(raw)? {
        Reference::Digest(id) => (id, false),
        Reference::Tag(tag) => {
            let id = access
                .app
                .store
                .repos()
                .tag(access.name, tag)
                .map_err(internal(format!("reading tags of {}", access.name)))?
                .ok_or_else(|| OciError::manifest_unknown(access.name, tag))?;
            (id, true)
        }
    };
    let (_, record) = access.manifest(&id).map_err(|_| OciError::manifest_unknown(access.name, raw))?;
    let bytes = match tokio::fs::read(access.app.store.blob_path(&id)).await {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(OciError::manifest_unknown(access.name, raw)),
        Err(e) => return Err(internal(format!("reading manifest {id}"))(e.into())),
    };
    let len = bytes.len();
    let mut resp = if *method == Method::HEAD {
        StatusCode::OK.into_response()
    } else {
        (StatusCode::OK, bytes).into_response()
    };
    let h = resp.headers_mut();
    set(h, header::CONTENT_TYPE.as_str(), &record.media_type);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    set(h, DIGEST_HEADER, &id.to_string());
    set(h, header::ETAG.as_str(), &format!("\"{id}\""));
    // A tag may move: a cache must ask again.
    set(
        h,
        header::CACHE_CONTROL.as_str(),
        if by_tag { "private, no-cache" } else { PRIVATE_IMMUTABLE },
    );
    Ok(resp)
}

/// `DELETE`: by digest, the manifest with its tags and referrer entry; by
/// tag, the tag alone. 202.
pub async fn delete(access: &Access<'_>, raw: &str) -> Result<Response, OciError> {
    access.must_own("delete manifests")?;
    let repos = access.app.store.repos();
    let existed = match reference(raw)? {
        Reference::Digest(id) => {
            access.manifest(&id)?;
            repos.delete_manifest(access.name, &id).await
        }
        Reference::Tag(tag) => repos.delete_tag(access.name, tag).await,
    }
    .map_err(internal(format!("deleting {raw} from {}", access.name)))?;
    if !existed {
        return Err(OciError::manifest_unknown(access.name, raw));
    }
    tracing::info!(reference = raw, repository = access.name, by = %access.who.name, "manifest deleted");
    Ok(StatusCode::ACCEPTED.into_response())
}

/// Sets a header whose value was built from checked parts.
pub fn set(h: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(k), Ok(v)) = (axum::http::HeaderName::try_from(name), HeaderValue::from_str(value)) {
        h.insert(k, v);
    }
}
