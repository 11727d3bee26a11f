//! Where the VEEM keeps its records (`[store]`; DESIGN.md §11): the
//! embedded sled database at `db` (the default, one machine), or the
//! site's etcd cluster, which the site's VEEMs share.
//!
//! ```toml
//! [store]
//! engine = "etcd"
//! endpoints = ["https://10.0.0.11:2379", "https://10.0.0.12:2379", "https://10.0.0.13:2379"]
//! prefix = "/vee/site-a"          # the site's keys (default: /vee/<site_id>)
//! timeout = "5s"                  # one call to etcd at most
//! lease_ttl = "10s"               # the leader's lease: a standby takes over after at most this
//! [store.tls]                     # etcd's CA, this VEEM's client certificate
//! ca = "/etc/vee/pki/etcd-ca.crt"
//! cert = "/etc/vee/pki/veem-etcd.crt"
//! key = "/etc/vee/pki/veem-etcd.key"
//! ```

use std::time::Duration;

use interfaces::config::{duration, invalid, Invalid};
use serde::Deserialize;

use crate::store::EtcdOptions;

/// The store engines a VEEM can keep its records in.
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// sled, embedded, in the directory `db`.
    #[default]
    Sled,
    /// An etcd cluster (v3 API) shared by the site's VEEMs.
    Etcd,
}

/// `[store]` (see the module doc).
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The store engine: `sled` (the default) or `etcd`.
    #[serde(default)]
    pub engine: EngineKind,
    /// etcd: the members' client URLs (`https://`, or `http://` with
    /// `insecure = true`).
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// etcd: the CA of the members' certificates (`ca`) and this VEEM's
    /// client certificate and key (`cert`, `key`), PEM files.
    #[serde(default)]
    pub tls: Option<interfaces::tls::TlsFiles>,
    /// etcd: the prefix of the site's keys (default `/vee/<site_id>`).
    #[serde(default)]
    pub prefix: Option<String>,
    /// etcd: how long one call may take before the store counts as
    /// unavailable (default 5 s, at least 1 s).
    #[serde(default = "default_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// etcd: the lease of the site's leader (whole seconds, at least 2 s;
    /// default 10 s): a leader that does not renew it (crashed, stalled,
    /// cut off) loses the site after at most this long, and a standby
    /// takes over.
    #[serde(default = "default_lease_ttl", deserialize_with = "duration")]
    pub lease_ttl: Duration,
}

fn default_lease_ttl() -> Duration {
    Duration::from_secs(10)
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            engine: EngineKind::Sled,
            endpoints: Vec::new(),
            tls: None,
            prefix: None,
            timeout: default_timeout(),
            lease_ttl: default_lease_ttl(),
        }
    }
}

impl StoreConfig {
    /// Checks the section for site `site_id` (`insecure`: plaintext
    /// allowed); errors name the field.
    pub(super) fn check(&self, site_id: &str, insecure: bool) -> Result<(), Invalid> {
        if self.engine == EngineKind::Sled {
            if !self.endpoints.is_empty() || self.tls.is_some() || self.prefix.is_some() {
                return Err(invalid(
                    "store.engine",
                    "is sled (the default): endpoints, tls and prefix are etcd's",
                ));
            }
            return Ok(());
        }
        if self.endpoints.is_empty() {
            return Err(invalid("store.endpoints", "etcd needs at least one member's client URL"));
        }
        for (i, e) in self.endpoints.iter().enumerate() {
            let field = format!("store.endpoints[{i}]");
            match (e.strip_prefix("https://"), e.strip_prefix("http://")) {
                (Some(rest), _) if !rest.is_empty() => {
                    if self.tls.is_none() {
                        return Err(invalid(field, format!("{e:?} is https and [store.tls] is missing")));
                    }
                }
                (_, Some(rest)) if !rest.is_empty() => {
                    if !insecure {
                        return Err(invalid(
                            field,
                            format!("{e:?} is plaintext: use https with [store.tls], or set insecure = true"),
                        ));
                    }
                }
                _ => return Err(invalid(field, format!("{e:?} is not an http:// or https:// URL"))),
            }
        }
        let prefix = self.prefix(site_id);
        if !prefix.starts_with('/')
            || prefix.ends_with('/')
            || prefix.len() > 200
            || prefix.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(invalid(
                "store.prefix",
                format!("{prefix:?} must start with / and not end with it, with no spaces, at most 200 characters"),
            ));
        }
        if self.timeout < Duration::from_secs(1) {
            return Err(invalid("store.timeout", "must be at least 1 s"));
        }
        if self.lease_ttl < Duration::from_secs(2) || self.lease_ttl.subsec_nanos() != 0 {
            return Err(invalid(
                "store.lease_ttl",
                "must be whole seconds, at least 2 s (etcd's least lease)",
            ));
        }
        Ok(())
    }

    /// Checks, on etcd, the URL this VEEM advertises (`advertised`;
    /// `defaulted`: taken from `listen`): a standby sends clients and
    /// peers there when it names its leader. Refused: a URL without a host,
    /// an unspecified address (`0.0.0.0`, `::`), and a loopback one unless
    /// every etcd member and every peer's endpoint (`peers`) is on this
    /// machine too (a site run on one machine). Errors name `advertise`.
    pub(super) fn check_advertised(&self, advertised: &str, defaulted: bool, peers: &[String]) -> Result<(), Invalid> {
        if self.engine != EngineKind::Etcd {
            return Ok(());
        }
        let given = if defaulted { " (the default: the listen address)" } else { "" };
        let set = "set `advertise` to the URL the site's clients and peers reach this VEEM at";
        let Some(host) = url_host(advertised) else {
            return Err(invalid(
                "advertise",
                format!("{advertised:?}{given} is not an http:// or https:// URL with a host"),
            ));
        };
        if host.unspecified {
            return Err(invalid(
                "advertise",
                format!("{advertised:?}{given} is an unspecified address, which no client can reach: {set}"),
            ));
        }
        let local = |url: &String| url_host(url).is_some_and(|h| h.loopback);
        if host.loopback && !(self.endpoints.iter().all(local) && peers.iter().all(local)) {
            return Err(invalid(
                "advertise",
                format!("{advertised:?}{given} is a loopback address, which clients of another machine's VEEM and peer sites cannot reach: {set}"),
            ));
        }
        Ok(())
    }

    /// The prefix of site `site_id`'s keys.
    pub fn prefix(&self, site_id: &str) -> String {
        self.prefix.clone().unwrap_or_else(|| format!("/vee/{site_id}"))
    }

    /// The etcd engine's options for site `site_id`.
    pub fn etcd(&self, site_id: &str) -> EtcdOptions {
        EtcdOptions {
            endpoints: self.endpoints.clone(),
            tls: self.tls.clone(),
            prefix: self.prefix(site_id),
            timeout: self.timeout,
        }
    }
}

/// What the host of a URL is (see [`url_host`]).
struct UrlHost {
    loopback: bool,
    unspecified: bool,
}

/// The host of an `http://` or `https://` URL: a loopback one
/// (`localhost`, 127.0.0.0/8, `::1`) or an unspecified address; `None`
/// when it is not such a URL or has no host.
fn url_host(url: &str) -> Option<UrlHost> {
    let uri: tonic::transport::Uri = url.parse().ok()?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return None;
    }
    let host = uri.host().filter(|h| !h.is_empty())?;
    let ip = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().ok();
    Some(UrlHost {
        loopback: host.eq_ignore_ascii_case("localhost") || ip.is_some_and(|ip| ip.is_loopback()),
        unspecified: ip.is_some_and(|ip| ip.is_unspecified()),
    })
}
