//! The peer side of usage accounting: the usage records of the VEEs run
//! here for primary sites, sent to them (VMI PushUsage) from the outbox.

use std::collections::HashMap;

use super::Accounting;
use crate::model::UsageRec;
use crate::ports::call::CallError;
use crate::store::{StoreError, Tree, Writes};

/// Why a push of usage records did not end: a primary site refused or did
/// not answer (its records stay in the outbox for the next round), or the
/// records could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("{site}: {}", .call.message)]
    Peer { site: String, call: CallError },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Accounting {
    /// Sends the usage records in the outbox (those of VEEs run for peers,
    /// not yet sent) to their primary sites; a site's records leave the
    /// outbox once that site answered. A round reads the outbox, not every
    /// usage record.
    pub async fn push_usage(&self) -> Result<(), PushError> {
        let mut by_site: HashMap<String, Vec<UsageRec>> = HashMap::new();
        let mut outbox: Vec<(String, String)> = Vec::new();
        self.store.scan(Tree::UsageOutbox, |key, raw| {
            outbox.push((key.to_string(), serde_json::from_slice(raw).map_err(StoreError::from)?));
            Ok(())
        })?;
        for (id, site) in outbox {
            match self.store.get::<UsageRec>(Tree::Usage, &id)? {
                Some(u) => by_site.entry(site).or_default().push(u),
                None => self.store.remove(Tree::UsageOutbox, &id)?,
            }
        }
        for (site, recs) in by_site {
            let reply = async { self.peer(&site)?.push_usage(&self.cfg.site_id, &recs).await }
                .await
                .map_err(|call| PushError::Peer { site: site.clone(), call })?;
            for why in &reply.reasons {
                tracing::warn!(%site, reason = %why, "the primary site refused a usage record");
            }
            let mut w = Writes::default();
            for mut u in recs {
                u.sent = true;
                w.put(Tree::Usage, &u.record_id, &u)?;
                w.remove(Tree::UsageOutbox, &u.record_id);
            }
            self.store.commit(w)?;
        }
        Ok(())
    }
}
