use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::body::Body;
use axum::http::Request;
use prometheus_client::metrics::counter::Counter;
use tower::ServiceExt;

use super::*;

const TOKEN: &str = "a-metrics-token-of-enough-length";

fn config(token: bool) -> MetricsConfig {
    MetricsConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        token_sha256: token.then(|| crate::tokens::digest_hex(TOKEN)),
        tls_cert: None,
        tls_key: None,
    }
}

async fn get(x: &Exporter, method: Method, path: &str, bearer: Option<&str>) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(b) = bearer {
        req = req.header(header::AUTHORIZATION, format!("Bearer {b}"));
    }
    let resp = x.clone().router().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn a_scrape_has_the_daemons_metrics_refreshed_and_the_processs_own() {
    let calls = Counter::<u64>::default();
    calls.inc_by(3);
    let refreshed = Arc::new(AtomicU64::new(0));
    let r = refreshed.clone();
    let before: BeforeScrape = Arc::new(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    let register = |r: &mut Registry| r.register("calls", "Calls", calls.clone());
    let x = Exporter::new(&config(false), "veeh", register, Some(before), Arc::new(|| Ok(()))).unwrap();
    let (status, body) = get(&x, Method::GET, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("veeh_calls_total 3"), "{body}");
    assert_eq!(refreshed.load(Ordering::SeqCst), 1);
    for name in [
        "\nprocess_cpu_seconds_total ",
        "\nprocess_resident_memory_bytes ",
        "\nprocess_open_fds ",
        "\nprocess_start_time_seconds ",
    ] {
        assert!(body.contains(name), "{name} missing:\n{body}");
    }
    assert!(body.ends_with("# EOF\n"));
}

#[tokio::test]
async fn probes_follow_readiness_and_other_paths_are_not_found() {
    let ready = Arc::new(AtomicBool::new(false));
    let r = ready.clone();
    let readiness: Readiness = Arc::new(move || if r.load(Ordering::SeqCst) { Ok(()) } else { Err("starting".into()) });
    let x = Exporter::new(&config(true), "veeh", |_| {}, None, readiness).unwrap();
    assert_eq!(get(&x, Method::GET, "/healthz", None).await.0, StatusCode::OK);
    let (status, body) = get(&x, Method::GET, "/readyz", None).await;
    assert_eq!((status, body.as_str()), (StatusCode::SERVICE_UNAVAILABLE, "not ready: starting\n"));
    ready.store(true, Ordering::SeqCst);
    assert_eq!(get(&x, Method::HEAD, "/readyz", None).await.0, StatusCode::OK);
    assert_eq!(get(&x, Method::GET, "/v1/vees", None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        get(&x, Method::POST, "/metrics", Some(TOKEN)).await.0,
        StatusCode::METHOD_NOT_ALLOWED
    );
}

#[tokio::test]
async fn metrics_with_a_token_need_it_and_failures_are_slowed_down() {
    let x = Exporter::new(&config(true), "veeh", |_| {}, None, Arc::new(|| Ok(()))).unwrap();
    assert_eq!(get(&x, Method::GET, "/metrics", Some(TOKEN)).await.0, StatusCode::OK);
    let (status, body) = get(&x, Method::GET, "/metrics", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("token_sha256"), "{body}");
    let mut last = StatusCode::OK;
    for _ in 0..20 {
        last = get(&x, Method::GET, "/metrics", Some("wrong-token-of-some-length-here")).await.0;
    }
    assert_eq!(last, StatusCode::TOO_MANY_REQUESTS);
    // The scraper at the same address, with the right token, is served.
    assert_eq!(get(&x, Method::GET, "/metrics", Some(TOKEN)).await.0, StatusCode::OK);
}

#[test]
fn a_malformed_token_digest_is_refused_naming_the_field() {
    let cfg = MetricsConfig {
        token_sha256: Some("xyz".into()),
        ..config(false)
    };
    assert!(cfg.check().unwrap_err().to_string().contains("metrics.token_sha256"));
}

#[test]
fn a_certificate_without_its_key_is_refused_naming_the_missing_field() {
    let cfg = MetricsConfig {
        tls_cert: Some("/etc/vee/metrics.crt".into()),
        ..config(false)
    };
    let err = cfg.check().unwrap_err().to_string();
    assert!(err.contains("metrics.tls_key"), "{err}");
}

#[tokio::test]
async fn with_a_certificate_metrics_are_served_over_https_only() {
    let d = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_file, key_file) = (d.path().join("m.crt"), d.path().join("m.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let cfg = MetricsConfig {
        tls_cert: Some(cert_file),
        tls_key: Some(key_file),
        ..config(true)
    };
    cfg.check().unwrap();
    let x = Exporter::new(&cfg, "veeh", |_| {}, None, Arc::new(|| Ok(()))).unwrap();
    let serving = Serving::start(&cfg, x).await.unwrap();
    let port = serving.local_addr().port();

    let https = crate::tls::http_client()
        .tls_certs_only([reqwest::Certificate::from_pem(cert.pem().as_bytes()).unwrap()])
        .resolve("localhost", serving.local_addr())
        .build()
        .unwrap();
    let resp = https
        .get(format!("https://localhost:{port}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.text().await.unwrap().contains("process_cpu_seconds_total"));

    // Plain HTTP gets no answer: the handshake fails and the connection closes.
    let plain = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await;
    assert!(plain.is_err(), "{plain:?}");
    serving.stop().await;
}

/// The operator guide's table of the process's own metrics is what every
/// daemon's scrape has of them.
#[test]
fn the_operator_guides_process_metrics_are_the_process_collectors() {
    let ready: Readiness = Arc::new(|| Ok(()));
    let x = Exporter::new(&config(false), "none", |_| {}, None, ready).unwrap();
    let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operator-guide.md");
    reference::check(&doc, "### Every daemon (`process_`)", &x.scrape());
}

#[test]
fn a_metrics_table_differs_when_a_metric_type_or_label_does() {
    let scrape = "# HELP a_calls Calls.\n# TYPE a_calls counter\na_calls_total{peer=\"x\"} 1\n\
                  # HELP a_took Time.\n# TYPE a_took_seconds histogram\n# UNIT a_took_seconds seconds\n\
                  a_took_seconds_bucket{call=\"y\",le=\"1\"} 1\na_took_seconds_count{call=\"y\"} 1\n\
                  # HELP a_up Up.\n# TYPE a_up gauge\n";
    let scraped = reference::scraped(scrape);
    let doc = "### a\n\n| metric | type | unit | labels | what |\n|---|---|---|---|---|\n\
               | `a_calls_total` | counter | calls | `peer` | calls |\n\
               | `a_took_seconds` | histogram | seconds | `call` | time |\n\
               | `a_up` | gauge | 0/1 | `host` | up |\n";
    // a_up has no sample: its labels are unknown, not wrong.
    assert_eq!(
        reference::differences(&reference::documented(doc, "### a"), &scraped),
        Vec::<String>::new()
    );
    let wrong = doc
        .replace("| counter |", "| gauge |")
        .replace("`call`", "`kind`")
        .replace("`a_up`", "`a_down`");
    let problems = reference::differences(&reference::documented(&wrong, "### a"), &scraped);
    assert_eq!(
        problems,
        [
            "`a_calls_total` is a counter, documented as a gauge",
            "`a_took_seconds` has the labels {\"call\"}, documented as {\"kind\"}",
            "`a_up` (gauge) is registered and not documented",
            "`a_down` is documented and not registered",
        ]
    );
}
