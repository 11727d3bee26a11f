//! The VEEM's durable commits on a site's etcd cluster next to the
//! embedded sled database, in the same run (issue 38): what one Deploy
//! writes (the service, its 4 VEEs conditioned on the revision they were
//! read at, 4 planner entries: one etcd transaction, one sled
//! transaction) and what recording one checkpoint writes (the checkpoint
//! record and its VEE, conditioned); with feature `sim`, a VEEM's Deploys
//! side by side on each ([`crate::deploys`]). etcd: 3 members on loopback ports
//! with client certificates (`vee_testkit::etcd`), data under
//! `target/bench/store`; sled there too, flushed at each commit. The
//! records are payloads of the sizes the VEEM writes (a service 2 KiB, a
//! VEE 1.5 KiB, a planner entry 300 B, a checkpoint record 600 B). Then,
//! on the same cluster, a standby's rows ([`crate::standby`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;

use crate::metric::ms;
use vee_testkit::etcd::EtcdCluster;
use veem::store::{EtcdEngine, EtcdOptions, SledEngine, Store, Tree, Writes};

fn payload(bytes: usize, tag: usize) -> String {
    format!("{tag:08}{}", "x".repeat(bytes.saturating_sub(8)))
}

/// The seconds of each of `reps` runs of `f`.
fn timed(reps: usize, mut f: impl FnMut(usize) -> Result<()>) -> Result<Vec<f64>> {
    let mut t = Vec::with_capacity(reps);
    for i in 0..reps {
        let start = Instant::now();
        f(i)?;
        t.push(start.elapsed().as_secs_f64());
    }
    Ok(t)
}

/// What one Deploy commits, `reps` times: the seconds of each.
fn deploy(store: &Store, reps: usize) -> Result<Vec<f64>> {
    timed(reps, |i| {
        let since = store.revision()?;
        let mut w = Writes::default();
        w.put(Tree::Services, &format!("s{i:06}"), &payload(2048, i))?;
        for v in 0..4 {
            let id = format!("v{i:06}-{v}");
            w.put(Tree::Vees, &id, &payload(1536, i))?;
            w.unchanged_since(Tree::Vees, &id, since, false);
            w.put(Tree::Planner, &format!("p/{id}"), &payload(300, i))?;
        }
        store.commit(w)?;
        Ok(())
    })
}

/// What recording one checkpoint commits, `reps` times: the seconds of
/// each.
fn checkpoint(store: &Store, reps: usize) -> Result<Vec<f64>> {
    timed(reps, |i| {
        let since = store.revision()?;
        let vee = format!("v{i:06}-0");
        let mut w = Writes::default();
        w.put(Tree::Checkpoints, &format!("c{i:06}"), &payload(600, i))?;
        w.put(Tree::Vees, &vee, &payload(1536, i + 1))?;
        w.unchanged_since(Tree::Vees, &vee, since, true);
        store.commit(w)?;
        Ok(())
    })
}

/// The sizes of the standby rows: `BENCH_STANDBY_VEES`, a comma list of
/// VEE counts (multiples of 4), 10,000 and 100,000 by default.
fn standby_sizes() -> Result<Vec<usize>> {
    let text = std::env::var("BENCH_STANDBY_VEES").unwrap_or_else(|_| "10000,100000".into());
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse::<usize>()
                .map_err(|e| anyhow::anyhow!("BENCH_STANDBY_VEES {s:?}: {e}"))
        })
        .collect()
}

/// The named metrics ([`crate::metric`]): each commit on etcd (ours) next to sled (baseline), then a
/// standby's ([`crate::standby`]).
pub fn run(reps: usize) -> Result<Vec<Value>> {
    let dir = vee_testkit::lab::repo_root().join("target").join("bench").join("store");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let cluster = EtcdCluster::start(&dir, 3).map_err(anyhow::Error::msg)?;
    let etcd = EtcdEngine::connect(&EtcdOptions {
        endpoints: cluster.endpoints(),
        tls: Some(cluster.client_tls()),
        prefix: "/vee/bench".into(),
        timeout: Duration::from_secs(5),
    })?;
    let etcd = Store::on(Arc::new(etcd), "etcd")?;
    let sled = Store::on(Arc::new(SledEngine::open(&dir.join("sled"))?), "sled")?;
    let mut rows = Vec::new();
    for (metric, name, what) in [
        (
            "store_deploy_commit_ms",
            "store: one Deploy's commit (service, 4 VEEs, 4 planner entries)",
            deploy as fn(&Store, usize) -> Result<Vec<f64>>,
        ),
        (
            "store_checkpoint_commit_ms",
            "store: one checkpoint record's commit (record and VEE)",
            checkpoint,
        ),
    ] {
        eprintln!("{name}");
        let ours = what(&etcd, reps)?;
        let base = what(&sled, reps)?;
        rows.push(crate::metric::metric(
            metric,
            "ms",
            &format!("{name}, etcd 3 members (loopback, TLS)"),
            &ms(&ours),
            Some(("the same on sled (embedded, flushed)", &ms(&base))),
        ));
    }
    drop((etcd, sled));
    // Deploys side by side on one VEEM, on etcd and on sled.
    #[cfg(feature = "sim")]
    {
        eprintln!("{} deploys, {} at once", std::env::var("BENCH_DEPLOYS").unwrap_or_else(|_| "160".into()), crate::deploys::AT_ONCE);
        rows.extend(crate::deploys::run(&cluster, &dir, 3)?);
    }
    // A standby becoming current and taking over, at each size, on a
    // prefix and a database of its own.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    for vees in standby_sizes()? {
        eprintln!("standby at {vees} VEEs");
        let etcd = Arc::new(EtcdEngine::connect(&EtcdOptions {
            endpoints: cluster.endpoints(),
            tls: Some(cluster.client_tls()),
            prefix: format!("/vee/standby-{vees}"),
            timeout: Duration::from_secs(30),
        })?);
        let sled = Store::on(Arc::new(SledEngine::open(&dir.join(format!("sled-{vees}")))?), "sled")?;
        rows.extend(rt.block_on(crate::standby::run(etcd, sled, &dir, vees))?);
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}
