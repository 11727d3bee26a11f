//! Reading what the guest wrote to its data disk, from outside the guest.

use std::path::Path;
use std::process::Command;

/// The tick numbers in `/ticks` on the ext4 file system of a (stopped)
/// VEE's qcow2 overlay: converts it to raw, replays the journal
/// (`e2fsck -fy`) and reads the file with `debugfs`.
pub fn ticks_on_disk(overlay: &Path, scratch: &Path) -> Vec<u64> {
    let raw = scratch.join("inspect.raw");
    let st = Command::new("qemu-img")
        .args(["convert", "-U", "-O", "raw"])
        .arg(overlay)
        .arg(&raw)
        .status()
        .unwrap();
    assert!(st.success(), "qemu-img convert {}", overlay.display());
    let _ = Command::new("e2fsck").args(["-fy"]).arg(&raw).output().unwrap();
    let out = Command::new("debugfs").args(["-R", "cat /ticks"]).arg(&raw).output().unwrap();
    let _ = std::fs::remove_file(&raw);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("tick ").and_then(|n| n.trim().parse().ok()))
        .collect()
}

/// Panics unless `ticks` is 1, 2, …, n with n ≥ `at_least`.
pub fn assert_contiguous(ticks: &[u64], at_least: u64) {
    assert!(!ticks.is_empty(), "no ticks on the disk");
    for (i, t) in ticks.iter().enumerate() {
        assert_eq!(*t, i as u64 + 1, "disk ticks must be 1..n without gaps or restarts: {ticks:?}");
    }
    assert!(
        *ticks.last().unwrap() >= at_least,
        "disk holds ticks up to {} < {at_least}",
        ticks.last().unwrap()
    );
}
