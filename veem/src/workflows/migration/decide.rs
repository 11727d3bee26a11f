//! Proposals and their decisions: a migration proposed (by the planner,
//! an operator or a drain) and checked against the planner, the VEE's
//! policy and its open migrations, then approved (by the site's policy or
//! an operator) or rejected, and stale proposals closed (see the parent
//! module for running a migration).

use std::sync::Arc;

use interfaces::manifest::MigrationPolicy;

use super::{location_text, Dest, Migration, MigrationError, Proposer};
use crate::error::VeemError;
use crate::model::{Location, MigrationRec, MigrationState, VeeState};
use crate::peers;
use crate::store::Tree;

impl Migration {
    /// Records a proposal to move `vee_id` to `to`; runs it at once when
    /// the planner proposed it and the site policy auto-approves `reason`
    /// (a caller's reason never does: [`Proposer::may_auto_approve`]).
    /// Errors when the target is unknown or the same place, when the
    /// planner cannot keep the VEE's reservation on the target host for the
    /// rest of its window (capacity in every slot, compatibility profile,
    /// the service's constraints; the planner's reason is in the error),
    /// when the VEE's migration policy forbids it (`none`: never moved;
    /// `site`: no peer sites), or when the VEE already has an open
    /// (proposed, approved or running) migration.
    pub fn propose(self: &Arc<Self>, vee_id: &str, to: Dest, reason: &str, by: Proposer) -> Result<MigrationRec, MigrationError> {
        let v = self.vee(vee_id)?;
        if !matches!(v.state, VeeState::Running) {
            refuse!("VEE {vee_id} is {}, only running VEEs migrate", v.state.as_str());
        }
        if v.migration_policy == MigrationPolicy::None {
            refuse!("VEE {vee_id}: its SLA's migration policy is \"none\" (never moved)");
        }
        self.close_stale_proposals()?;
        let open = self
            .store
            .list::<MigrationRec>(Tree::Migrations)?
            .into_iter()
            .find(|m| m.vee_id == vee_id && m.state.is_open());
        if let Some(m) = open {
            refuse!("VEE {vee_id} already has migration {} ({}, to {})", m.id, m.state, m.to);
        }
        match &to {
            Dest::Host(h) => {
                if !self.hosts.names().contains(h) {
                    return Err(VeemError::field("to_host", format!("{h:?} is not a host of site {}", self.cfg.site_id)).into());
                }
                if v.location == Location::Host(h.clone()) {
                    refuse!("VEE {vee_id} already runs on {h}");
                }
                if v.host().is_some() {
                    let now = self.now_slot();
                    let mut plan = self.planner.lock().unwrap().snapshot();
                    if let Err(e) = plan.move_vee(vee_id, h, now) {
                        let set = self.affinity_set_of(vee_id, &to);
                        if set.len() > 1 {
                            return self.propose_set(&v, set, to, reason, by);
                        }
                        refuse!("VEE {vee_id} cannot move to {h}: {e}");
                    }
                }
            }
            Dest::ForPrimary(_) => return Err(VeemError::field("to", "site-of targets are chosen by a primary site").into()),
            Dest::Site(s) => {
                if s != &self.cfg.site_id {
                    peers::peer(&self.cfg, s).map_err(|e| VeemError::field("to_site", e))?;
                    if !v.nics.is_empty() && self.networks.overlay(s).is_none() {
                        return Err(VeemError::field(
                            "to_site",
                            format!(
                                "VEE {vee_id} is on service networks and the framework agreement with {s} has no overlay ([peers.overlay]) to stretch them there"
                            ),
                        )
                        .into());
                    }
                    let others = self.vees_where(|o| o.service_id == v.service_id);
                    if !v.migration_policy.allows_peer_site() {
                        refuse!(
                            "VEE {vee_id}: its SLA's migration policy is \"{}\", not federation",
                            v.migration_policy.as_str()
                        );
                    }
                    if let Some(why) = self
                        .site_constraints
                        .site_refusal(&v, s, &others, &self.site_constraints.constraints_of(&v))
                    {
                        let set = self.affinity_set_of(vee_id, &to);
                        if set.len() > 1 {
                            return self.propose_set(&v, set, to, reason, by);
                        }
                        refuse!("VEE {vee_id} cannot move to {s}: {why}");
                    }
                }
                if v.location == Location::Site(s.clone()) {
                    refuse!("VEE {vee_id} already runs at {s}");
                }
            }
        }
        let auto = by.may_auto_approve() && self.cfg.migration.auto_approve.iter().any(|r| r == reason);
        let mut m = MigrationRec {
            id: uuid::Uuid::new_v4().to_string(),
            vee_id: vee_id.into(),
            from: location_text(&v.location),
            to,
            reason: reason.into(),
            state: MigrationState::Proposed,
            decided_by: String::new(),
            detail: format!("proposed by {by}"),
            total_ms: 0,
            downtime_ms: 0,
            created_ms: self.clock.now_ms(),
            set: vec![],
        };
        self.save_migration(&m)?;
        if auto {
            m.advance(MigrationState::Approved)?;
            m.decided_by = "site policy".into();
            self.save_migration(&m)?;
            self.spawn_migration(&m.id);
        }
        Ok(m)
    }

    /// Proposes moving `vee_id` without naming where: the site picks the
    /// first host not failed, in configuration order, that the planner can keep
    /// the VEE on for the rest of its window ([`Planner::move_vee`]:
    /// capacity in every slot, profile, constraints). This is how a service
    /// provider asks for a move: it never names hosts or sites (location
    /// unawareness, E §3.4). Errors as [`Migration::propose`] does, and when no
    /// other host can take the VEE.
    ///
    /// [`Planner::move_vee`]: crate::planner::Planner::move_vee
    pub fn propose_anywhere(self: &Arc<Self>, vee_id: &str, reason: &str, by: Proposer) -> Result<MigrationRec, MigrationError> {
        let v = self.vee(vee_id)?;
        let Some(from) = v.host() else {
            refuse!("VEE {vee_id} does not run on a host of this site; an operator moves it")
        };
        let now = self.now_slot();
        let plan = self.planner.lock().unwrap().snapshot();
        // The VEE and what host affinity binds to it go together.
        let set = plan.affinity_set(vee_id, interfaces::manifest::ConstraintLevel::Host);
        let to = self
            .hosts
            .names()
            .into_iter()
            .filter(|h| h != from && self.hosts.health(h) != crate::hosts::Health::Failed)
            .find(|h| plan.snapshot().move_set(&set, h, now).is_ok())
            .ok_or_else(|| MigrationError::Refused(format!("VEE {vee_id}: no other host of the site can take it for the rest of its window")))?;
        self.propose(vee_id, Dest::Host(to), reason, by)
    }

    /// Closes the proposals whose premise is gone, each rejected by the
    /// VEEM with the reason: the VEE no longer runs where the proposal
    /// found it (recovered elsewhere, moved, stopped, gone), or the host it
    /// was to go to has failed. Such a proposal would otherwise stay open
    /// and block every later migration of the VEE. Returns how many.
    pub fn close_stale_proposals(&self) -> Result<usize, MigrationError> {
        let mut closed = 0;
        for mut m in self.store.list::<MigrationRec>(Tree::Migrations)? {
            if m.state != MigrationState::Proposed {
                continue;
            }
            let why = match self.vee(&m.vee_id) {
                Err(_) => "the VEE is gone".to_string(),
                Ok(v) if v.state != VeeState::Running => format!("the VEE is {}", v.state.as_str()),
                Ok(v) if location_text(&v.location) != m.from => {
                    format!("the VEE is at {}, not {}", location_text(&v.location), m.from)
                }
                Ok(_) => match &m.to {
                    Dest::Host(h) if self.hosts.health(h) == crate::hosts::Health::Failed => format!("host {h} failed"),
                    _ => continue,
                },
            };
            m.advance(MigrationState::Rejected)?;
            m.decided_by = "veem".into();
            m.detail = format!("closed: its premise is gone ({why})");
            self.save_migration(&m)?;
            self.migration_event(&m);
            closed += 1;
        }
        Ok(closed)
    }

    /// An operator approves a proposal: it runs now. A proposal whose
    /// premise is gone is closed instead ([`Migration::close_stale_proposals`]).
    pub fn approve(self: &Arc<Self>, id: &str, by: &str) -> Result<MigrationRec, MigrationError> {
        self.close_stale_proposals()?;
        let mut m = self.migration(id)?;
        if m.state != MigrationState::Proposed {
            refuse!("migration {id} is {}, not proposed ({})", m.state, m.detail);
        }
        if !m.set.is_empty() {
            self.decide_set(&m.set, true, by, "")?;
            self.spawn_set(m.set);
            return self.migration(id);
        }
        m.advance(MigrationState::Approved)?;
        m.decided_by = by.into();
        self.save_migration(&m)?;
        fail::fail_point!("migration-after-approval");
        self.spawn_migration(id);
        Ok(m)
    }

    /// An operator rejects a proposal: nothing moves.
    pub fn reject(&self, id: &str, by: &str, reason: &str) -> Result<MigrationRec, MigrationError> {
        if reason.trim().is_empty() {
            return Err(VeemError::field("reason", "say why the migration is rejected").into());
        }
        let mut m = self.migration(id)?;
        if m.state != MigrationState::Proposed {
            refuse!("migration {id} is {}, not proposed", m.state);
        }
        if !m.set.is_empty() {
            self.decide_set(&m.set, false, by, reason)?;
            return self.migration(id);
        }
        m.advance(MigrationState::Rejected)?;
        m.decided_by = by.into();
        m.detail = reason.into();
        self.save_migration(&m)?;
        Ok(m)
    }

    /// Operator's drain: proposes moving every running VEE off `host`
    /// (reason `maintenance`), each to the first up host, in configuration
    /// order, where the planner can move it; the moves are tried on one copy
    /// of the planner so that they add up (two VEEs are never sent to a
    /// host with room for one). A VEE that cannot move, or already has an
    /// open migration, is skipped with a warning. Errors when `host` is not
    /// a host of this site.
    pub fn drain(self: &Arc<Self>, host: &str) -> Result<Vec<MigrationRec>, MigrationError> {
        if !self.hosts.names().iter().any(|h| h == host) {
            return Err(VeemError::field("host", format!("{host:?} is not a host of site {}", self.cfg.site_id)).into());
        }
        let targets: Vec<String> = self
            .hosts
            .names()
            .into_iter()
            .filter(|h| h != host && self.hosts.health(h) == crate::hosts::Health::Up)
            .collect();
        let now = self.now_slot();
        let mut plan = self.planner.lock().unwrap().snapshot();
        let mut out = Vec::new();
        for v in self.vees_where(|v| v.host() == Some(host) && v.state == VeeState::Running) {
            let Some(t) = targets.iter().find(|h| plan.move_vee(&v.id, h, now).is_ok()) else {
                tracing::warn!(vee = %v.id, host, "drain: no other host can take this VEE");
                continue;
            };
            match self.propose(&v.id, Dest::Host(t.clone()), "maintenance", Proposer::Operator) {
                Ok(m) => out.push(m),
                Err(e) => tracing::warn!(vee = %v.id, host, error = %format!("{e:#}"), "drain: not proposed"),
            }
        }
        Ok(out)
    }
}
