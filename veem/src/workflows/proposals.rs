//! Migrations the planner proposes by itself (DESIGN.md §7 "Proposals").
//!
//! Every `proposals.interval` a pass looks at the site and
//! proposes moves as [`MigrationRec`]s through [`Migration::propose`](crate::workflows::migration::Migration::propose), which
//! persists and events them; the site policy (`migration.auto_approve`)
//! runs some at once, the rest wait for an operator. Reasons, checked in
//! this order (an operator's `drain` is the fourth, `maintenance`):
//!
//! - `failure-risk`: the VEE's host is missing heartbeats
//!   ([`Health::Missing`], not yet failed);
//! - `sla-at-risk`: the VEE has a checkpoint interval and no checkpoint
//!   taken on its current host for more than twice that interval (its
//!   latest checkpoint, or the time the VEE was first seen running on the
//!   host, whichever is later): the SLA's recovery guarantee no longer
//!   holds there;
//! - `consolidation` (only with `proposals.consolidation = true`): every
//!   VEE of the least-loaded host moves onto other non-empty hosts, so
//!   that the host can be emptied.
//!
//! Rules for all: only `Running` VEEs on a host of this site whose SLA
//! allows migration (not `none`); at most one open proposal (proposed,
//! approved, running) per VEE; once a proposal was rejected by an operator
//! or failed, the same reason is not proposed for that VEE again within
//! `proposals.hold` of its creation; targets are hosts that answer
//! heartbeats ([`Health::Up`]) and that no open proposal is moving VEEs
//! off; every move passes the planner's check (capacity in every slot,
//! compatibility profile, affinity constraints), cumulatively over the
//! pass.
//!
//! The decisions are pure functions over a [`Snapshot`] ([`plan`]); the
//! VEEM builds the snapshot, calls them and proposes ([`Proposals::proposal_pass`]).

use std::collections::{BTreeSet, HashMap};
use std::ops::Deref;
use std::sync::Arc;


use crate::core::Core;
use crate::domain::Health;
use crate::model::{Location, MigrationRec, MigrationState, VeeState};
use crate::planner::{Planner, Resources, Slot};
use crate::store::{StoreError, Tree};
use crate::workflows::migration::Migration;
use crate::workflows::migration::{Dest, Proposer};

#[cfg(test)]
mod tests;

pub use crate::domain::Reason;

/// A host as a pass sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct HostView {
    pub name: String,
    pub health: Health,
    /// Capacity usable for VEEs.
    pub capacity: Resources,
    /// Reserved in the current slot.
    pub used: Resources,
}

/// A VEE as a pass sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct VeeView {
    pub id: String,
    pub state: VeeState,
    pub location: Location,
    /// False when the SLA's migration policy is `none`.
    pub migratable: bool,
    /// Checkpoint period in seconds; `None`: on demand only.
    pub checkpoint_interval_s: Option<u64>,
    /// When the latest checkpoint was taken, ms since the Unix epoch.
    pub last_checkpoint_ms: Option<i64>,
    /// When the VEEM first saw it live on its current host, ms since the
    /// Unix epoch (at most one pass late).
    pub on_host_since_ms: i64,
}

/// A migration that is proposed, approved or running; `from` and `to` are
/// host names, `None` for a peer site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenMove {
    pub vee_id: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
}

/// What a pass decides on.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// In configuration order (the order targets are tried in).
    pub hosts: Vec<HostView>,
    /// The live VEEs on hosts a pass may decide on: every one with
    /// consolidation, else those on a host missing heartbeats and those
    /// overdue (`Proposals::proposal_snapshot`; [`plan`] takes any).
    pub vees: Vec<VeeView>,
    pub open: Vec<OpenMove>,
    /// (VEE, reason) pairs of proposals rejected or failed within the hold
    /// time.
    pub held: BTreeSet<(String, Reason)>,
    /// Whether consolidation is enabled.
    pub consolidation: bool,
    /// Seconds a VEE must have been on its host before consolidation moves
    /// it.
    pub settle_s: u64,
}

/// One proposal a pass makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    pub vee_id: String,
    /// Target host.
    pub to: String,
    pub reason: Reason,
}

/// The planner's check of moves, on a working copy that accumulates them.
pub trait Mover: Clone {
    /// Moves `vee`'s reservation to host `to` in this copy; false (and no
    /// change) when capacity, profile, host state or constraints forbid it.
    fn try_move(&mut self, vee: &str, to: &str) -> bool;
}

/// The real planner, moving reservations from slot `now` on: copied from
/// `source` when the first move is tried (a pass that tries none copies
/// nothing).
#[derive(Clone, Debug)]
pub struct PlannerMover<'a> {
    pub source: &'a std::sync::Mutex<Planner>,
    pub copy: Option<Planner>,
    pub now: Slot,
}

impl Mover for PlannerMover<'_> {
    fn try_move(&mut self, vee: &str, to: &str) -> bool {
        let p = self.copy.get_or_insert_with(|| self.source.lock().unwrap().clone());
        p.move_vee(vee, to, self.now).is_ok()
    }
}

/// States in which a VEE holds its host (whatever it does there).
fn occupies(v: &VeeView) -> Option<&str> {
    match (&v.location, v.state) {
        (_, VeeState::Stopped | VeeState::Terminated | VeeState::Rejected) => None,
        (Location::Host(h), _) => Some(h),
        _ => None,
    }
}

/// Whether `v` has run more than twice its checkpoint interval on its host
/// without a checkpoint.
fn overdue(v: &VeeView, now_ms: i64) -> bool {
    overdue_at(v.checkpoint_interval_s, v.last_checkpoint_ms, v.on_host_since_ms, now_ms)
}

/// [`overdue`] of a VEE's fields: its checkpoint interval in seconds,
/// its last checkpoint's time and since when it is on its host (ms since
/// the Unix epoch).
fn overdue_at(interval_s: Option<u64>, last_checkpoint_ms: Option<i64>, on_host_since_ms: i64, now_ms: i64) -> bool {
    let Some(every) = interval_s else { return false };
    let since = last_checkpoint_ms.unwrap_or(i64::MIN).max(on_host_since_ms);
    now_ms - since > 2 * every as i64 * 1000
}

/// The state a pass builds its proposals on.
struct Pass<'a, M> {
    s: &'a Snapshot,
    mover: &'a mut M,
    out: Vec<Proposal>,
    /// VEEs with an open proposal or one of this pass.
    taken: BTreeSet<String>,
    /// Hosts that open proposals or this pass move VEEs off / onto.
    sources: BTreeSet<String>,
    targets: BTreeSet<String>,
}

impl<M: Mover> Pass<'_, M> {
    /// Whether the pass may propose `reason` for `v` at all.
    fn eligible(&self, v: &VeeView, reason: Reason) -> bool {
        v.state == VeeState::Running
            && v.migratable
            && matches!(v.location, Location::Host(_))
            && !self.taken.contains(&v.id)
            && !self.s.held.contains(&(v.id.clone(), reason))
    }

    fn up(&self, host: &str) -> bool {
        self.s.hosts.iter().any(|h| h.name == host && h.health == Health::Up)
    }

    fn record(&mut self, vee: &str, from: &str, to: &str, reason: Reason) {
        self.out.push(Proposal {
            vee_id: vee.into(),
            to: to.into(),
            reason,
        });
        self.taken.insert(vee.into());
        self.sources.insert(from.into());
        self.targets.insert(to.into());
    }

    /// Moves `v` off its host to the first host in configuration order that
    /// is up, not being emptied, allowed by `ok` and by the planner.
    fn evacuate(&mut self, v: &VeeView, reason: Reason, ok: impl Fn(&str) -> bool) {
        let Location::Host(from) = &v.location else { return };
        let names: Vec<String> = self.s.hosts.iter().map(|h| h.name.clone()).collect();
        for to in names {
            if &to != from && self.up(&to) && !self.sources.contains(&to) && ok(&to) && self.mover.try_move(&v.id, &to) {
                self.record(&v.id, from, &to, reason);
                return;
            }
        }
    }

    fn failure_risk(&mut self) {
        let s = self.s;
        let at_risk: BTreeSet<&str> = s
            .hosts
            .iter()
            .filter(|h| matches!(h.health, Health::Missing(n) if n >= 1))
            .map(|h| h.name.as_str())
            .collect();
        for v in &s.vees {
            if self.eligible(v, Reason::FailureRisk) && occupies(v).is_some_and(|h| at_risk.contains(h)) {
                self.evacuate(v, Reason::FailureRisk, |_| true);
            }
        }
    }

    /// Overdue VEEs on hosts that are up; never onto a host where a running
    /// VEE is overdue too (checkpoints fail there as well, or site-wide).
    fn sla_at_risk(&mut self) {
        let (s, now) = (self.s, self.s.now_ms);
        let failing: BTreeSet<&str> = s
            .vees
            .iter()
            .filter(|v| v.state == VeeState::Running && overdue(v, now))
            .filter_map(occupies)
            .collect();
        for v in &s.vees {
            if self.eligible(v, Reason::SlaAtRisk) && overdue(v, now) && occupies(v).is_some_and(|h| self.up(h)) {
                self.evacuate(v, Reason::SlaAtRisk, |to| !failing.contains(to));
            }
        }
    }

    /// One source host per pass, and none while a consolidation is open.
    fn consolidation(&mut self) {
        let s = self.s;
        if !s.consolidation || s.open.iter().any(|m| m.reason == Reason::Consolidation.as_str()) {
            return;
        }
        let mut on: HashMap<&str, Vec<&VeeView>> = HashMap::new();
        for v in &s.vees {
            if let Some(h) = occupies(v) {
                on.entry(h).or_default().push(v);
            }
        }
        // Load: (VEEs on the host, permille of its memory reserved).
        let load = |h: &HostView| {
            (
                on.get(h.name.as_str()).map_or(0, Vec::len),
                h.used.memory_mib * 1000 / h.capacity.memory_mib.max(1),
            )
        };
        let mut hosts: Vec<(usize, &HostView)> = s
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.health == Health::Up && on.contains_key(h.name.as_str()))
            .collect();
        hosts.sort_by_key(|(i, h)| (load(h), *i));
        let settled = |v: &VeeView| s.now_ms - v.on_host_since_ms >= s.settle_s as i64 * 1000;
        for (_, src) in &hosts {
            let vees = &on[src.name.as_str()];
            let movable = vees.iter().all(|v| self.eligible(v, Reason::Consolidation) && settled(v));
            if !movable || self.targets.contains(&src.name) || self.sources.contains(&src.name) {
                continue;
            }
            // Targets: the most loaded first; never a host being emptied.
            let targets: Vec<&str> = hosts
                .iter()
                .rev()
                .map(|(_, h)| h.name.as_str())
                .filter(|t| *t != src.name && !self.sources.contains(*t) && on[*t].iter().any(|v| v.state == VeeState::Running))
                .collect();
            let mut trial = self.mover.clone();
            let mut moves = Vec::new();
            for v in vees {
                match targets.iter().find(|t| trial.try_move(&v.id, t)) {
                    Some(t) => moves.push((v.id.clone(), t.to_string())),
                    None => break,
                }
            }
            if moves.len() == vees.len() {
                *self.mover = trial;
                for (vee, to) in moves {
                    self.record(&vee, &src.name, &to, Reason::Consolidation);
                }
                return;
            }
        }
    }
}

/// The proposals of one pass over `s`, checked on `mover` (which keeps the
/// accepted moves): failure-risk, then sla-at-risk, then consolidation;
/// VEEs in ID order. Deterministic for a given snapshot and mover.
pub fn plan<M: Mover>(s: &Snapshot, mover: &mut M) -> Vec<Proposal> {
    let mut vees = s.vees.clone();
    vees.sort_by(|a, b| a.id.cmp(&b.id));
    let s = &Snapshot { vees, ..s.clone() };
    let mut pass = Pass {
        s,
        mover,
        out: Vec::new(),
        taken: BTreeSet::new(),
        sources: BTreeSet::new(),
        targets: BTreeSet::new(),
    };
    for m in &s.open {
        pass.taken.insert(m.vee_id.clone());
        pass.sources.extend(m.from.clone());
        pass.targets.extend(m.to.clone());
    }
    pass.failure_risk();
    pass.sla_at_risk();
    pass.consolidation();
    pass.out
}

/// The host of a migration record's `host:NAME` place.
fn host_in(place: &str) -> Option<String> {
    place.strip_prefix("host:").map(str::to_string)
}

/// The open moves among migration records, and the (VEE, reason) pairs of
/// the planner's proposals rejected or failed less than `hold_s` seconds
/// after their creation before `now_ms`.
pub fn open_and_held(records: Vec<MigrationRec>, now_ms: i64, hold_s: u64) -> (Vec<OpenMove>, BTreeSet<(String, Reason)>) {
    let (mut open, mut held) = (Vec::new(), BTreeSet::new());
    for m in records {
        match m.state {
            s if s.is_open() => open.push(OpenMove {
                from: host_in(&m.from),
                to: match m.to {
                    Dest::Host(h) => Some(h),
                    _ => None,
                },
                vee_id: m.vee_id,
                reason: m.reason,
            }),
            MigrationState::Rejected | MigrationState::Failed if now_ms - m.created_ms < hold_s as i64 * 1000 => {
                held.extend(Reason::parse(&m.reason).map(|r| (m.vee_id, r)))
            }
            _ => {}
        }
    }
    (open, held)
}

/// Migrations the planner proposes by itself (see the module doc): a pass over a snapshot, decided on a copy of the planner, each move proposed through the migration workflow. Calls the core and migration.
pub struct Proposals {
    core: Arc<Core>,
    pub(crate) migration: Arc<Migration>,
}

impl Deref for Proposals {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Proposals {
    pub fn new(core: Arc<Core>, migration: Arc<Migration>) -> Self {
        Self { core, migration }
    }
}

impl Proposals {
    /// The snapshot a pass decides on. Since when each VEE has been on its
    /// host is the time this VEEM first saw it live there, kept with its
    /// record in memory ([`Core::live_vees_map`]; a restarted VEEM starts
    /// afresh, which only delays proposals).
    pub fn proposal_snapshot(&self) -> Result<Snapshot, StoreError> {
        let now = self.clock.now_ms();
        let slot = self.now_slot();
        let cfg = &self.cfg.proposals;
        let health: Vec<(String, Health)> = self.hosts.names().into_iter().map(|h| (h.clone(), self.hosts.health(&h))).collect();
        let hosts: Vec<HostView> = {
            let p = self.planner.lock().unwrap();
            let known = health
                .into_iter()
                .filter_map(|(name, health)| Some((p.host(&name)?.capacity, p.host_usage(&name, slot).ok()?, name, health)));
            known
                .map(|(capacity, used, name, health)| HostView {
                    name,
                    health,
                    capacity,
                    used,
                })
                .collect()
        };
        // Views of the records, not copies of them, and only of the VEEs a
        // pass may decide on: without consolidation, those on a host
        // missing heartbeats and those overdue (100,000 views every pass
        // were most of an idle site's proposal CPU).
        let at_risk: std::collections::HashSet<&str> = hosts
            .iter()
            .filter(|h| matches!(h.health, Health::Missing(n) if n >= 1))
            .map(|h| h.name.as_str())
            .collect();
        let vees = self.live_vees_map(now, |v, since| {
            let Location::Host(h) = &v.location else { return None };
            let decided =
                cfg.consolidation || at_risk.contains(h.as_str()) || overdue_at(v.checkpoint_interval_s, v.last_checkpoint_ms, since, now);
            if !decided {
                return None;
            }
            Some(VeeView {
                id: v.id.clone(),
                state: v.state,
                location: v.location.clone(),
                migratable: v.migration_policy != interfaces::manifest::MigrationPolicy::None,
                checkpoint_interval_s: v.checkpoint_interval_s,
                last_checkpoint_ms: v.last_checkpoint_ms,
                on_host_since_ms: since,
            })
        });
        let (open, held) = open_and_held(self.store.list::<MigrationRec>(Tree::Migrations)?, now, cfg.hold.as_secs());
        Ok(Snapshot {
            now_ms: now,
            hosts,
            vees,
            open,
            held,
            consolidation: cfg.consolidation,
            settle_s: cfg.settle.as_secs(),
        })
    }

    /// One pass: builds the snapshot, decides ([`plan`]) on a copy of the
    /// planner (see [`PlannerMover`]) and proposes each move (by `planner`). Returns the proposals
    /// made; one that `propose` refuses (the VEE changed meanwhile) is
    /// logged and skipped. Errors only when the state cannot be read.
    pub fn proposal_pass(self: &Arc<Self>) -> Result<Vec<MigrationRec>, StoreError> {
        let snapshot = self.proposal_snapshot()?;
        let mut mover = PlannerMover {
            source: &self.planner,
            copy: None,
            now: self.now_slot(),
        };
        let mut made = Vec::new();
        for p in plan(&snapshot, &mut mover) {
            match self
                .migration
                .propose(&p.vee_id, Dest::Host(p.to.clone()), p.reason.as_str(), Proposer::Planner)
            {
                Ok(m) => made.push(m),
                Err(e) => {
                    tracing::warn!(vee = %p.vee_id, to = %p.to, reason = p.reason.as_str(), error = %format!("{e:#}"), "planner proposal refused")
                }
            }
        }
        Ok(made)
    }
}
