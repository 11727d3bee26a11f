//! `[web]`: the web console (`crate::api::web`).

use std::net::SocketAddr;
use std::time::Duration;

use interfaces::config::duration;
use serde::Deserialize;

/// `[web]`: where the web console listens (HTTPS with the VMI's `[tls]`
/// identity; HTTP/1.1) and how long its sessions live.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// Address and port, e.g. `"0.0.0.0:7443"`.
    pub listen: SocketAddr,
    /// A session ends after this long without a request (default 30 min).
    #[serde(default = "default_idle", deserialize_with = "duration")]
    pub session_idle: Duration,
    /// A session ends this long after its login, whatever (default 8 h).
    #[serde(default = "default_max", deserialize_with = "duration")]
    pub session_max: Duration,
}

fn default_idle() -> Duration {
    Duration::from_secs(30 * 60)
}

fn default_max() -> Duration {
    Duration::from_secs(8 * 3600)
}
