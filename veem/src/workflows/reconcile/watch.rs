//! The domain watch: continuous reconciliation, every heartbeat interval,
//! of the VEEs recorded running against the domains their hosts list.
//!
//! On a site whose heartbeats are paced (`max_heartbeats_per_second`: each
//! host heartbeated less often than every round), a host is listed again
//! only when its heartbeat says its domains changed (HostInfo's
//! `domains_generation`, which its VEEH moves on with every change its
//! state watch sees); in between, its last list stands for it. A VEEH
//! that keeps no generation (0), and every host of a site that is not
//! paced, is listed every round: there lists are few, and waiting for the
//! generation would add the VEEH's state watch and the next heartbeat to
//! the time a lost domain takes to be seen.
//!
//! A list judges only the records written before it was taken: a VEE
//! recorded running on a host after its list (deployed, restored, moved
//! there) may run a domain the list predates, so it is not counted
//! missing; its host is listed again the next round.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::Reconcile;
use crate::model::{Location, VeeState};
use crate::store::Revision;

/// VEE ID -> lists of its host in a row that lacked its domain while it
/// was recorded running there ([`Reconcile::domain_watch_round`]).
pub type Missing = HashMap<String, u32>;

/// Lists in a row a running VEE's domain must be missing from before it
/// counts as lost: one list may race the end of an operation.
pub const MISSING_ROUNDS: u32 = 2;

/// A host's last list of its domains.
struct Listed {
    /// The `domains_generation` of its last heartbeat before the list (0:
    /// not kept).
    generation: u64,
    /// The VEE records' revision just before the list: a record written
    /// after it may be newer than the list.
    revision: Revision,
    /// The VEEs whose domain the host ran, sorted.
    vees: Vec<String>,
}

/// What the domain watch carries from round to round.
#[derive(Default)]
pub struct DomainWatch {
    /// VEEs missing from their host's lists, and in how many in a row.
    pub(crate) missing: Missing,
    /// Each host's last list.
    listed: HashMap<String, Listed>,
    /// Hosts whose last list is older than a record it would judge:
    /// listed again next round, whatever their generation.
    stale: HashSet<String>,
    /// The hosts judged by the last pass over the records.
    judged: HashSet<String>,
    /// The records' revision at the last pass, when it found no VEE
    /// missing and no list stale: a round with no new list, the same
    /// hosts and the records unchanged since would find the same, and
    /// does not read them again.
    quiet_at: Option<Revision>,
}

impl DomainWatch {
    /// A watch that has the hosts' lists of `running`, each host's
    /// generation as `generations` noted before it and the records'
    /// revision `revision` noted before them all: a record written since
    /// makes its host's list stale (listed again), as in any round.
    pub(crate) fn seeded(running: &super::Running, generations: &[(String, u64)], revision: Revision) -> Self {
        let listed = generations
            .iter()
            .filter_map(|(h, generation)| {
                let mut vees: Vec<String> = running.get(h)?.keys().cloned().collect();
                vees.sort_unstable();
                Some((
                    h.clone(),
                    Listed {
                        generation: *generation,
                        revision,
                        vees,
                    },
                ))
            })
            .collect();
        Self {
            listed,
            ..Default::default()
        }
    }

    /// Whether the watch counts VEE `id` missing (and in how many lists).
    pub fn missing(&self, id: &str) -> Option<u32> {
        self.missing.get(id).copied()
    }
}

impl Reconcile {
    /// One round of the domain watch (see the module doc): each host that
    /// is up lists its domains, or its last list stands for it; a VEE
    /// recorded running there before its list, with no operation under
    /// way on it, whose domain is missing from [`MISSING_ROUNDS`] lists in
    /// a row was destroyed behind the VEEM's back (or its host rebooted
    /// quickly). It is marked failed and restored on the same host, its
    /// reservation unchanged, from its latest checkpoint (restarted from
    /// its images without one), as after a host failure; if that fails,
    /// an unrecovered violation is recorded.
    ///
    /// Every host is listed first, then the records are read in one pass
    /// (after every list, as each host's were read after its own): a round
    /// reads each record once, not once per host.
    pub(crate) async fn domain_watch_round(self: &Arc<Self>, watch: &mut DomainWatch) {
        let cfg = self.config();
        let paced = crate::hosts::pacing::Pacing::new(self.hosts.names().len(), cfg.heartbeat_interval, cfg.max_heartbeats_per_second)
            .paced(cfg.heartbeat_interval);
        let mut up = HashSet::new();
        let mut listed_now = false;
        for h in self.hosts.names() {
            if self.hosts.health(&h) != crate::hosts::Health::Up {
                continue;
            }
            let generation = self.hosts.domains_generation(&h);
            let unchanged =
                paced && generation != 0 && !watch.stale.contains(&h) && watch.listed.get(&h).is_some_and(|l| l.generation == generation);
            if unchanged {
                up.insert(h);
                continue;
            }
            let Ok(c) = self.hosts.host(&h) else { continue };
            let revision = self.vees_revision();
            let Ok(list) = c.domains().await else {
                continue;
            };
            let mut vees: Vec<String> = list.into_iter().map(|d| d.vee_id).collect();
            vees.sort_unstable();
            watch.stale.remove(&h);
            watch.listed.insert(
                h.clone(),
                Listed {
                    generation,
                    revision,
                    vees,
                },
            );
            listed_now = true;
            up.insert(h);
        }
        let revision = self.vees_revision();
        if !listed_now && up == watch.judged && watch.quiet_at == Some(revision) {
            return;
        }
        let mut stale = HashSet::new();
        let lost = self.vees_map_at(|v, written| match &v.location {
            Location::Host(h) if v.state == VeeState::Running && up.contains(h) => {
                let l = watch.listed.get(h)?;
                if l.vees.binary_search(&v.id).is_ok() {
                    return None;
                }
                if written > l.revision {
                    // Recorded after the list: the list may predate it.
                    stale.insert(h.clone());
                    return None;
                }
                Some((h.clone(), v.id.clone(), l.revision))
            }
            _ => None,
        });
        let mut still = HashSet::new();
        for (h, id, listed_at) in &lost {
            let here = Location::Host(h.clone());
            // An operation under way (its lock held) may have moved or
            // stopped it since the list: not counted.
            let Some(_g) = self.try_lock_vee(id) else { continue };
            if !self
                .vee_at(id)
                .is_some_and(|(now, written)| now.state == VeeState::Running && now.location == here && written <= *listed_at)
            {
                continue;
            }
            let n = watch.missing.get(id).copied().unwrap_or(0) + 1;
            watch.missing.insert(id.clone(), n);
            still.insert(id.clone());
            if n == MISSING_ROUNDS && self.try_busy(id) {
                let (veem, host, id) = (self.clone(), h.clone(), id.clone());
                self.spawn(async move {
                    let why = format!("its domain vanished from {host}");
                    veem.restore_on(&id, &host, &why).await;
                    veem.unbusy(&id);
                });
            }
        }
        watch.missing.retain(|id, _| still.contains(id));
        watch.quiet_at = (lost.is_empty() && stale.is_empty()).then_some(revision);
        watch.stale.extend(stale);
        watch.judged = up;
    }
}

#[cfg(test)]
mod tests;
