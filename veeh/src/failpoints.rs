//! Test-only failpoints, with the `fail` crate: the stages of a checkpoint
//! where the end-to-end tests make it fail, to see that a failure at any
//! point records nothing and leaves nothing the repository keeps.
//!
//! Only a build with the `failpoints` feature has them (the e2e tests turn
//! it on through their dev-dependency), and only a configuration's
//! `failpoints` arms them, in the `fail` crate's syntax:
//! `failpoints = "checkpoint-after-memory-chunks=return"`. `return` fails
//! the checkpoint there with an error; `panic` aborts the VEEH as `kill -9`
//! would.
//!
//! | failpoint | where |
//! |---|---|
//! | `checkpoint-after-memory-chunks` | the memory state's chunks sent, its index not |
//! | `checkpoint-after-disk-chunks` | the overlay's chunks sent, its index not |
//! | `checkpoint-after-indexes` | both indexes sent, the checkpoint not answered |

/// Arms the failpoints of `spec` (`name=action;name=action`); a panic
/// aborts the process (`interfaces::daemon::arm_failpoints`). Errors: a
/// malformed entry, named.
#[cfg(feature = "failpoints")]
pub fn arm(spec: &str) -> anyhow::Result<()> {
    interfaces::daemon::arm_failpoints(spec, "VEEH")
}

/// Fails with an error naming failpoint `name` when it is armed with
/// `return`.
macro_rules! stage {
    ($name:literal) => {
        fail::fail_point!($name, |_| Err(anyhow::anyhow!(concat!("failpoint ", $name))))
    };
}
pub(crate) use stage;
