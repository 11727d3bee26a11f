//! Watching the peer sites that run this site's VEEs. The primary site
//! stays responsible for the SLA (DESIGN.md §7, E Ch 3.4), so it recovers
//! what a failed peer ran, in the recovery order of H §4: a local host from
//! the latest checkpoint (wherever it was taken), else another peer site,
//! else an SLA violation with the manifest's penalty.
//!
//! Every heartbeat interval the primary site asks each peer for every VEE
//! it runs there (GetVee, at most [`PEER_CALL_TIMEOUT`] each). A peer that
//! answers none of them for `heartbeat_miss_limit` rounds in a row has
//! failed; a VEE the peer reports failed, or no longer knows, is recovered
//! alone. Before a VEE is recovered elsewhere it is *fenced*: when the peer
//! answers again it is told to destroy its copy (AbortIncoming), so that a
//! VEE never runs in two places for longer than the peer's silence. A
//! peer whose control plane answers but cannot act (a standby during a
//! takeover, a leader starting, a store without quorum: marked
//! [`interfaces::fencing::NOT_ACTING`]) is not silent: its VEEs run on.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::core::RecordError;

use crate::core::Core;
use crate::model::{FenceRec, Location, VeeRec, VeeState};
use crate::ports::call::Failure;
use crate::ports::within;
use crate::steps::networks::Networks;
use crate::store::Tree;
use crate::workflows::federation::Federation;
use crate::workflows::migration::Migration;
use crate::workflows::recovery::Recovery;

/// How long one call to a peer may take before it counts as unanswered.
pub const PEER_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What one watch round learned about one peer.
enum PeerAnswer {
    /// The peer did not answer (`Unavailable`, timeout).
    Silent,
    /// The peer answered; these VEEs it reports failed or does not know.
    Answered { lost: Vec<String> },
}

/// The watch over peer sites that run this site's VEEs (see the module doc): a silent peer's VEEs recovered, their copies fenced when it answers again. Calls the core, federation, migration, networks and recovery.
pub struct PeerWatch {
    core: Arc<Core>,
    pub(crate) federation: Arc<Federation>,
    pub(crate) migration: Arc<Migration>,
    pub(crate) networks: Arc<Networks>,
    pub(crate) recovery: Arc<Recovery>,
}

impl Deref for PeerWatch {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl PeerWatch {
    pub fn new(
        core: Arc<Core>,
        federation: Arc<Federation>,
        migration: Arc<Migration>,
        networks: Arc<Networks>,
        recovery: Arc<Recovery>,
    ) -> Self {
        Self {
            core,
            federation,
            migration,
            networks,
            recovery,
        }
    }
}

impl PeerWatch {
    /// One round over every peer that runs VEEs of this site or still holds
    /// fenced copies; `misses` counts silent rounds per peer.
    pub(crate) async fn watch_round(self: &Arc<Self>, misses: &mut HashMap<String, u32>) {
        if self.cfg.peers.is_empty() {
            return;
        }
        let vees = self.vees_where(|v| v.state == VeeState::Running && matches!(v.location, Location::Site(_)));
        let fenced: Vec<FenceRec> = self.store.list(Tree::Fenced).unwrap_or_default();
        let mut by_site: HashMap<String, Vec<VeeRec>> = HashMap::new();
        for v in vees {
            if let Location::Site(s) = &v.location {
                by_site.entry(s.clone()).or_default().push(v);
            }
        }
        for f in &fenced {
            by_site.entry(f.site.clone()).or_default();
        }
        for (site, vees) in by_site {
            match self.ask_peer(&site, &vees, &fenced).await {
                PeerAnswer::Silent => {
                    let n = misses.entry(site.clone()).or_default();
                    *n += 1;
                    let endpoint = self
                        .cfg
                        .peers
                        .iter()
                        .find(|p| p.site_id == site)
                        .map(|p| p.endpoint.clone())
                        .unwrap_or_default();
                    if *n == 1 {
                        tracing::warn!(%site, %endpoint, "peer site does not answer");
                    }
                    if *n == self.cfg.heartbeat_miss_limit && !vees.is_empty() {
                        tracing::error!(%site, %endpoint, "peer site missed its heartbeats: failed");
                        self.event(
                            "",
                            "",
                            "peer-failed",
                            format!("{site} did not answer {n} times; recovering its {} VEEs", vees.len()),
                        );
                        for v in &vees {
                            self.spawn_recover_from_peer(&v.id, &site);
                        }
                    }
                }
                PeerAnswer::Answered { lost } => {
                    if let Some(n) = misses.remove(&site) {
                        tracing::info!(%site, "peer site answers again");
                        if n >= self.cfg.heartbeat_miss_limit {
                            self.event("", "", "peer-up", format!("{site} answers again"));
                        }
                    }
                    for id in lost {
                        self.spawn_recover_from_peer(&id, &site);
                    }
                }
            }
        }
    }

    /// Asks `site` about `vees`; an answering site is also told to destroy
    /// the copies fenced at it.
    async fn ask_peer(&self, site: &str, vees: &[VeeRec], fenced: &[FenceRec]) -> PeerAnswer {
        let Ok(c) = self.peer(site) else {
            return PeerAnswer::Answered { lost: vec![] };
        };
        let mut answered = false;
        let mut lost = Vec::new();
        for v in vees {
            match within(&*self.clock, PEER_CALL_TIMEOUT, c.get_vee(&v.id)).await {
                Some(Ok(info)) => {
                    answered = true;
                    if info.state == Some(VeeState::Failed) {
                        lost.push(v.id.clone());
                    }
                }
                Some(Err(s)) if s.is_not_found() => {
                    answered = true;
                    lost.push(v.id.clone());
                }
                // Its control plane answers but cannot act now (a
                // takeover, a start, no quorum): the site is there and
                // its VEEs run on its hosts; nothing to recover.
                Some(Err(s)) if s.failure == Failure::NotActing => answered = true,
                _ => {}
            }
        }
        for f in fenced.iter().filter(|f| f.site == site) {
            let Some(r) = within(&*self.clock, PEER_CALL_TIMEOUT, c.abort_incoming(&f.vee_id)).await else {
                continue; // no answer in time
            };
            answered = true;
            match r {
                Ok(_) => self.event(&f.vee_id, "", "fenced", format!("{site} destroyed its copy")),
                Err(s) if s.is_not_found() => {}
                Err(s) => {
                    tracing::warn!(vee = %f.vee_id, %site, error = %s.message(), "fencing failed; retrying next round");
                    continue;
                }
            }
            let _ = self.store.remove(Tree::Fenced, &f.vee_id);
        }
        if answered || vees.is_empty() && !fenced.iter().any(|f| f.site == site) {
            PeerAnswer::Answered { lost }
        } else {
            PeerAnswer::Silent
        }
    }

    fn spawn_recover_from_peer(self: &Arc<Self>, vee_id: &str, site: &str) {
        let (veem, vee_id, site) = (self.clone(), vee_id.to_string(), site.to_string());
        self.spawn(async move {
            if let Err(e) = veem.recover_from_peer(&vee_id, &site).await {
                tracing::error!(vee = %vee_id, %site, error = %format!("{e:#}"), "recovery from a failed peer site failed");
            }
        });
    }

    /// Recovers VEE `vee_id`, lost at peer `site`: fences it there, then
    /// restores it from its latest checkpoint on a local host (or restarts
    /// it from its images without one), else at another peer site, else
    /// records an SLA violation. Errors only when the records cannot be
    /// written.
    pub async fn recover_from_peer(self: &Arc<Self>, vee_id: &str, site: &str) -> Result<(), RecordError> {
        let v = self.vee(vee_id)?;
        if v.location != Location::Site(site.to_string()) || !v.state.is_live() {
            return Ok(());
        }
        self.store.put(
            Tree::Fenced,
            vee_id,
            &FenceRec {
                vee_id: vee_id.into(),
                site: site.into(),
            },
        )?;
        // Cut off the overlay there first (networks::fenced_at).
        self.networks.sync_networks(&v.service_id).await;
        let why = format!("site {site} lost it");
        // Why it was not recovered locally, as the violation's text says.
        let local: Result<(), String> = match self.migration.home_host(&v) {
            Some(host) => match self.migration.reserve_home(&v, &host) {
                Ok(()) => match self.recovery.recover_vee_on(vee_id, &why, &host, None).await {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        let _ = self.planner.lock().unwrap().release_service(&format!("home-{vee_id}"));
                        self.persist_planner()?;
                        Err(format!("restore on {host}: {e}"))
                    }
                },
                Err(e) => Err(e.to_string()),
            },
            None => Err("no local host can take it".into()),
        };
        let Err(local) = local else { return Ok(()) };
        tracing::warn!(vee = %vee_id, error = %local, "cannot recover locally; trying other peer sites");
        if let Err(e) = self.federation.recover_at_peer(vee_id, Some(site)).await {
            self.recovery.record_unrecovered(vee_id, &why, &format!("{local}; {e}"))?;
        }
        Ok(())
    }
}
