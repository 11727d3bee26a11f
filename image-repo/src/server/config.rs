//! Configuration of the repository server: a TOML file, overridden by flags.
//!
//! ```toml
//! listen = "0.0.0.0:7480"         # address to serve on; port 0 picks a free port
//! data = "/var/lib/image-repo"    # blobs/, blobs/.tmp/ and meta/ (sled) live here
//! token_file = "/etc/image-repo/operator.token"  # the operator's bearer token (mode 0640): reads and manages every blob
//! max_bytes = 1_000_000_000_000   # optional quota on the stored content, in bytes
//! reserve_bytes = 67_108_864      # free space to leave on the disk, in bytes
//! max_connections = 512           # served at once; a newcomer takes an idle one's slot
//! header_timeout_s = 10           # for the TLS handshake and each request head
//! shutdown_grace = "10s"          # a stop lets requests in flight finish this long
//! body_idle_timeout_s = 30        # a request body with no byte for this long is cut off (408)
//! min_upload_bytes_per_s = 16384  # and one slower than this on average, after that time
//! upload_session_timeout = "5m"   # an OCI upload session without a request for this long is dropped
//! max_uploads_per_caller = 16     # OCI upload sessions open at once per token
//! max_pins_per_blob = 64         # pins of one blob (then 409 limit_reached), at most 1024
//! max_uploads_in_flight = 64      # upload bodies received at once, of all tokens (then 429)
//! max_uploads_in_flight_per_caller = 16  # of one token (then 429 with Retry-After)
//! insecure = false                # true: serve plaintext HTTP (no [tls])
//! [listener]                      # the other limits (interfaces::connections::ListenerLimits)
//! max_connections_per_peer = 128  # connections from one address (IPv6: its /64)
//! idle_timeout = "60s"            # a connection without a request in flight is closed
//! send_timeout = "60s"            # a client that leaves its answers unread is cut off
//! max_header_size = "64 KiB"      # a request head (at least 62,610 bytes: a push's metadata is in its query)
//! auth_failures_burst = 10        # failed authentications of an address at once,
//! auth_failure_interval = "1s"    # then one per interval (429 for a wrong token; a right one passes)
//! [metrics]                       # optional: /metrics (Prometheus), /healthz, /readyz
//! listen = "127.0.0.1:9480"       # plain HTTP: loopback, or give token_sha256
//! [tls]
//! cert = "/etc/image-repo/repo.crt"   # the server's certificate (PEM)
//! key = "/etc/image-repo/repo.key"
//! [[tokens]]                      # one per site and per service provider
//! name = "site-a"                 # the site ID or provider ID (owner and reader name)
//! role = "site"                   # site | provider | operator
//! token_sha256 = "64 hex digits"  # or token = "..." in clear (warned)
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::time::Duration;

use anyhow::{bail, Context, Result};
use interfaces::config::{duration, invalid, Invalid, Size};
use interfaces::connections::ListenerLimits;
use interfaces::repo_client::types::{validate_pin, MAX_PINS};
use serde::Deserialize;

/// What a token speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Reads and manages every blob; marks blobs public.
    Operator,
    /// A site's VEEM and VEEHs: push checkpoints, share them with peer
    /// sites, ask whether a provider may use an image.
    Site,
    /// A service provider: pushes and reads its own images.
    Provider,
}

/// The configuration file `serve` reads when `--config` is not given (if it
/// exists).
pub const DEFAULT_CONFIG: &str = "/etc/image-repo/image-repo.toml";
/// Default address the server listens on.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7480";
/// Default free space left on the data disk, in bytes (64 MiB).
pub const DEFAULT_RESERVE_BYTES: u64 = 64 << 20;
/// The repository's default `[listener] max_header_size`, in bytes (64 KiB;
/// the other daemons' is 16 KiB): a push's metadata goes in its query.
pub const DEFAULT_HEADER_SIZE: u64 = 64 << 10;
/// The least `[listener] max_header_size`, in bytes: the longest query of
/// a push's metadata (`protocol::MAX_META_QUERY_LEN`, 54,418 bytes) and
/// 8 KiB for the request line and the other headers, so that every
/// metadata the limits accept (a 255-byte name, 64 labels of 255 bytes)
/// reaches the handler, and one past them is refused naming its field.
pub const MIN_HEADER_SIZE: u64 = interfaces::repo_client::protocol::MAX_META_QUERY_LEN as u64 + 8192;

/// Server configuration. See the module documentation for the file format.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address and port to listen on (default `127.0.0.1:7480`; port 0
    /// picks a free port).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Data directory (created if missing): `blobs/` and the metadata
    /// database live there.
    pub data: PathBuf,
    /// The operator's token: reads and manages every blob. Read from
    /// `token_file` (a file only the daemon may read) at start-up, or
    /// given here in clear (with a warning); exactly one of the two.
    #[serde(default)]
    pub token: String,
    /// A file whose first line is the operator's token; refused when
    /// every user may read it.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The tokens of sites and service providers (`[[tokens]]`); none by
    /// default.
    #[serde(default)]
    pub tokens: Vec<TokenEntry>,
    /// Digests of `token` then of each of `tokens`, made by `validate`.
    #[serde(skip)]
    pub(super) digests: Vec<[u8; 32]>,
    /// Quota: most bytes of content stored in all (`"500 GB"`; the older
    /// `max_bytes`, a number of bytes, still reads); none (the default):
    /// no quota.
    #[serde(default, alias = "max_bytes")]
    pub max_size: Option<Size>,
    /// Free space kept on the data disk (`"64 MiB"`, the default; the older
    /// `reserve_bytes` still reads); an upload that would eat into it is
    /// refused with 507 before any byte is written.
    #[serde(default = "default_reserve", alias = "reserve_bytes")]
    pub reserve: Size,
    /// Connections served at once; a newcomer takes the slot of an idle
    /// connection (no request in flight) of the address holding the most,
    /// and is refused only when every slot is busy (default 512).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// How long a client has for its TLS handshake and to send each
    /// request's head (and an idle connection is kept); default `"10s"`
    /// (the older `header_timeout_s`, in seconds, still reads).
    #[serde(default = "default_header_timeout", alias = "header_timeout_s", deserialize_with = "duration")]
    pub header_timeout: Duration,
    /// How long a request's body (an upload's, a manifest's, any) may go
    /// without a byte before it is cut off (408); also the grace before
    /// [`Config::min_upload_bytes_per_s`] applies. Default `"30s"` (the
    /// older `body_idle_timeout_s`, in seconds, still reads).
    #[serde(default = "default_body_idle", alias = "body_idle_timeout_s", deserialize_with = "duration")]
    pub body_idle_timeout: Duration,
    /// Least average rate of an upload's body, in bytes per second
    /// (default 16384), once `body_idle_timeout` has passed (408 below).
    #[serde(default = "default_min_rate")]
    pub min_upload_bytes_per_s: u64,
    /// How long an OCI upload session may go without a request before it
    /// is dropped with its bytes and the room it held (default `"5m"`).
    #[serde(default = "default_upload_session_timeout", deserialize_with = "duration")]
    pub upload_session_timeout: Duration,
    /// OCI upload sessions one caller may have open at once (default 16);
    /// one more is answered 429 TOOMANYREQUESTS.
    #[serde(default = "default_uploads_per_caller")]
    pub max_uploads_per_caller: usize,
    /// Uploads whose bodies are being received at once, of all callers
    /// (default 64): `PUT /v1/blobs/ID`, and on `/v2` the POST, PATCH and
    /// PUT of uploads and the PUT of manifests. Each holds a connection and
    /// a writer thread while its body comes; one more is answered 429 with
    /// `Retry-After` before its body is read.
    #[serde(default = "default_uploads_in_flight")]
    pub max_uploads_in_flight: usize,
    /// Uploads under way at once of one caller (one token; default 16),
    /// within `max_uploads_in_flight`; one more: 429 with `Retry-After`.
    #[serde(default = "default_uploads_in_flight_per_caller")]
    pub max_uploads_in_flight_per_caller: usize,
    /// Pins one blob may have (default 64, at most 1,024): a new pin past
    /// them is answered 409 `limit_reached`; each pin change rewrites and
    /// syncs the blob's record, which holds them all.
    #[serde(default = "default_pins_per_blob")]
    pub max_pins_per_blob: usize,
    /// The listener's other limits (`[listener]`, as the VEEM's:
    /// `interfaces::connections::ListenerLimits`): connections per client
    /// address, idle and send timeouts, head size, failed authentications
    /// per address. Its `max_connections`, `head_timeout` and
    /// `handshake_timeout` are the top-level `max_connections` and
    /// `header_timeout`. Its `max_header_size` (bytes of a request head)
    /// is 64 KiB by default here and at least [`MIN_HEADER_SIZE`], room
    /// for the largest metadata of a push.
    #[serde(default)]
    pub listener: ListenerLimits,
    /// The metrics listener (`[metrics]`: `/metrics` for Prometheus,
    /// `/healthz`, `/readyz`); none (the default): not served.
    #[serde(default)]
    pub metrics: Option<interfaces::metrics::MetricsConfig>,
    /// How long a stop (SIGTERM) lets the requests in flight finish before
    /// it cuts them (default `"10s"`).
    #[serde(default = "default_shutdown_grace", deserialize_with = "duration")]
    pub shutdown_grace: Duration,
    /// The repositories of peer sites (`[[peers]]`): a blob this one lacks
    /// is fetched from them by digest for its site's VEEM and VEEHs
    /// (pull-through, verified by its hash), and checkpoints are pushed to
    /// them (replication). None by default.
    #[serde(default)]
    pub peers: Vec<PeerEntry>,
    /// TLS: the server's certificate and key. Without it the server speaks
    /// plaintext HTTP, which needs `insecure`.
    #[serde(default)]
    pub tls: Option<ServerTls>,
    /// Serve plaintext HTTP (tokens and content in clear; logged at start).
    #[serde(default)]
    pub insecure: bool,
}

/// A caller's bearer token (`[[tokens]]`).
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// The site ID or provider ID the token speaks for.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// The token in clear (warned at start).
    #[serde(default)]
    pub token: Option<String>,
    /// The token's SHA-256 in hex (`image-repo hash-token`).
    #[serde(default)]
    pub token_sha256: Option<String>,
}

/// A peer site's repository (`[[peers]]`).
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeerEntry {
    /// The peer's site ID: the name its own VEEM and VEEHs have in its
    /// repository, and the reader a replicated blob is shared with there.
    pub name: String,
    /// Its repository, `https://HOST:PORT` (`http://` only on a lab).
    pub url: String,
    /// The CA of its certificate (PEM), for an `https://` URL.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// A file whose first line is this site's token at the peer's
    /// repository (the framework agreement's credential); refused when
    /// every user may read it. Exactly one of `token_file` and `token`.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// That token in clear (warned at start).
    #[serde(default)]
    pub token: Option<String>,
}

impl PeerEntry {
    /// The token, from `token` or the first line of `token_file`.
    /// Errors: neither or both given, or the file unreadable or empty,
    /// naming it.
    pub fn token(&self) -> Result<String> {
        match (&self.token, &self.token_file) {
            (Some(t), None) => Ok(t.clone()),
            (None, Some(f)) => interfaces::tokens::read_secret(f).with_context(|| format!("peers {}", self.name)),
            _ => bail!("peers {}: give exactly one of token and token_file", self.name),
        }
    }
}

/// A server's certificate (chain) and private key, PEM files.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// The server's certificate (PEM file; its chain).
    pub cert: PathBuf,
    /// The private key of `cert` (PEM file).
    pub key: PathBuf,
}

fn default_max_connections() -> usize {
    512
}
fn default_header_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_body_idle() -> Duration {
    Duration::from_secs(30)
}
fn default_min_rate() -> u64 {
    16 * 1024
}
fn default_shutdown_grace() -> Duration {
    Duration::from_secs(10)
}
fn default_upload_session_timeout() -> Duration {
    Duration::from_secs(300)
}
fn default_uploads_per_caller() -> usize {
    16
}
fn default_pins_per_blob() -> usize {
    64
}
fn default_uploads_in_flight() -> usize {
    64
}
fn default_uploads_in_flight_per_caller() -> usize {
    16
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN.parse().expect("valid default address")
}

fn default_reserve() -> Size {
    Size(DEFAULT_RESERVE_BYTES)
}

/// Command-line values that override or replace the configuration file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--listen`
    pub listen: Option<SocketAddr>,
    /// `--data`
    pub data: Option<PathBuf>,
    /// `--token`
    pub token: Option<String>,
    /// `--max-bytes`
    pub max_bytes: Option<u64>,
    /// `--tls-cert` and `--tls-key`
    pub tls: Option<ServerTls>,
    /// `--insecure`
    pub insecure: bool,
}

impl Config {
    /// Reads `file` (if given) and applies `overrides`. Errors: the file cannot
    /// be read or parsed (naming the file and field), or `data` or `token` is
    /// missing or empty.
    pub fn load(file: Option<&Path>, overrides: Overrides) -> Result<Self> {
        let text = match file {
            Some(path) => Some(std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?),
            None => None,
        };
        let mut table = match &text {
            Some(text) => interfaces::config::parse::<toml::Table>(text).map_err(|mut e| {
                e.file = file.map(Path::to_path_buf);
                e
            })?,
            None => toml::Table::new(),
        };
        if let Some(listen) = overrides.listen {
            table.insert("listen".into(), listen.to_string().into());
        }
        if let Some(data) = &overrides.data {
            table.insert("data".into(), data.display().to_string().into());
        }
        if let Some(token) = overrides.token {
            table.insert("token".into(), token.into());
        }
        if let Some(tls) = &overrides.tls {
            let mut t = toml::Table::new();
            t.insert("cert".into(), tls.cert.display().to_string().into());
            t.insert("key".into(), tls.key.display().to_string().into());
            table.insert("tls".into(), t.into());
        }
        if overrides.insecure {
            table.insert("insecure".into(), true.into());
        }
        if let Some(max) = overrides.max_bytes {
            let max = i64::try_from(max).context("--max-bytes is too large")?;
            table.remove("max_bytes");
            table.insert("max_size".into(), max.into());
        }
        let from = file
            .map(|p| format!("config {}", p.display()))
            .unwrap_or_else(|| "command line".into());
        for (keys, flag) in [
            (&["data"][..], "--data DIR"),
            (&["token", "token_file"][..], "--token-file FILE or IMAGE_REPO_WRITE_TOKEN"),
        ] {
            if !keys.iter().any(|k| table.contains_key(*k)) {
                bail!(
                    "{from}: `{}` is required (set it in the config file or pass {flag})",
                    keys.join("` or `")
                );
            }
        }
        // The repository's head limit is its own default, not the other
        // daemons' (`ListenerLimits`' 16 KiB), with or without `[listener]`.
        if let Some(listener) = table.entry("listener").or_insert_with(|| toml::Table::new().into()).as_table_mut() {
            listener
                .entry("max_header_size")
                .or_insert_with(|| (DEFAULT_HEADER_SIZE as i64).into());
        }
        if table.contains_key("token") {
            // The command line's token replaces the file's.
            table.remove("token_file");
        }
        Ok(
            interfaces::config::from_table(table, text.as_deref(), Config::validate).map_err(|mut e| {
                e.file = file.map(Path::to_path_buf);
                e
            })?,
        )
    }

    fn validate(&mut self) -> std::result::Result<(), Invalid> {
        match &self.token_file {
            Some(_) if !self.token.is_empty() => return Err(invalid("token_file", "give token or token_file, not both")),
            Some(f) => {
                self.token = interfaces::tokens::read_secret(f).map_err(|e| invalid("token_file", format!("{e:#}")))?;
            }
            None => interfaces::tokens::warn_secret_in_clear("token", "token_file"),
        }
        let visible = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic());
        if !visible(&self.token) {
            return Err(invalid("token", "must be non-empty visible ASCII"));
        }
        self.digests = vec![interfaces::tokens::digest(&self.token)];
        let mut names = std::collections::HashSet::from([interfaces::repo_client::OPERATOR.to_string()]);
        for (i, t) in self.tokens.iter().enumerate() {
            validate_pin(&t.name).map_err(|r| invalid(format!("tokens[{i}].name"), r))?;
            if !names.insert(t.name.clone()) {
                return Err(invalid(
                    format!("tokens[{i}].name"),
                    format!("{:?} is taken (the operator's name, or given twice)", t.name),
                ));
            }
            let digest = interfaces::tokens::configured(&format!("tokens[{i}]"), t.token.as_deref(), t.token_sha256.as_deref())
                .map_err(|e| invalid(format!("tokens[{i}]"), e))?;
            interfaces::tokens::warn_if_clear(&format!("tokens[{i}]"), t.token.as_deref(), "image-repo hash-token");
            if self.digests.contains(&digest) {
                return Err(invalid(format!("tokens[{i}]"), "the same token as another entry or as `token`"));
            }
            self.digests.push(digest);
        }
        if let Some(m) = &self.metrics {
            m.check()?;
        }
        if self.tls.is_none() && !self.insecure {
            return Err(invalid(
                "tls",
                "give the server's certificate and key (--tls-cert, --tls-key), or serve plaintext with insecure = true (--insecure)",
            ));
        }
        for (field, zero) in [
            ("max_connections", self.max_connections == 0),
            ("header_timeout", self.header_timeout.is_zero()),
            ("body_idle_timeout", self.body_idle_timeout.is_zero()),
            ("upload_session_timeout", self.upload_session_timeout.is_zero()),
            ("max_uploads_per_caller", self.max_uploads_per_caller == 0),
            ("max_uploads_in_flight", self.max_uploads_in_flight == 0),
            ("max_uploads_in_flight_per_caller", self.max_uploads_in_flight_per_caller == 0),
        ] {
            if zero {
                return Err(invalid(field, "must be at least 1 (s)"));
            }
        }
        if !(1..=MAX_PINS).contains(&self.max_pins_per_blob) {
            return Err(invalid("max_pins_per_blob", format!("must be 1 to {MAX_PINS}")));
        }
        self.listener.check("listener")?;
        if self.listener.max_header_size < MIN_HEADER_SIZE {
            return Err(invalid(
                "listener.max_header_size",
                format!(
                    "must be at least {MIN_HEADER_SIZE} bytes (default {DEFAULT_HEADER_SIZE}): a push's metadata, up to a 255-byte name and 64 labels of 255 bytes, goes in the request's query"
                ),
            ));
        }
        let mut peers = std::collections::HashSet::new();
        for (i, p) in self.peers.iter().enumerate() {
            validate_pin(&p.name).map_err(|r| invalid(format!("peers[{i}].name"), r))?;
            if !peers.insert(p.name.clone()) {
                return Err(invalid(format!("peers[{i}].name"), format!("{:?} is given twice", p.name)));
            }
            if !(p.url.starts_with("https://") || p.url.starts_with("http://")) {
                return Err(invalid(format!("peers[{i}].url"), "must be an http:// or https:// URL"));
            }
            if p.token.is_some() == p.token_file.is_some() {
                return Err(invalid(format!("peers[{i}]"), "give exactly one of token and token_file"));
            }
            interfaces::tokens::warn_if_clear(&format!("peers[{i}]"), p.token.as_deref(), "token_file");
        }
        if self.token.len() < 16 {
            tracing::warn!("the write token is shorter than 16 characters");
        }
        Ok(())
    }

    /// The listener's limits: `[listener]` with the top-level
    /// `max_connections` and `header_timeout`, below the descriptor limit.
    pub fn limits(&self) -> ListenerLimits {
        ListenerLimits {
            max_connections: self.max_connections,
            head_timeout: self.header_timeout,
            handshake_timeout: self.header_timeout,
            ..self.listener
        }
        .effective()
    }
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
