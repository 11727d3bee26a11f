//! How the VMI shows the VEEM's records: VEEs, services, hosts and
//! migrations as VMI messages, each as the caller's role may see it
//! (location unawareness, E §3.4).

use interfaces::vmi::{self, HostStatus, MigrationInfo, ServiceInfo, VeeInfo};

use super::VmiService;
use crate::api::visibility::{redact, Redactor};
use crate::config::Role;
use crate::domain::ServiceState;
use crate::manager::Veem;
use crate::model::{Location, MigrationRec, ServiceRec, VeeRec};

impl VmiService {
    pub(super) fn vee_info(&self, role: &Role, v: &VeeRec) -> VeeInfo {
        // Location unawareness (E §3.4): a provider learns that its VEE is
        // placed, not where; a peer that it runs here, not on which host.
        let location = match (&v.location, role) {
            (Location::Nowhere, _) => "none".into(),
            (_, Role::Provider(_)) => "placed".into(),
            (Location::Site(s), _) => format!("remote ({s})"),
            (Location::Host(h), Role::Operator) => format!("local ({h})"),
            (Location::Host(_), Role::Peer(_)) => "local".into(),
        };
        VeeInfo {
            vee_id: v.id.clone(),
            service_id: v.service_id.clone(),
            component: v.component.clone(),
            instance: v.instance,
            state: vmi::VeeState::from(v.state) as i32,
            location,
            vcpus: v.vcpus,
            memory_mib: v.memory_mib,
            max_vcpus: v.max_vcpus.max(v.vcpus),
            max_memory_mib: v.max_memory_mib.max(v.memory_mib),
            latest_checkpoint: v.latest_checkpoint.clone().unwrap_or_default(),
            update_time: interfaces::time::timestamp_ms(v.updated_ms),
            checkpoint_record: None,
            nics: v.nics.iter().map(crate::model::NicRec::to_wire).collect(),
            image: v.image.clone(),
            latest_checkpoint_replication: 0,
        }
    }

    /// Sets `info`'s `latest_checkpoint_replication` from VEE `v`'s latest
    /// checkpoint's record (GetVee, VeeAction: a read per VEE, which the
    /// lists do not make), for the operator and peers: a provider learns
    /// nothing of sites (E §3.4). Errors: the store cannot be read.
    pub(super) fn latest_checkpoint_replication(&self, role: &Role, info: &mut VeeInfo, v: &VeeRec) -> Result<(), tonic::Status> {
        let Some(id) = v.latest_checkpoint.as_ref().filter(|_| !matches!(role, Role::Provider(_))) else {
            return Ok(());
        };
        let cp: Option<crate::model::CheckpointRec> = self
            .veem
            .core
            .store
            .get(crate::store::Tree::Checkpoints, id)
            .map_err(crate::api::status::status)?;
        if let Some(cp) = cp {
            info.latest_checkpoint_replication = vmi::CheckpointReplication::from(cp.replication.state) as i32;
        }
        Ok(())
    }

    /// [`host_status`], for the VMI's ListHosts.
    pub(crate) fn host_status(&self) -> Vec<HostStatus> {
        host_status(&self.veem)
    }

    pub(super) fn service_info(&self, role: &Role, s: &ServiceRec) -> ServiceInfo {
        let recs: Vec<VeeRec> = s.vees.iter().filter_map(|id| self.veem.core.vee(id).ok()).collect();
        let state = vmi::ServiceState::from(ServiceState::of(recs.iter().map(|v| v.state)));
        let vees: Vec<VeeInfo> = recs.iter().map(|v| self.vee_info(role, v)).collect();
        ServiceInfo {
            service_id: s.id.clone(),
            name: s.name.clone(),
            provider: s.provider.clone(),
            state: state as i32,
            vees,
            guarantee: vmi::GuaranteeLevel::from(s.guarantee) as i32,
        }
    }
}

/// A migration as `r` may see it: without a redactor (the operator) as
/// recorded; otherwise its ends and free text redacted.
pub(super) fn migration_info(m: &MigrationRec, r: Option<&Redactor>) -> MigrationInfo {
    MigrationInfo {
        migration_id: m.id.clone(),
        vee_id: m.vee_id.clone(),
        source: redact(r, &m.from),
        destination: redact(r, &m.to.to_string()),
        reason: redact(r, &m.reason),
        state: vmi::MigrationState::from(m.state) as i32,
        decided_by: redact(r, &m.decided_by),
        detail: redact(r, &m.detail),
        total: interfaces::time::duration_ms(m.total_ms),
        downtime: interfaces::time::duration_ms(m.downtime_ms),
        create_time: interfaces::time::timestamp_ms(m.created_ms),
    }
}

/// A consumer's usage SLA as ListUsageLimits shows it.
pub(super) fn usage_limit_info(l: crate::workflows::accounting::UsageLimitView) -> vmi::UsageLimitInfo {
    use crate::config::UsageLimitEntry;
    let amount = |r: crate::planner::Resources| {
        Some(vmi::Amount {
            vcpus: r.vcpus,
            memory_mib: r.memory_mib,
            disk_gib: r.disk_gib,
        })
    };
    let mut info = vmi::UsageLimitInfo {
        consumer: l.consumer,
        held: amount(l.held),
        ..Default::default()
    };
    match l.limit {
        UsageLimitEntry::Fixed { limit } => {
            info.kind = vmi::UsageLimitKind::Fixed as i32;
            info.limit = amount(limit);
        }
        UsageLimitEntry::Extensible { limit } => {
            info.kind = vmi::UsageLimitKind::Extensible as i32;
            info.limit = amount(limit);
        }
        UsageLimitEntry::Commitment {
            epoch_limit,
            epoch,
            burst_limit,
            burst,
        } => {
            info.kind = vmi::UsageLimitKind::Commitment as i32;
            info.limit = amount(epoch_limit);
            info.burst_limit = amount(burst_limit);
            info.epoch = interfaces::time::duration_s(epoch.as_secs());
            info.burst = interfaces::time::duration_s(burst.as_secs());
            info.epoch_avg = amount(l.epoch_avg);
            info.burst_avg = amount(l.burst_avg);
        }
    }
    info
}

/// A service's usage and violations as GetUsage answers them.
pub(super) fn usage_report(service_id: &str, u: crate::workflows::accounting::UsageReport) -> vmi::UsageReport {
    vmi::UsageReport {
        service_id: service_id.into(),
        records: u.records.iter().map(crate::wire::peer::usage_record).collect(),
        violations: u
            .violations
            .iter()
            .map(|v| vmi::SlaViolation {
                vee_id: v.vee_id.clone(),
                term: v.term.clone(),
                start_time: interfaces::time::timestamp_s(v.start_unix),
                end_time: interfaces::time::timestamp_s(v.end_unix),
                penalty: v.penalty,
            })
            .collect(),
    }
}

/// Every VEEH of the site, in configuration order: health, the capacity
/// it offers (vCPUs, MiB, GiB), what the planner reserves on it in the
/// current slot, the VEEs placed on it and its accelerator. A host that
/// never answered shows zero capacity.
pub(crate) fn host_status(veem: &Veem) -> Vec<HostStatus> {
    let now = veem.core.now_slot();
    let placed = veem.core.vees_where(|v| v.host().is_some() && v.state.is_live());
    let p = veem.core.planner.lock().unwrap();
    veem.core
        .hosts
        .names()
        .into_iter()
        .map(|h| {
            let cap = p.host(&h).map(|s| s.capacity).unwrap_or_default();
            let used = p.host_usage(&h, now).unwrap_or_default();
            let (health, missed_heartbeats) = crate::wire::host_health(veem.core.hosts.health(&h));
            HostStatus {
                health: health as i32,
                missed_heartbeats,
                vcpus: cap.vcpus,
                memory_mib: cap.memory_mib,
                disk_gib: cap.disk_gib,
                used_vcpus: used.vcpus,
                used_memory_mib: used.memory_mib,
                used_disk_gib: used.disk_gib,
                vees: placed.iter().filter(|v| v.host() == Some(h.as_str())).count() as u32,
                accel: p.host(&h).map(|s| s.profile.accel.clone()).unwrap_or_default(),
                last_error: veem.core.hosts.last_error(&h).unwrap_or_default(),
                cpu_load: p.measured_load(&h).unwrap_or_default(),
                name: h,
            }
        })
        .collect()
}
