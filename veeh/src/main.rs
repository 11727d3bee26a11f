//! `veeh`: the VEE host daemon.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use veeh::config::VeehConfig;
use veeh::host::Host;
use veeh::server::VhiService;

#[derive(Parser)]
#[command(name = "veeh", about = "VEE host: runs VEEs on one host over libvirt and serves the VHI")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the VHI (gRPC) for this host.
    Serve {
        /// The VEEH configuration (TOML).
        #[arg(long)]
        config: PathBuf,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().cmd {
        Cmd::Serve { config } => {
            let cfg = VeehConfig::load(&config)?;
            let listen = cfg.listen;
            // The port first: a VEEH that cannot serve does not start.
            let listener = interfaces::listen::bind(listen).await?;
            let mut server = tonic::transport::Server::builder();
            match &cfg.tls {
                Some(tls) => server = server.tls_config(tls.server()?)?,
                None => tracing::error!("{}", interfaces::tls::INSECURE_WARNING),
            }
            let cfg_tls = cfg.tls.is_some();
            let host = Host::open(cfg)?;
            let swept = veeh::network::sweep_unused().await;
            if !swept.is_empty() {
                tracing::warn!(?swept, "removed networks a crash left behind");
            }
            host.spawn_state_watch(Duration::from_secs(1));
            tracing::info!(%listen, tls = cfg_tls, "VHI listening");
            server
                .add_service(VhiService::new(host))
                .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await?;
        }
    }
    Ok(())
}
