//! Migrations a VEEM's restart or takeover left running (see the parent
//! module for running one): finished or rolled back at start-up from
//! what the source host runs, what the destination says and, for a VEE
//! coming home from a peer site or sent to one, what the peer says.

use std::collections::HashMap;
use std::time::Duration;

use interfaces::vhi;

use super::{Dest, LegError, Migration, MigrationError};
use crate::model::{Location, MigrationRec, MigrationState, VeeState};
use crate::store::Tree;

/// What each host that answered runs: host -> VEE ID -> its domain (state,
/// and whether a live migration of it out of that host is under way).
pub type Running = HashMap<String, HashMap<String, vhi::DomainInfo>>;

/// How many hosts a start-up asks for their domains at once.
const LISTING_PARALLEL: usize = 64;

/// How long a start-up waits for a host's identity and domains.
const LISTING_WAIT: Duration = Duration::from_secs(10);

/// How long a restart waits for a peer still sending a VEE home.
const PEER_SENDING_WAIT: Duration = Duration::from_secs(30);

/// Where a migration cut short left its VEE, as the source, the
/// destination and the peer tell.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// Still at its source: the migration is rolled back.
    AtSource,
    /// It left its source: the migration is finished at the destination.
    Left,
    /// Nobody can tell now (a host or the peer did not answer, the peer
    /// still sends it): the migration is left running, the VEE migrating.
    Unknown(String),
}

impl Migration {
    /// What each host of the site that answers as itself runs (host name
    /// and site checked first; a host that does not is left out, and
    /// nothing is done on it). The hosts are asked side by side, at most
    /// [`LISTING_PARALLEL`] at once, each given [`LISTING_WAIT`]: a start
    /// over 2,000 hosts is not 2,000 round trips in a row, nor held by a
    /// host that accepts a connection and never answers (left out, as one
    /// that refuses it).
    pub(crate) async fn hosts_running(&self) -> Running {
        use futures::StreamExt;
        let ask = |h: String| async move {
            let listed = crate::ports::within(&*self.clock, LISTING_WAIT, self.host_domains(&h)).await;
            match listed {
                Some(Ok(l)) => Some((h, l.into_iter().map(|d| (d.vee_id.clone(), d)).collect())),
                Some(Err(e)) => {
                    tracing::error!(host = %h, error = %format!("{e:#}"), "cannot reconcile with host: nothing is done on it");
                    None
                }
                None => {
                    tracing::warn!(host = %h, wait = ?LISTING_WAIT, "cannot reconcile with host: it did not list its domains in time; nothing is done on it");
                    None
                }
            }
        };
        futures::stream::iter(self.hosts.names())
            .map(ask)
            .buffer_unordered(LISTING_PARALLEL)
            .filter_map(std::future::ready)
            .collect()
            .await
    }

    /// The domains host `h` runs, once it answered as itself. Errors: it
    /// does not, or its ListDomains fails.
    async fn host_domains(&self, h: &str) -> anyhow::Result<Vec<vhi::DomainInfo>> {
        self.hosts.identify(h).await?;
        let c = self.hosts.host(h)?;
        c.domains()
            .await
            .map_err(|e| anyhow::anyhow!("ListDomains: {}", e.message()))
    }

    /// The migrations recorded running whose VEE no operation of this
    /// VEEM holds: none of its tasks runs them.
    fn left_running(&self) -> Result<Vec<MigrationRec>, MigrationError> {
        Ok(self
            .store
            .list::<MigrationRec>(Tree::Migrations)?
            .into_iter()
            .filter(|m| m.state == MigrationState::Running && self.try_lock_vee(&m.vee_id).is_some())
            .collect())
    }

    /// Settles each migration left running ([`Migration::settle_cut_short`],
    /// `report_unknown` as there) from what the hosts run (`running`): at
    /// start-up, every migration a restart or takeover cut short. Errors:
    /// the store's.
    pub(crate) async fn settle_left_running(&self, running: &Running, report_unknown: bool) -> Result<(), MigrationError> {
        for m in self.left_running()? {
            self.settle_cut_short(m, running, report_unknown).await?;
        }
        Ok(())
    }

    /// Settles, as a start-up does, the migrations recorded running that
    /// no task of this VEEM runs: one whose settling at start-up found a
    /// host or the peer silent, one whose destination did not take its VEE
    /// in time (`arrival::NotTaken`). A migration whose VEE an operation
    /// holds is left for the next round. Run every `usage_interval` by the
    /// leader: the migrations' tree (every migration ever made) and the
    /// hosts are read only while a VEE is migrating, which a running
    /// migration's VEE is. Errors: the store's.
    pub(crate) async fn settle_left(&self) -> Result<(), MigrationError> {
        if self.vees_where(|v| v.state == VeeState::Migrating).is_empty() || self.left_running()?.is_empty() {
            return Ok(());
        }
        self.settle_left_running(&self.hosts_running().await, false).await
    }

    /// Finishes or rolls back migration `m`, recorded running by a VEEM
    /// that stopped (a restart, a takeover), from where its VEE is now
    /// (`running`: what each host that answered runs):
    /// - still at its source (its domain there, or the peer still running
    ///   it): the destination aborted, the migration failed, the VEE
    ///   running where it was;
    /// - gone from its source: completed at the destination (which may
    ///   have completed it already) and recorded done as a migration that
    ///   ran to its end is (its reservation moved, released or kept); a
    ///   destination site that will not complete it again but runs it
    ///   counts as completed; one that does not run it fails it;
    /// - unknown (a host or the peer does not answer, or the source host
    ///   still sends it: its VEEH's migration outlives the VEEM that asked
    ///   for it): left as it is, the next start or
    ///   [`Migration::settle_left`] round settles it.
    ///
    /// A peer's own record of a VEE it sent on for its primary site
    /// (`site-of:`) is settled from its source host alone. Errors: the
    /// store's.
    ///
    /// `report_unknown`: an unknown outcome is logged and evented (at
    /// start-up; the periodic [`Migration::settle_left`] stays quiet).
    pub(crate) async fn settle_cut_short(&self, mut m: MigrationRec, running: &Running, report_unknown: bool) -> Result<(), MigrationError> {
        let _g = self.lock_vee(&m.vee_id).await;
        let mut v = self.vee(&m.vee_id)?;
        if let Dest::ForPrimary(_) = &m.to {
            return self.settle_sent_for_primary(m, v, running);
        }
        let homecoming = matches!(v.location, Location::Site(_));
        let found = self.find_cut_short(&m, &v.location, running).await;
        let restarted = "the VEEM restarted mid-migration";
        match found {
            Found::Unknown(_) if !report_unknown => Ok(()),
            Found::Unknown(why) => {
                tracing::warn!(migration = %m.id, vee = %v.id, "{restarted}: left running ({why})");
                self.event(
                    &v.id,
                    &v.service_id,
                    "reconcile",
                    format!("migration {}: left running: {why}", m.id),
                );
                Ok(())
            }
            Found::AtSource => {
                if let Err(e) = self.abort_at(&m.to, &v.id).await {
                    tracing::warn!(migration = %m.id, error = %format!("{e:#}"), "destination cleanup failed");
                }
                let detail = format!("{restarted}; the destination was aborted and the VEE stays at {}", m.from);
                self.event(&v.id, &v.service_id, "reconcile", format!("migration {}: {detail}", m.id));
                self.record_failed(&mut m, &mut v, detail, homecoming).await
            }
            Found::Left => match self.completed_at(&m.to, &v.id).await {
                Ok(()) => {
                    let id = m.id.clone();
                    self.record_done(&mut m, &mut v, 0, 0).await?;
                    m.detail = format!("{restarted}; the VEE had left {}: completed at {}", m.from, m.to);
                    self.store.put(Tree::Migrations, &m.id, &m)?;
                    self.event(&v.id, &v.service_id, "reconcile", format!("migration {id}: {}", m.detail));
                    Ok(())
                }
                Err(e) => {
                    let detail = format!("{restarted}; the VEE left {} but {} did not take it: {e:#}", m.from, m.to);
                    self.event(&v.id, &v.service_id, "reconcile", format!("migration {}: {detail}", m.id));
                    self.record_failed(&mut m, &mut v, detail, homecoming).await
                }
            },
        }
    }

    /// Where the VEE of migration `m`, recorded at `from`, is now.
    async fn find_cut_short(&self, m: &MigrationRec, from: &Location, running: &Running) -> Found {
        match from {
            Location::Host(src) => match running.get(src) {
                None => Found::Unknown(format!("its source host {src} did not answer")),
                Some(doms) if doms.get(&m.vee_id).is_some_and(|d| d.migrating_out) => {
                    Found::Unknown(format!("its source host {src} still sends it"))
                }
                Some(doms) if doms.contains_key(&m.vee_id) => Found::AtSource,
                Some(_) => Found::Left,
            },
            // Coming home from a peer site: the peer sends it (SendVee)
            // and records it gone once sent.
            Location::Site(peer) => {
                if let Dest::Host(h) = &m.to {
                    if !running.contains_key(h) {
                        return Found::Unknown(format!("its destination host {h} did not answer"));
                    }
                }
                let p = match self.peer(peer) {
                    Ok(p) => p,
                    Err(e) => return Found::Unknown(format!("{e:#}")),
                };
                let start = self.clock.now_ms();
                loop {
                    match p.get_vee(&m.vee_id).await {
                        Ok(r) if r.state == Some(VeeState::Migrating) => {
                            if self.clock.since_ms(start) >= PEER_SENDING_WAIT.as_millis() as u64 {
                                return Found::Unknown(format!("site {peer} still sends it"));
                            }
                        }
                        Ok(r) if r.state.is_some_and(|s| s.is_live()) => return Found::AtSource,
                        Ok(_) => return Found::Left,
                        Err(s) if s.is_not_found() => return Found::Left,
                        Err(s) => return Found::Unknown(format!("site {peer}: {}", s.message())),
                    }
                    self.clock.sleep(Duration::from_secs(1)).await;
                }
            }
            Location::Nowhere => Found::Unknown("the VEE is not placed".into()),
        }
    }

    /// Completes the VEE's arrival at `dest`; a peer site that refuses
    /// (it completed it already, before the restart) but runs the VEE
    /// counts as completed.
    pub(super) async fn completed_at(&self, dest: &Dest, vee_id: &str) -> Result<(), LegError> {
        let Err(e) = self.complete_at(dest, vee_id).await else {
            return Ok(());
        };
        if let Dest::Site(s) = dest {
            if let Ok(r) = self.peer(s).map_err(LegError::call(s))?.get_vee(vee_id).await {
                if r.state == Some(VeeState::Running) {
                    return Ok(());
                }
            }
        }
        Err(e)
    }

    /// A peer's record of a VEE it sent on for its primary site: done if
    /// the VEE left its source host here (the primary finishes what it
    /// received), failed if it runs there still.
    fn settle_sent_for_primary(&self, mut m: MigrationRec, mut v: crate::model::VeeRec, running: &Running) -> Result<(), MigrationError> {
        let Some(doms) = v.host().and_then(|h| running.get(h)) else {
            return Ok(());
        };
        if doms.get(&v.id).is_some_and(|d| d.migrating_out) {
            // Its source host still sends it: settled once that ends.
            return Ok(());
        }
        let left = !doms.contains_key(&v.id);
        m.advance(if left { MigrationState::Done } else { MigrationState::Failed })?;
        m.detail = if left {
            "the VEEM restarted mid-migration; the VEE left its source".into()
        } else {
            "the VEEM restarted mid-migration; the VEE stays at its source".into()
        };
        let mut to = VeeState::Running;
        if left {
            let _ = self.planner.lock().unwrap().release_service(&v.id);
            self.persist_planner()?;
            v.location = Location::Nowhere;
            to = VeeState::Terminated;
        }
        self.store.put(Tree::Migrations, &m.id, &m)?;
        self.event(&v.id, &v.service_id, "reconcile", format!("migration {}: {}", m.id, m.detail));
        if v.state == VeeState::Migrating {
            self.transition(&mut v, to, "reconciled after restart")?;
        } else {
            self.save_vee(&v)?;
        }
        Ok(())
    }
}
