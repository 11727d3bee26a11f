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
use std::ops::Deref;
use std::sync::Arc;

use interfaces::manifest::Manifest;
use interfaces::vhi::{NetworkMember, NetworkUpdate, VeeSpec, Vtep};

use crate::core::Core;
use crate::ipam::{self, Taken};
use crate::model::{Location, ServiceRec, VeeRec, VeeState};
use crate::store::{StoreError, Tree};

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

/// The guest's host name (cloud-init's `local-hostname`) of instance
/// `instance` of component `component`: its DNS label, with `_` (allowed in
/// component names, not in host names) as `-`.
pub fn host_name(component: &str, instance: u32) -> String {
    format!("{}-{instance}", component.to_ascii_lowercase().replace('_', "-"))
}

/// Why a service's networks were not assigned: the site cannot give them
/// ([`ipam::IpamError`]), or the networks live services hold could not be
/// read.
#[derive(Debug, thiserror::Error)]
pub enum AssignError {
    #[error(transparent)]
    Ipam(#[from] ipam::IpamError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a primary site's network update was not taken (VMI
/// UpdateNetwork). Each variant's status is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum NetworkUpdateError {
    /// A request field (`anchor`).
    #[error(transparent)]
    Request(#[from] crate::error::VeemError),
    /// No overlay is agreed with the primary.
    #[error("no overlay ([peers.overlay]) is agreed with {from}")]
    NoOverlay { from: String },
    /// A VEE's record could not be read or written.
    #[error(transparent)]
    Record(#[from] crate::core::RecordError),
}

impl From<StoreError> for NetworkUpdateError {
    fn from(e: StoreError) -> Self {
        NetworkUpdateError::Record(e.into())
    }
}

/// Service networks after IPAM (see the module doc): what admission assigns under one lock, the member tables pushed to hosts and peers, the peer sites a network is stretched to. Calls only the core, the hosts and the peers.
pub struct Networks {
    core: Arc<Core>,
    /// Held while a service's networks are assigned, its VEEs for peer
    /// sites placed there, and its admission committed (Deploy).
    pub(crate) ipam: tokio::sync::Mutex<()>,
    /// VEE ID -> peer site: VEEs on their way to a peer site (booted,
    /// restored or live-migrated there). Their networks are stretched there
    /// before they arrive, so that the first frame after the switch-over
    /// (or the first DHCP request) finds its way back.
    pub(crate) stretching: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

impl Deref for Networks {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Networks {
    pub fn new(core: Arc<Core>) -> Self {
        Self {
            core,
            ipam: Default::default(),
            stretching: Default::default(),
        }
    }
}

impl Networks {
    /// What the site's live services hold: the subnets and VNIs of every
    /// service with a VEE not terminated, and those VEEs' external
    /// addresses.
    pub fn networks_taken(&self) -> Result<Taken, StoreError> {
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
    /// its VEEs `vees` (sorted in admission order), in memory. The caller
    /// holds `one_at_a_time` (`self.ipam`) until it commits them, so that
    /// two admissions never take the same subnet, VNI or external address.
    /// Errors with [`ipam::IpamError`] when the site cannot give the
    /// networks.
    pub fn assign_networks(
        &self,
        _one_at_a_time: &tokio::sync::MutexGuard<'_, ()>,
        m: &Manifest,
        svc: &mut ServiceRec,
        vees: &mut [VeeRec],
    ) -> Result<(), AssignError> {
        if !m.networks.is_empty() {
            let order: Vec<&str> = vees.iter().map(|v| v.component.as_str()).collect();
            let (networks, nics) = ipam::assign(m, &self.cfg.networks, &self.networks_taken()?, &order)?;
            svc.networks = networks;
            for (v, n) in vees.iter_mut().zip(nics) {
                v.nics = n;
            }
        }
        Ok(())
    }
}

impl Networks {
    /// The VHI spec of `v` ([`VeeRec::spec`]) with, on each NIC, its
    /// network's member table, the service's domain and the peer sites the
    /// network is stretched to. A VEE this site runs for a primary site
    /// gets the primary's member tables on the agreed overlay port, and no
    /// external address (it stays at the primary).
    pub fn spec_of(&self, v: &VeeRec) -> VeeSpec {
        let mut spec = v.spec();
        if v.nics.is_empty() {
            return spec;
        }
        if let Some(primary) = &v.for_peer {
            let port = self.overlay(primary).map_or(0, |o| u32::from(o.port));
            for (nic, wire) in v.nics.iter().zip(&mut spec.nics) {
                wire.members = nic.primary_members.clone();
                wire.overlay_port = port;
                wire.external_address.clear();
                wire.ports.clear();
            }
            return spec;
        }
        let Ok(svc) = self.service(&v.service_id) else {
            return spec;
        };
        self.spec_among(v, &svc, &self.vees_where(|o| o.service_id == v.service_id))
    }

    /// The VHI spec of `v`, a VEE of service `svc` run for this site, with
    /// its networks' member tables taken from `vees` (the service's VEE
    /// records, committed or not: a remote placement sends the spec before
    /// the admission is committed).
    pub fn spec_among(&self, v: &VeeRec, svc: &ServiceRec, vees: &[VeeRec]) -> VeeSpec {
        let mut spec = v.spec();
        let siblings: Vec<VeeRec> = vees.iter().filter(|o| on_network(o)).cloned().collect();
        let stretched_to = self.stretched_to(&siblings);
        for (nic, wire) in v.nics.iter().zip(&mut spec.nics) {
            wire.domain = domain(&svc.name);
            wire.members = self.members(&siblings, &nic.network);
            wire.stretched_to = stretched_to.clone();
        }
        spec
    }

    /// The overlay agreed with peer `site` (`[peers.overlay]`), if any.
    pub fn overlay(&self, site: &str) -> Option<&crate::config::Overlay> {
        crate::peers::peer(&self.cfg, site).ok()?.overlay.as_ref()
    }

    /// The peer sites' VTEPs where a VEE of `vees` (one service's) runs or
    /// is on its way to ([`Networks::stretching`]; a VEE recorded at the site it
    /// was on its way to has arrived, and is no longer on its way).
    fn stretched_to(&self, vees: &[VeeRec]) -> Vec<Vtep> {
        let stretching = {
            let mut s = self.stretching.lock().unwrap();
            for v in vees {
                if matches!((&v.location, s.get(&v.id)), (Location::Site(at), Some(to)) if at == to) {
                    s.remove(&v.id);
                }
            }
            s.clone()
        };
        let mut sites = self.abroad(vees);
        sites.extend(vees.iter().filter_map(|v| stretching.get(&v.id).cloned()));
        sites
            .iter()
            .filter_map(|s| self.overlay(s))
            .map(|o| Vtep {
                address: o.vtep.to_string(),
                port: u32::from(o.port),
            })
            .collect()
    }

    /// The peer sites where a VEE of `vees` runs (not fenced there).
    fn abroad(&self, vees: &[VeeRec]) -> BTreeSet<String> {
        vees.iter()
            .filter_map(|v| match &v.location {
                Location::Site(s) if runs(v) && !self.fenced_at(v, s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }

    /// Network `network`'s members among `vees` (the VEEs of one service),
    /// by name. A member at a peer site is behind the peer's VTEP and
    /// overlay port, and carries its external address and ports: the
    /// primary's hosts forward them to it over the overlay.
    fn members(&self, vees: &[VeeRec], network: &str) -> Vec<NetworkMember> {
        let mut members: Vec<NetworkMember> = vees
            .iter()
            .filter_map(|v| {
                let nic = v.nics.iter().find(|n| n.network == network)?;
                let mut m = NetworkMember {
                    name: dns_label(v),
                    mac: nic.mac.clone(),
                    address: nic.address.addr().to_string(),
                    ..Default::default()
                };
                match &v.location {
                    Location::Host(h) if runs(v) => m.vtep = self.hosts.info(h).map(|i| i.vtep).unwrap_or_default(),
                    Location::Site(s) if runs(v) && !self.fenced_at(v, s) => {
                        if let Some(o) = self.overlay(s) {
                            m.vtep = o.vtep.to_string();
                            m.vtep_port = u32::from(o.port);
                            m.external_address = nic.external.map(|a| a.to_string()).unwrap_or_default();
                            m.ports = nic.ports.iter().map(|p| u32::from(*p)).collect();
                        }
                    }
                    _ => {}
                }
                Some(m)
            })
            .collect();
        members.sort_by(|a, b| (&a.name, &a.mac).cmp(&(&b.name, &b.mac)));
        members
    }

    /// Whether `v`'s copy at peer `site` is being fenced (the site went
    /// silent and the VEE is recovered elsewhere, `peer_watch`): its
    /// networks are no longer stretched there for it, so that the hosts
    /// here stop sending its frames to that site and drop the site's
    /// frames for them (the isolation table's `vxlan_from`) before the VEE
    /// runs anywhere else: two copies never answer for one address.
    fn fenced_at(&self, v: &VeeRec, site: &str) -> bool {
        self.store
            .get::<crate::model::FenceRec>(Tree::Fenced, &v.id)
            .ok()
            .flatten()
            .is_some_and(|f| f.site == site)
    }

    /// Peer side of the VMI `UpdateNetwork`: primary site `from`'s network
    /// `u.vni` has a new member table. The VEEs this site runs for `from`
    /// on that network keep it (their specs use it from now on), and their
    /// hosts get it on the agreed overlay port. Errors when no overlay is
    /// agreed with `from`; a table with bad entries is refused by the
    /// hosts, which check it before use.
    pub async fn primary_network_changed(&self, from: &str, u: NetworkUpdate) -> Result<(), NetworkUpdateError> {
        let Some(port) = self.overlay(from).map(|o| u32::from(o.port)) else {
            return Err(NetworkUpdateError::NoOverlay { from: from.into() });
        };
        if u.anchor.is_some() {
            return Err(crate::error::VeemError::field("anchor", "a network's home part stays at its primary site").into());
        }
        let mut hosts = BTreeSet::new();
        for id in self
            .vees_where(|v| v.for_peer.as_deref() == Some(from) && v.nics.iter().any(|n| n.vni == u.vni))
            .into_iter()
            .map(|v| v.id)
        {
            let _g = self.lock_vee(&id).await;
            let mut v = self.vee(&id)?;
            for nic in v.nics.iter_mut().filter(|n| n.vni == u.vni) {
                nic.primary_members = u.members.clone();
            }
            self.save_vee(&v)?;
            if runs(&v) {
                hosts.extend(v.host().map(str::to_string));
            }
        }
        let update = NetworkUpdate {
            overlay_port: port,
            domain: String::new(),
            ..u
        };
        for h in &hosts {
            let Ok(vhi) = self.hosts.host(h) else { continue };
            if let Err(e) = vhi
                .update_network(interfaces::vhi::UpdateNetworkRequest {
                    network: Some(update.clone()),
                })
                .await
            {
                tracing::warn!(host = %h, vni = update.vni, %from, error = %e.message(), "network update not delivered");
            }
        }
        Ok(())
    }

    /// Marks VEE `v` on its way to peer `site` (or no longer, `None`) and
    /// sends the service's hosts their tables: its networks are stretched
    /// there before it arrives, and unstretched when it does not.
    pub async fn stretch(&self, v: &VeeRec, site: Option<&str>) {
        if v.nics.is_empty() {
            return;
        }
        {
            let mut s = self.stretching.lock().unwrap();
            match site {
                Some(site) => s.insert(v.id.clone(), site.to_string()),
                None => s.remove(&v.id),
            };
        }
        self.sync_networks(&v.service_id).await;
    }

    /// A VEE of service `service_id` arrived somewhere (deployed, migrated,
    /// restored): every host that runs a VEE of the service gets the new
    /// member tables of the service's networks (VHI `UpdateNetwork`; a
    /// host without a network ignores it), and so does every peer site
    /// that runs one (VMI `UpdateNetwork`). When all its VEEs run at peer
    /// sites, one host here anchors the networks (keeps their gateway,
    /// DHCP/DNS and external addresses, `ServiceRec::anchor`), and lets
    /// them go when a VEE of the service runs here again or none abroad.
    /// Best effort: a host that does not answer gets the tables with its
    /// next VEE's spec or update.
    pub async fn sync_networks(&self, service_id: &str) {
        let Ok(mut svc) = self.service(service_id) else {
            return;
        };
        if svc.networks.is_empty() {
            return;
        }
        let vees = self.vees_where(|o| o.service_id == service_id && on_network(o));
        let hosts: BTreeSet<String> = vees
            .iter()
            .filter(|v| runs(v))
            .filter_map(VeeRec::host)
            .map(str::to_string)
            .collect();
        let stretched_to = self.stretched_to(&vees);
        let anchor = if hosts.is_empty() && !stretched_to.is_empty() {
            svc.anchor
                .clone()
                .filter(|h| self.hosts.health(h) != crate::domain::Health::Failed)
                .or_else(|| {
                    self.hosts
                        .names()
                        .into_iter()
                        .find(|h| self.hosts.health(h) == crate::domain::Health::Up)
                })
        } else {
            None
        };
        let released = svc.anchor.clone().filter(|old| Some(old) != anchor.as_ref());
        // Peer sites running VEEs of the service get the tables too.
        let peers = self.abroad(&vees);
        for n in &svc.networks {
            let update = NetworkUpdate {
                vni: n.vni,
                domain: domain(&svc.name),
                members: self.members(&vees, &n.name),
                overlay_port: 0,
                stretched_to: stretched_to.clone(),
                anchor: None,
            };
            let home = interfaces::vhi::NetworkHome {
                subnet: n.cidr.to_string(),
                gateway: n.gateway.to_string(),
                mtu: self.cfg.networks.mtu,
                external: n.kind == interfaces::manifest::NetworkKind::External,
            };
            for site in &peers {
                let sent = match self.peer(site) {
                    Ok(p) => p.update_network(update.clone()).await.map_err(|e| e.message().to_string()),
                    Err(e) => Err(format!("{e:#}")),
                };
                if let Err(e) = sent {
                    tracing::warn!(%site, vni = n.vni, error = %e, "network update not delivered to the peer site");
                }
            }
            let targets = hosts.iter().chain(&anchor).chain(&released);
            for h in targets.collect::<BTreeSet<_>>() {
                let Ok(vhi) = self.hosts.host(h) else { continue };
                let mut u = update.clone();
                if anchor.as_ref() == Some(h) {
                    u.anchor = Some(home.clone());
                }
                if let Err(e) = vhi
                    .update_network(interfaces::vhi::UpdateNetworkRequest { network: Some(u) })
                    .await
                {
                    tracing::warn!(host = %h, vni = n.vni, error = %e.message(), "network update not delivered");
                }
            }
        }
        if svc.anchor != anchor {
            svc.anchor = anchor;
            if let Err(e) = self.store.put(Tree::Services, &svc.id, &svc) {
                tracing::warn!(service = %svc.id, error = %e, "anchor not recorded");
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
