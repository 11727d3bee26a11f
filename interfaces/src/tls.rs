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
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
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
