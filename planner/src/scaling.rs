//! Scaling an admitted service out (issue 40; DESIGN.md §13: scaling is
//! admission). New instances of a component are placed as a Deploy
//! places a service's VEEs (H §3.4): every slot from now to the end of the
//! service's window on one host, no host overcommitted, no earlier
//! reservation broken (background ones displaced for a VEE that is not
//! background itself), the service's AA-constraints (E PIII §II-III)
//! honoured against the instances already placed as well as the new ones,
//! the component's pinned compatibility profile, an equal spare on another
//! host for the enhanced guarantee, and the consumer's usage SLA (D §3.3).
//! All or nothing, as a plan ([`super::plan`]): nothing is reserved until
//! the caller applies it, and a planner changed meanwhile refuses it as
//! [`super::Stale`].
//!
//! Scaling in is [`Planner::release_vee`] of each instance that goes.
//!
//! The full guarantee's spares at a peer site are the caller's to
//! arrange: a full-guarantee service answers
//! [`Admission::NeedsPeerSpare`] for the new instances until the caller
//! names the peer site that holds them.

use vee_manifest::GuaranteeLevel;

use super::admission::{Step, Undo};
use super::capacity::HostIdx;
use super::constraints::Filter;
use super::plan::AdmissionPlan;
use super::rank::{Need, WindowCache};
use super::request::{Admission, Admitted, PeerSpare, SpareNeed};
use super::slots::{Slot, SlotRange};
use super::{Planner, Reservation, VeeId};

/// Rejected, for `reasons`.
fn rejected(reasons: Vec<String>) -> Box<Admission> {
    Box::new(Admission::Rejected {
        reasons,
        remote: Vec::new(),
    })
}

impl Planner {
    /// Plans `vees` (new VEE IDs) as more instances of component
    /// `component` of admitted service `id`, each reserved from slot `from`
    /// (not before the service's window) to the end of its window; for a
    /// full-guarantee service with the peer spares `peer_spare` names. An
    /// acceptance comes as a plan to apply ([`Planner::apply`]), which
    /// also records the VEEs in the service's component; any other answer
    /// as `Err`: [`Admission::Rejected`] naming the field or the VEE and
    /// the reason (an unknown service or component, an ID in use, no host
    /// for an instance with why, the usage SLA), or
    /// [`Admission::NeedsPeerSpare`]. Reserves nothing.
    pub fn plan_scale_out(
        &self,
        id: &str,
        component: &str,
        vees: &[VeeId],
        from: Slot,
        peer_spare: &PeerSpare,
    ) -> Result<AdmissionPlan, Box<Admission>> {
        let revision = self.d.revision;
        // Tried on a snapshot, never on this planner.
        let answer = self.snapshot().try_scale_out(id, component, vees, from, peer_spare);
        answer.map(|(admitted, steps)| {
            let reads = self.reads_of(&steps, &admitted.service);
            AdmissionPlan::new(admitted, revision, steps, reads)
        })
    }

    fn try_scale_out(
        &mut self,
        id: &str,
        component: &str,
        vees: &[VeeId],
        from: Slot,
        peer_spare: &PeerSpare,
    ) -> Result<(Admitted, Vec<Step>), Box<Admission>> {
        let Some(svc) = self.p.services.get(id).cloned() else {
            return Err(rejected(vec![format!("service {id:?} is not admitted here")]));
        };
        let Some(ci) = svc.components.iter().position(|c| c.name == component) else {
            return Err(rejected(vec![format!("service {id:?} has no component {component:?}")]));
        };
        let comp = svc.components[ci].clone();
        let range = SlotRange::new(from.max(svc.window.start), svc.window.end);
        let mut reasons = Vec::new();
        if vees.is_empty() {
            reasons.push("no VEE to add".to_string());
        }
        if range.is_empty() {
            reasons.push(format!("the service's window {} has ended", svc.window));
        }
        for (i, v) in vees.iter().enumerate() {
            if self.p.primaries.contains_key(v) || svc.component_of(v).is_some() || vees[..i].contains(v) {
                reasons.push(format!("VEE ID {v:?} is not unique"));
            }
        }
        if !reasons.is_empty() {
            return Err(rejected(reasons));
        }
        if svc.guarantee == GuaranteeLevel::Full && *peer_spare == PeerSpare::NoneOffered {
            return Err(rejected(vec![
                "full guarantee needs spare capacity at a peer site for each new instance (H §3.2.2), and no peer site offers it".into(),
            ]));
        }
        let demand = comp.resources.times(vees.len() as u64);
        if let Err(reason) = self.check_usage_limit_of(&svc.consumer, range, &demand) {
            return Err(rejected(vec![reason]));
        }
        let Some(profile) = self.profile_id(comp.profile.as_ref()) else {
            return Err(rejected(vec![format!(
                "component {component}: no host has its compatibility profile"
            )]));
        };
        let mut undo = vec![Undo::ServiceWas(svc.clone())];
        let mut grown = svc.clone();
        grown.components[ci].vees.extend(vees.iter().cloned());
        self.note_change(super::keys::service_key(id));
        self.p.services.insert(id.to_string(), grown);
        let background = svc.guarantee == GuaranteeLevel::Background;
        // Where the service's VEEs are: those already placed, then each new one.
        let mut placed: Vec<(String, HostIdx)> = svc
            .components
            .iter()
            .flat_map(|c| c.vees.iter().map(move |v| (c.name.clone(), v)))
            .filter_map(|(c, v)| self.p.primaries.get(v).map(|r| (c, r.host)))
            .collect();
        let cache = WindowCache::new(range);
        let (mut placements, mut spares, mut preempted) = (Vec::new(), Vec::new(), Vec::new());
        let mut new_hosts = Vec::new();
        for (n, vee) in vees.iter().enumerate() {
            let others: Vec<(&str, HostIdx)> = placed.iter().map(|(c, h)| (c.as_str(), *h)).collect();
            let filter = Filter::build(self, &svc.constraints, component, &others);
            let need = Need {
                demand: comp.resources,
                range,
                profile,
                may_displace: !background,
                filter: &filter,
                exclude: &[],
                cache: Some(&cache),
            };
            let template = Reservation {
                vee: vee.clone(),
                service: id.to_string(),
                component: component.to_string(),
                host: 0,
                range,
                resources: comp.resources,
                background,
                spare: false,
            };
            let Some((h, placement)) = self.reserve(&need, template, &cache, &mut undo, &mut preempted) else {
                let why = self.explain(&need);
                self.rollback(undo);
                return Err(rejected(vec![format!(
                    "component {component}: new instance {} of {}: no host can take it: {why}",
                    n + 1,
                    vees.len()
                )]));
            };
            placements.push(placement);
            placed.push((component.to_string(), h));
            new_hosts.push(h);
        }
        if svc.guarantee == GuaranteeLevel::Enhanced {
            let first_new = placed.len() - vees.len();
            for (k, vee) in vees.iter().enumerate() {
                let at = first_new + k;
                let others: Vec<(&str, HostIdx)> = placed
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != at)
                    .map(|(_, (c, h))| (c.as_str(), *h))
                    .collect();
                let filter = Filter::build(self, &svc.constraints, component, &others);
                let exclude = [new_hosts[k]];
                let need = Need {
                    demand: comp.resources,
                    range,
                    profile,
                    may_displace: true,
                    filter: &filter,
                    exclude: &exclude,
                    cache: Some(&cache),
                };
                let template = Reservation {
                    vee: vee.clone(),
                    service: id.to_string(),
                    component: component.to_string(),
                    host: 0,
                    range,
                    resources: comp.resources,
                    background: false,
                    spare: true,
                };
                let Some((_, placement)) = self.reserve(&need, template, &cache, &mut undo, &mut preempted) else {
                    let why = self.explain(&need);
                    self.rollback(undo);
                    return Err(rejected(vec![format!(
                        "component {component}: new instance {} of {}: no spare capacity on another host for the enhanced guarantee: {why}",
                        k + 1,
                        vees.len()
                    )]));
                };
                spares.push(placement);
            }
        }
        let peer_spares: Vec<SpareNeed> = if svc.guarantee == GuaranteeLevel::Full {
            let site = match peer_spare {
                PeerSpare::Offered { site } => Some(site.clone()),
                _ => None,
            };
            let needs: Vec<SpareNeed> = placements
                .iter()
                .map(|p| SpareNeed {
                    vee: p.vee.clone(),
                    component: p.component.clone(),
                    resources: p.resources,
                    range: p.range,
                    profile: comp.profile.clone(),
                    site: site.clone(),
                })
                .collect();
            if site.is_none() {
                self.rollback(undo);
                return Err(Box::new(Admission::NeedsPeerSpare { spares: needs }));
            }
            needs
        } else {
            Vec::new()
        };
        let admitted = Admitted {
            service: id.to_string(),
            window: range,
            placements,
            spares,
            peer_spares,
            preempted,
        };
        let steps = self.steps_of(&undo, &admitted.peer_spares);
        self.rollback(undo);
        Ok((admitted, steps))
    }
}
