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

#[test]
fn each_phase_of_a_script_says_when_it_starts_and_how_long_it_took() {
    let lib = format!("{}/../scripts/lib/phases", env!("CARGO_MANIFEST_DIR"));
    let run = |body: &str| {
        let script = format!("set -euo pipefail\nPHASE_SCRIPT=demo\n. {lib}\n{body}\n");
        Command::new("bash").arg("-c").arg(script).output().unwrap()
    };
    let out = run("phase 'the build' bash -c 'echo compiling; sleep 1'\necho after");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "compiling\nafter\n", "the phase's own output shows");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines[0], "[demo] the build ...");
    assert!(["[demo] the build: 1 s", "[demo] the build: 2 s"].contains(&lines[1]), "{stderr}");
    // A failing phase stops the script (set -e) after naming itself.
    let out = run("phase packages false\necho after");
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "[demo] packages ...\n");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
}

#[test]
fn the_cli_reference_is_the_binaries_own_help() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let bin_dir = vee_testkit::lab::binary("veem").parent().unwrap().to_path_buf();
    let out = Command::new("bash")
        .arg(format!("{root}/scripts/cli-reference"))
        .arg("--check")
        .env("BIN_DIR", bin_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docs/cli-reference.md differs from --help (run scripts/cli-reference):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

