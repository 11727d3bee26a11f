//! The `veem` binary: the VEEM daemon (`veem serve`) and the VMI client.
//! Everything but process setup lives in [`veem::cli`].

use std::process::ExitCode;

use veem::cli::{Cli, Command};

fn main() -> ExitCode {
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
