//! Reservations and admitted services: the types, queries, release
//! (service stopped) and forgetting the past.

use serde::{Deserialize, Serialize};
use vee_manifest::{Constraint, GuaranteeLevel, MigrationPolicy};

use super::capacity::{HostIdx, Profile, Resources};
use super::request::{Placement, SpareNeed};
use super::slots::{Slot, SlotRange};
use super::{PlanError, Planner, ServiceId, VeeId};

/// Identifies a reservation: the VEE's own, or the spare protecting it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReservationKey {
    /// The VEE.
    pub vee: VeeId,
    /// `true` for the spare-capacity reservation protecting the VEE
    /// (enhanced guarantee, H §3.2.2).
    pub spare: bool,
}

/// Resources held on one host over a slot range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The VEE (for a spare: the VEE it protects).
    pub vee: VeeId,
    /// Its service.
    pub service: ServiceId,
    /// Its component.
    pub component: String,
    /// The host (see [`Planner::host_name`]).
    pub host: HostIdx,
    /// Slots `[start, end)`.
    pub range: SlotRange,
    /// Resources held in every slot of the range.
    pub resources: Resources,
    /// Background VEE: runs in gaps, may be displaced.
    pub background: bool,
    /// Spare capacity for `vee`, not the VEE itself.
    pub spare: bool,
}

impl Reservation {
    /// Its key.
    pub fn key(&self) -> ReservationKey {
        ReservationKey {
            vee: self.vee.clone(),
            spare: self.spare,
        }
    }
}

/// An admitted service as the planner keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceRecord {
    /// Service ID.
    pub id: ServiceId,
    /// The consumer (service provider) for usage SLAs.
    pub consumer: String,
    /// Guarantee level (H §3.2.2).
    pub guarantee: GuaranteeLevel,
    /// Migration policy (H §3.2.3).
    pub migration: MigrationPolicy,
    /// Reserved window.
    pub window: SlotRange,
    /// Components and their VEEs.
    pub components: Vec<ComponentRecord>,
    /// AA-constraints, as in the manifest.
    pub constraints: Vec<Constraint>,
}

/// A component of an admitted service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentRecord {
    /// Component name.
    pub name: String,
    /// Resources of each VEE.
    pub resources: Resources,
    /// Required compatibility profile, if any.
    pub profile: Option<Profile>,
    /// Its VEEs.
    pub vees: Vec<VeeId>,
}

impl ServiceRecord {
    /// The component `vee` belongs to.
    pub fn component_of(&self, vee: &str) -> Option<&ComponentRecord> {
        self.components.iter().find(|c| c.vees.iter().any(|v| v == vee))
    }
}

impl Planner {
    /// The reservation of VEE `vee`.
    pub fn reservation(&self, vee: &str) -> Option<&Reservation> {
        self.p.primaries.get(vee)
    }

    /// The local spare protecting `vee` (enhanced guarantee).
    pub fn spare(&self, vee: &str) -> Option<&Reservation> {
        self.p.spares.get(vee)
    }

    /// The peer-site spare protecting `vee` (full guarantee).
    pub fn peer_spare(&self, vee: &str) -> Option<&SpareNeed> {
        self.p.peer_spares.get(vee)
    }

    /// The reservation (or spare) with key `key`.
    pub fn get(&self, key: &ReservationKey) -> Option<&Reservation> {
        if key.spare {
            self.p.spares.get(&key.vee)
        } else {
            self.p.primaries.get(&key.vee)
        }
    }

    /// Where `vee` is placed, with the host's name.
    pub fn placement(&self, vee: &str) -> Option<Placement> {
        self.reservation(vee).map(|r| self.placement_of(r))
    }

    pub(crate) fn placement_of(&self, r: &Reservation) -> Placement {
        Placement {
            vee: r.vee.clone(),
            component: r.component.clone(),
            host: self.host_name(r.host).to_string(),
            range: r.range,
            resources: r.resources,
        }
    }

    /// Number of VEE reservations (spares not counted).
    pub fn reservation_count(&self) -> usize {
        self.p.primaries.len()
    }

    /// The admitted service `id`.
    pub fn service(&self, id: &str) -> Option<&ServiceRecord> {
        self.p.services.get(id)
    }

    /// IDs of all admitted services.
    pub fn service_ids(&self) -> impl Iterator<Item = &ServiceId> {
        self.p.services.keys()
    }

    /// Extends the window of service `id` to end at slot `end`: every
    /// reservation that ran to the old end (its VEEs', their spares', the
    /// peer spares it needs) now runs to `end` on the same host. All or
    /// nothing: errors with `Infeasible` (the VEE, its host and the first
    /// slot without room) when one host cannot hold its VEE over the
    /// added slots, changing nothing; `Invalid` when `end` is not later
    /// than the current end; `UnknownService`.
    pub fn extend_service(&mut self, id: &str, end: Slot) -> Result<SlotRange, PlanError> {
        let svc = self.p.services.get(id).ok_or_else(|| PlanError::UnknownService(id.to_string()))?;
        let old = svc.window;
        if end <= old.end {
            return Err(PlanError::Invalid(format!(
                "the window already ends at slot {}, not before {end}",
                old.end
            )));
        }
        let added = SlotRange::new(old.end, end);
        let vees: Vec<VeeId> = svc.components.iter().flat_map(|c| c.vees.iter().cloned()).collect();
        let extended: Vec<Reservation> = vees
            .iter()
            .flat_map(|v| [self.p.primaries.get(v), self.p.spares.get(v)])
            .flatten()
            .filter(|r| r.range.end == old.end)
            .cloned()
            .collect();
        // Several reservations of the service may share a host: check the
        // added slots with each one's demand added up per host.
        let mut per_host: std::collections::BTreeMap<HostIdx, Resources> = Default::default();
        for r in &extended {
            *per_host.entry(r.host).or_insert(Resources::ZERO) += r.resources;
        }
        for (h, demand) in &per_host {
            let rec = &self.p.hosts[*h as usize];
            let cap = rec.spec.capacity;
            let conflict = if rec.removed || rec.down.is_some() {
                Some(added.start)
            } else {
                self.d.usage[*h as usize].total.first_conflict(added, demand, &cap)
            };
            if let Some(slot) = conflict {
                let vee = extended.iter().find(|r| r.host == *h).map(|r| r.vee.clone()).unwrap_or_default();
                return Err(PlanError::Infeasible {
                    vee,
                    host: rec.spec.name.clone(),
                    reason: format!("no room for {demand} in slot {slot} of the extension {added}"),
                });
            }
        }
        for r in extended {
            self.remove_reservation(&r.key());
            self.insert_reservation(Reservation {
                range: SlotRange::new(r.range.start, end),
                ..r
            });
        }
        for v in &vees {
            if let Some(need) = self.p.peer_spares.get_mut(v).filter(|n| n.range.end == old.end) {
                need.range = SlotRange::new(need.range.start, end);
                self.note_change(super::keys::peer_spare_key(v));
            }
        }
        let window = SlotRange::new(old.start, end);
        if let Some(svc) = self.p.services.get_mut(id) {
            svc.window = window;
        }
        self.note_change(super::keys::service_key(id));
        Ok(window)
    }

    /// Releases every reservation of service `id` (service stopped) and
    /// forgets it. Returns its VEEs.
    pub fn release_service(&mut self, id: &str) -> Result<Vec<VeeId>, PlanError> {
        let svc = self.p.services.get(id).ok_or_else(|| PlanError::UnknownService(id.to_string()))?;
        let vees: Vec<VeeId> = svc.components.iter().flat_map(|c| c.vees.iter().cloned()).collect();
        for v in &vees {
            self.drop_reservations_of(v);
        }
        self.note_change(super::keys::service_key(id));
        self.p.services.remove(id);
        Ok(vees)
    }

    /// Releases the reservations of one VEE (its own, its spares) and drops
    /// it from its service. Errors: [`PlanError::UnknownVee`].
    pub fn release_vee(&mut self, vee: &str) -> Result<(), PlanError> {
        let service = self.service_of(vee).ok_or_else(|| PlanError::UnknownVee(vee.to_string()))?;
        self.drop_reservations_of(vee);
        self.note_change(super::keys::service_key(&service));
        if let Some(svc) = self.p.services.get_mut(&service) {
            for c in &mut svc.components {
                c.vees.retain(|v| v != vee);
            }
        }
        Ok(())
    }

    /// The service `vee` belongs to (by its reservation or, for a suspended
    /// background VEE, by the service records).
    pub fn service_of(&self, vee: &str) -> Option<ServiceId> {
        if let Some(r) = self.p.primaries.get(vee) {
            return Some(r.service.clone());
        }
        self.p
            .services
            .values()
            .find(|s| s.component_of(vee).is_some())
            .map(|s| s.id.clone())
    }

    /// Forgets `vee`'s reservations at this site when it moves to peer
    /// site `site` (a live migration, or a restore there after a failure).
    /// Its peer spare (full guarantee, H §3.2.2) stays, protecting it
    /// where it runs, unless it is at `site`: the VEE arrived into it and
    /// the peer took it (returned, for a new spare to be asked elsewhere).
    /// Errors when `vee` is unknown.
    pub fn release_vee_to_site(&mut self, vee: &str, site: &str) -> Result<Option<SpareNeed>, PlanError> {
        let spare = self.p.peer_spares.get(vee).cloned();
        self.release_vee(vee)?;
        match spare {
            Some(s) if s.site.as_deref() == Some(site) => Ok(Some(s)),
            Some(s) => {
                self.set_peer_spare(s);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// Records the peer spare `need` (its `site` set) of a VEE, replacing
    /// the one it had.
    pub fn set_peer_spare(&mut self, need: SpareNeed) {
        self.note_change(super::keys::peer_spare_key(&need.vee));
        self.p.peer_spares.insert(need.vee.clone(), need);
    }

    /// Forgets the peer spare of `vee` (a VEE abroad that ended) and
    /// returns it.
    pub fn take_peer_spare(&mut self, vee: &str) -> Option<SpareNeed> {
        let s = self.p.peer_spares.remove(vee)?;
        self.note_change(super::keys::peer_spare_key(vee));
        Some(s)
    }

    fn drop_reservations_of(&mut self, vee: &str) {
        for spare in [false, true] {
            self.remove_reservation(&ReservationKey {
                vee: vee.to_string(),
                spare,
            });
        }
        if self.p.peer_spares.remove(vee).is_some() {
            self.note_change(super::keys::peer_spare_key(vee));
        }
    }

    /// Forgets the past before slot `now`: drops every reservation that
    /// ended by `now` (returns their keys) and cuts the running ones to
    /// start at `now`, which keeps the usage maps small.
    pub fn forget_before(&mut self, now: Slot) -> Vec<ReservationKey> {
        let mut done = Vec::new();
        let mut running = Vec::new();
        for r in self.p.primaries.values().chain(self.p.spares.values()) {
            if r.range.end <= now {
                done.push(r.key());
            } else if r.range.start < now {
                running.push(r.key());
            }
        }
        done.sort();
        for k in &done {
            self.remove_reservation(k);
        }
        for k in &running {
            if let Some(mut r) = self.remove_reservation(k) {
                r.range = r.range.from_slot(now);
                self.insert_reservation(r);
            }
        }
        done
    }
}
