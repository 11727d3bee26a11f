//! SLA terms checked against what happened to each VEE (H §3.4; DESIGN.md
//! §4 "SlaViolation: term, interval, penalty"). A breach is a violation
//! with its interval and its penalty, the manifest's `penalty_per_hour`
//! times the interval's length:
//! - `max_downtime_ms`: a live migration, or a restore after a host
//!   failure, whose measured downtime exceeds it (the interval is the
//!   downtime);
//! - the checkpoint interval: a VEE whose last checkpoint is more than two
//!   intervals old, i.e. one missed by more than its interval (from when it
//!   was due until one is taken; one violation per miss, kept current);
//! - `max_outages`: an outage (its host failed) beyond the number the
//!   manifest provisions for (the interval is the outage);
//! - the window: a VEE that should run and does not, because it never
//!   started (from its window's start) — a VEE lost for good is charged
//!   by recovery for the rest of its window
//!   ([`Recovery::record_unrecovered`](crate::workflows::recovery::Recovery::record_unrecovered)).
//!
//! Violations a round keeps current (missed checkpoints, late starts) have
//! IDs derived from what they are about, so that a round updates the one
//! record instead of adding one per round.

use std::ops::Deref;
use std::sync::Arc;


use crate::core::Core;
use crate::model::{VeeRec, VeeState, ViolationRec, START_GRACE_S};
use crate::store::{StoreError, Tree, Writes};

impl ViolationRec {
    /// A violation of `term` by VEE `vee_id` of service `service_id` from
    /// `start_ms` to `end_ms` (Unix ms), with penalty `per_hour` × its
    /// length in hours (0 for an empty or inverted interval).
    pub fn over(id: String, service_id: &str, vee_id: &str, term: String, (start_ms, end_ms): (i64, i64), per_hour: f64) -> Self {
        let hours = (end_ms - start_ms).max(0) as f64 / 3_600_000.0;
        ViolationRec {
            id,
            service_id: service_id.into(),
            vee_id: vee_id.into(),
            term,
            start_unix: start_ms.div_euclid(1000),
            end_unix: end_ms.div_euclid(1000),
            penalty: per_hour * hours,
        }
    }
}

/// The SLA workflow (see the module doc): the SLA terms checked against what happened, each breach a violation with its penalty. Calls only the core.
pub struct Sla {
    core: Arc<Core>,
}

impl Deref for Sla {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Sla {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
}

impl Sla {
    /// The manifest's penalty per hour for VEE `v` (0 when its service is
    /// gone).
    fn penalty_per_hour(&self, v: &VeeRec) -> f64 {
        self.service(&v.service_id).map(|s| s.penalty_per_hour).unwrap_or(0.0)
    }

    /// The violation, if any, of a downtime of `downtime_ms` ending at
    /// `end_ms` that `what` (e.g. "migration M") caused VEE `v`: one when
    /// it exceeds the VEE's `max_downtime_ms` (0: no bound).
    pub(crate) fn downtime_violation(&self, v: &VeeRec, what: &str, downtime_ms: u64, end_ms: i64) -> Option<ViolationRec> {
        if v.max_downtime_ms == 0 || downtime_ms <= v.max_downtime_ms {
            return None;
        }
        let term = format!(
            "max_downtime_ms: {what} took the VEE down for {downtime_ms} ms, more than {} ms",
            v.max_downtime_ms
        );
        let start = end_ms - downtime_ms as i64;
        Some(ViolationRec::over(
            uuid::Uuid::new_v4().to_string(),
            &v.service_id,
            &v.id,
            term,
            (start, end_ms),
            self.penalty_per_hour(v),
        ))
    }

    /// The violations of an outage of VEE `v` from `down_ms` to `up_ms`
    /// (its host failed; it was restored or restarted at `up_ms`): its
    /// downtime against `max_downtime_ms`, and the outage against
    /// `max_outages` (the VEE's `outages` count includes this one).
    pub(crate) fn outage_violations(&self, v: &VeeRec, (down_ms, up_ms): (i64, i64)) -> Vec<ViolationRec> {
        let mut out: Vec<ViolationRec> = self
            .downtime_violation(v, "the restore after its host failed", (up_ms - down_ms).max(0) as u64, up_ms)
            .into_iter()
            .collect();
        let max = self.terms_of(&v.service_id).map(|t| t.sla.max_outages);
        if let Some(max) = max.filter(|max| v.outages > *max) {
            out.push(ViolationRec::over(
                uuid::Uuid::new_v4().to_string(),
                &v.service_id,
                &v.id,
                format!("max_outages: outage {} of the VEE, more than the {max} its SLA covers", v.outages),
                (down_ms, up_ms),
                self.penalty_per_hour(v),
            ));
        }
        out
    }

    /// Adds violations `viols` to write set `w` (committed by the caller
    /// with the change that caused them); [`Sla::violation_events`] after
    /// the commit.
    pub(crate) fn put_violations(w: &mut Writes, viols: &[ViolationRec]) -> Result<(), StoreError> {
        for v in viols {
            w.put(Tree::Violations, &v.id, v)?;
        }
        Ok(())
    }

    /// An `sla-violation` event for each of `viols`.
    pub(crate) fn violation_events(&self, viols: &[ViolationRec]) {
        for v in viols {
            self.metrics.violation(term_name(&v.term), v.penalty);
            self.event(
                &v.vee_id,
                &v.service_id,
                "sla-violation",
                format!("{} (penalty {:.2})", v.term, v.penalty),
            );
        }
    }

    /// One round of the terms that break while nothing happens: missed
    /// checkpoints and VEEs that never started in their window. Each
    /// breach's violation is created once (with an event) and then kept
    /// current. Errors only when the store cannot be written.
    pub fn sla_round(&self) -> Result<(), StoreError> {
        let now_ms = self.clock.now_ms();
        for v in self.due_vees(now_ms).into_iter().filter(|v| v.for_peer.is_none()) {
            let Some((id, term, start_ms)) = ongoing_breach(&v, now_ms) else {
                continue;
            };
            let viol = ViolationRec::over(id, &v.service_id, &v.id, term, (start_ms, now_ms), self.penalty_per_hour(&v));
            let new = self.store.get::<ViolationRec>(Tree::Violations, &viol.id)?.is_none();
            self.store.put(Tree::Violations, &viol.id, &viol)?;
            if new {
                self.violation_events(std::slice::from_ref(&viol));
            }
        }
        Ok(())
    }
}

/// The breach VEE `v` is in at `now_ms`, if any: (violation ID, term, since
/// when in Unix ms).
pub(crate) fn ongoing_breach(v: &VeeRec, now_ms: i64) -> Option<(String, String, i64)> {
    let window_start_ms = v.window_start_unix * 1000;
    let in_window = window_start_ms <= now_ms && now_ms < v.window_end_unix * 1000;
    match v.state {
        VeeState::Running | VeeState::Checkpointing if v.host().is_some() => {
            let every_ms = v.checkpoint_interval_s? as i64 * 1000;
            let last = v.checkpointed_ms();
            let due = last + every_ms;
            (now_ms - last > 2 * every_ms).then(|| {
                let term = format!(
                    "checkpoint interval: no checkpoint for {} s, more than one interval ({} s) after it was due",
                    (now_ms - last) / 1000,
                    every_ms / 1000
                );
                (format!("{}-checkpoint-{last}", v.id), term, due)
            })
        }
        VeeState::Admitted | VeeState::Deploying
            if in_window && now_ms - window_start_ms > START_GRACE_S * 1000 && v.image_since_ms.is_none() =>
        {
            let term = format!(
                "window: not running {} s after its window opened",
                (now_ms - window_start_ms) / 1000
            );
            Some((format!("{}-window-{}", v.id, v.window_start_unix), term, window_start_ms))
        }
        _ => None,
    }
}

/// The SLA term a violation's text names (`max_downtime_ms`,
/// `max_outages`, `availability`, ...: the identifier before its first
/// `:`), `other` when it names none: a bounded label of the metrics.
pub(crate) fn term_name(term: &str) -> &str {
    match term.split_once(':') {
        Some((name, _)) if !name.is_empty() && name.len() <= 32 && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') => name,
        _ => "other",
    }
}

#[cfg(test)]
mod tests;
