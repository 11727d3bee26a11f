//! The Debian packages (`scripts/package --dev`, which `scripts/test` runs
//! after the build) installed on this machine as an administrator would:
//! each unit checks with `systemd-analyze verify`, the system users exist,
//! and each unit's own command, run as its user with a working
//! configuration in the package's place for it, tells systemd it is ready
//! (Type=notify) and stops cleanly on SIGTERM. Everything is purged after.

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::lab;

fn sh(cmd: &str) -> (bool, String) {
    let out = Command::new("bash").args(["-c", cmd]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[track_caller]
fn ok(cmd: &str) -> String {
    let (ok, text) = sh(cmd);
    assert!(ok, "{cmd}: {text}");
    text
}

/// `KEY=` of the `[Service]` section of unit `name`.
fn unit_key(name: &str, key: &str) -> Option<String> {
    let unit = std::fs::read_to_string(format!("/usr/lib/systemd/system/{name}.service")).unwrap();
    unit.lines().find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
}

/// Runs unit `name`'s ExecStart as its User with `$NOTIFY_SOCKET` at a
/// socket of this test's; returns once READY=1 arrives (panics after 60 s
/// with the daemon's output), then stops it with SIGTERM and expects exit 0.
fn start_unit_command(name: &str, dir: &std::path::Path) {
    let exec = unit_key(name, "ExecStart").unwrap();
    let socket = dir.join(format!("{name}.notify"));
    let listener = UnixDatagram::bind(&socket).unwrap();
    ok(&format!("chmod 777 {}", socket.display()));
    listener.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let mut cmd = match unit_key(name, "User") {
        // setpriv execs the command (runuser would stay its parent).
        Some(user) => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", &user, "--regid", &user, "--init-groups", "--"]);
            c
        }
        None => Command::new("env"),
    };
    let mut child = cmd
        .args(exec.split_whitespace())
        .env("NOTIFY_SOCKET", &socket)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 512];
    loop {
        if let Ok(n) = listener.recv(&mut buf) {
            if String::from_utf8_lossy(&buf[..n]).lines().any(|l| l == "READY=1") {
                break;
            }
        }
        let log = || std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        assert!(child.try_wait().unwrap().is_none(), "{name} exited: {}", log());
        assert!(started.elapsed() < Duration::from_secs(60), "{name}: no READY=1: {}", log());
    }
    ok(&format!("kill -TERM {}", child.id()));
    let status = child.wait().unwrap();
    let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
    assert!(status.success(), "{name} did not stop cleanly ({status}): {log}");
}

#[test]
fn lab_the_debian_packages_install_and_their_units_start() {
    let _lab = lab::lock();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let debs: Vec<String> = ["veem", "veeh", "image-repo"]
        .iter()
        .map(|p| format!("{root}/target/debian/{p}_0.1.0-1_amd64.deb"))
        .collect();
    for d in &debs {
        assert!(
            std::path::Path::new(d).exists(),
            "{d}: run scripts/package --dev (scripts/test does)"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    ok(&format!("chmod 755 {}", dir.path().display()));
    ok(&format!("DEBIAN_FRONTEND=noninteractive dpkg -i {}", debs.join(" ")));
    let result = std::panic::catch_unwind(|| {
        for bin in ["veem", "veeh", "image-repo"] {
            let v = ok(&format!("/usr/bin/{bin} --version"));
            assert_eq!(v.trim(), format!("{bin} {}", interfaces::daemon::version()));
            ok(&format!("systemd-analyze verify --man=no /usr/lib/systemd/system/{bin}.service"));
            assert!(
                std::path::Path::new(&format!("/etc/{bin}/{bin}.toml")).exists(),
                "{bin}'s default configuration"
            );
            // Descriptors for its connections well above their limit
            // (systemd's default soft limit is 1,024).
            assert_eq!(unit_key(bin, "LimitNOFILE").as_deref(), Some("65536"), "{bin}");
        }
        for user in ["veem", "image-repo"] {
            ok(&format!("id {user}"));
        }
        // An administrator's configuration, where the units read it.
        let port = || lab::free_port();
        let repo_port = port();
        std::fs::write(
            "/etc/image-repo/image-repo.toml",
            format!(
                "listen = \"127.0.0.1:{repo_port}\"\ndata = \"/var/lib/image-repo\"\ntoken = \"a-long-operator-token\"\ninsecure = true\n"
            ),
        )
        .unwrap();
        std::fs::write(
            "/etc/veem/veem.toml",
            format!(
                "site_id = \"pkg-site\"\nlisten = \"127.0.0.1:{}\"\ndb = \"/var/lib/veem/db\"\nimage_repo = \"http://127.0.0.1:{repo_port}\"\ninsecure = true\n",
                port()
            ),
        )
        .unwrap();
        std::fs::write(
            "/etc/veeh/veeh.toml",
            format!(
                "host = \"pkg-h1\"\nsite_id = \"pkg-site\"\nlibvirt_uri = \"{}\"\nlisten = \"127.0.0.1:{}\"\nstate_dir = \"/var/lib/veeh\"\nmigration_address = \"127.0.0.1\"\nimage_repo = \"http://127.0.0.1:{repo_port}\"\ninsecure = true\n[capacity]\nvcpus = 1\nmemory_mib = 512\ndisk_gib = 1\n",
                lab::SITE_A_URI,
                port()
            ),
        )
        .unwrap();
        // systemd's StateDirectory=, made as it would.
        ok("install -d -o image-repo -g image-repo /var/lib/image-repo && install -d -o veem -g veem /var/lib/veem && install -d /var/lib/veeh");
        for unit in ["image-repo", "veem", "veeh"] {
            start_unit_command(unit, dir.path());
        }
    });
    let purge =
        sh("DEBIAN_FRONTEND=noninteractive dpkg --purge veem veeh image-repo && rm -rf /var/lib/veem /var/lib/veeh /var/lib/image-repo");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(purge.0, "purge: {}", purge.1);
    assert!(!std::path::Path::new("/usr/bin/veem").exists());
}
