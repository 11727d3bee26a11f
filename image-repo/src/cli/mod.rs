//! The `image-repo` command line: `serve` runs the repository; `push`,
//! `pull`, `ls`, `show`, `rm`, `pin`, `unpin`, `share`, `public`,
//! `private` and `gc` talk to one; `hash-token` prints a token's digest.

mod commands;
mod output;
mod progress;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use interfaces::repo_client::BlobKind;
use interfaces::BlobId;

/// Content-addressed repository of VEE images, kernels, initrds and checkpoints.
#[derive(Debug, Parser)]
#[command(
    name = "image-repo",
    version = interfaces::daemon::version(),
    about,
    after_long_help = interfaces::daemon::EXIT_STATUS
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the repository server.
    Serve(ServeArgs),
    /// Upload a file; prints its ID alone on the last line.
    Push(PushArgs),
    /// Download a blob by ID, verifying its sha256, resuming FILE.partial.
    Pull(PullArgs),
    /// List the stored blobs.
    Ls(LsArgs),
    /// Show the metadata of one blob.
    Show(ShowArgs),
    /// Delete a blob (pinned blobs need --force).
    Rm(RmArgs),
    /// Pin a blob so that it is not deleted without --force.
    Pin(PinArgs),
    /// Remove a pin (succeeds if the pin was not set).
    Unpin(PinArgs),
    /// Let another site or provider read a blob (its owner, the operator,
    /// or a site sharing what it may read).
    Share(PinArgs),
    /// Make a blob readable by every token (the operator only).
    Public(IdArgs),
    /// Make a public blob private again (the operator only).
    Private(IdArgs),
    /// Remove the checkpoint blobs and OCI content nothing needs: no pin,
    /// in no OCI repository, not public, stored more than --grace ago (the
    /// operator only).
    Gc(GcArgs),
    /// Push a VM image to any OCI registry as a VEE image artifact (a disk,
    /// and a kernel and initrd for direct boot); prints the manifest's
    /// digest, and the reference a service manifest names it by.
    PushImage(PushImageArgs),
    /// Print the SHA-256 of a token read from stdin, for `token_sha256`.
    HashToken,
    #[command(flatten)]
    Doc(interfaces::daemon::SelfDoc),
}

/// Options of `push-image`.
#[derive(Debug, Args)]
pub struct PushImageArgs {
    /// Where to: `REGISTRY/REPOSITORY:TAG`, e.g. `registry.example.com:5000/acme/web:v1`.
    #[arg(value_name = "REFERENCE")]
    pub reference: String,
    /// The disk image (qcow2 or raw, by its first bytes).
    #[arg(long)]
    pub disk: PathBuf,
    /// A kernel for direct kernel boot.
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// An initrd (with --kernel).
    #[arg(long, requires = "kernel")]
    pub initrd: Option<PathBuf>,
    /// The CA (PEM) of the registry's certificate [default: the system's roots].
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// The user to sign in as (with --password-file).
    #[arg(long, requires = "password_file")]
    pub username: Option<String>,
    /// A file whose first line is the password or token.
    #[arg(long, requires = "username")]
    pub password_file: Option<PathBuf>,
    /// A host (`host[:port]`) besides the registry's that may receive the
    /// credentials as its token service (the realm of its challenge);
    /// repeatable. The realm must be HTTPS whatever this says.
    #[arg(long = "realm-host")]
    pub realm_hosts: Vec<String>,
}

/// Options of `gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Keep blobs stored less than this long ago (`30m`, `1h`, `2d`).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub grace: std::time::Duration,
    /// List what would go; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub repo: RepoArgs,
}

/// Options of commands that take just a blob ID.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// ID of the blob.
    #[arg(value_parser = parse_id)]
    pub id: BlobId,
    #[command(flatten)]
    pub repo: RepoArgs,
}

/// Options of `serve`; flags override the configuration file.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// How log lines are written on stderr.
    #[arg(long, value_enum, default_value_t)]
    pub log_format: interfaces::daemon::LogFormat,
    /// TOML configuration file (listen, data, token, tokens, max_size, reserve, limits, tls);
    /// without it, /etc/image-repo/image-repo.toml if that exists, else flags only.
    #[arg(long, env = "IMAGE_REPO_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on (port 0 picks a free port) [default: 127.0.0.1:7480].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Data directory.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// File whose first line is the operator's token (else
    /// `IMAGE_REPO_WRITE_TOKEN`, else the configuration's `token`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Refused: a token on the command line is visible in `ps`.
    #[arg(long, value_name = "TOKEN", hide = true)]
    pub token: Option<String>,
    /// Quota on the stored content, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: Option<u64>,
    /// The server's TLS certificate (PEM); with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The server's TLS private key (PEM); with --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve plaintext HTTP (no TLS): tokens and content cross in clear.
    #[arg(long)]
    pub insecure: bool,
}

/// Where the repository is and how to authenticate.
#[derive(Debug, Args)]
pub struct RepoArgs {
    /// Base URL of the repository, e.g. http://10.0.0.5:7480.
    #[arg(long, value_name = "URL", env = "IMAGE_REPO_URL")]
    pub repo: String,
    /// File whose first line is the bearer token (the operator's, a
    /// site's or a service provider's) [else: `IMAGE_REPO_TOKEN`].
    #[arg(long, value_name = "FILE", env = "IMAGE_REPO_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Refused: a token on the command line is visible in `ps`.
    #[arg(long, value_name = "TOKEN", hide = true)]
    pub token: Option<String>,
    /// The CA (PEM) of the repository's certificate, for an https URL.
    #[arg(long, value_name = "FILE", env = "IMAGE_REPO_CA")]
    pub ca: Option<PathBuf>,
}

/// Options of `push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// File to upload.
    pub file: PathBuf,
    /// Name recorded with the blob [default: the file name].
    #[arg(long)]
    pub name: Option<String>,
    /// What the blob holds.
    #[arg(long, default_value = "disk", value_parser = parse_kind)]
    pub kind: BlobKind,
    /// Image format (qcow2, raw) [default for disks: qcow2 if the file has the qcow2 magic, else raw].
    #[arg(long)]
    pub format: Option<String>,
    /// Label KEY=VALUE (repeatable), e.g. --label os=debian --label arch=x86_64.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = interfaces::repo_client::types::parse_label)]
    pub labels: Vec<(String, String)>,
    #[command(flatten)]
    pub repo: RepoArgs,
}

/// Options of `pull`.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// ID of the blob (sha256:<64 hex>).
    #[arg(value_parser = parse_id)]
    pub id: BlobId,
    /// Where to write it (`FILE.partial` until verified, then renamed).
    #[arg(value_name = "FILE")]
    pub dest: PathBuf,
    #[command(flatten)]
    pub repo: RepoArgs,
}

/// Output formats of `ls` and `show`, spelt as `veem -o` spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For humans (`text` still reads).
    #[value(alias = "text")]
    Table,
    /// JSON: a blob as an object, a list as `{"items": [...]}` (as veem's).
    Json,
    /// The JSON as YAML, the same fields in the same order.
    Yaml,
}

/// Options of `ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
    /// Print the IDs alone, one per line.
    #[arg(short = 'q', long, conflicts_with = "output")]
    pub quiet: bool,
    #[command(flatten)]
    pub repo: RepoArgs,
}

/// Options of `show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// ID of the blob.
    #[arg(value_parser = parse_id)]
    pub id: BlobId,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
    #[command(flatten)]
    pub repo: RepoArgs,
}

/// Options of `rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// ID of the blob.
    #[arg(value_parser = parse_id)]
    pub id: BlobId,
    /// Delete even if pinned.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub repo: RepoArgs,
}

/// Options of `pin`, `unpin` (NAME: the pin) and `share` (NAME: the reader).
#[derive(Debug, Args)]
pub struct PinArgs {
    /// ID of the blob.
    #[arg(value_parser = parse_id)]
    pub id: BlobId,
    /// Pin name (e.g. site-b, checkpoint:42) or, for share, the reader's name.
    pub name: String,
    #[command(flatten)]
    pub repo: RepoArgs,
}

fn parse_id(s: &str) -> Result<BlobId, String> {
    s.parse().map_err(|e: interfaces::manifest::Error| e.to_string())
}

fn parse_kind(s: &str) -> Result<BlobKind, String> {
    s.parse()
}

/// The `image-repo` command line (what `--help`, the man page and the
/// completions show).
pub fn command() -> clap::Command {
    interfaces::daemon::name_self_doc(<Cli as clap::CommandFactory>::command())
}

/// Parses the command line, runs it and returns the exit code (0 on
/// success, 1 on error, 2 on bad usage). Errors are printed to stderr.
pub async fn main() -> ExitCode {
    let cli: Cli = interfaces::daemon::parse_with(command());
    match &cli.command {
        Command::Serve(a) => interfaces::daemon::init_logging(a.log_format, "info"),
        _ => interfaces::daemon::init_logging(interfaces::daemon::LogFormat::Text, "warn"),
    }
    match commands::run(cli.command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The token of a command: from `file`, else from environment variable
/// `var`, else none. Errors: a token given on the command line (`argv`,
/// refused: `ps` shows it), or an unreadable or empty token file.
pub fn token(argv: Option<&str>, file: Option<&std::path::Path>, var: &str) -> anyhow::Result<Option<String>> {
    if argv.is_some() {
        return Err(interfaces::tokens::refuse_on_argv(
            "--token",
            &format!("--token-file FILE or {var}"),
        ));
    }
    match file {
        Some(f) => interfaces::tokens::read_file(f).map(Some),
        None => Ok(std::env::var(var).ok().filter(|t| !t.is_empty())),
    }
}
