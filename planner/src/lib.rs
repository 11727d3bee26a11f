//! The SLA-aware planner (DESIGN.md §6; H §3.4-3.6, V §4, D §3.3, E PIII).
//!
//! Pure logic, no I/O. Time is slotted ([`slots`]); every admitted VEE holds
//! a [`Reservation`] of resources on one host over a slot range. Admission
//! of a service is atomic: every VEE of every component gets a host for
//! every slot of the window, or nothing is reserved ([`admission`]). No host
//! is ever overcommitted in any slot, and no earlier promise is broken
//! (H Fig. 3.4 `conflict`): only background VEEs (H §3.2.2) may be
//! displaced, and the caller is told which to suspend.
//!
//! Modules, by what they hold:
//! - [`slots`]: slot clock, slot ranges, per-host usage step functions;
//! - [`capacity`]: resources, host specs, compatibility profiles;
//! - [`hosts`]: host registration, down / up, measured load, usage queries;
//! - [`reservations`]: reservations, admitted services, release;
//! - [`rank`]: host ranking policies (packing, striping, load-aware, as
//!   OpenNebula's) and the host index that keeps admission fast;
//! - [`constraints`]: affinity / anti-affinity filters (E PIII);
//! - [`request`]: service requests (from manifests) and verdicts;
//! - [`admission`]: the atomic admission and guarantee levels (spares for
//!   enhanced, peer spares for full, displacing background);
//! - [`counter_offer`]: the earliest feasible start, or why never;
//! - [`plan`]: an admission as a plan made at one revision and applied
//!   at that revision only (Nomad's plan, commit, retry);
//! - [`checkpoint_count`]: optimal checkpoint count (H eq. 3.12-3.16);
//! - [`recovery`]: new hosts for the VEEs of a failed host, moves;
//! - [`remap`]: VRM remapping interval (V Fig. 7);
//! - [`usage_limits`]: per-consumer usage SLAs (D §3.3).
//!
//! The planner is serde-serializable: only the hosts, reservations, services
//! and limits are written; usage maps and indexes are rebuilt on load.
//!
//! Its state is a value a caller takes a cheap copy of to plan on
//! ([`Planner::snapshot`]; Nomad's scheduler plans on a snapshot of the
//! state): the reservations, services and names in persistent ordered maps
//! (`imbl`'s B-trees, whose nodes two copies share until one changes them:
//! a change copies its path), each host's usage and the ranking index
//! shared copy-on-write, the site's usage (bounded by the slots of the
//! planning horizon, not by the VEEs) copied. Ordered rather than hashed:
//! a hash trie's sparse nodes held three times the memory of a hash map at
//! 100,000 reservations, the B-tree 1.4 times.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// A persistent map (`imbl::OrdMap`): cloned in O(1), its nodes shared.
type Map<K, V> = imbl::OrdMap<K, V>;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub mod admission;
pub mod affinity_sets;
pub mod booking;
pub mod capacity;
pub mod checkpoint_count;
pub mod constraints;
pub mod counter_offer;
pub mod hosts;
mod keys;
pub mod persisted;
pub mod plan;
pub mod rank;
pub mod recovery;
pub mod remap;
pub mod request;
pub mod reservations;
pub mod resize;
pub mod scaling;
pub mod slots;
pub mod usage_limits;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_plan;
#[cfg(test)]
mod tests_recovery;
#[cfg(test)]
mod tests_resize;
#[cfg(test)]
mod tests_scale;
#[cfg(test)]
mod tests_scaling;
#[cfg(test)]
mod tests_windows;

pub use booking::BookingProfile;
pub use capacity::{Down, HostIdx, HostSpec, Profile, Resources};
pub use checkpoint_count::{checkpoint_interval_s, checkpoint_plan, expected_run_time_s, optimal_checkpoints, CheckpointPlan};
pub use persisted::{PlannerEntry, PlannerHeader};
pub use plan::{AdmissionPlan, Stale};
pub use rank::RankPolicy;
pub use recovery::{RecoveryReport, RecoveryStep, RecoveryTarget};
pub use remap::{RemapParams, RemapReport};
pub use request::{Admission, Admitted, ComponentRequest, Padding, PeerSpare, Placement, RemoteNeed, ServiceRequest, SpareNeed};
pub use reservations::{ComponentRecord, Reservation, ReservationKey, ServiceRecord};
pub use slots::{Slot, SlotClock, SlotRange, UsageMap};
pub use usage_limits::{ConsumerUsage, UsageLimit, UsageSnapshot};

use capacity::HostRecord;
use rank::HostIndex;

/// ID of a VEE (assigned by the VEEM).
pub type VeeId = String;
/// ID of a service (assigned by the VEEM).
pub type ServiceId = String;

/// Errors of planner operations other than admission (admission answers
/// with an [`Admission`] verdict instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// No host of that name.
    #[error("unknown host {0:?}")]
    UnknownHost(String),
    /// A host of that name exists already.
    #[error("host {0:?} exists already")]
    DuplicateHost(String),
    /// No reservation for that VEE.
    #[error("unknown VEE {0:?}")]
    UnknownVee(String),
    /// No such service.
    #[error("unknown service {0:?}")]
    UnknownService(String),
    /// The host still holds reservations.
    #[error("host {host:?} still holds {count} reservations")]
    HostInUse {
        /// The host.
        host: String,
        /// How many reservations (VEEs and spares) it holds.
        count: usize,
    },
    /// The operation would overcommit a host or break a constraint.
    #[error("cannot place VEE {vee:?} on host {host:?}: {reason}")]
    Infeasible {
        /// The VEE.
        vee: String,
        /// The host asked for (`-` when none was).
        host: String,
        /// Why not.
        reason: String,
    },
    /// A request that makes no sense (empty window, bad parameter).
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// Planner settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannerConfig {
    /// Slot length and origin.
    pub clock: SlotClock,
    /// How hosts are ranked.
    pub rank: RankPolicy,
    /// How far after the requested start a counter-offer may start, in slots.
    pub counter_offer_horizon_slots: u32,
    /// Most candidate starts tried when looking for a counter-offer.
    pub counter_offer_max_tries: u32,
}

impl Default for PlannerConfig {
    /// 60 s slots from the Unix epoch, packing, counter-offers within 7 days,
    /// at most 64 tries.
    fn default() -> Self {
        PlannerConfig {
            clock: SlotClock::new(0, 60),
            rank: RankPolicy::Packing,
            counter_offer_horizon_slots: 7 * 24 * 60,
            counter_offer_max_tries: 64,
        }
    }
}

/// What is persisted.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Persisted {
    config: PlannerConfig,
    /// Shared with snapshots until one of them changes a host.
    hosts: Arc<Vec<HostRecord>>,
    profiles: Vec<Profile>,
    sites: Vec<String>,
    regions: Vec<String>,
    /// Primary reservations by VEE.
    primaries: Map<VeeId, Reservation>,
    /// Local spares (enhanced) by protected VEE.
    spares: Map<VeeId, Reservation>,
    /// Spares at a peer site (full) by protected VEE.
    peer_spares: Map<VeeId, SpareNeed>,
    services: Map<ServiceId, ServiceRecord>,
    usage_limits: Map<String, UsageLimit>,
    consumer_usage: Map<String, ConsumerUsage>,
}

/// Per-host usage, derived from the reservations.
#[derive(Debug, Clone, Default)]
struct HostUsage {
    /// Non-background reservations (incl. spares).
    firm: UsageMap,
    /// All reservations.
    total: UsageMap,
    /// Reservations on the host by start slot.
    res: BTreeSet<(Slot, ReservationKey)>,
}

/// Everything rebuilt from [`Persisted`] on load.
#[derive(Debug, Clone, Default)]
struct Derived {
    host_names: Map<String, HostIdx>,
    profile_ids: HashMap<Profile, u32>,
    site_ids: HashMap<String, u32>,
    region_ids: HashMap<String, u32>,
    /// By host; each shared with snapshots until one of them changes it.
    usage: imbl::Vector<Arc<HostUsage>>,
    /// By host: `usage[h].total.peak()`, kept up to date, apart from
    /// `usage` for the ranking's scans over every host.
    peaks: Arc<Vec<Resources>>,
    /// Reservation end slots with counts (counter-offer candidates).
    ends: Map<Slot, u32>,
    /// Firm usage of VEEs per consumer (usage SLAs).
    consumer_firm: Map<String, UsageMap>,
    /// Firm usage of the site (remapping interval, usage SLAs).
    site_firm: UsageMap,
    /// Shared with snapshots until one of them changes it.
    index: Arc<HostIndex>,
    /// Keys of the persisted entries changed since the last
    /// [`Planner::take_changes`], in the order of the changes (a key may
    /// repeat; see [`persisted`]).
    changed: Vec<String>,
    /// Counts the changes an admission depends on (see
    /// [`Planner::revision`]).
    revision: u64,
    /// Counts the changes of the persisted header (see
    /// [`Planner::header_revision`]).
    header_revision: u64,
}

/// The planner: hosts, reservations and services of one site.
#[derive(Debug, Clone, Default)]
pub struct Planner {
    p: Persisted,
    d: Derived,
}

impl Serialize for Planner {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.p.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Planner {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Persisted::deserialize(d).map(Planner::rebuild)
    }
}

fn intern<T: Clone + Eq + std::hash::Hash>(list: &mut Vec<T>, ids: &mut HashMap<T, u32>, v: &T) -> u32 {
    if let Some(id) = ids.get(v) {
        return *id;
    }
    let id = list.len() as u32;
    list.push(v.clone());
    ids.insert(v.clone(), id);
    id
}

impl Planner {
    /// An empty planner.
    pub fn new(config: PlannerConfig) -> Self {
        Planner {
            p: Persisted {
                config,
                ..Persisted::default()
            },
            d: Derived::default(),
        }
    }

    /// Rebuilds every derived structure from the persisted state.
    fn rebuild(p: Persisted) -> Self {
        let mut d = Derived::default();
        for (i, x) in p.profiles.iter().enumerate() {
            d.profile_ids.insert(x.clone(), i as u32);
        }
        for (i, x) in p.sites.iter().enumerate() {
            d.site_ids.insert(x.clone(), i as u32);
        }
        for (i, x) in p.regions.iter().enumerate() {
            d.region_ids.insert(x.clone(), i as u32);
        }
        d.usage = std::iter::repeat_with(Arc::default).take(p.hosts.len()).collect();
        d.peaks = Arc::new(vec![Resources::ZERO; p.hosts.len()]);
        let mut planner = Planner { p, d };
        for (i, h) in planner.p.hosts.iter().enumerate() {
            if !h.removed {
                planner.d.host_names.insert(h.spec.name.clone(), i as HostIdx);
            }
        }
        let all: Vec<Reservation> = planner.p.primaries.values().chain(planner.p.spares.values()).cloned().collect();
        for r in &all {
            planner.account(r, true);
        }
        for h in 0..planner.p.hosts.len() as HostIdx {
            planner.reindex(h);
        }
        planner
    }

    /// The planner as it is now, to plan on: its state shared with this
    /// one (persistent collections, see the module doc), so that a
    /// snapshot costs microseconds at any size (10,000 hosts and 100,000
    /// VEEs: `vee-bench planner`, `snapshot_us`), and a change to either
    /// copies only what it changes (the reservation maps' paths, the hosts
    /// changed, the ranking index once). It has no pending changes: what
    /// changes on it is never saved ([`Planner::take_changes`] answers
    /// only its own).
    pub fn snapshot(&self) -> Planner {
        let d = &self.d;
        Planner {
            p: self.p.clone(),
            d: Derived {
                host_names: d.host_names.clone(),
                profile_ids: d.profile_ids.clone(),
                site_ids: d.site_ids.clone(),
                region_ids: d.region_ids.clone(),
                usage: d.usage.clone(),
                peaks: d.peaks.clone(),
                ends: d.ends.clone(),
                consumer_firm: d.consumer_firm.clone(),
                site_firm: d.site_firm.clone(),
                index: d.index.clone(),
                changed: Vec::new(),
                revision: d.revision,
                header_revision: d.header_revision,
            },
        }
    }

    /// Settings.
    pub fn config(&self) -> &PlannerConfig {
        &self.p.config
    }

    /// The slot clock.
    pub fn clock(&self) -> SlotClock {
        self.p.config.clock
    }

    /// Changes the rank policy.
    pub fn set_rank_policy(&mut self, rank: RankPolicy) {
        if self.p.config.rank != rank {
            self.p.config.rank = rank;
            self.d.header_revision += 1;
        }
    }

    /// Moves with every change of what [`Planner::header`] holds (hosts
    /// added, removed, down or up, a measured load that changed, usage
    /// SLAs and averages, the rank policy), so that a store writes the
    /// header only when it changed, without comparing copies of it. Not
    /// persisted: it starts at 0.
    pub fn header_revision(&self) -> u64 {
        self.d.header_revision
    }

    /// The planner's revision: it moves with every change an admission
    /// depends on (reservations, services, peer spares, hosts added,
    /// removed, down or up, usage SLAs), not with measured inputs (load,
    /// consumers' averages). A plan made at this revision applies as it is;
    /// at an older one it is checked against the fresh state first
    /// ([`plan`]). Not persisted: it starts at 0.
    pub fn revision(&self) -> u64 {
        self.d.revision
    }

    // ----- primitives used by the submodules -----

    /// Notes that the entry under `key` changed (written at the next
    /// save) and moves the revision.
    pub(crate) fn note_change(&mut self, key: String) {
        self.d.changed.push(key);
        self.d.revision += 1;
    }

    /// Adds a reservation (no check: callers check first).
    pub(crate) fn insert_reservation(&mut self, r: Reservation) {
        self.account(&r, true);
        self.reindex(r.host);
        self.note_change(keys::reservation_key(&r.vee, r.spare));
        let map = if r.spare { &mut self.p.spares } else { &mut self.p.primaries };
        let old = map.insert(r.vee.clone(), r);
        debug_assert!(old.is_none(), "reservation inserted twice");
    }

    /// Removes a reservation, returning it.
    pub(crate) fn remove_reservation(&mut self, key: &ReservationKey) -> Option<Reservation> {
        let map = if key.spare { &mut self.p.spares } else { &mut self.p.primaries };
        let r = map.remove(&key.vee)?;
        self.note_change(keys::reservation_key(&key.vee, key.spare));
        self.account(&r, false);
        self.reindex(r.host);
        Some(r)
    }

    /// Adds (`add`) or removes a reservation's usage everywhere it counts.
    fn account(&mut self, r: &Reservation, add: bool) {
        let u = Arc::make_mut(&mut self.d.usage[r.host as usize]);
        let peak = &mut Arc::make_mut(&mut self.d.peaks)[r.host as usize];
        let key = (r.range.start, r.key());
        if add {
            u.total.add(r.range, &r.resources);
            *peak = peak.max(&u.total.max_in(r.range));
            if !r.background {
                u.firm.add(r.range, &r.resources);
            }
            u.res.insert(key);
            *self.d.ends.entry(r.range.end).or_insert(0) += 1;
        } else {
            let before = u.total.max_in(r.range);
            u.total.sub(r.range, &r.resources);
            let p = *peak;
            if before.vcpus == p.vcpus || before.memory_mib == p.memory_mib || before.disk_gib == p.disk_gib {
                *peak = u.total.peak();
            }
            if !r.background {
                u.firm.sub(r.range, &r.resources);
            }
            u.res.remove(&key);
            if let Some(n) = self.d.ends.get_mut(&r.range.end) {
                *n -= 1;
                if *n == 0 {
                    self.d.ends.remove(&r.range.end);
                }
            }
        }
        if !r.background {
            let site = &mut self.d.site_firm;
            if add {
                site.add(r.range, &r.resources)
            } else {
                site.sub(r.range, &r.resources)
            }
            if !r.spare {
                if let Some(consumer) = self.p.services.get(&r.service).map(|s| s.consumer.clone()) {
                    let m = self.d.consumer_firm.entry(consumer.clone()).or_default();
                    if add {
                        m.add(r.range, &r.resources)
                    } else {
                        m.sub(r.range, &r.resources)
                    }
                    if m.is_empty() {
                        self.d.consumer_firm.remove(&consumer);
                    }
                }
            }
        }
    }

    /// Puts host `h` back into the rank indexes with its current numbers.
    fn reindex(&mut self, h: HostIdx) {
        let rec = &self.p.hosts[h as usize];
        if rec.removed {
            Arc::make_mut(&mut self.d.index).remove(h);
            return;
        }
        let free_mem = rec
            .spec
            .capacity
            .memory_mib
            .saturating_sub(self.d.peaks[h as usize].memory_mib);
        Arc::make_mut(&mut self.d.index).set(h, rec.profile, free_mem, rec.measured_load);
    }

    /// Label of host `h` at a constraint level (host index, site id, region id).
    pub(crate) fn label(&self, h: HostIdx, level: vee_manifest::ConstraintLevel) -> u32 {
        use vee_manifest::ConstraintLevel::*;
        let rec = &self.p.hosts[h as usize];
        match level {
            Host => h,
            Site => rec.site,
            Region => rec.region,
        }
    }

    /// Checks the planner's invariants: derived usage equals the sum of the
    /// reservations, no host is overcommitted in any slot, indexes agree.
    /// For tests and debugging; O(reservations + steps).
    pub fn check_invariants(&self) -> Result<(), String> {
        let fresh = Planner::rebuild(self.p.clone());
        for (i, (u, f)) in self.d.usage.iter().zip(&fresh.d.usage).enumerate() {
            let name = &self.p.hosts[i].spec.name;
            if u.total != f.total || u.firm != f.firm || u.res != f.res {
                return Err(format!("host {name}: usage differs from the reservations"));
            }
            if self.d.peaks[i] != f.total.peak() {
                return Err(format!("host {name}: stale peak {} vs {}", self.d.peaks[i], f.total.peak()));
            }
            let cap = self.p.hosts[i].spec.capacity;
            if let Some(s) = u.total.first_conflict(SlotRange::new(0, Slot::MAX), &Resources::ZERO, &cap) {
                return Err(format!("host {name} overcommitted in slot {s}: {} > {cap}", u.total.at(s)));
            }
        }
        if self.d.ends != fresh.d.ends || self.d.site_firm != fresh.d.site_firm {
            return Err("end slots or site usage differ from the reservations".into());
        }
        if self.d.consumer_firm != fresh.d.consumer_firm {
            return Err("consumer usage differs from the reservations".into());
        }
        if self.d.index != fresh.d.index {
            return Err("host index differs from the reservations".into());
        }
        for r in self.p.primaries.values().chain(self.p.spares.values()) {
            if !self.p.services.contains_key(&r.service) {
                return Err(format!("reservation of {} names unknown service {}", r.vee, r.service));
            }
        }
        Ok(())
    }
}
