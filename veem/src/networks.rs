//! Service networks at admission: the site's live services' holdings, the
//! assignment of a new service's networks and NICs (`ipam`), and their
//! commit with the admission, under one lock so that two admissions never
//! take the same subnet, VNI or external address.

use anyhow::Result;
use interfaces::manifest::Manifest;

use crate::ipam::{self, Taken};
use crate::manager::Veem;
use crate::model::{ServiceRec, VeeRec, VeeState};
use crate::store::Tree;

impl Veem {
    /// What the site's live services hold: the subnets and VNIs of every
    /// service with a VEE not terminated, and those VEEs' external
    /// addresses.
    pub fn networks_taken(&self) -> Result<Taken> {
        let live = |v: &VeeRec| !matches!(v.state, VeeState::Terminated | VeeState::Rejected);
        let vees = self.vees_where(live);
        let live_services: std::collections::HashSet<&str> = vees.iter().map(|v| v.service_id.as_str()).collect();
        let mut taken = Taken::default();
        for s in self.store.list::<ServiceRec>(Tree::Services)? {
            if live_services.contains(s.id.as_str()) {
                for n in &s.networks {
                    taken.subnets.push(n.cidr);
                    taken.vnis.insert(n.vni);
                }
            }
        }
        taken.external = vees.iter().flat_map(|v| v.nics.iter().filter_map(|n| n.external)).collect();
        Ok(taken)
    }

    /// Assigns the networks of manifest `m` to service `svc` and NICs to
    /// its VEEs `vees` (sorted in admission order), then writes the
    /// admission in one commit ([`Veem::commit_admission`]). Errors with
    /// [`ipam::IpamError`] when the site cannot give the networks; then
    /// nothing is written (the caller releases the planner's reservation).
    pub fn admit_records(&self, m: &Manifest, svc: &mut ServiceRec, vees: &mut [VeeRec]) -> Result<()> {
        let _one_at_a_time = self.ipam.lock().unwrap();
        if !m.networks.is_empty() {
            let order: Vec<&str> = vees.iter().map(|v| v.component.as_str()).collect();
            let (networks, nics) = ipam::assign(m, &self.cfg.networks, &self.networks_taken()?, &order)?;
            svc.networks = networks;
            for (v, n) in vees.iter_mut().zip(nics) {
                v.nics = n;
            }
        }
        self.commit_admission(svc, vees)
    }
}

#[cfg(test)]
mod tests;
