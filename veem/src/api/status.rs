//! The one mapping of the VEEM's errors to gRPC status codes (and so to
//! REST's HTTP statuses): each error type the VMI answers with is
//! [`Coded`], its code chosen by its variant in a `match` over all of them
//! (a new variant without a code does not compile), and the message is
//! always the whole chain, so users read the field and the reason. Every
//! workflow the VMI calls answers such an error: there is no code for an
//! `anyhow` chain, so a handler cannot answer one (it does not compile).
//! A refusal of the site (its state, its room, a decision taken) is
//! FailedPrecondition; a host or peer that does not answer, or a store
//! that does not, Unavailable; another writer first or a plan gone stale,
//! Aborted. The workflows' and steps' codes are in [`workflows`].

use tonic::{Code, Status};

use crate::core::RecordError;
use crate::error::VeemError;
use crate::store::StoreError;

mod workflows;

/// An error the VMI answers with (see the module doc).
pub trait Coded: std::error::Error + 'static {
    /// Its gRPC code.
    fn code(&self) -> Code;
    /// Its message: the error and each of its causes, `: ` between them.
    fn message(&self) -> String
    where
        Self: Sized,
    {
        chain(self)
    }
    /// Whether it says the site's store does not answer, so that the
    /// caller reads the site as read-only.
    fn read_only(&self) -> bool {
        false
    }
}

/// The gRPC status of an error (see the module doc), its message bounded;
/// one that says the site's store does not answer is marked read-only
/// ([`interfaces::fencing::READ_ONLY`]).
pub fn status(e: impl Coded) -> Status {
    let mut s = Status::new(e.code(), interfaces::excerpt::message(&e.message()));
    if e.read_only() {
        s.metadata_mut()
            .insert(interfaces::fencing::READ_ONLY, tonic::metadata::MetadataValue::from_static("1"));
    }
    s
}

/// `e` and each of its sources, `: ` between them (as anyhow's `{:#}`).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        text.push_str(": ");
        text.push_str(&c.to_string());
        source = c.source();
    }
    text
}

impl Coded for StoreError {
    fn code(&self) -> Code {
        match self {
            // Another VEEM of the site wrote a record since this one read
            // it: a conflict, to be retried by the caller.
            StoreError::Conflict(_) => Code::Aborted,
            // The site's control plane cannot take the write now (no
            // quorum, or this VEEM no longer leads): another moment, or
            // another VEEM.
            StoreError::Unavailable { .. } | StoreError::Fenced(_) => Code::Unavailable,
            StoreError::Failed(_) => Code::Internal,
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

impl Coded for RecordError {
    fn code(&self) -> Code {
        match self {
            RecordError::NotFound { .. } => Code::NotFound,
            RecordError::Transition(_) => Code::FailedPrecondition,
            RecordError::Store(s) => s.code(),
        }
    }

    fn read_only(&self) -> bool {
        matches!(self, RecordError::Store(s) if s.read_only())
    }
}

impl Coded for VeemError {
    fn code(&self) -> Code {
        match self {
            VeemError::NotFound { .. } => Code::NotFound,
            VeemError::InvalidField { .. } | VeemError::ManifestRefused(_) => Code::InvalidArgument,
            VeemError::RequestReused(..) | VeemError::ReplyReused { .. } => Code::AlreadyExists,
            VeemError::RateLimited { .. } => Code::ResourceExhausted,
        }
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflows::deploy::DeployError;
    use crate::workflows::scaling::ScaleError;
    use crate::domain::StateMachine;

    #[test]
    fn each_error_maps_to_one_code_by_its_variant() {
        let invalid = crate::domain::VeeState::Terminated
            .transition("v", crate::domain::VeeState::Running)
            .unwrap_err();
        let cases: Vec<(Box<dyn Fn() -> Status>, Code)> = vec![
            (Box::new(|| status(VeemError::not_found("VEE", "v1"))), Code::NotFound),
            (Box::new(|| status(RecordError::not_found("VEE", "v1"))), Code::NotFound),
            (
                Box::new(|| status(VeemError::field("to_host", "\"x\" is not a host of site a"))),
                Code::InvalidArgument,
            ),
            (
                Box::new(|| status(VeemError::ManifestRefused(vec!["manifest field `sla.guarantee`: unknown".into()]))),
                Code::InvalidArgument,
            ),
            (Box::new(move || status(RecordError::from(invalid.clone()))), Code::FailedPrecondition),
            (Box::new(|| status(VeemError::RequestReused("r1".into(), "s1".into()))), Code::AlreadyExists),
            (
                Box::new(|| {
                    status(RecordError::from(StoreError::from(crate::store::Conflict {
                        tree: crate::store::Tree::Vees,
                        key: "v1".into(),
                        since: 3,
                        written: 4,
                    })))
                }),
                Code::Aborted,
            ),
        ];
        for (s, code) in cases {
            assert_eq!(s().code(), code, "{}", s().message());
        }
        assert_eq!(VeemError::not_found("VEE", "v1").to_string(), "VEE v1 not found");
    }

    #[test]
    fn a_deploys_error_is_coded_by_its_variant() {
        let stale = crate::planner::Stale {
            planned: 1,
            now: 2,
            why: "host h1 has no room".into(),
        };
        let cases = [
            (DeployError::Contended { attempts: 5, last: stale }, Code::Aborted),
            (DeployError::rejected("reject", &["no room".into()]), Code::FailedPrecondition),
            (DeployError::Networks(crate::ipam::IpamError::NoVni), Code::FailedPrecondition),
            (VeemError::ManifestRefused(vec!["manifest field `name`: empty".into()]).into(), Code::InvalidArgument),
            (StoreError::unavailable("commit", "no quorum").into(), Code::Unavailable),
            (
                StoreError::from(crate::store::Conflict {
                    tree: crate::store::Tree::Vees,
                    key: "v1".into(),
                    since: 3,
                    written: 4,
                })
                .into(),
                Code::Aborted,
            ),
        ];
        for (e, code) in cases {
            let (unanswered, msg) = (e.unanswered(), e.to_string());
            let s = status(e);
            assert_eq!(s.code(), code, "{msg}");
            assert_eq!(s.message(), msg);
            // The metrics' `error` verdict: the site could not answer.
            assert_eq!(unanswered, matches!(code, Code::Aborted | Code::Unavailable), "{msg}");
        }
        let s = status(DeployError::from(StoreError::unavailable("commit", "no quorum")));
        assert!(s.metadata().get(interfaces::fencing::READ_ONLY).is_some());
        assert!(s.message().starts_with("reject: commit: "), "{}", s.message());
    }

    /// A scaling whose plan went stale under every attempt is ABORTED, as
    /// a Deploy's is, so that a client asks again (it was a refusal).
    #[test]
    fn a_scalings_error_is_coded_by_its_variant() {
        let cases = [
            (ScaleError::Contended { attempts: 5 }, Code::Aborted),
            (ScaleError::Rejected("no room".into()), Code::FailedPrecondition),
            (VeemError::field("instances", "too many").into(), Code::InvalidArgument),
            (RecordError::not_found("service", "s1").into(), Code::NotFound),
            (StoreError::unavailable("commit", "no quorum").into(), Code::Unavailable),
            (
                ScaleError::NotStopped {
                    failed: 1,
                    of: 2,
                    reasons: "VEE v1: host down".into(),
                },
                Code::FailedPrecondition,
            ),
        ];
        for (e, code) in cases {
            let msg = e.to_string();
            let s = status(e);
            assert_eq!((s.code(), s.message()), (code, msg.as_str()));
        }
    }

    #[test]
    fn a_store_error_is_coded_by_its_variant_and_an_unavailable_store_is_read_only() {
        let unavailable = || StoreError::unavailable("commit", "no quorum");
        let s = status(unavailable());
        assert_eq!(s.code(), Code::Unavailable);
        assert!(s.metadata().get(interfaces::fencing::READ_ONLY).is_some());
        assert!(s.message().starts_with("commit: the site's control plane store (etcd) does not answer: no quorum"), "{}", s.message());
        // The same, reached through a record call.
        let s = status(RecordError::from(unavailable()));
        assert_eq!(s.code(), Code::Unavailable);
        assert!(s.metadata().get(interfaces::fencing::READ_ONLY).is_some());
        let s = status(StoreError::from(crate::store::Fenced { epoch: 7 }));
        assert_eq!(s.code(), Code::Unavailable);
        assert!(s.metadata().get(interfaces::fencing::READ_ONLY).is_none());
        assert_eq!(status(StoreError::from(anyhow::anyhow!("disk full"))).code(), Code::Internal);
    }
}
