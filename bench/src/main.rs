//! `vee-bench`: benchmarks of the VEE manager, each next to what an
//! operator would otherwise do by hand, printed as JSON on stdout
//! (progress on stderr). Used by `scripts/bench`.
//!
//! - `vee-bench planner`: admission latency and throughput of
//!   `veem::planner` at 1,000 hosts / 10,000 VEEs and 10,000 hosts /
//!   100,000 VEEs, and the resident memory afterwards; then the real
//!   `veem serve` (release build) on a state of 10,000 hosts and 100,000
//!   running VEEs written with the `veem` library: its load time (s) and
//!   VmRSS (MiB), as `veem_rss_mib_100k_vees` and `veem_load_s_100k_vees`
//!   with the details under `veem_daemon_100k_vees`: `{"planner": {...}}`.
//! - `vee-bench veem-rss [--hosts N] [--vees N]`: only the `veem serve`
//!   part, at any scale (default 10,000 / 100,000): `{"veem_rss": {...}}`.
//! - `vee-bench vhi`: a real `veeh` and `image-repo` (release builds) on the
//!   two-site lab against the raw `virsh` operations on the identical
//!   domain, in the same run: `{"rows": [{"name", "ours_s", "baseline",
//!   "baseline_s", "ratio"}]}`. Needs `scripts/setup-host` and
//!   `scripts/build-guest-image` first; hold `/var/lib/vee-lab/lab.lock`.

mod planner;
mod veem_rss;
mod vhi;

/// Scale of the `veem serve` measurement of `vee-bench planner`.
const VEEM_HOSTS: usize = 10_000;
const VEEM_VEES: usize = 100_000;

fn usage() -> ! {
    eprintln!("usage: vee-bench planner | vee-bench veem-rss [--hosts N] [--vees N] | vee-bench vhi [--reps N]");
    std::process::exit(2)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("planner") => {
            let mut out = planner::run();
            let d = veem_rss::run(VEEM_HOSTS, VEEM_VEES)?;
            out["veem_rss_mib_100k_vees"] = d["daemon"]["rss_mib_idle"].clone();
            out["veem_rss_mib_100k_vees_after_list_services"] = d["daemon"]["rss_mib_after_list_services"].clone();
            out["veem_load_s_100k_vees"] = d["daemon"]["load_s"].clone();
            out["veem_daemon_100k_vees"] = d;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "planner": out }))?);
        }
        Some("veem-rss") => {
            let (mut hosts, mut vees) = (VEEM_HOSTS, VEEM_VEES);
            let mut it = args.iter().skip(1);
            while let Some(a) = it.next() {
                let n = it.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| usage());
                match a.as_str() {
                    "--hosts" => hosts = n,
                    "--vees" => vees = n,
                    _ => usage(),
                }
            }
            let out = veem_rss::run(hosts, vees)?;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "veem_rss": out }))?);
        }
        Some("vhi") => {
            let mut reps = std::env::var("BENCH_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(5usize);
            let mut it = args.iter().skip(1);
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--reps" => reps = it.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| usage()),
                    _ => usage(),
                }
            }
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            let rows = rt.block_on(vhi::run(reps.max(1)))?;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "rows": rows }))?);
        }
        _ => usage(),
    }
    Ok(())
}
