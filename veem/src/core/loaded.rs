//! What a core starts from ([`Loaded`]): read from the store as a
//! restarted VEEM does, or kept current by a standby
//! ([`super::replica`]).

use anyhow::Result;

use super::records::VeeRecords;
use crate::config::VeemConfig;
use crate::model::VeeRec;
use crate::planner::Planner;
use crate::planner_store::PlannerStore;
use crate::store::{Store, Tree};

/// What a core starts from: every VEE record (with the revision each was
/// read at) and the planner as saved (`None`: none yet), read from the
/// store ([`Loaded::read`]) or kept current by a standby
/// ([`replica::Replica`]).
pub struct Loaded {
    pub(super) records: VeeRecords,
    pub(super) planner: Option<Planner>,
    /// What saves the planner's changes.
    pub(super) planner_store: PlannerStore,
}

impl Loaded {
    /// Reads the VEE records and the planner of `store`. Errors: a record
    /// that cannot be read or decoded.
    pub fn read(cfg: &VeemConfig, store: &Store) -> Result<Self> {
        // The VEE records and the planner are read side by side (100,000
        // of each take about as long).
        let renew_ahead_s = renew_ahead_s(cfg);
        // Noted before the read: a record written meanwhile (by another
        // VEEM of the site) is written after it, so no commit overwrites it.
        let read_at = store.revision()?;
        let (records, planner) = std::thread::scope(|s| {
            let records =
                s.spawn(|| -> Result<VeeRecords> { Ok(VeeRecords::new(store.list::<VeeRec>(Tree::Vees)?, renew_ahead_s, read_at)) });
            let planner = PlannerStore::load(store);
            (
                records
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("reading the VEE records panicked"))),
                planner,
            )
        });
        let (planner, planner_store) = planner?;
        Ok(Self {
            records: records?,
            planner,
            planner_store,
        })
    }
}

impl Loaded {
    /// Every VEE record, in ID order.
    pub fn vees(&self) -> impl Iterator<Item = &VeeRec> {
        self.records.values()
    }

    /// The planner (`None`: none saved yet).
    pub fn planner(&self) -> Option<&Planner> {
        self.planner.as_ref()
    }
}

/// Seconds before an open-ended window's end at which its renewal is due
/// (half the planning horizon).
pub fn renew_ahead_s(cfg: &VeemConfig) -> i64 {
    cfg.planning_horizon.as_secs() as i64 / 2
}
