//! Why the planner proposes a migration by itself (`proposals`): the
//! reasons a site's `migration.auto_approve` may name.

/// Why the planner proposes a move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// The VEE's host is missing heartbeats.
    FailureRisk,
    /// The VEE's checkpoints keep failing on its host.
    SlaAtRisk,
    /// The VEE's host is to be emptied.
    Consolidation,
}

impl Reason {
    /// The reason as proposals carry it (and `migration.auto_approve`
    /// names it): `failure-risk`, `sla-at-risk`, `consolidation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::FailureRisk => "failure-risk",
            Reason::SlaAtRisk => "sla-at-risk",
            Reason::Consolidation => "consolidation",
        }
    }

    /// The reason named `s`, if it is one of the planner's.
    pub fn parse(s: &str) -> Option<Self> {
        [Reason::FailureRisk, Reason::SlaAtRisk, Reason::Consolidation]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}
