//! The service manifest (DESIGN.md §5): what a service provider submits to a
//! VEEM. It names the service, its SLA (guarantee level and fault tolerance,
//! H §3.2.2-3.2.3), its components (each a VEE type run as one or more
//! instances) and placement constraints (affinity / anti-affinity, E PIII).
//!
//! [`Manifest::from_toml`] parses and validates; every error names the field
//! path (`component[1].memory_mib`, `sla.window.end`,
//! `constraint[0].components[1]`) and the reason, as
//! [`Error::InvalidManifest`] (or [`Error::ManifestSyntax`] when the text is
//! not TOML at all). Unknown fields are rejected so that typos are caught.
//!
//! ```
//! use vee_manifest::{Manifest, GuaranteeLevel};
//! let m = Manifest::from_toml(r#"
//! [service]
//! name = "webshop"
//! provider = "acme"
//! [sla]
//! guarantee = "standard"
//! [[component]]
//! name = "web"
//! vcpus = 1
//! memory_mib = 256
//! disk_gib = 1
//! image = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
//! "#).unwrap();
//! assert_eq!(m.sla.guarantee, GuaranteeLevel::Standard);
//! assert_eq!(m.components[0].instances, 1);
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub mod blob_id;
pub mod cloud_init;
pub mod elasticity;
mod error;
pub mod excerpt;
pub mod image_ref;
mod validate;

pub use blob_id::BlobId;
pub use error::{Error, Result};
pub use image_ref::{ImageRef, RegistryImage};

use crate::excerpt::{around, excerpt, QUOTE_CHARS};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_reference;

pub use validate::{
    usable_addresses, MAX_CMDLINE_BYTES, MAX_COMPONENTS, MAX_DISK_GIB, MAX_INSTANCES, MAX_MEMORY_MIB, MAX_NAME_LEN, MAX_NETWORKS,
    MAX_OUTAGES, MAX_VCPUS, MIN_CHECKPOINT_INTERVAL, NETWORK_PREFIXES,
};

/// A service manifest: `[service]`, `[sla]`, one or more `[[component]]` and
/// any number of `[[constraint]]` tables (DESIGN.md §5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `[service]`: name and provider.
    pub service: ServiceSection,
    /// `[sla]`: guarantee level and fault-tolerance terms.
    pub sla: Sla,
    /// `[[component]]`: the VEE types of the service, in manifest order.
    #[serde(rename = "component", default)]
    pub components: Vec<Component>,
    /// `[[constraint]]`: affinity / anti-affinity rules (E PIII §II-III).
    #[serde(rename = "constraint", default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<Constraint>,
    /// `[[network]]`: the service's networks (E PIII Table I).
    #[serde(rename = "network", default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Network>,
    /// `[[elasticity]]`: rules that scale components ([`elasticity`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elasticity: Vec<elasticity::ElasticityRule>,
}

/// `[[network]]`: a service network (E PIII Table I: the internal network
/// N_i joining the service's VEEs, the external network N_e through which
/// each attached instance is reached at an address of its own).
///
/// ```toml
/// [[network]]
/// name = "backend"
/// kind = "internal"
/// cidr = "auto"          # or an IPv4 network, /16 to /29
/// [[network]]
/// name = "public"
/// kind = "external"
/// ports = [80, 7000]     # TCP ports opened to the outside (nothing else)
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// Network name, unique in the manifest, `[A-Za-z0-9_-]`.
    pub name: String,
    pub kind: NetworkKind,
    /// The subnet of the network's interfaces: `auto` (default, from the
    /// site's pool) or an IPv4 network of prefix /16 to /29.
    #[serde(default)]
    pub cidr: Cidr,
    /// External networks: the TCP ports forwarded to each instance (at
    /// least one, each once). Internal networks have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
}

/// `network[].kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkKind {
    /// One isolated L2 segment and subnet, joining the service's VEEs.
    Internal,
    /// Each attached instance gets an external address of the site, with
    /// the declared ports forwarded to it.
    External,
}

/// `network[].cidr`: chosen by the site, or by the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cidr {
    /// A free subnet of the site's pool.
    #[default]
    Auto,
    /// This subnet (its host bits zero).
    Net(ipnet::Ipv4Net),
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Cidr::Auto => s.serialize_str("auto"),
            Cidr::Net(n) => s.collect_str(n),
        }
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == "auto" {
            return Ok(Cidr::Auto);
        }
        text.parse::<ipnet::Ipv4Net>()
            .map(Cidr::Net)
            .map_err(|_| serde::de::Error::custom(format!("{text:?} is neither \"auto\" nor an IPv4 network like 10.1.0.0/24")))
    }
}

/// `[service]`: who submits what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSection {
    /// Service name, `[A-Za-z0-9_-]`, 1..=63 characters.
    pub name: String,
    /// The service provider (the consumer for usage SLAs, D §3.3), same
    /// character set as `name`.
    pub provider: String,
}

/// `[sla]`: the service description terms the VEEM must keep
/// (H §3.2.2 guarantee level, §3.2.3 migration policy, eq. 3.12-3.16
/// checkpoint count).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sla {
    /// Guarantee level (H §3.2.2). Required.
    pub guarantee: GuaranteeLevel,
    /// Checkpoint interval: `"auto"` (default: optimal count from H
    /// eq. 3.16) or a duration such as `"5m"` or `"90s"` (at least 1 s).
    #[serde(default)]
    pub checkpoint_interval: CheckpointInterval,
    /// n_ro_max: the number of resource outages the fault-tolerance
    /// provisions must cover (H §3.4, eq. 3.12). Default 1, at most
    /// [`MAX_OUTAGES`].
    #[serde(default = "default_max_outages")]
    pub max_outages: u32,
    /// Where a VEE may be moved or restarted (H §3.2.3). Default `site`.
    #[serde(default)]
    pub migration: MigrationPolicy,
    /// Longest acceptable service interruption of one migration, in ms.
    /// Absent: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_downtime_ms: Option<u64>,
    /// Penalty the provider pays per hour of SLA violation (currency units
    /// per hour), finite and >= 0. Default 0.
    #[serde(default)]
    pub penalty_per_hour: f64,
    /// The time window the service must run in (advance reservation, H §3.4).
    /// Absent: from admission on, for as long as the VEEM's planning horizon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
}

fn default_max_outages() -> u32 {
    1
}

/// Guarantee levels of H §3.2.2, from weakest to strongest. The order of the
/// variants is the order of the guarantees (`Background < Full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GuaranteeLevel {
    /// Runs only in gaps of the schedule; may be preempted (suspended) at any
    /// time to make room for SLA-bound VEEs.
    Background,
    /// Advance reservation, no fault tolerance (best effort on failure).
    Legacy,
    /// Advance reservation plus periodic checkpoints; on failure restart on a
    /// local host with free capacity, else at a peer site, without guarantee.
    Standard,
    /// Like standard, but spare capacity is kept at the local site (limited
    /// to `max_outages` concurrent outages).
    Enhanced,
    /// Spare capacity is reserved at a peer site; admission fails without it.
    Full,
}

impl GuaranteeLevel {
    /// All levels, weakest first.
    pub const ALL: [GuaranteeLevel; 5] = [
        GuaranteeLevel::Background,
        GuaranteeLevel::Legacy,
        GuaranteeLevel::Standard,
        GuaranteeLevel::Enhanced,
        GuaranteeLevel::Full,
    ];

    /// The manifest spelling (`"background"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            GuaranteeLevel::Background => "background",
            GuaranteeLevel::Legacy => "legacy",
            GuaranteeLevel::Standard => "standard",
            GuaranteeLevel::Enhanced => "enhanced",
            GuaranteeLevel::Full => "full",
        }
    }

    /// Background VEEs may be suspended to make room for others.
    pub fn is_preemptible(self) -> bool {
        self == GuaranteeLevel::Background
    }

    /// Levels whose VEEs are checkpointed by default (standard and above).
    pub fn checkpoints_by_default(self) -> bool {
        self >= GuaranteeLevel::Standard
    }
}

impl fmt::Display for GuaranteeLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for GuaranteeLevel {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        GuaranteeLevel::ALL
            .into_iter()
            .find(|g| g.as_str() == s)
            .ok_or_else(|| Error::InvalidManifest {
                field: "sla.guarantee".into(),
                reason: format!("unknown guarantee level {s:?}; expected background, legacy, standard, enhanced or full"),
            })
    }
}

/// `sla.checkpoint_interval`: `"auto"` or a fixed period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointInterval {
    /// Choose the optimal checkpoint count from the planned run time, the
    /// checkpoint cost and `max_outages` (H eq. 3.12-3.16).
    #[default]
    Auto,
    /// Checkpoint every this long (at least [`MIN_CHECKPOINT_INTERVAL`]).
    Every(Duration),
}

impl fmt::Display for CheckpointInterval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointInterval::Auto => f.write_str("auto"),
            CheckpointInterval::Every(d) => write!(f, "{}", humantime::format_duration(*d)),
        }
    }
}

impl FromStr for CheckpointInterval {
    type Err = String;
    /// `"auto"` or a humantime duration (`"5m"`, `"90s"`, `"1h 30m"`).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s.trim() == "auto" {
            return Ok(CheckpointInterval::Auto);
        }
        humantime::parse_duration(s.trim())
            .map(CheckpointInterval::Every)
            .map_err(|e| format!("expected \"auto\" or a duration like \"5m\" or \"90s\", got {s:?}: {e}"))
    }
}

impl Serialize for CheckpointInterval {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CheckpointInterval {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `sla.migration`: where VEEs of the service may be moved or restarted
/// (H §3.2.3 migration policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrationPolicy {
    /// Never moved: stays on its host (restart in place only).
    None,
    /// Moved or restarted within the primary site only.
    #[default]
    Site,
    /// May also go to a peer site of the federation.
    Federation,
}

impl MigrationPolicy {
    /// The manifest spelling (`"none"`, `"site"`, `"federation"`).
    pub fn as_str(self) -> &'static str {
        match self {
            MigrationPolicy::None => "none",
            MigrationPolicy::Site => "site",
            MigrationPolicy::Federation => "federation",
        }
    }

    /// Whether a peer site may host the service's VEEs.
    pub fn allows_peer_site(self) -> bool {
        self == MigrationPolicy::Federation
    }
}

/// `sla.window`: the advance-reservation window, `start < end`, UTC
/// (RFC 3339 strings or TOML datetimes with an offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    /// First instant the service must run.
    #[serde(deserialize_with = "de_datetime")]
    pub start: DateTime<Utc>,
    /// Instant the service may stop (exclusive).
    #[serde(deserialize_with = "de_datetime")]
    pub end: DateTime<Utc>,
}

impl Window {
    /// Length of the window (zero if `end <= start`).
    pub fn duration(&self) -> Duration {
        (self.end - self.start).to_std().unwrap_or_default()
    }
}

/// Accepts an RFC 3339 string or a TOML offset datetime.
fn de_datetime<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<DateTime<Utc>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Toml(toml::value::Datetime),
    }
    let text = match Either::deserialize(d)
        .map_err(|_| serde::de::Error::custom("expected an RFC 3339 date-time like \"2026-11-22T08:00:00Z\""))?
    {
        Either::Text(s) => s,
        Either::Toml(t) => t.to_string(),
    };
    DateTime::parse_from_rfc3339(&text).map(|t| t.with_timezone(&Utc)).map_err(|e| {
        serde::de::Error::custom(format!(
            "{text:?} is not an RFC 3339 date-time with offset (like \"2026-11-22T08:00:00Z\"): {e}"
        ))
    })
}

/// `[[component]]`: one VEE type, run as `instances` identical VEEs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Component {
    /// Component name, unique in the manifest, `[A-Za-z0-9_-]`.
    pub name: String,
    /// Number of VEEs of this type, 1..=[`MAX_INSTANCES`]. Default 1.
    #[serde(default = "default_instances")]
    pub instances: u32,
    /// Virtual CPUs per VEE, 1..=[`MAX_VCPUS`].
    pub vcpus: u32,
    /// Memory per VEE in MiB, 1..=[`MAX_MEMORY_MIB`] (1 TiB).
    pub memory_mib: u64,
    /// The most vCPUs a VEE may be resized to while it runs (vCPU
    /// hot-plug), `vcpus`..=[`MAX_VCPUS`]. Default: `vcpus` (no growth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_vcpus: Option<u32>,
    /// The most memory (MiB) a VEE may be resized to while it runs (the
    /// virtio balloon), `memory_mib`..=[`MAX_MEMORY_MIB`]. Default:
    /// `memory_mib` (no growth). The guest needs the balloon driver
    /// (`virtio_balloon`, in every stock kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mib: Option<u64>,
    /// Disk per VEE in GiB (the root/data disk's virtual size),
    /// 1..=[`MAX_DISK_GIB`].
    pub disk_gib: u64,
    /// Root/data disk image: a content ID in the site's image repository
    /// (B §2: "the system ID defines the image"), or a VEE image artifact
    /// in an OCI registry the site trusts (`REGISTRY/REPOSITORY@sha256:...`
    /// or `:TAG`, resolved to its digest at admission; its kernel and
    /// initrd layers are booted directly when the component names none).
    pub image: ImageRef,
    /// Kernel for direct kernel boot, by content ID. Optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<BlobId>,
    /// Initial ramdisk, by content ID; only together with `kernel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initrd: Option<BlobId>,
    /// Kernel command line (direct kernel boot only), printable, at most
    /// [`MAX_CMDLINE_BYTES`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    /// The `[[network]]`s each VEE of the component is attached to; its
    /// NICs in this order (eth0, eth1, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<String>,
    /// First-boot data for cloud-init (`#cloud-config`, a script, ...),
    /// delivered as user-data on a NoCloud seed disk; at most
    /// [`crate::cloud_init::MAX_USER_DATA_BYTES`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// OpenSSH public keys (`authorized_keys` lines) for the guest's default
    /// user, delivered as the seed's meta-data `public-keys`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
}

fn default_instances() -> u32 {
    1
}

impl Component {
    /// The most vCPUs a VEE of it may have: `max_vcpus`, or `vcpus`.
    pub fn vcpu_limit(&self) -> u32 {
        self.max_vcpus.unwrap_or(self.vcpus)
    }

    /// The most memory (MiB) a VEE of it may have: `max_memory_mib`, or
    /// `memory_mib`.
    pub fn memory_limit_mib(&self) -> u64 {
        self.max_memory_mib.unwrap_or(self.memory_mib)
    }
}

/// `[[constraint]]`: an AA-constraint between components (E PIII §II-III).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constraint {
    /// Affinity (together) or anti-affinity (apart).
    pub kind: ConstraintKind,
    /// Host, site or region.
    pub level: ConstraintLevel,
    /// Type scope: between instances of different listed components only;
    /// instance scope: between every pair of instances, same type included.
    pub scope: ConstraintScope,
    /// Names of the components the constraint covers (at least one; type
    /// scope needs at least two).
    pub components: Vec<String>,
}

/// Affinity or anti-affinity (E PIII §II).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConstraintKind {
    /// Place on the same host / site / region.
    Affinity,
    /// Place on different hosts / sites / regions.
    AntiAffinity,
}

/// The level an AA-constraint applies at (E PIII §II: host, site, region).
/// Ordered from the finest to the coarsest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConstraintLevel {
    /// One physical host.
    Host,
    /// One cloud site (one VEEM / infrastructure provider).
    Site,
    /// A geographical region.
    Region,
}

/// The scope of an AA-constraint (E PIII §III).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConstraintScope {
    /// Relates instances of different types only.
    Type,
    /// Relates every pair of instances, of the same type too.
    Instance,
}

impl Manifest {
    /// Parses a TOML manifest and validates it ([`Manifest::validate`]).
    ///
    /// Errors: [`Error::ManifestSyntax`] when the text is not TOML;
    /// [`Error::InvalidManifest`] naming the field path and the reason when
    /// a field is missing, unknown, of the wrong type or invalid.
    pub fn from_toml(text: &str) -> Result<Manifest> {
        let manifest = parse(text)?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Checks every rule that the types alone do not: non-zero and bounded
    /// sizes, names, unique component names, window order, kernel/initrd
    /// pairing, constraints naming known components and not contradicting
    /// each other, SLA consistency. Stops at the first error.
    pub fn validate(&self) -> Result<()> {
        validate::validate(self)?;
        elasticity::validate(self)
    }

    /// The manifest as TOML (round-trips through [`Manifest::from_toml`]).
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string(self).map_err(|e| Error::ManifestSyntax(e.to_string()))
    }

    /// The component named `name`.
    pub fn component(&self, name: &str) -> Option<&Component> {
        self.components.iter().find(|c| c.name == name)
    }

    /// Total number of VEEs (sum of `instances`).
    pub fn total_instances(&self) -> u64 {
        self.components.iter().map(|c| u64::from(c.instances)).sum()
    }
}

/// TOML -> [`Manifest`], with serde errors mapped to field paths.
fn parse(text: &str) -> Result<Manifest> {
    let de = toml::Deserializer::new(text);
    serde_path_to_error::deserialize::<_, Manifest>(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        shape_error(text, &path, &inner)
    })
}

/// Turns a deserialization error at `path` into an error naming the field.
/// What it quotes of the manifest is bounded (`crate::excerpt`): the
/// message's ends, the field path's, and the part of the line around the
/// column of a syntax error.
fn shape_error(text: &str, path: &str, err: &toml::de::Error) -> Error {
    let message = excerpt(&err.message().trim().replace('\n', "; "), 2 * QUOTE_CHARS).into_owned();
    let at = err.span().map(|span| crate::excerpt::line_col(text, span.start));
    let line = at.map(|(l, _)| format!(" (line {l})")).unwrap_or_default();
    let path = if path == "." || path == "?" { "" } else { path };
    let path = &*excerpt(path, QUOTE_CHARS);
    // Missing and unknown fields are reported by serde at the enclosing
    // table; name the field itself.
    for prefix in ["missing field `", "unknown field `"] {
        if let Some(rest) = message.strip_prefix(prefix) {
            let name = &*excerpt(rest.split('`').next().unwrap_or_default(), QUOTE_CHARS);
            let field = match (path, name) {
                ("", n) => n.to_string(),
                (p, n) if p == n || p.ends_with(&format!(".{n}")) => p.to_string(),
                (p, n) => format!("{p}.{n}"),
            };
            let reason = if prefix.starts_with("missing") {
                format!("missing field `{name}`{line}")
            } else {
                format!("unknown field `{name}`{line}; {}", rest.split_once(", ").map_or("", |(_, e)| e))
            };
            return Error::InvalidManifest { field, reason };
        }
    }
    if path.is_empty() {
        // Not even TOML (or an error without a location in the shape).
        return Error::ManifestSyntax(match at {
            Some((l, c)) => format!("line {l}, column {c}: {message}: {}", around(text, l, c)),
            None => message,
        });
    }
    Error::InvalidManifest {
        field: path.to_string(),
        reason: format!("{message}{line}"),
    }
}
