//! Test-only failpoints (issue 13 R1, R3), with the `fail` crate: the
//! points where the end-to-end fault tests kill the VEEM.
//!
//! Only a build with the `failpoints` feature has them (the e2e tests turn
//! it on through their dev-dependency; `cargo build --release --bins` does
//! not), and only a configuration's `failpoints` arms them, in the `fail`
//! crate's syntax: `failpoints = "recovery-before-restore=panic"`. A
//! failpoint that panics aborts the process on the spot, as `kill -9`
//! would: nothing after it runs, nothing more is written.
//!
//! | failpoint | where |
//! |---|---|
//! | `deploy-after-commit` | Deploy: the admission committed, no VEEH called, no answer sent |
//! | `deploy-after-remote-placement` | Deploy: peers booted VEEs, nothing committed here (the intent is) |
//! | `recovery-before-restore` | recovery: the VEE recorded recovering on its new host, not yet restored |
//! | `checkpoint-after-transition` | checkpoint: the VEE recorded checkpointing, its host not asked |
//! | `checkpoint-after-vhi` | checkpoint: its host took it, nothing recorded |
//! | `restore-after-destroy` | restore: the VEE's domain destroyed, the VEE still recorded running |
//! | `migration-after-approval` | a migration approved, not started |
//! | `migration-after-start` | a migration recorded running, its VEE migrating, the destination not asked |
//! | `migration-after-prepare` | a migration's destination (a host, or a peer site that admitted the VEE) prepared, the VEE not sent |
//! | `migration-after-send` | a migration's VEE sent, its destination not told to complete |
//! | `migration-after-complete` | a migration's destination completed (the VEE runs there, a peer site adopted it), nothing recorded here |
//! | `resize-after-reservation` | a resize: the VEE's reservation resized, neither its host nor its record |
//! | `scale-after-commit` | a scale-out: the new instances admitted and recorded, none booted |
//! | `rollout-after-destroy` | a rolling update's step: the instance recorded deploying, its old domain removed, its record on the old image |
//! | `rollout-after-image` | a rolling update's step: the instance recorded deploying on the new image, not booted |

/// Arms the failpoints of `spec` (`name=action;name=action`); a panic
/// aborts the process (`interfaces::daemon::arm_failpoints`). Errors: a
/// malformed entry, named.
#[cfg(feature = "failpoints")]
pub fn arm(spec: &str) -> anyhow::Result<()> {
    interfaces::daemon::arm_failpoints(spec, "VEEM")
}
