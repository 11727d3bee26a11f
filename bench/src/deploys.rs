//! Deploys side by side on one VEEM (feature `sim`): the VEEM's own Deploy
//! (the manifest checked, planned, committed with its records in one
//! write, booted in the background on the simulation's fake VEEHs) of
//! `BENCH_DEPLOYS` services of one 1-vCPU VEE (160 by default),
//! [`AT_ONCE`] at a time, over a site's 3-member etcd cluster, next to the
//! same over sled in the same run: the deploys a second (throughput), the
//! 99th percentile of one Deploy until admitted and the answers of ABORTED
//! (a plan the site's other admissions made stale at every attempt: a
//! client asks again), per repetition. The runtime
//! is the daemon's: two worker threads.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;

use vee_testkit::etcd::EtcdCluster;
use veem::config::Role;
use veem::sim::{FakeSite, STANDARD};
use veem::store::{EtcdEngine, EtcdOptions, SledEngine, Store};

/// Deploys under way at once.
pub const AT_ONCE: usize = 16;

/// How many Deploys a repetition makes: `BENCH_DEPLOYS`, 160 by default.
fn deploys() -> usize {
    std::env::var("BENCH_DEPLOYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(160)
        .max(AT_ONCE)
}

/// One repetition on `store`: (deploys a second, p99 of one Deploy in ms
/// until admitted, ABORTED answers asked again).
async fn once(store: Store, n: usize) -> Result<(f64, f64, f64)> {
    // Hosts of 4 vCPUs: room for every VEE.
    let hosts: Vec<String> = (0..n.div_ceil(4) + 1).map(|i| format!("h{i:03}")).collect();
    let names: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let site = FakeSite::start_on("site-a", &names, "", store);
    // The manifest's image, in the fake repository.
    site.repo.blobs.lock().unwrap().insert(format!("sha256:{}", "5".repeat(64)));
    let caller = Role::Provider("acme".into());
    let started = Instant::now();
    let mut took = Vec::with_capacity(n);
    let (mut next, mut refused) = (0, 0);
    while next < n {
        let batch = AT_ONCE.min(n - next);
        let calls = (0..batch).map(|_| {
            let (deploy, caller) = (site.veem.deploy.clone(), caller.clone());
            tokio::spawn(async move {
                // As a client does: an answer of ABORTED (the site's plan
                // changed under every attempt) is asked again.
                let (t, mut aborted) = (Instant::now(), 0usize);
                loop {
                    match deploy.deploy(&caller, STANDARD).await {
                        Ok(_) => return Ok((t.elapsed(), aborted)),
                        Err(e) if e.chain().any(|c| c.is::<veem::planner::Stale>()) => aborted += 1,
                        Err(e) => return Err(e),
                    }
                }
            })
        });
        for d in futures::future::join_all(calls).await {
            let (t, a) = d??;
            took.push(t);
            refused += a;
        }
        next += batch;
    }
    let per_s = n as f64 / started.elapsed().as_secs_f64();
    took.sort();
    let p99 = took[(took.len() * 99).div_ceil(100).saturating_sub(1)];
    Ok((per_s, p99.as_secs_f64() * 1000.0, refused as f64))
}

/// The two metrics, `reps` repetitions each on etcd (a prefix of its own
/// per repetition) and on sled (a database of its own per repetition).
pub fn run(cluster: &EtcdCluster, dir: &Path, reps: usize) -> Result<Vec<Value>> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let n = deploys();
    let (mut etcd, mut sled) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let engine = EtcdEngine::connect(&EtcdOptions {
            endpoints: cluster.endpoints(),
            tls: Some(cluster.client_tls()),
            prefix: format!("/vee/deploys-{rep}"),
            timeout: Duration::from_secs(5),
        })?;
        etcd.push(rt.block_on(once(Store::on(Arc::new(engine), "etcd")?, n))?);
        let db = dir.join(format!("sled-deploys-{rep}"));
        sled.push(rt.block_on(once(Store::on(Arc::new(SledEngine::open(&db)?), "sled")?, n))?);
    }
    let what = format!("{n} Deploys of a 1-VEE service, {AT_ONCE} at once, one VEEM (2 worker threads), etcd 3 members (loopback, TLS)");
    let column = |v: &[(f64, f64, f64)], i: usize| -> Vec<f64> { v.iter().map(|r| [r.0, r.1, r.2][i]).collect() };
    Ok(vec![
        crate::metric::metric(
            "deploy_concurrent_per_s",
            "deploys/s",
            &format!("{what}: throughput"),
            &column(&etcd, 0),
            Some(("the same on sled (embedded, flushed)", &column(&sled, 0))),
        ),
        crate::metric::metric(
            "deploy_concurrent_p99_ms",
            "ms",
            &format!("{what}: one Deploy until admitted (ABORTED answers asked again), 99th percentile"),
            &column(&etcd, 1),
            Some(("the same on sled (embedded, flushed)", &column(&sled, 1))),
        ),
        crate::metric::metric(
            "deploy_concurrent_aborted",
            "answers",
            &format!("{what}: answers of ABORTED (the site's plan changed under every attempt), asked again"),
            &column(&etcd, 2),
            Some(("the same on sled (embedded, flushed)", &column(&sled, 2))),
        ),
    ])
}
