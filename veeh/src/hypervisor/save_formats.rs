//! Which save formats this host writes and reads, probed rather than
//! guessed from a distribution's name: QEMU is asked for its migration
//! capabilities (QMP `query-migrate-capabilities` on a machine-less QEMU),
//! and libvirt's version says whether it can ask QEMU for mapped-ram
//! (`virDomainSaveParams` takes `image_format` since libvirt 11.2).

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use interfaces::vhi::SaveFormat;

/// The first libvirt that asks QEMU for mapped-ram per save (11.2.0, as
/// libvirt encodes versions).
const LIBVIRT_MAPPED_RAM: u32 = 11_002_000;
/// How long the probe's QEMU may take before it is killed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The formats a host with QEMU `emulator` and libvirt `libvirt_version`
/// (libvirt's encoding) writes and reads: sequential always; mapped-ram
/// when QEMU has the `mapped-ram` migration capability and libvirt can ask
/// for it. A probe that fails is logged and leaves sequential only.
pub fn probe(emulator: &Path, libvirt_version: u32) -> Vec<SaveFormat> {
    let mut formats = vec![SaveFormat::Sequential];
    match migration_capabilities(emulator) {
        Ok(caps) if caps.iter().any(|c| c == "mapped-ram") && libvirt_version >= LIBVIRT_MAPPED_RAM => {
            formats.push(SaveFormat::MappedRam)
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(emulator = %emulator.display(), error = %format!("{e:#}"), "cannot probe QEMU's migration capabilities; sequential saves only"),
    }
    formats
}

/// QEMU's migration capabilities by name, from a QEMU with no machine
/// talking QMP on its standard input and output.
fn migration_capabilities(emulator: &Path) -> anyhow::Result<Vec<String>> {
    let mut child = Command::new(emulator)
        .args(["-machine", "none", "-nodefaults", "-display", "none", "-qmp", "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    child.stdin.take().expect("piped").write_all(
        b"{\"execute\":\"qmp_capabilities\"}\n{\"execute\":\"query-migrate-capabilities\"}\n{\"execute\":\"quit\"}\n",
    )?;
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).map(|_| out)
    });
    let started = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > PROBE_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("QEMU did not answer within {PROBE_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = reader.join().map_err(|_| anyhow::anyhow!("the probe's reader panicked"))??;
    Ok(parse(&out))
}

/// The capability names of the `query-migrate-capabilities` answer among
/// QMP's lines.
fn parse(qmp: &str) -> Vec<String> {
    qmp.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("return")?.as_array().cloned())
        .flatten()
        .filter_map(|c| Some(c.get("capability")?.as_str()?.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_read_from_qmp_lines() {
        let qmp = r#"{"QMP": {"version": {}, "capabilities": ["oob"]}}
{"return": {}}
{"return": [{"state": false, "capability": "xbzrle"}, {"state": false, "capability": "mapped-ram"}]}
{"return": {}}
{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "SHUTDOWN"}"#;
        assert_eq!(parse(qmp), ["xbzrle", "mapped-ram"]);
    }

    #[test]
    fn a_qemu_that_is_not_there_leaves_sequential_only() {
        assert_eq!(probe(Path::new("/nonexistent/qemu"), LIBVIRT_MAPPED_RAM), [SaveFormat::Sequential]);
    }

    #[test]
    fn the_installed_qemu_is_probed() {
        // What the lab's QEMU says (bookworm-backports' 10.0 has
        // mapped-ram; Debian 12's 7.2 does not): the probe agrees with
        // the version, whichever is installed.
        let emulator = Path::new("/usr/bin/qemu-system-x86_64");
        if !emulator.exists() {
            return;
        }
        let caps = migration_capabilities(emulator).unwrap();
        assert!(caps.iter().any(|c| c == "xbzrle"), "{caps:?}");
        let version = String::from_utf8(Command::new(emulator).arg("--version").output().unwrap().stdout).unwrap();
        let major: u32 = version.split_whitespace().nth(3).unwrap().split('.').next().unwrap().parse().unwrap();
        assert_eq!(caps.iter().any(|c| c == "mapped-ram"), major >= 9, "{version}");
    }
}
