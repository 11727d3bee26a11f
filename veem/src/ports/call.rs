//! How a call to another party failed, as the workflows act on it: a VEEH
//! (`ports::host`) or a peer site (`ports::peer_site`). The one conversion
//! from a gRPC status, at those ports, so that no workflow reads a status
//! code.

use tonic::{Code, Status};

/// What kind of failure a call ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The other party has no such VEE, domain or checkpoint (NOT_FOUND).
    NotFound,
    /// The other party will not do it in the state things are in: the
    /// VEE's state, a profile or save format it cannot run, an agreement's
    /// terms (FAILED_PRECONDITION).
    Refused,
    /// The request is not one it accepts (INVALID_ARGUMENT, OUT_OF_RANGE).
    Invalid,
    /// What the call would make exists already (ALREADY_EXISTS).
    Exists,
    /// It does not know the call: an older version (UNIMPLEMENTED).
    Unsupported,
    /// It did not answer, or not in time (UNAVAILABLE, DEADLINE_EXCEEDED,
    /// CANCELLED).
    Unreachable,
    /// A peer site answers, but its control plane cannot act now: a
    /// takeover, a start, a store without quorum (UNAVAILABLE marked
    /// `interfaces::fencing::NOT_ACTING`). The site is there and its VEEs
    /// run on its hosts.
    NotActing,
    /// It does not take this VEEM's calls: credentials, an agreement, or an
    /// older leader's epoch (PERMISSION_DENIED, UNAUTHENTICATED).
    Denied,
    /// It is busy or out of room for it now (RESOURCE_EXHAUSTED, ABORTED).
    Busy,
    /// Anything else it failed with (INTERNAL, UNKNOWN, DATA_LOSS).
    Failed,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Failure::NotFound => "not found",
            Failure::Refused => "refused",
            Failure::Invalid => "invalid",
            Failure::Exists => "exists already",
            Failure::Unsupported => "not supported",
            Failure::Unreachable => "did not answer",
            Failure::NotActing => "cannot act now",
            Failure::Denied => "denied",
            Failure::Busy => "busy",
            Failure::Failed => "failed",
        })
    }
}

/// A call that failed: its kind and the other party's message, shown as
/// `not found: <message>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{failure}: {message}")]
pub struct CallError {
    /// What kind of failure.
    pub failure: Failure,
    /// The other party's message, as it gave it.
    pub message: String,
}

impl CallError {
    /// Whether the other party has no such VEE or domain.
    pub fn is_not_found(&self) -> bool {
        self.failure == Failure::NotFound
    }

    /// The other party's message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<Status> for CallError {
    fn from(s: Status) -> Self {
        let failure = match s.code() {
            _ if interfaces::fencing::not_acting(&s) => Failure::NotActing,
            Code::NotFound => Failure::NotFound,
            Code::FailedPrecondition => Failure::Refused,
            Code::InvalidArgument | Code::OutOfRange => Failure::Invalid,
            Code::AlreadyExists => Failure::Exists,
            Code::Unimplemented => Failure::Unsupported,
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => Failure::Unreachable,
            Code::PermissionDenied | Code::Unauthenticated => Failure::Denied,
            Code::ResourceExhausted | Code::Aborted => Failure::Busy,
            Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss => Failure::Failed,
        };
        CallError {
            failure,
            message: s.message().to_string(),
        }
    }
}
