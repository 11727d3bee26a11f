//! Mutating VMI calls made idempotent by a request ID: a client names a
//! call with gRPC metadata `vee-request-id` (REST: the `Idempotency-Key`
//! header), and the VEEM keeps the call's reply under the caller and that
//! ID. The same call again (a retry after a lost answer, a takeover, a
//! VEEM restart) gets the kept reply and changes nothing more; another
//! call or other fields under the same ID are refused (AlreadyExists). A
//! call that failed keeps nothing: asked again, it runs again (a failed
//! change changed nothing). IDs are scoped by caller, as Deploy's
//! `request_id` (`crate::workflows::deploy::request`), and kept
//! [`KEPT_FOR_MS`].
//!
//! What this does not cover: a VEEM that dies after the change and before
//! it kept the reply; the retry then runs the call again, which the
//! workflows make harmless (a second checkpoint; a stop of a stopped VEE
//! answers with it; a proposal refused as one already open).

use std::future::Future;

use prost::Message;
use serde::{Deserialize, Serialize};
use tonic::{Request, Response, Status};

use super::VmiService;
use crate::api::status::status;
use crate::config::Role;
use crate::error::VeemError;
use crate::store::Tree;
use crate::workflows::deploy::request::RequestKey;

/// The gRPC metadata key that names a mutating call.
pub const REQUEST_ID: &str = "vee-request-id";

/// How long a reply is kept: a day, in milliseconds.
pub const KEPT_FOR_MS: i64 = 24 * 3600 * 1000;

/// Every this many replies kept, those older than [`KEPT_FOR_MS`] go.
const PRUNE_EVERY: u64 = 256;

/// Replies kept by this process, counted for [`PRUNE_EVERY`].
static KEPT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// What the `replies` tree holds per caller and request ID.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReplyRec {
    /// The VMI method (`VeeAction`, `Migrate`, ...).
    pub method: String,
    /// SHA-256 (hex) of the request message's protobuf encoding.
    pub request_sha256: String,
    /// The reply message's protobuf encoding, in hex.
    pub reply: String,
    /// When, in milliseconds since the Unix epoch.
    pub created_ms: i64,
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

impl VmiService {
    /// Runs mutating call `method` of `role` (`call` on request `r`) once
    /// per request ID (see the module doc). Errors: `call`'s;
    /// InvalidArgument naming `vee-request-id` when it is not one
    /// ([`RequestKey::new`]'s rules); AlreadyExists when the ID was used
    /// for another call; the store's.
    pub(super) async fn once<Q, M, F, Fut>(&self, method: &'static str, role: &Role, r: Request<Q>, call: F) -> Result<Response<M>, Status>
    where
        Q: Message,
        M: Message + Default,
        F: FnOnce(Request<Q>) -> Fut,
        Fut: Future<Output = Result<Response<M>, Status>>,
    {
        let Some(id) = r.metadata().get(REQUEST_ID) else {
            return call(r).await;
        };
        let id = id
            .to_str()
            .map_err(|_| Status::invalid_argument(format!("metadata `{REQUEST_ID}`: not ASCII")))?;
        let key = RequestKey::new(role, id).map_err(|e| Status::invalid_argument(format!("metadata `{REQUEST_ID}`: {e}")))?;
        let fingerprint = sha256_hex(&r.get_ref().encode_to_vec());
        // Two calls of one ID at once: the second waits for the first's reply.
        let _g = self.veem.deploy.lock_request(&key).await;
        let store = &self.veem.core.store;
        if let Some(kept) = store.get::<ReplyRec>(Tree::Replies, key.key()).map_err(status)? {
            if kept.method != method || kept.request_sha256 != fingerprint {
                return Err(status(VeemError::ReplyReused {
                    id: key.id().to_string(),
                    method: kept.method,
                }));
            }
            tracing::info!(%method, request_id = %key.id(), "a call asked again: the first call's reply");
            let bytes = hex::decode(&kept.reply).map_err(|e| Status::internal(format!("the kept reply: {e}")))?;
            return M::decode(bytes.as_slice())
                .map(Response::new)
                .map_err(|e| Status::internal(format!("the kept reply: {e}")));
        }
        let reply = call(r).await?;
        let now = self.veem.core.clock.now_ms();
        let rec = ReplyRec {
            method: method.to_string(),
            request_sha256: fingerprint,
            reply: hex::encode(reply.get_ref().encode_to_vec()),
            created_ms: now,
        };
        // The change is made: a reply not kept costs a retry its replay,
        // not the change.
        if let Err(e) = store.put(Tree::Replies, key.key(), &rec) {
            tracing::warn!(%method, request_id = %key.id(), error = %format!("{e:#}"), "the reply was not kept");
        }
        if KEPT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.prune_replies(now);
        }
        Ok(reply)
    }

    /// Deletes the replies kept longer than [`KEPT_FOR_MS`] before `now_ms`.
    fn prune_replies(&self, now_ms: i64) {
        let mut old = Vec::new();
        let scanned = self.veem.core.store.scan(Tree::Replies, |k, v| {
            if serde_json::from_slice::<ReplyRec>(v).is_ok_and(|r| now_ms - r.created_ms > KEPT_FOR_MS) {
                old.push(k.to_string());
            }
            Ok(())
        });
        let mut w = crate::store::Writes::default();
        for k in &old {
            w.remove(Tree::Replies, k);
        }
        if let Err(e) = scanned.and_then(|_| self.veem.core.store.commit(w).map(|_| ())) {
            tracing::warn!(error = %format!("{e:#}"), "old replies not pruned");
        }
    }
}
