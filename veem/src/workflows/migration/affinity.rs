//! An affinity set moves together (E PIII §II; DESIGN.md §5a): a VEE that
//! host- (or site-) level affinity binds to others cannot leave them, so a
//! migration proposed for it is a migration of the whole set
//! ([`Planner::affinity_set`]) to the same place.
//!
//! The set's migrations are proposed, approved or rejected together (each
//! record lists them all in `set`), and run one after the other; each
//! member's reservation moves with the members still to go left out of the
//! constraint check ([`Planner::move_set`] checked the whole move first).
//! If one member fails, the rest are not run and those that moved are
//! taken back where they came from, so that the set is never left split.
//!
//! [`Planner::affinity_set`]: crate::planner::Planner::affinity_set
//! [`Planner::move_set`]: crate::planner::Planner::move_set

use std::sync::Arc;

use interfaces::manifest::ConstraintLevel;

use super::{LegError, Migration, MigrationError, RunError};
use super::{location_text, migration_write, Dest, Proposer};
use crate::model::{MigrationRec, MigrationState, VeeRec, VeeState};
use crate::store::{Tree, Writes};

impl Migration {
    /// The VEEs the affinity at `to`'s level binds to `vee_id` (itself
    /// first); just itself when none does.
    pub(crate) fn affinity_set_of(&self, vee_id: &str, to: &Dest) -> Vec<String> {
        let level = match to {
            Dest::Host(_) => ConstraintLevel::Host,
            _ => ConstraintLevel::Site,
        };
        self.planner.lock().unwrap().affinity_set(vee_id, level)
    }

    /// Proposes moving `v` and the rest of its affinity set `set` to `to`
    /// (see [`Migration::propose`]): every member must be running with no open
    /// migration, and the planner must be able to keep them all there (a
    /// host: [`crate::planner::Planner::move_set`]; a site: each member's
    /// site constraints, the set aside). Members already there stay.
    /// Returns `v`'s proposal; the set's are written in one commit.
    pub(super) fn propose_set(
        self: &Arc<Self>,
        v: &VeeRec,
        set: Vec<String>,
        to: Dest,
        reason: &str,
        by: Proposer,
    ) -> Result<MigrationRec, MigrationError> {
        let members: Vec<VeeRec> = set.iter().map(|id| self.vee(id)).collect::<Result<_, _>>()?;
        let there = |m: &VeeRec| location_text(&m.location) == to.to_string();
        let open = self.store.list::<MigrationRec>(Tree::Migrations)?;
        for m in &members {
            if m.state != VeeState::Running {
                refuse!(
                    "VEE {} moves with its affinity set, and VEE {} of the set is {}",
                    v.id,
                    m.id,
                    m.state.as_str()
                );
            }
            if let Some(o) = open.iter().find(|o| o.vee_id == m.id && o.state.is_open()) {
                refuse!(
                    "VEE {} moves with its affinity set, and VEE {} of the set already has migration {}",
                    v.id,
                    m.id,
                    o.id
                );
            }
        }
        let names = set.join(", ");
        match &to {
            Dest::Host(h) => {
                let now = self.now_slot();
                let mut plan = self.planner.lock().unwrap().snapshot();
                if let Err(e) = plan.move_set(&set, h, now) {
                    refuse!("VEE {} cannot move to {h} with its affinity set ({names}): {e}", v.id);
                }
            }
            Dest::Site(s) => {
                let constraints = self.site_constraints.constraints_of(v);
                let others = self.vees_where(|o| o.service_id == v.service_id && !set.contains(&o.id));
                for m in &members {
                    if let Some(why) = self.site_constraints.site_refusal(m, s, &others, &constraints) {
                        refuse!(
                            "VEE {} cannot move to {s} with its affinity set ({names}): VEE {}: {why}",
                            v.id,
                            m.id
                        );
                    }
                }
            }
            Dest::ForPrimary(_) => refuse!("site-of targets are chosen by a primary site"),
        }
        let moving: Vec<&VeeRec> = members.iter().filter(|m| !there(m)).collect();
        let ids: Vec<String> = moving.iter().map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let auto = by.may_auto_approve() && self.cfg.migration.auto_approve.iter().any(|r| r == reason);
        let mut recs: Vec<MigrationRec> = moving
            .iter()
            .zip(&ids)
            .map(|(m, id)| MigrationRec {
                id: id.clone(),
                vee_id: m.id.clone(),
                from: location_text(&m.location),
                to: to.clone(),
                reason: reason.into(),
                state: MigrationState::Proposed,
                decided_by: String::new(),
                detail: format!("proposed by {by}; moves with its affinity set ({names})"),
                total_ms: 0,
                downtime_ms: 0,
                created_ms: self.clock.now_ms(),
                set: ids.clone(),
            })
            .collect();
        if auto {
            for m in &mut recs {
                m.advance(MigrationState::Approved)?;
                m.decided_by = "site policy".into();
            }
        }
        self.save_set(&recs)?;
        if auto {
            self.spawn_set(ids);
        }
        Ok(recs.into_iter().find(|m| m.vee_id == v.id).expect("the VEE itself moves"))
    }

    /// Writes the migrations of a set in one commit, then events them.
    fn save_set(&self, recs: &[MigrationRec]) -> Result<(), crate::store::StoreError> {
        let mut w = Writes::default();
        for m in recs {
            w.put(Tree::Migrations, &m.id, m)?;
        }
        self.store.commit(w)?;
        for m in recs {
            self.migration_event(m);
        }
        Ok(())
    }

    /// An operator's decision on one migration of a set applies to all of
    /// them still proposed: approved (`approve`; the caller runs them,
    /// [`Migration::spawn_set`]) or rejected with `detail`.
    pub(super) fn decide_set(&self, set: &[String], approve: bool, by: &str, detail: &str) -> Result<(), MigrationError> {
        let mut recs = Vec::new();
        for id in set {
            let mut m = self.migration(id)?;
            if m.state != MigrationState::Proposed {
                continue;
            }
            m.advance(if approve {
                MigrationState::Approved
            } else {
                MigrationState::Rejected
            })?;
            m.decided_by = by.into();
            if !approve {
                m.detail = detail.into();
            }
            recs.push(m);
        }
        Ok(self.save_set(&recs)?)
    }

    /// Runs the set's approved migrations one after the other, in the
    /// background; see the module doc for a member that fails.
    pub(super) fn spawn_set(self: &Arc<Self>, set: Vec<String>) {
        let veem = self.clone();
        self.spawn(async move {
            if let Err(e) = veem.run_set(&set).await {
                tracing::warn!(set = ?set, error = %format!("{e:#}"), "affinity set did not move");
            }
        });
    }

    async fn run_set(self: &Arc<Self>, set: &[String]) -> Result<(), RunError> {
        let mut done: Vec<MigrationRec> = Vec::new();
        for (i, id) in set.iter().enumerate() {
            if let Err(e) = self.run_migration(id).await {
                let failed = self.migration(id).map(|m| m.vee_id).unwrap_or_default();
                for rest in &set[i + 1..] {
                    let mut m = self.migration(rest)?;
                    if m.state == MigrationState::Approved {
                        m.advance(MigrationState::Failed)?;
                        m.detail = format!("not run: VEE {failed} of its affinity set could not move ({e:#})");
                        self.store.commit(migration_write(&m)?)?;
                        self.migration_event(&m);
                    }
                }
                self.take_back(&done, &failed).await?;
                return Err(e);
            }
            done.push(self.migration(id)?);
        }
        Ok(())
    }

    /// Moves the members of a set that did move (`done`) back where they
    /// came from, as a set of their own, approved by the VEEM.
    async fn take_back(self: &Arc<Self>, done: &[MigrationRec], failed: &str) -> Result<(), RunError> {
        if done.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = done.iter().map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let mut recs = Vec::new();
        for (m, id) in done.iter().zip(&ids) {
            recs.push(MigrationRec {
                id: id.clone(),
                vee_id: m.vee_id.clone(),
                from: m.to.to_string(),
                to: Dest::parse(&m.from).map_err(|e| LegError::NotADestination(format!("{e:#}")))?,
                reason: "affinity".into(),
                state: MigrationState::Approved,
                decided_by: "veem".into(),
                detail: format!("back: VEE {failed} of its affinity set could not follow"),
                total_ms: 0,
                downtime_ms: 0,
                created_ms: self.clock.now_ms(),
                set: ids.clone(),
            });
        }
        self.save_set(&recs)?;
        for id in &ids {
            if let Err(e) = self.run_migration(id).await {
                tracing::warn!(migration = %id, error = %format!("{e:#}"), "affinity set: a member could not be taken back");
            }
        }
        Ok(())
    }

    /// The VEEs of `m`'s set whose migrations run after it (left out of
    /// the constraint check when `m`'s reservation moves).
    pub(super) fn set_still_to_move(&self, m: &MigrationRec) -> Vec<String> {
        m.set
            .iter()
            .skip_while(|id| **id != m.id)
            .skip(1)
            .filter_map(|id| self.migration(id).ok())
            .filter(|o| o.state.is_open())
            .map(|o| o.vee_id)
            .collect()
    }
}
