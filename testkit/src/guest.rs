//! The test guests' files (the tiny guest; the stock Debian cloud guest),
//! and reading the tiny guest's serial counter.
//!
//! The guest prints `tick N disk=M` every second: N counts up in memory
//! from 1 at boot; M is the last tick read back from its data disk.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::lab::repo_root;

/// Files of the guest built by `scripts/build-guest-image`.
pub struct GuestImage {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub disk: PathBuf,
    pub cmdline: String,
}

/// The built guest; panics with what to run when it is missing.
pub fn image() -> GuestImage {
    let dir = built_dir("GUEST_DIR", "target/guest");
    files_in(dir, "console=ttyS0 quiet".into(), "scripts/build-guest-image")
}

/// The stock Debian 12 cloud guest built by `scripts/build-cloud-guest`
/// (systemd, cloud-init, openssh-server, qemu-guest-agent; nothing of this
/// project), booted with the `cmdline` it was built with; panics with what
/// to run when it is missing.
pub fn cloud_image() -> GuestImage {
    let dir = built_dir("CLOUD_GUEST_DIR", "target/cloud-guest");
    let cmdline = std::fs::read_to_string(dir.join("cmdline"))
        .unwrap_or_else(|e| panic!("{}/cmdline: {e}: run scripts/build-cloud-guest", dir.display()));
    files_in(dir, cmdline.trim().into(), "scripts/build-cloud-guest")
}

/// `$var`, or `default` under the repository's root.
fn built_dir(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(default))
}

/// The kernel, initrd and disk `script` builds in `dir`.
fn files_in(dir: PathBuf, cmdline: String, script: &str) -> GuestImage {
    let g = GuestImage {
        kernel: dir.join("vmlinuz"),
        initrd: dir.join("initrd.img"),
        disk: dir.join("disk.qcow2"),
        cmdline,
    };
    for f in [&g.kernel, &g.initrd, &g.disk] {
        assert!(f.exists(), "{} missing: run {script}", f.display());
    }
    g
}

/// The last `tick N disk=M` line of a console log: (N, M), with M `None`
/// when the guest has no data disk.
pub fn last_tick(console: &str) -> Option<(u64, Option<u64>)> {
    console.lines().rev().find_map(|l| {
        let rest = l.trim().strip_prefix("tick ")?;
        let (n, d) = rest.split_once(" disk=")?;
        Some((n.parse().ok()?, d.parse().ok()))
    })
}

/// Every tick N printed in a console log, in order.
pub fn ticks(console: &str) -> Vec<u64> {
    console.lines().filter_map(|l| last_tick(l).map(|t| t.0)).collect()
}

/// Polls `read` until the last tick is at least `min`; returns it. Panics
/// with the console's tail after `timeout`.
pub fn wait_tick(mut read: impl FnMut() -> String, min: u64, timeout: Duration) -> (u64, Option<u64>) {
    let start = Instant::now();
    let mut text = String::new();
    while start.elapsed() < timeout {
        text = read();
        if let Some(t) = last_tick(&text) {
            if t.0 >= min {
                return t;
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let tail: String = text.chars().rev().take(600).collect::<Vec<_>>().into_iter().rev().collect();
    panic!("guest did not reach tick {min} in {timeout:?}; console tail:\n{tail}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_last_tick() {
        let log = "boot\nvee-guest: data disk mounted\ntick 1 disk=1\ntick 2 disk=2\n";
        assert_eq!(last_tick(log), Some((2, Some(2))));
        assert_eq!(last_tick("tick 7 disk=none\n"), Some((7, None)));
        assert_eq!(last_tick("nothing"), None);
        assert_eq!(ticks(log), vec![1, 2]);
    }
}
