//! Slotted time (H §3.4: planning-based RMS) and per-host usage over time.
//!
//! Time is cut into slots of a fixed length ([`SlotClock`]); a reservation
//! holds a [`SlotRange`] `[start, end)`. A host's reserved usage is a step
//! function over slots ([`UsageMap`]): a sorted map from the slot where the
//! usage changes to the usage from there on. Checking a range costs
//! O(log n + steps in the range), adding or removing a reservation the same,
//! whatever the length of the planning horizon.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::capacity::Resources;

/// A slot number, counted from the [`SlotClock`]'s origin.
pub type Slot = u32;

/// Half-open slot range `[start, end)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SlotRange {
    /// First slot.
    pub start: Slot,
    /// First slot after the range.
    pub end: Slot,
}

impl SlotRange {
    /// `[start, end)`; an `end` before `start` gives an empty range at `start`.
    pub fn new(start: Slot, end: Slot) -> Self {
        SlotRange {
            start,
            end: end.max(start),
        }
    }

    /// `len` slots from `start`.
    pub fn starting_at(start: Slot, len: u32) -> Self {
        SlotRange {
            start,
            end: start.saturating_add(len),
        }
    }

    /// Number of slots.
    pub fn len(&self) -> u32 {
        self.end - self.start
    }

    /// Whether the range has no slot.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Whether `slot` is in the range.
    pub fn contains(&self, slot: Slot) -> bool {
        self.start <= slot && slot < self.end
    }

    /// Whether the ranges share a slot.
    pub fn overlaps(&self, other: &SlotRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// The same length, starting at `start`.
    pub fn moved_to(&self, start: Slot) -> SlotRange {
        SlotRange::starting_at(start, self.len())
    }

    /// The part from `slot` on (empty if the range ends before).
    pub fn from_slot(&self, slot: Slot) -> SlotRange {
        SlotRange::new(self.start.max(slot), self.end)
    }
}

impl fmt::Display for SlotRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.start, self.end)
    }
}

/// Maps wall-clock time (Unix seconds) to slots: slot 0 starts at
/// `origin_unix_s`, each slot lasts `slot_secs` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotClock {
    /// Unix time (s) where slot 0 starts.
    pub origin_unix_s: i64,
    /// Slot length in seconds (at least 1).
    pub slot_secs: u32,
}

impl SlotClock {
    /// A clock with slots of `slot_secs` seconds (at least 1) from `origin_unix_s`.
    pub fn new(origin_unix_s: i64, slot_secs: u32) -> Self {
        SlotClock {
            origin_unix_s,
            slot_secs: slot_secs.max(1),
        }
    }

    /// The slot holding `unix_s` (0 before the origin, saturating).
    pub fn slot_at(&self, unix_s: i64) -> Slot {
        let rel = (unix_s - self.origin_unix_s).max(0);
        u32::try_from(rel / i64::from(self.slot_secs)).unwrap_or(Slot::MAX)
    }

    /// The first slot starting at or after `unix_s`.
    pub fn slot_ceil(&self, unix_s: i64) -> Slot {
        let rel = (unix_s - self.origin_unix_s).max(0);
        let s = i64::from(self.slot_secs);
        u32::try_from((rel + s - 1) / s).unwrap_or(Slot::MAX)
    }

    /// The smallest slot range covering `[start_unix_s, end_unix_s)`.
    pub fn covering(&self, start_unix_s: i64, end_unix_s: i64) -> SlotRange {
        SlotRange::new(self.slot_at(start_unix_s), self.slot_ceil(end_unix_s))
    }

    /// Unix time (s) where `slot` starts.
    pub fn start_of(&self, slot: Slot) -> i64 {
        self.origin_unix_s + i64::from(slot) * i64::from(self.slot_secs)
    }

    /// Number of slots covering `d` (rounded up).
    pub fn slots_for(&self, d: Duration) -> u32 {
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        u32::try_from(secs.div_ceil(u64::from(self.slot_secs))).unwrap_or(u32::MAX)
    }

    /// Length of `slots` slots.
    pub fn duration_of(&self, slots: u32) -> Duration {
        Duration::from_secs(u64::from(slots) * u64::from(self.slot_secs))
    }
}

/// Reserved usage of one host (or a consumer, or the site) over time: a
/// step function from slots to [`Resources`]. The value stored at key `k`
/// holds for slots `[k, next key)`; before the first key the usage is zero.
/// Adjacent equal steps are merged, so the map stays as small as the number
/// of distinct reservation boundaries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageMap {
    steps: BTreeMap<Slot, Resources>,
}

impl UsageMap {
    /// No usage anywhere.
    pub fn new() -> Self {
        Self::default()
    }

    /// Usage in `slot`.
    pub fn at(&self, slot: Slot) -> Resources {
        self.steps.range(..=slot).next_back().map(|(_, v)| *v).unwrap_or_default()
    }

    /// Number of steps (for tests and size checks).
    pub fn steps(&self) -> usize {
        self.steps.len()
    }

    /// Whether there is no usage in any slot.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The steps overlapping `range` as `(from_slot, usage)`; the first one
    /// starts at `range.start`.
    pub fn steps_in(&self, range: SlotRange) -> impl Iterator<Item = (Slot, Resources)> + '_ {
        let first = (!range.is_empty()).then(|| (range.start, self.at(range.start)));
        let rest = if range.is_empty() {
            None
        } else {
            Some(self.steps.range(range.start + 1..range.end).map(|(k, v)| (*k, *v)))
        };
        first.into_iter().chain(rest.into_iter().flatten())
    }

    /// Component-wise maximum usage over `range`.
    pub fn max_in(&self, range: SlotRange) -> Resources {
        self.steps_in(range).fold(Resources::ZERO, |m, (_, v)| m.max(&v))
    }

    /// Component-wise maximum over all slots.
    pub fn peak(&self) -> Resources {
        self.steps.values().fold(Resources::ZERO, |m, v| m.max(v))
    }

    /// Whether `demand` fits under `capacity` in every slot of `range`.
    pub fn fits(&self, range: SlotRange, demand: &Resources, capacity: &Resources) -> bool {
        self.first_conflict(range, demand, capacity).is_none()
    }

    /// The first slot of `range` where `usage + demand` exceeds `capacity`.
    pub fn first_conflict(&self, range: SlotRange, demand: &Resources, capacity: &Resources) -> Option<Slot> {
        if !demand.fits_in(capacity) {
            return (!range.is_empty()).then_some(range.start);
        }
        let room = capacity.saturating_sub(demand);
        self.steps_in(range).find(|(_, v)| !v.fits_in(&room)).map(|(k, _)| k)
    }

    /// The earliest `t` in `[from, limit]` such that `demand` fits under
    /// `capacity` in every slot of `[t, t + len)`. Walks the steps from
    /// `from` once: O(log n + steps visited).
    pub fn earliest_fit(&self, from: Slot, len: u32, demand: &Resources, capacity: &Resources, limit: Slot) -> Option<Slot> {
        if !demand.fits_in(capacity) || from > limit {
            return None;
        }
        let room = capacity.saturating_sub(demand);
        let mut t = from;
        let mut steps = std::iter::once((from, self.at(from)))
            .chain(self.steps.range(from.saturating_add(1)..).map(|(k, v)| (*k, *v)))
            .peekable();
        while let Some((k, v)) = steps.next() {
            if k >= t.saturating_add(len) {
                break;
            }
            if !v.fits_in(&room) {
                // Blocked until the next step; the last step lasts forever.
                t = steps.peek()?.0;
                if t > limit {
                    return None;
                }
            }
        }
        Some(t)
    }

    /// Adds `r` to every slot of `range`.
    pub fn add(&mut self, range: SlotRange, r: &Resources) {
        self.apply(range, |v| *v += *r);
    }

    /// Removes `r` from every slot of `range` (it must have been added).
    pub fn sub(&mut self, range: SlotRange, r: &Resources) {
        self.apply(range, |v| *v -= *r);
    }

    /// Forgets everything before `slot` (history no longer needed).
    pub fn forget_before(&mut self, slot: Slot) {
        let v = self.at(slot);
        self.steps = self.steps.split_off(&slot);
        if !v.is_zero() {
            self.steps.entry(slot).or_insert(v);
        }
        self.merge_at(slot);
    }

    fn apply(&mut self, range: SlotRange, f: impl Fn(&mut Resources)) {
        if range.is_empty() {
            return;
        }
        self.split_at(range.start);
        self.split_at(range.end);
        for (_, v) in self.steps.range_mut(range.start..range.end) {
            f(v);
        }
        // Uniform change inside the range keeps inner steps distinct; only
        // the two boundaries can become redundant.
        self.merge_at(range.start);
        self.merge_at(range.end);
    }

    fn split_at(&mut self, at: Slot) {
        if !self.steps.contains_key(&at) {
            let v = self.at(at);
            self.steps.insert(at, v);
        }
    }

    fn merge_at(&mut self, at: Slot) {
        if let Some(v) = self.steps.get(&at).copied() {
            let before = self.steps.range(..at).next_back().map(|(_, v)| *v).unwrap_or_default();
            if before == v {
                self.steps.remove(&at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(m: u64) -> Resources {
        Resources::new(0, m, 0)
    }

    #[test]
    fn add_sub_merge_back_to_empty() {
        let mut u = UsageMap::new();
        u.add(SlotRange::new(10, 20), &r(100));
        u.add(SlotRange::new(15, 30), &r(50));
        assert_eq!(u.at(9), r(0));
        assert_eq!(u.at(10), r(100));
        assert_eq!(u.at(15), r(150));
        assert_eq!(u.at(20), r(50));
        assert_eq!(u.at(30), r(0));
        assert_eq!(u.max_in(SlotRange::new(0, 12)), r(100));
        assert_eq!(u.max_in(SlotRange::new(19, 40)), r(150));
        assert_eq!(u.max_in(SlotRange::new(20, 40)), r(50));
        assert_eq!(u.peak(), r(150));
        assert!(u.fits(SlotRange::new(20, 40), &r(50), &r(100)));
        assert_eq!(u.first_conflict(SlotRange::new(0, 40), &r(1), &r(150)), Some(15));
        u.sub(SlotRange::new(10, 20), &r(100));
        u.sub(SlotRange::new(15, 30), &r(50));
        assert!(u.is_empty(), "{u:?}");
    }

    #[test]
    fn earliest_fit_skips_busy_steps() {
        let mut u = UsageMap::new();
        u.add(SlotRange::new(10, 20), &r(800));
        u.add(SlotRange::new(25, 30), &r(800));
        let cap = r(1000);
        assert_eq!(u.earliest_fit(0, 10, &r(500), &cap, 100), Some(0));
        assert_eq!(u.earliest_fit(0, 11, &r(500), &cap, 100), Some(30));
        assert_eq!(u.earliest_fit(12, 5, &r(500), &cap, 100), Some(20));
        assert_eq!(u.earliest_fit(12, 6, &r(500), &cap, 100), Some(30));
        assert_eq!(u.earliest_fit(12, 6, &r(500), &cap, 29), None);
        assert_eq!(u.earliest_fit(0, 50, &r(200), &cap, 100), Some(0));
        assert_eq!(u.earliest_fit(0, 1, &r(1001), &cap, 100), None);
        let mut full = UsageMap::new();
        full.add(SlotRange::new(0, Slot::MAX), &r(1000));
        assert_eq!(full.earliest_fit(0, 1, &r(1), &cap, 100), None);
    }

    #[test]
    fn adjacent_equal_steps_merge() {
        let mut u = UsageMap::new();
        u.add(SlotRange::new(0, 10), &r(1));
        u.add(SlotRange::new(10, 20), &r(1));
        assert_eq!(u.steps(), 2, "{u:?}");
        u.forget_before(5);
        assert_eq!(u.at(5), r(1));
        assert_eq!(u.at(4), r(0));
        u.forget_before(25);
        assert!(u.is_empty());
    }

    #[test]
    fn clock_maps_time_to_slots() {
        let c = SlotClock::new(1_000, 60);
        assert_eq!(c.slot_at(999), 0);
        assert_eq!(c.slot_at(1_059), 0);
        assert_eq!(c.slot_at(1_060), 1);
        assert_eq!(c.slot_ceil(1_061), 2);
        assert_eq!(c.covering(1_030, 1_130), SlotRange::new(0, 3));
        assert_eq!(c.start_of(2), 1_120);
        assert_eq!(c.slots_for(Duration::from_secs(61)), 2);
        assert_eq!(c.slots_for(Duration::from_secs(0)), 0);
    }
}
