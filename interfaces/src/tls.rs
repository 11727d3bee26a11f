//! Mutual TLS on the gRPC interfaces (rustls through tonic): a daemon's
//! certificate and key, and the CA whose certificates it accepts from the
//! other end, as PEM files.
//!
//! Trust in a site (`scripts/setup-host` makes the lab's): the site's hosts
//! CA signs each VEEH's server certificate, whose DNS name is the host's
//! name; the site's VEEM CA signs the VEEM's client certificate. A VEEH
//! accepts calls only with a certificate of the VEEM CA; the VEEM accepts a
//! VEEH only with a certificate of the hosts CA for the host name it
//! configured. A VEEH answering at another host's endpoint fails the
//! handshake.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// A TLS identity and the CA trusted for the other end (PEM files).
///
/// ```toml
/// [tls]
/// cert = "/etc/vee/pki/a1.crt"     # this daemon's certificate (chain)
/// key = "/etc/vee/pki/a1.key"      # its private key
/// ca = "/etc/vee/pki/veem-ca.crt"  # whose certificates the other end must show
/// ```
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// This daemon's certificate (PEM file; its chain).
    pub cert: PathBuf,
    /// The private key of `cert` (PEM file).
    pub key: PathBuf,
    /// The CA (PEM file) whose certificates the other end must show.
    pub ca: PathBuf,
}

fn read(what: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("TLS {what} {}", path.display()))
}

impl TlsFiles {
    fn identity(&self) -> Result<Identity> {
        Ok(Identity::from_pem(read("certificate", &self.cert)?, read("key", &self.key)?))
    }

    fn ca_cert(&self) -> Result<Certificate> {
        Ok(Certificate::from_pem(read("CA", &self.ca)?))
    }

    /// A server's TLS: its identity, and clients must show a certificate
    /// of `ca` (mutual TLS). Errors: a file cannot be read.
    pub fn server(&self) -> Result<ServerTlsConfig> {
        Ok(ServerTlsConfig::new().identity(self.identity()?).client_ca_root(self.ca_cert()?))
    }

    /// A client's TLS towards the server named `server_name` (its
    /// certificate, from `ca`, must be for that DNS name), showing this
    /// identity. Errors: a file cannot be read.
    pub fn client(&self, server_name: &str) -> Result<ClientTlsConfig> {
        Ok(ClientTlsConfig::new()
            .ca_certificate(self.ca_cert()?)
            .identity(self.identity()?)
            .domain_name(server_name))
    }
}

/// The warning a server logs when it serves without TLS (`insecure = true`).
pub const INSECURE_WARNING: &str =
    "INSECURE: TLS is off (insecure = true): anyone who reaches this daemon's port can call it, and its traffic is plaintext";

/// A site's identity on the VMI (PEM files): the certificate its VEEM
/// shows to its clients and, as a client, to its peers. Its DNS names are
/// the site ID (what peers check) and the names clients dial (`localhost`,
/// addresses); it is for both server and client authentication.
///
/// ```toml
/// [tls]
/// cert = "/var/lib/vee-lab/pki/site-a/vmi.crt"
/// key = "/var/lib/vee-lab/pki/site-a/vmi.key"
/// ```
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SiteIdentity {
    /// The site's certificate (PEM file; its chain), for the DNS names
    /// `site_id` and those clients dial.
    pub cert: PathBuf,
    /// The private key of `cert` (PEM file).
    pub key: PathBuf,
}

fn ca_bundle(cas: &[&Path]) -> Result<Certificate> {
    let mut pem = Vec::new();
    for ca in cas {
        pem.extend(read("CA", ca)?);
        pem.push(b'\n');
    }
    Ok(Certificate::from_pem(pem))
}

impl SiteIdentity {
    fn identity(&self) -> Result<Identity> {
        Ok(Identity::from_pem(read("certificate", &self.cert)?, read("key", &self.key)?))
    }

    /// The VMI server's TLS: this identity; a client may show a
    /// certificate of one of `peer_cas` (a peer VEEM, checked again per
    /// peer by [`PeerCa`]) or none (providers and operators, who present
    /// bearer tokens). ALPN offers HTTP/2 (gRPC, REST) and HTTP/1.1 (REST
    /// from clients that speak only it, such as Python's `requests`):
    /// tonic's own TLS offers HTTP/2 alone, so the VMI serves its TLS
    /// connections itself ([`crate::connections::serve`]). Errors: a file
    /// cannot be read or holds no usable certificate, key or CA, naming it.
    pub fn acceptor(&self, peer_cas: &[&Path]) -> Result<tokio_rustls::TlsAcceptor> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?;
        let builder = if peer_cas.is_empty() {
            builder.with_no_client_auth()
        } else {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots(peer_cas)?.into(), provider)
                .allow_unauthenticated()
                .build()
                .context("TLS peer CAs")?;
            builder.with_client_cert_verifier(verifier)
        };
        let mut config = with_identity(builder, &self.cert, &self.key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
    }

    /// A client's TLS towards peer site `site`, whose certificate must be
    /// of `ca` for DNS name `site`; shows this identity. Errors: a file
    /// cannot be read.
    pub fn client_to(&self, site: &str, ca: &Path) -> Result<ClientTlsConfig> {
        Ok(ClientTlsConfig::new()
            .ca_certificate(ca_bundle(&[ca])?)
            .identity(self.identity()?)
            .domain_name(site))
    }
}

/// The CA certificates in the PEM files `paths`. Errors: a file cannot be
/// read, holds no certificate, or one rustls does not accept as a CA,
/// naming it.
fn roots(paths: &[&Path]) -> Result<rustls::RootCertStore> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for path in paths {
        let before = roots.len();
        for cert in rustls_pki_types::CertificateDer::pem_file_iter(path).with_context(|| format!("TLS CA {}", path.display()))? {
            let cert = cert.with_context(|| format!("TLS CA {}", path.display()))?;
            roots.add(cert).with_context(|| format!("TLS CA {}", path.display()))?;
        }
        anyhow::ensure!(roots.len() > before, "TLS CA {}: no certificate in it", path.display());
    }
    Ok(roots)
}

/// A rustls server configuration from `builder` with the certificate
/// chain in PEM file `cert` and the private key in `key`. Errors: a file
/// cannot be read, holds no certificate or key, or they do not match,
/// naming them.
pub fn with_identity(
    builder: rustls::ConfigBuilder<rustls::ServerConfig, rustls::server::WantsServerCert>,
    cert: &Path,
    key: &Path,
) -> Result<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("TLS certificate {}", cert.display()))?;
    anyhow::ensure!(!certs.is_empty(), "TLS certificate {}: no certificate in it", cert.display());
    let private = PrivateKeyDer::from_pem_file(key).with_context(|| format!("TLS key {}", key.display()))?;
    builder
        .with_single_cert(certs, private)
        .with_context(|| format!("TLS certificate {} with key {}", cert.display(), key.display()))
}

/// One peer site's CA, as the VMI checks the client certificate of a call
/// made with that peer's token: the chain must lead to this CA (not to
/// another peer's), be valid now for client authentication, and name the
/// peer's site ID. The TLS handshake only checked that it leads to *some*
/// peer's CA.
pub struct PeerCa {
    verifier: std::sync::Arc<dyn rustls::server::danger::ClientCertVerifier>,
}

impl std::fmt::Debug for PeerCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerCa")
    }
}

impl PeerCa {
    /// The CA certificates in PEM file `path`. Errors: unreadable, no
    /// certificate in it, or one rustls does not accept as a CA.
    pub fn load(path: &Path) -> Result<Self> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots(&[path])?.into(), provider)
            .build()
            .with_context(|| format!("TLS CA {}", path.display()))?;
        Ok(Self { verifier })
    }

    /// Whether `chain` (the caller's certificates, its own first) is peer
    /// `site`'s. Errors: the reason, for the caller's status message.
    pub fn check(&self, chain: &[rustls_pki_types::CertificateDer<'static>], site: &str) -> Result<(), String> {
        let (leaf, intermediates) = chain
            .split_first()
            .ok_or_else(|| format!("peer {site}: no client certificate (mutual TLS is required of peers)"))?;
        self.verifier
            .verify_client_cert(leaf, intermediates, rustls_pki_types::UnixTime::now())
            .map_err(|e| format!("peer {site}: its certificate is not of its CA: {e}"))?;
        let parsed = rustls::server::ParsedCertificate::try_from(leaf).map_err(|e| format!("peer {site}: certificate: {e}"))?;
        let name = rustls_pki_types::ServerName::try_from(site).map_err(|e| format!("peer {site}: not a DNS name: {e}"))?;
        rustls::client::verify_server_name(&parsed, &name).map_err(|e| format!("peer {site}: the certificate is not for {site}: {e}"))
    }
}

/// A server's TLS for HTTP/1.1 alone (ALPN `http/1.1`; no client
/// certificates) with the certificate and key in `cert` and `key`: the
/// image repository's, and the VEEM's web console (whose WebSockets
/// browsers open over HTTP/1.1). Errors: a file cannot be read or holds
/// no usable certificate or key, naming it.
pub fn http1_acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth();
    let mut config = with_identity(builder, cert, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
}

/// A builder of HTTP clients (reqwest) on rustls with the ring provider,
/// the one tonic and the daemons' listeners use: ring becomes the
/// process's default provider first (reqwest takes the default, and
/// panics without one). What it trusts is the caller's to set
/// (`tls_certs_only`).
pub fn http_client() -> reqwest::ClientBuilder {
    // Err only when a default is already installed: the same ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().tls_backend_rustls()
}

#[cfg(test)]
mod tests {
    use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose as Eku, IsCa, KeyPair};
    use rustls_pki_types::CertificateDer;

    use super::PeerCa;

    struct Ca(rcgen::Certificate, KeyPair);

    fn ca() -> Ca {
        let mut p = CertificateParams::new(Vec::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        Ca(p.self_signed(&key).unwrap(), key)
    }

    fn leaf(ca: &Ca, name: &str, usages: Vec<Eku>) -> Vec<CertificateDer<'static>> {
        let mut p = CertificateParams::new(vec![name.to_string()]).unwrap();
        p.extended_key_usages = usages;
        let cert = p.signed_by(&KeyPair::generate().unwrap(), &ca.0, &ca.1).unwrap();
        vec![cert.der().clone()]
    }

    fn peer_ca(ca: &Ca) -> (tempfile::TempDir, PeerCa) {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("ca.crt");
        std::fs::write(&path, ca.0.pem()).unwrap();
        let pc = PeerCa::load(&path).unwrap();
        (d, pc)
    }

    #[test]
    fn only_the_peers_own_certificate_for_its_site_id_passes() {
        let (b, other) = (ca(), ca());
        let (_d, b_ca) = peer_ca(&b);
        let both = vec![Eku::ServerAuth, Eku::ClientAuth];
        assert_eq!(b_ca.check(&leaf(&b, "site-b", both.clone()), "site-b"), Ok(()));
        let refused = [
            ("no certificate", Vec::new(), "no client certificate"),
            ("another peer's CA", leaf(&other, "site-b", both.clone()), "not of its CA"),
            ("another name", leaf(&b, "site-c", both), "not for site-b"),
            ("server-only", leaf(&b, "site-b", vec![Eku::ServerAuth]), "not of its CA"),
        ];
        for (what, chain, why) in refused {
            let err = b_ca.check(&chain, "site-b").expect_err(what);
            assert!(err.contains(why), "{what}: {err}");
        }
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("empty.crt");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = PeerCa::load(&path).unwrap_err().to_string();
        assert!(err.contains("no certificate"), "{err}");
    }
}
