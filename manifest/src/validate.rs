//! Semantic validation of a parsed [`Manifest`]: every error names the field
//! path and the reason.

use std::collections::HashMap;
use std::time::Duration;

use super::{
    CheckpointInterval, Cidr, Component, Constraint, ConstraintKind, ConstraintScope, GuaranteeLevel, Manifest, MigrationPolicy, Network,
    NetworkKind,
};
use crate::error::{Error, Result};

/// Longest service, provider or component name, in bytes.
pub const MAX_NAME_LEN: usize = 63;
/// Most components in one manifest.
pub const MAX_COMPONENTS: usize = 256;
/// Most instances of one component.
pub const MAX_INSTANCES: u32 = 100_000;
/// Most vCPUs of one VEE.
pub const MAX_VCPUS: u32 = 512;
/// Largest memory of one VEE, in MiB (1 TiB).
pub const MAX_MEMORY_MIB: u64 = 1024 * 1024;
/// Largest disk of one VEE, in GiB (64 TiB).
pub const MAX_DISK_GIB: u64 = 64 * 1024;
/// Longest kernel command line, in bytes.
pub const MAX_CMDLINE_BYTES: usize = 4096;
/// Largest `sla.max_outages` (n_ro_max).
pub const MAX_OUTAGES: u32 = 1000;
/// Shortest explicit checkpoint interval.
pub const MIN_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Most networks of one service, and NICs of one VEE.
pub const MAX_NETWORKS: usize = 8;
/// Prefix lengths an explicit `network[].cidr` may have.
pub const NETWORK_PREFIXES: std::ops::RangeInclusive<u8> = 16..=29;

/// Addresses of a subnet of prefix `prefix` that VEEs can have: all but
/// the network and broadcast addresses and the gateway (the first host).
pub fn usable_addresses(prefix: u8) -> u64 {
    (1u64 << (32 - u32::from(prefix))).saturating_sub(3)
}

pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::InvalidManifest {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Names: 1..=63 bytes of `[A-Za-z0-9_-]`.
fn check_name(field: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(invalid(field, format!("{} bytes long; at most {MAX_NAME_LEN} allowed", name.len())));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(invalid(
            field,
            format!("{name:?} contains {c:?}; only A-Z, a-z, 0-9, '_' and '-' are allowed"),
        ));
    }
    Ok(())
}

pub(crate) fn check_range<T: PartialOrd + std::fmt::Display>(field: &str, value: T, min: T, max: T, unit: &str) -> Result<()> {
    if value < min {
        return Err(invalid(field, format!("{value}{unit}: must be at least {min}{unit}")));
    }
    if value > max {
        return Err(invalid(field, format!("{value}{unit} is more than the limit of {max}{unit}")));
    }
    Ok(())
}

pub(super) fn validate(m: &Manifest) -> Result<()> {
    check_name("service.name", &m.service.name)?;
    check_name("service.provider", &m.service.provider)?;
    validate_sla(m)?;
    if m.components.is_empty() {
        return Err(invalid("component", "a manifest needs at least one [[component]]"));
    }
    if m.components.len() > MAX_COMPONENTS {
        return Err(invalid(
            "component",
            format!("{} components; at most {MAX_COMPONENTS}", m.components.len()),
        ));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, c) in m.components.iter().enumerate() {
        validate_component(i, c)?;
        if let Some(first) = seen.insert(c.name.as_str(), i) {
            return Err(invalid(
                format!("component[{i}].name"),
                format!("duplicate component name {:?} (also component[{first}])", c.name),
            ));
        }
    }
    for (i, c) in m.constraints.iter().enumerate() {
        validate_constraint(i, c, &seen)?;
    }
    validate_networks(m)?;
    check_contradictions(m)
}

/// `[[network]]` and `component[].networks`: names, kinds, ports, CIDRs
/// (form, size for the instances attached, no overlap inside the service).
fn validate_networks(m: &Manifest) -> Result<()> {
    if m.networks.len() > MAX_NETWORKS {
        return Err(invalid("network", format!("{} networks; at most {MAX_NETWORKS}", m.networks.len())));
    }
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (i, n) in m.networks.iter().enumerate() {
        validate_network(i, n)?;
        if let Some(first) = names.insert(n.name.as_str(), i) {
            return Err(invalid(
                format!("network[{i}].name"),
                format!("duplicate network name {:?} (also network[{first}])", n.name),
            ));
        }
    }
    if !m.networks.is_empty() {
        // Its VEEs' DNS names: <component>-<instance>.<service>.internal.
        check_dns_label("service.name", &m.service.name)?;
        for (ci, c) in m.components.iter().enumerate() {
            check_dns_label(&format!("component[{ci}].name"), &c.name)?;
        }
    }
    let mut attached = vec![0u64; m.networks.len()];
    for (ci, c) in m.components.iter().enumerate() {
        if c.networks.len() > MAX_NETWORKS {
            return Err(invalid(
                format!("component[{ci}].networks"),
                format!("{} networks; a VEE has at most {MAX_NETWORKS} NICs", c.networks.len()),
            ));
        }
        for (j, name) in c.networks.iter().enumerate() {
            let field = format!("component[{ci}].networks[{j}]");
            let Some(&ni) = names.get(name.as_str()) else {
                return Err(invalid(field, format!("unknown network {name:?}: no [[network]] has that name")));
            };
            if c.networks[..j].contains(name) {
                return Err(invalid(field, format!("network {name:?} listed twice")));
            }
            attached[ni] += u64::from(c.instances);
        }
    }
    for (i, n) in m.networks.iter().enumerate() {
        let Cidr::Net(net) = n.cidr else { continue };
        let room = usable_addresses(net.prefix_len());
        if attached[i] > room {
            return Err(invalid(
                format!("network[{i}].cidr"),
                format!("{net} has room for {room} VEEs but {} instances are attached", attached[i]),
            ));
        }
        for (j, other) in m.networks[..i].iter().enumerate() {
            if let Cidr::Net(o) = other.cidr {
                if o.contains(&net.network()) || net.contains(&o.network()) {
                    return Err(invalid(format!("network[{i}].cidr"), format!("{net} overlaps network[{j}] ({o})")));
                }
            }
        }
    }
    Ok(())
}

/// A service with networks names its VEEs in DNS
/// (`<component>-<instance>.<service>.internal`): its service and
/// component names (valid names already) must be DNS labels too: no '_',
/// no '-' at either end.
fn check_dns_label(field: &str, name: &str) -> Result<()> {
    if name.contains('_') || name.starts_with('-') || name.ends_with('-') {
        return Err(invalid(
            field,
            format!("{name:?} is not a DNS label (a service with networks names its VEEs <component>-<instance>.<service>.internal): no '_', no '-' at either end"),
        ));
    }
    Ok(())
}

fn validate_network(i: usize, n: &Network) -> Result<()> {
    check_name(&format!("network[{i}].name"), &n.name)?;
    if let Cidr::Net(net) = n.cidr {
        let field = format!("network[{i}].cidr");
        if !NETWORK_PREFIXES.contains(&net.prefix_len()) {
            return Err(invalid(
                field,
                format!(
                    "{net}: the prefix must be /{} to /{}",
                    NETWORK_PREFIXES.start(),
                    NETWORK_PREFIXES.end()
                ),
            ));
        }
        if net.trunc() != net {
            return Err(invalid(field, format!("{net} has host bits set; the network is {}", net.trunc())));
        }
    }
    let field = format!("network[{i}].ports");
    match n.kind {
        NetworkKind::Internal if !n.ports.is_empty() => {
            return Err(invalid(field, "only an external network opens ports"));
        }
        NetworkKind::External if n.ports.is_empty() => {
            return Err(invalid(field, "an external network must open at least one TCP port"));
        }
        _ => {}
    }
    for (j, p) in n.ports.iter().enumerate() {
        if *p == 0 {
            return Err(invalid(format!("network[{i}].ports[{j}]"), "0 is not a TCP port"));
        }
        if n.ports[..j].contains(p) {
            return Err(invalid(format!("network[{i}].ports[{j}]"), format!("port {p} listed twice")));
        }
    }
    Ok(())
}

fn validate_sla(m: &Manifest) -> Result<()> {
    let sla = &m.sla;
    if let CheckpointInterval::Every(d) = sla.checkpoint_interval {
        if d < MIN_CHECKPOINT_INTERVAL {
            return Err(invalid(
                "sla.checkpoint_interval",
                format!("{d:?} is shorter than the minimum of 1s"),
            ));
        }
    }
    if sla.max_outages > MAX_OUTAGES {
        return Err(invalid(
            "sla.max_outages",
            format!("{} is more than the limit of {MAX_OUTAGES}", sla.max_outages),
        ));
    }
    if !sla.penalty_per_hour.is_finite() || sla.penalty_per_hour < 0.0 {
        return Err(invalid(
            "sla.penalty_per_hour",
            format!("{} must be a finite number >= 0", sla.penalty_per_hour),
        ));
    }
    if let Some(w) = &sla.window {
        if w.end <= w.start {
            return Err(invalid(
                "sla.window.end",
                format!("{} is not after the window start {}", w.end.to_rfc3339(), w.start.to_rfc3339()),
            ));
        }
    }
    // H §3.2.3: a restrictive migration policy can make full service
    // impossible; then the request has to be rejected.
    if sla.guarantee == GuaranteeLevel::Full && sla.migration != MigrationPolicy::Federation {
        return Err(invalid(
            "sla.migration",
            format!(
                "guarantee \"full\" keeps spare capacity at a peer site, so migration must be \"federation\", not {:?}",
                sla.migration
            ),
        ));
    }
    Ok(())
}

fn validate_component(i: usize, c: &Component) -> Result<()> {
    let f = |name: &str| format!("component[{i}].{name}");
    check_name(&f("name"), &c.name)?;
    check_range(&f("instances"), c.instances, 1, MAX_INSTANCES, "")?;
    check_range(&f("vcpus"), c.vcpus, 1, MAX_VCPUS, " vCPUs")?;
    check_range(&f("memory_mib"), c.memory_mib, 1, MAX_MEMORY_MIB, " MiB")?;
    if let Some(max) = c.max_vcpus {
        if max < c.vcpus {
            return Err(invalid(f("max_vcpus"), format!("{max} is less than `vcpus` ({})", c.vcpus)));
        }
        check_range(&f("max_vcpus"), max, 1, MAX_VCPUS, " vCPUs")?;
    }
    if let Some(max) = c.max_memory_mib {
        if max < c.memory_mib {
            return Err(invalid(
                f("max_memory_mib"),
                format!("{max} MiB is less than `memory_mib` ({} MiB)", c.memory_mib),
            ));
        }
        check_range(&f("max_memory_mib"), max, 1, MAX_MEMORY_MIB, " MiB")?;
    }
    check_range(&f("disk_gib"), c.disk_gib, 1, MAX_DISK_GIB, " GiB")?;
    if c.initrd.is_some() && c.kernel.is_none() {
        return Err(invalid(
            f("initrd"),
            "an initrd needs a kernel (direct kernel boot); set `kernel` too",
        ));
    }
    if let Some(cmdline) = &c.cmdline {
        // A registry image's artifact may carry the kernel: admission checks it.
        if c.kernel.is_none() && c.image.blob().is_some() {
            return Err(invalid(
                f("cmdline"),
                "a kernel command line needs a kernel (direct kernel boot); set `kernel` too, or name a registry image whose artifact has one",
            ));
        }
        if cmdline.len() > MAX_CMDLINE_BYTES {
            return Err(invalid(
                f("cmdline"),
                format!("{} bytes long; at most {MAX_CMDLINE_BYTES}", cmdline.len()),
            ));
        }
        if let Some(ch) = cmdline.chars().find(|ch| ch.is_control()) {
            return Err(invalid(f("cmdline"), format!("contains the control character {ch:?}")));
        }
    }
    crate::cloud_init::check(&format!("component[{i}]"), c.user_data.as_deref(), &c.ssh_authorized_keys)
}

fn validate_constraint(i: usize, c: &Constraint, known: &HashMap<&str, usize>) -> Result<()> {
    if c.components.is_empty() {
        return Err(invalid(format!("constraint[{i}].components"), "must name at least one component"));
    }
    for (j, name) in c.components.iter().enumerate() {
        let field = format!("constraint[{i}].components[{j}]");
        if !known.contains_key(name.as_str()) {
            return Err(invalid(field, format!("unknown component {name:?}")));
        }
        if c.components[..j].contains(name) {
            return Err(invalid(field, format!("component {name:?} is listed twice")));
        }
    }
    if c.scope == ConstraintScope::Type && c.components.len() < 2 {
        return Err(invalid(
            format!("constraint[{i}].scope"),
            "type scope relates instances of different components, so it needs at least two components \
             (use scope = \"instance\" for instances of one component)",
        ));
    }
    Ok(())
}

/// An affinity at level La together with an anti-affinity at level Lb >= La
/// over the same pair of instances can never be met (E PIII: together on a
/// host implies together on its site and region).
fn check_contradictions(m: &Manifest) -> Result<()> {
    let instances = |name: &str| m.component(name).map_or(0, |c| c.instances);
    for (a, aff) in m.constraints.iter().enumerate().filter(|(_, c)| c.kind == ConstraintKind::Affinity) {
        for (b, anti) in m
            .constraints
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind == ConstraintKind::AntiAffinity)
        {
            if anti.level < aff.level {
                continue;
            }
            let common: Vec<&String> = aff.components.iter().filter(|n| anti.components.contains(n)).collect();
            let clash = match anti.scope {
                // Two instances that must be together and apart.
                ConstraintScope::Instance => common.iter().map(|n| u64::from(instances(n))).sum::<u64>() >= 2,
                // Two different types that must be together and apart.
                ConstraintScope::Type => common.len() >= 2,
            };
            if clash {
                return Err(invalid(
                    format!("constraint[{b}]"),
                    format!(
                        "anti-affinity at {:?} level contradicts the affinity of constraint[{a}] at {:?} level \
                         over components {:?}",
                        anti.level, aff.level, common
                    ),
                ));
            }
        }
    }
    Ok(())
}
