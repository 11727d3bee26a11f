//! Future reservations on a failed host: the VRM remapping interval
//! (V §4.4-4.6, Fig. 7).
//!
//! Remapping every future reservation of a failed host wastes capacity if
//! the host comes back soon; remapping none breaks reservations if it does
//! not. VRM remaps, in every slot while the host is down, only the
//! reservations that start within the remapping interval `[now, now + i]`;
//! later ones stay and are remapped when they enter the interval (or not at
//! all if the host recovers first). A reservation that finds no other host
//! stays on the failed host: the failure may be over by its start.
//!
//! The interval length i comes from the weighted combined load profile
//! `l̂(t) = l̃(t) + ζ·l*(t) + b̄(t)` (unaffected load, affected load weighted
//! by ζ >= 1, average booking profile; all normalised by the site capacity):
//! i is the last slot ahead where `l̂(t) >= η`, at least 1.

use serde::{Deserialize, Serialize};

use super::capacity::{HostIdx, Resources};
use super::constraints::Filter;
use super::rank::Need;
use super::request::Placement;
use super::slots::Slot;
use super::{PlanError, Planner, ReservationKey, VeeId};

/// Parameters of the remapping interval (V §4.6-4.7).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RemapParams {
    /// η in [0, 1]: load threshold.
    pub eta: f64,
    /// ζ >= 1: weight of the failed host's load.
    pub zeta: f64,
    /// How many slots ahead to look (t_ba in Fig. 7).
    pub lookahead_slots: u32,
}

impl Default for RemapParams {
    /// η = 0.8, ζ = 2 (V §5: best termination ratio around η ≈ 0.8 with
    /// ζ = 2), one day of one-minute slots ahead.
    fn default() -> Self {
        RemapParams {
            eta: 0.8,
            zeta: 2.0,
            lookahead_slots: 24 * 60,
        }
    }
}

/// Outcome of [`Planner::remap`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemapReport {
    /// Reservations moved to other hosts.
    pub remapped: Vec<(ReservationKey, Placement)>,
    /// Reservations in the interval that found no other host: they stay.
    pub kept: Vec<ReservationKey>,
    /// Background VEEs displaced to make room: suspend them.
    pub preempted: Vec<VeeId>,
}

impl Planner {
    /// Reservations (VEEs and spares) on `failed_host` that start within
    /// `[now, now + interval]`, by start slot: the ones VRM remaps now.
    pub fn reservations_to_remap(&self, failed_host: &str, now: Slot, interval: u32) -> Result<Vec<ReservationKey>, PlanError> {
        let h = self.host_idx(failed_host)?;
        let key = |s: Slot| {
            (
                s,
                ReservationKey {
                    vee: String::new(),
                    spare: false,
                },
            )
        };
        // V's remapping interval is closed, [t0, t0 + i]: a reservation
        // starting i slots ahead is remapped now, before it starts.
        let end = now.saturating_add(interval).saturating_add(1);
        Ok(self.d.usage[h as usize]
            .res
            .range(key(now)..key(end))
            .map(|(_, k)| k.clone())
            .collect())
    }

    /// Remaps the reservations of [`Planner::reservations_to_remap`] to
    /// other hosts, VEEs before spares, keeping their slots. Non-background
    /// VEEs may displace background ones. Call it once per slot while the
    /// host is down (with [`Planner::set_host_down`] blocking it for
    /// `interval`).
    pub fn remap(&mut self, failed_host: &str, now: Slot, interval: u32) -> Result<RemapReport, PlanError> {
        let h = self.host_idx(failed_host)?;
        let mut keys = self.reservations_to_remap(failed_host, now, interval)?;
        keys.sort_by_key(|k| k.spare);
        let mut report = RemapReport::default();
        for key in keys {
            let Some(r) = self.get(&key).cloned() else { continue };
            let Some(svc) = self.p.services.get(&r.service) else { continue };
            let constraints = svc.constraints.clone();
            let Some(profile) = self.profile_id(svc.component_of(&r.vee).and_then(|c| c.profile.as_ref())) else {
                report.kept.push(key);
                continue;
            };
            let mut exclude = vec![h];
            // A VEE and its spare never share a host.
            let partner = ReservationKey {
                vee: r.vee.clone(),
                spare: !r.spare,
            };
            if let Some(p) = self.get(&partner) {
                exclude.push(p.host);
            }
            let others = self.others_of(&r.service, &r.vee, Some(h));
            let others_ref: Vec<(&str, HostIdx)> = others.iter().map(|(c, oh)| (c.as_str(), *oh)).collect();
            let filter = Filter::build(self, &constraints, &r.component, &others_ref);
            let need = Need {
                demand: r.resources,
                range: r.range,
                profile,
                may_displace: !r.background,
                filter: &filter,
                exclude: &exclude,
                cache: None,
            };
            match self.find_host(&need) {
                Some(found) => {
                    let mut scratch = Vec::new();
                    let to = self.take(found, &need, &mut scratch, &mut report.preempted);
                    self.remove_reservation(&key);
                    let moved = super::Reservation { host: to, ..r };
                    report.remapped.push((key, self.placement_of(&moved)));
                    self.insert_reservation(moved);
                }
                None => report.kept.push(key),
            }
        }
        Ok(report)
    }

    /// `demand`'s share of the site's capacity as the remapping interval
    /// measures load: the larger of its vCPU and memory fractions (0 for a
    /// site without capacity).
    pub fn site_share(&self, demand: &Resources) -> f64 {
        let cap = self.total_capacity();
        let f = |d: f64, c: f64| if c > 0.0 { d / c } else { 0.0 };
        f(demand.memory_mib as f64, cap.memory_mib as f64).max(f(f64::from(demand.vcpus), f64::from(cap.vcpus)))
    }

    /// The remapping interval i in slots for `failed_host` at `now`
    /// (V Fig. 7): the last slot t in `1..=lookahead` where
    /// `l̂(t) = (site load - host load + ζ·host load) / site capacity + b̄(t)`
    /// reaches η; 1 if none. Load is the reserved load of VEEs and spares
    /// (background VEEs excluded: they can be postponed), the larger of
    /// the vCPU and memory fractions. `avg_booking[t-1]` is b̄(t), the
    /// average share of the site booked per slot for slot t ahead (missing
    /// entries count as 0).
    pub fn remapping_interval(&self, failed_host: &str, now: Slot, params: &RemapParams, avg_booking: &[f64]) -> Result<u32, PlanError> {
        let h = self.host_idx(failed_host)?;
        if !(params.eta.is_finite() && params.zeta.is_finite() && params.zeta >= 1.0) {
            return Err(PlanError::Invalid(format!(
                "remap parameters η={} ζ={} (need ζ >= 1)",
                params.eta, params.zeta
            )));
        }
        let cap = self.total_capacity();
        let host = &self.d.usage[h as usize].firm;
        let frac = |site: Resources, mine: Resources| {
            let f = |s: f64, m: f64, c: f64| if c > 0.0 { (s - m + params.zeta * m) / c } else { 0.0 };
            f(site.memory_mib as f64, mine.memory_mib as f64, cap.memory_mib as f64).max(f(
                f64::from(site.vcpus),
                f64::from(mine.vcpus),
                f64::from(cap.vcpus),
            ))
        };
        for t in (1..=params.lookahead_slots).rev() {
            let slot = now.saturating_add(t);
            let booked = avg_booking.get(t as usize - 1).copied().unwrap_or(0.0);
            if frac(self.d.site_firm.at(slot), host.at(slot)) + booked >= params.eta {
                return Ok(t);
            }
        }
        Ok(1)
    }
}
