//! CNCF Distribution registries of test runs (Debian's `docker-registry`,
//! installed by `scripts/setup-host`): on a free loopback port, over TLS
//! with a certificate of its own trust domain (`pki::site("registry")`),
//! optionally with HTTP Basic users (`htpasswd`, bcrypt by Python's
//! `crypt`), data under a temporary directory; killed on drop.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::lab::free_port;

/// See the module documentation.
pub struct Distribution {
    child: Child,
    /// `127.0.0.1:PORT`, as image references name it.
    pub addr: String,
    /// The CA (PEM) its certificate is of.
    pub ca: PathBuf,
    dir: tempfile::TempDir,
}

impl Distribution {
    /// Starts a registry that deletes manifests when asked; with `user =
    /// Some((name, password))` it asks for that user's password (HTTP
    /// Basic). Panics when it does not listen within 20 s.
    pub fn start(user: Option<(&str, &str)>) -> Self {
        Self::start_with(user, true)
    }

    /// [`Distribution::start`], deleting manifests or not
    /// (`storage.delete.enabled`, off by Distribution's default).
    pub fn start_with(user: Option<(&str, &str)>, deletes: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let pki = crate::pki::site("registry");
        let id = pki.vmi("127.0.0.1");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: {deletes}\nhttp:\n  addr: {addr}\n  tls:\n    certificate: {}\n    key: {}\n",
            dir.path().join("data").display(),
            id.cert.display(),
            id.key.display()
        );
        if let Some((name, password)) = user {
            let hash = Command::new("python3")
                .args([
                    "-W",
                    "ignore",
                    "-c",
                    "import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))",
                    password,
                ])
                .output()
                .expect("python3");
            assert!(hash.status.success(), "bcrypt: {}", String::from_utf8_lossy(&hash.stderr));
            let file = dir.path().join("htpasswd");
            std::fs::write(&file, format!("{name}:{}", String::from_utf8_lossy(&hash.stdout).trim())).unwrap();
            config += &format!("auth:\n  htpasswd:\n    realm: vee-test\n    path: {}\n", file.display());
        }
        let path = dir.path().join("config.yml");
        std::fs::write(&path, config).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry (Debian's CNCF Distribution; scripts/setup-host installs it)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "docker-registry did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            addr,
            ca: pki.vmi_ca(),
            dir,
        }
    }

    /// The file the registry keeps blob `hex`'s bytes in (Distribution's
    /// filesystem layout), for tests that corrupt what it serves.
    pub fn blob_file(&self, hex: &str) -> PathBuf {
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Distribution {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
