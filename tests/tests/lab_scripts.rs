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

/// The layering check (`scripts/check-layers`, run by `scripts/test`)
/// fails on a crate whose modules import each other in a circle, naming
/// each edge, also through `use super::{…}` trees; and passes the
/// repository's crates, the cycles still to cut listed.
#[test]
fn the_layering_check_fails_when_modules_import_each_other_in_a_circle() {
    let script = format!("{}/../scripts/check-layers", env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("demo").join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::B;\npub struct A;\n").unwrap();
    std::fs::write(src.join("b/mod.rs"), "mod inner;\npub struct B;\n").unwrap();
    std::fs::write(src.join("c.rs"), "// use crate::a::A;\npub struct C;\n").unwrap();
    let check = || Command::new("python3").arg(&script).arg(dir.path().join("demo")).output().unwrap();
    // b's submodule reaches c: no cycle yet.
    std::fs::write(src.join("b/inner.rs"), "use super::super::{c::C};\n").unwrap();
    let out = check();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    // c then reaches a (and a reaches b): a cycle.
    std::fs::write(src.join("c.rs"), "pub struct C(crate::a::A);\n").unwrap();
    let out = check();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("modules in a cycle: a, b, c"), "{text}");
    assert!(text.contains("b -> c") && text.contains("inner.rs:1"), "{text}");
    // The repository itself passes.
    let known = format!("{}/../scripts/layers-known-cycles", env!("CARGO_MANIFEST_DIR"));
    let facade = format!("{}/../scripts/layers-facade", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(&script)
        .args(["--known", &known, "--facade", &facade])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// In veem, the layering check sees each workflow as a module of its own
/// (two workflows calling each other are a cycle), and fails on an `impl
/// Veem` outside the facade that the facade list does not name, and on a
/// listed file that has none left.
#[test]
fn the_layering_check_keeps_veems_workflows_acyclic_and_out_of_the_facade() {
    let script = format!("{}/../scripts/check-layers", env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("veem").join("src");
    std::fs::create_dir_all(src.join("workflows")).unwrap();
    let write = |file: &str, text: &str| std::fs::write(src.join(file), text).unwrap();
    write("lib.rs", "pub mod manager;\npub mod windows;\npub mod workflows;\n");
    write("manager.rs", "pub struct Veem;\nimpl Veem {}\n");
    write("windows.rs", "use crate::manager::Veem;\nimpl Veem {\n    fn renew(&self) {}\n}\n");
    write("workflows/mod.rs", "pub mod deploy;\npub mod spares;\n");
    write("workflows/deploy.rs", "use super::spares::Spares;\npub struct Deploy(Spares);\n");
    write("workflows/spares.rs", "pub struct Spares;\n");
    let list = dir.path().join("facade");
    let check = |listed: &str| {
        std::fs::write(&list, listed).unwrap();
        let out = Command::new("python3")
            .arg(&script)
            .args(["--facade", list.to_str().unwrap()])
            .arg(dir.path().join("veem"))
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (ok, text) = check("# listed\nwindows.rs\n");
    assert!(ok, "{text}");
    let (ok, text) = check("");
    assert!(!ok && text.contains("veem/src/windows.rs has `impl Veem`"), "{text}");
    write("windows.rs", "pub struct Windows;\n");
    let (ok, text) = check("windows.rs\n");
    assert!(!ok && text.contains("veem/src/windows.rs has no `impl Veem` left"), "{text}");
    // Spares calls Deploy back: a cycle between two workflows.
    write("workflows/spares.rs", "pub struct Spares(Box<super::deploy::Deploy>);\n");
    let (ok, text) = check("");
    assert!(!ok, "{text}");
    assert!(text.contains("modules in a cycle: workflows::deploy, workflows::spares"), "{text}");
}
