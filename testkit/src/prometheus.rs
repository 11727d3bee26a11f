//! A Prometheus server of a test run (Debian's `prometheus`, installed by
//! `scripts/setup-host`): on a free loopback port, scraping the given
//! targets every second from a generated configuration, data under a
//! temporary directory; killed on drop. Queries go through its HTTP API
//! (`/api/v1/query`), made by the test with its own HTTP client.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::lab::free_port;

/// A scrape job: its name and the `host:port` targets it scrapes at
/// `/metrics`, over plain HTTP or, given `tls_ca`, over HTTPS trusting
/// that CA (PEM file); with `token`, as `Authorization: Bearer`.
#[derive(Default)]
pub struct Job<'a> {
    pub name: &'a str,
    pub targets: Vec<String>,
    pub tls_ca: Option<&'a std::path::Path>,
    pub token: Option<&'a str>,
}

/// See the module documentation.
pub struct Prometheus {
    child: Child,
    /// `http://127.0.0.1:PORT`, the HTTP API's base.
    pub url: String,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `jobs` every second. Panics when it does
    /// not listen within 30 s.
    pub fn start(jobs: &[Job]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let mut config = "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n".to_string();
        for j in jobs {
            let targets: Vec<String> = j.targets.iter().map(|t| format!("'{t}'")).collect();
            config += &format!("  - job_name: '{}'\n", j.name);
            if let Some(ca) = j.tls_ca {
                config += &format!("    scheme: https\n    tls_config:\n      ca_file: '{}'\n", ca.display());
            }
            if let Some(token) = j.token {
                config += &format!("    authorization:\n      credentials: '{token}'\n");
            }
            config += &format!("    static_configs:\n      - targets: [{}]\n", targets.join(", "));
        }
        let path = dir.path().join("prometheus.yml");
        std::fs::write(&path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("prometheus (Debian's; scripts/setup-host installs it)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "prometheus did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            url: format!("http://{addr}"),
            dir,
        }
    }

    /// What Prometheus logged so far (for a failing test's message).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
