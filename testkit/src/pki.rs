//! The certificates of test and benchmark runs, made with rcgen in the
//! trust model of `interfaces::tls` (and of `scripts/setup-host` for the
//! lab): per site, a hosts CA that signs each VEEH's server certificate
//! (DNS name: the host's name) and a VEEM CA that signs the VEEM's client
//! certificate. PEM files under one directory per process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use interfaces::tls::{SiteIdentity, TlsFiles};
use interfaces::vhi::vhi_service_client::VhiServiceClient;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use tonic::transport::{Channel, Endpoint};

/// A CA: its certificate (PEM file `cert`) and what signs with it.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    file: PathBuf,
}

impl Ca {
    fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let file = dir.join(format!("{}.crt", name.replace(' ', "-")));
        std::fs::write(&file, cert.pem()).unwrap();
        Ca { cert, key, file }
    }

    /// A leaf certificate for DNS name `name`, for `usage`; its cert and
    /// key files.
    fn issue(&self, dir: &Path, name: &str, usage: ExtendedKeyUsagePurpose) -> (PathBuf, PathBuf) {
        self.issue_for(dir, name, &[name], vec![usage])
    }

    /// A leaf certificate named `name` (its files), for the DNS names and
    /// addresses `sans`, for `usages`.
    fn issue_for(&self, dir: &Path, name: &str, sans: &[&str], usages: Vec<ExtendedKeyUsagePurpose>) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = usages;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let (c, k) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// One site's CAs.
pub struct SitePki {
    site: String,
    dir: PathBuf,
    hosts_ca: Ca,
    veem_ca: Ca,
    vmi_ca: Ca,
    vmi: Mutex<Option<SiteIdentity>>,
}

/// Site `site_id`'s PKI of this process (made at first use).
pub fn site(site_id: &str) -> Arc<SitePki> {
    static SITES: OnceLock<Mutex<HashMap<String, Arc<SitePki>>>> = OnceLock::new();
    let mut sites = SITES.get_or_init(Default::default).lock().unwrap();
    sites
        .entry(site_id.to_string())
        .or_insert_with(|| {
            // Unique to this process: a directory named by the PID alone
            // is found again when the PID comes round (pid_max 32768), and
            // its VEEM certificate, signed by an older CA of the same name,
            // was taken for this one (hosts refused it: DecryptError).
            let started = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = std::env::temp_dir()
                .join(format!("vee-pki-{}-{started}", std::process::id()))
                .join(site_id);
            std::fs::create_dir_all(&dir).unwrap();
            Arc::new(SitePki {
                site: site_id.into(),
                hosts_ca: Ca::new(&dir, &format!("{site_id} hosts CA")),
                veem_ca: Ca::new(&dir, &format!("{site_id} VEEM CA")),
                vmi_ca: Ca::new(&dir, &format!("{site_id} VMI CA")),
                vmi: Mutex::new(None),
                dir,
            })
        })
        .clone()
}

impl SitePki {
    /// The `[tls]` of VEEH `host`: its server certificate, and the VEEM CA
    /// as the only CA of its callers.
    pub fn host(&self, host: &str) -> TlsFiles {
        let (cert, key) = self.hosts_ca.issue(&self.dir, host, ExtendedKeyUsagePurpose::ServerAuth);
        TlsFiles {
            cert,
            key,
            ca: self.veem_ca.file.clone(),
        }
    }

    /// The VEEM's `[vhi_tls]`: its client certificate (`veem.<site>`), and
    /// the hosts CA as the CA of its VEEHs.
    pub fn veem(&self) -> TlsFiles {
        let name = format!("veem.{}", self.site);
        let (cert, key) = if self.dir.join(format!("{name}.crt")).exists() {
            (self.dir.join(format!("{name}.crt")), self.dir.join(format!("{name}.key")))
        } else {
            self.veem_ca.issue(&self.dir, &name, ExtendedKeyUsagePurpose::ClientAuth)
        };
        TlsFiles {
            cert,
            key,
            ca: self.hosts_ca.file.clone(),
        }
    }

    /// The VEEM's `[tls]` on the VMI: the site's certificate, for its
    /// site ID, `localhost`, 127.0.0.1 and `addr`, for server and client
    /// authentication (made once).
    pub fn vmi(&self, addr: &str) -> SiteIdentity {
        use ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        self.vmi
            .lock()
            .unwrap()
            .get_or_insert_with(|| {
                let sans = [self.site.as_str(), "localhost", "127.0.0.1", addr];
                let (cert, key) = self.vmi_ca.issue_for(&self.dir, "vmi", &sans, vec![ServerAuth, ClientAuth]);
                SiteIdentity { cert, key }
            })
            .clone()
    }

    /// The CA of the site's VMI certificate (PEM file): what its clients
    /// and peers trust.
    pub fn vmi_ca(&self) -> PathBuf {
        self.vmi_ca.file.clone()
    }

    /// A channel to this site's VEEM at `endpoint` (`https://`), trusting
    /// its VMI CA, as providers and operators connect (no client
    /// certificate), or as a peer showing `peer`'s VMI certificate.
    pub async fn vmi_channel(&self, endpoint: &str, peer: Option<&SiteIdentity>) -> Result<Channel, tonic::transport::Error> {
        let read = |p: &Path| std::fs::read(p).expect("the test PKI's files");
        let mut tls =
            tonic::transport::ClientTlsConfig::new().ca_certificate(tonic::transport::Certificate::from_pem(read(&self.vmi_ca.file)));
        if let Some(id) = peer {
            tls = tls.identity(tonic::transport::Identity::from_pem(read(&id.cert), read(&id.key)));
        }
        Endpoint::from_shared(endpoint.to_string())?.tls_config(tls)?.connect().await
    }

    /// A VHI client of VEEH `host` at `endpoint`, as the site's VEEM.
    pub async fn vhi_service_client(&self, endpoint: &str, host: &str) -> Result<VhiServiceClient<Channel>, tonic::transport::Error> {
        let tls = self.veem().client(host).expect("the test PKI's files");
        let channel = Endpoint::from_shared(endpoint.to_string())?.tls_config(tls)?.connect().await?;
        Ok(VhiServiceClient::new(channel))
    }
}

/// The TOML lines of `tls` (`cert`, `key`, `ca`), for a config section.
pub fn toml(tls: &TlsFiles) -> String {
    format!(
        "cert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
        tls.cert.display(),
        tls.key.display(),
        tls.ca.display()
    )
}

/// The image repository's TLS in test runs: its certificate (for
/// `image-repo`, `localhost`, 127.0.0.1 and `addr`) and key, and the CA its
/// clients trust; the repository is a trust domain of its own, made like a
/// site's VMI. A repository at another address than site A's (site B's
/// own, issue 39) is a trust domain of its own too (`image-repo-<addr>`).
pub fn repo(addr: &str) -> (SiteIdentity, PathBuf) {
    let pki = if addr == crate::lab::SITE_A_ADDR {
        site("image-repo")
    } else {
        site(&format!("image-repo-{}", addr.replace(['.', ':'], "-")))
    };
    (pki.vmi(addr), pki.vmi_ca())
}

/// The certificates of a test etcd cluster, under `dir`: its CA, the
/// members' server certificate (for 127.0.0.1 and `localhost`, server and
/// client authentication: the members also call each other) and a client
/// certificate for the VEEMs (`[store.tls]`).
pub struct EtcdPki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// What a VEEM shows and trusts: its client certificate and the CA.
    pub client: TlsFiles,
}

/// Makes [`EtcdPki`] in `dir`.
pub fn etcd(dir: &Path) -> EtcdPki {
    use ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    std::fs::create_dir_all(dir).unwrap();
    let ca = Ca::new(dir, "etcd CA");
    let (server_cert, server_key) = ca.issue_for(dir, "etcd-member", &["127.0.0.1", "localhost"], vec![ServerAuth, ClientAuth]);
    let (cert, key) = ca.issue(dir, "veem-etcd", ClientAuth);
    EtcdPki {
        ca: ca.file.clone(),
        server_cert,
        server_key,
        client: TlsFiles {
            cert,
            key,
            ca: ca.file.clone(),
        },
    }
}
