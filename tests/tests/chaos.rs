//! The control plane under chaos, a short run (`e2e::chaos`; the long
//! run is `scripts/chaos --rounds 100`, its table in
//! docs/reliability.md): rounds of one fault each (kill -9 or SIGSTOP of
//! the leader, the leader cut off from etcd, kill -9 of the standby, an
//! etcd member, a VEEH) under a load of `veem` commands and a peer site's
//! migrations in and out; no VEE lost, doubled or stuck, no gap in usage
//! records, one leader after each.
//!
//! `CHAOS_ROUNDS` (default 6: each fault once) and `CHAOS_SEED` (default: the time) set
//! the run; `CHAOS_TABLE` names a file the table is written to.

use e2e::lab;

#[tokio::test(flavor = "multi_thread")]
async fn lab_chaos_rounds_lose_double_and_strand_no_vee() {
    let _lab = lab::lock();
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let rounds = env("CHAOS_ROUNDS").unwrap_or(6) as usize;
    let seed = env("CHAOS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    });
    println!("chaos: {rounds} rounds, seed {seed} (CHAOS_SEED={seed} draws them again)");
    let report = e2e::chaos::run(rounds, seed).await;
    let table = report.table();
    println!("\n{table}");
    if let Ok(f) = std::env::var("CHAOS_TABLE") {
        std::fs::write(f, format!("{rounds} rounds, seed {seed}\n\n{table}")).unwrap();
    }
    assert_eq!(report.violations(), 0, "{report:#?}");
}
