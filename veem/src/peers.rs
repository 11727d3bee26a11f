//! Peer sites under framework agreements: which peers a VEE may go to,
//! and the bearer token each VMI call to a peer carries (the client itself
//! is `ports::GrpcPeer`).

use anyhow::{anyhow, Result};
use interfaces::manifest::GuaranteeLevel;
use interfaces::vmi::vmi_service_client::VmiServiceClient;
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::Channel;

use crate::config::{PeerEntry, VeemConfig};

/// Adds `authorization: Bearer TOKEN` to every request, and this VEEM's
/// epoch when it leads its site over etcd (`interfaces::fencing`: a peer
/// refuses a call of an epoch older than the newest it has seen).
#[derive(Clone)]
pub struct Bearer(
    pub tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
    interfaces::fencing::Stamp,
);

impl Bearer {
    pub fn new(token: &str) -> Result<Self> {
        Ok(Self(
            format!("Bearer {token}")
                .parse()
                .map_err(|_| anyhow!("token is not valid ASCII metadata"))?,
            interfaces::fencing::Stamp(None),
        ))
    }

    /// The same, with `epoch` on every request too.
    pub fn with_epoch(self, epoch: Option<i64>) -> Self {
        Self(self.0, interfaces::fencing::Stamp(epoch))
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        self.1.call(req)
    }
}

/// The network transport of a VMI client to a peer (`ports::GrpcPeer`):
/// a tonic channel whose every request carries the agreement's bearer
/// token.
pub type PeerChannel = InterceptedService<Channel, Bearer>;

/// A VMI client whose every request carries a bearer token (the e2e
/// tests' callers; a peer's is `ports::GrpcPeer`).
pub type PeerClient = VmiServiceClient<PeerChannel>;

/// The configuration of an available peer site.
pub fn peer<'a>(cfg: &'a VeemConfig, site: &str) -> Result<&'a PeerEntry> {
    let p = cfg
        .peers
        .iter()
        .find(|p| p.site_id == site)
        .ok_or_else(|| anyhow!("site {site:?} is not a peer of {}", cfg.site_id))?;
    if p.unavailable {
        anyhow::bail!("peer site {site} is marked unavailable");
    }
    Ok(p)
}

/// Checks that the framework agreement with peer `from` admits, at this
/// site, a VEE of `vcpus` vCPUs and `memory_mib` MiB at `guarantee`:
/// running it (PrepareIncoming) or holding its spare (ReserveSpare).
/// Errors naming the bound it exceeds.
pub fn admits(cfg: &VeemConfig, from: &str, vcpus: u32, memory_mib: u64, guarantee: GuaranteeLevel) -> Result<(), AgreementRefusal> {
    let agreement = &peer(cfg, from)
        .map_err(|e| AgreementRefusal(format!("no framework agreement with {from}: {e:#}")))?
        .agreement;
    if vcpus > agreement.max_vcpus || memory_mib > agreement.max_memory_mib {
        return Err(AgreementRefusal(format!(
            "the framework agreement with {from} admits at most {} vCPUs and {} MiB per VEE",
            agreement.max_vcpus, agreement.max_memory_mib
        )));
    }
    if !agreement.guarantee_levels.is_empty() && !agreement.guarantee_levels.contains(&guarantee) {
        return Err(AgreementRefusal(format!(
            "the framework agreement with {from} does not admit guarantee {guarantee}"
        )));
    }
    Ok(())
}

/// What a framework agreement does not admit, naming the peer and the
/// bound (a refusal to the peer: FailedPrecondition).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AgreementRefusal(pub String);

/// Available peers whose agreement admits a VEE of this size and guarantee,
/// cheapest first (E Ch 3.4: the agreement's price decides).
pub fn candidates(cfg: &VeemConfig, vcpus: u32, memory_mib: u64, guarantee: GuaranteeLevel) -> Vec<&PeerEntry> {
    let mut v: Vec<&PeerEntry> = cfg
        .peers
        .iter()
        .filter(|p| !p.unavailable)
        .filter(|p| p.agreement.max_vcpus >= vcpus && p.agreement.max_memory_mib >= memory_mib)
        .filter(|p| p.agreement.guarantee_levels.is_empty() || p.agreement.guarantee_levels.contains(&guarantee))
        .collect();
    v.sort_by(|a, b| a.agreement.price_per_vee_hour.total_cmp(&b.agreement.price_per_vee_hour));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> VeemConfig {
        let peer = |site: &str, price: f64, extra: &str| {
            format!("[[peers]]\nsite_id = \"{site}\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"t-{site}\"\n{extra}[peers.agreement]\nprice_per_vee_hour = {price}\nmax_vcpus = 4\nguarantee_levels = [\"standard\"]\n")
        };
        let text = format!(
            "site_id = \"site-a\"\nlisten = \"127.0.0.1:7200\"\ndb = \"/tmp/x\"\nimage_repo = \"http://127.0.0.1:7000\"\n{}{}{}",
            peer("site-b", 0.5, ""),
            peer("site-c", 0.1, ""),
            peer("site-d", 0.01, "unavailable = true\n")
        );
        toml::from_str(&text).unwrap()
    }

    #[test]
    fn candidates_are_the_available_peers_whose_agreement_admits_the_vee_cheapest_first() {
        let cfg = cfg();
        let sites = |v: Vec<&PeerEntry>| v.into_iter().map(|p| p.site_id.clone()).collect::<Vec<_>>();
        assert_eq!(sites(candidates(&cfg, 2, 128, GuaranteeLevel::Standard)), ["site-c", "site-b"]);
        assert!(
            candidates(&cfg, 8, 128, GuaranteeLevel::Standard).is_empty(),
            "more vCPUs than the agreements admit"
        );
        assert!(
            candidates(&cfg, 1, 128, GuaranteeLevel::Enhanced).is_empty(),
            "a guarantee level the agreements exclude"
        );
    }

    #[test]
    fn a_peer_marked_unavailable_is_never_called() {
        let cfg = cfg();
        let e = peer(&cfg, "site-d").unwrap_err().to_string();
        assert!(e.contains("marked unavailable"), "{e}");
        assert!(peer(&cfg, "site-x").unwrap_err().to_string().contains("not a peer"));
        assert!(peer(&cfg, "site-b").is_ok());
    }
}
