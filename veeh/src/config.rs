//! The VEEH's configuration file (TOML), `veeh serve --config FILE`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use interfaces::config::{invalid, Invalid};
use serde::Deserialize;

/// Which accelerator guests run under.
#[derive(Clone, Copy, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    /// KVM only when /proc/cpuinfo has `vmx` or `svm` (nested KVM without
    /// them makes no progress), otherwise TCG.
    #[default]
    Auto,
    /// KVM: hardware virtualisation.
    Kvm,
    /// TCG: QEMU's emulation (slow, needs no KVM).
    Tcg,
}

/// Capacity this VEEH offers to its VEEM.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory, in MiB.
    pub memory_mib: u64,
    /// Disk, in GiB.
    pub disk_gib: u64,
}

/// `veeh serve --config FILE`.
///
/// ```toml
/// host = "host-a1"
/// site_id = "site-a"
/// libvirt_uri = "qemu:///system"
/// listen = "127.0.0.1:7101"
/// state_dir = "/var/lib/vee/host-a1"
/// cache_dir = "/var/lib/vee/host-a1/cache"
/// cache_limit = "4 GiB"
/// migration_address = "127.0.0.1"
/// vtep = "127.0.0.1"
/// accel = "auto"
/// image_repo = "http://127.0.0.1:7000"
/// image_repo_token_file = "/etc/veeh/repo.token"   # mode 0640 root:root
/// [tls]
/// cert = "/etc/vee/pki/host-a1.crt"
/// key = "/etc/vee/pki/host-a1.key"
/// ca = "/etc/vee/pki/veem-ca.crt"
/// [metrics]
/// listen = "127.0.0.1:9101"
/// [capacity]
/// vcpus = 2
/// memory_mib = 1024
/// disk_gib = 20
/// ```
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VeehConfig {
    /// Test builds only (feature `failpoints`): failpoints to arm
    /// ([`crate::failpoints`]); unknown to any other build.
    #[cfg(feature = "failpoints")]
    #[serde(default)]
    #[schemars(skip)]
    pub failpoints: Option<String>,
    /// Host name, unique within the site; owner mark in domain metadata.
    pub host: String,
    /// Site this host belongs to.
    pub site_id: String,
    /// libvirt URI of this host's libvirtd as this VEEH reaches it.
    pub libvirt_uri: String,
    /// URI a peer libvirtd uses to reach this host's libvirtd for incoming
    /// migrations (defaults to `libvirt_uri`).
    #[serde(default)]
    pub peer_libvirt_uri: Option<String>,
    /// Address and port the VHI (gRPC) listens on, e.g. `"0.0.0.0:7101"`.
    pub listen: SocketAddr,
    /// Per-VEE directories (overlays, consoles, records); a relative path
    /// is taken relative to the working directory.
    pub state_dir: PathBuf,
    /// The image cache's directory (default `state_dir/cache`).
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Cache size above which unused images are evicted, least recently
    /// used first: a size with a unit (`"4 GiB"`, the default) or a
    /// number of bytes.
    #[serde(default = "default_cache_limit", deserialize_with = "interfaces::config::size")]
    #[schemars(with = "interfaces::config::Size")]
    pub cache_limit: u64,
    /// Size above which the checkpoint parts kept on this host (the memory
    /// states and disk overlays of the checkpoints it took and restored,
    /// the newest of each VEE, under `cache_dir/chunks`) are removed, least
    /// recently used first: a size with a unit (`"2 GiB"`, the default) or
    /// a number of bytes. A restore of a checkpoint whose parts are here
    /// pulls nothing and reads the memory state as QEMU wrote it.
    #[serde(default = "default_checkpoint_cache_limit", deserialize_with = "interfaces::config::size")]
    #[schemars(with = "interfaces::config::Size")]
    pub checkpoint_cache_limit: u64,
    /// Deprecated: the cache limit in MiB; write `cache_limit`.
    #[serde(default)]
    cache_limit_mib: Option<u64>,
    /// Address the migration and NBD disk streams of incoming migrations
    /// use, e.g. `127.0.0.1`.
    pub migration_address: String,
    /// This host's VXLAN tunnel endpoint: the underlay IPv4 address other
    /// hosts send service networks' frames to (UDP 4789). Defaults to
    /// `migration_address`.
    #[serde(default)]
    pub vtep: Option<String>,
    /// Which accelerator guests run under (default `auto`).
    #[serde(default)]
    pub accel: AccelChoice,
    /// The site's image repository: its base URL (`https://HOST:PORT`), or
    /// `oci://REGISTRY/NAMESPACE` as the site's VEEM names it.
    pub image_repo: String,
    /// This host's token at the image repository: read from
    /// `image_repo_token_file` (a file others may not read) at start-up,
    /// or given here in clear (with a warning); not both.
    #[serde(default)]
    pub image_repo_token: Option<String>,
    /// A file whose first line is this host's token at the image
    /// repository; refused when every user may read it.
    #[serde(default)]
    pub image_repo_token_file: Option<PathBuf>,
    /// The CA (PEM file) of the image repository's certificate, for an
    /// `https://` `image_repo`.
    #[serde(default)]
    pub image_repo_ca: Option<PathBuf>,
    /// OCI registries this host pulls VEE images from, as the site's VEEM
    /// names them (`[[registries]]`: host, CA, credentials).
    #[serde(default)]
    pub registries: Vec<interfaces::registry::RegistryConfig>,
    /// `[capacity]`: what this host offers its VEEM (required).
    pub capacity: Capacity,
    /// The VHI's TLS: this host's certificate (its DNS name is `host`) and
    /// key, and the CA of its site's VEEM certificate: only a VEEM with a
    /// certificate of that CA may call (mutual TLS).
    #[serde(default)]
    pub tls: Option<interfaces::tls::TlsFiles>,
    /// Serve the VHI without TLS, to anyone who reaches the port (logged
    /// at every start). Exactly one of `tls` and `insecure = true`.
    #[serde(default)]
    pub insecure: bool,
    /// The HTTP listener of `/metrics` (Prometheus), `/healthz` and
    /// `/readyz`; none (the default): not served.
    #[serde(default)]
    pub metrics: Option<interfaces::metrics::MetricsConfig>,
}

fn default_cache_limit() -> u64 {
    4 << 30
}

fn default_checkpoint_cache_limit() -> u64 {
    2 << 30
}

impl VeehConfig {
    /// Reads and checks `path`. Errors name the file, the line and column,
    /// the field and why (`interfaces::config`).
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        interfaces::config::load(path, Self::check)
    }

    fn check(&mut self) -> Result<(), Invalid> {
        match (&self.image_repo_token, &self.image_repo_token_file) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "image_repo_token_file",
                    "give image_repo_token or image_repo_token_file, not both",
                ))
            }
            (None, Some(f)) => {
                let token = interfaces::tokens::read_secret(f).map_err(|e| invalid("image_repo_token_file", format!("{e:#}")))?;
                self.image_repo_token = Some(token);
                self.image_repo_token_file = None;
            }
            (Some(_), None) => interfaces::tokens::warn_secret_in_clear("image_repo_token", "image_repo_token_file"),
            (None, None) => {}
        }
        if self.host.is_empty() || self.host.contains('/') {
            return Err(invalid("host", "must be a non-empty name without '/'"));
        }
        if self.tls.is_some() == self.insecure {
            return Err(invalid(
                "tls",
                "give the VHI's certificate, key and the VEEM's CA ([tls]), or set insecure = true to serve it in plaintext to anyone",
            ));
        }
        if let Some(m) = &self.metrics {
            m.check()?;
        }
        if let Some(mib) = self.cache_limit_mib.take() {
            tracing::warn!("field `cache_limit_mib` is deprecated: write cache_limit = \"{mib} MiB\"");
            self.cache_limit = mib << 20;
        }
        // libvirt needs absolute paths: relative ones are relative to the
        // working directory.
        let absolute = |field: &str, p: &Path| std::path::absolute(p).map_err(|e| invalid(field, e));
        self.state_dir = absolute("state_dir", &self.state_dir)?;
        self.cache_dir = self.cache_dir.as_deref().map(|d| absolute("cache_dir", d)).transpose()?;
        Ok(())
    }

    /// The image cache directory.
    pub fn cache_dir(&self) -> PathBuf {
        self.cache_dir.clone().unwrap_or_else(|| self.state_dir.join("cache"))
    }

    /// This host's VTEP address.
    pub fn vtep(&self) -> &str {
        self.vtep.as_deref().unwrap_or(&self.migration_address)
    }

    /// The libvirt URI peers migrate to.
    pub fn peer_libvirt_uri(&self) -> &str {
        self.peer_libvirt_uri.as_deref().unwrap_or(&self.libvirt_uri)
    }
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packaged_configuration_loads_with_its_metrics_on_loopback() {
        let c = VeehConfig::load(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/config/veeh.toml"))).unwrap();
        assert_eq!(c.metrics.unwrap().listen, "127.0.0.1:9101".parse().unwrap());
    }

    #[test]
    fn a_malformed_metrics_token_digest_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let packaged = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/config/veeh.toml")).unwrap();
        let file = dir.path().join("veeh.toml");
        std::fs::write(&file, packaged.replace("# token_sha256 = \"...\"", "token_sha256 = \"abc\"")).unwrap();
        let e = format!("{:#}", VeehConfig::load(&file).unwrap_err());
        assert!(e.contains("metrics.token_sha256") && e.contains("64 hex digits"), "{e}");
    }

    /// The host's token at the image repository is read from a file only
    /// the VEEH may read; one every user may read is refused, naming the
    /// field.
    #[test]
    fn the_repository_token_is_read_from_a_file_others_cannot_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("repo.token");
        std::fs::write(&token, "host-token\n").unwrap();
        let packaged = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/config/veeh.toml")).unwrap();
        let file = dir.path().join("veeh.toml");
        let line = format!("image_repo_token_file = {:?}", token.display());
        let text = packaged.replace("# image_repo_token_file = \"/etc/veeh/repo.token\"", &line);
        assert_ne!(text, packaged);
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = format!("{:#}", VeehConfig::load(&file).unwrap_err());
        assert!(
            e.contains("field `image_repo_token_file`") && e.contains("readable by every user"),
            "{e}"
        );
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(VeehConfig::load(&file).unwrap().image_repo_token.as_deref(), Some("host-token"));
    }
}
