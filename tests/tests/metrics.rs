//! Prometheus metrics of the three daemons, scraped by a real Prometheus
//! (Debian's, on a loopback port, from a generated configuration): after
//! a deploy of the tiny guest, a checkpoint and an in-site live
//! migration, PromQL through Prometheus's HTTP API gives the VEE count,
//! a non-empty checkpoint-duration histogram, the migration's downtime,
//! the VEEHs' domains and the repository's blobs; each daemon's metrics
//! listener answers the supervisors' probes. The VEEM's listener serves
//! HTTPS with a bearer token, as Prometheus's `scheme: https` and
//! `authorization` scrape it.

use std::time::{Duration, Instant};

use e2e::daemons::{ImageRepo, Veeh};
use e2e::site::{self, host_of, Veem, ACME};
use e2e::{guest, lab};
use interfaces::vmi::*;
use vee_testkit::prometheus::{Job, Prometheus};

/// The bearer token Prometheus scrapes the VEEM's metrics with.
const SCRAPER: &str = "a-prometheus-scrape-token";

/// The value of PromQL `query` now (the first series' value), `None`
/// while it has no result.
async fn query(prom: &Prometheus, query: &str) -> Option<f64> {
    let body: serde_json::Value = interfaces::tls::http_client()
        .build()
        .unwrap()
        .get(format!("{}/api/v1/query", prom.url))
        .query(&[("query", query)])
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    assert_eq!(body["status"], "success", "{query}: {body}");
    let v = body["data"]["result"].get(0)?["value"][1].as_str()?;
    v.parse().ok()
}

/// Polls `q` until `ok` holds of its value (at most 60 s): the value.
async fn until(prom: &Prometheus, q: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let start = Instant::now();
    loop {
        let v = query(prom, q).await;
        if let Some(v) = v.filter(|v| ok(*v)) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{q} is {v:?} after 60 s; Prometheus's log:\n{}",
            prom.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_prometheus_scrapes_the_veem_the_veehs_and_the_repository() {
    let _lab = lab::lock();
    let dir = lab::test_dir("metrics");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let c1 = Veeh::start(&dir, "m1", "site-a", lab::SITE_A_URI, &repo).await;
    let c2 = Veeh::start(&dir, "m2", "site-a", lab::SITE_A2_URI, &repo).await;
    let port = site::port();
    let veem_metrics = format!("{}:{}", lab::Place::SiteA.addr(), lab::free_port());
    let pki = vee_testkit::pki::site("site-a");
    let vmi = pki.vmi(lab::Place::SiteA.addr());
    let extra = format!(
        "[metrics]\nlisten = \"{veem_metrics}\"\ntoken_sha256 = \"{}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
        interfaces::tokens::digest_hex(SCRAPER),
        vmi.cert.display(),
        vmi.key.display()
    );
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&c1, &c2], &[], &extra);
    let veem = Veem::start(&dir, "site-a", port, cfg).await;

    // Each listener answers the probes without a token; the VEEM's over
    // HTTPS only, and its metrics with the token only.
    let ca = std::fs::read(pki.vmi_ca()).unwrap();
    let http = interfaces::tls::http_client()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca).unwrap()])
        .build()
        .unwrap();
    let veem_url = format!("https://{veem_metrics}");
    for base in [
        veem_url.clone(),
        format!("http://{}", c1.metrics),
        format!("http://{}", repo.metrics),
    ] {
        for probe in ["healthz", "readyz"] {
            let r = http.get(format!("{base}/{probe}")).send().await.unwrap();
            assert_eq!(r.status(), 200, "{base}/{probe}: {}", r.text().await.unwrap());
        }
    }
    assert!(
        http.get(format!("http://{veem_metrics}/healthz")).send().await.is_err(),
        "plain HTTP"
    );
    let unauthenticated = http.get(format!("{veem_url}/metrics")).send().await.unwrap();
    assert_eq!(unauthenticated.status(), 401);

    let mut acme = veem.client(ACME).await;
    let (_, info) = veem.deploy_running(&mut acme, "shop", &ids).await;
    let vee = info.vee_id.clone();
    site::vee_action(&mut acme, &vee, Action::Checkpoint).await.unwrap();
    let from = host_of(&info).unwrap();
    let to = if from == c1.host { &c2.host } else { &c1.host };
    let m = site::migrate_approved(&veem, &vee, "", to).await;
    assert_eq!(m.state(), MigrationState::Done, "{m:?}");

    let prom = Prometheus::start(&[
        Job {
            name: "veem",
            targets: vec![veem_metrics.clone()],
            tls_ca: Some(&pki.vmi_ca()),
            token: Some(SCRAPER),
        },
        Job {
            name: "veeh",
            targets: vec![c1.metrics.clone(), c2.metrics.clone()],
            ..Default::default()
        },
        Job {
            name: "image-repo",
            targets: vec![repo.metrics.clone()],
            ..Default::default()
        },
    ]);
    assert_eq!(until(&prom, "count(up == 1)", |v| v == 4.0).await, 4.0);
    until(&prom, "sum(veem_vees{state=\"running\"})", |v| v == 1.0).await;
    until(&prom, "veem_leader", |v| v == 1.0).await;
    until(&prom, "veem_admissions_total{verdict=\"admitted\"}", |v| v == 1.0).await;
    until(&prom, "veem_checkpoint_duration_seconds_count", |v| v >= 1.0).await;
    // The histogram's buckets: the last one holds every checkpoint.
    until(&prom, "veem_checkpoint_duration_seconds_bucket{le=\"+Inf\"}", |v| v >= 1.0).await;
    until(&prom, "veem_checkpoint_size_bytes_sum", |v| v > 0.0).await;
    until(&prom, "veem_migrations_total{kind=\"in_site\",outcome=\"done\"}", |v| v == 1.0).await;
    let downtime = until(&prom, &format!("veem_last_migration_downtime_seconds{{vee=\"{vee}\"}}"), |v| {
        v >= 0.0
    })
    .await;
    let observed = until(&prom, "veem_migration_downtime_seconds_sum", |v| v >= 0.0).await;
    assert_eq!(downtime, observed, "one migration: its downtime is the histogram's sum");
    assert!(downtime < 5.0, "a live migration's downtime: {downtime} s");
    until(
        &prom,
        &format!("veem_host_vees{{host=\"{to}\"}} and veem_host_reserved_vcpus{{host=\"{to}\"}} >= 1"),
        |v| v == 1.0,
    )
    .await;
    until(&prom, "sum(veeh_domains{state=\"running\"})", |v| v == 1.0).await;
    until(&prom, "sum(veeh_libvirt_call_duration_seconds_count{call=\"migrate\"})", |v| {
        v == 1.0
    })
    .await;
    until(&prom, "image_repo_blobs", |v| v >= 3.0).await;
    until(&prom, "image_repo_sent_bytes_total", |v| v > 0.0).await;
    until(&prom, "process_resident_memory_bytes{job=\"veem\"}", |v| v > 0.0).await;
}
