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

use anyhow::{bail, Context, Result};
use interfaces::retry::RetryPolicy;
use serde::Deserialize;

use crate::planner::{Resources, UsageLimit};

/// One VEEH of the site.
#[derive(Clone, Debug, Deserialize)]
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
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", tag = "role", content = "name")]
pub enum Role {
    /// A service provider: sees and manages only its own services.
    Provider(String),
    /// The site's operator: sees everything, approves migrations.
    Operator,
    /// A peer site's VEEM under a framework agreement: peer calls only.
    Peer(String),
}

/// A bearer token and its role.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    pub token: String,
    #[serde(flatten)]
    pub role: Role,
}

/// What a framework agreement with a peer allows (E Ch 3.4).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agreement {
    /// vCPUs the peer accepts from us at most.
    #[serde(default = "big")]
    pub max_vcpus: u32,
    /// Memory in MiB the peer accepts from us at most.
    #[serde(default = "big64")]
    pub max_memory_mib: u64,
    /// Guarantee levels the peer accepts (empty = all).
    #[serde(default)]
    pub guarantee_levels: Vec<String>,
    /// Price per VEE-hour, used to choose among peers.
    #[serde(default)]
    pub price_per_vee_hour: f64,
}

fn big() -> u32 {
    u32::MAX
}
fn big64() -> u64 {
    u64::MAX
}

/// A peer site.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerEntry {
    pub site_id: String,
    /// The peer VEEM's VMI endpoint.
    pub endpoint: String,
    /// Token this site presents to the peer.
    pub token: String,
    /// Marked unavailable: never used, the VEEM works alone.
    #[serde(default)]
    pub unavailable: bool,
    pub agreement: Agreement,
}

/// Which migrations run without an operator's approval.
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MigrationPolicy {
    /// Reasons whose proposals run at once (e.g. `["failure-risk"]`);
    /// everything else waits for an operator.
    #[serde(default)]
    pub auto_approve: Vec<String>,
    /// Bandwidth limit of live migrations in MiB/s (0 = unlimited).
    #[serde(default)]
    pub bandwidth_mib_s: u64,
}

/// Reads a duration: a humantime string (`"2s"`, `"5m"`) or a bare number
/// of seconds (the form of the deprecated `*_s` keys).
fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Duration, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = Duration;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a duration such as \"30s\" or \"5m\", or whole seconds")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Duration, E> {
            Ok(Duration::from_secs(v))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Duration, E> {
            u64::try_from(v)
                .map(Duration::from_secs)
                .map_err(|_| E::custom(format!("{v} is negative")))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Duration, E> {
            humantime::parse_duration(v).map_err(|e| E::custom(format!("{v:?}: {e}")))
        }
    }
    d.deserialize_any(V)
}

/// `[proposals]`: migrations the planner proposes by itself (see
/// `crate::proposals`). Whether they run at once or wait for an operator is
/// `[migration] auto_approve` (reasons `failure-risk`, `sla-at-risk`,
/// `consolidation`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposalPolicy {
    /// Time between two proposal passes (at least 1 s; default 10 s).
    #[serde(default = "default_proposal_interval", alias = "interval_s", deserialize_with = "duration")]
    pub interval: Duration,
    /// Whether to propose emptying the least-loaded host onto the others
    /// (reason `consolidation`; default false).
    #[serde(default)]
    pub consolidation: bool,
    /// How long a VEE must have been on its host before consolidation
    /// moves it (default 5 min): freshly placed or moved VEEs stay put.
    #[serde(default = "default_settle", alias = "settle_s", deserialize_with = "duration")]
    pub settle: Duration,
    /// How long, counted from a proposal's creation, the planner does not
    /// propose the same reason for the same VEE again once that proposal
    /// was rejected by an operator or failed (default 10 min): no nagging,
    /// no retry storm.
    #[serde(default = "default_hold", alias = "hold_s", deserialize_with = "duration")]
    pub hold: Duration,
}

impl Default for ProposalPolicy {
    fn default() -> Self {
        Self {
            interval: default_proposal_interval(),
            consolidation: false,
            settle: default_settle(),
            hold: default_hold(),
        }
    }
}

fn default_proposal_interval() -> Duration {
    Duration::from_secs(10)
}
fn default_settle() -> Duration {
    Duration::from_secs(300)
}
fn default_hold() -> Duration {
    Duration::from_secs(600)
}

/// `[recovery]`: how hard the VEEM tries to restore a VEE of a failed host
/// before it records the VEE unrecovered and charges the SLA's penalty
/// (see `crate::recovery`). Durations are humantime strings (`"500ms"`,
/// `"2m"`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryPolicy {
    /// Restores tried on one host before the next host is asked (at least
    /// 1; default 3).
    #[serde(default = "default_attempts_per_host")]
    pub attempts_per_host: u32,
    /// Wait after the first failed restore on a host; doubled after each
    /// further one, at most 8 s (default 1 s).
    #[serde(default = "default_recovery_backoff", deserialize_with = "duration")]
    pub backoff: Duration,
    /// The outage budget: once a VEE has been down this long (counted
    /// from the host's failure), no further attempt starts (default 2 min).
    #[serde(default = "default_recovery_budget", deserialize_with = "duration")]
    pub budget: Duration,
}

impl Default for RecoveryPolicy {
    fn default() -> Self {
        Self {
            attempts_per_host: default_attempts_per_host(),
            backoff: default_recovery_backoff(),
            budget: default_recovery_budget(),
        }
    }
}

impl RecoveryPolicy {
    /// The retry schedule on one host.
    pub fn per_host(&self) -> RetryPolicy {
        RetryPolicy {
            attempts: self.attempts_per_host,
            initial_backoff: self.backoff,
            max_backoff: Duration::from_secs(8).max(self.backoff),
        }
    }
}

fn default_attempts_per_host() -> u32 {
    3
}
fn default_recovery_backoff() -> Duration {
    Duration::from_secs(1)
}
fn default_recovery_budget() -> Duration {
    Duration::from_secs(120)
}

/// `veem serve --config FILE`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VeemConfig {
    pub site_id: String,
    /// VMI gRPC listen address.
    pub listen: SocketAddr,
    /// sled database directory.
    pub db: PathBuf,
    /// Image repository base URL.
    pub image_repo: String,
    #[serde(default)]
    pub image_repo_token: Option<String>,
    /// packing | striping | load-aware (OpenNebula's rank policies).
    #[serde(default = "default_rank")]
    pub rank_policy: String,
    /// Time between heartbeats to each VEEH (at least 1 s; default 2 s).
    #[serde(default = "default_heartbeat", alias = "heartbeat_interval_s", deserialize_with = "duration")]
    pub heartbeat_interval: Duration,
    /// Missed heartbeats after which a host is declared failed.
    #[serde(default = "default_misses")]
    pub heartbeat_miss_limit: u32,
    /// Time between usage metering rounds (default 10 s).
    #[serde(default = "default_usage", alias = "usage_interval_s", deserialize_with = "duration")]
    pub usage_interval: Duration,
    /// Planning slot length (whole seconds, at least 1 s; default 1 min).
    #[serde(default = "default_slot", alias = "slot_s", deserialize_with = "duration")]
    pub slot: Duration,
    #[serde(default)]
    pub hosts: Vec<HostEntry>,
    #[serde(default)]
    pub tokens: Vec<TokenEntry>,
    #[serde(default)]
    pub peers: Vec<PeerEntry>,
    #[serde(default)]
    pub migration: MigrationPolicy,
    #[serde(default)]
    pub proposals: ProposalPolicy,
    #[serde(default)]
    pub recovery: RecoveryPolicy,
    /// `[usage_limits.NAME]`: the usage SLA of a service provider or of a
    /// peer site (D §3.3), checked when a service is negotiated or
    /// admitted. Consumers not named here have no limit.
    #[serde(default)]
    pub usage_limits: BTreeMap<String, UsageLimitEntry>,
}

/// A consumer's usage SLA as the configuration states it (D §3.3). Limits
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
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", tag = "kind", deny_unknown_fields)]
pub enum UsageLimitEntry {
    /// Hard limit on what the consumer holds at once.
    Fixed { limit: Resources },
    /// Limit enforced only when the site has no room for the request.
    Extensible { limit: Resources },
    /// Epoch and burst limits on the consumer's metered average usage.
    Commitment {
        epoch_limit: Resources,
        /// T_epoch.
        #[serde(alias = "epoch_s", deserialize_with = "duration")]
        epoch: Duration,
        burst_limit: Resources,
        /// T_burst.
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

fn default_rank() -> String {
    "packing".into()
}
fn default_heartbeat() -> Duration {
    Duration::from_secs(2)
}
fn default_misses() -> u32 {
    3
}
fn default_usage() -> Duration {
    Duration::from_secs(10)
}
fn default_slot() -> Duration {
    Duration::from_secs(60)
}

impl VeemConfig {
    /// Reads and checks `path`; errors name the file, the field and why.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
        Self::parse(&text).with_context(|| path.display().to_string())
    }

    /// Parses and checks a configuration's text; errors name the field
    /// (`field `usage_limits.acme.limit`: missing field `disk_gib``).
    pub fn parse(text: &str) -> Result<Self> {
        let cfg: Self = serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(|e| {
            let path = e.path().to_string();
            let message = e.into_inner().message().trim().to_string();
            match path.as_str() {
                "." | "?" => anyhow::anyhow!("{message}"),
                _ => anyhow::anyhow!("field `{path}`: {message}"),
            }
        })?;
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<()> {
        if self.site_id.is_empty() {
            bail!("field `site_id`: must not be empty");
        }
        if !["packing", "striping", "load-aware"].contains(&self.rank_policy.as_str()) {
            bail!("field `rank_policy`: {:?} is not packing, striping or load-aware", self.rank_policy);
        }
        let mut names = std::collections::HashSet::new();
        for (i, h) in self.hosts.iter().enumerate() {
            if !names.insert(&h.name) {
                bail!("field `hosts[{i}].name`: duplicate host {:?}", h.name);
            }
        }
        let mut tokens = std::collections::HashSet::new();
        for (i, t) in self.tokens.iter().enumerate() {
            if t.token.len() < 8 {
                bail!("field `tokens[{i}].token`: shorter than 8 characters");
            }
            if !tokens.insert(&t.token) {
                bail!("field `tokens[{i}].token`: the same token twice");
            }
        }
        if self.heartbeat_interval < Duration::from_secs(1) {
            bail!("field `heartbeat_interval`: must be at least 1 s");
        }
        if self.heartbeat_miss_limit == 0 {
            bail!("field `heartbeat_miss_limit`: must be at least 1");
        }
        if self.slot.as_secs() == 0 || self.slot.subsec_nanos() != 0 {
            bail!("field `slot`: must be whole seconds, at least 1 s");
        }
        if self.recovery.attempts_per_host == 0 {
            bail!("field `recovery.attempts_per_host`: must be at least 1");
        }
        if self.proposals.interval < Duration::from_secs(1) {
            bail!("field `proposals.interval`: must be at least 1 s");
        }
        for (name, limit) in &self.usage_limits {
            if let Some((epoch_s, burst_s)) = limit.windows_s() {
                if epoch_s == 0 || burst_s == 0 {
                    bail!("field `usage_limits.{name}`: epoch and burst must be at least 1 s");
                }
            }
        }
        Ok(())
    }

    /// The role of a bearer token, if any.
    pub fn role_of(&self, token: &str) -> Option<Role> {
        self.tokens.iter().find(|t| t.token == token).map(|t| t.role.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "site_id = \"site-a\"\nlisten = \"127.0.0.1:7200\"\ndb = \"/tmp/x\"\nimage_repo = \"http://127.0.0.1:7000\"\n";

    #[test]
    fn parses_tokens_roles_hosts_and_peers() {
        let text = format!(
            "{BASE}[[hosts]]\nname = \"a1\"\nendpoint = \"http://127.0.0.1:7101\"\n[[tokens]]\ntoken = \"sp-acme-token\"\nrole = \"provider\"\nname = \"acme\"\n[[tokens]]\ntoken = \"operator-token\"\nrole = \"operator\"\n[[tokens]]\ntoken = \"peer-b-token\"\nrole = \"peer\"\nname = \"site-b\"\n[[peers]]\nsite_id = \"site-b\"\nendpoint = \"http://127.0.0.1:7300\"\ntoken = \"a-at-b-token\"\n[peers.agreement]\nprice_per_vee_hour = 0.5\n"
        );
        let cfg: VeemConfig = toml::from_str(&text).unwrap();
        cfg.check().unwrap();
        assert_eq!(cfg.role_of("sp-acme-token"), Some(Role::Provider("acme".into())));
        assert_eq!(cfg.role_of("operator-token"), Some(Role::Operator));
        assert_eq!(cfg.role_of("peer-b-token"), Some(Role::Peer("site-b".into())));
        assert_eq!(cfg.role_of("nope"), None);
        assert_eq!(cfg.peers[0].agreement.max_vcpus, u32::MAX);
    }

    #[test]
    fn recovery_policy_reads_humantime_durations_and_has_defaults() {
        let cfg = VeemConfig::parse(BASE).unwrap();
        assert_eq!(cfg.recovery.attempts_per_host, 3);
        assert_eq!(cfg.recovery.budget, Duration::from_secs(120));
        let cfg = VeemConfig::parse(&format!(
            "{BASE}[recovery]\nattempts_per_host = 2\nbackoff = \"250ms\"\nbudget = \"5m\"\n"
        ))
        .unwrap();
        let p = cfg.recovery.per_host();
        assert_eq!(
            (p.attempts, p.backoff(1), p.backoff(2)),
            (2, Duration::from_millis(250), Duration::from_millis(500))
        );
        assert_eq!(cfg.recovery.budget, Duration::from_secs(300));
        let e = VeemConfig::parse(&format!("{BASE}[recovery]\nbudget = \"2 fortnights\"\n")).unwrap_err();
        assert!(format!("{e:#}").contains("field `recovery.budget`"), "{e:#}");
        let e = VeemConfig::parse(&format!("{BASE}[recovery]\nbudget = -5\n")).unwrap_err();
        assert!(format!("{e:#}").contains("-5 is negative"), "{e:#}");
        let e = VeemConfig::parse(&format!("{BASE}[recovery]\nattempts_per_host = 0\n")).unwrap_err();
        assert!(format!("{e:#}").contains("recovery.attempts_per_host"), "{e:#}");
    }

    #[test]
    fn bad_rank_policy_and_duplicate_hosts_name_the_field() {
        let cfg: VeemConfig = toml::from_str(&format!("{BASE}rank_policy = \"random\"\n")).unwrap();
        assert!(cfg.check().unwrap_err().to_string().contains("rank_policy"));
        let dup = format!("{BASE}[[hosts]]\nname = \"a\"\nendpoint = \"x\"\n[[hosts]]\nname = \"a\"\nendpoint = \"y\"\n");
        let cfg: VeemConfig = toml::from_str(&dup).unwrap();
        assert!(cfg.check().unwrap_err().to_string().contains("hosts[1].name"));
    }

    #[test]
    fn proposals_default_off_and_deny_unknown_fields() {
        let cfg: VeemConfig = toml::from_str(BASE).unwrap();
        assert_eq!(
            (cfg.proposals.interval, cfg.proposals.consolidation),
            (Duration::from_secs(10), false)
        );
        let on: VeemConfig = toml::from_str(&format!(
            "{BASE}[proposals]\nconsolidation = true\ninterval = \"2s\"\nsettle = \"5s\"\n"
        ))
        .unwrap();
        on.check().unwrap();
        let secs = |d: Duration| d.as_secs();
        assert_eq!(
            (
                secs(on.proposals.interval),
                on.proposals.consolidation,
                secs(on.proposals.settle),
                secs(on.proposals.hold)
            ),
            (2, true, 5, 600)
        );
        let e = toml::from_str::<VeemConfig>(&format!("{BASE}[proposals]\nconsolidate = true\n")).unwrap_err();
        assert!(e.to_string().contains("consolidate"), "{e}");
        let zero: VeemConfig = toml::from_str(&format!("{BASE}[proposals]\ninterval = \"0s\"\n")).unwrap();
        assert!(zero.check().unwrap_err().to_string().contains("proposals.interval"));
    }

    #[test]
    fn durations_are_humantime_and_the_deprecated_seconds_keys_still_read() {
        let new = VeemConfig::parse(&format!(
            "{BASE}heartbeat_interval = \"3s\"\nusage_interval = \"1m\"\nslot = \"2m\"\n[proposals]\ninterval = \"20s\"\nsettle = \"1h\"\nhold = \"15m\"\n"
        ))
        .unwrap();
        let old = VeemConfig::parse(&format!(
            "{BASE}heartbeat_interval_s = 3\nusage_interval_s = 60\nslot_s = 120\n[proposals]\ninterval_s = 20\nsettle_s = 3600\nhold_s = 900\n"
        ))
        .unwrap();
        for cfg in [new, old] {
            assert_eq!(
                (cfg.heartbeat_interval, cfg.usage_interval, cfg.slot),
                (Duration::from_secs(3), Duration::from_secs(60), Duration::from_secs(120))
            );
            assert_eq!(
                (cfg.proposals.interval, cfg.proposals.settle, cfg.proposals.hold),
                (Duration::from_secs(20), Duration::from_secs(3600), Duration::from_secs(900))
            );
        }
        let both = VeemConfig::parse(&format!("{BASE}heartbeat_interval = \"3s\"\nheartbeat_interval_s = 3\n")).unwrap_err();
        assert!(format!("{both:#}").contains("heartbeat_interval"), "{both:#}");
        let sub = VeemConfig::parse(&format!("{BASE}heartbeat_interval = \"500ms\"\n")).unwrap_err();
        assert!(
            format!("{sub:#}").contains("field `heartbeat_interval`: must be at least 1 s"),
            "{sub:#}"
        );
        let frac = VeemConfig::parse(&format!("{BASE}slot = \"1500ms\"\n")).unwrap_err();
        assert!(format!("{frac:#}").contains("field `slot`"), "{frac:#}");
    }

    #[test]
    fn usage_limits_parse_into_planner_limits_and_bad_ones_name_the_field() {
        let text = format!(
            "{BASE}slot = \"1m\"\n[usage_limits.acme]\nkind = \"fixed\"\nlimit = {{ vcpus = 2, memory_mib = 256, disk_gib = 2 }}\n\
             [usage_limits.globex]\nkind = \"commitment\"\nepoch_limit = {{ vcpus = 4, memory_mib = 512, disk_gib = 8 }}\nepoch = \"1h 1s\"\n\
             burst_limit = {{ vcpus = 8, memory_mib = 1024, disk_gib = 16 }}\nburst_s = 600\n"
        );
        let cfg: VeemConfig = toml::from_str(&text).unwrap();
        cfg.check().unwrap();
        assert_eq!(
            cfg.usage_limits["acme"].to_planner(cfg.slot.as_secs()),
            UsageLimit::Fixed {
                limit: Resources::new(2, 256, 2)
            }
        );
        assert_eq!(
            cfg.usage_limits["globex"].to_planner(cfg.slot.as_secs()),
            UsageLimit::Commitment {
                epoch_limit: Resources::new(4, 512, 8),
                epoch_slots: 61,
                burst_limit: Resources::new(8, 1024, 16),
                burst_slots: 10,
            }
        );
        let e = VeemConfig::parse(&format!("{BASE}[usage_limits.acme]\nkind = \"hard\"\n")).unwrap_err();
        assert!(
            e.to_string().contains("field `usage_limits.acme.kind`") && e.to_string().contains("hard"),
            "{e}"
        );
        let e = VeemConfig::parse(&format!(
            "{BASE}[usage_limits.acme]\nkind = \"fixed\"\nlimit = {{ vcpus = 2, memory = 256, disk_gib = 2 }}\n"
        ))
        .unwrap_err();
        assert!(
            e.to_string().contains("field `usage_limits.acme`") && e.to_string().contains("unknown field `memory`"),
            "{e}"
        );
        let zero = VeemConfig::parse(&format!(
            "{BASE}[usage_limits.g]\nkind = \"commitment\"\nepoch_limit = {{ vcpus = 1, memory_mib = 1, disk_gib = 1 }}\nepoch_s = 0\n\
             burst_limit = {{ vcpus = 1, memory_mib = 1, disk_gib = 1 }}\nburst_s = 60\n"
        ))
        .unwrap_err();
        assert!(zero.to_string().contains("usage_limits.g"), "{zero}");
    }

    #[test]
    fn the_lab_configurations_are_valid() {
        for site in ["a", "b"] {
            let path = format!("{}/../configs/lab/veem-site-{site}.toml", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap().replace("@DEMO@", "/tmp/demo");
            let cfg = VeemConfig::parse(&text).unwrap_or_else(|e| panic!("{path}: {e:#}"));
            assert_eq!(cfg.site_id, format!("site-{site}"));
        }
    }
}
