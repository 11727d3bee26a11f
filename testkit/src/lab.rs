//! The lab: URIs of both sites, the serial lock for guest-booting tests
//! (and the bench), per-test directories, free ports, and the built
//! binaries.

use std::collections::BTreeSet;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

/// Site A's end of the lab's WAN (veth `vee-wan0`, root network
/// namespace): site A's daemons that site B calls listen here.
pub const SITE_A_ADDR: &str = "10.77.0.1";
/// Site B's end of the WAN (`wan0` in network namespace `vee-siteb`):
/// site B's libvirtd, VEEHs and VEEM listen here.
pub const SITE_B_ADDR: &str = "10.77.0.2";
/// Site A's libvirtd (the machine's own).
pub const SITE_A_URI: &str = "qemu:///system";
/// Site A's libvirtd as site B's libvirtd (and site A's second host)
/// reaches it: migrations to A.
pub const SITE_A_PEER_URI: &str = "qemu+tcp://10.77.0.1:16509/system";
/// Site A's second host: a second libvirtd in its own mount and UTS
/// namespace, same network namespace (in-site migrations).
pub const SITE_A2_URI: &str = "qemu+tcp://127.0.0.1:16510/system";
/// Site A's stock host: a libvirtd of Debian 12's own stack (libvirt 9.0,
/// QEMU 7.2, no mapped-ram) in its own mount and UTS namespace, beside the
/// backports stack of the other hosts (`scripts/setup-host`).
pub const SITE_A_STOCK_URI: &str = "qemu+tcp://127.0.0.1:16511/system";
/// The pid file of the stock host's libvirtd: a VEEH of that host runs in
/// its mount and UTS namespaces, where its QEMU is the stock one.
pub const SITE_A_STOCK_PID_FILE: &str = "/var/lib/vee-lab/run/site-a-stock-libvirtd.pid";
/// Site B's libvirtd, in site B's network, mount and UTS namespaces.
pub const SITE_B_URI: &str = "qemu+tcp://10.77.0.2:16510/system";
/// The pid file of site B's libvirtd: its namespaces are site B's.
pub const SITE_B_PID_FILE: &str = "/var/lib/vee-lab/run/site-b-libvirtd.pid";

/// Where a daemon of the lab runs: the address it listens on and the
/// command prefix that puts it there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Site A (and its second host): the root namespaces; daemons listen
    /// on site A's end of the WAN, [`SITE_A_ADDR`].
    SiteA,
    /// Site A's stock host: the mount and UTS namespaces of its libvirtd
    /// (the root network namespace: address [`SITE_A_ADDR`]).
    SiteAStock,
    /// Site B: the namespaces of site B's libvirtd; address [`SITE_B_ADDR`].
    SiteB,
}

impl Place {
    /// The place of a VEEH on libvirt `uri`.
    pub fn of_uri(uri: &str) -> Self {
        match uri {
            SITE_B_URI => Place::SiteB,
            SITE_A_STOCK_URI => Place::SiteAStock,
            _ => Place::SiteA,
        }
    }

    /// The place of the VEEM of `site_id`: `site-b` runs at site B, every
    /// other site in the root namespaces.
    pub fn of_site(site_id: &str) -> Self {
        if site_id == "site-b" {
            Place::SiteB
        } else {
            Place::SiteA
        }
    }

    /// The address daemons here listen on and migrate to.
    pub fn addr(self) -> &'static str {
        match self {
            Place::SiteA | Place::SiteAStock => SITE_A_ADDR,
            Place::SiteB => SITE_B_ADDR,
        }
    }

    /// The command prefix that runs a program here: nothing at site A;
    /// `nsenter` into site B's libvirtd's network, mount and UTS namespaces
    /// (its private /run: the VEEH's network state is site B's own), or
    /// into the stock host's mount and UTS namespaces. Errors when that
    /// libvirtd does not run (`scripts/setup-host`).
    pub fn enter(self) -> Result<Vec<String>, String> {
        let (pid_file, namespaces): (&str, &[&str]) = match self {
            Place::SiteA => return Ok(vec![]),
            Place::SiteAStock => (SITE_A_STOCK_PID_FILE, &["-m", "-u"]),
            Place::SiteB => (SITE_B_PID_FILE, &["-m", "-n", "-u"]),
        };
        let pid = std::fs::read_to_string(pid_file).map_err(|e| format!("{pid_file}: {e}; run scripts/setup-host"))?;
        let mut enter = vec!["nsenter".to_string(), "-t".into(), pid.trim().into()];
        enter.extend(namespaces.iter().map(|n| n.to_string()));
        enter.push("--".into());
        Ok(enter)
    }
}

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
///
/// The directory goes when the test process exits without a panic (its
/// guests' disks and checkpoints took 7.5 GB over a whole run and filled
/// CI's disk); a failed test keeps it for its logs, and so does every
/// test when `VEE_KEEP_TEST_DIRS` is set.
pub fn test_dir(name: &str) -> PathBuf {
    let d = scratch_root().join(format!("{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
    std::fs::create_dir_all(&d).unwrap();
    remove_at_exit(d.clone());
    d
}

/// Directories [`test_dir`] made in this process.
static MADE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Whether anything in this process panicked (a failed test, or a thread
/// of one): the directories are then kept.
static PANICKED: AtomicBool = AtomicBool::new(false);

/// Registers `dir` for [`remove_made`] at the process's exit, installing
/// the panic hook and the exit handler the first time.
fn remove_at_exit(dir: PathBuf) {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            previous(info)
        }));
        // SAFETY: registers a plain `extern "C"` function with no
        // arguments, as atexit(3) requires; it runs once, at exit.
        unsafe { libc::atexit(remove_made) };
    });
    MADE.lock().unwrap_or_else(|e| e.into_inner()).push(dir);
}

/// The exit handler: removes the directories of a process that did not
/// panic (a test that passed), unless `VEE_KEEP_TEST_DIRS` is set. A test
/// killed by its timeout never gets here and keeps its directory.
extern "C" fn remove_made() {
    if PANICKED.load(Ordering::SeqCst) || std::env::var_os("VEE_KEEP_TEST_DIRS").is_some() {
        return;
    }
    let made = std::mem::take(&mut *MADE.lock().unwrap_or_else(|e| e.into_inner()));
    for d in made {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A port that was free on every address a moment ago, and that this
/// process has not handed out before.
///
/// Ports come from below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`, 32768–60999 by default), at random:
/// a port the kernel hands out to `bind(0)` may be handed out again
/// before the daemon it was meant for binds it, or be taken meanwhile
/// as the source port of an outgoing connection or as one of libvirt's
/// migration ports (49152–49215). Falls back to `bind(0)` when the
/// ephemeral range leaves too little room below it.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    const LOW: u16 = 20000;
    let high = ephemeral_low().unwrap_or(32768);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = if high > LOW + 1000 {
            let r = u16::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..2].try_into().unwrap());
            LOW + r % (high - LOW)
        } else {
            // On every address: a port free on 127.0.0.1 alone may be held
            // on the lab's 10.77.0.1, where the daemons listen.
            TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port()
        };
        if !given.contains(&port) && TcpListener::bind(("0.0.0.0", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free port below {high} after 1000 tries")
}

/// The first port of the kernel's ephemeral range, if it can be read.
fn ephemeral_low() -> Option<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `test` of this binary in a process of its own and returns the
    /// directory it printed and whether it passed.
    fn dir_of_child(test: &str) -> (PathBuf, bool) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env_remove("VEE_KEEP_TEST_DIRS")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let dir = stdout
            .lines()
            .find_map(|l| l.split_once("test dir: ").map(|(_, d)| d))
            .expect("the child printed its directory");
        (PathBuf::from(dir), out.status.success())
    }

    #[test]
    #[ignore = "run by a_passed_tests_directory_goes_and_a_failed_ones_stays"]
    fn child_that_passes() {
        println!("test dir: {}", test_dir("testkit-pass").display());
    }

    #[test]
    #[ignore = "run by a_passed_tests_directory_goes_and_a_failed_ones_stays"]
    fn child_that_fails() {
        println!("test dir: {}", test_dir("testkit-fail").display());
        panic!("failing on purpose");
    }

    #[test]
    fn a_passed_tests_directory_goes_and_a_failed_ones_stays() {
        let (passed, ok) = dir_of_child("lab::tests::child_that_passes");
        assert!(ok);
        assert!(!passed.exists(), "{} was left behind by a test that passed", passed.display());
        let (failed, ok) = dir_of_child("lab::tests::child_that_fails");
        assert!(!ok);
        assert!(failed.is_dir(), "{} of a failed test is gone", failed.display());
        std::fs::remove_dir_all(failed).unwrap();
    }

    #[test]
    fn free_ports_are_never_handed_out_twice_and_stay_below_the_ephemeral_range() {
        let high = ephemeral_low().unwrap();
        let ports: Vec<u16> = (0..300).map(|_| free_port()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice: {ports:?}");
        if high > 21000 {
            assert!(ports.iter().all(|&p| (20000..high).contains(&p)), "{ports:?}");
        }
    }
}
