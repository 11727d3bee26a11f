//! Fencing a peer site's old leaders (DESIGN §11): every call of a peer
//! whose VEEMs lead over etcd carries the epoch of the VEEM that made it
//! (`interfaces::fencing`). This site keeps the newest epoch it has seen
//! from each peer (`meta/peer-epoch/<site>`, and when it was first seen,
//! `meta/peer-epoch-since/<site>`, in ms since the epoch) and refuses a
//! call of an older one, or, once an epoch was seen, one without any
//! (after the peer's `epochless_grace`). Streams admitted under an epoch
//! end when a newer one is admitted.
//!
//! The check is one conditional commit: two calls from the peer's old and
//! new leader racing each other cannot both pass with the old epoch
//! stored last (the loser reads again and is refused).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::core::Core;
use crate::store::{StoreError, Tree, Writes};

/// Why a peer's call was refused (the VMI's FAILED_PRECONDITION).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum Fenced {
    #[error("fenced: this call comes from a VEEM of {site} of epoch {epoch}, and one of epoch {newest} has since led {site}")]
    Older { site: String, epoch: i64, newest: i64 },
    #[error("fenced: this call carries no epoch, and VEEMs of {site} lead it with epochs (the newest seen: {newest})")]
    Unstamped { site: String, newest: i64 },
}

/// Why a peer's call was not admitted. Each variant's status is in
/// `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum EpochError {
    /// The call comes from an older leader of the peer, or carries no
    /// epoch where one is due.
    #[error(transparent)]
    Fenced(#[from] Fenced),
    /// Other calls' commits came between this one's read and write each
    /// time: the caller tries again.
    #[error("the epoch of {site}'s call: {tries} concurrent commits in a row; try again")]
    Contended { site: String, tries: usize },
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How often a conditional commit is tried again when another call's
/// commit came between its read and its write.
const TRIES: usize = 16;

/// The newest epoch of each peer site, in the store and for the streams.
pub struct PeerEpochs {
    core: Arc<Core>,
    /// Per peer site: the newest epoch admitted by this process, which
    /// the streams admitted under an older one watch.
    newest: Mutex<HashMap<String, watch::Sender<i64>>>,
}

fn key(site: &str) -> String {
    format!("peer-epoch/{site}")
}

fn since_key(site: &str) -> String {
    format!("peer-epoch-since/{site}")
}

impl PeerEpochs {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core, newest: Mutex::new(HashMap::new()) }
    }

    /// Admits a call of peer `site` carrying `epoch` (`None`: none):
    /// returns the epoch it runs under (0 for none). Errors: [`Fenced`]
    /// (downcast) when an epoch newer than the call's was seen from
    /// `site`, or when the call has none and the peer's grace for
    /// calls without one has passed; the store's.
    pub fn admit(&self, site: &str, epoch: Option<i64>) -> Result<i64, EpochError> {
        let store = &self.core.store;
        for _ in 0..TRIES {
            let rev = store.revision()?;
            let newest: Option<i64> = store.get(Tree::Meta, &key(site))?;
            let Some(e) = epoch else {
                let Some(newest) = newest else { return Ok(0) };
                let since: i64 = store.get(Tree::Meta, &since_key(site))?.unwrap_or(0);
                let grace = i64::try_from(self.grace(site).as_millis()).unwrap_or(i64::MAX);
                if self.core.clock.now_ms() < since.saturating_add(grace) {
                    return Ok(0);
                }
                return Err(Fenced::Unstamped { site: site.into(), newest }.into());
            };
            match newest {
                Some(n) if e < n => {
                    return Err(Fenced::Older { site: site.into(), epoch: e, newest: n }.into());
                }
                Some(n) if e == n => return Ok(e),
                _ => {}
            }
            let mut w = Writes::default();
            w.put(Tree::Meta, &key(site), &e)?;
            w.unchanged_since(Tree::Meta, &key(site), rev, newest.is_some());
            if newest.is_none() {
                w.put(Tree::Meta, &since_key(site), &self.core.clock.now_ms())?;
            }
            match store.commit(w) {
                Ok(_) => {
                    self.sender(site).send_if_modified(|n| std::mem::replace(n, (*n).max(e)) < e);
                    return Ok(e);
                }
                Err(StoreError::Conflict(_)) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        Err(EpochError::Contended {
            site: site.into(),
            tries: TRIES,
        })
    }

    /// Resolves once this process admits an epoch of `site` newer than
    /// `under` (a stream admitted under `under` then ends).
    pub fn superseded(&self, site: &str, under: i64) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.sender(site).subscribe();
        async move {
            // Err: the sender is never dropped while the VEEM runs; a
            // VEEM gone ends its streams anyway.
            let _ = rx.wait_for(|n| *n > under).await;
        }
    }

    fn sender(&self, site: &str) -> watch::Sender<i64> {
        self.newest
            .lock()
            .unwrap()
            .entry(site.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .clone()
    }

    fn grace(&self, site: &str) -> std::time::Duration {
        self.core
            .cfg
            .peers
            .iter()
            .find(|p| p.site_id == site)
            .map(|p| p.epochless_grace)
            .unwrap_or_default()
    }
}

/// Forgets the newest epoch kept of peer `site` in `store` (both keys):
/// returns it, `None` when none was kept. The VEEM running over the store
/// reads the store on each call, so the peer's next call is taken.
pub fn forget(store: &crate::store::Store, site: &str) -> Result<Option<i64>, StoreError> {
    let newest: Option<i64> = store.get(Tree::Meta, &key(site))?;
    let mut w = Writes::default();
    w.remove(Tree::Meta, &key(site));
    w.remove(Tree::Meta, &since_key(site));
    store.commit(w)?;
    Ok(newest)
}

#[cfg(test)]
mod tests;
