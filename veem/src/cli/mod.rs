//! The `veem` command line: the daemon (`veem serve`) and the VMI client used
//! by service providers and operators (DESIGN.md §3), in the style of the
//! OpenStack and OpenNebula CLIs.
//!
//! Every client subcommand maps to one VMI rpc. Output is an aligned table
//! (or `key: value` lines for a single object) by default, or one JSON
//! document per command with `--output json`. Timestamps are printed as
//! RFC3339.
//!
//! Exit codes: [`exit`], listed by `veem --help`.

mod client;
mod commands;
pub mod console;
pub mod context;
mod definition;
mod lookup;
mod output;
mod pages;
mod retries;
mod store;
mod table;
#[cfg(test)]
pub(crate) mod tests;
mod wait;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

pub use client::{connect, AuthInterceptor, Deadlines, VmiServiceClient};

pub mod exit;

/// `--wait` ran past `--timeout` (exit code [`exit::TIMEOUT`]).
#[derive(Debug, thiserror::Error)]
#[error("timed out after {}s {what}", .after.as_secs())]
pub struct TimedOut {
    pub after: Duration,
    /// What it was waiting for: "waiting for migration m-1 (proposed)".
    pub what: String,
}

/// `--wait` and `--timeout` of a long command.
#[derive(Debug, Clone, Copy, Args)]
pub struct WaitOpts {
    /// Wait until it is over, following its progress (exit 0 only if it
    /// succeeded).
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this long (`90s`, `10m`; exit 6) [default: no limit].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, requires = "wait")]
    pub timeout: Option<Duration>,
}

/// Default VMI endpoint of a local VEEM.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7200";

/// The `veem` command line.
#[derive(Debug, Parser)]
#[command(
    name = "veem",
    version = interfaces::daemon::version(),
    about = "VEE manager: run the daemon, or manage services, VEEs and migrations through the VMI",
    after_long_help = exit::help()
)]
pub struct Cli {
    /// Options shared by all client subcommands.
    #[command(flatten)]
    pub global: GlobalOpts,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options of every client subcommand.
#[derive(Debug, Clone, Args)]
pub struct GlobalOpts {
    /// VMI endpoint of the VEEM (default: the context's, else
    /// http://127.0.0.1:7200); several, comma-separated, for a site's
    /// VEEMs over etcd: the one that leads is used.
    #[arg(long, global = true, env = "VEEM_ENDPOINT")]
    pub endpoint: Option<String>,
    /// File whose first line is the bearer token (sent as `authorization:
    /// Bearer TOKEN`); else `VEEM_TOKEN`, else the context's. Never on the
    /// command line.
    #[arg(long, global = true, env = "VEEM_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The CA (PEM file) of the VEEM's certificate, for an `https://`
    /// endpoint; else the context's.
    #[arg(long, global = true, env = "VEEM_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Context of the client configuration (`~/.config/veem/config.toml`
    /// or `VEEM_CLIENT_CONFIG`) to use instead of its current one.
    #[arg(long, global = true, env = "VEEM_CONTEXT")]
    pub context: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Print only the IDs of what the command lists, makes or changes, one
    /// per line (for scripts: `for v in $(veem ls -q); ...`).
    #[arg(long, short = 'q', global = true, conflicts_with = "output")]
    pub quiet: bool,
    /// Give up on a VMI call after this long (exit 6); streams
    /// (`events --follow`) are not cut. Longer than the VEEM's default
    /// stop_timeout (30 s), so that a stop ending in a destroy answers.
    #[arg(long, global = true, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "60s")]
    pub request_timeout: Duration,
    /// With several endpoints (`--endpoint A,B`): how long each may take
    /// to connect and say whether it leads before it is taken for gone (a
    /// frozen leader: its kernel still accepts connections); also how
    /// long a connection may go without answering a keep-alive ping.
    #[arg(long, global = true, env = "VEEM_PROBE_TIMEOUT", value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "2s")]
    pub probe_timeout: Duration,
}

impl GlobalOpts {
    /// The client's deadlines from `--request-timeout` and `--probe-timeout`.
    pub fn deadlines(&self) -> Deadlines {
        Deadlines {
            request: self.request_timeout,
            probe: self.probe_timeout,
        }
    }
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns, or `key: value` lines for a single object.
    Table,
    /// `table` with more columns where there are more to show (`ls`: each
    /// VEE's addresses and last change).
    Wide,
    /// One JSON document per command (one per line for `events`): a single
    /// object as itself, a list as `{"items": [...]}`; an absent value is
    /// `null`, never `""`.
    Json,
    /// The JSON as YAML: the same fields in the same order, one document
    /// per JSON document (`---` between them).
    Yaml,
    /// The IDs only, one per line (`-q`).
    #[value(skip)]
    Ids,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the VEEM daemon.
    Serve {
        /// Daemon configuration file (TOML).
        #[arg(long, env = "VEEM_CONFIG", value_name = "FILE", default_value = "/etc/veem/veem.toml")]
        config: PathBuf,
        /// Destroy the domains the hosts run that no record places there,
        /// also when the database has no records at all (by default an
        /// empty database leaves them alone).
        #[arg(long)]
        destroy_strays: bool,
        /// How log lines are written on stderr.
        #[arg(long, value_enum, default_value_t)]
        log_format: interfaces::daemon::LogFormat,
    },
    /// Check a manifest without reserving anything (exit 0 accept, 3 counter-offer, 4 reject).
    Negotiate {
        /// Service manifest (TOML).
        manifest: PathBuf,
    },
    /// Admit and deploy a manifest. The call is idempotent: a VEEM that
    /// cannot be reached or does not answer, or whose plans other
    /// admissions made stale (ABORTED), is asked again with the same
    /// request ID, and deploys the service once.
    Deploy {
        /// Service manifest (TOML).
        manifest: PathBuf,
        /// The request ID that makes the Deploy idempotent (1-128 of
        /// [A-Za-z0-9._:-]); give the same one to retry a Deploy whose
        /// answer was lost [default: a new UUID].
        #[arg(long, value_name = "ID")]
        request_id: Option<String>,
        /// `--wait`: until every VEE of the service runs.
        #[command(flatten)]
        wait: WaitOpts,
    },
    /// List the caller's services.
    Services,
    /// Show one service and its VEEs.
    Service {
        /// Service ID.
        id: String,
    },
    /// Undeploy a service: every VEE of it stops (a clean guest shutdown,
    /// then its domain destroyed after the VEEM's stop_timeout) and its
    /// reservations are released; it stays listed, terminated, with its
    /// usage. Returns when all are stopped.
    Undeploy {
        /// Service ID, unique ID prefix or name.
        id: String,
    },
    /// Extend an admitted service's window (kept only if the planner can
    /// keep every VEE where it is for the added time).
    Extend {
        /// Service ID.
        id: String,
        /// The new end: an RFC 3339 time (`2026-12-01T18:00:00Z`) or a
        /// duration from now (`+2h`).
        #[arg(long, value_name = "TIME", value_parser = parse_until)]
        until: i64,
    },
    /// Scale a component of a service to N live instances: new ones are
    /// admitted through the planner like a Deploy (all or nothing: a
    /// refusal changes nothing and says why); the highest-indexed ones
    /// stop when shrinking. Survivors keep their index, name and addresses.
    Scale {
        /// Service ID, unique ID prefix or name.
        id: String,
        /// The component, as named in the manifest.
        component: String,
        /// Live instances wanted.
        instances: u32,
        /// `--wait`: until every live VEE of the service runs.
        #[command(flatten)]
        wait: WaitOpts,
    },
    /// Rolling image update of a component: its instances are booted
    /// again from the new image one at a time (or `--max-unavailable` at a
    /// time), in place (index, name, addresses and host kept), each waited
    /// for until it runs and answers on its declared ports. An instance
    /// that does not goes back to the old image and the rollout stops; the
    /// rest stay on the old image. `--rollback` undoes the last rollout.
    Update {
        /// Service ID, unique ID prefix or name.
        id: String,
        /// The component, as named in the manifest.
        component: String,
        /// The new image: a content ID (`sha256:<hex>`) or a registry
        /// image reference, as a manifest's `image`.
        #[arg(long, value_name = "IMAGE", required_unless_present = "rollback", conflicts_with = "rollback")]
        image: Option<String>,
        /// Back to the image the component's last rollout replaced.
        #[arg(long)]
        rollback: bool,
        /// Instances replaced at once.
        #[arg(long, value_name = "N", default_value_t = 1)]
        max_unavailable: u32,
        /// How long each replaced instance may take to run and answer
        /// (`5m`) [default: 300s].
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        ready_timeout: Option<Duration>,
        /// `--wait`: until the rollout is done (exit 0) or failed (exit 1).
        #[command(flatten)]
        wait: WaitOpts,
    },
    /// The latest rolling update of a component: its state, the images,
    /// the instances replaced and, when it failed, why.
    Rollout {
        /// Service ID, unique ID prefix or name.
        id: String,
        /// The component, as named in the manifest.
        component: String,
    },
    /// Resize a running VEE in place: vCPUs by hot-plug, memory through
    /// the virtio balloon, up to the maxima its component set at deploy
    /// (`max_vcpus`, `max_memory_mib`), admitted by the planner (growth
    /// only where its host has room). A refusal changes nothing and says
    /// why.
    Resize {
        /// VEE ID or unique ID prefix.
        vee: String,
        /// vCPUs wanted.
        #[arg(long, value_name = "N", required_unless_present = "memory")]
        vcpus: Option<u32>,
        /// Memory wanted, MiB.
        #[arg(long, value_name = "MIB")]
        memory: Option<u64>,
    },
    /// List VEEs of a service, or of all the caller's services.
    Ls {
        /// Service ID; all services when omitted.
        service: Option<String>,
    },
    /// Show one VEE.
    Show {
        /// VEE ID.
        vee: String,
    },
    /// Stop a VEE.
    Stop {
        /// VEE ID.
        vee: String,
    },
    /// Suspend a VEE.
    Suspend {
        /// VEE ID.
        vee: String,
    },
    /// Resume a suspended VEE.
    Resume {
        /// VEE ID.
        vee: String,
    },
    /// A VEE's serial console in this terminal, wherever the VEE runs (its
    /// provider and the operator): every key goes to the guest until
    /// Ctrl-] detaches, as with `virsh console`. After a live migration
    /// the console is attached again by itself. Each session is audited
    /// (who, when, bytes each way; never what was typed).
    Console {
        /// VEE ID or unique ID prefix.
        vee: String,
        /// Take the console from another session that holds it.
        #[arg(long)]
        force: bool,
    },
    /// Take a checkpoint of a VEE now.
    Checkpoint {
        /// VEE ID.
        vee: String,
    },
    /// Operator of the site running a VEE for a peer site: give it back to
    /// its primary site, which takes it home (Withdraw).
    Withdraw {
        /// VEE ID.
        vee: String,
    },
    /// Restore a VEE from a checkpoint.
    Restore {
        /// VEE ID.
        vee: String,
        /// Checkpoint ID; the latest one when omitted.
        #[arg(long, value_name = "ID")]
        checkpoint: Option<String>,
    },
    /// Migrate a VEE to another host of this site or to a peer site. Without
    /// a destination the site chooses a host (the only form a service
    /// provider may use: providers never name hosts or sites).
    #[command(group(ArgGroup::new("target").required(false).args(["to_host", "to_site"])))]
    Migrate {
        /// VEE ID.
        vee: String,
        /// Destination host at this site (operators only).
        #[arg(long, value_name = "HOST")]
        to_host: Option<String>,
        /// Destination peer site (operators only).
        #[arg(long, value_name = "SITE")]
        to_site: Option<String>,
        /// Why (recorded with the proposal).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// `--wait`: until the migration is done, failed or rejected (exit 1
        /// unless done); a proposal waits for an operator's approval.
        #[command(flatten)]
        wait: WaitOpts,
    },
    /// List migrations and proposals.
    Migrations,
    /// Approve a proposed migration.
    Approve {
        /// Migration ID.
        id: String,
        /// `--wait`: until the migration is done, failed or rejected (exit 1
        /// unless done).
        #[command(flatten)]
        wait: WaitOpts,
    },
    /// Reject a proposed migration.
    Reject {
        /// Migration ID.
        id: String,
        /// Why.
        #[arg(long, value_name = "TEXT", required = true)]
        reason: String,
    },
    /// Operator: propose migrating every VEE away from a host.
    Drain {
        /// Host name.
        host: String,
    },
    /// The stored events, oldest first, read a page at a time (--follow:
    /// new events until interrupted); one line per event.
    Events {
        /// Only events of this service.
        #[arg(long, value_name = "ID")]
        service: Option<String>,
        /// Follow new events until interrupted (default: print the events
        /// so far and exit).
        #[arg(long, short = 'f')]
        follow: bool,
        /// Without --follow: only the stored events after this one (an
        /// event's `seq`, as `-o json` prints it), read a page at a time.
        #[arg(long, value_name = "SEQ", conflicts_with = "follow")]
        after: Option<u64>,
    },
    /// Operator: the site's hosts with health, capacity, reservations now
    /// and VEE count.
    Hosts,
    /// Usage SLAs and what is held now: the caller's own, or every
    /// consumer's for the operator.
    Limits,
    /// SLA violations and penalties of one service, or of all the caller's
    /// services.
    Violations {
        /// Service ID.
        service: Option<String>,
    },
    /// Usage records and SLA violations of a service.
    Usage {
        /// Service ID or name.
        service: String,
        /// Only records that end after this time: RFC 3339, or a duration
        /// before now (`-2h`).
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        from: Option<i64>,
        /// Only records that start before this time (as `--from`).
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        to: Option<i64>,
        /// One row per VEE, site (the executing one), hour or day, with the
        /// records' sums, instead of one row per record.
        #[arg(long, value_enum, value_name = "KEY")]
        group_by: Option<GroupBy>,
    },
    /// The site's records (run where the daemon runs, with its
    /// configuration; no VEEM may be using either store).
    #[command(subcommand)]
    Store(StoreCommand),
    /// Print the SHA-256 (hex) of the token read from standard input: the
    /// `token_sha256` of a `[[tokens]]` entry, so that the daemon's
    /// configuration does not hold the token itself.
    HashToken,
    #[command(flatten)]
    Doc(interfaces::daemon::SelfDoc),
}

/// `veem store ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum StoreCommand {
    /// Copy every record of a site from one store to another and check
    /// them one by one: `--from sled:/var/lib/veem/db --to etcd` moves a
    /// site onto its etcd cluster (`[store]` of `--config`), `--from etcd
    /// --to sled:PATH` back. The target must be empty; neither store may
    /// be in use (stop the site's VEEMs first).
    Migrate {
        /// The daemon's configuration (its site and `[store]`).
        #[arg(long, env = "VEEM_CONFIG", value_name = "FILE", default_value = "/etc/veem/veem.toml")]
        config: PathBuf,
        /// Where the records are: `sled:PATH` or `etcd`.
        #[arg(long, value_name = "STORE")]
        from: String,
        /// Where they go: `sled:PATH` or `etcd`.
        #[arg(long, value_name = "STORE")]
        to: String,
    },
    /// Forget the newest epoch seen from peer site SITE, so that its next
    /// leader's calls are taken whatever their epoch: after SITE rebuilt
    /// its etcd cluster, whose epochs start again from 1 (this site would
    /// refuse them as fenced). Over sled, stop the VEEM first; over etcd it
    /// may run.
    ForgetPeerEpoch {
        /// The daemon's configuration (its site and `[store]`).
        #[arg(long, env = "VEEM_CONFIG", value_name = "FILE", default_value = "/etc/veem/veem.toml")]
        config: PathBuf,
        /// The peer site's ID.
        #[arg(value_name = "SITE")]
        site: String,
    },
}

/// How often `--wait` polls the migration list.
pub const WAIT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Run a parsed command line to completion, printing to stdout/stderr, and
/// return the process exit code. `serve` runs the daemon.
pub async fn run(cli: Cli) -> ExitCode {
    let code = match cli.command {
        Command::Serve {
            ref config,
            destroy_strays,
            ..
        } => match crate::daemon::run(config, destroy_strays).await {
            Ok(()) => exit::OK,
            Err(e) => {
                eprintln!("error: {e:#}");
                exit::ERROR
            }
        },
        Command::Doc(ref doc) => {
            let cmd = Cli::definition();
            match interfaces::daemon::write_self_doc(doc, cmd, &mut std::io::stdout()) {
                Ok(()) => exit::OK,
                Err(e) => {
                    eprintln!("error: {e}");
                    exit::ERROR
                }
            }
        }
        Command::Store(StoreCommand::Migrate {
            ref config,
            ref from,
            ref to,
        }) => match store::migrate(config, from, to) {
            Ok(copied) => {
                for (tree, n) in &copied.trees {
                    println!("{tree}: {n}");
                }
                println!("{} records copied and checked", copied.total());
                exit::OK
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                exit::ERROR
            }
        },
        Command::Store(StoreCommand::ForgetPeerEpoch { ref config, ref site }) => {
            match store::forget_peer_epoch(config, site) {
                Ok(Some(e)) => {
                    println!("forgot epoch {e} of {site}");
                    exit::OK
                }
                Ok(None) => {
                    println!("no epoch of {site} was kept");
                    exit::OK
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    exit::ERROR
                }
            }
        }
        Command::HashToken => {
            let mut token = String::new();
            match std::io::stdin().read_line(&mut token) {
                Ok(_) if !token.trim().is_empty() => {
                    println!("{}", interfaces::tokens::digest_hex(token.trim()));
                    exit::OK
                }
                _ => {
                    eprintln!("error: no token on standard input");
                    exit::ERROR
                }
            }
        }
        _ => {
            let mut out = std::io::stdout();
            let mut err = std::io::stderr();
            commands::execute(&cli, WAIT_POLL_INTERVAL, &mut out, &mut err).await
        }
    };
    ExitCode::from(code)
}

pub use crate::api::model::GroupBy;

/// `--from`/`--to`: an RFC 3339 time, `+DURATION` from now or `-DURATION`
/// before now, as Unix seconds.
fn parse_time(text: &str) -> Result<i64, String> {
    if let Some(d) = text.strip_prefix('-') {
        let d = humantime::parse_duration(d).map_err(|e| format!("{text:?}: {e}"))?;
        return Ok(chrono::Utc::now().timestamp() - d.as_secs() as i64);
    }
    parse_until(text)
}

/// `--until`: an RFC 3339 time or `+DURATION` from now, as Unix seconds.
fn parse_until(text: &str) -> Result<i64, String> {
    if let Some(d) = text.strip_prefix('+') {
        let d = humantime::parse_duration(d).map_err(|e| format!("{text:?}: {e}"))?;
        return Ok(chrono::Utc::now().timestamp() + d.as_secs() as i64);
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp())
        .map_err(|e| format!("{text:?} is neither an RFC 3339 time nor +DURATION: {e}"))
}
