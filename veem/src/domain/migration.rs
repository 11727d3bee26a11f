//! A migration's course (DESIGN.md §4, §7): proposed -> approved (by an
//! operator or the site policy) -> running -> done | failed; proposed ->
//! rejected; approved -> failed (the VEE was no longer running).

use serde::{Deserialize, Serialize};

use super::StateMachine;

/// The state of a migration (stored as its lowercase name, the same text
/// the VMI shows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrationState {
    /// Waits for an operator's approval.
    Proposed,
    /// Approved; about to run.
    Approved,
    /// An operator said no; nothing moved.
    Rejected,
    /// The VEE is on its way.
    Running,
    /// The VEE runs at the destination.
    Done,
    /// The VEE stays where it was.
    Failed,
}

/// Every state, for tables and tests.
pub const ALL: [MigrationState; 6] = [
    MigrationState::Proposed,
    MigrationState::Approved,
    MigrationState::Rejected,
    MigrationState::Running,
    MigrationState::Done,
    MigrationState::Failed,
];

impl MigrationState {
    pub fn as_str(self) -> &'static str {
        match self {
            MigrationState::Proposed => "proposed",
            MigrationState::Approved => "approved",
            MigrationState::Rejected => "rejected",
            MigrationState::Running => "running",
            MigrationState::Done => "done",
            MigrationState::Failed => "failed",
        }
    }

    /// Proposed, approved or running: the VEE has an open migration.
    pub fn is_open(self) -> bool {
        matches!(self, MigrationState::Proposed | MigrationState::Approved | MigrationState::Running)
    }
}

impl StateMachine for MigrationState {
    const MACHINE: &'static str = "migration";

    fn name(self) -> &'static str {
        self.as_str()
    }

    /// The transition table.
    ///
    /// | from | to |
    /// |---|---|
    /// | proposed | approved, rejected |
    /// | approved | running, failed |
    /// | running | done, failed |
    /// | rejected, done, failed | — |
    fn can_become(self, to: MigrationState) -> bool {
        use MigrationState::*;
        matches!(
            (self, to),
            (Proposed, Approved | Rejected) | (Approved, Running | Failed) | (Running, Done | Failed)
        )
    }
}

impl std::fmt::Display for MigrationState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a migration goes. Written as `host:NAME`, `site:ID` or
/// `site-of:ID` (in records and in the VMI), through its `Display` and
/// `FromStr`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Dest {
    /// A host of this site.
    Host(String),
    /// A peer site (or this site, for a VEE coming home).
    Site(String),
    /// Wherever primary site ID sends a VEE this site runs for it
    /// (SendVee): only the primary knows the destination.
    ForPrimary(String),
}

impl Dest {
    pub fn parse(to: &str) -> anyhow::Result<Self> {
        match to.split_once(':') {
            Some(("host", h)) if !h.is_empty() => Ok(Dest::Host(h.into())),
            Some(("site", s)) if !s.is_empty() => Ok(Dest::Site(s.into())),
            Some(("site-of", s)) if !s.is_empty() => Ok(Dest::ForPrimary(s.into())),
            _ => anyhow::bail!("migration target {to:?} is neither host:NAME, site:ID nor site-of:ID"),
        }
    }
}

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dest::Host(h) => write!(f, "host:{h}"),
            Dest::Site(s) => write!(f, "site:{s}"),
            Dest::ForPrimary(s) => write!(f, "site-of:{s}"),
        }
    }
}

/// Who asks for a migration. Only the planner's own proposals may run on
/// the site policy (`[migration] auto_approve`, which names planner
/// reasons): a caller's reason is free text and never skips the operator
/// (DESIGN.md §7: operators approve).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Proposer {
    /// The VEEM's planner (`crate::proposals`).
    Planner,
    /// The site's operator (the VMI's operator role).
    Operator,
    /// A service provider asking for one of its VEEs to move; it never
    /// names where (location unawareness, E §3.4).
    Provider(String),
    /// A peer site withdrawing a VEE it runs for this site.
    PeerSite(String),
}

impl Proposer {
    /// Whether the site policy may approve this proposal by itself.
    pub fn may_auto_approve(&self) -> bool {
        matches!(self, Proposer::Planner)
    }
}

impl std::fmt::Display for Proposer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Proposer::Planner => f.write_str("planner"),
            Proposer::Operator => f.write_str("operator"),
            Proposer::Provider(n) => write!(f, "provider {n}"),
            Proposer::PeerSite(s) => write!(f, "site {s}"),
        }
    }
}

impl std::str::FromStr for Dest {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        Dest::parse(s)
    }
}

impl TryFrom<String> for Dest {
    type Error = anyhow::Error;
    fn try_from(s: String) -> anyhow::Result<Self> {
        Dest::parse(&s)
    }
}

impl From<Dest> for String {
    fn from(d: Dest) -> String {
        d.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_table() {
        use MigrationState::*;
        let allowed: [(MigrationState, &[MigrationState]); 6] = [
            (Proposed, &[Approved, Rejected]),
            (Approved, &[Running, Failed]),
            (Running, &[Done, Failed]),
            (Rejected, &[]),
            (Done, &[]),
            (Failed, &[]),
        ];
        for (from, tos) in allowed {
            for to in ALL {
                assert_eq!(from.can_become(to), tos.contains(&to), "{from:?} -> {to:?}");
            }
        }
        let e = Done.transition("m-1", Running).unwrap_err();
        assert_eq!(e.to_string(), "migration m-1: done -> running is not a valid transition");
    }

    #[test]
    fn stored_form_is_the_old_text() {
        for s in ALL {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<MigrationState>(&format!("\"{s}\"")).unwrap(), s);
        }
        assert!(ALL.iter().filter(|s| s.is_open()).count() == 3);
    }
}
