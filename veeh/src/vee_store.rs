//! The VEEH's records of its VEEs: one directory per VEE under
//! `state_dir/vees/<uuid>/` holding `vee.json` (the spec), `overlay.qcow2`
//! (the VEE's private disk on the cached base image) and `console.log`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use interfaces::vhi::VeeSpec;
use serde::{Deserialize, Serialize};

use crate::error::HostError;

/// The format of `vee.json` this version writes.
///
/// | version | what changed |
/// |---|---|
/// | 0 | (no `format` field) the spec's fields and `incoming` |
/// | 1 | the `format` field |
pub const FORMAT_VERSION: u32 = 1;

/// What the VEEH remembers of a VEE (the VHI `VeeSpec`, plus local flags).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct VeeRecord {
    /// The format of this record ([`FORMAT_VERSION`] when written; 0 when
    /// read from a file of the previous format, which had none).
    #[serde(default)]
    pub format: u32,
    pub vee_id: String,
    pub service_id: String,
    /// vCPUs.
    pub vcpus: u32,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// The most vCPUs and memory (MiB) a resize may give it (0: its size;
    /// records before resizing have none).
    #[serde(default)]
    pub max_vcpus: u32,
    #[serde(default)]
    pub max_memory_mib: u64,
    /// Disk, GiB.
    pub disk_gib: u64,
    pub image: String,
    pub kernel: String,
    pub initrd: String,
    pub cmdline: String,
    /// Prepared as the destination of a live migration, not yet completed.
    #[serde(default)]
    pub incoming: bool,
    /// Its NICs as the VEEM assigned them (none in records written before
    /// service networks).
    #[serde(default)]
    pub nics: Vec<interfaces::vhi::Nic>,
    /// First-boot data for cloud-init: the VEE has a NoCloud seed disk
    /// (`seed.iso`) made from it. Records before it have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<interfaces::vhi::CloudInit>,
}

impl VeeRecord {
    /// Checks the spec: a UUID VEE ID (it names a directory), sizes > 0.
    pub fn from_spec(spec: &VeeSpec) -> Result<Self> {
        check_vee_id(&spec.vee_id)?;
        if spec.vcpus == 0 {
            return Err(HostError::field("vcpus", format!("must be at least 1 (VEE {})", spec.vee_id)).into());
        }
        if spec.memory_mib == 0 {
            return Err(HostError::field("memory_mib", format!("must be at least 1 (VEE {})", spec.vee_id)).into());
        }
        for (i, n) in spec.nics.iter().enumerate() {
            if !crate::network::is_mac(&n.mac) {
                return Err(HostError::field(format!("nics[{i}].mac"), format!("{:?} is not a MAC like 02:00:00:64:00:02", n.mac)).into());
            }
            if n.vni == 0 || n.vni >= 1 << 24 {
                return Err(HostError::field(format!("nics[{i}].vni"), format!("{} is not a 24-bit VNI", n.vni)).into());
            }
            if n.address.parse::<ipnet::Ipv4Net>().is_err() || n.gateway.parse::<std::net::Ipv4Addr>().is_err() {
                return Err(HostError::field(
                    format!("nics[{i}].address"),
                    format!("{:?} via {:?} is not an IPv4 address/prefix and gateway", n.address, n.gateway),
                )
                .into());
            }
            if !(576..=9000).contains(&n.mtu) {
                return Err(HostError::field(format!("nics[{i}].mtu"), format!("{} bytes; must be 576 to 9000", n.mtu)).into());
            }
            if !n.external_address.is_empty() && n.external_address.parse::<std::net::Ipv4Addr>().is_err() {
                return Err(HostError::field(
                    format!("nics[{i}].external_address"),
                    format!("{:?} is not an IPv4 address", n.external_address),
                )
                .into());
            }
            if let Some(p) = n.ports.iter().find(|p| !(1..=65535).contains(*p)) {
                return Err(HostError::field(format!("nics[{i}].ports"), format!("{p} is not a TCP port")).into());
            }
            crate::network::check_members(&format!("nics[{i}]"), &n.domain, &n.members)?;
            crate::network::check_overlay(&format!("nics[{i}]"), n.overlay_port, &n.stretched_to)?;
        }
        if let Some(c) = &spec.cloud_init {
            interfaces::cloud_init::check_wire("cloud_init", c).map_err(|e| match e {
                interfaces::manifest::Error::InvalidManifest { field, reason } => HostError::field(field, reason).into(),
                e => anyhow::Error::from(e),
            })?;
        }
        if spec.image.is_empty() && spec.kernel.is_empty() {
            bail!("VEE {}: needs an `image` or a `kernel` to boot", spec.vee_id);
        }
        Ok(Self {
            format: FORMAT_VERSION,
            vee_id: spec.vee_id.clone(),
            service_id: spec.service_id.clone(),
            vcpus: spec.vcpus,
            memory_mib: spec.memory_mib,
            max_vcpus: spec.max_vcpus,
            max_memory_mib: spec.max_memory_mib,
            disk_gib: spec.disk_gib,
            image: spec.image.clone(),
            kernel: spec.kernel.clone(),
            initrd: spec.initrd.clone(),
            cmdline: spec.cmdline.clone(),
            incoming: false,
            nics: spec.nics.clone(),
            cloud_init: spec.cloud_init.clone(),
        })
    }

    /// Back to the VHI message.
    pub fn to_spec(&self) -> VeeSpec {
        VeeSpec {
            vee_id: self.vee_id.clone(),
            service_id: self.service_id.clone(),
            vcpus: self.vcpus,
            memory_mib: self.memory_mib,
            max_vcpus: self.max_vcpus,
            max_memory_mib: self.max_memory_mib,
            disk_gib: self.disk_gib,
            image: self.image.clone(),
            kernel: self.kernel.clone(),
            initrd: self.initrd.clone(),
            cmdline: self.cmdline.clone(),
            nics: self.nics.clone(),
            cloud_init: self.cloud_init.clone(),
        }
    }
}

/// Errors unless `vee_id` is a UUID (so it is safe as a file name).
pub fn check_vee_id(vee_id: &str) -> Result<()> {
    uuid::Uuid::parse_str(vee_id).map_err(|_| HostError::field("vee_id", format!("{vee_id:?} is not a UUID")))?;
    Ok(())
}

/// The directory tree of VEE records.
pub struct VeeStore {
    root: PathBuf,
}

impl VeeStore {
    pub fn open(state_dir: &Path) -> Result<Self> {
        let root = state_dir.join("vees");
        std::fs::create_dir_all(&root).with_context(|| root.display().to_string())?;
        // Checkpoints' working directories a VEEH killed mid-checkpoint
        // left (a memory state as large as the guest's memory): nothing in
        // them is used again.
        for e in std::fs::read_dir(&root)?.flatten() {
            let _ = std::fs::remove_dir_all(e.path().join("checkpoints"));
        }
        Ok(Self { root })
    }

    pub fn dir(&self, vee_id: &str) -> PathBuf {
        self.root.join(vee_id)
    }

    /// The VEE's private qcow2 overlay.
    pub fn overlay(&self, vee_id: &str) -> PathBuf {
        self.dir(vee_id).join("overlay.qcow2")
    }

    /// The VEE's NoCloud seed disk (ISO 9660, label `cidata`).
    pub fn seed(&self, vee_id: &str) -> PathBuf {
        self.dir(vee_id).join("seed.iso")
    }

    /// The VEE's serial console log.
    pub fn console(&self, vee_id: &str) -> PathBuf {
        self.dir(vee_id).join("console.log")
    }

    /// Writes the record atomically (temp file + rename).
    pub fn save(&self, rec: &VeeRecord) -> Result<()> {
        let dir = self.dir(&rec.vee_id);
        std::fs::create_dir_all(&dir)?;
        let tmp = dir.join("vee.json.tmp");
        let rec = VeeRecord {
            format: FORMAT_VERSION,
            ..rec.clone()
        };
        std::fs::write(&tmp, serde_json::to_vec_pretty(&rec)?)?;
        std::fs::rename(&tmp, dir.join("vee.json"))?;
        Ok(())
    }

    pub fn load(&self, vee_id: &str) -> Result<Option<VeeRecord>> {
        check_vee_id(vee_id)?;
        let path = self.dir(vee_id).join("vee.json");
        match std::fs::read(&path) {
            Ok(b) => {
                let rec: VeeRecord = serde_json::from_slice(&b).with_context(|| path.display().to_string())?;
                interfaces::Error::check_format(path.display().to_string(), rec.format, FORMAT_VERSION)?;
                // Format 0 -> 1: the same fields; the version is written at
                // the next save.
                Ok(Some(rec))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The record of `vee_id`, or an error saying this host has no such VEE.
    pub fn get(&self, vee_id: &str) -> Result<VeeRecord> {
        self.load(vee_id)?.ok_or_else(|| HostError::NotOnHost(vee_id.to_string()).into())
    }

    pub fn list(&self) -> Result<Vec<VeeRecord>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.root)? {
            let name = e?.file_name().to_string_lossy().into_owned();
            match self.load(&name) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => {}
                Err(e) => tracing::warn!(entry = %name, error = %format!("{e:#}"), "VEE record not read"),
            }
        }
        Ok(out)
    }

    /// Removes the VEE's directory and everything in it.
    pub fn remove(&self, vee_id: &str) -> Result<()> {
        check_vee_id(vee_id)?;
        match std::fs::remove_dir_all(self.dir(vee_id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str) -> VeeSpec {
        VeeSpec {
            vee_id: id.into(),
            vcpus: 1,
            memory_mib: 128,
            kernel: "k".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_checkpoints_working_directory_left_behind_goes_at_open() {
        let t = tempfile::tempdir().unwrap();
        let left = t.path().join("vees").join("v").join("checkpoints").join("cp");
        std::fs::create_dir_all(&left).unwrap();
        std::fs::write(left.join("memory.state"), b"state").unwrap();
        std::fs::write(t.path().join("vees").join("v").join("vee.json"), b"{}").unwrap();
        let s = VeeStore::open(t.path()).unwrap();
        assert!(!s.dir("v").join("checkpoints").exists());
        assert!(s.dir("v").join("vee.json").exists(), "the VEE's own files stay");
    }

    #[test]
    fn records_round_trip_and_remove() {
        let t = tempfile::tempdir().unwrap();
        let s = VeeStore::open(t.path()).unwrap();
        let id = uuid::Uuid::new_v4().to_string();
        let r = VeeRecord::from_spec(&spec(&id)).unwrap();
        s.save(&r).unwrap();
        assert_eq!(s.get(&id).unwrap(), r);
        assert_eq!(s.list().unwrap().len(), 1);
        s.remove(&id).unwrap();
        assert!(s.load(&id).unwrap().is_none());
    }

    #[test]
    fn a_record_of_the_previous_format_is_read_and_a_newer_one_refused() {
        let t = tempfile::tempdir().unwrap();
        let s = VeeStore::open(t.path()).unwrap();
        let id = uuid::Uuid::new_v4().to_string();
        std::fs::create_dir_all(s.dir(&id)).unwrap();
        // Format 0, as the previous version wrote it: no `format` field.
        let old = format!(
            r#"{{"vee_id": "{id}", "service_id": "s", "vcpus": 1, "memory_mib": 128, "disk_gib": 1, "image": "", "kernel": "k", "initrd": "", "cmdline": "", "incoming": false}}"#
        );
        std::fs::write(s.dir(&id).join("vee.json"), old).unwrap();
        let r = s.get(&id).unwrap();
        assert_eq!((r.format, r.memory_mib, r.kernel.as_str()), (0, 128, "k"));
        s.save(&r).unwrap();
        assert_eq!(s.get(&id).unwrap().format, FORMAT_VERSION, "written in the current format");

        let newer = std::fs::read_to_string(s.dir(&id).join("vee.json"))
            .unwrap()
            .replace(&format!("\"format\": {FORMAT_VERSION}"), "\"format\": 99");
        std::fs::write(s.dir(&id).join("vee.json"), newer).unwrap();
        let e = format!("{:#}", s.get(&id).unwrap_err());
        assert!(e.contains("has format version 99, newer than this version reads"), "{e}");
        assert!(s.list().unwrap().is_empty(), "not misread");
    }

    #[test]
    fn path_like_ids_and_zero_sizes_are_refused() {
        assert!(VeeRecord::from_spec(&spec("../../etc")).unwrap_err().to_string().contains("vee_id"));
        let id = uuid::Uuid::new_v4().to_string();
        let err = VeeRecord::from_spec(&VeeSpec {
            memory_mib: 0,
            ..spec(&id)
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("memory_mib"), "{err}");
    }
}
