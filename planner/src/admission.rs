//! Atomic admission of a whole service (H §3.4-3.5, Fig. 3.4; DESIGN.md §6).
//!
//! Every VEE of every component gets one host for every slot of the window,
//! or nothing is reserved: placements are applied as they are found and
//! rolled back on the first VEE that finds no host, so a rejected request
//! leaves the planner exactly as it was. No host is overcommitted in any
//! slot and no earlier reservation is broken (H Fig. 3.4 `conflict`);
//! only background reservations may be displaced, and the displaced VEEs
//! are returned for the caller to suspend.
//!
//! Guarantee levels (H §3.2.2):
//! - background: placed only in free capacity (gaps), never displaces,
//!   may itself be displaced;
//! - legacy, standard: one reservation per VEE;
//! - enhanced: plus an equal-size spare on another local host, honouring
//!   the VEE's constraints, so that recovery never needs a peer site;
//! - full: plus a spare at a peer site: the planner answers
//!   [`Admission::NeedsPeerSpare`] until the caller says which peer site
//!   offers it ([`PeerSpare::Offered`]); without one the request is rejected.
//!
//! Infeasible at the requested start: see [`super::counter_offer`].

use std::collections::HashSet;

use vee_manifest::GuaranteeLevel;

use super::capacity::{HostIdx, Profile, Resources};
use super::constraints::Filter;
use super::rank::{Found, Need, WindowCache};
use super::request::{Admission, Admitted, PeerSpare, Placement, ServiceRequest, SpareNeed};
use super::slots::SlotRange;
use super::{ComponentRecord, PlanError, Planner, Reservation, ReservationKey, ServiceId, ServiceRecord, VeeId};

/// What an evaluation keeps of an acceptance.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Everything: the admission is reserved.
    Admit,
    /// Nothing.
    Negotiate,
    /// The steps that reserve it (a plan); nothing is reserved.
    Plan,
}

/// One step of a plan (`super::plan`), in the order the admission took it:
/// a tentative admission's redo log.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// The service's record.
    Service(ServiceRecord),
    /// A reservation (a VEE's or a spare's).
    Add(Reservation),
    /// A displaced background VEE's reservation goes (as it was when
    /// planned).
    Remove(Reservation),
    /// The spare a peer site holds (full guarantee).
    PeerSpare(SpareNeed),
}

/// How to undo one step of a tentative admission.
pub(crate) enum Undo {
    Added(ReservationKey),
    Removed(Reservation),
    Service(ServiceId),
    /// A service's record replaced (scaling): the record it had.
    ServiceWas(ServiceRecord),
}

/// A tentative placement, applied to the planner, with its undo log.
pub(crate) struct Trial {
    pub(crate) placements: Vec<Placement>,
    pub(crate) spares: Vec<Placement>,
    pub(crate) preempted: Vec<VeeId>,
    pub(crate) undo: Vec<Undo>,
}

impl Planner {
    /// Admits `req` if it can be kept: reserves everything and answers
    /// [`Admission::Accepted`]; otherwise reserves nothing.
    pub fn admit(&mut self, req: &ServiceRequest) -> Admission {
        self.evaluate(req, Mode::Admit).0
    }

    /// Answers as [`Planner::admit`] would, without reserving anything:
    /// tried on a [`snapshot`](Planner::snapshot).
    pub fn negotiate(&self, req: &ServiceRequest) -> Admission {
        self.snapshot().evaluate(req, Mode::Negotiate).0
    }

    /// Answers as [`Planner::admit`] and, for an acceptance, the steps
    /// that reserve it ([`super::plan`]); reserves nothing.
    pub(crate) fn evaluate(&mut self, req: &ServiceRequest, mode: Mode) -> (Admission, Vec<Step>) {
        // Only a committed acceptance changes the planner: a negotiation, a
        // plan or a refusal tries placements and rolls them back, so it
        // leaves no changed entries to write and the revision as it was.
        let (changed, revision) = (self.d.changed.len(), self.d.revision);
        let answer = self.evaluate_once(req, mode);
        if !(mode == Mode::Admit && matches!(answer.0, Admission::Accepted(_))) {
            self.d.changed.truncate(changed);
            self.d.revision = revision;
        }
        answer
    }

    fn evaluate_once(&mut self, req: &ServiceRequest, mode: Mode) -> (Admission, Vec<Step>) {
        let answer = |a: Admission| (a, Vec::new());
        let reject = |reasons: Vec<String>| Admission::Rejected {
            reasons,
            remote: Vec::new(),
        };
        if let Err(reasons) = self.check_request(req) {
            return answer(reject(reasons));
        }
        if req.guarantee == GuaranteeLevel::Full && req.peer_spare == PeerSpare::NoneOffered {
            return answer(reject(vec![
                "full guarantee needs spare capacity at a peer site (H §3.2.2), and no peer site offers it".into(),
            ]));
        }
        if let Err(reason) = self.check_usage_limit(req, req.window) {
            return answer(reject(vec![reason]));
        }
        let trial = match self.try_place(req, req.window, true) {
            Ok(t) => t,
            Err(reasons) => return answer(self.infeasible(req, reasons)),
        };
        let peer_spares: Vec<SpareNeed> = if req.guarantee == GuaranteeLevel::Full {
            let site = match &req.peer_spare {
                PeerSpare::Offered { site } => Some(site.clone()),
                _ => None,
            };
            let needs = self.peer_spare_needs(req, &trial.placements, site.clone());
            if site.is_none() {
                self.rollback(trial.undo);
                return answer(Admission::NeedsPeerSpare { spares: needs });
            }
            needs
        } else {
            Vec::new()
        };
        let admitted = Admitted {
            service: req.service_id.clone(),
            window: req.window,
            placements: trial.placements,
            spares: trial.spares,
            peer_spares,
            preempted: trial.preempted,
        };
        let mut steps = Vec::new();
        match mode {
            Mode::Admit => {
                for s in &admitted.peer_spares {
                    self.note_change(super::keys::peer_spare_key(&s.vee));
                    self.p.peer_spares.insert(s.vee.clone(), s.clone());
                }
            }
            Mode::Negotiate => self.rollback(trial.undo),
            Mode::Plan => {
                steps = self.steps_of(&trial.undo, &admitted.peer_spares);
                self.rollback(trial.undo);
            }
        }
        (Admission::Accepted(admitted), steps)
    }

    /// Request sanity: IDs unique and new, window and VEEs not empty.
    fn check_request(&self, req: &ServiceRequest) -> Result<(), Vec<String>> {
        let mut reasons = Vec::new();
        if req.service_id.is_empty() {
            reasons.push("empty service ID".to_string());
        }
        if self.p.services.contains_key(&req.service_id) {
            reasons.push(format!("service {:?} is already admitted", req.service_id));
        }
        if req.window.is_empty() {
            reasons.push(format!("window {} is empty (or in the past)", req.window));
        }
        if req.vee_count() == 0 {
            reasons.push("the service has no VEE".to_string());
        }
        let mut names = HashSet::new();
        let mut ids = HashSet::new();
        for c in &req.components {
            if !names.insert(c.name.as_str()) {
                reasons.push(format!("component {:?} appears twice", c.name));
            }
            if c.resources.is_zero() {
                reasons.push(format!("component {}: needs no resources", c.name));
            }
            for v in &c.vees {
                if !ids.insert(v.as_str()) || self.p.primaries.contains_key(v) {
                    reasons.push(format!("VEE ID {v:?} is not unique"));
                }
            }
        }
        for (i, c) in req.constraints.iter().enumerate() {
            for n in c.components.iter().filter(|n| !names.contains(n.as_str())) {
                reasons.push(format!("constraint[{i}] names unknown component {n:?}"));
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons)
        }
    }

    /// Places every VEE (and enhanced spares) over `range`, applying as it
    /// goes; on failure rolls back and returns the reasons.
    pub(crate) fn try_place(&mut self, req: &ServiceRequest, range: SlotRange, explain: bool) -> Result<Trial, Vec<String>> {
        let mut trial = Trial {
            placements: Vec::new(),
            spares: Vec::new(),
            preempted: Vec::new(),
            undo: Vec::new(),
        };
        self.note_change(super::keys::service_key(&req.service_id));
        self.p.services.insert(req.service_id.clone(), record(req, range));
        trial.undo.push(Undo::Service(req.service_id.clone()));
        let background = req.guarantee == GuaranteeLevel::Background;
        // Largest first: fail fast, pack better.
        let mut order: Vec<(usize, usize)> = req
            .components
            .iter()
            .enumerate()
            .flat_map(|(ci, c)| (0..c.vees.len()).map(move |i| (ci, i)))
            .collect();
        order.sort_by_key(|&(ci, i)| {
            let r = req.components[ci].resources;
            (std::cmp::Reverse((r.memory_mib, r.vcpus, r.disk_gib)), ci, i)
        });
        let mut placed: Vec<(usize, usize, HostIdx)> = Vec::with_capacity(order.len());
        let cache = WindowCache::new(range);
        for &(ci, ii) in &order {
            let comp = &req.components[ci];
            let Some(profile) = self.profile_id(comp.profile.as_ref()) else {
                self.rollback(trial.undo);
                return Err(vec![format!(
                    "component {}: no host has the required compatibility profile",
                    comp.name
                )]);
            };
            let others: Vec<(&str, HostIdx)> = if req.constraints.is_empty() {
                Vec::new()
            } else {
                placed.iter().map(|&(c, _, h)| (req.components[c].name.as_str(), h)).collect()
            };
            let filter = Filter::build(self, &req.constraints, &comp.name, &others);
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
                vee: comp.vees[ii].clone(),
                service: req.service_id.clone(),
                component: comp.name.clone(),
                host: 0,
                range,
                resources: comp.resources,
                background,
                spare: false,
            };
            let Some((h, placement)) = self.reserve(&need, template, &cache, &mut trial.undo, &mut trial.preempted) else {
                let why = if explain { self.explain(&need) } else { String::new() };
                self.rollback(trial.undo);
                return Err(vec![format!("component {} instance {ii}: no host can take it: {why}", comp.name)]);
            };
            trial.placements.push(placement);
            placed.push((ci, ii, h));
        }
        self.pin_profiles(req, &placed);
        if req.guarantee == GuaranteeLevel::Enhanced {
            for (k, &(ci, ii, h)) in placed.iter().enumerate() {
                let comp = &req.components[ci];
                let pinned = self.p.services[&req.service_id].components[ci].profile.clone();
                let profile = self.profile_id(pinned.as_ref()).flatten();
                let others: Vec<(&str, HostIdx)> = placed
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != k)
                    .map(|(_, &(c, _, oh))| (req.components[c].name.as_str(), oh))
                    .collect();
                let filter = Filter::build(self, &req.constraints, &comp.name, &others);
                let exclude = [h];
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
                    vee: comp.vees[ii].clone(),
                    service: req.service_id.clone(),
                    component: comp.name.clone(),
                    host: 0,
                    range,
                    resources: comp.resources,
                    background: false,
                    spare: true,
                };
                let Some((_, placement)) = self.reserve(&need, template, &cache, &mut trial.undo, &mut trial.preempted) else {
                    let why = if explain { self.explain(&need) } else { String::new() };
                    self.rollback(trial.undo);
                    return Err(vec![format!(
                        "component {} instance {ii}: no spare capacity on another host for the enhanced guarantee: {why}",
                        comp.name
                    )]);
                };
                trial.spares.push(placement);
            }
        }
        Ok(trial)
    }

    /// Pins each component of `req` that requires no compatibility profile
    /// to the profile of the hosts its VEEs were just placed on, when they
    /// share one: from then on its VEEs are restored, moved, remapped and
    /// given spares only on hosts of that profile (a checkpoint or a live
    /// migration needs the same machine type, QEMU and CPU model; DESIGN.md
    /// §6 "filter: capacity, compatibility profile"). A component spread
    /// over several profiles stays unpinned.
    fn pin_profiles(&mut self, req: &ServiceRequest, placed: &[(usize, usize, HostIdx)]) {
        for (ci, comp) in req.components.iter().enumerate() {
            if comp.profile.is_some() {
                continue;
            }
            let mut hosts = placed.iter().filter(|(c, _, _)| *c == ci).map(|&(_, _, h)| h);
            let Some(first) = hosts.next() else { continue };
            let id = self.p.hosts[first as usize].profile;
            if hosts.all(|h| self.p.hosts[h as usize].profile == id) {
                let profile = self.p.hosts[first as usize].spec.profile.clone();
                if let Some(svc) = self.p.services.get_mut(&req.service_id) {
                    svc.components[ci].profile = Some(profile);
                }
            }
        }
    }

    /// Interned id of a required profile: `Some(None)` for no requirement,
    /// `None` when no host has the profile.
    pub(crate) fn profile_id(&self, profile: Option<&Profile>) -> Option<Option<u32>> {
        match profile {
            None => Some(None),
            Some(p) => self.d.profile_ids.get(p).map(|id| Some(*id)),
        }
    }

    /// The host of `found`, displacing background reservations if needed.
    /// Reserves `template` (a VEE's reservation or its spare, any host) on
    /// the host `need` finds, applied: the host taken (background VEEs
    /// displaced into `preempted`), the reservation inserted, both undone
    /// by `undo`. Its host and placement; `None` when no host can take it.
    pub(crate) fn reserve(
        &mut self,
        need: &Need,
        template: Reservation,
        cache: &WindowCache,
        undo: &mut Vec<Undo>,
        preempted: &mut Vec<VeeId>,
    ) -> Option<(HostIdx, Placement)> {
        let found = self.find_host(need)?;
        let h = self.take(found, need, undo, preempted);
        cache.invalidate(h);
        let r = Reservation { host: h, ..template };
        let placement = self.placement_of(&r);
        undo.push(Undo::Added(r.key()));
        self.insert_reservation(r);
        Some((h, placement))
    }

    pub(crate) fn take(&mut self, found: Found, need: &Need, undo: &mut Vec<Undo>, preempted: &mut Vec<VeeId>) -> HostIdx {
        match found {
            Found::Free(h) => h,
            Found::Displacing(h) => {
                preempted.extend(self.displace(h, need.range, &need.demand, undo));
                h
            }
        }
    }

    /// Removes background reservations on `h` overlapping `range`, largest
    /// first, until `demand` fits. The caller checked that it fits once all
    /// background reservations are gone.
    fn displace(&mut self, h: HostIdx, range: SlotRange, demand: &Resources, undo: &mut Vec<Undo>) -> Vec<VeeId> {
        let first_key = (
            range.end,
            ReservationKey {
                vee: String::new(),
                spare: false,
            },
        );
        let mut victims: Vec<Reservation> = self.d.usage[h as usize]
            .res
            .range(..first_key)
            .filter_map(|(_, k)| self.get(k))
            .filter(|r| r.background && r.range.end > range.start)
            .cloned()
            .collect();
        // Pop order: smallest last, so the largest goes first.
        victims.sort_by_key(|r| (r.resources.memory_mib, r.resources.vcpus, r.range.start));
        let cap = self.p.hosts[h as usize].spec.capacity;
        let mut out = Vec::new();
        while !self.d.usage[h as usize].total.fits(range, demand, &cap) {
            let Some(v) = victims.pop() else { break };
            if let Some(r) = self.remove_reservation(&v.key()) {
                out.push(r.vee.clone());
                undo.push(Undo::Removed(r));
            }
        }
        out
    }

    /// The steps that redo a tentative admission from its undo log
    /// (oldest first), with the peer spares it notes: what a plan applies.
    pub(crate) fn steps_of(&self, undo: &[Undo], peer_spares: &[SpareNeed]) -> Vec<Step> {
        let mut steps = Vec::with_capacity(undo.len() + peer_spares.len());
        for u in undo {
            match u {
                Undo::Service(id) => steps.extend(self.p.services.get(id).cloned().map(Step::Service)),
                Undo::ServiceWas(old) => steps.extend(self.p.services.get(&old.id).cloned().map(Step::Service)),
                Undo::Added(k) => steps.extend(self.get(k).cloned().map(Step::Add)),
                Undo::Removed(r) => steps.push(Step::Remove(r.clone())),
            }
        }
        steps.extend(peer_spares.iter().cloned().map(Step::PeerSpare));
        steps
    }

    /// Undoes a tentative admission, newest step first.
    pub(crate) fn rollback(&mut self, undo: Vec<Undo>) {
        for u in undo.into_iter().rev() {
            match u {
                Undo::Added(k) => {
                    self.remove_reservation(&k);
                }
                Undo::Removed(r) => self.insert_reservation(r),
                Undo::Service(id) => {
                    self.note_change(super::keys::service_key(&id));
                    self.p.services.remove(&id);
                }
                Undo::ServiceWas(old) => {
                    self.note_change(super::keys::service_key(&old.id));
                    self.p.services.insert(old.id.clone(), old);
                }
            }
        }
    }

    fn peer_spare_needs(&self, req: &ServiceRequest, placements: &[Placement], site: Option<String>) -> Vec<SpareNeed> {
        placements
            .iter()
            .map(|p| SpareNeed {
                vee: p.vee.clone(),
                component: p.component.clone(),
                resources: p.resources,
                range: p.range,
                profile: req
                    .components
                    .iter()
                    .find(|c| c.name == p.component)
                    .and_then(|c| c.profile.clone()),
                site: site.clone(),
            })
            .collect()
    }

    /// Takes back a placement [`Planner::resume_background`] made (the
    /// VEE could not resume there): its reservation goes, and it stays a
    /// displaced VEE of its service, to be placed again later. Errors when
    /// `vee` holds no background reservation.
    pub fn displace_background(&mut self, vee: &str) -> Result<(), PlanError> {
        let key = super::ReservationKey {
            vee: vee.to_string(),
            spare: false,
        };
        match self.get(&key) {
            Some(r) if r.background => {
                self.remove_reservation(&key);
                Ok(())
            }
            _ => Err(PlanError::Invalid(format!("VEE {vee:?} holds no background reservation"))),
        }
    }

    /// Places a suspended background VEE again, in free capacity only, on
    /// none of the hosts named in `exclude` (those that cannot read the
    /// state it resumes from). Errors: not a displaced background VEE, or
    /// no host has room (the reason explained).
    pub fn resume_background(&mut self, vee: &str, range: SlotRange, exclude: &[&str]) -> Result<Placement, PlanError> {
        if self.p.primaries.contains_key(vee) {
            return Err(PlanError::Invalid(format!("VEE {vee:?} already holds a reservation")));
        }
        let service = self.service_of(vee).ok_or_else(|| PlanError::UnknownVee(vee.to_string()))?;
        let svc = &self.p.services[&service];
        if svc.guarantee != GuaranteeLevel::Background {
            return Err(PlanError::Invalid(format!("VEE {vee:?} is not a background VEE")));
        }
        let comp = svc
            .component_of(vee)
            .cloned()
            .ok_or_else(|| PlanError::UnknownVee(vee.to_string()))?;
        let others = self.others_of(&service, vee, None);
        let others_ref: Vec<(&str, HostIdx)> = others.iter().map(|(c, h)| (c.as_str(), *h)).collect();
        let filter = Filter::build(self, &svc.constraints, &comp.name, &others_ref);
        let infeasible = |reason: String| PlanError::Infeasible {
            vee: vee.to_string(),
            host: "-".into(),
            reason,
        };
        let profile = self
            .profile_id(comp.profile.as_ref())
            .ok_or_else(|| infeasible("no host has its profile".into()))?;
        let exclude: Vec<HostIdx> = exclude.iter().filter_map(|h| self.host_idx(h).ok()).collect();
        let need = Need {
            demand: comp.resources,
            range,
            profile,
            may_displace: false,
            filter: &filter,
            exclude: &exclude,
            cache: None,
        };
        let Some(Found::Free(h)) = self.find_host(&need) else {
            return Err(infeasible(self.explain(&need)));
        };
        let r = Reservation {
            vee: vee.to_string(),
            service,
            component: comp.name.clone(),
            host: h,
            range,
            resources: comp.resources,
            background: true,
            spare: false,
        };
        let p = self.placement_of(&r);
        self.insert_reservation(r);
        Ok(p)
    }

    /// (component, host) of the placed VEEs of `service` other than
    /// `except`, skipping those on `skip_host`.
    pub(crate) fn others_of(&self, service: &str, except: &str, skip_host: Option<HostIdx>) -> Vec<(String, HostIdx)> {
        self.others_but(service, &[except], skip_host)
    }

    /// [`Planner::others_of`] other than every VEE of `except`.
    pub(crate) fn others_but(&self, service: &str, except: &[&str], skip_host: Option<HostIdx>) -> Vec<(String, HostIdx)> {
        let Some(svc) = self.p.services.get(service) else {
            return Vec::new();
        };
        if svc.constraints.is_empty() {
            return Vec::new();
        }
        svc.components
            .iter()
            .flat_map(|c| c.vees.iter())
            .filter(|v| !except.contains(&v.as_str()))
            .filter_map(|v| self.p.primaries.get(v))
            .filter(|r| Some(r.host) != skip_host)
            .map(|r| (r.component.clone(), r.host))
            .collect()
    }
}

fn record(req: &ServiceRequest, window: SlotRange) -> ServiceRecord {
    ServiceRecord {
        id: req.service_id.clone(),
        consumer: req.consumer.clone(),
        guarantee: req.guarantee,
        migration: req.migration,
        window,
        components: req
            .components
            .iter()
            .map(|c| ComponentRecord {
                name: c.name.clone(),
                resources: c.resources,
                profile: c.profile.clone(),
                vees: c.vees.clone(),
            })
            .collect(),
        constraints: req.constraints.clone(),
    }
}
