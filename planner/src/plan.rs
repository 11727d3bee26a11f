//! Admission as a plan (issue 37; Nomad's scheduler: a scheduler plans on
//! a snapshot, the leader checks the plan against the fresh state and
//! commits it, a plan made on an older state is planned again).
//!
//! [`Planner::plan_admission`] answers as [`Planner::admit`] but reserves
//! nothing: an acceptance comes as an [`AdmissionPlan`], holding the
//! admission, the planner's [`revision`](Planner::revision) it was made at
//! and the steps that reserve it. The caller writes the plan's
//! [`entries`](AdmissionPlan::entries) with its own records in one commit,
//! then [`Planner::apply`]s it. A plan is applied only at the revision it
//! was made at: a planner changed since refuses it with [`Stale`] (and is
//! left as it was), and the caller plans again on the fresh state. No
//! caller ever undoes an admission by hand.

use super::admission::{Mode, Step};
use super::keys::{peer_spare_key, reservation_key, service_key};
use super::request::{Admission, Admitted, ServiceRequest};
use super::{Planner, PlannerEntry};

/// An accepted admission, planned at one revision of the planner and not
/// reserved yet.
#[derive(Debug, Clone)]
pub struct AdmissionPlan {
    /// What the admission gives: placements, spares, displaced VEEs.
    pub admitted: Admitted,
    revision: u64,
    steps: Vec<Step>,
}

/// A plan made at an older revision of the planner than the current one:
/// plan again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the planner changed since the plan was made (revision {planned}, now {now}): plan again")]
pub struct Stale {
    /// The revision the plan was made at.
    pub planned: u64,
    /// The planner's revision now.
    pub now: u64,
}

impl AdmissionPlan {
    pub(crate) fn new(admitted: Admitted, revision: u64, steps: Vec<Step>) -> Self {
        Self { admitted, revision, steps }
    }

    /// The planner's revision it was made at.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The planner entries its commit writes, each with its key (as
    /// [`Planner::take_changes`] gives them after [`Planner::admit`]): the
    /// value, or `None` for an entry that goes (a displaced background
    /// VEE's reservation).
    pub fn entries(&self) -> Vec<(String, Option<PlannerEntry>)> {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Service(r) => (service_key(&r.id), Some(PlannerEntry::Service(r.clone()))),
                Step::Add(r) => (
                    reservation_key(&r.vee, r.spare),
                    Some(if r.spare {
                        PlannerEntry::Spare(r.clone())
                    } else {
                        PlannerEntry::Primary(r.clone())
                    }),
                ),
                Step::Remove(k) => (reservation_key(&k.vee, k.spare), None),
                Step::PeerSpare(n) => (peer_spare_key(&n.vee), Some(PlannerEntry::PeerSpare(n.clone()))),
            })
            .collect()
    }
}

impl Planner {
    /// Plans the admission of `req` on the planner as it is: an acceptance
    /// as a plan to apply ([`Planner::apply`]), any other answer
    /// (counter-offer, rejection, a peer spare needed) as `Err`. Tries its
    /// placements on a [`snapshot`](Planner::snapshot), never on this
    /// planner: a caller may plan on a snapshot of its own, without the
    /// planner's lock, and apply under it.
    pub fn plan_admission(&self, req: &ServiceRequest) -> Result<AdmissionPlan, Box<Admission>> {
        let revision = self.d.revision;
        match self.snapshot().evaluate(req, Mode::Plan) {
            (Admission::Accepted(admitted), steps) => Ok(AdmissionPlan { admitted, revision, steps }),
            (other, _) => Err(Box::new(other)),
        }
    }

    /// Reserves what `plan` admits, when the planner is still at the
    /// revision the plan was made at; its entries are noted as changed
    /// (written at the next save). Errors: [`Stale`], and nothing changes.
    pub fn apply(&mut self, plan: AdmissionPlan) -> Result<Admitted, Stale> {
        self.apply_noting(plan, true)
    }

    /// [`Planner::apply`] for a plan whose [`AdmissionPlan::entries`] the
    /// caller has written already: they are not noted as changed again.
    pub fn apply_written(&mut self, plan: AdmissionPlan) -> Result<Admitted, Stale> {
        self.apply_noting(plan, false)
    }

    fn apply_noting(&mut self, plan: AdmissionPlan, note: bool) -> Result<Admitted, Stale> {
        if plan.revision != self.d.revision {
            return Err(Stale {
                planned: plan.revision,
                now: self.d.revision,
            });
        }
        let pending = self.d.changed.len();
        for step in plan.steps {
            match step {
                Step::Service(r) => {
                    self.note_change(service_key(&r.id));
                    self.p.services.insert(r.id.clone(), r);
                }
                Step::Add(r) => self.insert_reservation(r),
                Step::Remove(k) => {
                    self.remove_reservation(&k);
                }
                Step::PeerSpare(n) => {
                    self.note_change(peer_spare_key(&n.vee));
                    self.p.peer_spares.insert(n.vee.clone(), n);
                }
            }
        }
        if !note {
            self.d.changed.truncate(pending);
        }
        Ok(plan.admitted)
    }
}
