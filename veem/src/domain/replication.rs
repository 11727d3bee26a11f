//! Where a checkpoint is held (issue 55): a checkpoint is usable at the
//! site that took it as soon as it is recorded; the copies a peer site
//! needs (the primary site of a VEE run for it, with
//! `replicate_checkpoints`) are made after, in the background, and the
//! checkpoint's record says how far that got. At the primary, a
//! checkpoint taken at a peer counts only once it is in the primary's own
//! repository (`awaiting` until then).
//!
//! | state | meaning |
//! |---|---|
//! | `not-needed` | held where it was taken, and no other repository needs it (a VEE of this site; replication off: a peer pulls it through) |
//! | `local-only` | held where it was taken; the copy a peer needs is not made yet |
//! | `replicating` | the copy is being made |
//! | `replicated` | every repository that needs it holds it |
//! | `failed` | the last attempt failed; tried again at `retry_at_ms`, or given up (none) |
//! | `awaiting` | (at the primary) taken at a peer, not yet in this site's repository: not restored from here |

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::StateMachine;

/// A checkpoint's replication state (stored as its kebab-case name, the
/// text the VMI and the CLI show).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Replication {
    /// Held where it was taken; no other repository needs it.
    #[default]
    NotNeeded,
    /// Held where it was taken; a peer's copy is still to be made.
    LocalOnly,
    /// A peer's copy is being made.
    Replicating,
    /// Every repository that needs it holds it.
    Replicated,
    /// The last attempt failed: tried again later, or given up.
    Failed,
    /// At the primary site: taken at a peer, not yet in this site's
    /// repository.
    Awaiting,
}

/// Every state, for tables, gauges and tests.
pub const ALL: [Replication; 6] = [
    Replication::NotNeeded,
    Replication::LocalOnly,
    Replication::Replicating,
    Replication::Replicated,
    Replication::Failed,
    Replication::Awaiting,
];

impl Replication {
    pub fn as_str(self) -> &'static str {
        match self {
            Replication::NotNeeded => "not-needed",
            Replication::LocalOnly => "local-only",
            Replication::Replicating => "replicating",
            Replication::Replicated => "replicated",
            Replication::Failed => "failed",
            Replication::Awaiting => "awaiting",
        }
    }

    /// Whether this site may restore from the checkpoint: all but
    /// `awaiting` (its blobs are not in this site's repository yet).
    pub fn usable_here(self) -> bool {
        self != Replication::Awaiting
    }
}

impl StateMachine for Replication {
    const MACHINE: &'static str = "checkpoint replication";

    fn name(self) -> &'static str {
        self.as_str()
    }

    /// The transition table.
    ///
    /// | from | to |
    /// |---|---|
    /// | local-only | replicating |
    /// | replicating | replicated, failed (also when a restart or takeover cut it short) |
    /// | failed | replicating (its retry) |
    /// | awaiting | replicated (found in this site's repository), failed (never arrived: given up) |
    /// | not-needed, replicated | — |
    fn can_become(self, to: Replication) -> bool {
        use Replication::*;
        matches!(
            (self, to),
            (LocalOnly, Replicating) | (Replicating, Replicated | Failed) | (Failed, Replicating) | (Awaiting, Replicated | Failed)
        )
    }
}

impl std::fmt::Display for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The attempts of a checkpoint's replication: every one after a failure
/// waits twice as long as the one before, from [`FIRST_RETRY`] up to
/// [`LONGEST_WAIT`], [`ATTEMPTS`] in all (about 45 minutes), then it is
/// given up (the checkpoint stays usable where it is held; the VEE's next
/// checkpoint is replicated anew).
pub const ATTEMPTS: u32 = 12;
/// The wait after the first failed attempt.
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// The longest wait between two attempts.
pub const LONGEST_WAIT: Duration = Duration::from_secs(300);

/// A checkpoint's replication as its record keeps it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicationRec {
    pub state: Replication,
    /// The peer site whose repository must hold it (the primary of a VEE
    /// run for it), or, `awaiting`, the peer that took it; empty for
    /// `not-needed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub site: String,
    /// Attempts started (copies made, or at the primary looks into its
    /// repository).
    #[serde(default)]
    pub attempts: u32,
    /// When the next attempt is due (Unix ms); none while one runs, once
    /// it is done, or once it is given up.
    #[serde(default)]
    pub retry_at_ms: Option<i64>,
    /// Why the last attempt failed (empty: none did).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// When the checkpoint was recorded here (Unix ms): the replication
    /// time is measured from it.
    #[serde(default)]
    pub recorded_ms: i64,
}

impl ReplicationRec {
    /// A checkpoint recorded at `now_ms` in state `state`, its copy for
    /// (or from) `site`; an attempt is due at once unless the state is
    /// final.
    pub fn new(state: Replication, site: &str, now_ms: i64) -> Self {
        Self {
            state,
            site: site.to_string(),
            attempts: 0,
            retry_at_ms: (!state.is_final()).then_some(now_ms),
            error: String::new(),
            recorded_ms: now_ms,
        }
    }

    /// Whether an attempt is due at `now_ms`: `local-only`, or `failed`
    /// or `awaiting` with its retry due.
    pub fn due(&self, now_ms: i64) -> bool {
        match self.state {
            Replication::LocalOnly => true,
            Replication::Failed | Replication::Awaiting => self.retry_at_ms.is_some_and(|t| t <= now_ms),
            _ => false,
        }
    }

    /// An attempt starts: `replicating` (an `awaiting` one stays so while
    /// it looks). Errors: the table does not allow it.
    pub fn start(&mut self, id: &str) -> Result<(), super::InvalidTransition> {
        if self.state != Replication::Awaiting {
            self.state = self.state.transition(id, Replication::Replicating)?;
        }
        self.attempts += 1;
        self.retry_at_ms = None;
        Ok(())
    }

    /// The attempt succeeded. Errors: the table does not allow it.
    pub fn succeeded(&mut self, id: &str) -> Result<(), super::InvalidTransition> {
        self.state = self.state.transition(id, Replication::Replicated)?;
        self.retry_at_ms = None;
        self.error.clear();
        Ok(())
    }

    /// The attempt failed at `now_ms` with `error`: `failed` (an
    /// `awaiting` one stays so) with the next attempt after the backoff,
    /// or given up after [`ATTEMPTS`] (then `failed`, no retry). Errors:
    /// the table does not allow it.
    pub fn failed(&mut self, id: &str, now_ms: i64, error: String) -> Result<(), super::InvalidTransition> {
        let given_up = self.attempts >= ATTEMPTS;
        if self.state != Replication::Awaiting || given_up {
            self.state = self.state.transition(id, Replication::Failed)?;
        }
        self.error = error;
        self.retry_at_ms = (!given_up).then(|| now_ms.saturating_add(backoff(self.attempts).as_millis() as i64));
        Ok(())
    }

    /// Given up: `failed` with no retry due.
    pub fn given_up(&self) -> bool {
        self.state == Replication::Failed && self.retry_at_ms.is_none()
    }

    /// Whether nothing more will happen to it (replicated, not needed,
    /// given up): it leaves the replication outbox.
    pub fn settled(&self) -> bool {
        self.state.is_final() || self.given_up()
    }
}

impl Replication {
    /// `not-needed` and `replicated`: nothing follows.
    pub fn is_final(self) -> bool {
        matches!(self, Replication::NotNeeded | Replication::Replicated)
    }
}

/// The wait after failed attempt `attempt` (1-based).
pub fn backoff(attempt: u32) -> Duration {
    interfaces::retry::RetryPolicy {
        attempts: ATTEMPTS,
        initial_backoff: FIRST_RETRY,
        max_backoff: LONGEST_WAIT,
    }
    .backoff(attempt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lets_a_checkpoint_go_from_local_only_to_replicated_and_back_from_failed() {
        use Replication::*;
        for (from, to) in [
            (LocalOnly, Replicating),
            (Replicating, Replicated),
            (Replicating, Failed),
            (Failed, Replicating),
            (Awaiting, Replicated),
        ] {
            assert!(from.can_become(to), "{from} -> {to}");
        }
        for (from, to) in [
            (LocalOnly, Replicated),
            (Replicated, LocalOnly),
            (NotNeeded, Replicating),
            (Awaiting, LocalOnly),
        ] {
            assert!(from.transition("c1", to).is_err(), "{from} -> {to}");
        }
    }

    #[test]
    fn a_failed_attempt_is_retried_after_a_growing_wait_then_given_up() {
        let mut r = ReplicationRec::new(Replication::LocalOnly, "site-a", 1000);
        assert!(r.due(1000));
        let mut waits = Vec::new();
        for _ in 0..ATTEMPTS {
            r.start("c1").unwrap();
            assert_eq!((r.state, r.due(i64::MAX)), (Replication::Replicating, false));
            r.failed("c1", 1000, "refused".into()).unwrap();
            assert_eq!(r.state, Replication::Failed);
            if let Some(at) = r.retry_at_ms {
                waits.push(at - 1000);
            }
        }
        assert!(r.given_up() && r.settled() && !r.due(i64::MAX), "{r:?}");
        assert_eq!(&waits[..3], [5_000, 10_000, 20_000]);
        assert_eq!(*waits.last().unwrap(), 300_000);
        assert_eq!(waits.len() as u32, ATTEMPTS - 1);
    }

    #[test]
    fn an_awaiting_checkpoint_stays_awaiting_while_it_is_looked_for() {
        let mut r = ReplicationRec::new(Replication::Awaiting, "site-b", 0);
        r.start("c1").unwrap();
        r.failed("c1", 0, "not in this site's repository".into()).unwrap();
        assert_eq!((r.state, r.retry_at_ms), (Replication::Awaiting, Some(5_000)));
        assert!(!r.state.usable_here());
        r.start("c1").unwrap();
        r.succeeded("c1").unwrap();
        assert!(r.state.usable_here() && r.settled());
    }
}
