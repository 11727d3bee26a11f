//! Why a Deploy did not admit its service, by what its caller can do: fix
//! the request (a manifest field, a request ID), take the site's refusal,
//! or ask again (the plan changed under every attempt, the store did not
//! answer). Each variant's status is in `crate::api::status`.

use crate::domain::InvalidTransition;
use crate::error::VeemError;
use crate::ipam::IpamError;
use crate::planner::Stale;
use crate::store::StoreError;

/// A Deploy's failure: nothing of the service is left here or at a peer.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The request itself: a refused manifest (each field and reason), a
    /// malformed request ID, one used with another manifest, a request
    /// whose service was deleted since.
    #[error(transparent)]
    Request(#[from] VeemError),
    /// The site and its peers cannot take the service: the planner's
    /// verdict (`reject`) and its reasons, each peer's refusal, a spare
    /// no peer holds.
    #[error("{verdict}: {reasons}")]
    Rejected { verdict: String, reasons: String },
    /// The site cannot give the service's networks (a pool exhausted, a
    /// subnet another service holds).
    #[error("reject: {0}")]
    Networks(IpamError),
    /// The site's plan changed under each attempt (other admissions, a
    /// recovery): nothing written; ask again.
    #[error("reject: the site's plan changed under each of {attempts} attempts (other admissions); try again: {last}")]
    Contended { attempts: u32, last: Stale },
    /// The store refused (a conflict with another VEEM of the site, a
    /// store that does not answer, a VEEM that no longer leads) or failed:
    /// nothing written.
    #[error("reject: {0}")]
    Store(StoreError),
    /// A VEE placed at a peer could not be recorded as running there.
    #[error("reject: {0}")]
    Transition(InvalidTransition),
}

impl DeployError {
    /// [`DeployError::Rejected`] with `verdict` and `reasons` (joined by
    /// `; `).
    pub fn rejected(verdict: impl Into<String>, reasons: &[String]) -> Self {
        DeployError::Rejected {
            verdict: verdict.into(),
            reasons: reasons.join("; "),
        }
    }

    /// Whether the site could not answer (the plan changed under every
    /// attempt, a conflict with another VEEM, the store): the metrics'
    /// `error` verdict, as against `refused` (the site declined).
    pub fn unanswered(&self) -> bool {
        matches!(self, DeployError::Contended { .. }) || matches!(self, DeployError::Store(s) if s.is_transient())
    }
}

impl From<StoreError> for DeployError {
    fn from(e: StoreError) -> Self {
        DeployError::Store(e)
    }
}

impl From<InvalidTransition> for DeployError {
    fn from(e: InvalidTransition) -> Self {
        DeployError::Transition(e)
    }
}
