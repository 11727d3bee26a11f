//! Resizing an admitted VEE in place (issue 40, item 5; DESIGN.md §13:
//! vertical elasticity is admission too). Its reservation, and the local
//! spare protecting it under the enhanced guarantee (H §3.2.2), hold the
//! new vCPUs and memory on the same host from slot `from` to their end,
//! when every one of those slots has room for the growth (no host
//! overcommitted, no other reservation broken; H §3.4's capacity
//! condition); shrinking always fits. A VEE whose spare is held at a peer
//! site (full guarantee) does not grow: the peer holds its old size.
//! Nothing is displaced. All or nothing: a refusal changes nothing.

use super::capacity::Resources;
use super::reservations::Reservation;
use super::slots::{Slot, SlotRange};
use super::{PlanError, Planner};

impl Planner {
    /// Resizes VEE `vee` to `vcpus` vCPUs and `memory_mib` MiB from slot
    /// `from` on (see the module documentation); returns its resources
    /// before. Errors: [`PlanError::UnknownVee`] (no reservation here);
    /// [`PlanError::Infeasible`] naming the host and the first slot
    /// without room for the growth (its own or its spare's), or the peer
    /// spare; [`PlanError::Invalid`] for zero vCPUs or memory, or a
    /// reservation that ends by `from`.
    pub fn resize_vee(&mut self, vee: &str, vcpus: u32, memory_mib: u64, from: Slot) -> Result<Resources, PlanError> {
        if vcpus == 0 || memory_mib == 0 {
            return Err(PlanError::Invalid(format!(
                "{vcpus} vCPUs and {memory_mib} MiB: both must be at least 1"
            )));
        }
        let own = self
            .p
            .primaries
            .get(vee)
            .cloned()
            .ok_or_else(|| PlanError::UnknownVee(vee.to_string()))?;
        let new = Resources::new(vcpus, memory_mib, own.resources.disk_gib);
        let growth = new.saturating_sub(&own.resources);
        if !growth.is_zero() && self.p.peer_spares.contains_key(vee) {
            return Err(PlanError::Infeasible {
                vee: vee.to_string(),
                host: self.p.hosts[own.host as usize].spec.name.clone(),
                reason: "its spare held at a peer site (full guarantee) is of its present size".into(),
            });
        }
        let resized: Vec<(Reservation, SlotRange)> = [Some(own.clone()), self.p.spares.get(vee).cloned()]
            .into_iter()
            .flatten()
            .map(|r| {
                let range = SlotRange::new(r.range.start.max(from).min(r.range.end), r.range.end);
                (r, range)
            })
            .collect();
        if resized[0].1.is_empty() {
            return Err(PlanError::Invalid(format!(
                "the reservation of VEE {vee} ends at slot {}, not after slot {from}",
                own.range.end
            )));
        }
        if !growth.is_zero() {
            for (r, range) in &resized {
                let rec = &self.p.hosts[r.host as usize];
                let conflict = if rec.removed || rec.down.is_some() {
                    Some(range.start)
                } else {
                    self.d.usage[r.host as usize]
                        .total
                        .first_conflict(*range, &growth, &rec.spec.capacity)
                };
                if let Some(slot) = conflict {
                    let what = if r.spare { "its spare" } else { "it" };
                    return Err(PlanError::Infeasible {
                        vee: vee.to_string(),
                        host: rec.spec.name.clone(),
                        reason: format!("no room for {growth} more for {what} in slot {slot}"),
                    });
                }
            }
        }
        for (r, range) in resized.into_iter().filter(|(_, range)| !range.is_empty()) {
            self.remove_reservation(&r.key());
            self.insert_reservation(Reservation {
                range,
                resources: new,
                ..r
            });
        }
        Ok(own.resources)
    }
}
