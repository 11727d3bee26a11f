//! `GET`, `HEAD` and `DELETE /v2/NAME/blobs/DIGEST`. The content is the
//! store's, sent by the same code as `/v1` (`Range` for resuming,
//! `Cache-Control: private`); a delete unlinks the blob from the
//! repository, and the content stays while another repository, a `/v1`
//! owner or a pin holds it.

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::{internal, OciError};
use super::{parse_digest, Access};
use crate::server::download;

/// `GET` / `HEAD`: 200 (206 for a `Range`) with the content, or 404
/// BLOB_UNKNOWN. A blob this repository lacks, asked for by its own site
/// in one of the site's repositories, is pulled through from a peer
/// site's repository by digest first (`crate::server::peers`) and linked
/// into the repository asked.
pub async fn get(access: &Access<'_>, method: &Method, headers: &HeaderMap, digest: &str) -> Result<Response, OciError> {
    let id = parse_digest(digest)?;
    let meta = match access.blob(&id) {
        Ok(m) => m,
        Err(unknown) => {
            let app = access.app;
            let here = app.store.get(&id).map_err(internal(format!("reading metadata of {id}")))?;
            if here.is_some() || !access.owns() || !app.peers.serve(access.who) {
                return Err(unknown);
            }
            if app.peers.pull_through(app, &id, &access.who.name, None).await?.is_none() {
                return Err(unknown);
            }
            app.store
                .repos()
                .link_blob(access.name, &id)
                .await
                .map_err(internal(format!("linking {id}")))?;
            access.blob(&id)?
        }
    };
    Ok(download::send(access.app, method, headers, &meta).await?)
}

/// `DELETE`: 202 once the repository no longer holds the blob.
pub async fn delete(access: &Access<'_>, digest: &str) -> Result<Response, OciError> {
    access.must_own("delete blobs")?;
    let id = parse_digest(digest)?;
    access.blob(&id)?;
    access
        .app
        .store
        .repos()
        .unlink_blob(access.name, &id)
        .await
        .map_err(internal(format!("unlinking {id} from {}", access.name)))?;
    tracing::info!(%id, repository = access.name, by = %access.who.name, "blob unlinked");
    Ok(StatusCode::ACCEPTED.into_response())
}
