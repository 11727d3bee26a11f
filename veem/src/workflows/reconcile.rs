//! Reconciliation: the VEEM's records against what every VEEH reports
//! (ListDomains), in full at start-up, and for lost domains at every
//! heartbeat interval ([`watch`]: [`Reconcile::domain_watch_round`]). Each
//! difference it resolves is logged and evented.

use std::collections::HashSet;
use std::ops::Deref;
use std::sync::Arc;

use interfaces::vhi::{self, DestroyRequest};

use crate::core::{Core, RecordError};
use crate::domain::rollout::{RolloutRec, RolloutState};
use crate::model::{Location, MigrationRec, MigrationState, VeeRec, VeeState};
use crate::steps::boot::Boot;
use crate::store::Tree;
use crate::workflows::migration::{Migration, MigrationError, Running};
use crate::workflows::recovery::Recovery;

/// What start-up reconciliation does with domains no record places on
/// their host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strays {
    /// Destroy them (a VEE never runs in two places).
    Destroy,
    /// Destroy them, unless the database has no records at all (new, or
    /// lost): then they are left alone until an operator decides.
    KeepWithoutRecords,
}

/// Why a start-up's reconciliation stopped: the migrations it settles or
/// resumes, or the VEEs' records, could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Migrations(#[from] MigrationError),
    #[error(transparent)]
    Record(#[from] RecordError),
}

impl From<crate::store::StoreError> for ReconcileError {
    fn from(e: crate::store::StoreError) -> Self {
        ReconcileError::Record(e.into())
    }
}

/// Start-up and the domain watch (see the module doc): the records against what the VEEHs run, recoveries a restart cut short finished, a returning host fenced. Calls the core, booting, migration and recovery.
pub struct Reconcile {
    core: Arc<Core>,
    pub(crate) boot: Arc<Boot>,
    pub(crate) migration: Arc<Migration>,
    pub(crate) recovery: Arc<Recovery>,
    /// The hosts' lists the last reconcile took, which the domain watch
    /// starts from ([`Reconcile::take_watch_seed`]).
    watch_seed: std::sync::Mutex<Option<DomainWatch>>,
}

impl Deref for Reconcile {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Reconcile {
    pub fn new(core: Arc<Core>, boot: Arc<Boot>, migration: Arc<Migration>, recovery: Arc<Recovery>) -> Self {
        Self {
            core,
            boot,
            migration,
            recovery,
            watch_seed: Default::default(),
        }
    }

    /// What the domain watch starts from: the lists of the last reconcile
    /// (each with the generation and records' revision noted before it),
    /// so that its first round after a start does not list every host
    /// again; an empty watch when there was none.
    pub fn take_watch_seed(&self) -> DomainWatch {
        self.watch_seed.lock().unwrap().take().unwrap_or_default()
    }
}

impl Reconcile {
    /// Resolves every difference between records and hosts:
    /// - a VEE recorded admitted/deploying: deployed again (idempotent),
    ///   unless a rolling update was replacing it (its rollout boots it on
    ///   the new image when it resumes);
    /// - a VEE recorded running whose host runs no such domain: failed, and
    ///   restored on that host from its latest checkpoint;
    /// - a VEE left checkpointing, or migrating with no migration running,
    ///   by the VEEM before (a restart, a takeover): running again where
    ///   its domain runs;
    /// - a migration approved and never started: started;
    /// - a domain a host runs for a VEE recorded elsewhere or terminated:
    ///   destroyed there (a VEE never runs in two places);
    /// - a migration recorded running: completed and recorded done as one
    ///   that ran to its end if the VEE left its source (a host of this
    ///   site, or the peer site it comes home from, as the peer says),
    ///   else aborted at the destination (the VEE stays); left for the
    ///   next start when the source or the peer does not answer
    ///   ([`Migration::settle_cut_short`]).
    ///
    /// A host that does not answer as itself (host name and site) is not
    /// asked, and nothing is done on it. With `strays` at
    /// [`Strays::KeepWithoutRecords`] and no record at all (a new or lost
    /// database), domains are left alone, each logged and evented: an
    /// operator decides (`veem serve --destroy-strays`).
    pub async fn reconcile(self: &Arc<Self>, strays: Strays) -> Result<(), ReconcileError> {
        // Noted before any list: what the domain watch starts from.
        let noted: Vec<(String, u64)> = self
            .hosts
            .names()
            .into_iter()
            .map(|h| {
                let g = self.hosts.domains_generation(&h);
                (h, g)
            })
            .collect();
        let listed_at = self.vees_revision();
        let running: Running = self.migration.hosts_running().await;
        *self.watch_seed.lock().unwrap() = Some(DomainWatch::seeded(&running, &noted, listed_at));
        // Migrations a restart or takeover cut short: finished or rolled
        // back from where their VEE is now.
        self.migration.settle_left_running(&running, true).await?;
        // The VEEs a migration still runs for (none after the loop above,
        // unless their source did not answer).
        let migrating: HashSet<String> = self
            .store
            .list::<MigrationRec>(Tree::Migrations)?
            .into_iter()
            .filter(|m| m.state == MigrationState::Running)
            .map(|m| m.vee_id)
            .collect();
        // Only what the arms below may act on (copies of those): VEEs
        // deploying or recovering on a host, and the live ones of the hosts
        // that answered.
        // A live VEE whose domain runs there and that no operation was
        // cut short on is at rest: not copied.
        let relevant = |v: &VeeRec| match &v.location {
            Location::Host(h) => {
                matches!(
                    v.state,
                    VeeState::Admitted | VeeState::Deploying | VeeState::Failed | VeeState::Recovering
                ) || (v.state.is_live()
                    && running
                        .get(h)
                        .is_some_and(|d| !d.contains_key(&v.id) || cut_short(v.state, &v.id, &migrating).is_some()))
            }
            _ => false,
        };
        // The VEEs a rolling update is replacing (the rollout resumes them).
        let rolling: Vec<RolloutRec> = self
            .store
            .list::<RolloutRec>(Tree::Rollouts)?
            .into_iter()
            .filter(|r| r.state == RolloutState::Rolling)
            .collect();
        let replacing: HashSet<String> = self
            .vees_where(|v| {
                v.state == VeeState::Deploying
                    && rolling
                        .iter()
                        .any(|r| r.service_id == v.service_id && r.component == v.component && !r.replaced.contains(&v.id))
            })
            .into_iter()
            .map(|v| v.id)
            .collect();
        for mut v in self.vees_where(relevant) {
            match (v.location.clone(), v.state) {
                (Location::Host(h), VeeState::Admitted | VeeState::Deploying) => {
                    if running
                        .get(&h)
                        .is_some_and(|d| d.get(&v.id).is_some_and(|d| d.state() == vhi::VeeState::Running))
                    {
                        self.event(&v.id, &v.service_id, "reconcile", format!("found running on {h}"));
                        self.transition(&mut v, VeeState::Running, "reconciled")?;
                    } else if replacing.contains(&v.id) {
                        // A rolling update's replacement a restart cut
                        // short: the rollout boots it on its new image
                        // (Rollouts::resume_all), not on the old one first.
                        self.event(&v.id, &v.service_id, "reconcile", format!("its rolling update on {h} is resumed"));
                    } else if v.deploy_due(self.clock.now()) {
                        self.event(&v.id, &v.service_id, "reconcile", format!("deploy on {h} resumed"));
                        self.boot.spawn_deploy(&v.id);
                    }
                }
                (Location::Host(h), VeeState::Failed | VeeState::Recovering) if !self.charged(&v)? => {
                    // A recovery the VEEM's restart cut short (R3): done
                    // if the domain runs, resumed on its host if not. On a
                    // host that does not answer, the host's failure
                    // recovers it.
                    let Some(doms) = running.get(&h) else { continue };
                    if doms.get(&v.id).is_some_and(|d| d.state() == vhi::VeeState::Running) {
                        self.event(
                            &v.id,
                            &v.service_id,
                            "reconcile",
                            format!("found running on {h}: its recovery had finished"),
                        );
                        if v.state == VeeState::Failed {
                            self.transition(&mut v, VeeState::Recovering, "reconciled")?;
                        }
                        self.transition(&mut v, VeeState::Running, "reconciled")?;
                    } else {
                        self.event(
                            &v.id,
                            &v.service_id,
                            "reconcile",
                            format!("recovery on {h} cut short by a restart: resumed"),
                        );
                        let (veem, id) = (self.clone(), v.id.clone());
                        self.spawn(async move { veem.restore_on(&id, &h, "its recovery was cut short by a VEEM restart").await });
                    }
                }
                (Location::Host(h), s) if s.is_live() || s == VeeState::Recovering => {
                    let Some(doms) = running.get(&h) else { continue };
                    if !doms.contains_key(&v.id) {
                        // Restored there from its latest checkpoint, as
                        // the domain watch does (its reservation kept); a
                        // VEE its provider suspended stays failed.
                        self.event(&v.id, &v.service_id, "reconcile", format!("not running on {h}: failed"));
                        self.transition(&mut v, VeeState::Failed, format!("{h} does not run it"))?;
                        if s != VeeState::Suspended && self.try_busy(&v.id) {
                            let (veem, id) = (self.clone(), v.id.clone());
                            self.spawn(async move {
                                veem.restore_on(&id, &h, "its host did not run it when the VEEM started").await;
                                veem.unbusy(&id);
                            });
                        }
                    } else if let Some(what) = cut_short(s, &v.id, &migrating) {
                        // Its domain runs where it was: the operation a
                        // takeover or restart cut short is rolled back, so
                        // that the VEE can be checkpointed and moved again.
                        self.event(
                            &v.id,
                            &v.service_id,
                            "reconcile",
                            format!("{what} cut short by a VEEM restart or takeover: running on {h}"),
                        );
                        self.transition(&mut v, VeeState::Running, format!("{what} cut short; running on {h}"))?;
                    }
                }
                _ => {}
            }
        }
        // Migrations approved that a restart or takeover kept from
        // starting: started now (each checks that its VEE still runs).
        self.migration.resume_approved()?;
        // Domains a host runs that the records place elsewhere or nowhere.
        let no_records = self.vee_count() == 0 && self.store.is_empty(Tree::Services)?;
        for (h, doms) in &running {
            if no_records && strays == Strays::KeepWithoutRecords {
                for id in doms.keys() {
                    tracing::error!(host = %h, vee = %id, "the database has no records: its domain is left alone (veem serve --destroy-strays destroys it)");
                    self.event(id, "", "reconcile", format!("domain on {h} not in an empty database: left alone"));
                }
                continue;
            }
            self.destroy_strays(h, doms.keys(), |v| v.state != VeeState::Terminated).await;
        }
        Ok(())
    }

    /// A failed host answers again: whatever it still runs was recovered
    /// elsewhere meanwhile, is being recovered (its VEEs became `failed`
    /// when the host was declared failed), or ended; so its copies are
    /// destroyed before they can answer for the VEE (a VEE never runs in
    /// two places).
    pub(crate) async fn fence_returning_host(&self, host: &str) {
        let listed = match self.hosts.host(host) {
            Ok(c) => c.domains().await.map_err(|e| e.message().to_string()),
            Err(e) => Err(e.to_string()),
        };
        match listed {
            Ok(l) => {
                let ids: Vec<String> = l.into_iter().map(|d| d.vee_id).collect();
                let stale = |s: VeeState| matches!(s, VeeState::Failed | VeeState::Recovering | VeeState::Terminated);
                self.destroy_strays(host, ids.iter(), |v| !stale(v.state)).await;
            }
            Err(e) => tracing::warn!(%host, error = %e, "cannot list the domains of a returning host"),
        }
    }

    /// Destroys, among the domains `vee_ids` that `host` runs, those whose
    /// VEE the records place elsewhere or nowhere, or for which `keep`
    /// says no.
    async fn destroy_strays<'a>(&self, host: &str, vee_ids: impl IntoIterator<Item = &'a String>, keep: impl Fn(&VeeRec) -> bool) {
        for id in vee_ids {
            let keep = self
                .with_vee(id, |v| matches!(&v.location, Location::Host(h) if h == host) && keep(v))
                .unwrap_or(false);
            if keep {
                continue;
            }
            tracing::warn!(%host, vee = %id, "domain not in the records here: destroying it");
            self.event(id, "", "reconcile", format!("stray domain on {host} destroyed"));
            let Ok(c) = self.hosts.host(host) else { continue };
            let _ = c
                .destroy(DestroyRequest {
                    vee_id: id.clone(),
                    remove: true,
                })
                .await;
        }
    }
}

/// What operation a live VEE in state `s` was under when the VEEM
/// stopped, when none can be under way any more (the VEEM that ran it is
/// gone): a checkpoint (its record was never written: the checkpoint does
/// not count), or a migration no running migration record (`migrating`)
/// is left for. `None` for a VEE at rest.
fn cut_short(s: VeeState, vee_id: &str, migrating: &HashSet<String>) -> Option<&'static str> {
    match s {
        VeeState::Checkpointing => Some("a checkpoint"),
        VeeState::Migrating if !migrating.contains(vee_id) => Some("a migration"),
        _ => None,
    }
}

impl Reconcile {
    /// Restores VEE `vee_id` on `host`, its reservation unchanged, because
    /// `why` (its domain vanished, its recovery was cut short); records an
    /// unrecovered violation if that fails.
    async fn restore_on(&self, vee_id: &str, host: &str, why: &str) {
        tracing::error!(vee = %vee_id, %host, "{why}: restoring it there");
        if let Err(e) = self.recovery.recover_vee_on(vee_id, why, host, None).await {
            tracing::error!(vee = %vee_id, %host, error = %format!("{e:#}"), "the VEE could not be restored");
            if let Err(e) = self.recovery.record_unrecovered(vee_id, why, &format!("{e:#}")) {
                tracing::error!(vee = %vee_id, error = %format!("{e:#}"), "cannot record the violation");
            }
        }
    }

    /// Whether an unrecovered violation was charged for `v` since it last
    /// changed state: its failure is final, not a recovery under way.
    fn charged(&self, v: &VeeRec) -> Result<bool, crate::store::StoreError> {
        let since = v.updated_ms.div_euclid(1000) - 1;
        Ok(self
            .store
            .list::<crate::model::ViolationRec>(Tree::Violations)?
            .iter()
            .any(|x| x.vee_id == v.id && x.start_unix >= since))
    }
}

mod watch;
pub use watch::{DomainWatch, Missing, MISSING_ROUNDS};

#[cfg(test)]
mod tests;
