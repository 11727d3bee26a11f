//! `vee-bench`: benchmarks of the VEE manager, each next to what an
//! operator would otherwise do by hand, printed as JSON on stdout
//! (progress on stderr). Used by `scripts/bench`.
//!
//! - `vee-bench planner`: admission latency and throughput of
//!   `veem::planner` at 1,000 hosts / 10,000 VEEs and 10,000 hosts /
//!   100,000 VEEs, and the resident memory afterwards:
//!   `{"planner": {...}}`.
//! - `vee-bench vhi`: a real `veeh` and `image-repo` (release builds) on the
//!   two-site lab against the raw `virsh` operations on the identical
//!   domain, in the same run: `{"rows": [{"name", "ours_s", "baseline",
//!   "baseline_s", "ratio"}]}`. Needs `scripts/setup-host` and
//!   `scripts/build-guest-image` first; hold `target/e2e/lab.lock`.

mod planner;
mod vhi;

fn usage() -> ! {
    eprintln!("usage: vee-bench planner | vee-bench vhi [--reps N]");
    std::process::exit(2)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("planner") => {
            let out = planner::run();
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "planner": out }))?);
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
