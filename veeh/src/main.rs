//! `veeh`: the VEE host daemon.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use interfaces::metrics::{Exporter, Readiness, Serving};
use veeh::config::VeehConfig;
use veeh::host::Host;
use veeh::server::VhiService;

#[derive(Parser)]
#[command(
    name = "veeh",
    version = interfaces::daemon::version(),
    about = "VEE host: runs VEEs on one host over libvirt and serves the VHI",
    after_long_help = interfaces::daemon::EXIT_STATUS
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the VHI (gRPC) for this host.
    Serve {
        /// The VEEH configuration (TOML).
        #[arg(long, env = "VEEH_CONFIG", value_name = "FILE", default_value = "/etc/veeh/veeh.toml")]
        config: PathBuf,
        /// How log lines are written on stderr.
        #[arg(long, value_enum, default_value_t)]
        log_format: interfaces::daemon::LogFormat,
    },
    #[command(flatten)]
    Doc(interfaces::daemon::SelfDoc),
}

/// How long a stop waits for the VHI calls under way (a live migration's
/// stream is cut after it; the VEEM records the migration failed and the
/// VEE stays at its source).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The VHI's service name in gRPC health checks (`grpc.health.v1`).
const VHI_SERVICE: &str = "vhi.v1.VhiService";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = || interfaces::daemon::name_self_doc(Cli::command());
    match interfaces::daemon::parse_with::<Cli>(command()).cmd {
        Cmd::Doc(doc) => {
            interfaces::daemon::write_self_doc(&doc, command(), &mut std::io::stdout())?;
        }
        Cmd::Serve { config, log_format } => {
            interfaces::daemon::init_logging(log_format, "info");
            let cfg = VeehConfig::load(&config)?;
            #[cfg(feature = "failpoints")]
            if let Some(spec) = &cfg.failpoints {
                veeh::failpoints::arm(spec)?;
            }
            let listen = cfg.listen;
            // The port first: a VEEH that cannot serve does not start.
            let listener = interfaces::listen::bind(listen).await?;
            let mut server = tonic::transport::Server::builder();
            match &cfg.tls {
                Some(tls) => server = server.tls_config(tls.server()?)?,
                None => tracing::error!("{}", interfaces::tls::INSECURE_WARNING),
            }
            let cfg_tls = cfg.tls.is_some();
            // The newest epoch of the site's leading VEEM this host has
            // seen: an older one's calls are refused.
            let gate = interfaces::fencing::Gate::open(&cfg.state_dir.join("leader-epoch"))?;
            let metrics_cfg = cfg.metrics.clone();
            let host = Host::open(cfg)?;
            // Readiness as the gRPC health says it: serving until the stop.
            let stopping = Arc::new(AtomicBool::new(false));
            let metrics = match &metrics_cfg {
                Some(m) => {
                    let s = stopping.clone();
                    let ready: Readiness = Arc::new(move || match s.load(Ordering::SeqCst) {
                        true => Err("stopping".into()),
                        false => Ok(()),
                    });
                    let exporter = Exporter::new(m, "veeh", |r| host.hv.metrics.register(r), None, ready)?;
                    Some(Serving::start(m, exporter).await?)
                }
                None => None,
            };
            let swept = veeh::network::sweep_unused().await;
            if !swept.is_empty() {
                tracing::warn!(?swept, "removed networks a crash left behind");
            }
            host.spawn_state_watch(Duration::from_secs(1));
            // The stop signal's handlers before READY=1 (see veem's daemon).
            let stop_signal = interfaces::daemon::shutdown_signal();
            tracing::info!(%listen, tls = cfg_tls, "VHI listening");
            interfaces::daemon::notify_ready();
            // On SIGTERM or SIGINT: no new calls; those under way get the
            // grace period.
            let (router, health) = interfaces::daemon::with_health_and_reflection(
                server.add_service(VhiService::fenced(host, gate)),
                VHI_SERVICE,
                interfaces::vhi::FILE_DESCRIPTOR_SET,
            )
            .await?;
            let health = (health, VHI_SERVICE);
            interfaces::daemon::serve_until_stopped(
                router,
                interfaces::listen::incoming(listener),
                stop_signal,
                health,
                SHUTDOWN_GRACE,
                || async move { stopping.store(true, Ordering::SeqCst) },
            )
            .await?;
            if let Some(m) = metrics {
                m.stop().await;
            }
        }
    }
    Ok(())
}
