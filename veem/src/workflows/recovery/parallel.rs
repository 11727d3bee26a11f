//! A failed host's VEEs restored side by side: each VEE's recovery (its
//! retries, next hosts, peer site, or its violation) is a task of the
//! core's task set, which a stop drains; the restores start in the
//! planner's priority order, at most `[recovery] parallel_per_host` at once
//! on each destination host.

use std::collections::BTreeMap;
use std::sync::Arc;

use interfaces::manifest::GuaranteeLevel;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;

use super::{Recovery, RecoveryError};
use crate::model::VeeState;
use crate::planner::{RecoveryStep, RecoveryTarget};

/// The order recoveries start in: `full` first, then `enhanced`, then the
/// rest (a stable sort keeps the planner's order within each).
fn priority(level: GuaranteeLevel) -> u8 {
    match level {
        GuaranteeLevel::Full => 0,
        GuaranteeLevel::Enhanced => 1,
        _ => 2,
    }
}

impl Recovery {
    /// Brings back the VEEs of failed host `failed`, one task each, from
    /// the planner's first choices `steps`, and waits for all of them. The
    /// VEEs going to a local host wait for a restore place there
    /// ([`Recovery::restore_place`]) in priority order; those going to a
    /// peer site, or nowhere, start at once. The outage budget counts from
    /// `since_ms` (the clock's milliseconds). Errors (the first of them,
    /// once every task ended) only when records cannot be written.
    pub(super) async fn recover_all(self: &Arc<Self>, failed: &str, mut steps: Vec<RecoveryStep>, since_ms: i64) -> Result<(), RecoveryError> {
        steps.sort_by_key(|s| priority(s.guarantee));
        let mut queues: BTreeMap<String, Vec<RecoveryStep>> = BTreeMap::new();
        let mut tasks = Vec::with_capacity(steps.len());
        for step in steps {
            // A VEE being received by a migration never ran here: the
            // migration fails at its source, where it keeps running.
            if self
                .vee(&step.vee)
                .is_ok_and(|v| v.state == VeeState::Migrating && v.for_peer.is_some())
            {
                let this = self.clone();
                tasks.push(self.spawn_task(async move {
                    this.federation.drop_incoming(&step.vee).await;
                    Ok(())
                }));
                continue;
            }
            match &step.target {
                RecoveryTarget::Spare { host } | RecoveryTarget::Host { host } => {
                    queues.entry(host.clone()).or_default().push(step);
                }
                RecoveryTarget::NeedsPeer | RecoveryTarget::PeerSpare { .. } | RecoveryTarget::Unplaced { .. } => {
                    let (this, failed) = (self.clone(), failed.to_string());
                    tasks.push(self.spawn_task(async move { this.recover_vee(&failed, step, since_ms, None).await }));
                }
            }
        }
        for (host, queue) in queues {
            let (this, failed) = (self.clone(), failed.to_string());
            tasks.push(self.spawn_task(async move { this.dispatch(&failed, &host, queue, since_ms).await }));
        }
        first_error(tasks).await
    }

    /// Starts the recoveries of `queue` (in its order), whose first choice
    /// is local host `host`, each as soon as `host` has a restore place for
    /// it; waits for all of them.
    async fn dispatch(self: &Arc<Self>, failed: &str, host: &str, queue: Vec<RecoveryStep>, since_ms: i64) -> Result<(), RecoveryError> {
        let mut tasks = Vec::with_capacity(queue.len());
        for step in queue {
            let place = self.restore_place(host).await;
            let (this, failed) = (self.clone(), failed.to_string());
            tasks.push(self.spawn_task(async move { this.recover_vee(&failed, step, since_ms, place).await }));
        }
        first_error(tasks).await
    }

    /// Waits for a place to restore a VEE on local host `host`: at most
    /// `[recovery] parallel_per_host` restores at once there (default from
    /// the vCPUs its last heartbeat reported), the first to ask served
    /// first. The place is given back when the permit drops.
    pub(super) async fn restore_place(&self, host: &str) -> Option<OwnedSemaphorePermit> {
        let vcpus = self.hosts.info(host).map(|i| i.vcpus);
        self.slots.take(host, self.cfg.recovery.restores_per_host(vcpus)).await
    }
}

/// Waits for every task; the first error (a task's, or its panic), the
/// others logged.
async fn first_error(tasks: Vec<JoinHandle<Result<(), RecoveryError>>>) -> Result<(), RecoveryError> {
    let mut first = Ok(());
    for t in tasks {
        let outcome = t.await.map_err(RecoveryError::from).and_then(|r| r);
        if let Err(e) = outcome {
            if first.is_ok() {
                first = Err(e);
            } else {
                tracing::error!(error = %format!("{e:#}"), "recovery");
            }
        }
    }
    first
}

#[cfg(test)]
mod tests;
