//! What the three daemons (`veem serve`, `veeh serve`, `image-repo serve`)
//! share as processes: the version every binary prints, their logs
//! (`--log-format text|json`, a default filter that keeps the libraries
//! quiet), and the signals that stop them (SIGTERM from systemd or `kill`,
//! SIGINT from a terminal).

use std::sync::LazyLock;

/// The git revision the binaries were built from (`git describe --always
/// --dirty=+`: the commit, `+` when the tree had changes; `unknown` when
/// built outside a git checkout).
pub const GIT_REVISION: &str = git_version::git_version!(args = ["--always", "--dirty=+"], fallback = "unknown");

static VERSION: LazyLock<String> = LazyLock::new(|| format!("{} ({GIT_REVISION})", env!("CARGO_PKG_VERSION")));

/// What `--version` prints after the binary's name: `0.1.0 (4f2c1ab)`.
pub fn version() -> &'static str {
    VERSION.as_str()
}

/// How a daemon writes its log lines (on stderr).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event (colours on a terminal).
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`),
    /// for journald, Loki or Elasticsearch.
    Json,
}

/// The filter when `RUST_LOG` is not set: `level` for everything, but
/// warnings only from the libraries that are chatty below that (sled, the
/// HTTP/2 and TLS stacks).
pub fn default_filter(level: &str) -> String {
    format!("{level},sled=warn,h2=warn,hyper=warn,hyper_util=warn,tower=warn,rustls=warn,reqwest=warn,tonic=warn")
}

/// Sets up logging on stderr in `format`, with `RUST_LOG` if set, else
/// [`default_filter`] at `level` (`info` for daemons, `warn` for clients).
/// A second call does nothing.
pub fn init_logging(format: LogFormat, level: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter(level)));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Resolves on the first SIGTERM or SIGINT, logging it and telling systemd
/// the daemon stops. The handlers are installed when this is called, not
/// when it is first awaited: call it before telling anyone the daemon is
/// ready (a SIGTERM right after READY=1 would otherwise kill it with the
/// signal's default action). Needs a tokio runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = signal(SignalKind::terminate()).and_then(|t| Ok((t, signal(SignalKind::interrupt())?)));
    async move {
        match handlers {
            Ok((mut term, mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM; stopping on ctrl-c only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        tracing::info!("stop signal received");
        notify_stopping();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary's `man` and `completions` name that binary, and its man
    /// page is its own command line's, with its subcommands.
    #[test]
    fn the_self_doc_of_a_binary_names_that_binary() {
        #[derive(clap::Parser)]
        #[command(name = "veeh")]
        struct Toy {
            #[command(subcommand)]
            cmd: Cmd,
        }
        #[derive(clap::Subcommand)]
        enum Cmd {
            /// Serve.
            Serve,
            #[command(flatten)]
            Doc(SelfDoc),
        }
        let cmd = name_self_doc(<Toy as clap::CommandFactory>::command());
        let help = cmd.clone().render_long_help().to_string();
        assert!(help.contains("`veeh man > /usr/share/man/man1/veeh.1`"), "{help}");
        assert!(help.contains("`source <(veeh completions bash)`"), "{help}");
        assert!(!help.contains("veem"), "{help}");
        let mut page = Vec::new();
        write_self_doc(&SelfDoc::Man, cmd, &mut page).unwrap();
        let page = String::from_utf8(page).unwrap();
        assert!(page.starts_with(".ie") || page.contains(".TH veeh 1"), "{page}");
        assert!(page.contains("veeh\\-serve") || page.contains("serve"), "{page}");
        assert!(page.contains("veeh man > /usr/share/man/man1/veeh.1"), "{page}");
    }

    #[test]
    fn the_version_names_the_package_and_the_revision() {
        let v = version();
        assert!(v.starts_with(env!("CARGO_PKG_VERSION")), "{v}");
        assert!(v.ends_with(&format!("({GIT_REVISION})")) && !GIT_REVISION.is_empty(), "{v}");
    }

    #[test]
    fn the_default_filter_keeps_sled_quiet() {
        let f = default_filter("debug");
        assert!(f.starts_with("debug,") && f.contains("sled=warn"), "{f}");
        assert!(tracing_subscriber::EnvFilter::try_new(&f).is_ok());
    }
}

/// The "Exit status" section of the help of `veeh` and `image-repo`.
pub const EXIT_STATUS: &str = "Exit status:\n  0  success\n  1  an error (said on standard error)\n  2  a bad command line\n";

/// `completions SHELL` and `man`: what every binary prints about itself
/// ([`name_self_doc`] names the binary in their help).
#[derive(Debug, Clone, clap::Subcommand)]
pub enum SelfDoc {
    /// Print the shell completion script for SHELL (bash, zsh, fish,
    /// elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    Man,
}

/// `cmd`, a binary's command line with [`SelfDoc`]'s subcommands, with
/// their help naming the binary: `source <(veeh completions bash)`,
/// `veeh man > /usr/share/man/man1/veeh.1`.
pub fn name_self_doc(cmd: clap::Command) -> clap::Command {
    let name = cmd.get_name().to_string();
    cmd.mut_subcommand("completions", |c| {
        c.about(format!(
            "Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell): `source <({name} completions bash)`"
        ))
    })
    .mut_subcommand("man", |c| {
        c.about(format!("Print the man page (roff): `{name} man > /usr/share/man/man1/{name}.1`"))
    })
}

/// Parses the process's arguments as `C` over `cmd` (`C`'s command line,
/// possibly changed, as [`name_self_doc`] does); exits as clap does on a
/// bad command line (2) and after `--help` or `--version` (0).
pub fn parse_with<C: clap::FromArgMatches>(cmd: clap::Command) -> C {
    C::from_arg_matches(&cmd.get_matches()).unwrap_or_else(|e| e.exit())
}

/// Writes what `doc` asks of `cmd` (the binary's whole command line, from
/// `clap::CommandFactory::command()`) to `out`. Errors: writing fails.
pub fn write_self_doc(doc: &SelfDoc, mut cmd: clap::Command, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    // Into memory first: clap_complete panics when its writer fails (a
    // closed pipe, `veem completions bash | head`).
    let mut text = Vec::new();
    match doc {
        SelfDoc::Completions { shell } => {
            let name = cmd.get_name().to_string();
            clap_complete::generate(*shell, &mut cmd, name, &mut text);
        }
        SelfDoc::Man => clap_mangen::Man::new(cmd).render(&mut text)?,
    }
    out.write_all(&text)
}

/// Tells systemd (a `Type=notify` unit) that the daemon serves: READY=1 on
/// `$NOTIFY_SOCKET`; nothing when not started by systemd.
pub fn notify_ready() {
    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
        tracing::warn!("could not tell systemd the daemon is ready: {e}");
    }
}

/// Tells systemd the daemon is stopping (STOPPING=1), as its drain starts.
pub fn notify_stopping() {
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
}

/// Adds to `router` what a gRPC daemon serves beside its own interface:
/// the standard health service (`grpc.health.v1.Health`: SERVING for
/// `service`, e.g. `vhi.v1.VhiService`, until the returned reporter says
/// otherwise) and server reflection (v1 and v1alpha, of `descriptors` and
/// of the health service), so that load balancers, probes and `grpcurl`
/// work without the protos. Neither needs a token: they tell only the
/// interface's schema and whether the daemon serves. Errors: `descriptors`
/// do not decode.
pub async fn with_health_and_reflection<L: Clone>(
    router: tonic::transport::server::Router<L>,
    service: &str,
    descriptors: &'static [u8],
) -> anyhow::Result<(tonic::transport::server::Router<L>, tonic_health::server::HealthReporter)> {
    let (reporter, health, v1, v1alpha) = health_and_reflection(service, descriptors, tonic_health::ServingStatus::Serving).await?;
    Ok((router.add_service(health).add_service(v1).add_service(v1alpha), reporter))
}

/// [`with_health_and_reflection`] for routes served by the daemon's own
/// listener (`crate::connections`), the health of `service` starting as
/// `status` (NOT_SERVING while a daemon starts up).
pub async fn routes_with_health_and_reflection(
    routes: tonic::service::Routes,
    service: &str,
    descriptors: &'static [u8],
    status: tonic_health::ServingStatus,
) -> anyhow::Result<(tonic::service::Routes, tonic_health::server::HealthReporter)> {
    let (reporter, health, v1, v1alpha) = health_and_reflection(service, descriptors, status).await?;
    Ok((routes.add_service(health).add_service(v1).add_service(v1alpha), reporter))
}

type Reflection<T> = tonic_reflection::server::v1::ServerReflectionServer<T>;
type ReflectionAlpha<T> = tonic_reflection::server::v1alpha::ServerReflectionServer<T>;

/// The health service with `service` at `status`, and reflection v1 and
/// v1alpha of `descriptors` and of the health service.
async fn health_and_reflection(
    service: &str,
    descriptors: &'static [u8],
    status: tonic_health::ServingStatus,
) -> anyhow::Result<(
    tonic_health::server::HealthReporter,
    tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    Reflection<impl tonic_reflection::server::v1::ServerReflection>,
    ReflectionAlpha<impl tonic_reflection::server::v1alpha::ServerReflection>,
)> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_service_status(service, status).await;
    let v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(descriptors)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(descriptors)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    Ok((reporter, health, v1, v1alpha))
}

/// Serves `router` on the connections of `incoming` (a listener's, as
/// `tokio_stream::wrappers::TcpListenerStream`) until `stop_signal` (from
/// [`shutdown_signal`], taken before READY=1) or until the server ends by
/// itself (its listener failed). Then the health of `service` says
/// NOT_SERVING, no new call is taken, `on_stop` is called (what the daemon
/// stops beside the server: the future it returns runs alongside the
/// drain) and the calls under way get `grace`, after which they are cut
/// (logged). Errors: the server's own.
pub async fn serve_until_stopped<F, I, IO, IE>(
    router: tonic::transport::server::Router,
    incoming: I,
    stop_signal: impl std::future::Future<Output = ()>,
    (health, service): (tonic_health::server::HealthReporter, &str),
    grace: std::time::Duration,
    on_stop: impl FnOnce() -> F,
) -> anyhow::Result<()>
where
    F: std::future::Future<Output = ()>,
    I: futures::Stream<Item = Result<IO, IE>> + Send + 'static,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + tonic::transport::server::Connected + Unpin + Send + 'static,
    IO::ConnectInfo: Clone + Send + Sync + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
        let _ = stopped.await;
    }));
    let ended = tokio::select! {
        _ = stop_signal => None,
        r = &mut server => Some(r),
    };
    health.set_service_status(service, tonic_health::ServingStatus::NotServing).await;
    let _ = stop.send(());
    let beside = on_stop();
    let drain = async {
        match ended {
            Some(r) => r,
            None => match tokio::time::timeout(grace, &mut server).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(?grace, "calls still under way after the grace period: cut");
                    server.abort();
                    Ok(Ok(()))
                }
            },
        }
    };
    let (served, ()) = tokio::join!(drain, beside);
    served??;
    tracing::info!("stopped");
    Ok(())
}

/// What gives a daemon's free memory back when its global allocator is
/// not glibc's ([`set_memory_returner`]).
static MEMORY_RETURNER: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Names `f` as what gives the free memory of this process's global
/// allocator back to the system, called by [`return_freed_memory`] after
/// glibc's `malloc_trim` (the VEEM's jemalloc: its purge of every arena).
/// The first call names it; later calls change nothing.
pub fn set_memory_returner(f: fn()) {
    let _ = MEMORY_RETURNER.set(f);
}

/// Gives the memory the allocator holds free back to the system (glibc's
/// `malloc_trim`, then the returner a daemon named with
/// [`set_memory_returner`]): what an allocator keeps after a burst (the
/// buffers of many connections when they end; the temporaries of a
/// start-up that decodes 100,000 records) stays in the process otherwise,
/// and the daemon would stay larger for good.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
    if let Some(f) = MEMORY_RETURNER.get() {
        f();
    }
}

/// Test builds only (feature `failpoints`): arms the failpoints of `spec`
/// (`name=action;name=action`, the `fail` crate's syntax) in daemon `who`
/// (`VEEM`, `VEEH`) and makes a panic abort the process, as `kill -9`
/// would. Errors: a malformed entry, named with the field `failpoints`.
#[cfg(feature = "failpoints")]
pub fn arm_failpoints(spec: &str, who: &str) -> anyhow::Result<()> {
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
    tracing::error!(%spec, "FAILPOINTS armed: this {who} fails at them (a test build)");
    Ok(())
}
