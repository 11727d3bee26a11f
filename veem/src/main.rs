//! The `veem` binary: the VEEM daemon (`veem serve`) and the VMI client.
//! Everything but process setup lives in [`veem::cli`].

use std::process::ExitCode;

use veem::cli::{Cli, Command};

/// jemalloc rather than glibc's malloc: at 100,000 VEEs glibc's per-thread
/// arenas held about 200 MiB the heap no longer used (docs/benchmarks.md,
/// `veem serve` at 2,000 hosts); jemalloc gives freed pages back, and at
/// once where the daemon returns its free memory ([`purge`]).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Gives every jemalloc arena's free pages back to the system now
/// (`arena.<MALLCTL_ARENAS_ALL>.purge`), where jemalloc would hold its
/// dirty pages for some 10 s: what the VMI listener's memory bound after a
/// burst of connections needs (`tests/tests/vmi_limits.rs`).
fn purge() {
    // jemalloc 5's MALLCTL_ARENAS_ALL (4096), which the sys crate does not
    // export: the arena index that means every arena.
    const NAME: &[u8] = b"arena.4096.purge\0";
    // SAFETY: a void mallctl (no old or new value) on a NUL-terminated name.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(NAME.as_ptr().cast(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), 0)
    };
    if rc != 0 {
        tracing::warn!(rc, "jemalloc's purge failed");
    }
}

fn main() -> ExitCode {
    interfaces::daemon::set_memory_returner(purge);
    // Usage errors exit with 2 here (clap); `--help`/`--version` with 0.
    let cli = Cli::parse_args();
    let serve = matches!(cli.command, Command::Serve { .. });
    if let Command::Serve { log_format, .. } = cli.command {
        // Daemon logs on stderr; RUST_LOG overrides the filter.
        interfaces::daemon::init_logging(log_format, "info");
    }
    // The daemon needs worker threads; a client makes one call at a time.
    let runtime = if serve {
        tokio::runtime::Builder::new_multi_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    };
    match runtime {
        Ok(rt) => rt.block_on(veem::cli::run(cli)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(veem::cli::exit::ERROR)
        }
    }
}
