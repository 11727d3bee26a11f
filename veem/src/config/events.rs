//! `[events]`: the event log's retention and how fast a tenant may add to
//! it (`crate::core::Core::prune_events`, `crate::workflows::consoles`).

use std::time::Duration;

use interfaces::config::{duration, invalid, Invalid};
use serde::Deserialize;

/// `[events]`: how many events the site keeps, for how long, and how
/// often a caller may attach to a console (each session writes two
/// events).
///
/// ```toml
/// [events]
/// keep = 100000                    # events kept at most (the newest)
/// max_age = "30d"                  # older events are removed
/// prune_interval = "1m"            # how often the leader removes them
/// console_attaches_per_minute = 30 # per caller (token bucket)
/// ```
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsConfig {
    /// Events kept at most, the newest (a count, at least 1; default
    /// 100000): the leader's retention round removes the oldest beyond.
    #[serde(default = "default_keep")]
    pub keep: u64,
    /// Events older than this are removed (a duration, at least 1 min;
    /// default 30 days).
    #[serde(default = "default_max_age", deserialize_with = "duration")]
    pub max_age: Duration,
    /// Time between the leader's retention rounds (a duration, at least
    /// 1 s; default 1 min).
    #[serde(default = "default_prune_interval", deserialize_with = "duration")]
    pub prune_interval: Duration,
    /// Console sessions one caller (a provider, a peer site, the
    /// operator) may open per minute (at least 1; default 30): a token
    /// bucket of this many, refilled at this rate; one more is refused
    /// with RESOURCE_EXHAUSTED, saying when to retry.
    #[serde(default = "default_attaches")]
    pub console_attaches_per_minute: u32,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            keep: default_keep(),
            max_age: default_max_age(),
            prune_interval: default_prune_interval(),
            console_attaches_per_minute: default_attaches(),
        }
    }
}

fn default_keep() -> u64 {
    100_000
}
fn default_max_age() -> Duration {
    Duration::from_secs(30 * 24 * 3600)
}
fn default_prune_interval() -> Duration {
    Duration::from_secs(60)
}
fn default_attaches() -> u32 {
    30
}

impl EventsConfig {
    /// Errors name the field (`events.keep`, ...) and the bound.
    pub fn check(&self) -> Result<(), Invalid> {
        if self.keep == 0 {
            return Err(invalid("events.keep", "must be at least 1"));
        }
        if self.max_age < Duration::from_secs(60) {
            return Err(invalid("events.max_age", "must be at least 1 min"));
        }
        if self.prune_interval < Duration::from_secs(1) {
            return Err(invalid("events.prune_interval", "must be at least 1 s"));
        }
        if self.console_attaches_per_minute == 0 {
            return Err(invalid("events.console_attaches_per_minute", "must be at least 1"));
        }
        Ok(())
    }
}
