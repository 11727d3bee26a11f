//! Host choice: filter, then rank (DESIGN.md §6; OpenNebula's match-making
//! scheduler with its rank policies is the reference).
//!
//! - [`RankPolicy::Packing`]: fewest hosts, the most loaded host that fits
//!   first (OpenNebula "packing": `RANK = RUNNING_VMS`);
//! - [`RankPolicy::Striping`]: spread, the least loaded host first
//!   (`RANK = -RUNNING_VMS`);
//! - [`RankPolicy::LoadAware`]: the host with the lowest measured load first
//!   (`RANK = FREE_CPU`), the load fed in by the caller; among hosts of equal
//!   load (e.g. between two measurements) the one with the least reserved.
//!
//! Speed: a host index orders the hosts of each compatibility profile by
//! the memory left free at their peak reservation. A host whose peak leaves
//! room fits any window without looking at its slots, so packing and
//! striping usually take the first eligible host from the index
//! (O(log hosts)). Only when no host fits at its peak are the hosts
//! checked slot by slot over the window, and only then are background VEEs
//! considered for displacement.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::capacity::{HostIdx, Resources};
use super::constraints::Filter;
use super::slots::SlotRange;
use super::Planner;

/// How many hosts that do not fit at their peak packing checks slot by
/// slot before it opens a host that does.
const PACKING_PROBE: usize = 16;

/// How hosts that pass the filter are ranked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RankPolicy {
    /// Most loaded host first: use as few hosts as possible.
    #[default]
    Packing,
    /// Least loaded host first: spread VEEs over hosts.
    Striping,
    /// Lowest measured load first (see [`Planner::set_measured_load`]).
    LoadAware,
}

/// Hosts ordered for ranking; derived state, rebuilt on load.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostIndex {
    /// Per profile: (free memory MiB at the host's peak, host).
    by_free: HashMap<u32, BTreeSet<(u64, HostIdx)>>,
    free_key: Vec<Option<(u32, u64)>>,
    /// (measured load as ordered bits, `u64::MAX` - free MiB at peak, host):
    /// lowest load first, and among equal loads the emptiest host first.
    by_load: BTreeSet<(u64, u64, HostIdx)>,
    load_key: Vec<Option<(u64, u64)>>,
}

impl PartialEq for HostIndex {
    /// The orderings, not the bookkeeping of keys.
    fn eq(&self, other: &Self) -> bool {
        self.by_free == other.by_free && self.by_load == other.by_load
    }
}

impl HostIndex {
    pub(crate) fn set(&mut self, h: HostIdx, profile: u32, free_mem: u64, load: f64) {
        self.remove(h);
        let i = h as usize;
        if self.free_key.len() <= i {
            self.free_key.resize(i + 1, None);
            self.load_key.resize(i + 1, None);
        }
        self.by_free.entry(profile).or_default().insert((free_mem, h));
        self.free_key[i] = Some((profile, free_mem));
        // Non-negative finite floats order like their bit patterns.
        let load = load.max(0.0).to_bits();
        let less_free = u64::MAX - free_mem;
        self.by_load.insert((load, less_free, h));
        self.load_key[i] = Some((load, less_free));
    }

    pub(crate) fn remove(&mut self, h: HostIdx) {
        let i = h as usize;
        if let Some((p, k)) = self.free_key.get_mut(i).and_then(Option::take) {
            if let Some(set) = self.by_free.get_mut(&p) {
                set.remove(&(k, h));
                if set.is_empty() {
                    self.by_free.remove(&p);
                }
            }
        }
        if let Some((load, less_free)) = self.load_key.get_mut(i).and_then(Option::take) {
            self.by_load.remove(&(load, less_free, h));
        }
    }
}

/// Per-host maximum usage over one window, computed on first use. All VEEs
/// of one admission share the window, so each host's slots are walked once
/// per admission attempt, not once per VEE. (The component-wise maximum is
/// an exact test: `demand` fits in every slot iff it fits on top of the
/// maximum, since each dimension's maximum is reached in some slot.)
#[derive(Debug)]
pub(crate) struct WindowCache {
    range: SlotRange,
    /// By host, only the hosts looked at (an admission looks at a few of
    /// thousands: a table of every host cost more to allocate and zero
    /// than the lookups it saved).
    total: RefCell<HashMap<HostIdx, Resources>>,
    firm: RefCell<HashMap<HostIdx, Resources>>,
}

impl WindowCache {
    pub(crate) fn new(range: SlotRange) -> Self {
        WindowCache {
            range,
            total: RefCell::default(),
            firm: RefCell::default(),
        }
    }

    /// Forgets host `h` (its reservations changed).
    pub(crate) fn invalidate(&self, h: HostIdx) {
        for cell in [&self.total, &self.firm] {
            cell.borrow_mut().remove(&h);
        }
    }
}

/// What one VEE (or spare) needs from a host.
pub(crate) struct Need<'a> {
    pub demand: Resources,
    pub range: SlotRange,
    /// Interned profile the host must have; `None`: any.
    pub profile: Option<u32>,
    /// Whether background reservations may be displaced to make room.
    pub may_displace: bool,
    /// Affinity / anti-affinity.
    pub filter: &'a Filter,
    /// Hosts that must not be used (e.g. the primary's host for a spare).
    pub exclude: &'a [HostIdx],
    /// Window maxima shared by the VEEs of one attempt.
    pub cache: Option<&'a WindowCache>,
}

/// A host choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// Fits in free capacity.
    Free(HostIdx),
    /// Fits once background reservations on it are displaced.
    Displacing(HostIdx),
}

impl Planner {
    /// Static filter: host usable over the range, profile, exclusions,
    /// capacity large enough, constraints.
    pub(crate) fn eligible(&self, h: HostIdx, need: &Need) -> bool {
        let rec = &self.p.hosts[h as usize];
        rec.usable_for(need.range.start)
            && need.profile.filter(|p| *p != rec.profile).is_none()
            && !need.exclude.contains(&h)
            && need.demand.fits_in(&rec.spec.capacity)
            && need.filter.allows(self, h)
    }

    /// Whether `need` fits on `h` even in its busiest slot.
    fn fits_at_peak(&self, h: HostIdx, need: &Need) -> bool {
        (self.d.peaks[h as usize] + need.demand).fits_in(&self.p.hosts[h as usize].spec.capacity)
    }

    /// Maximum usage of `h` over the need's window (firm: without
    /// background VEEs), from the cache when there is one.
    fn window_max(&self, h: HostIdx, need: &Need, firm: bool) -> Resources {
        let u = &self.d.usage[h as usize];
        let map = if firm { &u.firm } else { &u.total };
        let Some(cache) = need.cache.filter(|c| c.range == need.range) else {
            return map.max_in(need.range);
        };
        let cell = if firm { &cache.firm } else { &cache.total };
        if let Some(v) = cell.borrow().get(&h).copied() {
            return v;
        }
        let v = map.max_in(need.range);
        cell.borrow_mut().insert(h, v);
        v
    }

    /// Whether `need` fits on `h` in free capacity in every slot.
    fn fits_free(&self, h: HostIdx, need: &Need) -> bool {
        self.fits_at_peak(h, need) || (self.window_max(h, need, false) + need.demand).fits_in(&self.p.hosts[h as usize].spec.capacity)
    }

    /// Whether `need` fits on `h` if all background VEEs were displaced.
    fn fits_firm(&self, h: HostIdx, need: &Need) -> bool {
        (self.window_max(h, need, true) + need.demand).fits_in(&self.p.hosts[h as usize].spec.capacity)
    }

    /// Memory (MiB) left free on `h` over the window after placing `need`.
    fn free_after(&self, h: HostIdx, need: &Need) -> u64 {
        let used = self.window_max(h, need, false).memory_mib + need.demand.memory_mib;
        self.p.hosts[h as usize].spec.capacity.memory_mib.saturating_sub(used)
    }

    /// Chooses a host for `need` by the rank policy; `None` if no host can
    /// take it even after displacing background VEEs (when allowed).
    pub(crate) fn find_host(&self, need: &Need) -> Option<Found> {
        if need.filter.impossible() {
            return None;
        }
        if let Some(h) = need.filter.pinned_host() {
            if !self.eligible(h, need) {
                return None;
            }
            if self.fits_free(h, need) {
                return Some(Found::Free(h));
            }
            return (need.may_displace && self.fits_firm(h, need)).then_some(Found::Displacing(h));
        }
        let free = match self.p.config.rank {
            RankPolicy::LoadAware => {
                // First hosts that fit at their peak (no slot to look at),
                // then slot by slot, both in load order.
                let in_order = || self.d.index.by_load.iter().map(|(_, _, h)| *h);
                in_order()
                    .find(|&h| self.fits_at_peak(h, need) && self.eligible(h, need))
                    .or_else(|| in_order().find(|&h| self.eligible(h, need) && self.fits_free(h, need)))
            }
            RankPolicy::Packing => self
                .packing_probe(need)
                .or_else(|| self.fast_path(need, RankPolicy::Packing))
                .or_else(|| self.slow_path(need, RankPolicy::Packing)),
            RankPolicy::Striping => self
                .fast_path(need, RankPolicy::Striping)
                .or_else(|| self.slow_path(need, RankPolicy::Striping)),
        };
        if let Some(h) = free {
            return Some(Found::Free(h));
        }
        if need.may_displace {
            return self.displacement_path(need).map(Found::Displacing);
        }
        None
    }

    /// Packing: before opening a host that fits at its peak, try the few
    /// fuller hosts nearest to fitting at their peak, slot by slot: their
    /// peak may lie outside the window (a host busy only earlier or later
    /// is still the better pack).
    fn packing_probe(&self, need: &Need) -> Option<HostIdx> {
        let sets: Vec<&BTreeSet<(u64, HostIdx)>> = match need.profile {
            Some(p) => self.d.index.by_free.get(&p).into_iter().collect(),
            None => self.d.index.by_free.values().collect(),
        };
        sets.into_iter().find_map(|set| {
            set.range(..(need.demand.memory_mib, 0))
                .rev()
                .take(PACKING_PROBE)
                .map(|(_, h)| *h)
                .find(|h| self.eligible(*h, need) && self.fits_free(*h, need))
        })
    }

    /// Hosts whose peak leaves room: no slot needs to be looked at.
    fn fast_path(&self, need: &Need, policy: RankPolicy) -> Option<HostIdx> {
        let mem = need.demand.memory_mib;
        let ok = |h: HostIdx| self.fits_at_peak(h, need) && self.eligible(h, need);
        let mut best: Option<(u64, HostIdx)> = None;
        let sets: Vec<&BTreeSet<(u64, HostIdx)>> = match need.profile {
            Some(p) => self.d.index.by_free.get(&p).into_iter().collect(),
            None => self.d.index.by_free.values().collect(),
        };
        for set in sets {
            let mut range = set.range((mem, 0)..);
            let cand = match policy {
                RankPolicy::Striping => range.rev().find(|(_, h)| ok(*h)),
                _ => range.find(|(_, h)| ok(*h)),
            };
            if let Some(&(k, h)) = cand {
                let better = match (best, policy) {
                    (None, _) => true,
                    (Some((bk, bh)), RankPolicy::Striping) => k > bk || (k == bk && h < bh),
                    (Some((bk, bh)), _) => k < bk || (k == bk && h < bh),
                };
                if better {
                    best = Some((k, h));
                }
            }
        }
        best.map(|(_, h)| h)
    }

    /// Every eligible host, slot by slot over the window.
    fn slow_path(&self, need: &Need, policy: RankPolicy) -> Option<HostIdx> {
        let mut best: Option<(u64, HostIdx)> = None;
        for h in 0..self.p.hosts.len() as HostIdx {
            if !self.eligible(h, need) || !self.fits_free(h, need) {
                continue;
            }
            let k = self.free_after(h, need);
            let better = match (best, policy) {
                (None, _) => true,
                (Some((bk, _)), RankPolicy::Striping) => k > bk,
                (Some((bk, _)), _) => k < bk,
            };
            if better {
                best = Some((k, h));
            }
        }
        best.map(|(_, h)| h)
    }

    /// Hosts where the VEE fits once background VEEs go: the one with the
    /// least background load in the window (fewest suspensions).
    fn displacement_path(&self, need: &Need) -> Option<HostIdx> {
        let mut best: Option<(u64, HostIdx)> = None;
        for h in 0..self.p.hosts.len() as HostIdx {
            if !self.eligible(h, need) || !self.fits_firm(h, need) {
                continue;
            }
            let background = self
                .window_max(h, need, false)
                .memory_mib
                .saturating_sub(self.window_max(h, need, true).memory_mib);
            if best.filter(|(b, _)| *b <= background).is_none() {
                best = Some((background, h));
            }
        }
        best.map(|(_, h)| h)
    }

    /// Why no host takes `need`: counts of hosts per reason.
    pub(crate) fn explain(&self, need: &Need) -> String {
        let (mut removed, mut down, mut profile, mut small, mut constraint, mut busy) = (0, 0, 0, 0, 0, 0);
        let mut largest = Resources::ZERO;
        for (i, rec) in self.p.hosts.iter().enumerate() {
            let h = i as HostIdx;
            if rec.removed {
                removed += 1;
            } else if !rec.usable_for(need.range.start) {
                down += 1;
            } else if need.profile.is_some_and(|p| p != rec.profile) {
                profile += 1;
            } else if !need.demand.fits_in(&rec.spec.capacity) {
                small += 1;
                largest = largest.max(&rec.spec.capacity);
            } else if need.exclude.contains(&h) || !need.filter.allows(self, h) || need.filter.impossible() {
                constraint += 1;
            } else {
                busy += 1;
            }
        }
        let mut parts = Vec::new();
        if busy > 0 {
            parts.push(format!("{busy} hosts lack free capacity in slots {}", need.range));
        }
        if constraint > 0 {
            parts.push(format!("{constraint} hosts excluded by affinity/anti-affinity"));
        }
        if small > 0 {
            parts.push(format!("{small} hosts too small (largest {largest})"));
        }
        if profile > 0 {
            parts.push(format!("{profile} hosts of another compatibility profile"));
        }
        if down > 0 {
            parts.push(format!("{down} hosts down"));
        }
        if parts.is_empty() {
            let _ = removed;
            parts.push("no hosts".into());
        }
        parts.join(", ")
    }
}
