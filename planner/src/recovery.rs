//! Recovery placement after a host failure, and moves (H §3.5-3.6, §4;
//! DESIGN.md §6 "Recovery order").
//!
//! For every VEE running on the failed host at `now`, most valuable first
//! (H §3.5.1: P sorted by value; here: by guarantee level):
//! 1. enhanced: restart on its pre-reserved local spare, then look for a new
//!    spare;
//! 2. restart on a local host with free capacity, honouring the service's
//!    affinity / anti-affinity with its VEEs on other hosts;
//! 3. standard and above: suspend background VEEs to make room;
//! 4. full: go to the peer-site spare; standard/enhanced with
//!    `migration = "federation"`: the caller asks a peer site;
//! 5. otherwise the VEE is not recovered (legacy, background, or a policy
//!    that forbids peers): the reservation stays on the failed host so a
//!    later call can retry, and the caller records the penalty.
//!
//! Spares held on the failed host move to other hosts where possible.
//! Reservations that start later are not touched here: see
//! [`super::remap`] (VRM remapping interval).

use serde::{Deserialize, Serialize};
use vee_manifest::GuaranteeLevel;

use super::capacity::HostIdx;
use super::constraints::Filter;
use super::rank::Need;
use super::request::Placement;
use super::slots::{Slot, SlotRange};
use super::{PlanError, Planner, Reservation, ReservationKey, VeeId};

/// Where a VEE of a failed host goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecoveryTarget {
    /// Restarted on its enhanced spare's host.
    Spare {
        /// The spare's host.
        host: String,
    },
    /// Restarted on another local host.
    Host {
        /// The new host.
        host: String,
    },
    /// Goes to the spare pre-reserved at peer site `site` (full).
    PeerSpare {
        /// The peer site.
        site: String,
    },
    /// No local room; the migration policy allows a peer site: ask one.
    NeedsPeer,
    /// Not recovered; the reservation stays on the failed host.
    Unplaced {
        /// Why.
        reason: String,
    },
}

/// What happened to one VEE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryStep {
    /// The VEE.
    pub vee: VeeId,
    /// Its service.
    pub service: String,
    /// Its guarantee level.
    pub guarantee: GuaranteeLevel,
    /// Where it goes.
    pub target: RecoveryTarget,
    /// The slots it needs from now on.
    pub range: SlotRange,
    /// Background VEEs displaced for it: suspend them.
    pub preempted: Vec<VeeId>,
}

/// Outcome of [`Planner::recover_host`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// One per VEE that was running on the host, most valuable first.
    pub steps: Vec<RecoveryStep>,
    /// Spares (re)placed on other hosts.
    pub spares_moved: Vec<Placement>,
    /// VEEs whose spare could not be kept: they run without one.
    pub spares_lost: Vec<VeeId>,
}

impl Planner {
    /// Finds new hosts for the VEEs running on `host` at slot `now` (the
    /// caller marked it down with [`Planner::set_host_down`], or it is
    /// going down). See the module doc for the order.
    pub fn recover_host(&mut self, host: &str, now: Slot) -> Result<RecoveryReport, PlanError> {
        let h = self.host_idx(host)?;
        let upto = (
            now.saturating_add(1),
            ReservationKey {
                vee: String::new(),
                spare: false,
            },
        );
        let running: Vec<Reservation> = self.d.usage[h as usize]
            .res
            .range(..upto)
            .filter_map(|(_, k)| self.get(k))
            .filter(|r| r.range.end > now)
            .cloned()
            .collect();
        let mut vees: Vec<(GuaranteeLevel, Reservation)> = running
            .iter()
            .filter(|r| !r.spare)
            .map(|r| {
                (
                    self.p.services.get(&r.service).map_or(GuaranteeLevel::Background, |s| s.guarantee),
                    r.clone(),
                )
            })
            .collect();
        vees.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.vee.cmp(&b.1.vee)));
        let mut report = RecoveryReport::default();
        for (guarantee, r) in vees {
            let step = self.recover_one(&r, h, now, guarantee, &[], &mut report);
            report.steps.push(step);
        }
        for s in running.iter().filter(|r| r.spare) {
            match self.replace_spare(s, now, &[h]) {
                Some(p) => report.spares_moved.push(p),
                None => report.spares_lost.push(s.vee.clone()),
            }
        }
        Ok(report)
    }

    /// Finds a new place for `vee`, whose recovery onto the host its
    /// reservation names now failed, avoiding that host and the hosts in
    /// `exclude` (those that failed this recovery already), in the order of
    /// the module doc. Background VEEs it displaces are in the step's
    /// `preempted`.
    pub fn recover_elsewhere(&mut self, vee: &str, now: Slot, exclude: &[&str]) -> Result<RecoveryStep, PlanError> {
        let r = self
            .p
            .primaries
            .get(vee)
            .cloned()
            .ok_or_else(|| PlanError::UnknownVee(vee.to_string()))?;
        let exclude: Vec<HostIdx> = exclude.iter().filter_map(|h| self.host_idx(h).ok()).collect();
        let guarantee = self.p.services.get(&r.service).map_or(GuaranteeLevel::Background, |s| s.guarantee);
        let mut scratch = RecoveryReport::default();
        Ok(self.recover_one(&r, r.host, now, guarantee, &exclude, &mut scratch))
    }

    /// Recovery of the VEE of reservation `r` from host `failed`, never
    /// onto a host in `also_exclude`.
    fn recover_one(
        &mut self,
        r: &Reservation,
        failed: HostIdx,
        now: Slot,
        guarantee: GuaranteeLevel,
        also_exclude: &[HostIdx],
        report: &mut RecoveryReport,
    ) -> RecoveryStep {
        let range = r.range.from_slot(now);
        let mut step = RecoveryStep {
            vee: r.vee.clone(),
            service: r.service.clone(),
            guarantee,
            target: RecoveryTarget::NeedsPeer,
            range,
            preempted: Vec::new(),
        };
        let (constraints, profile, migration) = match self.p.services.get(&r.service) {
            Some(s) => (
                s.constraints.clone(),
                s.component_of(&r.vee).and_then(|c| c.profile.clone()),
                s.migration,
            ),
            None => (Vec::new(), None, vee_manifest::MigrationPolicy::None),
        };
        let others = self.others_of(&r.service, &r.vee, Some(failed));
        let others_ref: Vec<(&str, HostIdx)> = others.iter().map(|(c, h)| (c.as_str(), *h)).collect();
        let filter = Filter::build(self, &constraints, &r.component, &others_ref);

        // 1. The enhanced spare.
        if guarantee == GuaranteeLevel::Enhanced {
            if let Some(sp) = self.p.spares.get(&r.vee).cloned() {
                let rec = &self.p.hosts[sp.host as usize];
                if sp.host != failed && !also_exclude.contains(&sp.host) && rec.usable_for(range.start) && filter.allows(self, sp.host) {
                    self.remove_reservation(&sp.key());
                    self.relocate(r, sp.host, range);
                    step.target = RecoveryTarget::Spare {
                        host: self.host_name(sp.host).to_string(),
                    };
                    let primary = self.p.primaries[&r.vee].clone();
                    match self.replace_spare(
                        &Reservation {
                            spare: true,
                            host: failed,
                            ..primary
                        },
                        now,
                        &[failed, sp.host],
                    ) {
                        Some(p) => report.spares_moved.push(p),
                        None => report.spares_lost.push(r.vee.clone()),
                    }
                    return step;
                }
            }
        }

        // 2-3. Another local host; standard and above may displace background VEEs.
        let Some(profile) = self.profile_id(profile.as_ref()) else {
            step.target = RecoveryTarget::Unplaced {
                reason: "no host has its compatibility profile".into(),
            };
            return step;
        };
        let mut exclude = vec![failed];
        exclude.extend_from_slice(also_exclude);
        if let Some(sp) = self.p.spares.get(&r.vee) {
            exclude.push(sp.host);
        }
        let need = Need {
            demand: r.resources,
            range,
            profile,
            may_displace: guarantee >= GuaranteeLevel::Standard,
            filter: &filter,
            exclude: &exclude,
            cache: None,
        };
        if let Some(found) = self.find_host(&need) {
            let mut scratch = Vec::new();
            let h = self.take(found, &need, &mut scratch, &mut step.preempted);
            self.relocate(r, h, range);
            step.target = RecoveryTarget::Host {
                host: self.host_name(h).to_string(),
            };
            return step;
        }
        let why = self.explain(&need);

        // 4. A peer site.
        if guarantee == GuaranteeLevel::Full {
            if let Some(site) = self.p.peer_spares.get(&r.vee).and_then(|s| s.site.clone()) {
                self.remove_reservation(&r.key());
                step.target = RecoveryTarget::PeerSpare { site };
                return step;
            }
        }
        if guarantee >= GuaranteeLevel::Standard && migration.allows_peer_site() {
            step.target = RecoveryTarget::NeedsPeer;
            return step;
        }
        // 5. Not recovered.
        let reason = match guarantee {
            GuaranteeLevel::Background => format!("background VEE: no gap on another host ({why})"),
            GuaranteeLevel::Legacy => format!("legacy guarantee has no fault tolerance and no host has room ({why})"),
            _ => format!("no local host has room ({why}) and migration policy {migration:?} forbids peer sites"),
        };
        step.target = RecoveryTarget::Unplaced { reason };
        step
    }

    /// Moves reservation `r` (a primary) to host `to` over `range`.
    fn relocate(&mut self, r: &Reservation, to: HostIdx, range: SlotRange) {
        self.remove_reservation(&r.key());
        self.insert_reservation(Reservation {
            host: to,
            range,
            ..r.clone()
        });
    }

    /// Moves spare `s` (or places a new one for `s.vee`) over the part of
    /// its range from `now`, avoiding `exclude` and the VEE's own host, with
    /// the VEE's constraints. Drops the old spare either way.
    fn replace_spare(&mut self, s: &Reservation, now: Slot, exclude: &[HostIdx]) -> Option<Placement> {
        self.remove_reservation(&ReservationKey {
            vee: s.vee.clone(),
            spare: true,
        });
        let range = s.range.from_slot(now);
        if range.is_empty() {
            return None;
        }
        let svc = self.p.services.get(&s.service)?;
        let constraints = svc.constraints.clone();
        let profile = self.profile_id(svc.component_of(&s.vee).and_then(|c| c.profile.as_ref()))?;
        let mut exclude = exclude.to_vec();
        if let Some(p) = self.p.primaries.get(&s.vee) {
            exclude.push(p.host);
        }
        let others = self.others_of(&s.service, &s.vee, None);
        let others_ref: Vec<(&str, HostIdx)> = others.iter().map(|(c, h)| (c.as_str(), *h)).collect();
        let filter = Filter::build(self, &constraints, &s.component, &others_ref);
        let need = Need {
            demand: s.resources,
            range,
            profile,
            may_displace: false,
            filter: &filter,
            exclude: &exclude,
            cache: None,
        };
        let found = self.find_host(&need)?;
        let mut scratch = Vec::new();
        let h = self.take(found, &need, &mut scratch, &mut Vec::new());
        let spare = Reservation {
            host: h,
            range,
            spare: true,
            background: false,
            ..s.clone()
        };
        let p = self.placement_of(&spare);
        self.insert_reservation(spare);
        Some(p)
    }

    /// Moves the reservation of `vee` to host `to_host` from slot `from` on
    /// (e.g. after a live migration): the part before `from` is dropped.
    /// Checks capacity in every slot, the compatibility profile, the host's
    /// state and the service's constraints; never displaces anything. If the
    /// VEE's spare was on `to_host`, the spare is used up and a new one is
    /// sought elsewhere.
    pub fn move_vee(&mut self, vee: &str, to_host: &str, from: Slot) -> Result<Placement, PlanError> {
        self.move_vee_with(vee, to_host, from, &[])
    }

    /// [`Planner::move_vee`], the VEEs `moving` (the rest of an affinity
    /// set on its way to `to_host`) left out of the constraint check.
    pub fn move_vee_with(&mut self, vee: &str, to_host: &str, from: Slot, moving: &[VeeId]) -> Result<Placement, PlanError> {
        let r = self
            .p
            .primaries
            .get(vee)
            .cloned()
            .ok_or_else(|| PlanError::UnknownVee(vee.to_string()))?;
        let to = self.host_idx(to_host)?;
        let fail = |reason: String| PlanError::Infeasible {
            vee: vee.to_string(),
            host: to_host.to_string(),
            reason,
        };
        if to == r.host {
            return Err(fail("the VEE is on that host already".into()));
        }
        let range = r.range.from_slot(from);
        if range.is_empty() {
            return Err(fail(format!("the reservation {} ends before slot {from}", r.range)));
        }
        let rec = &self.p.hosts[to as usize];
        if !rec.usable_for(range.start) {
            return Err(fail("the host is down or removed".into()));
        }
        let svc = self
            .p
            .services
            .get(&r.service)
            .ok_or_else(|| PlanError::UnknownService(r.service.clone()))?;
        if let Some(p) = svc.component_of(vee).and_then(|c| c.profile.as_ref()) {
            if self.d.profile_ids.get(p) != Some(&rec.profile) {
                return Err(fail("the host's compatibility profile differs from the VEE's".into()));
            }
        }
        let mut but: Vec<&str> = moving.iter().map(String::as_str).collect();
        but.push(vee);
        let others = self.others_but(&r.service, &but, None);
        let others_ref: Vec<(&str, HostIdx)> = others.iter().map(|(c, h)| (c.as_str(), *h)).collect();
        if !Filter::build(self, &svc.constraints, &r.component, &others_ref).allows(self, to) {
            return Err(fail("it would break an affinity / anti-affinity constraint of the service".into()));
        }
        let spare = self.p.spares.get(vee).cloned();
        let spare_here = spare.as_ref().is_some_and(|s| s.host == to);
        if spare_here {
            self.remove_reservation(&ReservationKey {
                vee: vee.to_string(),
                spare: true,
            });
        }
        let cap = self.p.hosts[to as usize].spec.capacity;
        if let Some(slot) = self.d.usage[to as usize].total.first_conflict(range, &r.resources, &cap) {
            if let Some(s) = spare.filter(|_| spare_here) {
                self.insert_reservation(s);
            }
            return Err(fail(format!(
                "needs {} but only {} are free in slot {slot}",
                r.resources,
                cap.saturating_sub(&self.d.usage[to as usize].total.at(slot))
            )));
        }
        self.relocate(&r, to, range);
        if let Some(s) = spare.filter(|_| spare_here) {
            self.replace_spare(&Reservation { host: to, ..s }, from, &[to]);
        }
        Ok(self.placement(vee).expect("just placed"))
    }
}
