//! The peer calls' domain values ([`crate::domain::peer`]) and usage
//! records as the VMI's messages, and back: the one conversion each way,
//! used by the VMI client of a peer (`ports::GrpcPeer`, and the simulation's
//! in-process peers through it) and by the VMI server's handlers
//! (`api::server`). A message read here is a peer's or client's word: a
//! field it must carry and does not is an error naming the field.

use interfaces::time::{ms_of, ms_of_duration, s_of, timestamp_ms, timestamp_s};
use interfaces::vmi;

use crate::domain::peer::{Incoming, IncomingVee, MigrationOutcome, RemoteVee, SpareRequest, UsageReceipt};
use crate::error::VeemError;
use crate::model::UsageRec;

/// PrepareIncoming's request of `v`.
pub fn prepare_incoming(v: IncomingVee) -> vmi::PrepareIncomingRequest {
    let (start_fresh, restore_from) = match v.how {
        Incoming::Boot => (true, None),
        Incoming::Restore(cp) => (true, Some(*cp)),
        Incoming::Migration => (false, None),
    };
    vmi::PrepareIncomingRequest {
        spec: Some(v.spec),
        primary_site: v.primary_site,
        guarantee: vmi::GuaranteeLevel::from(v.guarantee) as i32,
        start_fresh,
        restore_from,
    }
}

/// The VEE a PrepareIncoming request hands over. Errors: no `spec`, an
/// unset `guarantee`.
pub fn incoming_vee(r: vmi::PrepareIncomingRequest) -> Result<IncomingVee, VeemError> {
    let spec = r.spec.ok_or_else(|| VeemError::field("spec", "is required"))?;
    let guarantee = super::guarantee("guarantee", r.guarantee)?;
    let how = match (r.start_fresh, r.restore_from) {
        (true, Some(cp)) => Incoming::Restore(Box::new(cp)),
        (true, None) => Incoming::Boot,
        (false, _) => Incoming::Migration,
    };
    Ok(IncomingVee {
        spec,
        primary_site: r.primary_site,
        guarantee,
        how,
    })
}

/// What a peer's VeeInfo says of a VEE (an unset or unknown state or
/// replication is `None`: the caller decides).
pub fn remote_vee(info: vmi::VeeInfo) -> RemoteVee {
    RemoteVee {
        state: super::vee_state("state", info.state).ok(),
        checkpoint: info.checkpoint_record,
        checkpoint_replication: super::replication("latest_checkpoint_replication", info.latest_checkpoint_replication).ok(),
    }
}

/// ReserveSpare's request of `s`.
pub fn reserve_spare(s: &SpareRequest) -> vmi::ReserveSpareRequest {
    vmi::ReserveSpareRequest {
        vee_id: s.vee_id.clone(),
        vcpus: s.vcpus,
        memory_mib: s.memory_mib,
        disk_gib: s.disk_gib,
        start_time: timestamp_s(s.start_unix),
        end_time: timestamp_s(s.end_unix),
    }
}

/// The spare a ReserveSpare request asks for. Errors: no `start_time` or
/// `end_time`.
pub fn spare_request(r: vmi::ReserveSpareRequest) -> Result<SpareRequest, VeemError> {
    for (field, t) in [("start_time", &r.start_time), ("end_time", &r.end_time)] {
        if t.is_none() {
            return Err(VeemError::field(field, "is required"));
        }
    }
    Ok(SpareRequest {
        start_unix: s_of(&r.start_time),
        end_unix: s_of(&r.end_time),
        vee_id: r.vee_id,
        vcpus: r.vcpus,
        memory_mib: r.memory_mib,
        disk_gib: r.disk_gib,
    })
}

/// ReserveSpare's answer: the hold lapses at `confirm_by_ms` (Unix ms)
/// unless confirmed.
pub fn spare_held(confirm_by_ms: i64) -> vmi::ReserveSpareResponse {
    vmi::ReserveSpareResponse {
        confirm_by: timestamp_ms(confirm_by_ms),
    }
}

/// When a peer's ReserveSpare answer says the hold lapses (Unix ms).
pub fn spare_confirm_by(r: &vmi::ReserveSpareResponse) -> i64 {
    ms_of(&r.confirm_by)
}

/// How a SendVee the peer ran ended, from its MigrationInfo.
pub fn migration_outcome(i: vmi::MigrationInfo) -> MigrationOutcome {
    match super::migration_state("state", i.state) {
        Ok(crate::domain::MigrationState::Done) => MigrationOutcome::Done {
            total_ms: ms_of_duration(&i.total),
            downtime_ms: ms_of_duration(&i.downtime),
        },
        state => MigrationOutcome::NotDone {
            state: state.ok(),
            detail: i.detail,
        },
    }
}

/// A usage record as the VMI carries it.
pub fn usage_record(u: &UsageRec) -> vmi::UsageRecord {
    vmi::UsageRecord {
        record_id: u.record_id.clone(),
        abc_id: u.abc_id.clone(),
        vee_id: u.vee_id.clone(),
        site_chain: u.site_chain.clone(),
        start_time: timestamp_s(u.start_unix),
        end_time: timestamp_s(u.end_unix),
        cpu_seconds: u.cpu_seconds,
        memory_mib_seconds: u.memory_mib_seconds,
        disk_bytes: u.disk_bytes,
        net_bytes: u.net_bytes,
        kpis: u
            .kpis
            .iter()
            .map(|(name, (value, read_ms))| interfaces::vhi::Kpi {
                name: name.clone(),
                value: *value,
                time: interfaces::time::timestamp_ms(*read_ms),
            })
            .collect(),
        component: String::new(),
    }
}

/// A usage record a peer pushed, as it says it (`sent`, this site's own
/// bookkeeping, is left for the receiver to set); checked by
/// `Accounting::usage_refusal`. Errors with the record's ID and why it
/// cannot be read: no `start_time` or `end_time`.
pub fn pushed_usage(r: vmi::UsageRecord) -> Result<UsageRec, (String, String)> {
    if r.start_time.is_none() || r.end_time.is_none() {
        return Err((r.record_id, "fields `start_time`, `end_time`: both are required".into()));
    }
    Ok(UsageRec {
        start_unix: s_of(&r.start_time),
        end_unix: s_of(&r.end_time),
        record_id: r.record_id,
        abc_id: r.abc_id,
        vee_id: r.vee_id,
        site_chain: r.site_chain,
        cpu_seconds: r.cpu_seconds,
        memory_mib_seconds: r.memory_mib_seconds,
        disk_bytes: r.disk_bytes,
        net_bytes: r.net_bytes,
        sent: false,
        kpis: r
            .kpis
            .iter()
            .map(|k| (k.name.clone(), (k.value, interfaces::time::ms_of(&k.time))))
            .collect(),
    })
}

/// PushUsage's answer of `r`.
pub fn usage_receipt(r: UsageReceipt) -> vmi::PushUsageResponse {
    vmi::PushUsageResponse {
        accepted: r.accepted,
        duplicates: r.duplicates,
        refused: r.refused,
        reasons: r.reasons,
    }
}

/// What a primary's PushUsage answer says.
pub fn receipt_of(r: vmi::PushUsageResponse) -> UsageReceipt {
    UsageReceipt {
        accepted: r.accepted,
        duplicates: r.duplicates,
        refused: r.refused,
        reasons: r.reasons,
    }
}

#[cfg(test)]
mod tests {
    use interfaces::manifest::GuaranteeLevel;

    use super::*;

    #[test]
    fn an_incoming_vee_round_trips_each_way_it_can_be_taken() {
        let cp = interfaces::vhi::CheckpointRecord {
            checkpoint_id: "c1".into(),
            ..Default::default()
        };
        for how in [Incoming::Boot, Incoming::Restore(Box::new(cp)), Incoming::Migration] {
            let v = IncomingVee {
                spec: interfaces::vhi::VeeSpec {
                    vee_id: "v".into(),
                    ..Default::default()
                },
                primary_site: "site-a".into(),
                guarantee: GuaranteeLevel::Full,
                how,
            };
            assert_eq!(incoming_vee(prepare_incoming(v.clone())).unwrap(), v);
        }
    }

    #[test]
    fn a_message_without_a_field_it_must_carry_is_refused_naming_it() {
        let e = incoming_vee(vmi::PrepareIncomingRequest::default()).unwrap_err().to_string();
        assert!(e.contains("`spec`"), "{e}");
        let spare = vmi::ReserveSpareRequest {
            start_time: timestamp_s(10),
            ..Default::default()
        };
        assert!(spare_request(spare).unwrap_err().to_string().contains("`end_time`"));
        let usage = vmi::UsageRecord {
            record_id: "r1".into(),
            ..Default::default()
        };
        let (id, why) = pushed_usage(usage).unwrap_err();
        assert_eq!(id, "r1");
        assert!(why.contains("`start_time`"), "{why}");
    }

    #[test]
    fn a_migration_is_done_only_when_the_peer_says_done() {
        let info = |state: vmi::MigrationState| vmi::MigrationInfo {
            state: state as i32,
            detail: "disk full".into(),
            total: interfaces::time::duration_ms(1500),
            ..Default::default()
        };
        assert!(matches!(
            migration_outcome(info(vmi::MigrationState::Done)),
            MigrationOutcome::Done { total_ms: 1500, .. }
        ));
        assert_eq!(
            migration_outcome(info(vmi::MigrationState::Failed)),
            MigrationOutcome::NotDone {
                state: Some(crate::domain::MigrationState::Failed),
                detail: "disk full".into()
            }
        );
        assert!(matches!(
            migration_outcome(info(vmi::MigrationState::Unspecified)),
            MigrationOutcome::NotDone { state: None, .. }
        ));
    }
}
