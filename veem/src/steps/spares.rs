//! The full guarantee (H §3.2.2: "spare capacity is reserved at a peer
//! site; admission fails without it"), both ends of the VMI's spare calls.
//!
//! Primary side: a `full` service the planner would admit asks for peer
//! spares ([`Admission::NeedsPeerSpare`]); the VEEM asks its peers, in the
//! order of their agreements' prices, to hold one spare per VEE over its
//! window (all at one peer), admits the service with that peer's offer and
//! confirms the holds once the admission is committed. A peer that refuses
//! any is released and the next is asked; with none the manifest is
//! refused with every peer's reason. A stopped VEE releases its spare. On
//! a failure with no local room the planner's recovery target is the
//! spare's peer, tried first.
//!
//! Peer side: a hold is a reservation of this site's planner (service and
//! VEE `spare-<VEE>`, for the primary's consumer) and a [`HeldSpare`]
//! record, written together. Unconfirmed holds lapse after
//! [`HOLD_SECONDS`]; a confirmed one stays until released or until the VEE
//! itself arrives from its primary, which then takes its place.
//!
//! [`Admission::NeedsPeerSpare`]: crate::planner::Admission::NeedsPeerSpare

use std::ops::Deref;
use std::sync::Arc;

use crate::domain::peer::SpareRequest;
use interfaces::manifest::{GuaranteeLevel, MigrationPolicy};
use serde::{Deserialize, Serialize};

use crate::core::Core;
use crate::planner::{Admission, ComponentRequest, PeerSpare, Resources, ServiceRequest, SpareNeed};
use crate::store::{Tree, Writes};

/// How long a hold waits for its confirmation (s).
pub const HOLD_SECONDS: i64 = 120;

/// A spare this site holds for a peer's VEE.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeldSpare {
    /// The peer's VEE.
    pub vee_id: String,
    /// The peer (its primary site).
    pub primary: String,
    /// Confirmed by the primary; until then it lapses at `confirm_by_ms`.
    pub confirmed: bool,
    pub confirm_by_ms: i64,
}

/// The planner's service (and VEE) ID of the spare for VEE `vee_id`.
pub fn spare_id(vee_id: &str) -> String {
    format!("spare-{vee_id}")
}

/// Why a peer's spare was not held, confirmed or released (VMI
/// ReserveSpare, ConfirmSpare, ReleaseSpare). Each variant's status is in
/// `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum SpareError {
    /// A request field (`vee_id`, `end_time`), or no spare held for that
    /// VEE and peer.
    #[error(transparent)]
    Request(#[from] crate::error::VeemError),
    /// The framework agreement with the peer does not admit it.
    #[error(transparent)]
    Agreement(#[from] crate::peers::AgreementRefusal),
    /// A spare for that VEE is held here already.
    #[error("a spare for VEE {vee} is held here already")]
    Held { vee: String },
    /// The planner has no room for it over its window.
    #[error("site {site} has no room for the spare: {reasons}")]
    NoRoom { site: String, reasons: String },
    /// The records could not be read or written.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// The full guarantee at both ends (see the module doc): spares held here for peers' VEEs, and held at peers for this site's. Calls only the core and the peers.
pub struct Spares {
    core: Arc<Core>,
}

impl Deref for Spares {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Spares {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
}

impl Spares {
    // ----- peer side -----

    /// Holds spare capacity for `from`'s VEE as `r` asks, if the framework
    /// agreement admits `full` VEEs of that size and the planner has room
    /// over the window. Errors with the reason otherwise (nothing held).
    /// Returns when the hold lapses unless confirmed (Unix ms).
    pub fn hold_spare(&self, from: &str, r: &SpareRequest) -> Result<i64, SpareError> {
        crate::model::check_uuid("vee_id", &r.vee_id)?;
        crate::peers::admits(&self.cfg, from, r.vcpus, r.memory_mib, GuaranteeLevel::Full)?;
        if r.end_unix <= r.start_unix {
            return Err(crate::error::VeemError::field("end_time", "must be after start_time").into());
        }
        if self.store.get::<HeldSpare>(Tree::Spares, &r.vee_id)?.is_some() {
            return Err(SpareError::Held { vee: r.vee_id.clone() });
        }
        let id = spare_id(&r.vee_id);
        let window = self.slots.covering(r.start_unix.max(self.clock.now()), r.end_unix);
        let req = ServiceRequest {
            service_id: id.clone(),
            consumer: from.into(),
            guarantee: GuaranteeLevel::Legacy,
            migration: MigrationPolicy::Site,
            window,
            components: vec![ComponentRequest {
                name: "spare".into(),
                resources: Resources::new(r.vcpus, r.memory_mib, r.disk_gib),
                profile: None,
                vees: vec![id.clone()],
            }],
            constraints: vec![],
            peer_spare: PeerSpare::NoneOffered,
            padding: crate::planner::Padding::NONE,
        };
        let held = HeldSpare {
            vee_id: r.vee_id.clone(),
            primary: from.into(),
            confirmed: false,
            confirm_by_ms: self.clock.now_ms() + HOLD_SECONDS * 1000,
        };
        let mut w = Writes::default();
        w.put(Tree::Spares, &held.vee_id, &held)?;
        let admitted = self.planner.lock().unwrap().admit(&req);
        match admitted {
            Admission::Accepted(_) => {}
            other => {
                return Err(SpareError::NoRoom {
                    site: self.cfg.site_id.clone(),
                    reasons: other.reasons().join("; "),
                })
            }
        }
        self.planner_store.save_with(&self.planner, w)?;
        self.event(&r.vee_id, "", "spare", format!("held for {from} until confirmed"));
        Ok(held.confirm_by_ms)
    }

    /// The spare held for `from`'s VEE `vee_id`; errors when there is none.
    fn held(&self, from: &str, vee_id: &str) -> Result<HeldSpare, SpareError> {
        self.store
            .get::<HeldSpare>(Tree::Spares, vee_id)?
            .filter(|h| h.primary == from)
            .ok_or_else(|| crate::error::VeemError::not_found("spare", vee_id).into())
    }

    /// `from` committed the admission its hold was for: it stays.
    pub fn confirm_spare(&self, from: &str, vee_id: &str) -> Result<(), SpareError> {
        let mut h = self.held(from, vee_id)?;
        h.confirmed = true;
        self.store.put(Tree::Spares, vee_id, &h)?;
        Ok(())
    }

    /// Drops the spare held for `from`'s VEE `vee_id` (its capacity is free
    /// again). Releasing one not held is not an error.
    pub fn release_spare(&self, from: &str, vee_id: &str) -> Result<(), SpareError> {
        if self.held(from, vee_id).is_err() {
            return Ok(());
        }
        let _ = self.planner.lock().unwrap().release_service(&spare_id(vee_id));
        let mut w = Writes::default();
        w.remove(Tree::Spares, vee_id);
        self.planner_store.save_with(&self.planner, w)?;
        self.event(vee_id, "", "spare", format!("released for {from}"));
        Ok(())
    }

    /// Admits `req`, `from`'s VEE arriving here, into the planner; when a
    /// spare is held for it, the spare's reservation makes room for it.
    /// Only an accepted admission changes the planner (a refusal keeps the
    /// spare). Returns the verdict and whether a spare was taken: the
    /// caller removes its [`HeldSpare`] in the admission's commit.
    pub(crate) fn admit_into_spare(&self, from: &str, req: &ServiceRequest) -> (Admission, bool) {
        let vee_id = &req.service_id;
        let spare = self.held(from, vee_id).is_ok();
        let mut planner = self.planner.lock().unwrap();
        if !spare {
            return (planner.admit(req), false);
        }
        let mut trial = planner.clone();
        let _ = trial.release_service(&spare_id(vee_id));
        let verdict = trial.admit(req);
        if matches!(verdict, Admission::Accepted(_)) {
            *planner = trial;
        }
        (verdict, spare)
    }

    /// Drops holds whose confirmation did not come in time (a primary that
    /// crashed mid-admission). Returns how many.
    pub fn lapse_spares(&self) -> Result<usize, SpareError> {
        let now = self.clock.now_ms();
        let mut n = 0;
        for h in self.store.list::<HeldSpare>(Tree::Spares)? {
            if !h.confirmed && h.confirm_by_ms < now {
                self.release_spare(&h.primary, &h.vee_id)?;
                n += 1;
            }
        }
        Ok(n)
    }

    // ----- primary side -----

    /// Asks peers (but `skip`), cheapest agreement first, to hold `needs`
    /// (one spare per VEE, over its range); all at one peer. Returns that peer, or the
    /// reasons of every peer asked (what one peer held is released before
    /// the next is asked).
    pub(crate) async fn reserve_peer_spares(&self, needs: &[SpareNeed], skip: Option<&str>) -> std::result::Result<String, Vec<String>> {
        let largest = needs.iter().fold(Resources::ZERO, |a, n| a.max(&n.resources));
        let mut reasons = Vec::new();
        for p in crate::peers::candidates(&self.cfg, largest.vcpus, largest.memory_mib, GuaranteeLevel::Full) {
            let site = p.site_id.clone();
            if Some(site.as_str()) == skip {
                continue;
            }
            let peer = match self.peer(&site) {
                Ok(peer) => peer,
                Err(e) => {
                    reasons.push(format!("{site}: {e:#}"));
                    continue;
                }
            };
            let mut held = Vec::new();
            let mut refused = None;
            for n in needs {
                let r = SpareRequest {
                    vee_id: n.vee.clone(),
                    vcpus: n.resources.vcpus,
                    memory_mib: n.resources.memory_mib,
                    disk_gib: n.resources.disk_gib,
                    start_unix: self.slots.start_of(n.range.start),
                    end_unix: self.slots.start_of(n.range.end),
                };
                match peer.reserve_spare(&r).await {
                    Ok(_) => held.push(n.vee.clone()),
                    Err(s) => {
                        refused = Some(format!("{site} refused a spare: {}", s.message()));
                        break;
                    }
                }
            }
            match refused {
                None => return Ok(site),
                Some(why) => {
                    reasons.push(why);
                    for v in held {
                        let _ = peer.release_spare(&v).await;
                    }
                }
            }
        }
        if reasons.is_empty() {
            reasons.push("no peer site's framework agreement admits guarantee full".into());
        }
        Err(reasons)
    }

    /// Confirms (`keep`) or releases the spares peer `site` holds for
    /// `vees`; best effort (an unconfirmed hold lapses by itself).
    pub(crate) async fn settle_peer_spares(&self, site: &str, vees: &[String], keep: bool) {
        let Ok(peer) = self.peer(site) else { return };
        for v in vees {
            let r = if keep {
                peer.confirm_spare(v).await
            } else {
                peer.release_spare(v).await
            };
            if let Err(e) = r {
                tracing::warn!(vee = %v, %site, keep, error = %e.message(), "peer spare not settled");
            }
        }
    }

    /// The peer site holding `vee_id`'s spare, if any.
    pub fn spare_site(&self, vee_id: &str) -> Option<String> {
        self.planner.lock().unwrap().peer_spare(vee_id).and_then(|s| s.site.clone())
    }

    /// `vee_id`'s peer spare at `site` was used: the VEE arrived into it
    /// (see [`crate::planner::Planner::release_vee_to_site`]). Another peer
    /// is asked to hold a new one over the rest of its window, so that the
    /// full guarantee stays kept; an event says which, or why none does.
    /// Errors only when the planner cannot be saved.
    pub(crate) async fn replace_used_spare(&self, vee_id: &str, site: &str, mut need: SpareNeed) -> Result<(), crate::store::StoreError> {
        let service = self.vee(vee_id).map(|v| v.service_id).unwrap_or_default();
        need.range = need.range.from_slot(self.now_slot());
        need.site = None;
        match self.reserve_peer_spares(std::slice::from_ref(&need), Some(site)).await {
            Ok(peer) => {
                need.site = Some(peer.clone());
                self.planner.lock().unwrap().set_peer_spare(need);
                self.persist_planner()?;
                self.settle_peer_spares(&peer, &[vee_id.to_string()], true).await;
                self.event(
                    vee_id,
                    &service,
                    "spare",
                    format!("its spare at {site} was used; {peer} holds a new one"),
                );
            }
            Err(reasons) => self.event(
                vee_id,
                &service,
                "spare",
                format!(
                    "its spare at {site} was used; no other peer holds a new one: {}",
                    reasons.join("; ")
                ),
            ),
        }
        Ok(())
    }

    /// A VEE abroad was stopped: its peer spare, kept while it ran there,
    /// is released (best effort at the peer).
    pub(crate) async fn release_spare_of_stopped_abroad(&self, vee_id: &str) -> Result<(), crate::store::StoreError> {
        let spare = self.planner.lock().unwrap().take_peer_spare(vee_id);
        if let Some(s) = spare {
            self.persist_planner()?;
            self.release_peer_spare_of(vee_id, s.site).await;
        }
        Ok(())
    }

    /// Releases the peer spare of a VEE that ended (best effort).
    pub(crate) async fn release_peer_spare_of(&self, vee_id: &str, site: Option<String>) {
        if let Some(site) = site {
            self.settle_peer_spares(&site, &[vee_id.to_string()], false).await;
        }
    }
}

/// What Deploy and Scaling answer when no peer site holds a spare for
/// the full guarantee (each peer's reason follows).
pub const NO_SPARE: &str = "guarantee full needs spare capacity at a peer site and none holds it";

#[cfg(test)]
mod tests;
