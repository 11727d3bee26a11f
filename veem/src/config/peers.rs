//! Peer sites in the configuration (`[[peers]]`): where each is, the
//! token this site presents there, its framework agreement and the
//! overlay agreed for stretched networks.

use std::path::PathBuf;

use serde::Deserialize;

/// What a framework agreement with a peer allows.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Agreement {
    /// vCPUs the peer accepts from this site at most (default: no
    /// limit).
    #[serde(default = "big")]
    pub max_vcpus: u32,
    /// Memory the peer accepts from this site at most, in MiB (default:
    /// no limit).
    #[serde(default = "big64")]
    pub max_memory_mib: u64,
    /// Guarantee levels the peer accepts (default: empty, all of them).
    #[serde(default)]
    pub guarantee_levels: Vec<interfaces::manifest::GuaranteeLevel>,
    /// Price per VEE-hour (default 0), used to choose among peers.
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
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeerEntry {
    /// The peer's site ID; its VEEM's certificate must be for it.
    pub site_id: String,
    /// The peer VEEM's VMI endpoint; for a peer site whose VEEMs are
    /// several (a leader and standbys over etcd), their endpoints
    /// separated by commas: the one that leads is called.
    pub endpoint: String,
    /// Token this site presents to the peer: read from `token_file` (a
    /// file only the VEEM may read) at start-up, or given here in clear
    /// (with a warning). Exactly one of the two.
    #[serde(default)]
    pub token: String,
    /// A file whose first line is the token this site presents to the
    /// peer; refused when every user may read it.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The peer's CA (PEM file): its VEEM's certificate, as a server and as
    /// a client calling this site, must be of it and for its `site_id`.
    /// Needed for an `https://` endpoint and for the peer's calls when the
    /// VMI is served over TLS.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Marked unavailable: never used, the VEEM works alone.
    #[serde(default)]
    pub unavailable: bool,
    /// Its region label, for region-level constraints (default: its site
    /// ID).
    #[serde(default)]
    pub region: Option<String>,
    /// `[peers.agreement]`: what the framework agreement with the peer
    /// allows (required; every field has a default, so it may be empty).
    pub agreement: Agreement,
    /// The overlay agreed with the peer (`[peers.overlay]`): without it a
    /// VEE on service networks never goes there, nor comes from there.
    #[serde(default)]
    pub overlay: Option<Overlay>,
    /// How long after this site first sees an epoch from the peer (its
    /// VEEMs lead over etcd) a call of it without one is still taken: a
    /// grace for a rolling upgrade of the peer's VEEMs (an older one sends
    /// none). A duration (`"10m"`); default 0: from the first epoch on,
    /// every call of the peer must carry one.
    #[serde(default, deserialize_with = "interfaces::config::duration")]
    pub epochless_grace: std::time::Duration,
}

impl PeerEntry {
    /// The peer's endpoints (see `endpoint`).
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoint
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(String::from)
            .collect()
    }
}

/// How service networks stretch between this site and a peer
/// (docs/provider-guide.md "Overlay across sites"): VXLAN
/// with the primary site's VNIs, between the two sites' VTEPs.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Overlay {
    /// The peer's VTEP (IPv4): where this site sends the frames of its
    /// networks stretched there.
    pub vtep: std::net::Ipv4Addr,
    /// The UDP port both sites use for the other's networks stretched to
    /// them (the same value in both sites' agreements): a primary's VNIs
    /// may be a peer's own too, and the kernel keys VXLAN devices by VNI
    /// and port. Not 4789, which each site keeps for its own networks.
    pub port: u16,
}
