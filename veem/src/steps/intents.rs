//! Intent records (issue 13 R1). A step that acts outside this VEEM's
//! database before it can commit its own records writes an intent first;
//! the commit that records the step's outcome removes it in the same
//! transaction. An intent found later means the VEEM died in between: what
//! the step may have done outside is undone ([`Intents::undo_intents`] at
//! start-up, when every intent is a crash's; then [`Intents::retry_left`]
//! every usage interval for those start-up could not undo, never for one
//! written since: that is a step under way), so a crash at any point
//! leaves no orphan.
//!
//! Today's one step of that kind is Deploy's placement at peer sites: the
//! peers boot VEEs before the admission is committed here.

use std::collections::HashSet;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::core::Core;
use crate::store::{StoreError, Tree, Writes};

/// What a step may have done outside the database.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Intent {
    /// VEEs of service `service_id` that peer sites may have booted for a
    /// Deploy not yet committed here: undone by asking every peer to
    /// abort them (AbortIncoming).
    RemotePlacement {
        service_id: String,
        vees: Vec<String>,
        /// When it was written, in milliseconds since the Unix epoch.
        created_ms: i64,
    },
}

impl Intent {
    /// Its key in the `intents` tree.
    pub fn key(&self) -> String {
        match self {
            Intent::RemotePlacement { service_id, .. } => format!("remote-placement/{service_id}"),
        }
    }
}

/// The intents of steps that act outside the database before they commit (see the module doc): written, ended by the step's commit, undone after a crash. Calls only the core and the peers.
pub struct Intents {
    core: Arc<Core>,
    /// The keys of the intents start-up found and could not undo yet.
    left: Mutex<HashSet<String>>,
}

impl Deref for Intents {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Intents {
    pub fn new(core: Arc<Core>) -> Self {
        Self {
            core,
            left: Mutex::default(),
        }
    }
}

impl Intents {
    /// Writes `intent` (flushed) before its step acts.
    pub(crate) fn begin_intent(&self, intent: &Intent) -> Result<(), StoreError> {
        self.store.put(Tree::Intents, &intent.key(), intent)
    }

    /// Removes `intent` when its step gave up and undid what it did.
    pub(crate) fn drop_intent(&self, intent: &Intent) -> Result<(), StoreError> {
        self.store.remove(Tree::Intents, &intent.key())
    }

    /// Removes `intent` in the commit `w` that records its step's outcome.
    pub(crate) fn end_intent(w: &mut Writes, intent: &Intent) {
        w.remove(Tree::Intents, &intent.key());
    }

    /// Undoes the steps whose intents a crash left behind (at start-up,
    /// before any step runs: every intent is a crash's); an intent whose
    /// undo did not complete (a peer unreachable) is left for
    /// [`Intents::retry_left`]. Returns how many remain.
    pub async fn undo_intents(&self) -> Result<usize, StoreError> {
        let intents = self.store.list::<Intent>(Tree::Intents)?;
        self.undo(intents).await
    }

    /// Undoes again what [`Intents::undo_intents`] left, and only that:
    /// an intent written since is a step under way (a Deploy placing VEEs
    /// at peers), not a crash's. Returns how many remain.
    pub async fn retry_left(&self) -> Result<usize, StoreError> {
        let left = self.left.lock().unwrap().clone();
        if left.is_empty() {
            return Ok(0);
        }
        let intents = self
            .store
            .list::<Intent>(Tree::Intents)?
            .into_iter()
            .filter(|i| left.contains(&i.key()))
            .collect();
        self.undo(intents).await
    }

    /// Undoes `intents`; those whose undo did not complete are what is
    /// left. Returns how many.
    async fn undo(&self, intents: Vec<Intent>) -> Result<usize, StoreError> {
        let mut left = HashSet::new();
        for intent in intents {
            match &intent {
                Intent::RemotePlacement { service_id, vees, .. } => {
                    let mut undone = true;
                    for p in &self.cfg.peers {
                        let peer = match self.peer(&p.site_id) {
                            Ok(peer) => peer,
                            Err(_) => {
                                undone = false;
                                continue;
                            }
                        };
                        for v in vees {
                            match peer.abort_incoming(v).await {
                                Ok(()) => {
                                    tracing::warn!(vee = %v, site = %p.site_id, service = %service_id, "a Deploy cut short by a crash: the VEE the peer booted is taken back")
                                }
                                Err(s) if s.is_not_found() => {}
                                Err(s) => {
                                    tracing::warn!(vee = %v, site = %p.site_id, error = %s.message(), "cannot take back a VEE of a Deploy cut short; will retry");
                                    undone = false;
                                }
                            }
                        }
                    }
                    if undone {
                        self.drop_intent(&intent)?;
                    } else {
                        left.insert(intent.key());
                    }
                }
            }
        }
        let n = left.len();
        *self.left.lock().unwrap() = left;
        Ok(n)
    }
}
