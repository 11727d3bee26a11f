//! Service networks in the VEEM:
//! - at admission: the site's live services' holdings, the assignment of a
//!   new service's networks and NICs (`ipam`), and their commit with the
//!   admission, under one lock so that two admissions never take the same
//!   subnet, VNI or external address;
//! - afterwards: each network's member table (every VEE on it: its DNS
//!   name, MAC, address and the VTEP of the host it runs on), sent with a
//!   VEE's spec to the host it goes to and, when a VEE lands somewhere, to
//!   every host carrying the network (VHI `UpdateNetwork`): DHCP, DNS and
//!   the VXLAN forwarding entries follow it.

use std::collections::BTreeSet;

use anyhow::Result;
use interfaces::manifest::Manifest;
use interfaces::vhi::{NetworkMember, NetworkUpdate, VeeSpec};

use crate::ipam::{self, Taken};
use crate::manager::Veem;
use crate::model::{Location, ServiceRec, VeeRec, VeeState};
use crate::store::Tree;

/// The DNS domain of service `name`'s networks: `<name>.internal`, lower
/// case (names of services with networks are DNS labels, checked at
/// validation).
pub fn domain(service_name: &str) -> String {
    format!("{}.internal", service_name.to_ascii_lowercase())
}

/// The DNS label of a VEE on its service's networks: `<component>-<instance>`,
/// lower case, e.g. `web-0`.
pub fn dns_label(v: &VeeRec) -> String {
    format!("{}-{}", v.component.to_ascii_lowercase(), v.instance)
}

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

impl Veem {
    /// The VHI spec of `v` ([`VeeRec::spec`]) with, on each NIC, its
    /// network's member table and the service's domain.
    pub fn spec_of(&self, v: &VeeRec) -> VeeSpec {
        let mut spec = v.spec();
        if v.nics.is_empty() {
            return spec;
        }
        let Ok(svc) = self.service(&v.service_id) else {
            return spec;
        };
        let siblings = self.vees_where(|o| o.service_id == v.service_id && on_network(o));
        for (nic, wire) in v.nics.iter().zip(&mut spec.nics) {
            wire.domain = domain(&svc.name);
            wire.members = self.members(&siblings, &nic.network);
        }
        spec
    }

    /// Network `network`'s members among `vees` (the VEEs of one service),
    /// by name.
    fn members(&self, vees: &[VeeRec], network: &str) -> Vec<NetworkMember> {
        let mut members: Vec<NetworkMember> = vees
            .iter()
            .filter_map(|v| {
                let nic = v.nics.iter().find(|n| n.network == network)?;
                Some(NetworkMember {
                    name: dns_label(v),
                    mac: nic.mac.clone(),
                    address: nic.address.addr().to_string(),
                    vtep: match &v.location {
                        Location::Host(h) if runs(v) => self.hosts.info(h).map(|i| i.vtep).unwrap_or_default(),
                        _ => String::new(),
                    },
                })
            })
            .collect();
        members.sort_by(|a, b| (&a.name, &a.mac).cmp(&(&b.name, &b.mac)));
        members
    }

    /// A VEE of service `service_id` arrived somewhere (deployed, migrated,
    /// restored): every host that runs a VEE of the service gets the new
    /// member tables of the service's networks (VHI `UpdateNetwork`; a
    /// host without a network ignores it). Best effort: a host that does
    /// not answer gets the tables with its next VEE's spec or update.
    pub async fn sync_networks(&self, service_id: &str) {
        let Ok(svc) = self.service(service_id) else {
            return;
        };
        if svc.networks.is_empty() {
            return;
        }
        let vees = self.vees_where(|o| o.service_id == service_id && on_network(o));
        let hosts: BTreeSet<&str> = vees.iter().filter(|v| runs(v)).filter_map(VeeRec::host).collect();
        for n in &svc.networks {
            let update = NetworkUpdate {
                vni: n.vni,
                domain: domain(&svc.name),
                members: self.members(&vees, &n.name),
            };
            for h in &hosts {
                let Ok(vhi) = self.hosts.vhi(h) else { continue };
                if let Err(e) = vhi.update_network(tonic::Request::new(update.clone())).await {
                    tracing::warn!(host = %h, vni = n.vni, error = %e.message(), "network update not delivered");
                }
            }
        }
    }
}

/// Whether `v` is (or is about to be) on its networks: admitted and not
/// ended.
fn on_network(v: &VeeRec) -> bool {
    !matches!(v.state, VeeState::Pending | VeeState::Rejected | VeeState::Terminated)
}

/// Whether `v`'s domain runs (or is being started) where it is placed.
fn runs(v: &VeeRec) -> bool {
    !matches!(
        v.state,
        VeeState::Pending | VeeState::Rejected | VeeState::Stopped | VeeState::Terminated | VeeState::Failed
    )
}

#[cfg(test)]
mod tests;
