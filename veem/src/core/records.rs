//! The VEE records the core keeps in memory (written through to the
//! store), with an index of when each next needs the scheduler's or the
//! SLA round's attention ([`VeeRec::due_ms`]): the per-second rounds read
//! the records that are due, not every record (issue 37, item 7). Each
//! record carries the store revision it was read or written at, the
//! condition of the next commit that writes it ([`crate::store::Unchanged`]):
//! a record another VEEM wrote meanwhile is not overwritten.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::model::VeeRec;
use crate::store::{Revision, Tree, Writes};

/// A record, its due time, the revision it was read or written at, and
/// since when the proposal pass has seen it live on its host.
struct Entry {
    /// Shared with the by-host index, which reads it without a look-up.
    rec: Arc<VeeRec>,
    due: Option<i64>,
    revision: Revision,
    /// Unix ms at which [`VeeRecords::live_on_hosts`] first saw the VEE
    /// live on its current host; `None` until then, and again once its
    /// host or its liveness changes.
    on_host_since_ms: Option<i64>,
}

/// The VEE records by ID, their due times and revisions.
#[derive(Default)]
pub(crate) struct VeeRecords {
    by_id: BTreeMap<String, Entry>,
    /// The revision the records were read at, or of the last commit that
    /// wrote or removed one through this map: a record the map does not
    /// hold was absent then.
    revision: Revision,
    /// (due time in Unix ms, VEE ID) for every record with a due time.
    due: BTreeSet<(i64, String)>,
    /// The IDs of the displaced VEEs ([`VeeRec::is_displaced`]): what the
    /// scheduler resumes reads these, not every record, each second.
    displaced: BTreeSet<String>,
    /// The records placed on each host ([`VeeRec::host`]) by ID:
    /// metering's paced round reads the VEEs of the hosts in its turn,
    /// not every record, and each without a look-up in `by_id` (at
    /// 100,000 VEEs those look-ups were most of its reading).
    by_host: BTreeMap<String, BTreeMap<String, Arc<VeeRec>>>,
    /// Seconds before an open-ended window's end at which its renewal is
    /// due (half the planning horizon).
    renew_ahead_s: i64,
}

impl VeeRecords {
    /// `records`, read at store revision `revision` (noted before the
    /// read); an open-ended window renewed `renew_ahead_s` seconds before
    /// its end.
    pub(crate) fn new(records: Vec<VeeRec>, renew_ahead_s: i64, revision: Revision) -> Self {
        let mut this = Self {
            renew_ahead_s,
            revision,
            ..Self::default()
        };
        for v in records {
            this.insert(v, revision);
        }
        this
    }

    /// The revision at which record `id` was last read or written here,
    /// and whether it was there: a commit that writes it holds to it not
    /// having been written since.
    pub(crate) fn read_at(&self, id: &str) -> (Revision, bool) {
        self.by_id.get(id).map_or((self.revision, false), |e| (e.revision, true))
    }

    /// Conditions `w` on record `id` being as this map read it
    /// ([`VeeRecords::read_at`]): a commit that writes it writes nothing
    /// if another VEEM wrote it since.
    pub(crate) fn condition(&self, w: &mut Writes, id: &str) {
        let (since, existed) = self.read_at(id);
        w.unchanged_since(Tree::Vees, id, since, existed);
    }

    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(crate) fn get(&self, id: &str) -> Option<&VeeRec> {
        self.by_id.get(id).map(|e| &*e.rec)
    }

    /// Adds or replaces `v`, read or written at `revision`, with its due
    /// time.
    pub(crate) fn insert(&mut self, v: VeeRec, revision: Revision) {
        let due = v.due_ms(self.renew_ahead_s);
        let id = v.id.clone();
        self.revision = self.revision.max(revision);
        if v.is_displaced() {
            self.displaced.insert(id.clone());
        } else {
            self.displaced.remove(&id);
        }
        let host = v.host().map(str::to_string);
        let live = v.state.is_live();
        let rec = Arc::new(v);
        if let Some(at) = &host {
            self.by_host.entry(at.clone()).or_default().insert(id.clone(), rec.clone());
        }
        let entry = Entry {
            rec,
            due,
            revision,
            on_host_since_ms: None,
        };
        if let Some(old) = self.by_id.insert(id.clone(), entry) {
            if let Some(at) = old.due {
                self.due.remove(&(at, id.clone()));
            }
            if let Some(was) = old.rec.host().filter(|was| Some(*was) != host.as_deref()) {
                self.unindex_host(was.to_string(), &id);
            }
            // Still live on the same host: seen there since as before.
            if old.rec.host() == host.as_deref() && old.rec.state.is_live() == live {
                if let Some(e) = self.by_id.get_mut(&id) {
                    e.on_host_since_ms = old.on_host_since_ms;
                }
            }
        }
        if let Some(at) = due {
            self.due.insert((at, id));
        }
    }

    /// Applies a commit that wrote record `id` at `revision` (`None`:
    /// removed it), made after the cache's lock was let go: unless the
    /// cache holds the record at a later revision already (read again
    /// meanwhile), which stands.
    pub(crate) fn apply_commit(&mut self, id: &str, v: Option<VeeRec>, revision: Revision) {
        if self.by_id.get(id).is_some_and(|e| e.revision > revision) {
            return;
        }
        match v {
            Some(v) => self.insert(v, revision),
            None => self.remove(id, revision),
        }
    }

    /// Notes every record as read at `revision` (a standby's first read of
    /// the store, whose revision is known once read: `super::replica`).
    pub(crate) fn set_revisions(&mut self, revision: Revision) {
        self.revision = revision;
        for e in self.by_id.values_mut() {
            e.revision = revision;
        }
    }

    /// Forgets record `id`, removed (or found absent) at `revision`.
    pub(crate) fn remove(&mut self, id: &str, revision: Revision) {
        self.revision = self.revision.max(revision);
        self.displaced.remove(id);
        if let Some(old) = self.by_id.remove(id) {
            if let Some(at) = old.due {
                self.due.remove(&(at, id.to_string()));
            }
            if let Some(was) = old.rec.host() {
                self.unindex_host(was.to_string(), id);
            }
        }
    }

    /// Takes `id` out of host `host`'s entry of the by-host index (and
    /// the entry out once empty).
    fn unindex_host(&mut self, host: String, id: &str) {
        if let std::collections::btree_map::Entry::Occupied(mut e) = self.by_host.entry(host) {
            e.get_mut().remove(id);
            if e.get().is_empty() {
                e.remove();
            }
        }
    }

    /// The records placed on host `host`, in ID order.
    pub(crate) fn on_host<'a>(&'a self, host: &str) -> impl Iterator<Item = &'a Arc<VeeRec>> + 'a {
        self.by_host.get(host).into_iter().flat_map(|on| on.values())
    }

    /// `f` over the records of the VEEs live on a host ([`VeeState::is_live`],
    /// placed on a host), each with since when it has been seen live there
    /// (Unix ms: the first call that saw it so, `now_ms` for one seen so
    /// now for the first time), in ID order: the proposal pass's time on a
    /// host, kept with the record rather than in a map of every VEE.
    ///
    /// [`VeeState::is_live`]: crate::model::VeeState::is_live
    pub(crate) fn live_on_hosts<T>(&mut self, now_ms: i64, mut f: impl FnMut(&VeeRec, i64) -> Option<T>) -> Vec<T> {
        let mut out = Vec::new();
        for e in self.by_id.values_mut() {
            if e.rec.host().is_none() || !e.rec.state.is_live() {
                e.on_host_since_ms = None;
                continue;
            }
            let since = *e.on_host_since_ms.get_or_insert(now_ms);
            out.extend(f(&e.rec, since));
        }
        out
    }

    /// Every record, in ID order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &VeeRec> {
        self.by_id.values().map(|e| &*e.rec)
    }

    /// Every record with the revision it was read or written at, in ID
    /// order.
    pub(crate) fn values_at(&self) -> impl Iterator<Item = (&VeeRec, Revision)> {
        self.by_id.values().map(|e| (&*e.rec, e.revision))
    }

    /// Record `id` with the revision it was read or written at.
    pub(crate) fn get_at(&self, id: &str) -> Option<(&VeeRec, Revision)> {
        self.by_id.get(id).map(|e| (&*e.rec, e.revision))
    }

    /// The revision the records were read at, or of the last commit that
    /// wrote or removed one here: it moves on with every such change.
    pub(crate) fn revision(&self) -> Revision {
        self.revision
    }

    /// The displaced records ([`VeeRec::is_displaced`]), in ID order.
    pub(crate) fn displaced(&self) -> impl Iterator<Item = &VeeRec> {
        self.displaced.iter().filter_map(|id| self.get(id))
    }

    /// The records due at `now_ms` or before, earliest first.
    pub(crate) fn due(&self, now_ms: i64) -> impl Iterator<Item = &VeeRec> {
        self.due
            .range(..(now_ms.saturating_add(1), String::new()))
            .filter_map(|(_, id)| self.get(id))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::VeeRecords;
    use crate::model::{Location, VeeRec, VeeState};

    const STATES: [VeeState; 6] = [
        VeeState::Admitted,
        VeeState::Deploying,
        VeeState::Running,
        VeeState::Checkpointing,
        VeeState::Suspended,
        VeeState::Stopped,
    ];

    fn vee(id: &str) -> VeeRec {
        let m = interfaces::manifest::Manifest::from_toml(crate::sim::STANDARD).unwrap();
        VeeRec::of_manifest(&m, &m.components[0], 0, id, "s", (0, 0), 0)
    }

    proptest! {
        /// The due time is never later than the first moment the scheduler
        /// or the SLA round would act on the record, or its window's
        /// renewal is due: the rounds that read only due records miss
        /// nothing a full scan would find.
        #[test]
        fn a_record_is_due_no_later_than_any_round_would_act_on_it(
            state in 0usize..6, place in 0usize..3, for_peer: bool, open_ended: bool,
            start in 0i64..10_000, len in 0i64..10_000, lead in 0i64..300,
            every in proptest::option::of(1u64..5_000), last in proptest::option::of(0i64..10_000_000),
            updated in 0i64..10_000_000, now_ms in 0i64..30_000_000, renew_ahead in 0i64..5_000,
        ) {
            let mut v = vee("v");
            v.state = STATES[state];
            v.location = [Location::Host("h".into()), Location::Site("b".into()), Location::Nowhere][place].clone();
            v.for_peer = for_peer.then(|| "site-b".to_string());
            v.open_ended = open_ended;
            (v.window_start_unix, v.window_end_unix, v.init_lead_s) = (start, start + len, lead);
            (v.checkpoint_interval_s, v.last_checkpoint_ms, v.updated_ms) = (every, last, updated);
            let now = now_ms.div_euclid(1000);
            let scheduler = crate::workflows::lifecycle::due(&v, now, now_ms).is_some();
            let sla = v.for_peer.is_none() && crate::steps::sla::ongoing_breach(&v, now_ms).is_some();
            let renewal = v.open_ended && v.state.is_live() && v.host().is_some() && v.window_end_unix - now < renew_ahead;
            if scheduler || sla || renewal {
                let due = v.due_ms(renew_ahead);
                prop_assert!(due.is_some_and(|d| d <= now_ms), "due {due:?} after {now_ms}: scheduler {scheduler}, sla {sla}, renewal {renewal}");
                let records = VeeRecords::new(vec![v.clone()], renew_ahead, 0);
                prop_assert_eq!(records.due(now_ms).count(), 1);
            }
        }
    }

    #[test]
    fn a_replaced_record_moves_in_the_due_index_and_a_removed_one_leaves_it() {
        let mut v = vee("v");
        v.state = VeeState::Running;
        v.location = Location::Host("h".into());
        v.window_end_unix = 100;
        v.checkpoint_interval_s = None;
        let mut records = VeeRecords::new(vec![v.clone()], 0, 1);
        assert_eq!(records.due(99_999).count(), 0);
        assert_eq!(records.due(100_000).count(), 1);
        v.window_end_unix = 200;
        records.insert(v, 2);
        assert_eq!(records.due(100_000).count(), 0, "its old due time went");
        assert_eq!(records.due(200_000).count(), 1);
        assert_eq!(records.read_at("v"), (2, true), "the revision it was written at");
        records.remove("v", 3);
        assert_eq!(records.due(i64::MAX).count(), 0);
        assert_eq!(records.read_at("v"), (3, false), "absent since its removal");
    }

    #[test]
    fn the_displaced_index_follows_each_record_in_and_out() {
        let mut v = vee("v");
        v.state = VeeState::Suspended;
        v.location = Location::Nowhere;
        let mut records = VeeRecords::new(vec![v.clone(), vee("w")], 0, 1);
        assert_eq!(records.displaced().map(|v| v.id.as_str()).collect::<Vec<_>>(), ["v"]);
        v.location = Location::Host("h".into());
        records.insert(v.clone(), 2);
        assert_eq!(records.displaced().count(), 0, "placed again");
        v.location = Location::Nowhere;
        records.insert(v, 3);
        assert_eq!(records.displaced().count(), 1);
        records.remove("v", 4);
        assert_eq!(records.displaced().count(), 0);
    }

    #[test]
    fn the_host_index_follows_each_record_from_host_to_host_and_out() {
        let on = |r: &VeeRecords, h: &str| r.on_host(h).map(|v| v.id.clone()).collect::<Vec<_>>();
        let (mut v, mut w) = (vee("v"), vee("w"));
        v.location = Location::Host("h1".into());
        w.location = Location::Host("h1".into());
        let mut records = VeeRecords::new(vec![v.clone(), w, vee("x")], 0, 1);
        assert_eq!(on(&records, "h1"), ["v", "w"]);
        v.location = Location::Host("h2".into());
        records.insert(v.clone(), 2);
        assert_eq!(
            (on(&records, "h1"), on(&records, "h2")),
            (vec!["w".to_string()], vec!["v".to_string()])
        );
        v.location = Location::Site("site-b".into());
        records.insert(v, 3);
        assert!(on(&records, "h2").is_empty(), "moved to a peer site");
        records.remove("w", 4);
        assert!(on(&records, "h1").is_empty() && records.by_host.is_empty(), "{:?}", records.by_host);
    }

    #[test]
    fn the_time_on_a_host_is_kept_while_the_vee_stays_live_there_and_begins_again_after() {
        let since = |r: &mut VeeRecords, now: i64| r.live_on_hosts(now, |v, t| Some((v.id.clone(), t)));
        let mut v = vee("v");
        v.state = VeeState::Running;
        v.location = Location::Host("h1".into());
        let mut records = VeeRecords::new(vec![v.clone(), vee("x")], 0, 1);
        assert_eq!(since(&mut records, 10), [("v".to_string(), 10)], "a VEE not on a host is not seen");
        assert_eq!(since(&mut records, 20), [("v".to_string(), 10)], "seen there since the first look");
        v.updated_ms = 15;
        records.insert(v.clone(), 2);
        assert_eq!(
            since(&mut records, 30),
            [("v".to_string(), 10)],
            "a record written again on the same host"
        );
        v.location = Location::Host("h2".into());
        records.insert(v.clone(), 3);
        assert_eq!(
            since(&mut records, 40),
            [("v".to_string(), 40)],
            "moved: seen on its new host from now"
        );
        v.state = VeeState::Stopped;
        records.insert(v.clone(), 4);
        assert!(since(&mut records, 50).is_empty(), "not live: not seen");
        v.state = VeeState::Running;
        records.insert(v, 5);
        assert_eq!(since(&mut records, 60), [("v".to_string(), 60)], "live again: from now");
    }
}
