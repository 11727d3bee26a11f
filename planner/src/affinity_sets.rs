//! Affinity sets move together (E PIII §II: affinity keeps the covered VEEs
//! on one host, site or region for the service's whole life, so a move of
//! one member is a move of all of them).
//!
//! An affinity set is closed under the service's affinity constraints of
//! one level: the components an affinity constraint names together with
//! the VEE's, then those named with any of them, and so on; its members
//! are every VEE of those components (type-scope affinity between two
//! types binds each instance to all the others, like instance scope).

use std::collections::BTreeSet;

use vee_manifest::{ConstraintKind, ConstraintLevel};

use super::request::Placement;
use super::slots::Slot;
use super::{PlanError, Planner, VeeId};

impl Planner {
    /// The VEEs that `level` affinity binds to `vee`, `vee` first and then
    /// in the service's order; just `[vee]` when none does (or the VEE is
    /// unknown). Only VEEs with a reservation here count.
    pub fn affinity_set(&self, vee: &str, level: ConstraintLevel) -> Vec<VeeId> {
        let alone = vec![vee.to_string()];
        let Some(svc) = self.service_of(vee).and_then(|s| self.p.services.get(&s)) else {
            return alone;
        };
        let Some(own) = svc.component_of(vee) else { return alone };
        let mut comps: BTreeSet<&str> = BTreeSet::from([own.name.as_str()]);
        loop {
            let before = comps.len();
            for c in svc
                .constraints
                .iter()
                .filter(|c| c.kind == ConstraintKind::Affinity && c.level == level)
            {
                if c.components.iter().any(|n| comps.contains(n.as_str())) {
                    comps.extend(c.components.iter().map(String::as_str));
                }
            }
            if comps.len() == before {
                break;
            }
        }
        let bound = svc
            .constraints
            .iter()
            .any(|c| c.kind == ConstraintKind::Affinity && c.level == level && c.components.iter().any(|n| n == &own.name));
        if !bound {
            return alone;
        }
        let others = svc
            .components
            .iter()
            .filter(|c| comps.contains(c.name.as_str()))
            .flat_map(|c| c.vees.iter())
            .filter(|v| v.as_str() != vee && self.p.primaries.contains_key(v.as_str()))
            .cloned();
        alone.into_iter().chain(others).collect()
    }

    /// Moves every VEE of `set` (an [`Planner::affinity_set`]) to host
    /// `to_host` from slot `from` on, each as [`Planner::move_vee`] checks
    /// it, with the members still to move left out of the constraint check
    /// (so that the set may leave a host it shares). Members already on
    /// `to_host` stay. All or nothing: on an error (the first member's
    /// reason) nothing moved. Returns the new placements of those moved.
    pub fn move_set(&mut self, set: &[VeeId], to_host: &str, from: Slot) -> Result<Vec<Placement>, PlanError> {
        let to = self.host_idx(to_host)?;
        let mut trial = self.clone();
        let mut placed = Vec::new();
        for (i, v) in set.iter().enumerate() {
            if trial.p.primaries.get(v).is_some_and(|r| r.host == to) {
                continue;
            }
            placed.push(trial.move_vee_with(v, to_host, from, &set[i + 1..])?);
        }
        *self = trial;
        Ok(placed)
    }
}

#[cfg(test)]
mod tests {
    use vee_manifest::{Constraint, ConstraintScope, GuaranteeLevel};

    use super::super::tests::{accepted, anti, planner, request, res};
    use super::super::{RankPolicy, SlotRange};
    use super::*;

    /// `app` (2) and `cache` (1) bound by host affinity, and a lone `log`,
    /// admitted on h0 of hosts of `mib` MiB.
    fn bound(mib: u64) -> Planner {
        let mut p = planner(2, mib, RankPolicy::Packing);
        let mut r = request(
            "s",
            GuaranteeLevel::Standard,
            SlotRange::new(0, 100),
            &[("app", 2, res(1, 256)), ("cache", 1, res(1, 256)), ("log", 1, res(1, 128))],
        );
        r.constraints = vec![Constraint {
            kind: ConstraintKind::Affinity,
            ..anti(ConstraintLevel::Host, ConstraintScope::Type, &["app", "cache"])
        }];
        accepted(p.admit(&r));
        p
    }

    #[test]
    fn a_member_alone_cannot_leave_but_its_set_moves_together() {
        let mut p = bound(1024);
        let set = p.affinity_set("s-cache-0", ConstraintLevel::Host);
        assert_eq!(set, ["s-cache-0", "s-app-0", "s-app-1"]);
        assert_eq!(p.affinity_set("s-log-0", ConstraintLevel::Host), ["s-log-0"]);
        assert_eq!(p.affinity_set("s-cache-0", ConstraintLevel::Site), ["s-cache-0"]);
        let e = p.clone().move_vee("s-cache-0", "h1", 10).unwrap_err();
        assert!(e.to_string().contains("affinity"), "{e}");
        let moved = p.move_set(&set, "h1", 10).unwrap();
        assert_eq!(moved.len(), 3);
        for v in &set {
            assert_eq!(p.placement(v).unwrap().host, "h1", "{v}");
            assert_eq!(p.placement(v).unwrap().range, SlotRange::new(10, 100));
        }
        assert_eq!(p.placement("s-log-0").unwrap().host, "h0", "not in the set");
    }

    #[test]
    fn a_set_that_does_not_fit_whole_moves_not_at_all() {
        // h1 has 700 MiB: two of the three 256 MiB members fit, not all.
        let mut p = bound(1024);
        p.remove_host("h1").ok();
        p.add_host(crate::HostSpec::new("h2", crate::Resources::new(4, 700, 100), "s1", "r1"))
            .unwrap();
        let before = p.clone();
        let set = p.affinity_set("s-app-0", ConstraintLevel::Host);
        let e = p.move_set(&set, "h2", 10).unwrap_err();
        assert!(e.to_string().contains("free"), "{e}");
        for v in &set {
            assert_eq!(p.placement(v), before.placement(v), "{v} did not move");
        }
    }
}
