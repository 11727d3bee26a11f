//! Starts the real `image-repo` binary on a free loopback port with a
//! temporary data directory, and helpers shared by the integration tests.
#![allow(dead_code)] // each test crate uses a different part

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

use interfaces::repo_client::RepoClient;

pub mod chunks;

/// The operator's token of test servers.
pub const TOKEN: &str = "test-write-token-0123456789";
/// The token of site `site-a` (`[[tokens]]`, role site).
pub const SITE_TOKEN: &str = "test-site-a-token-0123456789";
/// The token of service provider `acme`.
pub const ACME_TOKEN: &str = "test-acme-token-0123456789";
/// The token of service provider `globex`, given by its digest.
pub const GLOBEX_TOKEN: &str = "test-globex-token-0123456789";

/// The `image-repo` binary under test: this build's, or the one
/// `IMAGE_REPO_TEST_BIN` names (to see a test fail against an older
/// build, as `docs/security.md` records).
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| std::env::var("IMAGE_REPO_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_image-repo").into()))
}

/// How to start a test server.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Quota in bytes.
    pub max_bytes: Option<u64>,
    /// Reserve in bytes (default 0 in tests).
    pub reserve_bytes: u64,
    /// Use this data directory instead of a fresh temporary one.
    pub data: Option<PathBuf>,
    /// Pass everything as flags instead of a config file.
    pub flags_only: bool,
    /// More lines of the config file (limits, `[tls]` last).
    pub extra_config: String,
}

/// A running repository server (killed on drop).
pub struct Repo {
    child: Option<Child>,
    _stdout: Option<BufReader<ChildStdout>>,
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// `127.0.0.1:PORT`
    pub addr: String,
    /// The data directory.
    pub data: PathBuf,
    opts: Options,
    dir: tempfile::TempDir,
}

impl Repo {
    /// A server with default options.
    pub fn start() -> Repo {
        Repo::start_with(Options::default())
    }

    /// A server with `opts`.
    pub fn start_with(opts: Options) -> Repo {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = opts.data.clone().unwrap_or_else(|| dir.path().join("data"));
        let mut repo = Repo {
            child: None,
            _stdout: None,
            url: String::new(),
            addr: String::new(),
            data,
            opts,
            dir,
        };
        repo.spawn("127.0.0.1:0");
        repo
    }

    fn spawn(&mut self, listen: &str) {
        let mut cmd = Command::new(bin());
        cmd.arg("serve").arg("--listen").arg(listen);
        if self.opts.flags_only {
            cmd.arg("--data").arg(&self.data).arg("--insecure");
            if let Some(max) = self.opts.max_bytes {
                cmd.arg("--max-bytes").arg(max.to_string());
            }
        } else {
            let mut config = format!(
                "data = {:?}\ntoken = {TOKEN:?}\nreserve_bytes = {}\n",
                self.data.display().to_string(),
                self.opts.reserve_bytes
            );
            if let Some(max) = self.opts.max_bytes {
                config.push_str(&format!("max_bytes = {max}\n"));
            }
            if !self.opts.extra_config.contains("[tls]") {
                config.push_str("insecure = true\n");
            }
            config.push_str(&self.opts.extra_config);
            config.push_str(&format!(
                "\n[[tokens]]\nname = \"site-a\"\nrole = \"site\"\ntoken = {SITE_TOKEN:?}\n\
                 [[tokens]]\nname = \"acme\"\nrole = \"provider\"\ntoken = {ACME_TOKEN:?}\n\
                 [[tokens]]\nname = \"globex\"\nrole = \"provider\"\ntoken_sha256 = {:?}\n",
                interfaces::tokens::digest_hex(GLOBEX_TOKEN)
            ));
            let file = self.dir.path().join("repo.toml");
            std::fs::write(&file, config).unwrap();
            cmd.arg("--config").arg(file);
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).unwrap();
        cmd.env("RUST_LOG", "info").env_remove("IMAGE_REPO_WRITE_TOKEN");
        if self.opts.flags_only {
            cmd.env("IMAGE_REPO_WRITE_TOKEN", TOKEN);
        }
        cmd.stdout(Stdio::piped()).stderr(log);
        let mut child = cmd.spawn().expect("spawn image-repo serve");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("server did not start: {line:?}\n{}", self.log()))
            .to_string();
        let scheme = if self.opts.extra_config.contains("[tls]") {
            "https"
        } else {
            "http"
        };
        self.url = format!("{scheme}://{addr}");
        self.addr = addr;
        self.child = Some(child);
        self._stdout = Some(stdout);
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self._stdout = None;
    }

    /// Stops the server with SIGTERM and waits for it to exit; how long
    /// that took (panics after 30 s).
    pub fn terminate(&mut self) -> std::time::Duration {
        let mut child = self.child.take().expect("a running server");
        let t = std::time::Instant::now();
        Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
        while child.try_wait().unwrap().is_none() {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(30),
                "image-repo still running 30 s after SIGTERM"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self._stdout = None;
        t.elapsed()
    }

    /// The server's process ID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a running server").id()
    }

    /// The server's threads now (`/proc/PID/status`).
    pub fn threads(&self) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
        line["Threads:".len()..].trim().parse().unwrap()
    }

    /// Starts the server again on the same address and data directory.
    pub fn restart(&mut self) {
        self.kill();
        let addr = self.addr.clone();
        self.spawn(&addr);
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// A client with the operator's token.
    pub fn client(&self) -> RepoClient {
        RepoClient::new(&self.url, Some(TOKEN.into())).unwrap()
    }

    /// A client with `token`.
    pub fn client_with(&self, token: Option<&str>) -> RepoClient {
        RepoClient::new(&self.url, token.map(String::from)).unwrap()
    }

    /// A `image-repo` command aimed at this server through the environment,
    /// with the operator's token.
    pub fn cli(&self) -> Command {
        let mut cmd = Command::new(bin());
        cmd.env("IMAGE_REPO_URL", &self.url)
            .env("IMAGE_REPO_TOKEN", TOKEN)
            .env_remove("RUST_LOG");
        cmd
    }

    /// Content files in the data directory (hex names).
    pub fn blob_files(&self) -> Vec<String> {
        names(&self.data.join("blobs")).into_iter().filter(|n| n != ".tmp").collect()
    }

    /// Files in the temporary upload directory.
    pub fn tmp_files(&self) -> Vec<String> {
        names(&self.data.join("blobs/.tmp"))
    }

    /// Waits up to 5 s for the temporary directory to be empty; returns what is left.
    pub fn wait_tmp_empty(&self) -> Vec<String> {
        for _ in 0..50 {
            if self.tmp_files().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        self.tmp_files()
    }

    /// A scratch directory that lives as long as the server.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        self.kill();
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => vec![],
    };
    v.sort();
    v
}

/// `len` pseudo-random bytes from `seed` (xorshift), without a rand crate.
pub fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Writes `data` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

/// Runs `cmd`, returning its output with stdout and stderr as strings.
pub fn run(cmd: &mut Command) -> (Output, String, String) {
    let out = cmd.output().expect("run image-repo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// Runs `cmd` and panics with its output unless it succeeded; returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let (out, stdout, stderr) = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    stdout
}

/// A CA and a server certificate of it for `addr` (an IP address or DNS
/// name), as PEM files in `dir`: (CA, certificate, key).
pub fn tls_files(dir: &Path, addr: &str) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    std::fs::create_dir_all(dir).unwrap();
    let mut ca = CertificateParams::new(Vec::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![addr.to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let paths = (dir.join("ca.crt"), dir.join("repo.crt"), dir.join("repo.key"));
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}
