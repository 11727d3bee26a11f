//! The VEEM's configuration file (TOML), `veem serve --config FILE`.
//!
//! Durations are humantime strings (`"500ms"`, `"30s"`, `"5m"`); a bare
//! integer is read as seconds. The keys that ended in `_s` and took whole
//! seconds (`heartbeat_interval_s`, `usage_interval_s`, `slot_s`,
//! `proposals.interval_s`, `settle_s`, `hold_s`, and `epoch_s`, `burst_s`
//! of a commitment limit) are still read under those names, and are
//! deprecated: write `heartbeat_interval = "2s"` and so on.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::collections::BTreeMap;

use anyhow::Result;
use interfaces::config::{duration, invalid, Invalid};
use serde::Deserialize;

use crate::planner::{Resources, UsageLimit};

mod events;
mod peers;
mod policies;
mod store;
mod web;
pub use events::EventsConfig;
pub use peers::{Agreement, Overlay, PeerEntry};
pub use policies::{MigrationPolicy, ProposalPolicy, RecoveryPolicy};
pub use store::{EngineKind, StoreConfig};
pub use web::WebConfig;

/// One VEEH of the site.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostEntry {
    /// Host name (as the VEEH's own config names it).
    pub name: String,
    /// VHI endpoint, e.g. `http://127.0.0.1:7101`.
    pub endpoint: String,
    /// Region label for region-level affinity (default: the site ID).
    #[serde(default)]
    pub region: Option<String>,
}

/// Who a token speaks for.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", tag = "role", content = "name")]
pub enum Role {
    /// A service provider, its ID as `name`: sees and manages only its
    /// own services.
    Provider(String),
    /// The site's operator: sees everything, approves migrations.
    Operator,
    /// A peer site's VEEM under a framework agreement, the peer's site ID
    /// as `name`: peer calls only.
    Peer(String),
}

impl std::fmt::Display for Role {
    /// `operator`, `provider NAME` or `peer SITE`: who did something, as
    /// an audit event or a page names them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Operator => f.write_str("operator"),
            Role::Provider(p) => write!(f, "provider {p}"),
            Role::Peer(s) => write!(f, "peer {s}"),
        }
    }
}

/// A bearer token and its role. The token is given as its SHA-256
/// (`token_sha256`, hex: `veem hash-token`), so that the configuration at
/// rest does not hold it; `token` in clear is still read, with a warning.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// The token in clear (warned at start); give `token_sha256` instead.
    #[serde(default)]
    pub token: Option<String>,
    /// The token's SHA-256, 64 hex digits (`veem hash-token`).
    #[serde(default)]
    pub token_sha256: Option<String>,
    /// Whom the token speaks for: `role` and, for a provider or a peer,
    /// `name` (the provider's ID, the peer's site ID).
    #[serde(flatten)]
    pub role: Role,
}

impl TokenEntry {
    /// The token's SHA-256 ([`interfaces::tokens::configured`]); errors
    /// name `tokens[i]` and the reason.
    pub fn digest(&self, i: usize) -> Result<[u8; 32], String> {
        interfaces::tokens::configured(&format!("tokens[{i}]"), self.token.as_deref(), self.token_sha256.as_deref())
    }
}

/// `[networks]`: where the site takes the subnets, VNIs and external
/// addresses of service networks from.
///
/// ```toml
/// [networks]
/// pool = "10.240.0.0/12"          # subnets of `cidr = "auto"` networks
/// subnet_prefix = 24              # one /24 per auto network
/// external_pool = "192.0.2.0/24"  # external addresses (none: no external networks)
/// mtu = 1450                      # the guests' MTU (VXLAN over a 1500-byte underlay)
/// ```
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkPool {
    /// Where the subnets of `cidr = "auto"` networks are taken from (an
    /// IPv4 CIDR; default `10.240.0.0/12`).
    #[serde(default = "default_network_pool")]
    #[schemars(with = "String")]
    pub pool: ipnet::Ipv4Net,
    /// Prefix length of an auto subnet: 16 to 29, and inside `pool`
    /// (default 24).
    #[serde(default = "default_subnet_prefix")]
    pub subnet_prefix: u8,
    /// Addresses (an IPv4 CIDR) the site gives instances on external
    /// networks; none (the default): a manifest with an external network
    /// is refused.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub external_pool: Option<ipnet::Ipv4Net>,
    /// MTU of the guests' NICs, in bytes: 576 to 9000 (default 1450, for
    /// VXLAN over a 1500-byte underlay).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
}

impl Default for NetworkPool {
    fn default() -> Self {
        Self {
            pool: default_network_pool(),
            subnet_prefix: default_subnet_prefix(),
            external_pool: None,
            mtu: default_mtu(),
        }
    }
}

fn default_network_pool() -> ipnet::Ipv4Net {
    "10.240.0.0/12".parse().expect("valid")
}
fn default_subnet_prefix() -> u8 {
    24
}
fn default_mtu() -> u32 {
    1450
}

/// `veem serve --config FILE`.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VeemConfig {
    /// Test builds only (feature `failpoints`): failpoints to arm
    /// ([`crate::failpoints`]); unknown to any other build.
    #[cfg(feature = "failpoints")]
    #[serde(default)]
    #[schemars(skip)]
    pub failpoints: Option<String>,
    /// This site's ID: the name its peers, its image repository and its
    /// VEEHs know it by, and the DNS name of its VMI certificate.
    pub site_id: String,
    /// Address and port the VMI (gRPC and REST) listens on, e.g.
    /// `"0.0.0.0:7100"`.
    pub listen: SocketAddr,
    /// The VMI URL clients and peers reach this VEEM at, which a standby
    /// of the site tells them when it names its leader (etcd; default
    /// `https://<listen>`, `http://` without `[tls]`). On etcd, refused
    /// when it is an unspecified address, or a loopback one while an etcd
    /// member or a peer is on another machine.
    #[serde(default)]
    pub advertise: Option<String>,
    /// The sled database's directory: required with `[store] engine =
    /// "sled"` (the default), unused with etcd.
    #[serde(default)]
    pub db: PathBuf,
    /// Where the records are kept: sled at `db`, or the site's etcd
    /// cluster (`[store]`).
    #[serde(default)]
    pub store: StoreConfig,
    /// The site's image repository: its base URL (`https://HOST:PORT`), or
    /// `oci://REGISTRY/NAMESPACE` for an OCI registry of `[[registries]]`.
    pub image_repo: String,
    /// This site's token at the image repository: read from
    /// `image_repo_token_file` (a file only the VEEM may read) at
    /// start-up, or given here in clear (with a warning); not both.
    #[serde(default)]
    pub image_repo_token: Option<String>,
    /// A file whose first line is this site's token at the image
    /// repository; refused when every user may read it.
    #[serde(default)]
    pub image_repo_token_file: Option<PathBuf>,
    /// The CA (PEM file) of the image repository's certificate, for an
    /// `https://` `image_repo`.
    #[serde(default)]
    pub image_repo_ca: Option<PathBuf>,
    /// OCI registries the site trusts (`[[registries]]`: host, CA,
    /// credentials, scope): a manifest may name a VEE image there as
    /// `REGISTRY/REPOSITORY@sha256:...` or `:TAG`. The site's VEEHs list
    /// the same registries.
    #[serde(default)]
    pub registries: Vec<interfaces::registry::RegistryConfig>,
    /// Checkpoint replication (one repository per site): when true, the blobs of a checkpoint a peer site may restore are pushed
    /// to that peer's own repository (the image repository's `[[peers]]`),
    /// and the checkpoint counts for the peer once they are there: a
    /// checkpoint taken here of a VEE run for a peer, to its primary site,
    /// in the background after the checkpoint answered (usable here at
    /// once; retried after a failure); a checkpoint a VEE is handed to a
    /// peer with, to that peer, before it is handed over. False (the default): peers
    /// pull the blobs through from this site's repository when they need
    /// them, which needs it up then.
    #[serde(default)]
    pub replicate_checkpoints: bool,
    /// Checkpoints kept per VEE (at least 1; default 3): when one more is
    /// recorded, the oldest beyond these are forgotten and their blobs
    /// unpinned, so that the image repository's garbage collection may
    /// take them. The latest is always kept.
    #[serde(default = "default_checkpoints_kept")]
    pub checkpoints_kept: usize,
    /// How placement ranks hosts (OpenNebula's rank policies): `packing`
    /// (the default; most loaded host first, to use as few hosts as
    /// possible), `striping` (least loaded first, to spread VEEs) or
    /// `load-aware` (lowest measured load first).
    #[serde(default = "default_rank")]
    pub rank_policy: String,
    /// Time between heartbeats to each VEEH (at least 1 s; default 2 s).
    #[serde(default = "default_heartbeat", alias = "heartbeat_interval_s", deserialize_with = "duration")]
    pub heartbeat_interval: Duration,
    /// Heartbeats missed in a row after which a host is declared failed
    /// (at least 1; default 3).
    #[serde(default = "default_misses")]
    pub heartbeat_miss_limit: u32,
    /// Heartbeats a second at most, all hosts together (Nomad's heartbeat
    /// pacing; at least 1; default 50): a round (every
    /// `heartbeat_interval`) asks at most this many times the interval's
    /// seconds of the hosts, in turn, so that each host is asked every
    /// max(`heartbeat_interval`, hosts / this), in whole intervals. A site
    /// of 2 hosts keeps its 2 s heartbeats; one of 2,000 asks each host
    /// every 40 s, so that a failed host is declared after
    /// `heartbeat_miss_limit` of its periods (3 × 40 s = 2 min, not 6 s),
    /// and a domain destroyed behind the VEEM's back is seen after its
    /// host's next heartbeat: detection time traded for a bounded load.
    /// Metering is paced by the same rate: each host's ListStats every
    /// max(`usage_interval`, hosts / this) (40 s at 2,000 hosts).
    #[serde(default = "default_heartbeats_per_second")]
    pub max_heartbeats_per_second: u32,
    /// Time between usage metering rounds (default 10 s).
    #[serde(default = "default_usage", alias = "usage_interval_s", deserialize_with = "duration")]
    pub usage_interval: Duration,
    /// Time between rounds of the elasticity rules (at least 1 s; default
    /// 10 s).
    #[serde(default = "default_usage", deserialize_with = "duration")]
    pub elasticity_interval: Duration,
    /// Planning slot length (whole seconds, at least 1 s; default 1 min).
    #[serde(default = "default_slot", alias = "slot_s", deserialize_with = "duration")]
    pub slot: Duration,
    /// How far ahead the planner reserves for a service whose manifest has
    /// no window (open-ended): from admission, renewed by the VEEM while the
    /// service runs whenever less than half of it is left (default 24 h, at
    /// least two slots).
    #[serde(default = "default_horizon", deserialize_with = "duration")]
    pub planning_horizon: Duration,
    /// How long a VEE takes to start (image pull, domain definition,
    /// boot): its reservation starts this much before its
    /// window and it is deployed then, so that it runs when the window
    /// opens (default 30 s).
    #[serde(default = "default_init_overhead", deserialize_with = "duration")]
    pub init_overhead: Duration,
    /// How long a stop waits for the guest to shut down (guest agent or
    /// ACPI) before the domain is destroyed; reservations hold their host
    /// this much after the window (default 30 s: a stock Debian 12 systemd
    /// guest takes about 8 s under TCG).
    #[serde(default = "default_stop_timeout", deserialize_with = "duration")]
    pub stop_timeout: Duration,
    /// The site's VEEHs (`[[hosts]]`, one table each); none by default.
    #[serde(default)]
    pub hosts: Vec<HostEntry>,
    /// How the VEEM calls its VEEHs over TLS: its client certificate and
    /// key (from the site's VEEM CA), and the site's hosts CA; each host's
    /// certificate must be for its `[[hosts]]` name. Needed for `https://`
    /// host endpoints.
    #[serde(default)]
    pub vhi_tls: Option<interfaces::tls::TlsFiles>,
    /// The VMI over TLS: this site's certificate (DNS name: `site_id`, and
    /// the names clients dial), shown to clients and, as a client, to
    /// peers. Without it the VMI is served in plaintext, which needs
    /// `insecure = true`.
    #[serde(default)]
    pub tls: Option<interfaces::tls::SiteIdentity>,
    /// The VMI listener's limits (`[listener]`: connections, per address,
    /// handshake, head and idle timeouts, head and body sizes, failed
    /// authentications; docs/security.md).
    #[serde(default)]
    pub listener: interfaces::connections::ListenerLimits,
    /// The metrics listener (`[metrics]`: `/metrics` for Prometheus,
    /// `/healthz`, `/readyz`); none (the default): not served.
    #[serde(default)]
    pub metrics: Option<interfaces::metrics::MetricsConfig>,
    /// The web console (`[web]`: HTTPS with `[tls]`); none (the default):
    /// not served.
    #[serde(default)]
    pub web: Option<WebConfig>,
    /// Allow plaintext: the VMI without `[tls]`, `http://` host and peer
    /// endpoints (unauthenticated hosts and peers; logged at every start).
    #[serde(default)]
    pub insecure: bool,
    /// The bearer tokens callers present (`[[tokens]]`), each with its
    /// role; none by default.
    #[serde(default)]
    pub tokens: Vec<TokenEntry>,
    /// The digests of `tokens`, made once, at the first call ([`VeemConfig::role_of`]).
    #[serde(skip)]
    token_digests: std::sync::OnceLock<Vec<[u8; 32]>>,
    /// Peer sites (`[[peers]]`): where each is, the token presented there,
    /// the framework agreement; none by default (the site works alone).
    #[serde(default)]
    pub peers: Vec<PeerEntry>,
    /// `[migration]`: which migrations run without an operator's approval,
    /// and the bandwidth of live migrations.
    #[serde(default)]
    pub migration: MigrationPolicy,
    /// `[proposals]`: the migrations the planner proposes by itself.
    #[serde(default)]
    pub proposals: ProposalPolicy,
    /// `[recovery]`: how hard the VEEM tries to restore the VEEs of a
    /// failed host.
    #[serde(default)]
    pub recovery: RecoveryPolicy,
    /// `[networks]`: where service networks' subnets and external
    /// addresses come from.
    #[serde(default)]
    pub networks: NetworkPool,
    /// The event log's retention and a caller's console attach rate
    /// (`[events]`).
    #[serde(default)]
    pub events: EventsConfig,
    /// `[usage_limits.NAME]`: the usage SLA of a service provider or of a
    /// peer site, checked when a service is negotiated or
    /// admitted. Consumers not named here have no limit.
    #[serde(default)]
    pub usage_limits: BTreeMap<String, UsageLimitEntry>,
}

/// A consumer's usage SLA as the configuration states it. Limits
/// are absolute amounts (`{ vcpus, memory_mib, disk_gib }`, all three
/// required); windows are durations.
///
/// ```toml
/// [usage_limits.acme]
/// kind = "fixed"              # never more than this at once
/// limit = { vcpus = 8, memory_mib = 16384, disk_gib = 200 }
///
/// [usage_limits.globex]
/// kind = "commitment"         # D's commitment-AP, on metered averages
/// epoch_limit = { vcpus = 4, memory_mib = 8192, disk_gib = 100 }
/// epoch = "1d"
/// burst_limit = { vcpus = 8, memory_mib = 16384, disk_gib = 200 }
/// burst = "1h"
/// ```
#[derive(Clone, Debug, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", tag = "kind", deny_unknown_fields)]
pub enum UsageLimitEntry {
    /// Hard limit on what the consumer holds at once.
    Fixed {
        /// What the consumer may hold (`{ vcpus, memory_mib, disk_gib }`).
        limit: Resources,
    },
    /// Limit enforced only when the site has no room for the request.
    Extensible {
        /// What the consumer may hold (`{ vcpus, memory_mib, disk_gib }`).
        limit: Resources,
    },
    /// Epoch and burst limits on the consumer's metered average usage.
    Commitment {
        /// The average usage allowed over `epoch`.
        epoch_limit: Resources,
        /// The long window (T_epoch, a duration; at least 1 s).
        #[serde(alias = "epoch_s", deserialize_with = "duration")]
        epoch: Duration,
        /// The average usage allowed over `burst`.
        burst_limit: Resources,
        /// The short window (T_burst, a duration; at least 1 s).
        #[serde(alias = "burst_s", deserialize_with = "duration")]
        burst: Duration,
    },
}

impl UsageLimitEntry {
    /// The planner's form, with the windows in slots of `slot_s` seconds
    /// (rounded up).
    pub fn to_planner(&self, slot_s: u64) -> UsageLimit {
        let slots = |s: u64| s.div_ceil(slot_s.max(1)).min(u32::MAX as u64) as u32;
        match self.clone() {
            UsageLimitEntry::Fixed { limit } => UsageLimit::Fixed { limit },
            UsageLimitEntry::Extensible { limit } => UsageLimit::Extensible { limit },
            UsageLimitEntry::Commitment {
                epoch_limit,
                epoch,
                burst_limit,
                burst,
            } => UsageLimit::Commitment {
                epoch_limit,
                epoch_slots: slots(epoch.as_secs()),
                burst_limit,
                burst_slots: slots(burst.as_secs()),
            },
        }
    }

    /// T_epoch and T_burst in seconds, for a commitment limit.
    pub fn windows_s(&self) -> Option<(u64, u64)> {
        match self {
            UsageLimitEntry::Commitment { epoch, burst, .. } => Some((epoch.as_secs(), burst.as_secs())),
            _ => None,
        }
    }
}

fn default_checkpoints_kept() -> usize {
    3
}

fn default_rank() -> String {
    "packing".into()
}
fn default_heartbeat() -> Duration {
    Duration::from_secs(2)
}
fn default_misses() -> u32 {
    3
}
fn default_heartbeats_per_second() -> u32 {
    50
}
fn default_usage() -> Duration {
    Duration::from_secs(10)
}
fn default_slot() -> Duration {
    Duration::from_secs(60)
}
fn default_horizon() -> Duration {
    Duration::from_secs(24 * 3600)
}
fn default_init_overhead() -> Duration {
    Duration::from_secs(30)
}
fn default_stop_timeout() -> Duration {
    Duration::from_secs(30)
}

impl VeemConfig {
    /// The VMI URL of this VEEM (`advertise`, else from `listen`).
    pub fn advertised(&self) -> String {
        self.advertise.clone().unwrap_or_else(|| {
            let scheme = if self.tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{}", self.listen)
        })
    }

    /// Reads and checks `path`; errors name the file, the line and column,
    /// the field and why (`interfaces::config`).
    pub fn load(path: &Path) -> Result<Self> {
        interfaces::config::load(path, |c: &mut Self| c.check().and_then(|()| c.read_secrets()))
    }

    /// Reads the secrets the configuration names files of
    /// (`peers[].token_file`, `image_repo_token_file`) into their fields,
    /// and warns of those given in clear. Errors name the field: a file
    /// that cannot be read, is empty, or that every user may read
    /// (`interfaces::tokens::read_secret`).
    fn read_secrets(&mut self) -> std::result::Result<(), Invalid> {
        let read = |field: String, path: &Path| interfaces::tokens::read_secret(path).map_err(|e| invalid(field, format!("{e:#}")));
        for (i, p) in self.peers.iter_mut().enumerate() {
            match &p.token_file {
                Some(f) => p.token = read(format!("peers[{i}].token_file"), f)?,
                None => interfaces::tokens::warn_secret_in_clear(&format!("peers[{i}].token"), "token_file"),
            }
        }
        match &self.image_repo_token_file {
            Some(f) => self.image_repo_token = Some(read("image_repo_token_file".into(), f)?),
            None if self.image_repo_token.is_some() => {
                interfaces::tokens::warn_secret_in_clear("image_repo_token", "image_repo_token_file")
            }
            None => {}
        }
        Ok(())
    }

    /// Parses and checks a configuration's text; errors name the line and
    /// column and the field (`3:1: field `usage_limits.acme.limit`: missing
    /// field `disk_gib``).
    pub fn parse(text: &str) -> Result<Self> {
        Ok(interfaces::config::parse_checked(text, |c: &mut Self| {
            c.check().and_then(|()| c.read_secrets())
        })?)
    }

    fn check(&self) -> std::result::Result<(), Invalid> {
        if self.site_id.is_empty() {
            return Err(invalid("site_id", "must not be empty"));
        }
        self.store.check(&self.site_id, self.insecure)?;
        let peers: Vec<String> = self.peers.iter().flat_map(|p| p.endpoints()).collect();
        self.store.check_advertised(&self.advertised(), self.advertise.is_none(), &peers)?;
        if self.store.engine == EngineKind::Sled && self.db.as_os_str().is_empty() {
            return Err(invalid(
                "db",
                "is required: the sled database's directory (or [store] engine = \"etcd\")",
            ));
        }
        self.listener.check("listener")?;
        self.events.check()?;
        if let Some(m) = &self.metrics {
            m.check()?;
        }
        if self.web.is_some() && self.tls.is_none() {
            return Err(invalid("web", "the web console is served over HTTPS only: give [tls]"));
        }
        if self.checkpoints_kept == 0 {
            return Err(invalid(
                "checkpoints_kept",
                "must be at least 1 (the latest checkpoint is always kept)",
            ));
        }
        if let Some(site) = interfaces::registry::SiteRegistry::parse(&self.image_repo, &self.registries) {
            site.map_err(|why| invalid("image_repo", why))?;
            if self.replicate_checkpoints {
                return Err(invalid(
                    "replicate_checkpoints",
                    "needs an image-repo with [[peers]]; this site's repository is an OCI registry",
                ));
            }
        }
        if !["packing", "striping", "load-aware"].contains(&self.rank_policy.as_str()) {
            return Err(invalid(
                "rank_policy",
                format!("{:?} is not packing, striping or load-aware", self.rank_policy),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, h) in self.hosts.iter().enumerate() {
            if !names.insert(&h.name) {
                return Err(invalid(format!("hosts[{i}].name"), format!("duplicate host {:?}", h.name)));
            }
        }
        let mut tokens = std::collections::HashSet::new();
        for (i, t) in self.tokens.iter().enumerate() {
            let digest = t
                .digest(i)
                .map_err(|e| invalid(format!("tokens[{i}]"), format!("{e} (veem hash-token)")))?;
            interfaces::tokens::warn_if_clear(&format!("tokens[{i}]"), t.token.as_deref(), "veem hash-token");
            if !tokens.insert(digest) {
                return Err(invalid(format!("tokens[{i}]"), "the same token twice"));
            }
        }
        if self.heartbeat_interval < Duration::from_secs(1) {
            return Err(invalid("heartbeat_interval", "must be at least 1 s"));
        }
        if self.heartbeat_miss_limit == 0 {
            return Err(invalid("heartbeat_miss_limit", "must be at least 1"));
        }
        if self.max_heartbeats_per_second == 0 {
            return Err(invalid("max_heartbeats_per_second", "must be at least 1"));
        }
        if self.slot.as_secs() == 0 || self.slot.subsec_nanos() != 0 {
            return Err(invalid("slot", "must be whole seconds, at least 1 s"));
        }
        if self.planning_horizon < 2 * self.slot {
            return Err(invalid(
                "planning_horizon",
                format!("must be at least two slots ({} s)", 2 * self.slot.as_secs()),
            ));
        }
        if !(0.0..=1.0).contains(&self.recovery.remap_eta) {
            return Err(invalid(
                "recovery.remap_eta",
                format!("{} is not in [0, 1]", self.recovery.remap_eta),
            ));
        }
        if !(self.recovery.remap_zeta.is_finite() && self.recovery.remap_zeta >= 1.0) {
            return Err(invalid(
                "recovery.remap_zeta",
                format!("{} must be at least 1", self.recovery.remap_zeta),
            ));
        }
        if self.recovery.attempts_per_host == 0 {
            return Err(invalid("recovery.attempts_per_host", "must be at least 1"));
        }
        if self.recovery.parallel_per_host == Some(0) {
            return Err(invalid("recovery.parallel_per_host", "must be at least 1"));
        }
        if self.image_repo_token.is_some() && self.image_repo_token_file.is_some() {
            return Err(invalid(
                "image_repo_token_file",
                "give image_repo_token or image_repo_token_file, not both",
            ));
        }
        let mut ports = std::collections::HashSet::new();
        for (i, p) in self.peers.iter().enumerate() {
            if p.token.is_empty() == p.token_file.is_none() {
                return Err(invalid(
                    format!("peers[{i}]"),
                    "give exactly one of token_file (a file only the VEEM may read) and token",
                ));
            }
            if let Some(o) = &p.overlay {
                if o.port == 4789 || o.port == 0 {
                    return Err(invalid(
                        format!("peers[{i}].overlay.port"),
                        format!("{} is not a port for a peer's networks (4789 is this site's own)", o.port),
                    ));
                }
                if !ports.insert(o.port) {
                    return Err(invalid(
                        format!("peers[{i}].overlay.port"),
                        format!("{} is another peer's already", o.port),
                    ));
                }
            }
        }
        let n = &self.networks;
        if !interfaces::manifest::NETWORK_PREFIXES.contains(&n.subnet_prefix) || n.subnet_prefix < n.pool.prefix_len() {
            return Err(invalid(
                "networks.subnet_prefix",
                format!("/{} must be /16 to /29 and inside the pool {}", n.subnet_prefix, n.pool),
            ));
        }
        if !(576..=9000).contains(&n.mtu) {
            return Err(invalid("networks.mtu", format!("{} bytes; must be 576 to 9000", n.mtu)));
        }
        for (i, r) in self.migration.auto_approve.iter().enumerate() {
            if crate::domain::Reason::parse(r).is_none() {
                return Err(invalid(format!("migration.auto_approve[{i}]"), format!("{r:?} is not a reason the planner proposes (failure-risk, sla-at-risk, consolidation); a caller's reason always waits for an operator")));
            }
        }
        if self.proposals.interval < Duration::from_secs(1) {
            return Err(invalid("proposals.interval", "must be at least 1 s"));
        }
        for (name, limit) in &self.usage_limits {
            if let Some((epoch_s, burst_s)) = limit.windows_s() {
                if epoch_s == 0 || burst_s == 0 {
                    return Err(invalid(format!("usage_limits.{name}"), "epoch and burst must be at least 1 s"));
                }
            }
        }
        Ok(())
    }

    /// The role of a bearer token, if any. The token's digest is compared
    /// with every entry's in constant time, so the time taken says nothing
    /// of how close a guess came.
    pub fn role_of(&self, token: &str) -> Option<Role> {
        let known = self.token_digests.get_or_init(|| {
            self.tokens
                .iter()
                .enumerate()
                .map(|(i, t)| t.digest(i).unwrap_or_default())
                .collect()
        });
        interfaces::tokens::find(token, known).map(|i| self.tokens[i].role.clone())
    }
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
