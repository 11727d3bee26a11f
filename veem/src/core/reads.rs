//! What the workflows read of the site's records: a VEE's record from the
//! cache (each with the revision it was read at), the cache's views (by
//! host, live, due, displaced), a service and its terms, a component's
//! rollout from the store.

use super::{Core, RecordError};
use crate::model::{ServiceRec, VeeRec};
use crate::store::{Revision, StoreError, Tree};

impl Core {
    /// The record of VEE `id`. Errors: [`RecordError::NotFound`].
    pub fn vee(&self, id: &str) -> Result<VeeRec, RecordError> {
        self.vee_records
            .read()
            .unwrap()
            .get(id)
            .cloned()
            .ok_or_else(|| RecordError::not_found("VEE", id))
    }

    /// What `f` makes of VEE `id`'s record (copies no record); `None`
    /// when there is none.
    pub fn with_vee<T>(&self, id: &str, f: impl FnOnce(&VeeRec) -> T) -> Option<T> {
        self.vee_records.read().unwrap().get(id).map(f)
    }

    /// The record of service `id`. Errors: [`RecordError::NotFound`], the
    /// store's.
    pub fn service(&self, id: &str) -> Result<ServiceRec, RecordError> {
        self.store
            .get(Tree::Services, id)?
            .ok_or_else(|| RecordError::not_found("service", id))
    }

    /// The terms (SLA, constraints) of service `id` as admitted; `None`
    /// when the service is gone or has none here (one run here for a peer
    /// site).
    pub fn terms_of(&self, id: &str) -> Option<crate::domain::ServiceTerms> {
        self.service(id).ok()?.terms
    }

    /// The latest rolling update of `component` of service `service_id`
    /// (`crate::workflows::rollout`), if any: what scaling and checkpoint
    /// retention wait for while it rolls.
    pub fn rollout(&self, service_id: &str, component: &str) -> Result<Option<crate::domain::rollout::RolloutRec>, StoreError> {
        self.store
            .get(Tree::Rollouts, &crate::domain::rollout::RolloutRec::key(service_id, component))
    }

    /// How many VEE records there are.
    pub fn vee_count(&self) -> usize {
        self.vee_records.read().unwrap().len()
    }

    /// Every VEE record, in ID order.
    pub fn vees(&self) -> Vec<VeeRec> {
        self.vee_records.read().unwrap().values().cloned().collect()
    }

    /// The VEE records for which `keep` holds, in ID order (copies only
    /// those).
    pub fn vees_where(&self, keep: impl Fn(&VeeRec) -> bool) -> Vec<VeeRec> {
        self.vee_records.read().unwrap().values().filter(|v| keep(v)).cloned().collect()
    }

    /// What `f` makes of each VEE record, where it makes something, in ID
    /// order (copies no record).
    pub fn vees_map<T>(&self, f: impl FnMut(&VeeRec) -> Option<T>) -> Vec<T> {
        self.vee_records.read().unwrap().values().filter_map(f).collect()
    }

    /// [`Core::vees_map`] over the records placed on the hosts `hosts`
    /// only (from the by-host index), host by host; `f` may keep a record
    /// (shared, not copied: it is not changed in place, a write replaces it).
    pub fn vees_on_hosts_map<'h, T>(
        &self,
        hosts: impl IntoIterator<Item = &'h str>,
        f: impl FnMut(&std::sync::Arc<VeeRec>) -> Option<T>,
    ) -> Vec<T> {
        let records = self.vee_records.read().unwrap();
        hosts.into_iter().flat_map(|h| records.on_host(h)).filter_map(f).collect()
    }

    /// [`Core::vees_map`] over the VEEs live on a host, `f` given since
    /// when (Unix ms) this VEEM has seen each live there: the first call
    /// that saw it so, kept with its record until its host or its
    /// liveness changes (`VeeRecords::live_on_hosts`; the proposal pass).
    pub fn live_vees_map<T>(&self, now_ms: i64, f: impl FnMut(&VeeRec, i64) -> Option<T>) -> Vec<T> {
        self.vee_records.write().unwrap().live_on_hosts(now_ms, f)
    }

    /// [`Core::vees_map`], `f` given each record's store revision too (the
    /// one it was read or written at).
    pub fn vees_map_at<T>(&self, mut f: impl FnMut(&VeeRec, Revision) -> Option<T>) -> Vec<T> {
        self.vee_records.read().unwrap().values_at().filter_map(|(v, r)| f(v, r)).collect()
    }

    /// VEE record `id` (a copy) with the store revision it was read or
    /// written at; `None` when there is none.
    pub fn vee_at(&self, id: &str) -> Option<(VeeRec, Revision)> {
        self.vee_records.read().unwrap().get_at(id).map(|(v, r)| (v.clone(), r))
    }

    /// The store revision the VEE records are current at: it moves on
    /// with every write of one through this core (and every read of one
    /// written elsewhere), so an unchanged value means unchanged records.
    pub fn vees_revision(&self) -> Revision {
        self.vee_records.read().unwrap().revision()
    }

    /// The displaced VEE records (suspended and placed nowhere, waiting
    /// for room: [`VeeRec::is_displaced`]), in ID order, from an index
    /// (copies only those).
    pub fn displaced_vees(&self) -> Vec<VeeRec> {
        self.vee_records.read().unwrap().displaced().cloned().collect()
    }

    /// The VEE records due at `now_ms` or before ([`VeeRec::due_ms`]),
    /// earliest first: what the scheduler and the SLA round look at.
    pub fn due_vees(&self, now_ms: i64) -> Vec<VeeRec> {
        self.vee_records.read().unwrap().due(now_ms).cloned().collect()
    }
}
