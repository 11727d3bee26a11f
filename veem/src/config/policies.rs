//! The policies of `[migration]`, `[proposals]` and `[recovery]`.

use std::time::Duration;

use interfaces::config::duration;
use interfaces::retry::RetryPolicy;
use serde::Deserialize;

/// Which migrations run without an operator's approval.
#[derive(Clone, Debug, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrationPolicy {
    /// The planner's reasons (`failure-risk`, `sla-at-risk`,
    /// `consolidation`) whose proposals run at once; everything else, and
    /// every proposal a caller makes whatever its reason, waits for an
    /// operator. Default: none.
    #[serde(default)]
    pub auto_approve: Vec<String>,
    /// Bandwidth limit of each live migration, in MiB/s (default 0:
    /// unlimited).
    #[serde(default)]
    pub bandwidth_mib_s: u64,
}

/// `[proposals]`: migrations the planner proposes by itself. Whether they run at once or wait for an operator is
/// `[migration] auto_approve` (reasons `failure-risk`, `sla-at-risk`,
/// `consolidation`).
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
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
/// before it records the VEE unrecovered and charges the SLA's penalty.
/// Durations are humantime strings (`"500ms"`,
/// `"2m"`).
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
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
    /// η of the remapping interval: the load threshold in [0, 1] above
    /// which the future reservations of a failed host are remapped at once
    /// (default 0.8).
    #[serde(default = "default_remap_eta")]
    pub remap_eta: f64,
    /// ζ of the remapping interval, at least 1: the weight of the failed
    /// host's load (default 2).
    #[serde(default = "default_remap_zeta")]
    pub remap_zeta: f64,
    /// Restores one destination host runs at once while the VEEs of a
    /// failed host come back (a count, at least 1): the VEEs are restored
    /// side by side, started in priority order (guarantee level `full`,
    /// then `enhanced`, then the rest), and those beyond the bound wait
    /// for a place. Default: half the destination's vCPUs as its last
    /// heartbeat (VHI HostInfo) reported them, at least 1; 2 while the
    /// host has not reported them.
    #[serde(default)]
    pub parallel_per_host: Option<u32>,
}

fn default_remap_eta() -> f64 {
    0.8
}
fn default_remap_zeta() -> f64 {
    2.0
}

impl Default for RecoveryPolicy {
    fn default() -> Self {
        Self {
            attempts_per_host: default_attempts_per_host(),
            backoff: default_recovery_backoff(),
            budget: default_recovery_budget(),
            remap_eta: default_remap_eta(),
            remap_zeta: default_remap_zeta(),
            parallel_per_host: None,
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

    /// How many restores a destination host may run at once: the
    /// configured `parallel_per_host`, else half of `vcpus` (the host's
    /// vCPUs as it reported them, `None` while unknown), at least 1, else
    /// [`RecoveryPolicy::UNKNOWN_HOST_RESTORES`].
    pub fn restores_per_host(&self, vcpus: Option<u32>) -> usize {
        match (self.parallel_per_host, vcpus.filter(|&n| n > 0)) {
            (Some(n), _) => n.max(1) as usize,
            (None, Some(vcpus)) => (vcpus / 2).max(1) as usize,
            (None, None) => Self::UNKNOWN_HOST_RESTORES,
        }
    }

    /// Restores at once on a host whose vCPUs are not known yet (without
    /// `parallel_per_host`).
    pub const UNKNOWN_HOST_RESTORES: usize = 2;
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
