//! A host's liveness as the VEEM sees it from its heartbeats (`hosts`).

/// Liveness of a host as the VEEM sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Never answered yet.
    Unknown,
    Up,
    /// Missed this many heartbeats in a row (below the limit).
    Missing(u32),
    Failed,
}
