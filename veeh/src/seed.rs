//! A VEE's NoCloud seed disk: what cloud-init reads at first boot, as its
//! NoCloud data source defines it (cloud-init docs, "NoCloud"): an ISO 9660
//! filesystem labelled `cidata` holding `meta-data` (`instance-id`,
//! `local-hostname`, `public-keys`) and `user-data`. Written with `xorriso`
//! (Debian package `xorriso`) as the docs' `genisoimage` example does.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use interfaces::vhi::CloudInit;

/// The seed's `meta-data`: JSON, which cloud-init's YAML reader takes as
/// is. The instance ID is the VEE ID, so cloud-init's once-per-instance
/// steps do not run again after a restore or a migration.
pub fn meta_data(vee_id: &str, c: &CloudInit) -> String {
    let mut m = serde_json::json!({
        "instance-id": vee_id,
        "local-hostname": c.hostname,
    });
    if !c.ssh_authorized_keys.is_empty() {
        m["public-keys"] = serde_json::json!(c.ssh_authorized_keys);
    }
    serde_json::to_string_pretty(&m).expect("JSON of strings") + "\n"
}

/// Writes the seed of VEE `vee_id` to `path` (replaced atomically: a
/// temporary file renamed into place). Errors: `xorriso` is missing or
/// fails (its stderr in the message), or the files cannot be written.
pub fn write(path: &Path, vee_id: &str, c: &CloudInit) -> Result<()> {
    let dir = path.parent().context("seed path has no directory")?;
    let work = tempfile::Builder::new().prefix(".seed-").tempdir_in(dir)?;
    std::fs::write(work.path().join("meta-data"), meta_data(vee_id, c))?;
    std::fs::write(work.path().join("user-data"), &c.user_data)?;
    let tmp = work.path().join("seed.iso");
    let out = Command::new("xorriso")
        .args(["-as", "mkisofs", "-quiet", "-volid", "cidata", "-joliet", "-rock", "-output"])
        .arg(&tmp)
        .arg(work.path().join("user-data"))
        .arg(work.path().join("meta-data"))
        .output()
        .context("run xorriso (Debian package xorriso) for the NoCloud seed")?;
    if !out.status.success() {
        bail!("xorriso: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_data_names_the_instance_host_and_keys() {
        let c = CloudInit {
            hostname: "web-0".into(),
            user_data: "#cloud-config\n".into(),
            ssh_authorized_keys: vec!["ssh-ed25519 AAAA a@b".into()],
        };
        let m: serde_json::Value = serde_json::from_str(&meta_data("id-1", &c)).unwrap();
        assert_eq!(
            m,
            serde_json::json!({"instance-id": "id-1", "local-hostname": "web-0", "public-keys": ["ssh-ed25519 AAAA a@b"]})
        );
    }

    #[test]
    fn the_seed_is_an_iso_labelled_cidata_with_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seed.iso");
        let c = CloudInit {
            hostname: "db-1".into(),
            user_data: "#cloud-config\nhostname: db-1\n".into(),
            ssh_authorized_keys: vec![],
        };
        write(&path, "id-2", &c).unwrap();
        let iso = std::fs::read(&path).unwrap();
        // The primary volume descriptor at sector 16: its volume ID at 40.
        assert_eq!(&iso[0x8001..0x8006], b"CD001");
        assert_eq!(String::from_utf8_lossy(&iso[0x8028..0x8028 + 6]), "cidata");
        let text = String::from_utf8_lossy(&iso);
        assert!(text.contains("#cloud-config\nhostname: db-1\n") && text.contains("\"instance-id\": \"id-2\""));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no work files left");
    }
}
