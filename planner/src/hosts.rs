//! Hosts: registration, state (down / up, measured load) and usage queries.

use std::sync::Arc;

use super::capacity::{Down, HostIdx, HostRecord, HostSpec, Resources};
use super::slots::Slot;
use super::{intern, PlanError, Planner};

impl Planner {
    /// Adds a host. Errors: [`PlanError::DuplicateHost`].
    pub fn add_host(&mut self, spec: HostSpec) -> Result<HostIdx, PlanError> {
        if self.d.host_names.contains_key(&spec.name) {
            return Err(PlanError::DuplicateHost(spec.name));
        }
        let profile = intern(&mut self.p.profiles, &mut self.d.profile_ids, &spec.profile);
        let site = intern(&mut self.p.sites, &mut self.d.site_ids, &spec.site);
        let region = intern(&mut self.p.regions, &mut self.d.region_ids, &spec.region);
        let idx = self.p.hosts.len() as HostIdx;
        self.d.host_names.insert(spec.name.clone(), idx);
        Arc::make_mut(&mut self.p.hosts).push(HostRecord {
            spec,
            profile,
            site,
            region,
            down: None,
            measured_load: 0.0,
            removed: false,
        });
        self.d.usage.push_back(Arc::default());
        Arc::make_mut(&mut self.d.peaks).push(Resources::ZERO);
        self.reindex(idx);
        self.d.revision += 1;
        self.d.header_revision += 1;
        Ok(idx)
    }

    /// Removes a host that holds no reservation. Errors:
    /// [`PlanError::UnknownHost`], [`PlanError::HostInUse`].
    pub fn remove_host(&mut self, name: &str) -> Result<(), PlanError> {
        let h = self.host_idx(name)?;
        let count = self.d.usage[h as usize].res.len();
        if count > 0 {
            return Err(PlanError::HostInUse {
                host: name.to_string(),
                count,
            });
        }
        self.host_mut(h).removed = true;
        self.d.host_names.remove(name);
        Arc::make_mut(&mut self.d.index).remove(h);
        self.d.revision += 1;
        self.d.header_revision += 1;
        Ok(())
    }

    /// Host `h`'s record, to change: copied first if a snapshot shares it.
    fn host_mut(&mut self, h: HostIdx) -> &mut HostRecord {
        &mut Arc::make_mut(&mut self.p.hosts)[h as usize]
    }

    /// Marks a host down at slot `now`: no new reservation may use it before
    /// `now + block_slots` (V §4.4: the failed resource is blocked for the
    /// remapping interval only). Calling it again moves the block.
    pub fn set_host_down(&mut self, name: &str, now: Slot, block_slots: u32) -> Result<(), PlanError> {
        let h = self.host_idx(name)?;
        let rec = self.host_mut(h);
        let since = rec.down.map_or(now, |d| d.since);
        rec.down = Some(Down {
            since,
            blocked_until: now.saturating_add(block_slots),
        });
        self.d.revision += 1;
        self.d.header_revision += 1;
        Ok(())
    }

    /// Marks a host up again.
    pub fn set_host_up(&mut self, name: &str) -> Result<(), PlanError> {
        let h = self.host_idx(name)?;
        self.host_mut(h).down = None;
        self.d.revision += 1;
        self.d.header_revision += 1;
        Ok(())
    }

    /// Sets the measured load of a host for [`RankPolicy::LoadAware`](super::RankPolicy::LoadAware)
    /// (any scale, lower is better; NaN and negatives count as 0).
    pub fn set_measured_load(&mut self, name: &str, load: f64) -> Result<(), PlanError> {
        let h = self.host_idx(name)?;
        let load = if load.is_finite() && load > 0.0 { load } else { 0.0 };
        if self.p.hosts[h as usize].measured_load != load {
            self.host_mut(h).measured_load = load;
            self.d.header_revision += 1;
        }
        self.reindex(h);
        Ok(())
    }

    /// The index of host `name`.
    pub fn host_idx(&self, name: &str) -> Result<HostIdx, PlanError> {
        self.d
            .host_names
            .get(name)
            .copied()
            .ok_or_else(|| PlanError::UnknownHost(name.to_string()))
    }

    /// The name of host `idx`.
    pub fn host_name(&self, idx: HostIdx) -> &str {
        &self.p.hosts[idx as usize].spec.name
    }

    /// The spec of host `name`.
    pub fn host(&self, name: &str) -> Option<&HostSpec> {
        self.host_idx(name).ok().map(|h| &self.p.hosts[h as usize].spec)
    }

    /// The measured load of host `name` ([`Planner::set_measured_load`]).
    pub fn measured_load(&self, name: &str) -> Option<f64> {
        self.host_idx(name).ok().map(|h| self.p.hosts[h as usize].measured_load)
    }

    /// Whether host `name` is marked down, and how.
    pub fn host_down(&self, name: &str) -> Option<Down> {
        self.host_idx(name).ok().and_then(|h| self.p.hosts[h as usize].down)
    }

    /// All hosts (not removed), in the order they were added.
    pub fn hosts(&self) -> impl Iterator<Item = &HostSpec> {
        self.p.hosts.iter().filter(|h| !h.removed).map(|h| &h.spec)
    }

    /// Reserved usage of host `name` in `slot` (all reservations).
    pub fn host_usage(&self, name: &str, slot: Slot) -> Result<Resources, PlanError> {
        Ok(self.d.usage[self.host_idx(name)? as usize].total.at(slot))
    }

    /// The reservations (VEEs and local spares) on host `name` that end
    /// after slot `from`, by start slot: what a picture of the host's
    /// reservations over the planning horizon shows. Errors: an unknown
    /// host.
    pub fn reservations_on(&self, name: &str, from: Slot) -> Result<Vec<&crate::Reservation>, PlanError> {
        let idx = self.host_idx(name)? as usize;
        Ok(self.d.usage[idx]
            .res
            .iter()
            .filter_map(|(_, key)| self.get(key))
            .filter(|r| r.range.end > from)
            .collect())
    }

    /// Sum of the capacities of all hosts (not removed).
    pub fn total_capacity(&self) -> Resources {
        self.p
            .hosts
            .iter()
            .filter(|h| !h.removed)
            .fold(Resources::ZERO, |a, h| a + h.spec.capacity)
    }
}
