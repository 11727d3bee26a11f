//! Admission as a plan (issue 37; Nomad's scheduler: a scheduler plans on
//! a snapshot, the leader checks the plan against the fresh state and
//! commits it, a plan made on an older state is planned again).
//!
//! [`Planner::plan_admission`] answers as [`Planner::admit`] but reserves
//! nothing: an acceptance comes as an [`AdmissionPlan`], holding the
//! admission, the planner's [`revision`](Planner::revision) it was made at,
//! the steps that reserve it and what it read that another change could
//! make wrong. The caller writes the plan's
//! [`entries`](AdmissionPlan::entries) with its own records in one commit,
//! then [`Planner::apply`]s it. A planner changed since the plan checks it
//! against its fresh state, as Nomad's plan applier does
//! ([`Planner::check_plan`]): each reservation on a host that is still
//! usable and still has the room in every slot of its range (after the
//! plan's own earlier steps), each displaced background VEE where the plan
//! found it, and the service it admits still unknown; for a scale-out
//! (whose constraints depend on where the service's instances run now) or
//! a consumer under a usage SLA (whose verdict depends on the whole site's
//! usage), only an unchanged planner will do. So admissions on other hosts
//! do not conflict; a plan that no longer holds is refused with
//! [`Stale`] (the planner left as it was), and the caller plans again on
//! the fresh state. No caller ever undoes an admission by hand.

use super::admission::{Mode, Step};
use super::keys::{peer_spare_key, reservation_key, service_key};
use super::request::{Admission, Admitted, ServiceRequest};
use super::{Planner, PlannerEntry, ServiceId, ServiceRecord};

/// An accepted admission, planned at one revision of the planner and not
/// reserved yet.
#[derive(Debug, Clone)]
pub struct AdmissionPlan {
    /// What the admission gives: placements, spares, displaced VEEs.
    pub admitted: Admitted,
    revision: u64,
    steps: Vec<Step>,
    reads: Reads,
}

/// What a plan read that a change since would make wrong (besides the
/// hosts it reserves on, checked by their room): the services whose
/// records it writes (none may be known to a planner that moved on: a new
/// service admitted meanwhile, or an admitted one scaled out, whose
/// constraints depend on where its instances run now), and whether its
/// consumer is under a usage SLA (then only the revision it was made at
/// will do).
#[derive(Debug, Clone, Default)]
pub(crate) struct Reads {
    services: Vec<ServiceId>,
    usage_limited: bool,
}

/// A plan that no longer holds on the planner as it is now (see the
/// module doc): plan again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the planner changed since the plan was made (revision {planned}, now {now}: {why}): plan again")]
pub struct Stale {
    /// The revision the plan was made at.
    pub planned: u64,
    /// The planner's revision now.
    pub now: u64,
    /// What changed under the plan.
    pub why: String,
}

impl AdmissionPlan {
    pub(crate) fn new(admitted: Admitted, revision: u64, steps: Vec<Step>, reads: Reads) -> Self {
        Self {
            admitted,
            revision,
            steps,
            reads,
        }
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
                Step::Remove(r) => (reservation_key(&r.vee, r.spare), None),
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
            (Admission::Accepted(admitted), steps) => {
                let reads = self.reads_of(&steps, &req.service_id);
                Ok(AdmissionPlan::new(admitted, revision, steps, reads))
            }
            (other, _) => Err(Box::new(other)),
        }
    }

    /// What a plan of `steps` for service `service` read (see [`Reads`]),
    /// from this planner as it was planned on.
    pub(crate) fn reads_of(&self, steps: &[Step], service: &str) -> Reads {
        let changed: Vec<&ServiceRecord> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Service(r) => Some(r),
                _ => None,
            })
            .collect();
        let consumer = changed.first().map(|r| r.consumer.as_str());
        let consumer = consumer.or_else(|| self.p.services.get(service).map(|s| s.consumer.as_str()));
        Reads {
            services: changed.iter().map(|r| r.id.clone()).collect(),
            usage_limited: consumer.is_some_and(|c| self.p.usage_limits.contains_key(c)),
        }
    }

    /// Whether `plan` still holds on the planner as it is (see the module
    /// doc): at the revision it was made at it does; else each of its steps
    /// is checked, in order, on a snapshot. Errors: [`Stale`], naming what
    /// changed under it.
    pub fn check_plan(&self, plan: &AdmissionPlan) -> Result<(), Stale> {
        if plan.revision == self.d.revision {
            return Ok(());
        }
        let stale = |why: String| Stale {
            planned: plan.revision,
            now: self.d.revision,
            why,
        };
        if plan.reads.usage_limited {
            return Err(stale("its consumer is under a usage SLA, which the whole site's usage decides".into()));
        }
        if let Some(id) = plan.reads.services.iter().find(|id| self.p.services.contains_key(*id)) {
            return Err(stale(format!(
                "service {id} is admitted: where its instances run now decides its constraints"
            )));
        }
        let mut s = self.snapshot();
        for step in &plan.steps {
            match step {
                Step::Service(_) | Step::PeerSpare(_) => {}
                Step::Remove(r) => match s.get(&r.key()) {
                    Some(now) if now == r => {
                        s.remove_reservation(&r.key());
                    }
                    Some(_) => return Err(stale(format!("the reservation of displaced VEE {} moved", r.vee))),
                    None => {}
                },
                Step::Add(r) => {
                    if s.get(&r.key()).is_some() {
                        return Err(stale(format!("VEE {} has a reservation already", r.vee)));
                    }
                    let host = &s.p.hosts[r.host as usize];
                    if !host.usable_for(r.range.start) {
                        return Err(stale(format!("host {} is down or removed", host.spec.name)));
                    }
                    if let Some(slot) = s.d.usage[r.host as usize].total.first_conflict(r.range, &r.resources, &host.spec.capacity) {
                        return Err(stale(format!("host {} has no room for VEE {} in slot {slot}", host.spec.name, r.vee)));
                    }
                    s.insert_reservation(r.clone());
                }
            }
        }
        Ok(())
    }

    /// Reserves what `plan` admits, when it still holds
    /// ([`Planner::check_plan`]); its entries are noted as changed (written
    /// at the next save). Errors: [`Stale`], and nothing changes.
    pub fn apply(&mut self, plan: AdmissionPlan) -> Result<Admitted, Stale> {
        self.apply_noting(plan, true)
    }

    /// [`Planner::apply`] for a plan whose [`AdmissionPlan::entries`] the
    /// caller has written already: they are not noted as changed again.
    pub fn apply_written(&mut self, plan: AdmissionPlan) -> Result<Admitted, Stale> {
        self.apply_noting(plan, false)
    }

    fn apply_noting(&mut self, plan: AdmissionPlan, note: bool) -> Result<Admitted, Stale> {
        self.check_plan(&plan)?;
        let pending = self.d.changed.len();
        for step in plan.steps {
            match step {
                Step::Service(r) => {
                    self.note_change(service_key(&r.id));
                    self.p.services.insert(r.id.clone(), r);
                }
                Step::Add(r) => self.insert_reservation(r),
                Step::Remove(r) => {
                    self.remove_reservation(&r.key());
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
