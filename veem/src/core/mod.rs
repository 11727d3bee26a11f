//! The core every workflow of the VEEM shares (issue 37): the
//! configuration, the database, the planner, the ports (hosts, peers, the
//! image repository, the clock), the record cache of every VEE, the per-VEE
//! locks, state changes through the transition table (`transition`,
//! `commit_transitions`: one write), events, and the task set a stop
//! drains. It holds no workflow's own state and calls no workflow: the
//! workflows (and the `Veem` facade that builds them) sit on it.

mod error;
mod event_log;
mod loaded;
mod reads;
mod records;
pub mod replica;

pub use error::{store_error_in, RecordError};
pub use loaded::{renew_ahead_s, Loaded};

use std::sync::{Arc, Mutex, RwLock};

use anyhow::Result;
use tokio::sync::broadcast;

use crate::config::VeemConfig;
use crate::domain::StateMachine;
use crate::hosts::HostPool;
use crate::model::{EventRec, ServiceRec, VeeRec, VeeState};
use crate::planner::{AdmissionPlan, Admitted, Planner, PlannerConfig, RankPolicy, SlotClock, Stale};
use crate::planner_store::PlannerStore;
use crate::ports::{Clock, ImageRepository, PeerDirectory, Ports};
use crate::store::{Revision, Store, StoreError, Tree, Writes};
use records::VeeRecords;

/// The VEEM's shared state (see the module doc).
pub struct Core {
    pub(crate) cfg: VeemConfig,
    pub(crate) store: Store,
    /// Never held across an `.await`.
    pub(crate) planner: Mutex<Planner>,
    pub(crate) planner_store: PlannerStore,
    /// The planner's slot clock (fixed when the planner is created), kept
    /// here so that reading the time never takes the planner's lock.
    pub(crate) slots: SlotClock,
    /// The time (a port: tests set it).
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) hosts: HostPool,
    pub(crate) repo: Arc<dyn ImageRepository>,
    /// The OCI registries the site trusts.
    pub(crate) registries: Arc<interfaces::registry::Registries>,
    peer_directory: Arc<dyn PeerDirectory>,
    /// What the VEEM counts as it works (`crate::metrics`).
    pub(crate) metrics: Arc<crate::metrics::VeemMetrics>,
    /// Every event as it is recorded (the VMI's WatchEvents follows it).
    pub(crate) events: broadcast::Sender<EventRec>,
    /// Every VEE record by ID, written through to the store, with when
    /// each is next due ([`records`]): the periodic loops read this instead
    /// of decoding the database each time, and the per-second rounds only
    /// the records that are due.
    vee_records: RwLock<VeeRecords>,
    vee_locks: Mutex<interfaces::locks::LockMap>,
    /// VEEs with a background task (deploy, checkpoint) under way, so the
    /// scheduler does not queue another.
    busy: Mutex<std::collections::HashSet<String>>,
    /// Cancelled when the VEEM stops: event streams end.
    pub(crate) stopping: tokio_util::sync::CancellationToken,
    /// The background work the workflows start (a deploy's boots, a
    /// recovery, a migration, a checkpoint due): a stop drains it
    /// ([`Core::drain_tasks`]).
    tasks: tokio_util::task::TaskTracker,
}

/// How many times an admission (Deploy, Scaling) is planned again when the
/// planner changed between its plan and its commit (other admissions, a
/// recovery) before it gives up (then ABORTED).
pub const PLAN_ATTEMPTS: u32 = 5;

/// The rank policy named in the configuration.
pub fn rank_policy(name: &str) -> RankPolicy {
    match name {
        "striping" => RankPolicy::Striping,
        "load-aware" => RankPolicy::LoadAware,
        _ => RankPolicy::Packing,
    }
}

impl Core {
    /// The core of site `cfg.site_id` over database `store` and `ports`:
    /// the planner restored from the store (or an empty one), the VEE
    /// records read. Errors: a database of another site, a record that
    /// cannot be read, a host the configuration names twice.
    pub fn open(cfg: VeemConfig, ports: Ports, store: Store) -> Result<Self> {
        Self::check_site(&cfg, &store)?;
        let loaded = Loaded::read(&cfg, &store)?;
        Self::assemble(cfg, ports, store, loaded)
    }

    /// [`Core::open`] from the records and planner a standby kept current
    /// ([`replica::Replica`]) instead of reading them from the store.
    pub(crate) fn open_loaded(cfg: VeemConfig, ports: Ports, store: Store, loaded: Loaded) -> Result<Self> {
        Self::check_site(&cfg, &store)?;
        Self::assemble(cfg, ports, store, loaded)
    }

    /// A database belongs to one site: another site's is refused, never
    /// mistaken for this one's; a new one is marked as this site's.
    fn check_site(cfg: &VeemConfig, store: &Store) -> Result<()> {
        match store.get::<String>(Tree::Meta, "site_id")? {
            Some(site) if site != cfg.site_id => match cfg.store.engine {
                crate::config::EngineKind::Sled => anyhow::bail!(
                    "database {} belongs to site {site:?}, not to {:?} (field `db`)",
                    cfg.db.display(),
                    cfg.site_id
                ),
                crate::config::EngineKind::Etcd => anyhow::bail!(
                    "etcd prefix {:?} belongs to site {site:?}, not to {:?} (field `store.prefix`)",
                    cfg.store.prefix(&cfg.site_id),
                    cfg.site_id
                ),
            },
            Some(_) => Ok(()),
            None => Ok(store.put(Tree::Meta, "site_id", &cfg.site_id)?),
        }
    }

    fn assemble(cfg: VeemConfig, ports: Ports, store: Store, loaded: Loaded) -> Result<Self> {
        let Loaded {
            records,
            planner: saved,
            planner_store,
        } = loaded;
        let mut planner: Planner = match saved {
            Some(p) => p,
            None => Planner::new(PlannerConfig {
                clock: SlotClock::new(0, cfg.slot.as_secs() as u32),
                ..PlannerConfig::default()
            }),
        };
        planner.set_rank_policy(rank_policy(&cfg.rank_policy));
        planner.replace_usage_limits(
            cfg.usage_limits
                .iter()
                .map(|(name, l)| (name.clone(), l.to_planner(cfg.slot.as_secs()))),
        );
        let slots = planner.clock();
        let hosts = HostPool::new(&cfg.site_id, &cfg.hosts, &ports.hosts, ports.clock.clone())?;
        let (events, _) = broadcast::channel(1024);
        Ok(Self {
            cfg,
            store,
            planner: Mutex::new(planner),
            planner_store,
            slots,
            clock: ports.clock,
            hosts,
            repo: ports.repo,
            registries: ports.registries,
            peer_directory: ports.peers,
            metrics: ports.metrics,
            events,
            vee_records: RwLock::new(records),
            vee_locks: Mutex::new(Default::default()),
            busy: Mutex::new(Default::default()),
            stopping: Default::default(),
            tasks: Default::default(),
        })
    }

    /// Runs `work` in the background as one of the VEEM's own tasks, which
    /// a stop drains ([`Core::drain_tasks`]) rather than cuts at the exit.
    pub fn spawn(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(work);
    }

    /// [`Core::spawn`], with the task's handle (a loop, which its owner
    /// stops and awaits on its own).
    pub fn spawn_task<T: Send + 'static>(&self, work: impl std::future::Future<Output = T> + Send + 'static) -> tokio::task::JoinHandle<T> {
        self.tasks.spawn(work)
    }

    /// Waits for the background work under way (and what it starts
    /// meanwhile), at most `grace`. Returns the number of tasks still
    /// running then (cut with the process).
    pub async fn drain_tasks(&self, grace: std::time::Duration) -> usize {
        self.tasks.close();
        if crate::ports::within(&*self.clock, grace, self.tasks.wait()).await.is_none() {
            return self.tasks.len();
        }
        0
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &VeemConfig {
        &self.cfg
    }

    /// The database.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The planner, locked (never hold it across an `.await`).
    pub fn planner(&self) -> std::sync::MutexGuard<'_, Planner> {
        self.planner.lock().unwrap()
    }

    /// Writes what changed in the planner's state (reservations, hosts,
    /// services) since the last write (see [`PlannerStore`]).
    pub fn persist_planner(&self) -> Result<(), StoreError> {
        self.planner_store.save(&self.planner)
    }

    /// Writes an admission in one atomic commit: the planner's changes,
    /// the VEE records `vees` and the service record `svc`. After a crash
    /// either all of them are there or none (no reservation without its
    /// VEEs, no VEE without its service).
    pub fn commit_admission(&self, svc: &ServiceRec, vees: &[VeeRec]) -> Result<(), StoreError> {
        self.commit_admission_with(svc, vees, Writes::default())
    }

    /// [`Core::commit_admission`] with more records `w` in the same commit
    /// (Deploy's request record).
    pub fn commit_admission_with(&self, svc: &ServiceRec, vees: &[VeeRec], mut w: Writes) -> Result<(), StoreError> {
        let vees = self.admission_writes(svc, vees, &mut w)?;
        let revision = self
            .planner_store
            .save_with(&self.planner, w)
            .map_err(|e| self.reload_on_conflict_of(e, vees.iter().map(|v| v.id.as_str())))?;
        self.cache_new_vees(vees, revision);
        Ok(())
    }

    /// Commits an admission planned on the planner as it was (Deploy;
    /// [`crate::planner::plan`]): the plan's planner entries, the VEE
    /// records `vees`, the service record `svc` and `w` in one write, then
    /// the plan applied to the live planner. `Ok(Err(Stale))`, with nothing
    /// written, when the planner changed since the plan: plan again.
    /// Errors: the store's (nothing written, nothing applied).
    pub fn commit_admission_plan(
        &self,
        plan: AdmissionPlan,
        svc: &ServiceRec,
        vees: &[VeeRec],
        mut w: Writes,
    ) -> Result<Result<Admitted, Stale>, StoreError> {
        let vees = self.admission_writes(svc, vees, &mut w)?;
        let (admitted, revision) = match self.planner_store.commit_plan(&self.planner, plan, w) {
            Ok(Ok(done)) => done,
            Ok(Err(stale)) => return Ok(Err(stale)),
            Err(e) => return Err(self.reload_on_conflict_of(e, vees.iter().map(|v| v.id.as_str()))),
        };
        self.cache_new_vees(vees, revision);
        Ok(Ok(admitted))
    }

    /// The records of a new admission into `w`: the service and its VEEs
    /// (their stays from now), each VEE on the condition that nobody wrote
    /// it since this VEEM last knew it absent; returns the VEEs as
    /// written.
    fn admission_writes(&self, svc: &ServiceRec, vees: &[VeeRec], w: &mut Writes) -> Result<Vec<VeeRec>, StoreError> {
        let now = self.clock.now();
        let vees: Vec<VeeRec> = vees
            .iter()
            .map(|v| VeeRec {
                stays: v.stays_after(None, now),
                ..v.clone()
            })
            .collect();
        let records = self.vee_records.read().unwrap();
        for v in &vees {
            w.put(Tree::Vees, &v.id, v)?;
            records.condition(w, &v.id);
        }
        w.put(Tree::Services, &svc.id, svc)?;
        Ok(vees)
    }

    /// New records, written at `revision`: nobody else writes them yet, so
    /// the map may follow the store (the planner's lock is not held here).
    fn cache_new_vees(&self, vees: Vec<VeeRec>, revision: Revision) {
        let mut records = self.vee_records.write().unwrap();
        for v in vees {
            records.insert(v, revision);
        }
    }

    /// `e`, after reading again the records of `ids` when it is a
    /// [`Conflict`](crate::store::Conflict) (another VEEM of the site wrote one since this one
    /// read it): the next command on them starts from what is stored.
    /// `e`, after reading again the records of `ids` when it is a
    /// [`Conflict`](crate::store::Conflict) (another VEEM of the site wrote one since this one
    /// read it): the next command on them starts from what is stored.
    fn reload_on_conflict_of<'a>(&self, e: StoreError, ids: impl IntoIterator<Item = &'a str>) -> StoreError {
        if let StoreError::Conflict(_) = e {
            for id in ids {
                if let Err(err) = self.reload_vee(id) {
                    tracing::warn!(vee = %id, error = %format!("{err:#}"), "cannot read the VEE record again");
                }
            }
        }
        e
    }

    /// Reads VEE `id`'s record again from the store (another VEEM of the
    /// site may have written it): the record cache follows. Returns the
    /// record, `None` when there is none any more.
    pub fn reload_vee(&self, id: &str) -> Result<Option<VeeRec>, StoreError> {
        let mut records = self.vee_records.write().unwrap();
        let revision = self.store.revision()?;
        let stored: Option<VeeRec> = self.store.get(Tree::Vees, id)?;
        match &stored {
            Some(v) => records.insert(v.clone(), revision),
            None => records.remove(id, revision),
        }
        Ok(stored)
    }

    /// Serialises operations on one VEE.
    pub async fn lock_vee(&self, vee_id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let m = interfaces::locks::entry(&mut self.vee_locks.lock().unwrap(), vee_id);
        m.lock_owned().await
    }

    /// The VEE's lock if nobody holds it now (an operation on it is under
    /// way otherwise).
    pub fn try_lock_vee(&self, vee_id: &str) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let m = interfaces::locks::entry(&mut self.vee_locks.lock().unwrap(), vee_id);
        m.try_lock_owned().ok()
    }

    /// Marks `vee_id` busy with a background task; false if it already is.
    pub fn try_busy(&self, vee_id: &str) -> bool {
        self.busy.lock().unwrap().insert(vee_id.to_string())
    }

    pub fn unbusy(&self, vee_id: &str) {
        self.busy.lock().unwrap().remove(vee_id);
    }

    /// Writes a VEE record (flushed to the store first), on the condition
    /// that nobody wrote it since this VEEM read it. Its stays at peer
    /// sites follow its location ([`VeeRec::stays_after`]). Errors:
    /// [`Conflict`](crate::store::Conflict) (nothing written; the record is read again), the
    /// store's.
    pub fn save_vee(&self, v: &VeeRec) -> Result<(), StoreError> {
        self.write_vee(&v.id, Some(v))
    }

    /// Forgets a VEE record (on the same condition as [`Core::save_vee`]).
    pub fn remove_vee(&self, id: &str) -> Result<(), StoreError> {
        self.write_vee(id, None)
    }

    /// Writes VEE `id`'s record `v` (`None`: removes it) as
    /// [`Core::save_vee`] says.
    fn write_vee(&self, id: &str, v: Option<&VeeRec>) -> Result<(), StoreError> {
        // Read under the record cache's lock, committed without it (a
        // commit may wait for etcd or a slow disk, and every reader of the
        // cache with it), applied after: the commit is conditioned on the
        // revision the record was read at, so a write that raced this one
        // fails as a conflict rather than lands out of order.
        let (v, w) = {
            let records = self.vee_records.read().unwrap();
            let v = v.map(|v| VeeRec {
                stays: v.stays_after(records.get(id), self.clock.now()),
                ..v.clone()
            });
            let mut w = Writes::default();
            match &v {
                Some(v) => w.put(Tree::Vees, id, v)?,
                None => w.remove(Tree::Vees, id),
            }
            records.condition(&mut w, id);
            (v, w)
        };
        match self.store.commit(w) {
            Ok(revision) => self.vee_records.write().unwrap().apply_commit(id, v, revision),
            Err(e) => return Err(self.reload_on_conflict_of(e, [id])),
        }
        Ok(())
    }

    /// Changes a VEE's state, persists it and emits the transition event.
    /// Errors with [`crate::domain::InvalidTransition`] (and changes
    /// nothing) when the VEE state table does not allow the change, with
    /// [`Conflict`](crate::store::Conflict) (nothing written, `vee` as it was) when another VEEM
    /// of the site wrote the record since this one read it.
    pub fn transition(&self, vee: &mut VeeRec, to: VeeState, detail: impl Into<String>) -> Result<(), RecordError> {
        let before = vee.clone();
        vee.state = before.state.transition(&vee.id, to)?;
        vee.updated_ms = self.clock.now_ms();
        if let Err(e) = self.save_vee(vee) {
            *vee = before;
            return Err(e.into());
        }
        self.transition_event(vee, before.state, vee.state, detail);
        Ok(())
    }

    /// [`Core::transition`] for a command that writes several records:
    /// the VEE, the planner's changes since the last write and `extra`
    /// (e.g. the migration record) go to the store in one commit. The
    /// caller holds the VEE's lock.
    pub fn transition_committing(&self, vee: &mut VeeRec, to: VeeState, detail: impl Into<String>, extra: Writes) -> Result<(), RecordError> {
        self.commit_transitions(&mut [(vee, vec![(to, detail.into())])], extra)
    }

    /// Moves each VEE through its states in order (each step checked
    /// against the transition table, each with its event's detail), and
    /// writes the VEEs, the planner's changes since the last write and
    /// `extra` in one commit: a crash leaves all of it or none (issue 13
    /// R1: a recovery or migration step is one write). The caller holds
    /// the VEEs' locks. Errors: a step the table forbids (nothing is
    /// written), or the store's.
    pub fn commit_transitions(&self, changes: &mut [(&mut VeeRec, Vec<(VeeState, String)>)], extra: Writes) -> Result<(), RecordError> {
        let now_ms = self.clock.now_ms();
        let mut w = extra;
        let mut events = Vec::new();
        let before: Vec<VeeRec> = changes.iter().map(|(v, _)| (**v).clone()).collect();
        let checked = (|| -> Result<(), RecordError> {
            let records = self.vee_records.read().unwrap();
            for (vee, steps) in changes.iter_mut() {
                for (to, detail) in steps.iter() {
                    let from = vee.state;
                    vee.state = from.transition(&vee.id, *to)?;
                    events.push((vee.id.clone(), from, *to, detail.clone()));
                }
                vee.updated_ms = now_ms;
                vee.stays = vee.stays_after(records.get(&vee.id), self.clock.now());
                w.put(Tree::Vees, &vee.id, &**vee)?;
                records.condition(&mut w, &vee.id);
            }
            Ok(())
        })();
        let written = checked.and_then(|()| {
            let ids = changes.iter().map(|(v, _)| v.id.as_str());
            Ok(self
                .planner_store
                .save_with(&self.planner, w)
                .map_err(|e| self.reload_on_conflict_of(e, ids))?)
        });
        let revision = match written {
            Ok(r) => r,
            Err(e) => {
                for ((vee, _), old) in changes.iter_mut().zip(before) {
                    **vee = old;
                }
                return Err(e);
            }
        };
        let mut records = self.vee_records.write().unwrap();
        for (vee, _) in changes.iter() {
            records.apply_commit(&vee.id, Some((**vee).clone()), revision);
        }
        drop(records);
        for (id, from, to, detail) in events {
            if let Some((vee, _)) = changes.iter().find(|(v, _)| v.id == id) {
                self.transition_event(vee, from, to, detail);
            }
        }
        Ok(())
    }

    fn transition_event(&self, vee: &VeeRec, from: VeeState, to: VeeState, detail: impl Into<String>) {
        let d: String = detail.into();
        let text = if d.is_empty() {
            format!("{} -> {}", from.as_str(), to.as_str())
        } else {
            format!("{} -> {}: {d}", from.as_str(), to.as_str())
        };
        self.event(&vee.id, &vee.service_id, "state", text);
    }

    /// Current slot of the planner's clock; takes no lock, so it may be
    /// called with the planner locked.
    pub fn now_slot(&self) -> crate::planner::Slot {
        self.slots.slot_at(self.clock.now())
    }

    /// Peer site `site`. Errors, as a call that could not be made: not a
    /// peer of this site ([`Failure::NotFound`](crate::ports::call::Failure::NotFound)), marked unavailable in the
    /// configuration or not reachable (`Unreachable`).
    pub fn peer(&self, site: &str) -> Result<crate::ports::peer_site::PeerSite, crate::ports::call::CallError> {
        use crate::ports::call::{CallError, Failure};
        let failed = |failure, e: anyhow::Error| CallError {
            failure,
            message: format!("{e:#}"),
        };
        let entry = crate::peers::peer(&self.cfg, site).map_err(|e| {
            let known = self.cfg.peers.iter().any(|p| p.site_id == site);
            failed(if known { Failure::Unreachable } else { Failure::NotFound }, e)
        })?;
        let peer = self.peer_directory.connect(entry).map_err(|e| failed(Failure::Unreachable, e))?;
        Ok(crate::ports::peer_site::PeerSite::new(
            peer,
            site,
            self.metrics.clone(),
            self.clock.clone(),
        ))
    }
}

#[cfg(test)]
mod tests;
