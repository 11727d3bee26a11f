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
}

#[test]
fn a_malformed_token_digest_is_refused_naming_the_field() {
    let cfg = MetricsConfig {
        token_sha256: Some("xyz".into()),
        ..config(false)
    };
    assert!(cfg.check().unwrap_err().to_string().contains("metrics.token_sha256"));
}
