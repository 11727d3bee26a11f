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
/// aborts the process. Errors: a malformed entry, named.
#[cfg(feature = "failpoints")]
pub fn arm(spec: &str) -> anyhow::Result<()> {
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, action) = entry
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("field `failpoints`: {entry:?} is not name=action"))?;
        fail::cfg(name.trim(), action.trim()).map_err(|e| anyhow::anyhow!("field `failpoints`: {entry:?}: {e}"))?;
    }
    std::panic::set_hook(Box::new(|info| {
        eprintln!("failpoint: {info}; aborting as kill -9 would");
        std::process::abort();
    }));
    tracing::error!(%spec, "FAILPOINTS armed: this VEEH fails at them (a test build)");
    Ok(())
}

/// Fails with an error naming failpoint `name` when it is armed with
/// `return`.
macro_rules! stage {
    ($name:literal) => {
        fail::fail_point!($name, |_| Err(anyhow::anyhow!(concat!("failpoint ", $name))))
    };
}
pub(crate) use stage;
