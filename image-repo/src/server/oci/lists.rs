//! The lists of the OCI API, each paginated: `GET /v2/NAME/tags/list`
//! (`n`, `last`, in lexical order) and `GET /v2/NAME/referrers/DIGEST`
//! (filtered by `artifactType`; an image index of descriptors). A page
//! holds at most [`super::PAGE`] items; a `Link: <...>; rel="next"`
//! header names the next one (OCI Distribution Specification v1.1,
//! "Listing tags", "Listing referrers").

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::{internal, OciError};
use super::manifests::{set, OCI_INDEX};
use super::{form_pairs, page_query, parse_digest, Access};

/// The header of a referrers answer that says a filter was applied.
const FILTERS_HEADER: &str = "oci-filters-applied";

/// `GET /v2/NAME/tags/list?n=N&last=TAG`: `{"name", "tags"}`. A caller
/// that does not own the repository sees the tags of manifests it may
/// read; with none, the repository is unknown to it (404 NAME_UNKNOWN).
pub async fn tags(access: &Access<'_>, query: &str) -> Result<Response, OciError> {
    let (n, last) = page_query(query)?;
    let repos = access.app.store.repos();
    let failed = || internal(format!("listing tags of {}", access.name));
    if !repos.exists(access.name).map_err(failed())? {
        return Err(OciError::name_unknown(access.name));
    }
    let page = repos.tags(access.name, last.as_deref(), n).map_err(failed())?;
    let owns = access.owns();
    let tags: Vec<String> = page
        .items
        .into_iter()
        .filter(|(_, id)| owns || access.manifest(id).is_ok())
        .map(|(t, _)| t)
        .collect();
    if !owns && tags.is_empty() && !page.more {
        return Err(OciError::name_unknown(access.name));
    }
    let next = page.more.then(|| {
        let after = tags.last().cloned().or(last).unwrap_or_default();
        format!("/v2/{}/tags/list?n={n}&last={after}", access.name)
    });
    let mut resp = Json(json!({ "name": access.name, "tags": tags })).into_response();
    if let Some(next) = next {
        set(resp.headers_mut(), header::LINK.as_str(), &format!("<{next}>; rel=\"next\""));
    }
    Ok(resp)
}

/// `GET /v2/NAME/referrers/DIGEST[?artifactType=T]`: the manifests of the
/// repository whose `subject` is `DIGEST` and the caller may read, as an
/// image index; 200 with none listed for an unknown subject, as the
/// specification requires (never 404).
pub async fn referrers(access: &Access<'_>, digest: &str, query: &str) -> Result<Response, OciError> {
    let subject = parse_digest(digest)?;
    let pairs = form_pairs(query);
    let filter = pairs.iter().find(|(k, _)| k == "artifactType").map(|(_, v)| v.clone());
    let (n, last) = page_query(query)?;
    let after = last.as_deref().map(parse_digest).transpose()?;
    let page = access
        .app
        .store
        .repos()
        .referrers(access.name, &subject, after.as_ref(), n)
        .map_err(internal(format!("listing referrers of {subject} in {}", access.name)))?;
    let last_seen = page.items.last().map(|(id, _)| id.clone());
    let manifests: Vec<_> = page
        .items
        .into_iter()
        .filter(|(id, r)| access.manifest(id).is_ok() && filter.as_ref().is_none_or(|f| r.artifact_type.as_ref() == Some(f)))
        .map(|(id, r)| {
            let mut d = json!({ "mediaType": r.media_type, "digest": id.to_string(), "size": r.size });
            if let Some(t) = r.artifact_type {
                d["artifactType"] = json!(t);
            }
            if !r.annotations.is_empty() {
                d["annotations"] = json!(r.annotations);
            }
            d
        })
        .collect();
    let body = json!({ "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests });
    let mut resp = (StatusCode::OK, Json(body)).into_response();
    let h = resp.headers_mut();
    set(h, header::CONTENT_TYPE.as_str(), OCI_INDEX);
    if filter.is_some() {
        set(h, FILTERS_HEADER, "artifactType");
    }
    if let (true, Some(last)) = (page.more, last_seen) {
        let mut next = format!("/v2/{}/referrers/{subject}?n={n}&last={last}", access.name);
        if let Some(f) = &filter {
            next.push_str(&format!("&artifactType={f}"));
        }
        set(h, header::LINK.as_str(), &format!("<{next}>; rel=\"next\""));
    }
    Ok(resp)
}
