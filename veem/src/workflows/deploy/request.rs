//! Idempotent Deploy (issue 13 R1): a client names its Deploy with a
//! request ID, and the VEEM records the ID with the service in the same
//! commit as the admission. A retry after an error or a lost answer (even
//! across a VEEM crash) finds the record and gets the first call's service
//! instead of a second one. IDs are scoped by caller: two providers may use
//! the same ID.

use serde::{Deserialize, Serialize};

use super::Deploy;
use crate::config::Role;
use crate::error::VeemError;
use crate::model::ServiceRec;
use crate::store::{StoreError, Tree, Writes};

/// Longest request ID, in bytes.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// What the `requests` tree holds per caller and request ID.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RequestRec {
    /// The service the request deployed.
    pub service_id: String,
    /// SHA-256 (hex) of the manifest text it deployed.
    pub manifest_sha256: String,
    /// When, in milliseconds since the Unix epoch.
    pub created_ms: i64,
}

/// A validated request of one caller: its key in the `requests` tree.
#[derive(Clone, Debug)]
pub struct RequestKey {
    key: String,
    id: String,
}

impl RequestKey {
    /// The key of `request_id` for `caller`. Errors: InvalidArgument naming
    /// `request_id` when it is longer than [`MAX_REQUEST_ID_LEN`] or has a
    /// character other than `[A-Za-z0-9._:-]`.
    pub fn new(caller: &Role, request_id: &str) -> Result<Self, VeemError> {
        if request_id.len() > MAX_REQUEST_ID_LEN {
            return Err(VeemError::field("request_id", format!("longer than {MAX_REQUEST_ID_LEN} bytes")));
        }
        if let Some(c) = request_id.chars().find(|c| !(c.is_ascii_alphanumeric() || "._:-".contains(*c))) {
            return Err(VeemError::field(
                "request_id",
                format!("character {c:?} not allowed (letters, digits, '.', '_', ':', '-')"),
            ));
        }
        let who = match caller {
            Role::Provider(p) => format!("provider/{p}"),
            Role::Operator => "operator".to_string(),
            Role::Peer(s) => format!("peer/{s}"),
        };
        Ok(Self {
            key: format!("{who}/{request_id}"),
            id: request_id.to_string(),
        })
    }

    /// Its key in the store: `provider/NAME/ID`, `operator/ID` or
    /// `peer/SITE/ID`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The request ID as the caller gave it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The record to commit with the admission of `service_id` from `toml`.
    pub fn record(&self, service_id: &str, toml: &str, now_ms: i64) -> Result<Writes, StoreError> {
        let mut w = Writes::default();
        w.put(
            Tree::Requests,
            &self.key,
            &RequestRec {
                service_id: service_id.to_string(),
                manifest_sha256: interfaces::tokens::digest_hex(toml),
                created_ms: now_ms,
            },
        )?;
        Ok(w)
    }
}

impl Deploy {
    /// The service an earlier Deploy of `request` made, if any. Errors:
    /// [`VeemError::RequestReused`] when that Deploy had another manifest;
    /// NotFound when its service has since been deleted.
    pub(crate) fn requested(&self, request: &RequestKey, toml: &str) -> Result<Option<ServiceRec>, super::DeployError> {
        let Some(r) = self.store.get::<RequestRec>(Tree::Requests, &request.key)? else {
            return Ok(None);
        };
        if r.manifest_sha256 != interfaces::tokens::digest_hex(toml) {
            return Err(VeemError::RequestReused(request.id.clone(), r.service_id).into());
        }
        let svc = self
            .store
            .get::<ServiceRec>(Tree::Services, &r.service_id)?
            .ok_or_else(|| VeemError::not_found("service", &r.service_id))?;
        tracing::info!(request_id = %request.id, service = %svc.id, "Deploy retried: the service of the first call");
        Ok(Some(svc))
    }

    /// Serialises Deploys of `request`, so that two at once deploy once.
    pub(crate) async fn lock_request(&self, request: &RequestKey) -> tokio::sync::OwnedMutexGuard<()> {
        let m = interfaces::locks::entry(&mut self.request_locks.lock().unwrap(), &request.key);
        m.lock_owned().await
    }
}
