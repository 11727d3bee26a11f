//! The lab's scripts as a test can check them without disturbing the lab:
//! a daemon started under `flock` does not keep the lock.

use std::process::Command;

#[test]
fn a_daemon_started_under_flock_does_not_hold_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("lab.lock");
    let lib = format!("{}/../scripts/lib/close-inherited-fds", env!("CARGO_MANIFEST_DIR"));
    // As `flock LOCK scripts/setup-host` starting libvirtd: a daemon that
    // outlives the script.
    let script = dir.path().join("start-daemon");
    std::fs::write(&script, format!(". {lib}\nsetsid sleep 30 </dev/null >/dev/null 2>&1 &\necho $!\n")).unwrap();
    let out = Command::new("flock").arg(&lock).arg("bash").arg(&script).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let daemon = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let free = Command::new("flock").args(["-n"]).arg(&lock).arg("true").status().unwrap();
    let _ = Command::new("kill").arg(&daemon).status();
    assert!(free.success(), "the daemon (pid {daemon}) still holds the lock");
}
