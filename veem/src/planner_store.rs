//! The planner in the store, written incrementally: its header and one
//! record per reservation, peer spare and service ([`PlannerEntry`]) in the
//! `planner` tree. The planner notes which entries each change touches; a
//! save writes those (and the header when it changed) in one atomic batch,
//! so that a deploy at 100,000 VEEs writes a handful of records instead of
//! the whole planner. Older databases kept the planner as one JSON value
//! under `meta/planner`; it is read once and replaced by the first save.

use std::sync::Mutex;

use anyhow::{Context, Result};

use crate::planner::{AdmissionPlan, Admitted, Planner, PlannerEntry, PlannerHeader, Stale};
use crate::store::{Revision, Store, Tree, Writes};

/// The key of the planner's header in the planner tree.
pub const HEADER: &str = "header";
const LEGACY_KEY: &str = "planner";

/// What the last save left.
#[derive(Default)]
struct Written {
    /// The planner's header revision the stored header is of
    /// ([`Planner::header_revision`]); `None`: not written yet.
    header: Option<u64>,
    /// The planner was read from `meta/planner`, to be removed once saved.
    legacy: bool,
}

/// Saves and loads the planner (see the module documentation).
pub struct PlannerStore {
    store: Store,
    written: Mutex<Written>,
}

impl PlannerStore {
    /// Reads the planner from `store`, if one was saved. Errors: a record
    /// cannot be read or decoded.
    pub fn load(store: &Store) -> Result<(Option<Planner>, PlannerStore)> {
        let mut header = None;
        let mut entries = Vec::new();
        store.scan(Tree::Planner, |key, value| {
            if key == HEADER {
                header = Some(decode_header(value)?);
            } else {
                entries.push(decode_entry(key, value)?);
            }
            Ok(())
        })?;
        Ok(match header {
            Some(h) => {
                let planner = Planner::from_parts(h, entries);
                let saver = Self::written(store, &planner);
                (Some(planner), saver)
            }
            None => {
                let mut old: Option<Planner> = store.get(Tree::Meta, LEGACY_KEY)?;
                if let Some(p) = old.as_mut() {
                    p.mark_changed(None); // the first save writes it all
                }
                let legacy = old.is_some();
                let saver = PlannerStore {
                    store: store.clone(),
                    written: Mutex::new(Written { header: None, legacy }),
                };
                (old, saver)
            }
        })
    }

    /// The saver of `planner`, as stored in `store` now (read from it,
    /// or kept current by a standby: `crate::core::replica`).
    pub fn written(store: &Store, planner: &Planner) -> PlannerStore {
        PlannerStore {
            store: store.clone(),
            written: Mutex::new(Written {
                header: Some(planner.header_revision()),
                legacy: false,
            }),
        }
    }

    /// Writes what changed in `planner` since the last save. Saves are
    /// serialized and each takes the changes while holding the planner's
    /// lock, so a later state is never overwritten by an earlier one.
    /// Errors: the store cannot write; nothing of this save is then
    /// written, and its changes are kept for the next save.
    pub fn save(&self, planner: &Mutex<Planner>) -> crate::store::Result<()> {
        self.save_with(planner, Writes::default()).map(|_| ())
    }

    /// As [`PlannerStore::save`], with `also` (records of other trees) in
    /// the same atomic commit (and its conditions): a command's records
    /// and the planner's changes are written together or not at all.
    /// Returns the revision of the commit.
    pub fn save_with(&self, planner: &Mutex<Planner>, also: Writes) -> crate::store::Result<Revision> {
        let mut written = self.written.lock().unwrap();
        // The header (10,000 hosts: megabytes) is copied and written only
        // when it changed since the last save.
        let (header_revision, header, changes) = {
            let mut p = planner.lock().unwrap();
            let revision = p.header_revision();
            let header = (written.header != Some(revision)).then(|| p.header());
            (revision, header, p.take_changes())
        };
        let mut batch = also;
        if let Some(header) = &header {
            batch.put(Tree::Planner, HEADER, header)?;
        }
        put_entries(&mut batch, &changes)?;
        let revision = match self.store.commit(batch) {
            Ok(r) => r,
            Err(e) => {
                planner
                    .lock()
                    .unwrap()
                    .mark_changed(Some(changes.into_iter().map(|(k, _)| k).collect()));
                return Err(e);
            }
        };
        if written.legacy {
            self.store.remove(Tree::Meta, LEGACY_KEY)?;
            written.legacy = false;
        }
        if header.is_some() {
            written.header = Some(header_revision);
        }
        Ok(revision)
    }
}

impl PlannerStore {
    /// Commits `plan` (Deploy's admission, made on a snapshot of the
    /// planner at an earlier moment): when the plan still holds on the
    /// planner ([`Planner::check_plan`]: at its revision, or its hosts'
    /// room, displaced VEEs and service records unchanged), writes the
    /// plan's entries with `also` in one atomic commit, then applies the
    /// plan to the planner; the planner's lock is held from the check to
    /// the apply, so nothing comes between. `Ok(Err(Stale))` when it no
    /// longer holds (nothing written); else the admission and the revision
    /// of the commit. Errors: the store's (nothing written, nothing
    /// applied).
    pub fn commit_plan(
        &self,
        planner: &Mutex<Planner>,
        plan: AdmissionPlan,
        also: Writes,
    ) -> crate::store::Result<Result<(Admitted, Revision), Stale>> {
        let _saves = self.written.lock().unwrap();
        let mut p = planner.lock().unwrap();
        if let Err(stale) = p.check_plan(&plan) {
            return Ok(Err(stale));
        }
        let mut batch = also;
        put_entries(&mut batch, &plan.entries())?;
        let revision = self.store.commit(batch)?;
        Ok(p.apply_written(plan).map(|a| (a, revision)))
    }
}

/// The planner's header as stored (key [`HEADER`] of the planner tree).
pub fn decode_header(value: &[u8]) -> Result<PlannerHeader> {
    serde_json::from_slice::<PlannerHeader>(value).context("planner header")
}

/// The planner entry stored under `key`.
pub fn decode_entry(key: &str, value: &[u8]) -> Result<PlannerEntry> {
    serde_json::from_slice::<PlannerEntry>(value).with_context(|| format!("planner record {key}"))
}

/// Adds the planner's `entries` to `batch`: each value under its key, or
/// the key's removal.
fn put_entries(batch: &mut Writes, entries: &[(String, Option<PlannerEntry>)]) -> crate::store::Result<()> {
    for (key, e) in entries {
        match e {
            Some(e) => batch.put(Tree::Planner, key, e)?,
            None => batch.remove(Tree::Planner, key),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use interfaces::manifest::{GuaranteeLevel, MigrationPolicy};

    use super::*;
    use crate::planner::{Admission, ComponentRequest, HostSpec, PeerSpare, PlannerConfig, Resources, ServiceRequest, SlotRange};

    fn planner() -> Planner {
        let mut p = Planner::new(PlannerConfig::default());
        for i in 0..3 {
            p.add_host(HostSpec::new(format!("h{i}"), Resources::new(4, 4096, 100), "site-a", "r1"))
                .unwrap();
        }
        p
    }

    fn admit(p: &Mutex<Planner>, id: &str, guarantee: GuaranteeLevel) {
        let req = ServiceRequest {
            service_id: id.into(),
            consumer: "acme".into(),
            guarantee,
            migration: MigrationPolicy::Site,
            window: SlotRange::new(0, 100),
            components: vec![ComponentRequest {
                name: "web".into(),
                resources: Resources::new(1, 256, 1),
                profile: None,
                vees: (0..2).map(|i| format!("{id}-{i}")).collect(),
            }],
            constraints: Vec::new(),
            peer_spare: PeerSpare::NotAsked,
            padding: crate::planner::Padding::NONE,
        };
        assert!(matches!(p.lock().unwrap().admit(&req), Admission::Accepted(_)));
    }

    /// The planner's whole persisted state in a canonical order.
    fn state(p: &Planner) -> (PlannerHeader, Vec<(String, PlannerEntry)>) {
        let mut e = p.entries();
        e.sort_by(|a, b| a.0.cmp(&b.0));
        (p.header(), e)
    }

    fn reload(dir: &std::path::Path) -> (Planner, usize) {
        let store = Store::open(dir).unwrap();
        let mut records = 0;
        store
            .scan(Tree::Planner, |_, _| {
                records += 1;
                Ok(())
            })
            .unwrap();
        (PlannerStore::load(&store).unwrap().0.expect("a saved planner"), records)
    }

    #[test]
    fn saves_only_changes_and_reloads_the_same_planner() {
        let dir = tempfile::tempdir().unwrap();
        let expected = {
            let store = Store::open(dir.path()).unwrap();
            let (none, ps) = PlannerStore::load(&store).unwrap();
            assert!(none.is_none());
            let p = Mutex::new(planner());
            admit(&p, "a", GuaranteeLevel::Enhanced); // 2 VEEs, 2 spares
            admit(&p, "b", GuaranteeLevel::Standard);
            ps.save(&p).unwrap();
            // A service leaves, another comes: its records go, the new ones come.
            p.lock().unwrap().release_service("a").unwrap();
            admit(&p, "c", GuaranteeLevel::Standard);
            ps.save(&p).unwrap();
            ps.save(&p).unwrap(); // nothing changed
            let s = state(&p.lock().unwrap());
            s
        };
        let (q, records) = reload(dir.path());
        assert_eq!(state(&q), expected);
        // header + b (service, 2 VEEs) + c (service, 2 VEEs); a's 5 records gone.
        assert_eq!(records, 1 + 3 + 3);
        drop(q);
        // A planner loaded from the records saves again incrementally.
        let store = Store::open(dir.path()).unwrap();
        let (q, ps) = PlannerStore::load(&store).unwrap();
        let p = Mutex::new(q.unwrap());
        p.lock().unwrap().release_service("b").unwrap();
        ps.save(&p).unwrap();
        drop((ps, store));
        let (q, records) = reload(dir.path());
        assert_eq!(state(&q), state(&p.lock().unwrap()));
        assert_eq!(records, 1 + 3);
    }

    /// The header is written when a host changes (down, its load), not
    /// copied and compared at every save; a reloaded planner has the
    /// change.
    #[test]
    fn a_hosts_change_reaches_the_stored_header() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let (_, ps) = PlannerStore::load(&store).unwrap();
            let p = Mutex::new(planner());
            ps.save(&p).unwrap();
            let before = p.lock().unwrap().header_revision();
            ps.save(&p).unwrap();
            assert_eq!(p.lock().unwrap().header_revision(), before, "a save changes nothing");
            p.lock().unwrap().set_host_down("h1", 5, 10).unwrap();
            p.lock().unwrap().set_measured_load("h2", 0.5).unwrap();
            ps.save(&p).unwrap();
        }
        let (q, _) = reload(dir.path());
        assert!(q.host_down("h1").is_some(), "the host down is stored");
        assert_eq!(q.measured_load("h2"), Some(0.5));
    }

    #[test]
    fn a_planner_saved_whole_by_an_older_version_is_read_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = Mutex::new(planner());
        admit(&p, "a", GuaranteeLevel::Standard);
        {
            let store = Store::open(dir.path()).unwrap();
            store.put(Tree::Meta, LEGACY_KEY, &*p.lock().unwrap()).unwrap();
            let (old, ps) = PlannerStore::load(&store).unwrap();
            assert_eq!(state(&old.unwrap()), state(&p.lock().unwrap()));
            ps.save(&p).unwrap();
            assert!(store.get::<Planner>(Tree::Meta, LEGACY_KEY).unwrap().is_none());
        }
        let (q, records) = reload(dir.path());
        assert_eq!(state(&q), state(&p.lock().unwrap()));
        assert_eq!(records, 1 + 3);
    }
}
