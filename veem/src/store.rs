//! Persistent state of the VEEM: one tree per record kind, values JSON, in
//! a key-value [`Engine`] (sled by default, [`SledEngine`]; a site's etcd
//! cluster, [`EtcdEngine`]; `engine` says what another must do). Survives restarts; every write is durable before
//! the caller goes on (a `kill -9` loses nothing that was acknowledged).
//!
//! The database carries its format version ([`FORMAT_VERSION`], key
//! `format_version` in the `meta` tree). A database of an older format is
//! migrated explicitly when it is opened ([`Store::migrate`]); one of a newer
//! format is refused, never misread.

mod derived;
mod engine;
mod error;
mod etcd;
mod events;
pub mod migrate;
mod upgrade;

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
pub use error::StoreError;
pub use engine::{Conflict, Engine, MemoryEngine, Revision, SledEngine, Unchanged, Visit, Write};
pub use etcd::{Change, Changes, EtcdEngine, EtcdOptions, Fenced, StoreUnavailable, WatchEnded, PAGE as ETCD_PAGE};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A store call's result: [`StoreError`] by what the caller can do.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The record kinds (an engine's trees).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tree {
    Services,
    Vees,
    Checkpoints,
    Migrations,
    Usage,
    Violations,
    Events,
    Meta,
    /// VEEs recovered away from a silent peer site (model::FenceRec).
    Fenced,
    /// The planner's header and entries (crate::planner_store).
    Planner,
    /// Deploy request IDs and the services they made
    /// (crate::workflows::deploy::request::RequestRec).
    Requests,
    /// Steps under way that act outside the database (crate::intents).
    Intents,
    /// Spare capacity held here for peers' full-guarantee VEEs
    /// (crate::steps::spares::HeldSpare).
    Spares,
    /// Usage records of VEEs run for a peer, not yet pushed to their
    /// primary site: record ID -> the primary's site ID
    /// (crate::workflows::accounting::Accounting::push_usage).
    UsageOutbox,
    /// The latest rolling update of each component: `SERVICE/COMPONENT`
    /// -> crate::domain::rollout::RolloutRec (a tree older VEEMs do not
    /// read: no format change).
    Rollouts,
    /// The replies of mutating VMI calls by caller and request ID
    /// (`vee-request-id`): `crate::api::server::replies::ReplyRec` (a tree
    /// older VEEMs do not read: no format change).
    Replies,
    /// Each VEE's counters at its latest metering round, with the host
    /// they were read on: VEE ID ->
    /// `crate::workflows::accounting::metrics::Meter`, so that a VEEM
    /// that takes over meters on from there and the usage records stay
    /// continuous (a tree older VEEMs do not read: no format change).
    Meters,
    /// The checkpoints whose replication is not settled yet (local-only,
    /// replicating, failed with a retry due, awaiting): checkpoint ID ->
    /// its VEE's ID, so that the replication pass reads those and not
    /// every checkpoint (crate::steps::checkpoints::replication).
    Replications,
    /// The services of this site's own with elasticity rules: service ID
    /// -> `true`, derived from the `services` tree by the commit that
    /// writes a service (`store::derived`), so that the elasticity round
    /// reads those and not every service (crate::workflows::elasticity).
    ElasticServices,
}

impl Tree {
    /// Every tree, in the order a copy of the store goes through them.
    pub const ALL: [Tree; 19] = [
        Tree::Meta,
        Tree::Services,
        Tree::Vees,
        Tree::Checkpoints,
        Tree::Migrations,
        Tree::Usage,
        Tree::Violations,
        Tree::Events,
        Tree::Fenced,
        Tree::Planner,
        Tree::Requests,
        Tree::Intents,
        Tree::Spares,
        Tree::UsageOutbox,
        Tree::Rollouts,
        Tree::Replies,
        Tree::Meters,
        Tree::Replications,
        Tree::ElasticServices,
    ];

    /// Whether an engine that keeps revisions itself (sled, memory: etcd
    /// has its own for every key) keeps the revision that last wrote each
    /// key of this tree: the trees of records a commit may be conditioned
    /// on. Not the bulky ones that are appended or derived (events, usage
    /// and its outbox, checkpoint records, the planner's entries, whose
    /// changes the planner orders itself: `PlannerStore::commit_plan`): at
    /// 100,000 VEEs their revisions would cost the database a third more
    /// and its opening most of a second.
    pub(crate) fn versioned(self) -> bool {
        matches!(
            self,
            Tree::Vees
                | Tree::Services
                | Tree::Migrations
                | Tree::Rollouts
                | Tree::Spares
                | Tree::Intents
                | Tree::Requests
                | Tree::Fenced
                | Tree::Meta
        )
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Tree::Services => "services",
            Tree::Vees => "vees",
            Tree::Checkpoints => "checkpoints",
            Tree::Migrations => "migrations",
            Tree::Usage => "usage",
            Tree::Violations => "violations",
            Tree::Events => "events",
            Tree::Meta => "meta",
            Tree::Fenced => "fenced",
            Tree::Planner => "planner",
            Tree::Requests => "requests",
            Tree::Intents => "intents",
            Tree::Spares => "spares",
            Tree::UsageOutbox => "usage_outbox",
            Tree::Rollouts => "rollouts",
            Tree::Replies => "replies",
            Tree::Meters => "meters",
            Tree::Replications => "replications",
            Tree::ElasticServices => "elastic_services",
        }
    }
}

/// The format of the database this version writes.
///
/// | version | what changed |
/// |---|---|
/// | 0 | (no version key) the layout up to this version: one tree per record kind, JSON values, the planner as a header plus entries or as the legacy single value |
/// | 1 | the version key; records as in 0 |
/// | 2 | usage records' numbers are finite and non-negative: a NaN or infinity a peer could push before was stored as `null` and broke every read of the tree; migrating sets such a number to 0 |
/// | 3 | the `usage_outbox` tree: the usage records still to push to a primary site, so that a round reads those and not every record; migrating fills it from the unsent records whose VEE is known |
/// | 4 | a service record holds its terms (`terms`: SLA and constraints, parsed from the manifest once, at admission); migrating parses each service's stored manifest one last time |
/// | 5 | store revisions: every commit makes one, every key carries the one that last wrote it (in sled, the `_revisions` tree), and commits may be conditioned on them ([`Unchanged`]); a key written before has revision 0, so migrating writes nothing else (an older VEEM, which would write without revisions, refuses the database) |
/// | 6 | a checkpoint record holds its replication (`replication`: `crate::domain::ReplicationRec`), and the `replications` tree lists those not settled; migrating gives each checkpoint the state its situation implies: `replicated` for a VEE run for a peer or at a peer (a VEEM before replicated before it recorded), else `not-needed` |
/// | 7 | a host's metering round is one value of the `usage` tree (key `round/<host>/<ms>`, `workflows::accounting::rounds::HostRound`: its VEEs' records for this site) and one of the `meters` tree (key `host/<host>`: their counters); records of VEEs run for peers and those of before stay one value each, and per-VEE meters are read on; migrating writes nothing (an older VEEM, which would misread a round, refuses the database) |
/// | 8 | the `elastic_services` tree: the services of this site's own with elasticity rules, kept by every commit that writes a service; migrating fills it from the services (an older VEEM, which would write services without it, refuses the database) |
pub const FORMAT_VERSION: u32 = 8;
/// The key of the format version in the meta tree.
pub const FORMAT_KEY: &str = "format_version";

/// Records to write (or, with `None`, remove) in one atomic commit, and
/// the conditions it holds to: [`Store::commit`] writes all of them or,
/// after a crash or when a condition fails, none.
#[derive(Default)]
pub struct Writes {
    writes: Vec<(Tree, String, Option<Vec<u8>>)>,
    unchanged: Vec<Unchanged>,
}

impl Writes {
    /// Adds `value` under `key` in tree `t`.
    pub fn put<T: Serialize>(&mut self, t: Tree, key: &str, value: &T) -> Result<()> {
        self.writes.push((t, key.to_string(), Some(serde_json::to_vec(value)?)));
        Ok(())
    }

    /// Adds raw bytes under `key` in tree `t`.
    pub fn put_raw(&mut self, t: Tree, key: &str, value: Vec<u8>) {
        self.writes.push((t, key.to_string(), Some(value)));
    }

    /// Adds the removal of `key` from tree `t`.
    pub fn remove(&mut self, t: Tree, key: &str) {
        self.writes.push((t, key.to_string(), None));
    }

    /// Conditions the commit on `key` of tree `t` not having been written
    /// (or removed) after revision `since`, when it was read and found
    /// (`existed`) or not (0: never written): else the commit writes
    /// nothing and fails with [`Conflict`].
    pub fn unchanged_since(&mut self, t: Tree, key: &str, since: Revision, existed: bool) {
        self.unchanged.push(Unchanged {
            tree: t,
            key: key.as_bytes().to_vec(),
            since,
            existed,
        });
    }

    /// Whether there is nothing to write (conditions aside).
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
}

/// The VEEM's database: typed records (JSON) in an [`Engine`].
#[derive(Clone)]
pub struct Store {
    engine: Arc<dyn Engine>,
    /// How many events the log holds, as this store's own appends and
    /// prunes keep it (`None`: not counted yet, or an append whose outcome
    /// is unknown): counted once, not by each retention round
    /// ([`Store::prune_events`]).
    events_held: Arc<std::sync::Mutex<Option<u64>>>,
}

impl Store {
    /// Opens (or creates) the sled database at `path` (the embedded
    /// default, [`SledEngine`]), migrating an older format. Errors with
    /// [`interfaces::Error::FormatTooNew`] for a database written by a
    /// newer VEEM.
    pub fn open(path: &Path) -> Result<Self> {
        Self::on(Arc::new(SledEngine::open(path)?), &path.display().to_string())
    }

    /// The database in `engine` (named `what` in errors), migrated as
    /// [`Store::open`] does.
    pub fn on(engine: Arc<dyn Engine>, what: &str) -> Result<Self> {
        let store = Self {
            engine,
            events_held: Default::default(),
        };
        let found = store.get::<u32>(Tree::Meta, FORMAT_KEY)?.unwrap_or(0);
        interfaces::Error::check_format(format!("VEEM database {what}"), found, FORMAT_VERSION)?;
        store.migrate(found)?;
        Ok(store)
    }

    /// Brings a database of format `from` to [`FORMAT_VERSION`].
    fn migrate(&self, from: u32) -> Result<()> {
        if from == FORMAT_VERSION {
            return Ok(());
        }
        // 0 -> 1: the records are read as they are; only the version is new.
        // (The legacy single-value planner of format 0 is replaced by
        // `PlannerStore` at its first save.)
        let mut w = Writes::default();
        if from < 2 {
            self.repair_usage_numbers(&mut w)?;
        }
        if from < 3 {
            self.fill_usage_outbox(&mut w)?;
        }
        if from < 4 {
            self.fill_service_terms(&mut w)?;
        }
        // 4 -> 5: keys written before have revision 0.
        if from < 6 {
            self.fill_checkpoint_replication(&mut w)?;
        }
        // 6 -> 7: the records before are read as they are.
        if from < 8 {
            self.fill_elastic_services(&mut w)?;
        }
        w.put(Tree::Meta, FORMAT_KEY, &FORMAT_VERSION)?;
        self.commit(w).map(|_| ())
    }

    /// 1 -> 2: usage records' numbers repaired.
    fn repair_usage_numbers(&self, w: &mut Writes) -> Result<()> {
        self.scan(Tree::Usage, |key, raw| {
            let Ok(mut rec) = serde_json::from_slice::<serde_json::Value>(raw) else {
                return Ok(());
            };
            let mut repaired = false;
            for field in ["cpu_seconds", "memory_mib_seconds"] {
                if !rec[field].as_f64().is_some_and(|x| x >= 0.0) {
                    tracing::warn!(record = %key, field, value = %rec[field], "usage record repaired: set to 0");
                    rec[field] = serde_json::json!(0.0);
                    repaired = true;
                }
            }
            if repaired {
                w.put(Tree::Usage, key, &rec)?;
            }
            Ok(())
        })
    }

    /// 2 -> 3: the unsent usage records of VEEs run for a peer go to the
    /// outbox, addressed to that peer (a record whose VEE is gone was
    /// never pushed before either: it stays unsent).
    fn fill_usage_outbox(&self, w: &mut Writes) -> Result<()> {
        let mut primaries = std::collections::HashMap::new();
        self.scan(Tree::Vees, |key, raw| {
            let vee = serde_json::from_slice::<serde_json::Value>(raw).unwrap_or_default();
            if let Some(site) = vee["for_peer"].as_str() {
                primaries.insert(key.to_string(), site.to_string());
            }
            Ok(())
        })?;
        // Read as JSON values: a format-1 record may still hold a null
        // number here (repaired in the same commit).
        self.scan(Tree::Usage, |key, raw| {
            let Ok(rec) = serde_json::from_slice::<serde_json::Value>(raw) else {
                return Ok(());
            };
            let unsent = rec["sent"] == serde_json::json!(false);
            if let (true, Some(site)) = (unsent, rec["vee_id"].as_str().and_then(|v| primaries.get(v))) {
                w.put(Tree::UsageOutbox, key, site)?;
            }
            Ok(())
        })
    }

    /// 3 -> 4: each service's terms from its stored manifest (a service
    /// run for a peer has none; a manifest this version no longer reads
    /// leaves them unset, and says so).
    fn fill_service_terms(&self, w: &mut Writes) -> Result<()> {
        self.scan(Tree::Services, |key, raw| {
            let Ok(mut rec) = serde_json::from_slice::<serde_json::Value>(raw) else {
                return Ok(());
            };
            let toml = rec["manifest_toml"].as_str().unwrap_or_default();
            if toml.is_empty() || !rec["terms"].is_null() {
                return Ok(());
            }
            match interfaces::manifest::Manifest::from_toml(toml) {
                Ok(m) => {
                    rec["terms"] = serde_json::to_value(crate::domain::ServiceTerms::of(&m))?;
                    w.put(Tree::Services, key, &rec)?;
                }
                Err(e) => tracing::warn!(service = %key, error = %e, "stored manifest not read: the service has no terms"),
            }
            Ok(())
        })
    }

    /// 7 -> 8: the `elastic_services` tree from the services.
    fn fill_elastic_services(&self, w: &mut Writes) -> Result<()> {
        self.scan(Tree::Services, |key, raw| {
            if derived::has_elasticity_rules(raw) {
                w.put_raw(Tree::ElasticServices, key, derived::MARK.to_vec());
            }
            Ok(())
        })
    }

    /// Calls `f` with every key and raw value of a tree, in key order,
    /// without holding them all in memory at once.
    pub fn scan(&self, t: Tree, mut f: impl FnMut(&str, &[u8]) -> Result<()>) -> Result<()> {
        self.engine.scan(t, &mut |k, v| Ok(f(&String::from_utf8_lossy(k), v)?))
    }

    /// Calls `f` with the keys of tree `t` after `after` (`None`: from the
    /// first) and their raw values, in key order, a few at a time, until
    /// `f` answers false or the tree ends: a reader of one page of a large
    /// tree reads that page, not the tree.
    pub fn scan_after(&self, t: Tree, after: Option<&str>, mut f: impl FnMut(&str, &[u8]) -> Result<bool>) -> Result<()> {
        const CHUNK: usize = 128;
        // The least key greater than `after`: `after` and a zero byte.
        let mut start: Vec<u8> = after.map(|a| [a.as_bytes(), &[0]].concat()).unwrap_or_default();
        loop {
            let (mut seen, mut last, mut more) = (0, None, true);
            self.engine.scan_from(t, &start, CHUNK, &mut |k, v| {
                seen += 1;
                last = Some(k.to_vec());
                if more {
                    more = f(&String::from_utf8_lossy(k), v)?;
                }
                Ok(())
            })?;
            match last {
                Some(k) if more && seen == CHUNK => start = [&k[..], &[0]].concat(),
                _ => return Ok(()),
            }
        }
    }

    /// Applies `writes`, across trees, at once (all or nothing, also
    /// across a crash), when their conditions hold; returns the revision
    /// the commit made. Errors: [`Conflict`] (nothing written) when a
    /// record it was conditioned on was written since it was read; the
    /// engine's.
    ///
    /// The trees derived from the ones written ([`derived`]) are written
    /// in the same commit.
    pub fn commit(&self, mut writes: Writes) -> Result<Revision> {
        writes.derive();
        let Writes { writes, unchanged } = writes;
        let writes = writes.into_iter().map(|(t, k, v)| (t, k.into_bytes(), v)).collect();
        self.engine.commit(writes, &unchanged)
    }

    /// The revision of the last commit: noted before a read, it is what
    /// the commit that follows is conditioned on.
    pub fn revision(&self) -> Result<Revision> {
        self.engine.revision()
    }

    /// Writes `value` under `key`.
    pub fn put<T: Serialize>(&self, t: Tree, key: &str, value: &T) -> Result<()> {
        let mut w = Writes::default();
        w.put(t, key, value)?;
        self.commit(w).map(|_| ())
    }

    /// Writes `value` under `key` unless the key exists; true when written.
    pub fn put_new<T: Serialize>(&self, t: Tree, key: &str, value: &T) -> Result<bool> {
        self.engine.insert_new(t, key.as_bytes(), serde_json::to_vec(value)?)
    }

    pub fn get<T: DeserializeOwned>(&self, t: Tree, key: &str) -> Result<Option<T>> {
        match self.engine.get(t, key.as_bytes())? {
            Some(v) => Ok(Some(
                serde_json::from_slice(&v).with_context(|| format!("{} record {key}", t.name()))?,
            )),
            None => Ok(None),
        }
    }

    /// The raw value under `key` of tree `t`, if any (a value that is not
    /// one record: `workflows::accounting::rounds`).
    pub fn get_raw(&self, t: Tree, key: &str) -> Result<Option<Vec<u8>>> {
        self.engine.get(t, key.as_bytes())
    }

    /// Every record of a tree, in key order.
    pub fn list<T: DeserializeOwned>(&self, t: Tree) -> Result<Vec<T>> {
        let mut all = Vec::new();
        self.engine.scan(t, &mut |_, v| {
            all.push(serde_json::from_slice(v)?);
            Ok(())
        })?;
        Ok(all)
    }

    /// Whether tree `t` holds no record (reads at most one).
    pub fn is_empty(&self, t: Tree) -> Result<bool> {
        let mut empty = true;
        let r = self.engine.scan(t, &mut |_, _| {
            empty = false;
            anyhow::bail!("one is enough")
        });
        match r {
            Err(_) if !empty => Ok(false),
            other => other.map(|()| empty),
        }
    }

    pub fn remove(&self, t: Tree, key: &str) -> Result<()> {
        let mut w = Writes::default();
        w.remove(t, key);
        self.commit(w).map(|_| ())
    }
}

#[cfg(test)]
mod tests;
