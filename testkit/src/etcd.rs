//! etcd clusters of test runs: Debian's `etcd-server` (`/usr/bin/etcd`,
//! installed by `scripts/setup-host`), its members on free loopback
//! ports, clients authenticated by certificate ([`crate::pki::etcd`]),
//! data under the test's directory. Members can be killed and started
//! again (quorum lost and regained); dropping the cluster kills them all.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use interfaces::tls::TlsFiles;

use crate::lab::free_port;
use crate::pki::{self, EtcdPki};

/// The etcd binary of Debian's `etcd-server`.
pub const ETCD: &str = "/usr/bin/etcd";
/// etcdctl of Debian's `etcd-client`.
pub const ETCDCTL: &str = "/usr/bin/etcdctl";

/// One member: its ports, data and process.
struct Member {
    name: String,
    client_port: u16,
    /// A second client URL's port: a second way in, for a client to be
    /// cut off from the cluster alone ([`EtcdCluster::client_ports`]).
    alt_client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

/// A running etcd cluster (see the module doc).
pub struct EtcdCluster {
    dir: PathBuf,
    pki: EtcdPki,
    members: Vec<Member>,
}

impl EtcdCluster {
    /// Starts `n` members under `dir` and waits until each answers (at
    /// most 30 s). Errors: etcd is not installed, or does not come up
    /// (its log is in the error).
    pub fn start(dir: &Path, n: usize) -> Result<Self, String> {
        if !Path::new(ETCD).exists() {
            return Err(format!("{ETCD} is missing: scripts/setup-host installs Debian's etcd-server"));
        }
        let pki = pki::etcd(&dir.join("etcd-pki"));
        let members = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: free_port(),
                alt_client_port: free_port(),
                peer_port: free_port(),
                child: None,
            })
            .collect();
        let mut c = EtcdCluster {
            dir: dir.to_path_buf(),
            pki,
            members,
        };
        for i in 0..n {
            c.start_member(i)?;
        }
        c.wait_healthy(Duration::from_secs(30))?;
        Ok(c)
    }

    /// The members' client URLs.
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints_via(0)
    }

    /// The members' client ports of way in `way` (0: the first client
    /// URL, which [`EtcdCluster::endpoints`] gives; 1: the second). Each
    /// member listens on both, so clients given different ways in can be
    /// cut off from the cluster apart (a firewall rule on the ports).
    pub fn client_ports(&self, way: usize) -> Vec<u16> {
        self.members
            .iter()
            .map(|m| if way == 0 { m.client_port } else { m.alt_client_port })
            .collect()
    }

    /// The members' client URLs of way in `way` ([`EtcdCluster::client_ports`]).
    pub fn endpoints_via(&self, way: usize) -> Vec<String> {
        self.client_ports(way).iter().map(|p| format!("https://127.0.0.1:{p}")).collect()
    }

    /// What a VEEM shows and trusts (`[store.tls]`).
    pub fn client_tls(&self) -> TlsFiles {
        self.pki.client.clone()
    }

    /// The TOML of a VEEM's `[store]` over this cluster, with key prefix
    /// `prefix`.
    pub fn store_toml(&self, prefix: &str) -> String {
        self.store_toml_via(prefix, 0)
    }

    /// [`EtcdCluster::store_toml`] over way in `way`
    /// ([`EtcdCluster::client_ports`]).
    pub fn store_toml_via(&self, prefix: &str, way: usize) -> String {
        let endpoints: Vec<String> = self.endpoints_via(way).iter().map(|e| format!("{e:?}")).collect();
        format!(
            "[store]\nengine = \"etcd\"\nendpoints = [{}]\nprefix = \"{prefix}\"\ntimeout = \"5s\"\n[store.tls]\n{}",
            endpoints.join(", "),
            pki::toml(&self.pki.client)
        )
    }

    /// [`EtcdCluster::store_toml`] with the leader's lease `ttl` (whole
    /// seconds).
    pub fn store_toml_leased(&self, prefix: &str, ttl: Duration) -> String {
        self.store_toml_leased_via(prefix, ttl, 0)
    }

    /// [`EtcdCluster::store_toml_leased`] over way in `way`
    /// ([`EtcdCluster::client_ports`]).
    pub fn store_toml_leased_via(&self, prefix: &str, ttl: Duration, way: usize) -> String {
        self.store_toml_via(prefix, way)
            .replacen("[store.tls]", &format!("lease_ttl = \"{}s\"\n[store.tls]", ttl.as_secs()), 1)
    }

    /// Starts member `i` (again, over its data: it rejoins).
    pub fn start_member(&mut self, i: usize) -> Result<(), String> {
        let cluster: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let m = &self.members[i];
        let data = self.dir.join(format!("etcd-{}", m.name));
        let state = if data.exists() { "existing" } else { "new" };
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("etcd-{}.log", m.name)))
            .map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let client = format!("https://127.0.0.1:{}", m.client_port);
        let clients = format!("{client},https://127.0.0.1:{}", m.alt_client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let child = Command::new(ETCD)
            .args(["--name", &m.name, "--data-dir"])
            .arg(&data)
            .args(["--listen-client-urls", &clients, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &cluster.join(","), "--initial-cluster-state", state])
            .args(["--initial-cluster-token", "vee-test"])
            .arg("--cert-file")
            .arg(&self.pki.server_cert)
            .arg("--key-file")
            .arg(&self.pki.server_key)
            .arg("--trusted-ca-file")
            .arg(&self.pki.ca)
            .args(["--client-cert-auth", "--logger", "zap", "--log-level", "warn"])
            // A whole planner's first write in one transaction.
            .args(["--max-txn-ops", "100000", "--max-request-bytes", "33554432"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| format!("start {ETCD}: {e}"))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// The index of the member that leads the raft group now, if one
    /// does (etcdctl's `endpoint status`).
    pub fn raft_leader(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            m.child.is_some()
                && self
                    .etcdctl(
                        &[format!("https://127.0.0.1:{}", m.client_port)],
                        &["endpoint", "status", "--write-out=simple"],
                    )
                    // endpoint, ID, version, size, is leader, ...
                    .is_ok_and(|out| out.split(", ").nth(4) == Some("true"))
        })
    }

    /// Kills member `i` (SIGKILL, as a crash).
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits until every running member says it is healthy (etcdctl's
    /// `endpoint health`: a proposal committed), at most `within`.
    pub fn wait_healthy(&self, within: Duration) -> Result<(), String> {
        let running: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.child.is_some())
            .map(|m| format!("https://127.0.0.1:{}", m.client_port))
            .collect();
        let start = Instant::now();
        loop {
            let out = self.etcdctl(&running, &["endpoint", "health"]);
            match out {
                Ok(_) => return Ok(()),
                Err(e) if start.elapsed() > within => {
                    return Err(format!("etcd not healthy within {within:?}: {e}; logs in {}", self.dir.display()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Runs etcdctl against `endpoints` with the client certificate;
    /// its output, or its error output as the error.
    pub fn etcdctl(&self, endpoints: &[String], args: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(ETCDCTL);
        // etcdctl refuses a flag that an ETCDCTL_ variable also sets.
        for (k, _) in std::env::vars() {
            if k.starts_with("ETCDCTL_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", endpoints.join(",")))
            .arg(format!("--cacert={}", self.pki.ca.display()))
            .arg(format!("--cert={}", self.pki.client.cert.display()))
            .arg(format!("--key={}", self.pki.client.key.display()))
            .args(["--command-timeout=3s", "--dial-timeout=2s"])
            .args(args)
            .output()
            .map_err(|e| format!("{ETCDCTL}: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
        // The members preallocate their write-ahead logs (64 MiB each).
        for m in &self.members {
            let _ = std::fs::remove_dir_all(self.dir.join(format!("etcd-{}", m.name)));
        }
    }
}
