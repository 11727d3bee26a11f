//! Addresses of service networks (IPAM), chosen by the VEEM at admission
//! and kept for each VEE's whole life (checkpoint, recovery, migration,
//! restarts): they live in the service and VEE records.
//!
//! - Each network of a service gets a subnet (the manifest's `cidr`, or
//!   the first free `subnet_prefix` block of the site's `[networks] pool`),
//!   its first host as gateway, and a site-unique VNI (from
//!   [`FIRST_VNI`]).
//! - Each VEE gets, on every network it is attached to (NIC order as in its
//!   component's `networks`), the next address of the subnet in admission
//!   order (component, then instance), a MAC `02:VV:VV:VV:OO:OO` (the VNI,
//!   then the address's offset in the subnet: locally administered, unique
//!   in the site, the same every time) and, on an external network, the
//!   next free address of the site's `external_pool`.
//!
//! Nothing a live service holds (a service with a VEE not terminated) is
//! handed out again; what an ended service held is free. Pure: the caller
//! says what is taken ([`Taken`]) and keeps two admissions apart.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use interfaces::manifest::{usable_addresses, Cidr, Manifest, NetworkKind};
use ipnet::Ipv4Net;

use crate::config::NetworkPool;
use crate::model::{NetworkRec, NicRec};

/// The first VNI the site hands out (lower ones are left to the operator).
pub const FIRST_VNI: u32 = 100;
/// The largest VNI (24 bits).
pub const MAX_VNI: u32 = (1 << 24) - 1;

/// What the site's live services hold.
#[derive(Clone, Debug, Default)]
pub struct Taken {
    pub subnets: Vec<Ipv4Net>,
    pub vnis: BTreeSet<u32>,
    pub external: BTreeSet<Ipv4Addr>,
}

/// Why a service's networks cannot be assigned: admission refuses the
/// service and reserves nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpamError {
    #[error("manifest field `network[{index}].cidr`: the site's pool {pool} has no free /{prefix}")]
    PoolExhausted { index: usize, pool: Ipv4Net, prefix: u8 },
    #[error(
        "manifest field `network[{index}].cidr`: {attached} instances do not fit a /{prefix} (the site's subnet size); give a larger cidr"
    )]
    TooMany { index: usize, attached: u64, prefix: u8 },
    #[error("manifest field `network[{index}].cidr`: {cidr} overlaps a subnet another service holds at this site")]
    InUse { index: usize, cidr: Ipv4Net },
    #[error("manifest field `network[{index}].kind`: this site has no external addresses (no `[networks] external_pool`)")]
    NoExternalPool { index: usize },
    #[error("manifest field `network[{index}]`: the site's external pool {pool} has no free address left")]
    ExternalExhausted { index: usize, pool: Ipv4Net },
    #[error("the site has no VNI left")]
    NoVni,
    #[error("service network {network:?} ({cidr}) has no free address left for another instance")]
    NetworkFull { network: String, cidr: Ipv4Net },
}

fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

fn nth(net: &Ipv4Net, offset: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.network()) + offset)
}

/// The MAC of the address at `offset` in the network of VNI `vni`.
pub fn mac(vni: u32, offset: u32) -> String {
    let b = |x: u32, shift: u32| (x >> shift) & 0xff;
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b(vni, 16),
        b(vni, 8),
        b(vni, 0),
        b(offset, 8),
        b(offset, 0)
    )
}

/// Assigns the networks of manifest `m` from `pool`, given what is
/// `taken`, and the NICs of its VEEs `vees` (each its component's name, in
/// admission order). Returns the networks in manifest order and each VEE's
/// NICs in the order of `vees`. `m` is a validated manifest.
pub fn assign(m: &Manifest, pool: &NetworkPool, taken: &Taken, vees: &[&str]) -> Result<(Vec<NetworkRec>, Vec<Vec<NicRec>>), IpamError> {
    let mut subnets = taken.subnets.clone();
    let mut vnis = taken.vnis.clone();
    let mut nets = Vec::new();
    for (index, n) in m.networks.iter().enumerate() {
        let attached: u64 = m
            .components
            .iter()
            .filter(|c| c.networks.contains(&n.name))
            .map(|c| u64::from(c.instances))
            .sum();
        let cidr = match n.cidr {
            Cidr::Net(c) if subnets.iter().any(|t| overlaps(t, &c)) => return Err(IpamError::InUse { index, cidr: c }),
            Cidr::Net(c) => c,
            Cidr::Auto => {
                let prefix = pool.subnet_prefix;
                if attached > usable_addresses(prefix) {
                    return Err(IpamError::TooMany { index, attached, prefix });
                }
                let free = pool
                    .pool
                    .subnets(prefix)
                    .ok()
                    .and_then(|mut all| all.find(|c| !subnets.iter().any(|t| overlaps(t, c))));
                free.ok_or(IpamError::PoolExhausted {
                    index,
                    pool: pool.pool,
                    prefix,
                })?
            }
        };
        subnets.push(cidr);
        let vni = (FIRST_VNI..=MAX_VNI).find(|v| !vnis.contains(v)).ok_or(IpamError::NoVni)?;
        vnis.insert(vni);
        if n.kind == NetworkKind::External && pool.external_pool.is_none() {
            return Err(IpamError::NoExternalPool { index });
        }
        nets.push(NetworkRec {
            name: n.name.clone(),
            kind: n.kind,
            cidr,
            gateway: nth(&cidr, 1),
            vni,
            ports: n.ports.clone(),
        });
    }
    let mut next_offset = vec![2u32; nets.len()];
    let mut external = taken.external.clone();
    let mut all = Vec::with_capacity(vees.len());
    for component in vees {
        let Some(c) = m.component(component) else {
            all.push(vec![]);
            continue;
        };
        let mut nics = Vec::new();
        for name in &c.networks {
            let Some(index) = nets.iter().position(|n| &n.name == name) else {
                continue;
            };
            let net = &nets[index];
            let offset = next_offset[index];
            next_offset[index] += 1;
            nics.push(nic(index, net, offset, pool, &mut external)?);
        }
        all.push(nics);
    }
    Ok((nets, all))
}

/// The NIC at `offset` of network `net` (number `index` of the service's),
/// with a free address of the site's external pool (not in `external`,
/// which gets it) on an external network.
fn nic(index: usize, net: &NetworkRec, offset: u32, pool: &NetworkPool, external: &mut BTreeSet<Ipv4Addr>) -> Result<NicRec, IpamError> {
    let ext = match (net.kind, pool.external_pool) {
        (NetworkKind::External, Some(p)) => {
            let a = p
                .hosts()
                .find(|a| !external.contains(a))
                .ok_or(IpamError::ExternalExhausted { index, pool: p })?;
            external.insert(a);
            Some(a)
        }
        (NetworkKind::External, None) => return Err(IpamError::NoExternalPool { index }),
        _ => None,
    };
    Ok(NicRec {
        network: net.name.clone(),
        vni: net.vni,
        mac: mac(net.vni, offset),
        address: Ipv4Net::new(nth(&net.cidr, offset), net.cidr.prefix_len()).expect("prefix of a network"),
        gateway: net.gateway,
        mtu: pool.mtu,
        external: ext,
        ports: if ext.is_some() { net.ports.clone() } else { vec![] },
        primary_members: vec![],
    })
}

/// The NICs of one more VEE (scaling out, issue 40) attached to
/// `networks` (its component's, in order) of a service whose networks
/// `nets` are assigned: in each, the lowest address from the second host
/// on that `used` (the addresses the service's live VEEs hold) does not
/// hold, its MAC from its offset as at admission, and on an external
/// network a free address of the pool that `external` (the site's live
/// VEEs' external addresses) does not hold; both sets get what is taken.
/// The survivors' addresses never change. Errors: a network or the
/// external pool full.
pub fn more_nics(
    networks: &[String],
    nets: &[NetworkRec],
    pool: &NetworkPool,
    used: &mut BTreeSet<Ipv4Addr>,
    external: &mut BTreeSet<Ipv4Addr>,
) -> Result<Vec<NicRec>, IpamError> {
    let mut nics = Vec::new();
    for name in networks {
        let Some((index, net)) = nets.iter().enumerate().find(|(_, n)| &n.name == name) else {
            continue;
        };
        let last = 1 + usable_addresses(net.cidr.prefix_len()) as u32;
        let offset = (2..=last)
            .find(|&o| !used.contains(&nth(&net.cidr, o)))
            .ok_or_else(|| IpamError::NetworkFull {
                network: net.name.clone(),
                cidr: net.cidr,
            })?;
        used.insert(nth(&net.cidr, offset));
        nics.push(nic(index, net, offset, pool, external)?);
    }
    Ok(nics)
}

#[cfg(test)]
mod tests;
