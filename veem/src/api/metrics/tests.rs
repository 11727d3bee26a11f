//! What a scrape of the VEEM's metrics listener shows after a site's work
//! (on fake VEEHs): the VEEs by state and guarantee, each host's capacity
//! and reservations, the deploys, negotiations, checkpoints and
//! migrations it made; a VEEM that does not act shows no site gauges and
//! is not ready.

use interfaces::metrics::MetricsConfig;

use super::*;
use crate::api::front::Front;
use crate::config::Role;
use crate::model::{MigrationState, VeeState};
use crate::sim::{eventually, FakeSite, STANDARD};

const IMAGE: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";

fn config() -> MetricsConfig {
    MetricsConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        token_sha256: None,
        tls_cert: None,
        tls_key: None,
    }
}

/// The value of the sample `name` (with its labels, as written) in `text`.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .map(|v| v.parse().unwrap())
}

#[tokio::test]
async fn a_scrape_shows_the_sites_vees_hosts_and_what_the_veem_did() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    site.repo.blobs.lock().unwrap().insert(IMAGE.into());
    let acme = Role::Provider("acme".into());
    let svc = site.veem.deploy.deploy(&acme, STANDARD).await.unwrap();
    let vee = svc.vees[0].clone();
    eventually("the VEE runs", || site.veem.core.vee(&vee).unwrap().state == VeeState::Running).await;
    site.veem.deploy.negotiate(&acme, "not a manifest").await;
    site.veem.lifecycle.checkpoint_vee(&vee).await.unwrap();
    let from = site.veem.core.vee(&vee).unwrap().host().unwrap().to_string();
    let to = if from == "h1" { "h2" } else { "h1" };
    assert_eq!(site.migrate_to_host(&vee, to).await.state, MigrationState::Done);

    let acting = Acting::default();
    let x = exporter(&config(), site.veem.core.metrics.clone(), acting.clone()).unwrap();
    let idle = x.scrape();
    assert_eq!(sample(&idle, "veem_leader"), Some(0.0));
    assert_eq!(
        sample(&idle, "veem_host_up{host=\"h1\"}"),
        None,
        "no site gauges without a VEEM acting:\n{idle}"
    );

    let front = Front::of(site.veem.clone(), &Default::default()).await.unwrap();
    acting.set(site.veem.clone(), front.clone());
    let text = x.scrape();
    let at = |name: &str| sample(&text, name).unwrap_or_else(|| panic!("{name} missing:\n{text}"));
    assert_eq!(at("veem_leader"), 1.0);
    assert_eq!(at("veem_vees{state=\"running\",guarantee=\"standard\"}"), 1.0);
    assert_eq!(at(&format!("veem_host_vees{{host=\"{to}\"}}")), 1.0);
    assert_eq!(at(&format!("veem_host_vees{{host=\"{from}\"}}")), 0.0);
    let cap = at(&format!("veem_host_vcpus{{host=\"{to}\"}}"));
    let reserved = at(&format!("veem_host_reserved_vcpus{{host=\"{to}\"}}"));
    assert!(cap == 4.0 && reserved >= 1.0, "{cap} {reserved}");
    assert_eq!(at(&format!("veem_host_free_vcpus{{host=\"{to}\"}}")), cap - reserved);
    assert_eq!(at("veem_admissions_total{verdict=\"admitted\"}"), 1.0);
    assert_eq!(at("veem_admission_duration_seconds_count"), 1.0);
    assert_eq!(at("veem_negotiations_total{verdict=\"reject\"}"), 1.0);
    assert_eq!(at("veem_checkpoint_duration_seconds_count"), 1.0);
    assert_eq!(at("veem_checkpoint_size_bytes_count"), 1.0);
    assert_eq!(at("veem_migrations_total{kind=\"in_site\",outcome=\"done\"}"), 1.0);
    assert_eq!(at("veem_migration_downtime_seconds_count{kind=\"in_site\"}"), 1.0);
    assert!(
        text.contains(&format!("veem_last_migration_downtime_seconds{{vee=\"{vee}\"}}")),
        "{text}"
    );
    assert!(text.contains("process_cpu_seconds_total"), "{text}");
    // Ready once the front serves (it starts not serving).
    let x = x.router();
    let readyz = || async {
        let req = axum::http::Request::get("/readyz").body(axum::body::Body::empty()).unwrap();
        tower::ServiceExt::oneshot(x.clone(), req).await.unwrap().status()
    };
    assert_eq!(readyz().await, 503);
    front.started().await;
    assert_eq!(readyz().await, 200);
    acting.clear();
    assert_eq!(readyz().await, 503);
}

#[test]
fn a_vee_gone_is_forgotten_by_the_last_downtime_gauge() {
    let m = VeemMetrics::default();
    m.migration("v1", false, true, 3.0, 0.25);
    m.migration("v2", false, false, 0.0, 0.0);
    assert_eq!(m.last_downtimes(|id| id == "v1"), vec![("v1".to_string(), 0.25)]);
    assert!(m.last_downtimes(|_| false).is_empty());
    assert!(m.last_downtimes(|_| true).is_empty(), "forgotten, not hidden");
}

/// The operator guide's table of the VEEM's metrics is what a scrape shows:
/// every family registered, with its type and labels, and nothing else.
#[tokio::test]
async fn the_operator_guides_veem_metrics_are_the_registered_ones() {
    let site = FakeSite::start(&["h1"], "").await;
    site.repo.blobs.lock().unwrap().insert(IMAGE.into());
    let acme = Role::Provider("acme".into());
    let svc = site.veem.deploy.deploy(&acme, STANDARD).await.unwrap();
    let vee = svc.vees[0].clone();
    eventually("the VEE runs", || site.veem.core.vee(&vee).unwrap().state == VeeState::Running).await;
    // A sample of every family, so that the scrape shows its labels.
    let m = &site.veem.core.metrics;
    m.negotiation("accept");
    m.checkpoint(1.0, 0.1, 1 << 20);
    m.migration(&vee, true, true, 2.0, 0.2);
    m.recovery(3.0);
    m.violation("max_outages", 1.5);
    m.heartbeat_missed("h1");
    m.peer_call("site-b", "SendVee", 0.5);
    m.checkpoint_replication("replicated", Some(2.0));
    m.checkpoints_unsettled(|_| 0);
    let acting = Acting::default();
    let x = exporter(&config(), m.clone(), acting.clone()).unwrap();
    let front = Front::of(site.veem.clone(), &Default::default()).await.unwrap();
    acting.set(site.veem.clone(), front);
    let scrape: String = x
        .scrape()
        .lines()
        .filter(|l| !l.contains(" process_") && !l.starts_with("process_"))
        .map(|l| format!("{l}\n"))
        .collect();
    let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operator-guide.md");
    interfaces::metrics::reference::check(&doc, "### The VEE manager (`veem_`)", &scrape);
}
