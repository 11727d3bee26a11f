//! The VEEM's domain enums on the wire: the one place where they are
//! converted to and from the VMI's enums (`interfaces::vmi`). The wire
//! enums carry `*_UNSPECIFIED = 0`, which no domain state has: reading it
//! is an error naming the field (a peer or client that left it unset).

use interfaces::manifest::GuaranteeLevel;
use interfaces::vmi;

use crate::domain::rollout::{RolloutRec, RolloutState};
use crate::domain::Health;
use crate::domain::{Action, MigrationState, Replication, ServiceState, VeeState, Verdict};
use crate::error::VeemError;

pub mod peer;

/// Maps each domain variant to its wire variant and back: `From<domain>`
/// for the wire enum, and `wire_to_domain(field, i32)` for the domain.
macro_rules! wire_enum {
    ($domain:ty, $wire:ty, $read:ident { $($d:ident <=> $w:ident),+ $(,)? }) => {
        impl From<$domain> for $wire {
            fn from(d: $domain) -> Self {
                match d {
                    $(<$domain>::$d => <$wire>::$w,)+
                }
            }
        }

        /// The domain value of wire field `field` (an `i32` of the
        /// message); errors with the field's name for an unset or unknown
        /// value.
        pub fn $read(field: &str, value: i32) -> Result<$domain, VeemError> {
            match <$wire>::try_from(value) {
                $(Ok(<$wire>::$w) => Ok(<$domain>::$d),)+
                _ => Err(VeemError::field(field, format!("{value} is not a {}", stringify!($domain)))),
            }
        }
    };
}

impl From<Verdict> for vmi::Verdict {
    fn from(v: Verdict) -> Self {
        match v {
            Verdict::Accept => vmi::Verdict::Accept,
            Verdict::CounterOffer => vmi::Verdict::CounterOffer,
            Verdict::Reject => vmi::Verdict::Reject,
        }
    }
}

wire_enum!(VeeState, vmi::VeeState, vee_state {
    Pending <=> Pending,
    Admitted <=> Admitted,
    Deploying <=> Deploying,
    Running <=> Running,
    Suspended <=> Suspended,
    Checkpointing <=> Checkpointing,
    Migrating <=> Migrating,
    Failed <=> Failed,
    Recovering <=> Recovering,
    Stopped <=> Stopped,
    Terminated <=> Terminated,
    Rejected <=> Rejected,
});

wire_enum!(MigrationState, vmi::MigrationState, migration_state {
    Proposed <=> Proposed,
    Approved <=> Approved,
    Rejected <=> Rejected,
    Running <=> Running,
    Done <=> Done,
    Failed <=> Failed,
});

wire_enum!(Replication, vmi::CheckpointReplication, replication {
    NotNeeded <=> NotNeeded,
    LocalOnly <=> LocalOnly,
    Replicating <=> Replicating,
    Replicated <=> Replicated,
    Failed <=> Failed,
    Awaiting <=> Awaiting,
});

wire_enum!(RolloutState, vmi::RolloutState, rollout_state {
    Rolling <=> Rolling,
    Done <=> Done,
    Failed <=> Failed,
});

/// A rollout's record as the VMI shows it.
pub fn rollout(r: &RolloutRec) -> vmi::Rollout {
    vmi::Rollout {
        service_id: r.service_id.clone(),
        component: r.component.clone(),
        from_image: r.from_image.clone(),
        to_image: r.to_image.clone(),
        max_unavailable: r.max_unavailable,
        rollback: r.rollback,
        state: vmi::RolloutState::from(r.state) as i32,
        replaced: r.replaced.clone(),
        instances: r.instances,
        reason: r.reason.clone(),
        start_time: interfaces::time::timestamp_ms(r.started_ms),
        end_time: r.ended_ms.and_then(interfaces::time::timestamp_ms),
    }
}

wire_enum!(Action, vmi::Action, action {
    Stop <=> Stop,
    Suspend <=> Suspend,
    Resume <=> Resume,
    Checkpoint <=> Checkpoint,
    Restore <=> Restore,
    Withdraw <=> Withdraw,
});

wire_enum!(ServiceState, vmi::ServiceState, service_state {
    Running <=> Running,
    Terminated <=> Terminated,
    Partial <=> Partial,
});

/// The guarantee level of wire field `field` (`From<GuaranteeLevel>` for
/// the wire enum is in `interfaces`, where both types are).
pub fn guarantee(field: &str, value: i32) -> Result<GuaranteeLevel, VeemError> {
    interfaces::vmi::GuaranteeLevel::of_wire(value).ok_or_else(|| VeemError::field(field, format!("{value} is not a guarantee level")))
}

/// A host's health on the wire: the state and, while heartbeats are
/// missing, how many in a row.
pub fn host_health(h: Health) -> (vmi::HostHealth, u32) {
    match h {
        Health::Unknown => (vmi::HostHealth::Unknown, 0),
        Health::Up => (vmi::HostHealth::Up, 0),
        Health::Missing(n) => (vmi::HostHealth::Missing, n),
        Health::Failed => (vmi::HostHealth::Failed, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_and_shows_as_it_is_stored() {
        for s in crate::domain::vee::ALL {
            let w = vmi::VeeState::from(s);
            assert_eq!(vee_state("state", w as i32).unwrap(), s);
            assert_eq!(w.to_string(), s.as_str(), "the CLI prints the stored name");
        }
        for s in crate::domain::migration::ALL {
            let w = vmi::MigrationState::from(s);
            assert_eq!(migration_state("state", w as i32).unwrap(), s);
            assert_eq!(w.to_string(), s.as_str());
        }
        for s in crate::domain::replication::ALL {
            let w = vmi::CheckpointReplication::from(s);
            assert_eq!(replication("latest_checkpoint_replication", w as i32).unwrap(), s);
            assert_eq!(w.to_string(), s.as_str());
        }
        for g in GuaranteeLevel::ALL {
            let w = vmi::GuaranteeLevel::from(g);
            assert_eq!(guarantee("guarantee", w as i32).unwrap(), g);
            assert_eq!(w.to_string(), g.as_str());
        }
    }

    #[test]
    fn an_unset_or_unknown_value_is_refused_naming_the_field() {
        let e = vee_state("state", 0).unwrap_err().to_string();
        assert!(e.contains("`state`") && e.contains("0 is not a VeeState"), "{e}");
        assert!(guarantee("guarantee", 99).is_err());
    }
}
