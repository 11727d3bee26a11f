//! The VEEM's records (DESIGN.md §4): services, VEEs, checkpoints,
//! migration proposals, usage records, SLA violations and events. All are
//! persisted in sled (see `store`).

mod schedule;

use std::net::Ipv4Addr;

use interfaces::manifest::{GuaranteeLevel, MigrationPolicy, NetworkKind};
use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::domain::StateMachine;
pub use crate::domain::{MigrationState, ServiceTerms, VeeState};
pub use schedule::START_GRACE_S;

/// A service deployed from a manifest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServiceRec {
    pub id: String,
    pub name: String,
    /// The service provider (for a service run for a peer: the peer site).
    pub provider: String,
    pub manifest_toml: String,
    /// Its SLA and constraints, parsed from the manifest at admission
    /// (`None`: a service run here for a peer site, whose manifest stays
    /// there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terms: Option<ServiceTerms>,
    pub guarantee: GuaranteeLevel,
    pub penalty_per_hour: f64,
    pub created_ms: i64,
    pub vees: Vec<String>,
    /// Set when this site runs the service for a primary site.
    #[serde(default)]
    pub for_peer: Option<String>,
    /// Its networks, with what the site assigned them (none before
    /// service networks were).
    #[serde(default)]
    pub networks: Vec<NetworkRec>,
    /// The host that keeps its networks' home part (gateway, DHCP/DNS,
    /// external addresses) while all its VEEs run at peer sites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<String>,
}

/// A service network as the site assigned it at admission.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkRec {
    /// The name in the manifest.
    pub name: String,
    pub kind: NetworkKind,
    /// Its subnet (from the site's pool, or the manifest's `cidr`).
    pub cidr: Ipv4Net,
    /// The first host address of the subnet.
    pub gateway: Ipv4Addr,
    /// Site-unique: the bridge and VXLAN ID on every host.
    pub vni: u32,
    /// External networks: the TCP ports forwarded.
    #[serde(default)]
    pub ports: Vec<u16>,
}

/// One NIC of a VEE: the VHI `Nic` as the VEEM keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NicRec {
    pub network: String,
    pub vni: u32,
    /// Locally administered, site-unique: `02:` + the VNI (3 bytes) + the
    /// address's offset in the subnet (2 bytes).
    pub mac: String,
    /// The VEE's address with the subnet's prefix.
    pub address: Ipv4Net,
    pub gateway: Ipv4Addr,
    /// Bytes.
    pub mtu: u32,
    /// External networks: the VEE's address outside, and the TCP ports
    /// forwarded to it.
    #[serde(default)]
    pub external: Option<Ipv4Addr>,
    #[serde(default)]
    pub ports: Vec<u16>,
    /// A VEE this site runs for a primary site: the network's member table
    /// as the primary sent it (VNIs, addresses and VTEPs are the
    /// primary's; this site has no other view of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub primary_members: Vec<interfaces::vhi::NetworkMember>,
}

impl NicRec {
    /// The VHI description (the inverse of [`NicRec::from_wire`]), without
    /// the network's member table ([`Networks::spec_of`](crate::steps::networks::Networks::spec_of) adds it).
    pub fn to_wire(&self) -> interfaces::vhi::Nic {
        interfaces::vhi::Nic {
            network: self.network.clone(),
            vni: self.vni,
            mac: self.mac.clone(),
            address: self.address.to_string(),
            gateway: self.gateway.to_string(),
            mtu: self.mtu,
            external_address: self.external.map(|a| a.to_string()).unwrap_or_default(),
            ports: self.ports.iter().map(|p| u32::from(*p)).collect(),
            ..Default::default()
        }
    }

    /// The record of a VHI `Nic` (from a peer: checked, not trusted);
    /// errors name the field.
    pub fn from_wire(i: usize, n: &interfaces::vhi::Nic) -> Result<Self, crate::error::VeemError> {
        let field = |f: &str| format!("nics[{i}].{f}");
        let bad = |f: &str, why: String| crate::error::VeemError::field(field(f), why);
        Ok(NicRec {
            network: n.network.clone(),
            vni: n.vni,
            mac: n.mac.clone(),
            address: n
                .address
                .parse()
                .map_err(|_| bad("address", format!("{:?} is not an IPv4 address/prefix", n.address)))?,
            gateway: n
                .gateway
                .parse()
                .map_err(|_| bad("gateway", format!("{:?} is not an IPv4 address", n.gateway)))?,
            mtu: n.mtu,
            external: match n.external_address.as_str() {
                "" => None,
                a => Some(
                    a.parse()
                        .map_err(|_| bad("external_address", format!("{a:?} is not an IPv4 address")))?,
                ),
            },
            ports: n
                .ports
                .iter()
                .map(|p| u16::try_from(*p).map_err(|_| bad("ports", format!("{p} is not a TCP port"))))
                .collect::<Result<_, _>>()?,
            primary_members: vec![],
        })
    }
}

/// Where a VEE runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "at")]
pub enum Location {
    /// Not placed yet.
    Nowhere,
    /// On a host of this site.
    Host(String),
    /// At a peer site (the primary site does not know the host there).
    Site(String),
}

/// A VEE recovered away from `site`, whose copy there must be destroyed
/// when the site answers again.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FenceRec {
    pub vee_id: String,
    pub site: String,
}

/// One VEE (one VM).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VeeRec {
    pub id: String,
    pub service_id: String,
    pub component: String,
    pub instance: u32,
    /// vCPUs.
    pub vcpus: u32,
    /// MiB.
    pub memory_mib: u64,
    /// The most vCPUs and MiB a resize may give it while it runs (the
    /// component's `max_vcpus`, `max_memory_mib`; 0 in records before
    /// them: its size).
    #[serde(default)]
    pub max_vcpus: u32,
    #[serde(default)]
    pub max_memory_mib: u64,
    /// GiB.
    pub disk_gib: u64,
    pub image: String,
    pub kernel: String,
    pub initrd: String,
    pub cmdline: String,
    pub state: VeeState,
    pub location: Location,
    /// Checkpoint period in seconds; `None`: on demand only. An `auto`
    /// interval follows the measured cost ([`VeeRec::checkpoint_cost_s`]).
    pub checkpoint_interval_s: Option<u64>,
    /// The cost c of one checkpoint (H eq. 3.12-3.16) as measured here: the
    /// wall time of its VHI Checkpoint calls (snapshot and push), smoothed
    /// ([`crate::workflows::lifecycle::smoothed_cost`]). `None` until the first one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_cost_s: Option<f64>,
    /// Its manifest has no window: the reservation runs for the planning
    /// horizon and the VEEM renews it while the VEE lives
    /// (`crate::windows`).
    #[serde(default)]
    pub open_ended: bool,
    pub last_checkpoint_ms: Option<i64>,
    pub latest_checkpoint: Option<String>,
    pub guarantee: GuaranteeLevel,
    pub migration_policy: MigrationPolicy,
    pub max_downtime_ms: u64,
    /// Reserved window, Unix seconds.
    pub window_start_unix: i64,
    pub window_end_unix: i64,
    /// How long before its window the VEE is deployed (s): the
    /// initialization its reservation is padded for ([`Padding`]), so that
    /// it runs when the window opens.
    ///
    /// [`Padding`]: crate::planner::Padding
    #[serde(default)]
    pub init_lead_s: i64,
    pub updated_ms: i64,
    /// Set when this site runs the VEE for a primary site.
    #[serde(default)]
    pub for_peer: Option<String>,
    /// Its NICs in guest order (none before service networks were).
    #[serde(default)]
    pub nics: Vec<NicRec>,
    /// Its stays at peer sites, oldest first (at most [`MAX_STAYS`]): what
    /// each may account for. Kept by the VEEM's writes of the record
    /// ([`Core::save_vee`](crate::core::Core::save_vee)), not by the caller.
    #[serde(default)]
    pub stays: Vec<Stay>,
    /// Outages so far (its host failed), against the SLA's `max_outages`.
    #[serde(default)]
    pub outages: u32,
    /// When its current outage began (Unix ms): set when its host failed,
    /// cleared when it runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_since_ms: Option<i64>,
    /// When a rolling update last booted it from another image (Unix ms):
    /// it ran before, so deploying again is no breach of its window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_since_ms: Option<i64>,
    /// First-boot data for cloud-init: the manifest's `user_data` and
    /// `ssh_authorized_keys` with the VEE's host name; its VEEH gives the
    /// VEE a NoCloud seed disk of it. `None`: the manifest gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<interfaces::vhi::CloudInit>,
}

/// A VEE's stay at a peer site, in Unix seconds: from when this site
/// recorded it there until it recorded it elsewhere (`None`: still
/// there). A peer's usage records must fall within one of its stays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stay {
    pub site: String,
    pub from_unix: i64,
    pub until_unix: Option<i64>,
}

/// Stays kept per VEE record (the oldest are dropped).
pub const MAX_STAYS: usize = 64;

impl VeeRec {
    /// Whether it is a background VEE displaced to make room: suspended
    /// and placed nowhere (a VEE a caller suspended stays on its host).
    pub fn is_displaced(&self) -> bool {
        self.state == VeeState::Suspended && self.location == Location::Nowhere
    }

    /// This record's stays once it is recorded where it is now, at `now`
    /// (Unix seconds): `old`'s stays (the record as last written; without
    /// one, this record's), the open stay closed when it is no longer at
    /// that peer site and a new one opened when it is at a peer site
    /// without an open stay there.
    pub fn stays_after(&self, old: Option<&VeeRec>, now: i64) -> Vec<Stay> {
        let mut stays = old.map_or_else(|| self.stays.clone(), |o| o.stays.clone());
        let is = match &self.location {
            Location::Site(s) => Some(s),
            _ => None,
        };
        let open = stays.last_mut().filter(|s| s.until_unix.is_none());
        if open.as_ref().map(|s| &s.site) == is {
            return stays;
        }
        if let Some(open) = open {
            open.until_unix = Some(now);
        }
        if let Some(site) = is {
            stays.push(Stay {
                site: site.clone(),
                from_unix: now,
                until_unix: None,
            });
        }
        let extra = stays.len().saturating_sub(MAX_STAYS);
        stays.drain(..extra);
        stays
    }
}

impl VeeRec {
    /// A record of the VEE `s` describes (the one conversion from the VHI
    /// description; [`VeeRec::spec`] is its inverse), with the rest unset:
    /// state pending, placed nowhere, one instance of a component `vee`,
    /// no checkpoints, guarantee `standard`, migration policy `site`.
    pub fn from_spec(s: &interfaces::vhi::VeeSpec, now_ms: i64) -> Result<Self, crate::error::VeemError> {
        Ok(VeeRec {
            id: s.vee_id.clone(),
            service_id: s.service_id.clone(),
            component: "vee".into(),
            instance: 0,
            vcpus: s.vcpus,
            memory_mib: s.memory_mib,
            max_vcpus: s.max_vcpus,
            max_memory_mib: s.max_memory_mib,
            disk_gib: s.disk_gib,
            image: s.image.clone(),
            kernel: s.kernel.clone(),
            initrd: s.initrd.clone(),
            cmdline: s.cmdline.clone(),
            state: VeeState::Pending,
            location: Location::Nowhere,
            checkpoint_interval_s: None,
            last_checkpoint_ms: None,
            latest_checkpoint: None,
            guarantee: GuaranteeLevel::Standard,
            migration_policy: MigrationPolicy::Site,
            max_downtime_ms: 0,
            window_start_unix: 0,
            window_end_unix: 0,
            updated_ms: now_ms,
            for_peer: None,
            nics: s
                .nics
                .iter()
                .enumerate()
                .map(|(i, n)| NicRec::from_wire(i, n))
                .collect::<Result<_, _>>()?,
            stays: vec![],
            outages: 0,
            down_since_ms: None,
            image_since_ms: None,
            checkpoint_cost_s: None,
            open_ended: true,
            init_lead_s: 0,
            cloud_init: match &s.cloud_init {
                Some(c) => {
                    interfaces::cloud_init::check_wire("cloud_init", c).map_err(|e| match e {
                        interfaces::manifest::Error::InvalidManifest { field, reason } => crate::error::VeemError::field(field, reason),
                        e => crate::error::VeemError::field("cloud_init", e),
                    })?;
                    Some(c.clone())
                }
                None => None,
            },
        })
    }

    /// The VHI spec of this VEE.
    pub fn spec(&self) -> interfaces::vhi::VeeSpec {
        interfaces::vhi::VeeSpec {
            vee_id: self.id.clone(),
            service_id: self.service_id.clone(),
            vcpus: self.vcpus,
            memory_mib: self.memory_mib,
            disk_gib: self.disk_gib,
            image: self.image.clone(),
            kernel: self.kernel.clone(),
            initrd: self.initrd.clone(),
            cmdline: self.cmdline.clone(),
            nics: self.nics.iter().map(NicRec::to_wire).collect(),
            cloud_init: self.cloud_init.clone(),
            max_vcpus: self.max_vcpus,
            max_memory_mib: self.max_memory_mib,
        }
    }

    pub fn host(&self) -> Option<&str> {
        match &self.location {
            Location::Host(h) => Some(h),
            _ => None,
        }
    }
}

/// A whole-VM checkpoint: the VHI record (prost-encoded), its validity
/// and where it is held (its replication, `crate::domain::replication`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckpointRec {
    pub id: String,
    pub vee_id: String,
    pub taken_ms: i64,
    pub valid: bool,
    /// `interfaces::vhi::CheckpointRecord`, prost-encoded, hex.
    pub record_hex: String,
    /// Whether the repositories that need it hold it (database format 6;
    /// older records are given theirs when the database is migrated).
    #[serde(default)]
    pub replication: crate::domain::ReplicationRec,
}

impl CheckpointRec {
    /// The record of `r`, brought to this version's format first (a peer
    /// of an older version sends format 1).
    pub fn new(r: &interfaces::vhi::CheckpointRecord) -> Self {
        use prost::Message;
        let mut r = r.clone();
        r.upgrade();
        Self {
            id: r.checkpoint_id.clone(),
            vee_id: r.vee_id.clone(),
            taken_ms: interfaces::time::ms_of(&r.take_time),
            valid: true,
            record_hex: hex::encode(r.encode_to_vec()),
            replication: Default::default(),
        }
    }

    /// [`CheckpointRec::new`], in replication state `replication`.
    pub fn with_replication(r: &interfaces::vhi::CheckpointRecord, replication: crate::domain::ReplicationRec) -> Self {
        Self {
            replication,
            ..Self::new(r)
        }
    }

    /// The image its VEE ran (its spec's), when the record names one.
    pub fn image(&self) -> Option<String> {
        self.record().ok()?.spec.map(|s| s.image).filter(|i| !i.is_empty())
    }

    /// The VHI record, in this version's format; errors (naming the
    /// checkpoint) when the stored text is not hex of a record, or the
    /// record is of a newer format.
    pub fn record(&self) -> anyhow::Result<interfaces::vhi::CheckpointRecord> {
        use anyhow::Context;
        use prost::Message;
        let bytes = hex::decode(&self.record_hex).with_context(|| format!("checkpoint {}: field `record_hex`", self.id))?;
        let mut r =
            interfaces::vhi::CheckpointRecord::decode(bytes.as_slice()).with_context(|| format!("checkpoint {}: record", self.id))?;
        r.check_format()?;
        r.upgrade();
        Ok(r)
    }
}

/// A migration proposal and its fate (DESIGN.md §4).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MigrationRec {
    pub id: String,
    pub vee_id: String,
    pub from: String,
    /// Where the VEE goes (stored as `host:NAME`, `site:ID` or
    /// `site-of:ID`).
    pub to: crate::domain::migration::Dest,
    pub reason: String,
    pub state: MigrationState,
    pub decided_by: String,
    pub detail: String,
    pub total_ms: u64,
    pub downtime_ms: u64,
    pub created_ms: i64,
    /// The migrations of the affinity set this one moves with, in the
    /// order they run, this one included (`crate::workflows::migration::affinity`);
    /// empty for a VEE that moves alone.
    #[serde(default)]
    pub set: Vec<String>,
}

impl MigrationRec {
    /// Moves the migration to state `to` if its transition table allows it.
    pub fn advance(&mut self, to: MigrationState) -> Result<(), crate::domain::InvalidTransition> {
        self.state = self.state.transition(&self.id, to)?;
        Ok(())
    }
}

/// A usage record (E PII §V, Req. 1).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct UsageRec {
    pub record_id: String,
    /// ABC ID = service ID at the primary site.
    pub abc_id: String,
    pub vee_id: String,
    /// Executing site first; each hop appends its own.
    pub site_chain: Vec<String>,
    pub start_unix: i64,
    pub end_unix: i64,
    pub cpu_seconds: f64,
    pub memory_mib_seconds: f64,
    pub disk_bytes: u64,
    pub net_bytes: u64,
    /// Pushed to the primary site (records of VEEs run for a peer).
    #[serde(default)]
    pub sent: bool,
    /// A VEE run for a peer: its KPIs at the end of the interval, each
    /// with when its guest's report was read (ms), for the primary's
    /// elasticity rules (issue 40).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub kpis: std::collections::BTreeMap<String, (f64, i64)>,
}

/// An SLA violation with its penalty.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ViolationRec {
    pub id: String,
    pub service_id: String,
    pub vee_id: String,
    pub term: String,
    pub start_unix: i64,
    pub end_unix: i64,
    pub penalty: f64,
}

/// An event (a state transition or an action), persisted.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventRec {
    pub vee_id: String,
    pub service_id: String,
    pub kind: String,
    pub detail: String,
    pub at_ms: i64,
    /// Its place in the event log: its key there (increasing with every
    /// event appended), not stored in the value; 0 until it is appended.
    #[serde(skip)]
    pub seq: u64,
}

/// Errors unless `value` is a UUID; names the field.
pub fn check_uuid(field: &str, value: &str) -> Result<(), crate::error::VeemError> {
    uuid::Uuid::parse_str(value).map_err(|_| crate::error::VeemError::field(field, format!("{value:?} is not a UUID")))?;
    Ok(())
}

#[cfg(test)]
mod tests;
