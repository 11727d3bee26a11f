//! A standby VEEM over a site's etcd cluster (issue 38, item 2) next to a
//! VEEM restarted on its sled database, in the same run, at 10,000 and
//! 100,000 VEEs:
//! - **becoming current**: a standby's first read of the site's VEE
//!   records and planner (`veem::core::replica::Replica`, from its start
//!   until its copy is current), next to reading the same records from
//!   sled (`Loaded::read`: what a restarted VEEM reads);
//! - **takeover**: a new leader takes its copy (a barrier commit, the
//!   watch seen to bring it, the planner rebuilt from its entries) and
//!   opens its core (`Veem::open_leading`), next to a sled VEEM's core
//!   opened from its database; and the same takeover reading etcd instead
//!   of the copy, next to the same sled row. The election itself
//!   (the lease's TTL) is not in it: `veem_ha.rs` prints the whole
//!   takeover on the lab.
//!
//! The state is the one `veem_rss` describes (services of 4 anti-affine
//! VEEs of 1 vCPU), on 1,000 hosts of 128 vCPUs, written as Deploy writes
//! it (the VEE and service records and the planner's entries), 12
//! services per commit; no events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use interfaces::manifest::Manifest;
use serde_json::Value;
use veem::config::VeemConfig;
use veem::core::replica::Replica;
use veem::core::{renew_ahead_s, Loaded};
use veem::manager::Veem;
use veem::planner::{Admission, HostSpec, Resources};
use veem::store::{EtcdEngine, Store, Writes};

use crate::veem_rss::{MANIFEST, VEES_PER_SERVICE};

const SITE: &str = "bench-site";
const HOSTS: usize = 1000;
/// Services whose records go in one commit (under etcd's 128 operations).
const PER_COMMIT: usize = 12;

/// A configuration of site [`SITE`] without hosts or peers.
fn config(dir: &std::path::Path) -> Result<VeemConfig> {
    let vmi = vee_testkit::pki::site(SITE).vmi("127.0.0.1");
    VeemConfig::parse(&format!(
        "site_id = \"{SITE}\"\nlisten = \"127.0.0.1:1\"\ndb = \"{}\"\nimage_repo = \"http://127.0.0.1:9\"\ninsecure = true\n\n[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        dir.join("unused").display(),
        vmi.cert.display(),
        vmi.key.display()
    ))
}

/// Writes `vees` running VEEs (and their services and reservations) into
/// `store` as Deploy does, [`PER_COMMIT`] services a commit.
fn fill(cfg: &VeemConfig, store: &Store, vees: usize) -> Result<()> {
    let veem = Veem::open_leading(cfg.clone(), store.clone(), 0, None, Default::default())?;
    {
        let mut p = veem.core.planner();
        for i in 0..HOSTS {
            p.add_host(HostSpec::new(
                format!("h{i:05}"),
                Resources::new(128, 512 * 1024, 10_000),
                SITE,
                SITE,
            ))?;
        }
    }
    veem.core.persist_planner()?;
    let m = Manifest::from_toml(MANIFEST).map_err(|e| anyhow::anyhow!("bench manifest: {e}"))?;
    let services = vees / VEES_PER_SERVICE;
    let mut w = Writes::default();
    let mut last = None;
    for s in 0..services {
        let req = veem.deploy.request(&m, &uuid::Uuid::new_v4().to_string());
        let verdict = veem.core.planner().admit(&req);
        let Admission::Accepted(a) = verdict else {
            bail!("service {s} of {services} not admitted: {verdict:?}")
        };
        let (svc, vs) = veem.deploy.admission_records(&m, MANIFEST, &req, Some(&a), None);
        if let Some((svc, vs)) = last.replace((svc, vs)) {
            put_service(&mut w, &svc, &vs)?;
        }
        if (s + 1) % PER_COMMIT == 0 || s + 1 == services {
            // The batch's last service through the core (its planner
            // changes with it), the others' records beside.
            let (svc, vs) = last.take().expect("a service");
            veem.core.commit_admission_with(&svc, &vs, std::mem::take(&mut w))?;
        }
    }
    Ok(())
}

fn put_service(w: &mut Writes, svc: &veem::model::ServiceRec, vs: &[veem::model::VeeRec]) -> Result<()> {
    for v in vs {
        w.put(veem::store::Tree::Vees, &v.id, v)?;
    }
    Ok(w.put(veem::store::Tree::Services, &svc.id, svc)?)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A named metric of one measurement (ms).
fn row(name: String, what: String, ours: f64, baseline: &str, base: f64) -> Value {
    crate::metric::metric(&name, "ms", &what, &[ours * 1000.0], Some((baseline, &[base * 1000.0])))
}

/// The rows at `vees` VEEs: `etcd` a fresh prefix of the cluster, `sled`
/// a fresh database.
pub async fn run(etcd: Arc<EtcdEngine>, sled: Store, dir: &std::path::Path, vees: usize) -> Result<Vec<Value>> {
    let cfg = config(dir)?;
    let store = Store::on(etcd.clone(), "etcd")?;
    let t = Instant::now();
    let (c, s) = (cfg.clone(), store.clone());
    tokio::task::spawn_blocking(move || fill(&c, &s, vees)).await??;
    let (c, s) = (cfg.clone(), sled.clone());
    tokio::task::spawn_blocking(move || fill(&c, &s, vees)).await??;
    eprintln!(
        "standby: {vees} VEEs written to etcd and sled in {:.0} s",
        t.elapsed().as_secs_f64()
    );

    // Becoming current: the standby's first read, next to sled's.
    let t = Instant::now();
    let replica = Replica::follow(etcd.clone(), renew_ahead_s(&cfg), std::sync::Arc::new(veem::ports::SystemClock));
    let now = store.revision()?;
    if !replica.wait_for(now, Duration::from_secs(600)).await {
        bail!("the standby's copy did not become current in 600 s");
    }
    let current = t.elapsed();
    let (c, s) = (cfg.clone(), sled.clone());
    let t = Instant::now();
    let read = tokio::task::spawn_blocking(move || Loaded::read(&c, &s)).await??;
    let sled_read = t.elapsed();
    if read.vees().count() != vees {
        bail!("sled holds {} VEEs, not {vees}", read.vees().count());
    }
    drop(read);

    // Takeover: the copy taken and the core opened, next to a sled
    // VEEM's core opened from its database; and reading etcd instead.
    let t = Instant::now();
    let loaded = replica
        .take(&store, 0, Duration::from_secs(60))
        .await?
        .ok_or_else(|| anyhow::anyhow!("the standby's copy was not taken"))?;
    let (c, s) = (cfg.clone(), store.clone());
    let veem = tokio::task::spawn_blocking(move || Veem::open_leading(c, s, 0, Some(loaded), Default::default())).await??;
    let takeover = t.elapsed();
    if veem.core.vee_count() != vees {
        bail!("the copy holds {} VEEs, not {vees}", veem.core.vee_count());
    }
    drop(veem);
    let (c, s) = (cfg.clone(), store.clone());
    let t = Instant::now();
    let veem = tokio::task::spawn_blocking(move || Veem::open_leading(c, s, 0, None, Default::default())).await??;
    let without_copy = t.elapsed();
    drop(veem);
    let (c, s) = (cfg.clone(), sled.clone());
    let t = Instant::now();
    let veem = tokio::task::spawn_blocking(move || Veem::open_leading(c, s, 0, None, Default::default())).await??;
    let sled_open = t.elapsed();
    drop(veem);

    Ok(vec![
        row(
            format!("standby_current_ms_{vees}_vees"),
            format!("standby: becoming current at {vees} VEEs (first read of records and planner), etcd 3 members"),
            secs(current),
            "reading the same records on sled (a restarted VEEM's read)",
            secs(sled_read),
        ),
        row(
            format!("takeover_with_copy_ms_{vees}_vees"),
            format!("takeover at {vees} VEEs: the standby's copy taken (barrier, planner rebuilt), the core opened"),
            secs(takeover),
            "a VEEM restarted on sled: its core opened from the database",
            secs(sled_open),
        ),
        row(
            format!("takeover_without_copy_ms_{vees}_vees"),
            format!("takeover at {vees} VEEs without the copy: the core read from etcd"),
            secs(without_copy),
            "a VEEM restarted on sled: its core opened from the database",
            secs(sled_open),
        ),
    ])
}
