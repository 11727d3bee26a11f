//! Resources, hosts and compatibility profiles: what the planner places VEEs
//! on (DESIGN.md §4, §6: filter on capacity and compatibility profile).

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use serde::{Deserialize, Serialize};

/// An amount of host resources: vCPUs, memory in MiB, disk in GiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Disk in GiB.
    pub disk_gib: u64,
}

impl Resources {
    /// Nothing.
    pub const ZERO: Resources = Resources {
        vcpus: 0,
        memory_mib: 0,
        disk_gib: 0,
    };

    /// `vcpus` vCPUs, `memory_mib` MiB, `disk_gib` GiB.
    pub const fn new(vcpus: u32, memory_mib: u64, disk_gib: u64) -> Self {
        Resources {
            vcpus,
            memory_mib,
            disk_gib,
        }
    }

    /// Whether every component is zero.
    pub fn is_zero(&self) -> bool {
        *self == Resources::ZERO
    }

    /// Whether every component is `<=` the one of `capacity`.
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.vcpus <= capacity.vcpus && self.memory_mib <= capacity.memory_mib && self.disk_gib <= capacity.disk_gib
    }

    /// Component-wise maximum.
    pub fn max(&self, other: &Resources) -> Resources {
        Resources {
            vcpus: self.vcpus.max(other.vcpus),
            memory_mib: self.memory_mib.max(other.memory_mib),
            disk_gib: self.disk_gib.max(other.disk_gib),
        }
    }

    /// Component-wise `self - other`, floored at zero.
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        Resources {
            vcpus: self.vcpus.saturating_sub(other.vcpus),
            memory_mib: self.memory_mib.saturating_sub(other.memory_mib),
            disk_gib: self.disk_gib.saturating_sub(other.disk_gib),
        }
    }

    /// Component-wise `self * n`, saturating.
    pub fn times(&self, n: u64) -> Resources {
        Resources {
            vcpus: u32::try_from(u64::from(self.vcpus).saturating_mul(n)).unwrap_or(u32::MAX),
            memory_mib: self.memory_mib.saturating_mul(n),
            disk_gib: self.disk_gib.saturating_mul(n),
        }
    }

    /// The largest share of `capacity` any component takes (0.0 for an
    /// empty capacity), e.g. 0.5 when half the memory is used.
    pub fn fraction_of(&self, capacity: &Resources) -> f64 {
        let f = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        f(f64::from(self.vcpus), f64::from(capacity.vcpus))
            .max(f(self.memory_mib as f64, capacity.memory_mib as f64))
            .max(f(self.disk_gib as f64, capacity.disk_gib as f64))
    }

    /// What `self` lacks to cover `demand`, as text ("256 MiB, 1 vCPUs"),
    /// or `None` when it covers it.
    pub fn shortfall(&self, demand: &Resources) -> Option<String> {
        let mut parts = Vec::new();
        if demand.vcpus > self.vcpus {
            parts.push(format!("{} vCPUs", demand.vcpus - self.vcpus));
        }
        if demand.memory_mib > self.memory_mib {
            parts.push(format!("{} MiB", demand.memory_mib - self.memory_mib));
        }
        if demand.disk_gib > self.disk_gib {
            parts.push(format!("{} GiB", demand.disk_gib - self.disk_gib));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} vCPUs, {} MiB, {} GiB", self.vcpus, self.memory_mib, self.disk_gib)
    }
}

impl Add for Resources {
    type Output = Resources;
    fn add(self, o: Resources) -> Resources {
        Resources {
            vcpus: self.vcpus.saturating_add(o.vcpus),
            memory_mib: self.memory_mib.saturating_add(o.memory_mib),
            disk_gib: self.disk_gib.saturating_add(o.disk_gib),
        }
    }
}

impl AddAssign for Resources {
    fn add_assign(&mut self, o: Resources) {
        *self = *self + o;
    }
}

impl Sub for Resources {
    type Output = Resources;
    /// Saturating (usage never goes below zero).
    fn sub(self, o: Resources) -> Resources {
        debug_assert!(o.fits_in(&self), "usage underflow: {self} - {o}");
        self.saturating_sub(&o)
    }
}

impl SubAssign for Resources {
    fn sub_assign(&mut self, o: Resources) {
        *self = *self - o;
    }
}

/// A host's compatibility profile (the VHI's `CompatibilityProfile`). The
/// planner treats it as opaque: a VEE that requires a profile only goes to a
/// host whose profile is equal (checkpoints and live migration need it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Profile {
    /// CPU architecture, e.g. `x86_64`.
    pub arch: String,
    /// QEMU machine type, e.g. `pc`.
    pub machine: String,
    /// QEMU version.
    pub qemu_version: String,
    /// libvirt version.
    pub libvirt_version: String,
    /// `kvm` or `tcg`.
    pub accel: String,
    /// Guest CPU model.
    pub cpu_model: String,
}

/// Index of a host inside the planner (stable for the planner's life; a
/// removed host's index is not reused).
pub type HostIdx = u32;

/// What the caller tells the planner about a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSpec {
    /// Host name (unique in the planner).
    pub name: String,
    /// Capacity usable for VEEs.
    pub capacity: Resources,
    /// Compatibility profile.
    pub profile: Profile,
    /// Site label (a VEEM normally plans one site; hosts of other labels
    /// let site-level constraints be planned locally).
    pub site: String,
    /// Region label.
    pub region: String,
}

impl HostSpec {
    /// A host named `name` with `capacity`, default profile, site `site`,
    /// region `region`.
    pub fn new(name: impl Into<String>, capacity: Resources, site: impl Into<String>, region: impl Into<String>) -> Self {
        HostSpec {
            name: name.into(),
            capacity,
            profile: Profile::default(),
            site: site.into(),
            region: region.into(),
        }
    }

    /// The same host with `profile`.
    pub fn with_profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }
}

/// A host marked down (VRM: blocked for new reservations only for the
/// remapping interval).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Down {
    /// Slot the failure was noticed in.
    pub since: u32,
    /// First slot new reservations may use the host again (exclusive end of
    /// the blocked interval).
    pub blocked_until: u32,
}

/// The persisted part of a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct HostRecord {
    pub spec: HostSpec,
    /// Interned profile / site / region ids.
    pub profile: u32,
    pub site: u32,
    pub region: u32,
    pub down: Option<Down>,
    /// Measured load for the load-aware rank (caller-defined scale, lower
    /// is better).
    pub measured_load: f64,
    pub removed: bool,
}

impl HostRecord {
    /// Whether new reservations over `range` may use the host.
    pub fn usable_for(&self, start: u32) -> bool {
        !self.removed && self.down.filter(|d| start < d.blocked_until).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_and_fit() {
        let a = Resources::new(2, 512, 10);
        let b = Resources::new(1, 256, 5);
        assert_eq!(a - b, b);
        assert_eq!(b + b, a);
        assert!(b.fits_in(&a));
        assert!(!a.fits_in(&b));
        assert_eq!(b.times(2), a);
        assert_eq!(b.fraction_of(&a), 0.5);
        assert_eq!(b.shortfall(&a).unwrap(), "1 vCPUs, 256 MiB, 5 GiB");
        assert_eq!(a.shortfall(&b), None);
    }
}
