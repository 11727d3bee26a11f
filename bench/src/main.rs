//! `vee-bench`: benchmarks of the VEE manager, each next to what an
//! operator would otherwise do by hand, printed as JSON on stdout
//! (progress on stderr). Used by `scripts/bench`. The measurements with a
//! baseline are named metrics ([`metric`]): `{"metrics": [{"name", "unit",
//! "description", "iterations", "min", "median", "max", "samples",
//! "baseline": {"tool", "iterations", "min", "median", "max", "samples"},
//! "ratio"}]}`.
//!
//! - `vee-bench planner`: admission latency and throughput of
//!   `veem::planner` at 1,000 hosts / 10,000 VEEs and 10,000 hosts /
//!   100,000 VEEs, and the resident memory afterwards; then the real
//!   `veem serve` (release build) on a state of 10,000 hosts and 100,000
//!   running VEEs written with the `veem` library: its load time (s) and
//!   VmRSS (MiB), as `veem_rss_mib_100k_vees` and `veem_load_s_100k_vees`
//!   with the details under `veem_daemon_100k_vees`: `{"planner": {...}}`.
//! - `vee-bench veem-rss [--hosts N] [--vees N]`: only the `veem serve`
//!   part, at any scale (default 10,000 / 100,000): `{"veem_rss": {...}}`;
//!   with `--configured-hosts`, the hosts are configured (fake VEEHs in
//!   this process, so heartbeats, the domain watch and metering run), as
//!   `veem_serve_100k` of `vee-bench planner` at 2,000 hosts.
//! - `vee-bench vhi`: a real `veeh` and `image-repo` (release builds) on the
//!   two-site lab against the raw `virsh` operations on the identical
//!   domain, in the same run, at 128 MiB and 1 GiB of guest memory, and a
//!   real `veem` recovering a failed host's VEEs: `{"metrics": [...]}`.
//!   Needs `scripts/setup-host` and `scripts/build-guest-image` first;
//!   hold `/var/lib/vee-lab/lab.lock`.
//! - `vee-bench hashing [--mib N]`: SHA-256 throughput of `sha2`
//!   (production) and `ring` next to `sha256sum`: `{"metrics": [...]}`.
//! - `vee-bench checkpoint-replicated --repo-a URL --repo-b URL --token T
//!   --blob ID --mib N` (feature `sim`): a checkpoint of a VEE run for a
//!   peer site through the VEEM's workflow, from its answer to its copy in
//!   the peer's repository, next to a plain copy of the same bytes between
//!   the two repositories: `{"metrics": [...]}` (`replicated`).
//! - `vee-bench store`: the VEEM's durable commits (a Deploy's, a
//!   checkpoint record's) on a 3-member etcd cluster next to sled, in the
//!   same run: `{"metrics": [...]}`. Needs Debian's etcd-server
//!   (`scripts/setup-host`).

#[cfg(feature = "sim")]
mod deploys;
mod fake_hosts;
mod hashing;
mod metric;
mod planner;
#[cfg(feature = "sim")]
mod replicated;
mod standby;
mod store;
mod veem_rss;
mod vhi;

/// Scale of the `veem serve` measurement of `vee-bench planner`.
const VEEM_HOSTS: usize = 10_000;
const VEEM_VEES: usize = 100_000;
/// Hosts of the `veem serve` measurement with hosts configured (fake VEEHs
/// in this process; 64 vCPUs each).
const VEEM_CONFIGURED_HOSTS: usize = 2_000;

/// Benchmarks of the VEE manager (see the module doc).
#[derive(clap::Parser)]
#[command(name = "vee-bench", version)]
enum Cli {
    /// Planner admission at scale, then the real `veem serve`'s load time
    /// and memory at 10,000 hosts / 100,000 VEEs.
    Planner,
    /// Only the `veem serve` load time and memory, at any scale.
    VeemRss {
        /// Hosts in the state.
        #[arg(long, default_value_t = VEEM_HOSTS)]
        hosts: usize,
        /// Running VEEs in the state.
        #[arg(long, default_value_t = VEEM_VEES)]
        vees: usize,
        /// Configure the hosts (fake VEEHs in this process answering
        /// heartbeats, ListDomains and Stats), idle for 60 s.
        #[arg(long)]
        configured_hosts: bool,
    },
    /// A real `veeh` against raw `virsh` on the lab, in the same run.
    Vhi {
        /// Repetitions of each operation (at least 1).
        #[arg(long, env = "BENCH_REPS", default_value_t = 5)]
        reps: usize,
    },
    /// The store's commits on etcd next to sled.
    Store {
        /// Commits of each kind (median reported; at least 1).
        #[arg(long, env = "BENCH_STORE_REPS", default_value_t = 50)]
        reps: usize,
    },
    /// A checkpoint of a VEE run for a peer, from its answer to its copy in
    /// the peer's repository, next to a plain copy between the two.
    #[cfg(feature = "sim")]
    CheckpointReplicated {
        /// Site A's repository, with site B's as its peer `site-b`.
        #[arg(long)]
        repo_a: String,
        /// Site B's repository.
        #[arg(long)]
        repo_b: String,
        /// The operator's token of both repositories.
        #[arg(long, env = "IMAGE_REPO_TOKEN", hide_env_values = true)]
        token: String,
        /// The checkpoint's blob, in site A's repository.
        #[arg(long)]
        blob: String,
        /// Its size in MiB (the metric's name: `_1gib`, `_128mib`).
        #[arg(long)]
        mib: usize,
        /// Repetitions (median reported; at least 1).
        #[arg(long, env = "BENCH_REPS", default_value_t = 5)]
        reps: usize,
    },
    /// SHA-256 throughput: `sha2` and `ring` against `sha256sum`.
    Hashing {
        /// MiB hashed per repetition.
        #[arg(long, default_value_t = 1024)]
        mib: usize,
        /// Repetitions (median reported; at least 1).
        #[arg(long, env = "BENCH_REPS", default_value_t = 5)]
        reps: usize,
    },
}

fn main() -> anyhow::Result<()> {
    match <Cli as clap::Parser>::parse() {
        Cli::Planner => {
            let mut out = planner::run();
            let d = veem_rss::run(VEEM_HOSTS, VEEM_VEES, false)?;
            out["veem_rss_mib_100k_vees"] = d["daemon"]["rss_mib_idle"].clone();
            out["veem_rss_mib_100k_vees_after_list_services"] = d["daemon"]["rss_mib_after_list_services"].clone();
            out["veem_load_s_100k_vees"] = d["daemon"]["load_s"].clone();
            out["veem_daemon_100k_vees"] = d;
            out["veem_serve_100k"] = veem_rss::run(VEEM_CONFIGURED_HOSTS, VEEM_VEES, true)?;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "planner": out }))?);
        }
        Cli::VeemRss {
            hosts,
            vees,
            configured_hosts,
        } => {
            let out = veem_rss::run(hosts, vees, configured_hosts)?;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "veem_rss": out }))?);
        }
        Cli::Vhi { reps } => {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            let rows = rt.block_on(vhi::run(reps.max(1)))?;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "metrics": rows }))?);
        }
        Cli::Store { reps } => {
            let rows = store::run(reps.max(1))?;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "metrics": rows }))?);
        }
        #[cfg(feature = "sim")]
        Cli::CheckpointReplicated {
            repo_a,
            repo_b,
            token,
            blob,
            mib,
            reps,
        } => {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            let rows = rt.block_on(replicated::run(replicated::Run {
                repo_a: &repo_a,
                repo_b: &repo_b,
                token: &token,
                blob: &blob,
                mib,
                reps: reps.max(1),
            }))?;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "metrics": rows }))?);
        }
        Cli::Hashing { mib, reps } => {
            let rows = hashing::run(mib.max(1), reps.max(1))?;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "metrics": rows }))?);
        }
    }
    Ok(())
}
