//! Counter-offers (H §3.4; DESIGN.md §3 Negotiate): when a service does
//! not fit at the requested start, reject it if it can never fit (too large
//! for any host, more anti-affinity instances than hosts), else search
//! forward for the earliest feasible start.
//!
//! Only slots where some usage drops can turn an infeasible window
//! feasible: the end of a reservation, or the end of a down host's block.
//! The search jumps to the first such slot at or after a cheap lower bound
//! (the whole service must fit in the site's free capacity, each component
//! on some host) and tries a full placement there, up to
//! `counter_offer_max_tries` times within `counter_offer_horizon_slots`.

use vee_manifest::GuaranteeLevel;

use super::capacity::Resources;
use super::request::{Admission, ServiceRequest};
use super::slots::Slot;
use super::Planner;

impl Planner {
    /// Infeasible at the requested start: reject when it can never fit,
    /// else look for the earliest feasible start.
    pub(crate) fn infeasible(&mut self, req: &ServiceRequest, mut reasons: Vec<String>) -> Admission {
        let mut fatal = self.size_shortfalls(req);
        let (more, remote) = self.constraint_shortfalls(req);
        fatal.extend(more);
        if !fatal.is_empty() {
            return Admission::Rejected { reasons: fatal, remote };
        }
        let start = req.window.start;
        let limit = start.saturating_add(self.p.config.counter_offer_horizon_slots);
        let tries = self.p.config.counter_offer_max_tries;
        // Feasibility can only appear where some usage drops: at the end of
        // a reservation, or where a down host's block ends. Jump to the
        // first such slot at or after the earliest start at which every
        // component fits on some host by itself (a lower bound).
        let mut from = start.saturating_add(1);
        for _ in 0..tries {
            let Some(bound) = self.earliest_start_bound(req, from, limit) else {
                break;
            };
            let end = self.d.ends.range(bound..).next().map(|(s, _)| *s);
            let unblock = self
                .p
                .hosts
                .iter()
                .filter_map(|h| h.down.map(|d| d.blocked_until))
                .filter(|b| *b >= bound)
                .min();
            let Some(s) = end.into_iter().chain(unblock).min().filter(|s| *s <= limit) else {
                break;
            };
            let window = req.window.moved_to(s);
            if self.check_usage_limit(req, window).is_ok() {
                if let Ok(trial) = self.try_place(req, window, false) {
                    self.rollback(trial.undo);
                    return Admission::CounterOffer { window, reasons };
                }
            }
            from = s.saturating_add(1);
        }
        reasons.push(format!(
            "no feasible start found within {} slots after slot {start}",
            self.p.config.counter_offer_horizon_slots
        ));
        Admission::Rejected { reasons, remote }
    }

    /// A lower bound on the earliest feasible start in `[from, limit]`: the
    /// earliest start at which all VEEs together fit in the site's free
    /// capacity, pushed on by each component to the earliest start at which
    /// one of its VEEs fits on some host (ignoring constraints and the other
    /// VEEs). Firm usage only (background VEEs can be displaced; for a
    /// background request it is a looser bound). `None`: never by `limit`.
    fn earliest_start_bound(&self, req: &ServiceRequest, from: Slot, limit: Slot) -> Option<Slot> {
        let len = req.window.len();
        let background = req.guarantee == GuaranteeLevel::Background;
        // The whole service must fit in the site's free capacity: cheap,
        // and tight when the site is nearly full.
        let total = self.total_capacity();
        let mut bound = self.d.site_firm.earliest_fit(from, len, &req.total_resources(), &total, limit)?;
        for c in &req.components {
            let profile = self.profile_id(c.profile.as_ref())?;
            let mut best: Option<Slot> = None;
            for (i, rec) in self.p.hosts.iter().enumerate() {
                if rec.removed || profile.is_some_and(|p| p != rec.profile) || !c.resources.fits_in(&rec.spec.capacity) {
                    continue;
                }
                let first = bound.max(rec.down.map_or(0, |d| d.blocked_until));
                let upto = best.map_or(limit, |b| b.saturating_sub(1));
                let u = &self.d.usage[i];
                let usage = if background { &u.total } else { &u.firm };
                if let Some(t) = usage.earliest_fit(first, len, &c.resources, &rec.spec.capacity, upto) {
                    best = Some(t);
                    if t == bound {
                        break;
                    }
                }
            }
            bound = bound.max(best?);
        }
        Some(bound)
    }

    /// Components no host can ever hold (too large, missing profile).
    fn size_shortfalls(&self, req: &ServiceRequest) -> Vec<String> {
        let mut out = Vec::new();
        for c in &req.components {
            let Some(profile) = self.profile_id(c.profile.as_ref()) else {
                out.push(format!(
                    "component {}: needs compatibility profile {:?}, no host has it",
                    c.name, c.profile
                ));
                continue;
            };
            let hosts = self
                .p
                .hosts
                .iter()
                .filter(|h| !h.removed && profile.filter(|p| *p != h.profile).is_none());
            let mut largest = Resources::ZERO;
            let mut any = false;
            for h in hosts {
                any = true;
                if c.resources.fits_in(&h.spec.capacity) {
                    largest = Resources::ZERO;
                    break;
                }
                largest = largest.max(&h.spec.capacity);
            }
            if !any {
                out.push(format!("component {}: there are no hosts", c.name));
            } else if !largest.is_zero() {
                let d = c.resources;
                let mut parts = Vec::new();
                if d.memory_mib > largest.memory_mib {
                    parts.push(format!("needs {} MiB, largest host has {} MiB", d.memory_mib, largest.memory_mib));
                }
                if d.vcpus > largest.vcpus {
                    parts.push(format!("needs {} vCPUs, largest host has {}", d.vcpus, largest.vcpus));
                }
                if d.disk_gib > largest.disk_gib {
                    parts.push(format!("needs {} GiB disk, largest host has {} GiB", d.disk_gib, largest.disk_gib));
                }
                if parts.is_empty() {
                    parts.push(format!("needs {d}, no single host has all of it"));
                }
                out.push(format!("component {}: {}", c.name, parts.join("; ")));
            }
        }
        out
    }
}
