//! The REST routes over a fake site: what `curl` sees, and that
//! `docs/openapi.json` describes exactly what is served.

use axum::body::Body;
use axum::http::{Method, Request};
use serde_json::Value;
use tower::ServiceExt;

use super::*;
use crate::sim::{FakeSite, STANDARD};

const TOKENS: &str = "[[tokens]]\ntoken = \"provider-token\"\nrole = \"provider\"\nname = \"acme\"\n\
[[tokens]]\ntoken = \"other-token\"\nrole = \"provider\"\nname = \"globex\"\n\
[[tokens]]\ntoken = \"operator-token\"\nrole = \"operator\"\n";

/// `method path` with `token` and `body` against `site`'s routes: the
/// HTTP status and the JSON answer.
async fn call(site: &FakeSite, token: Option<&str>, method: Method, path: &str, body: &str) -> (u16, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let app = router(std::sync::Arc::new(VmiService::handler(site.veem.clone())), 1 << 20);
    let res = app.oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
    let status = res.status().as_u16();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_provider_lists_shows_and_acts_on_its_vees_and_sees_no_one_elses() {
    let site = FakeSite::start(&["h1", "h2"], TOKENS).await;
    let vee = site.running_service(STANDARD).remove(0);

    let (code, services) = call(&site, Some("provider-token"), Method::GET, "/v1/services", "").await;
    assert_eq!(code, 200, "{services}");
    assert_eq!(services["items"].as_array().unwrap().len(), 1);
    assert_eq!(services["items"][0]["name"], "shop");
    assert_eq!(services["next_page_token"], Value::Null);
    let service_id = services["items"][0]["service_id"].as_str().unwrap().to_string();

    let (code, v) = call(&site, Some("provider-token"), Method::GET, &format!("/v1/vees/{vee}"), "").await;
    assert_eq!(code, 200, "{v}");
    assert_eq!((v["state"].as_str(), v["location"].as_str()), (Some("running"), Some("placed")));
    let (_, vees) = call(
        &site,
        Some("provider-token"),
        Method::GET,
        &format!("/v1/services/{service_id}/vees"),
        "",
    )
    .await;
    assert_eq!(vees["items"][0]["vee_id"], vee.as_str());

    let (code, v) = call(&site, Some("provider-token"), Method::POST, &format!("/v1/vees/{vee}/suspend"), "").await;
    assert_eq!((code, v["state"].as_str()), (200, Some("suspended")), "{v}");

    // Another provider: the same as for an ID that does not exist.
    let (code, e) = call(&site, Some("other-token"), Method::GET, &format!("/v1/vees/{vee}"), "").await;
    assert_eq!((code, e["error"]["status"].as_str()), (404, Some("NOT_FOUND")), "{e}");
    assert_eq!(e["error"]["code"], 404);
    let (_, services) = call(&site, Some("other-token"), Method::GET, "/v1/services", "").await;
    assert_eq!(services["items"], serde_json::json!([]));
    let (code, _) = call(
        &site,
        Some("other-token"),
        Method::DELETE,
        &format!("/v1/services/{service_id}"),
        "",
    )
    .await;
    assert_eq!(code, 404, "another provider cannot undeploy it");
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, crate::model::VeeState::Suspended);

    // Its provider undeploys it: terminated, still listed.
    let (code, s) = call(
        &site,
        Some("provider-token"),
        Method::DELETE,
        &format!("/v1/services/{service_id}"),
        "",
    )
    .await;
    assert_eq!((code, s["state"].as_str()), (200, Some("terminated")), "{s}");
    assert_eq!(s["vees"][0]["state"], "terminated");
}

#[tokio::test]
async fn bad_calls_get_the_http_status_and_a_message_naming_what_is_wrong() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let vee = site.running_service(STANDARD).remove(0);
    let (code, e) = call(&site, None, Method::GET, "/v1/services", "").await;
    assert_eq!((code, e["error"]["status"].as_str()), (401, Some("UNAUTHENTICATED")), "{e}");
    let (code, _) = call(&site, Some("nobody"), Method::GET, "/v1/vees", "").await;
    assert_eq!(code, 401);
    // An empty service ID names no service: not a list of every VEE.
    let (code, e) = call(&site, Some("provider-token"), Method::GET, "/v1/services//vees", "").await;
    assert_eq!((code, e["error"]["status"].as_str()), (404, Some("NOT_FOUND")), "{e}");
    let (code, e) = call(&site, Some("provider-token"), Method::POST, &format!("/v1/vees/{vee}/explode"), "").await;
    assert_eq!(code, 404, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("stop, suspend"), "{e}");
    let (code, e) = call(
        &site,
        Some("provider-token"),
        Method::POST,
        &format!("/v1/vees/{vee}/migrate"),
        r#"{"to_host": "h1"}"#,
    )
    .await;
    assert_eq!((code, e["error"]["status"].as_str()), (403, Some("PERMISSION_DENIED")), "{e}");
    let (code, e) = call(
        &site,
        Some("provider-token"),
        Method::POST,
        &format!("/v1/vees/{vee}/restore"),
        r#"{"checkpoint": "x"}"#,
    )
    .await;
    assert_eq!(code, 400, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("unknown field `checkpoint`"),
        "{e}"
    );
    let (code, e) = call(
        &site,
        Some("operator-token"),
        Method::POST,
        "/v1/migrations/m-1/reject",
        r#"{"to_host": "h1"}"#,
    )
    .await;
    assert_eq!(code, 400, "reject takes a reason only: {e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("unknown field `to_host`"), "{e}");
    let (code, e) = call(&site, Some("provider-token"), Method::GET, "/v1/vees?page_token=garbage", "").await;
    assert_eq!((code, e["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")), "{e}");
    // A manifest that does not parse: rejected, naming the field; nothing deployed.
    let (code, e) = call(&site, Some("provider-token"), Method::POST, "/v1/services", "[service]\nname = 3\n").await;
    assert_eq!(code, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("name"), "{e}");
    let (_, services) = call(&site, Some("provider-token"), Method::GET, "/v1/services", "").await;
    assert_eq!(services["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_manifest_is_negotiated_then_deployed_once_under_its_request_id() {
    let site = FakeSite::start(&["h1", "h2"], TOKENS).await;
    let image = STANDARD.lines().find_map(|l| l.strip_prefix("image = ")).unwrap().trim_matches('"');
    site.repo.blobs.lock().unwrap().insert(image.into());
    let (code, n) = call(&site, Some("provider-token"), Method::POST, "/v1/negotiations", STANDARD).await;
    assert_eq!((code, n["verdict"].as_str()), (200, Some("accept")), "{n}");
    assert!(
        n["earliest_start"].is_string() && n["earliest_end"].is_string(),
        "the window it keeps: {n}"
    );
    let (_, none) = call(&site, Some("provider-token"), Method::GET, "/v1/services", "").await;
    assert_eq!(none["items"], serde_json::json!([]), "a negotiation reserves nothing");
    let (code, s) = call(&site, Some("provider-token"), Method::POST, "/v1/services?request_id=r-1", STANDARD).await;
    assert_eq!(code, 200, "{s}");
    let (_, again) = call(&site, Some("provider-token"), Method::POST, "/v1/services?request_id=r-1", STANDARD).await;
    assert_eq!(again["service_id"], s["service_id"], "the same request ID: the same service");
    let (_, all) = call(&site, Some("provider-token"), Method::GET, "/v1/services", "").await;
    assert_eq!(all["items"].as_array().unwrap().len(), 1);
}

/// The `METHOD PATH` pairs `docs/openapi.json` describes.
fn described() -> Vec<String> {
    let doc: Value = serde_json::from_str(OPENAPI).unwrap();
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            ops.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    ops.sort();
    ops
}

#[test]
fn the_openapi_description_names_every_route_and_only_those() {
    let mut served: Vec<String> = ROUTES.iter().map(|r| r.to_string()).collect();
    served.sort();
    assert_eq!(described(), served);
}

#[tokio::test]
async fn every_route_answers_as_the_description_says() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let vee = site.running_service(STANDARD).remove(0);
    let service = site.veem.core.vee(&vee).unwrap().service_id;
    let doc: Value = serde_json::from_str(OPENAPI).unwrap();
    for route in ROUTES {
        let (method, path) = route.split_once(' ').unwrap();
        let path = path
            .replace("{service_id}", &service)
            .replace("{vee_id}", &vee)
            .replace("{action}", "checkpoint")
            .replace("{component}", "vm")
            .replace("{migration_id}", "m-none");
        let (code, body) = call(&site, Some("operator-token"), method.parse().unwrap(), &path, "").await;
        let template = route.split_once(' ').unwrap().1;
        let answers = &doc["paths"][template][method.to_lowercase()]["responses"];
        assert!(answers.get(code.to_string()).is_some(), "{route}: {code} is not described: {body}");
    }
}

#[test]
fn the_described_schemas_have_the_fields_the_answers_have() {
    use crate::api::model::{Negotiation, Service, Usage, Vee};
    let doc: Value = serde_json::from_str(OPENAPI).unwrap();
    let keys = |v: Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let props = |name: &str| -> Vec<String> { keys(doc["components"]["schemas"][name]["properties"].clone()) };
    let vee = vmi::VeeInfo {
        nics: vec![interfaces::vhi::Nic::default()],
        ..Default::default()
    };
    assert_eq!(keys(serde_json::to_value(Vee::from(&vee)).unwrap()), props("Vee"));
    let nic = serde_json::to_value(Vee::from(&vee)).unwrap()["nics"][0].clone();
    assert_eq!(keys(nic), props("Nic"));
    assert_eq!(
        keys(serde_json::to_value(Service::from(&vmi::ServiceInfo::default())).unwrap()),
        props("Service")
    );
    assert_eq!(
        keys(serde_json::to_value(Migration::from(&vmi::MigrationInfo::default())).unwrap()),
        props("Migration")
    );
    assert_eq!(
        keys(serde_json::to_value(crate::api::model::Rollout::from(&vmi::Rollout::default())).unwrap()),
        props("Rollout")
    );
    assert_eq!(
        keys(serde_json::to_value(Negotiation::from(&vmi::NegotiateResponse::default())).unwrap()),
        props("Negotiation")
    );
    let usage = vmi::UsageReport {
        records: vec![vmi::UsageRecord::default()],
        violations: vec![vmi::SlaViolation::default()],
        ..Default::default()
    };
    let u = serde_json::to_value(Usage::from(&usage)).unwrap();
    assert_eq!(keys(u.clone()), props("Usage"));
    assert_eq!(keys(u["records"][0].clone()), props("UsageRecord"));
    assert_eq!(keys(u["violations"][0].clone()), props("SlaViolation"));
    assert_eq!(keys(u["totals"].clone()), props("UsageTotals"));
    assert_eq!(
        keys(serde_json::to_value(crate::api::model::Event::from(&vmi::Event::default())).unwrap()),
        props("Event")
    );
}

/// `GET /v1/events` pages through the log: a page of `page_size`, its
/// token, and `after_seq` from an event's `seq`; a provider sees its own.
#[tokio::test]
async fn events_are_read_a_page_at_a_time_over_rest() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    for i in 0..5 {
        site.veem.core.event("v", "s-none", "test", format!("event {i}"));
    }
    let (code, first) = call(&site, Some("operator-token"), Method::GET, "/v1/events?page_size=3", "").await;
    assert_eq!(code, 200, "{first}");
    let token = first["next_page_token"].as_str().unwrap();
    let (_, second) = call(
        &site,
        Some("operator-token"),
        Method::GET,
        &format!("/v1/events?page_token={token}"),
        "",
    )
    .await;
    let details = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["detail"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let all: Vec<String> = details(&first).into_iter().chain(details(&second)).collect();
    assert_eq!(all.iter().filter(|d| d.starts_with("event ")).count(), 5, "{all:?}");
    assert!(second["next_page_token"].is_null());
    let seq = first["items"][2]["seq"].as_u64().unwrap();
    let (_, after) = call(
        &site,
        Some("operator-token"),
        Method::GET,
        &format!("/v1/events?after_seq={seq}"),
        "",
    )
    .await;
    assert_eq!(details(&after), details(&second), "after a seq: the same as the next page");
    let (_, theirs) = call(&site, Some("provider-token"), Method::GET, "/v1/events", "").await;
    assert!(details(&theirs).is_empty(), "not the provider's: {theirs}");
}

/// What axum's extractors refuse is answered in the API's error shape too
/// (found by the `vmi_rest` fuzz target: a body not UTF-8 was plain text).
#[tokio::test]
async fn what_the_extractors_refuse_is_a_json_error() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let app = router(std::sync::Arc::new(VmiService::handler(site.veem.clone())), 1 << 20);
    let cases = [
        (Method::POST, "/v1/services", Body::from(vec![0xff, 0xfe])),
        (Method::GET, "/v1/services?page_size=many", Body::empty()),
        (Method::GET, "/v1/vees/%FF", Body::empty()),
    ];
    for (method, path, body) in cases {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", "Bearer provider-token")
            .body(body)
            .unwrap();
        let res = app.clone().oneshot(req).await.unwrap();
        let status = res.status().as_u16();
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
        let e: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("{path}: {}", String::from_utf8_lossy(&bytes)));
        assert_eq!((status, e["error"]["code"].as_u64()), (400, Some(400)), "{path}: {e}");
        assert_eq!(e["error"]["status"], "INVALID_ARGUMENT", "{path}: {e}");
    }
}

/// `POST .../components/{component}/scale` with `{"instances": N}`: the
/// provider scales its own service; a body without `instances` or another
/// provider's service are refused as the description says.
#[tokio::test]
async fn a_provider_scales_a_component_over_rest() {
    let site = FakeSite::start(&["h1", "h2"], TOKENS).await;
    let vee = site.running_service(STANDARD).remove(0);
    let service = site.veem.core.vee(&vee).unwrap().service_id;
    let path = format!("/v1/services/{service}/components/vm/scale");
    let (code, s) = call(&site, Some("provider-token"), Method::POST, &path, r#"{"instances": 2}"#).await;
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["vees"].as_array().unwrap().len(), 2, "{s}");
    for (body, why) in [
        ("", "instances"),
        (r#"{"instances": -1}"#, "instances"),
        (r#"{"count": 2}"#, "count"),
    ] {
        let (code, e) = call(&site, Some("provider-token"), Method::POST, &path, body).await;
        assert_eq!((code, e["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")), "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(why), "{e}");
    }
    let (code, e) = call(&site, Some("other-token"), Method::POST, &path, r#"{"instances": 3}"#).await;
    assert_eq!(code, 404, "{e}");
    assert_eq!(site.veem.core.service(&service).unwrap().vees.len(), 2);
}

/// A change sent again with its `Idempotency-Key` (as `curl --retry`
/// would after a lost answer) is made once; the same key for another
/// change is a 409.
#[tokio::test]
async fn a_change_sent_again_with_its_idempotency_key_is_made_once() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let vee = site.running_service(STANDARD).remove(0);
    let post = |action: &str| {
        let (site, path) = (&site, format!("/v1/vees/{vee}/{action}"));
        async move {
            let req = Request::builder()
                .method(Method::POST)
                .uri(path)
                .header("authorization", "Bearer provider-token")
                .header("idempotency-key", "cp-7")
                .body(Body::empty())
                .unwrap();
            let app = router(std::sync::Arc::new(VmiService::handler(site.veem.clone())), 1 << 20);
            let res = app.oneshot(req).await.unwrap();
            let status = res.status().as_u16();
            let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    let (first, a) = post("checkpoint").await;
    let (again, b) = post("checkpoint").await;
    assert_eq!((first, again), (200, 200), "{a} {b}");
    assert_eq!(a, b);
    let taken = site.host("h1").calls().iter().filter(|c| c.starts_with("checkpoint")).count();
    assert_eq!(taken, 1, "{:?}", site.host("h1").calls());
    let (code, e) = post("suspend").await;
    assert_eq!((code, e["error"]["status"].as_str()), (409, Some("ALREADY_EXISTS")), "{e}");
}
