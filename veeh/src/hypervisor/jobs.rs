//! A domain's jobs: its live migration (timed in
//! `veeh_libvirt_call_duration_seconds` as `migrate`), the progress of the
//! job under way, and the statistics of the last one.

use std::time::Instant;

use anyhow::{Context, Result};
use virt::connect::Connect;
use virt::domain::{Domain, MigrateParameters};
use virt::sys;

use super::Hypervisor;
use crate::domain_xml::domain_name;

impl Hypervisor {
    /// Live migration with incremental storage copy to `dest_uri`
    /// (`VIR_MIGRATE_LIVE | PEER2PEER | NON_SHARED_INC` with dest XML,
    /// migration URI and disks URI: lab notes, "Live migration between the
    /// sites"). Blocks until done; on failure libvirt keeps the domain
    /// running here. `bandwidth_mib_s` 0 means unlimited.
    #[allow(clippy::too_many_arguments)]
    pub fn migrate(
        &self,
        vee_id: &str,
        dest_uri: &str,
        dest_xml: &str,
        migration_uri: &str,
        disks_uri: &str,
        max_downtime_ms: u64,
        bandwidth_mib_s: u64,
    ) -> Result<()> {
        let d = self.with("lookup", |c| self.owned(c, vee_id)?.ok_or_else(|| self.no_domain(vee_id).into()))?;
        if max_downtime_ms > 0 {
            let _ = d.migrate_set_max_downtime(max_downtime_ms, 0);
        }
        let params = MigrateParameters {
            dest_xml: Some(dest_xml.to_string()),
            uri: Some(migration_uri.to_string()),
            disks_uri: Some(disks_uri.to_string()),
            migrate_disks: vec!["vda".into()],
            bandwidth: (bandwidth_mib_s > 0).then_some(bandwidth_mib_s),
            ..Default::default()
        };
        let started = Instant::now();
        let migrated = d.migrate_to_uri3(
            Some(dest_uri),
            params,
            sys::VIR_MIGRATE_LIVE | sys::VIR_MIGRATE_PEER2PEER | sys::VIR_MIGRATE_NON_SHARED_INC,
        );
        self.metrics.libvirt_call("migrate", started.elapsed());
        migrated
            .map_err(|e| match e.code().is(virt::error::ErrorNumber::NoDomain) {
                true => anyhow::Error::new(self.no_domain(vee_id)),
                false => anyhow::Error::new(e),
            })
            .with_context(|| format!("migrate VEE {vee_id} to {dest_uri}"))?;
        Ok(())
    }

    /// Aborts the job under way on `vee_id`'s domain (`virDomainAbortJob`):
    /// a live migration out stops and the domain runs on here. Errors: no
    /// such domain, no job to abort, or a job past the point of no return
    /// (libvirt's; the migration then ends as it would have).
    pub fn abort_job(&self, vee_id: &str) -> Result<()> {
        self.with("abort_job", |c| {
            let d = self.owned(c, vee_id)?.ok_or_else(|| anyhow::Error::new(self.no_domain(vee_id)))?;
            // SAFETY: a valid domain pointer, alive for the call.
            let rc = unsafe { sys::virDomainAbortJob(d.as_ptr()) };
            if rc < 0 {
                return Err(anyhow::Error::new(virt::error::Error::last_error()))
                    .with_context(|| format!("abort the job of VEE {vee_id}"));
            }
            Ok(())
        })
    }

    /// Progress of the job running on `vee_id`'s domain: (processed,
    /// remaining, total) bytes; `None` when no job runs.
    pub fn job_progress(&self, vee_id: &str) -> Option<(u64, u64, u64)> {
        let c = self.conn.read().ok()?;
        let d = c.lookup_domain_by_name(&domain_name(vee_id)).ok()?;
        let s = job_stats(&d, 0)?;
        if s.r#type == sys::VIR_DOMAIN_JOB_NONE as i32 {
            return None;
        }
        Some((
            s.data_processed.unwrap_or(0),
            s.data_remaining.unwrap_or(0),
            s.data_total.unwrap_or(0),
        ))
    }
}

/// `virDomainGetJobStats` without the virt crate's wrapper, which builds a
/// Vec from libvirt's NULL parameter list when a job has no statistics (an
/// abort: "NonNull::new_unchecked requires that the pointer is non-null").
pub(super) fn job_stats(d: &Domain, flags: u32) -> Option<virt::domain::JobStats> {
    let mut kind: std::os::raw::c_int = 0;
    let mut params: sys::virTypedParameterPtr = std::ptr::null_mut();
    let mut n: std::os::raw::c_int = 0;
    // SAFETY: valid domain pointer and out pointers; libvirt allocates
    // `params` with malloc (the allocator Vec uses here) or leaves it NULL.
    let rc = unsafe { sys::virDomainGetJobStats(d.as_ptr(), &mut kind, &mut params, &mut n, flags) };
    if rc < 0 {
        return None;
    }
    let v = if params.is_null() || n <= 0 {
        Vec::new()
    } else {
        unsafe { Vec::from_raw_parts(params, n as usize, n as usize) }
    };
    Some((kind, v).into())
}

/// Downtime in ms of the last completed job (incoming migration) of domain
/// `vee_id` at `uri`.
pub fn completed_job_downtime(uri: &str, vee_id: &str) -> Option<u64> {
    let c = Connect::open(Some(uri)).ok()?;
    let d = c.lookup_domain_by_name(&domain_name(vee_id)).ok()?;
    let r = job_stats(&d, sys::VIR_DOMAIN_JOB_STATS_COMPLETED).and_then(|s| s.downtime);
    drop(d);
    std::mem::forget(c);
    r
}
