//! The one mapping of the VEEM's errors to gRPC status codes (and so to
//! REST's HTTP statuses): the first typed link of an `anyhow::Error` chain
//! decides the code, and the message is always the whole chain, so users
//! read the field and the reason. A chain with no typed link is a refusal
//! (FailedPrecondition): the VEEM declined to do what was asked.

use tonic::{Code, Status};

use crate::domain::InvalidTransition;
use crate::error::VeemError;

/// The gRPC status of an error (see the module doc); one that says the
/// site's store does not answer is marked read-only
/// ([`interfaces::fencing::READ_ONLY`]).
pub fn status(e: anyhow::Error) -> Status {
    let read_only = e.chain().any(|c| c.is::<crate::store::StoreUnavailable>());
    let mut s = interfaces::error::grpc_status(&e, code_of, Code::FailedPrecondition);
    if read_only {
        s.metadata_mut()
            .insert(interfaces::fencing::READ_ONLY, tonic::metadata::MetadataValue::from_static("1"));
    }
    s
}

fn code_of(e: &(dyn std::error::Error + 'static)) -> Option<Code> {
    if let Some(v) = e.downcast_ref::<VeemError>() {
        return Some(match v {
            VeemError::NotFound { .. } => Code::NotFound,
            VeemError::InvalidField { .. } | VeemError::ManifestRefused(_) => Code::InvalidArgument,
            VeemError::RequestReused(..) | VeemError::ReplyReused { .. } => Code::AlreadyExists,
            VeemError::RateLimited { .. } => Code::ResourceExhausted,
        });
    }
    if e.is::<crate::planner::Stale>() || e.is::<crate::store::Conflict>() {
        // The site's plan changed under every attempt, or another VEEM of
        // the site wrote a record since this one read it: a conflict, to
        // be retried by the caller.
        return Some(Code::Aborted);
    }
    if e.is::<crate::store::StoreUnavailable>() || e.is::<crate::store::Fenced>() {
        // The site's control plane cannot take the write now (no quorum,
        // or this VEEM no longer leads): another moment, or another VEEM.
        return Some(Code::Unavailable);
    }
    e.is::<InvalidTransition>().then_some(Code::FailedPrecondition)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::StateMachine;

    #[test]
    fn each_error_maps_to_one_code_whatever_its_context() {
        let cases: Vec<(anyhow::Error, Code)> = vec![
            (
                anyhow::Error::from(VeemError::not_found("VEE", "v1")).context("restore"),
                Code::NotFound,
            ),
            (
                VeemError::field("to_host", "\"x\" is not a host of site a").into(),
                Code::InvalidArgument,
            ),
            (
                VeemError::ManifestRefused(vec!["manifest field `sla.guarantee`: unknown".into()]).into(),
                Code::InvalidArgument,
            ),
            (
                crate::domain::VeeState::Terminated
                    .transition("v", crate::domain::VeeState::Running)
                    .unwrap_err()
                    .into(),
                Code::FailedPrecondition,
            ),
            (VeemError::RequestReused("r1".into(), "s1".into()).into(), Code::AlreadyExists),
            (
                anyhow::Error::from(crate::planner::Stale { planned: 1, now: 2 }).context("reject: the site's plan changed"),
                Code::Aborted,
            ),
            (
                anyhow::Error::from(crate::store::Conflict {
                    tree: crate::store::Tree::Vees,
                    key: "v1".into(),
                    since: 3,
                    written: 4,
                })
                .context("persist VEE"),
                Code::Aborted,
            ),
            // A refusal, even one whose words say "not found" or "field".
            (anyhow::anyhow!("reject: field `x` not found anywhere"), Code::FailedPrecondition),
        ];
        for (e, code) in cases {
            let msg = format!("{e:#}");
            let s = status(e);
            assert_eq!((s.code(), s.message()), (code, msg.as_str()));
        }
        assert_eq!(VeemError::not_found("VEE", "v1").to_string(), "VEE v1 not found");
    }
}
