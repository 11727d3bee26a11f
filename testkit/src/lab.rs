//! The lab: URIs of both sites, the serial lock for guest-booting tests
//! (and the bench), per-test directories, free ports, and the built
//! binaries.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

/// Site A's libvirtd (the machine's own).
pub const SITE_A_URI: &str = "qemu:///system";
/// Site A's libvirtd as a peer site's libvirtd reaches it (migrations to A).
pub const SITE_A_PEER_URI: &str = "qemu+tcp://127.0.0.1:16509/system";
/// Site B's libvirtd (a second libvirtd in its own namespace).
pub const SITE_B_URI: &str = "qemu+tcp://127.0.0.1:16510/system";

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A built binary of the workspace beside the running executable: a test
/// (`target/<profile>/deps/<test>`) or a binary (`target/<profile>/<bin>`)
/// finds `target/<profile>/<name>`. Errors say what to build.
pub fn try_binary(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().ok_or("executable without a directory")?;
    let profile = if dir.ends_with("deps") { dir.parent().unwrap_or(dir) } else { dir };
    let p = profile.join(name);
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "{} is not built: run `cargo build --workspace --bins` (scripts/test and scripts/bench do)",
            p.display()
        ))
    }
}

/// [`try_binary`], panicking (tests).
pub fn binary(name: &str) -> PathBuf {
    try_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// Holds the lab for one guest-booting test at a time (2 cores; across
/// test binaries and checkouts too). Released on drop.
pub struct LabLock(#[allow(dead_code)] File);

/// The machine-wide lab lock, `/var/lib/vee-lab/lab.lock`: the lab (both
/// libvirtds) is one per machine, whatever checkout the tests run from.
/// Take it with `flock /var/lib/vee-lab/lab.lock …` to run the demo or the
/// bench beside the tests.
pub const LAB_LOCK: &str = "/var/lib/vee-lab/lab.lock";

/// Takes the lab lock, waiting for other tests.
pub fn lock() -> LabLock {
    std::fs::create_dir_all(scratch_root()).unwrap();
    std::fs::create_dir_all(Path::new(LAB_LOCK).parent().unwrap()).unwrap();
    let f = File::options().create(true).truncate(false).write(true).open(LAB_LOCK).unwrap();
    f.lock().unwrap();
    LabLock(f)
}

/// `target/e2e`: where tests keep their directories (reachable from site
/// B's namespace, unlike /run or /var/lib/libvirt).
pub fn scratch_root() -> PathBuf {
    repo_root().join("target").join("e2e")
}

/// A fresh directory `target/e2e/<name>-<random>` for one test; what a
/// failed run left behind cannot collide with the next.
pub fn test_dir(name: &str) -> PathBuf {
    let d = scratch_root().join(format!("{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
