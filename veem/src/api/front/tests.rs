//! The front of the VMI's port over a fake site, as HTTP requests: what
//! matches no route, start-up, failed authentications, bounded messages.

use axum::http::{Method, Request};
use prost::Message;
use serde_json::Value;

use super::*;
use crate::sim::FakeSite;

const TOKENS: &str = "[[tokens]]\ntoken = \"provider-token\"\nrole = \"provider\"\nname = \"acme\"\n\
[[tokens]]\ntoken = \"operator-token\"\nrole = \"operator\"\n";

async fn front(site: &FakeSite) -> Arc<Front> {
    let limits = ListenerLimits {
        auth_failures_burst: 3,
        auth_failure_interval: Duration::from_secs(60),
        max_body_size: 4096,
        ..ListenerLimits::default()
    };
    let f = Front::of(site.veem.clone(), &limits).await.unwrap();
    f.started().await;
    f
}

/// An answer: status, headers, body.
struct Answer {
    status: u16,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn grpc_status(&self) -> Option<&str> {
        self.headers.get("grpc-status").and_then(|v| v.to_str().ok())
    }
}

/// `req` from client address `from` through `front`.
async fn send(front: &Arc<Front>, from: [u8; 4], mut req: Request<Body>) -> Answer {
    req.extensions_mut().insert(ConnectInfo(SocketAddr::from((from, 40000))));
    let resp = front.clone().router().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: axum::body::to_bytes(body, 1 << 24).await.unwrap().to_vec(),
    }
}

fn rest(method: Method, path: &str, token: Option<&str>, body: &str) -> Request<Body> {
    let mut r = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    r.body(Body::from(body.to_string())).unwrap()
}

/// A unary gRPC call of `method` with `msg`.
fn grpc(method: &str, token: Option<&str>, msg: impl Message) -> Request<Body> {
    let bytes = msg.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    frame.extend_from_slice(&bytes);
    let mut r = Request::builder()
        .method(Method::POST)
        .uri(format!("/vmi.v1.VmiService/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = token {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    r.body(Body::from(frame)).unwrap()
}

const A: [u8; 4] = [192, 0, 2, 1];
const B: [u8; 4] = [192, 0, 2, 2];

#[tokio::test]
async fn what_no_route_matches_is_404_or_405_as_json_with_or_without_a_token() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let f = front(&site).await;
    for token in [None, Some("operator-token"), Some("wrong")] {
        for (method, path) in [
            (Method::GET, "/"),
            (Method::GET, "/v1/hosts"),
            (Method::GET, "/v1/nope"),
            (Method::GET, "/v1/services/../../etc/passwd"),
            (Method::POST, "/vmi.v1.VmiService/ListServices"),
        ] {
            let a = send(&f, A, rest(method.clone(), path, token, "")).await;
            let e = a.json();
            assert_eq!(
                (a.status, e["error"]["status"].as_str()),
                (404, Some("NOT_FOUND")),
                "{method} {path}: {e}"
            );
            assert_eq!(e["error"]["code"], 404);
            assert!(a.grpc_status().is_none(), "{method} {path} fell into gRPC");
        }
        let a = send(&f, A, rest(Method::PUT, "/v1/services", token, "")).await;
        assert_eq!(a.status, 405, "{}", a.json());
        assert_eq!(a.json()["error"]["code"], 405);
        let allow = a.headers.get("allow").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(allow.contains("GET") && allow.contains("POST"), "Allow: {allow:?}");
    }
    // A gRPC call of a method the VMI does not have: gRPC's own answer;
    // a known one is served (its status in the trailers).
    let list_as = |method: &str| grpc(method, Some("operator-token"), interfaces::vmi::ListServicesRequest::default());
    let a = send(&f, A, list_as("NoSuchMethod")).await;
    assert_eq!((a.status, a.grpc_status()), (200, Some("12")));
    let a = send(&f, A, list_as("ListServices")).await;
    assert_eq!((a.status, a.grpc_status()), (200, None), "{:?}", a.headers);
    interfaces::vmi::ListServicesResponse::decode(&a.body[5..]).unwrap();
}

#[tokio::test]
async fn a_body_is_read_whole_and_bounded() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let f = front(&site).await;
    // A route that takes no body answers with one given.
    let a = send(
        &f,
        A,
        rest(Method::POST, "/v1/migrations/m-1/approve", Some("operator-token"), "{}"),
    )
    .await;
    assert_eq!(
        (a.status, a.json()["error"]["status"].as_str()),
        (404, Some("NOT_FOUND")),
        "{}",
        a.json()
    );
    let a = send(&f, A, rest(Method::POST, "/v1/services", Some("provider-token"), &"x".repeat(5000))).await;
    assert_eq!(
        (a.status, a.json()["error"]["status"].as_str()),
        (413, Some("RESOURCE_EXHAUSTED")),
        "{}",
        a.json()
    );
    assert!(a.json()["error"]["message"].as_str().unwrap().contains("4096 bytes"));
}

#[tokio::test]
async fn calls_wait_while_the_veem_starts_but_health_and_the_description_answer() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let limits = ListenerLimits::default();
    let f = Front::of(site.veem.clone(), &limits).await.unwrap();
    let a = send(&f, A, rest(Method::GET, "/v1/services", Some("operator-token"), "")).await;
    assert_eq!((a.status, a.json()["error"]["status"].as_str()), (503, Some("UNAVAILABLE")));
    assert_eq!(a.headers["retry-after"], "1");
    let a = send(
        &f,
        A,
        grpc(
            "ListServices",
            Some("operator-token"),
            interfaces::vmi::ListServicesRequest::default(),
        ),
    )
    .await;
    assert_eq!(a.grpc_status(), Some("14"));
    let a = send(&f, A, rest(Method::GET, "/v1/openapi.json", None, "")).await;
    assert_eq!(a.status, 200);
    let check = tonic_health::pb::HealthCheckRequest {
        service: VMI_SERVICE.into(),
    };
    let mut req = grpc("x", None, check.clone());
    *req.uri_mut() = "/grpc.health.v1.Health/Check".parse().unwrap();
    let a = send(&f, A, req).await;
    let served = |a: &Answer| tonic_health::pb::HealthCheckResponse::decode(&a.body[5..]).unwrap().status;
    assert_eq!(
        served(&a),
        tonic_health::pb::health_check_response::ServingStatus::NotServing as i32
    );
    f.started().await;
    let a = send(&f, A, rest(Method::GET, "/v1/services", Some("operator-token"), "")).await;
    assert_eq!(a.status, 200);
    let mut req = grpc("x", None, check);
    *req.uri_mut() = "/grpc.health.v1.Health/Check".parse().unwrap();
    assert_eq!(
        served(&send(&f, A, req).await),
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[tokio::test]
async fn failed_authentications_from_one_address_are_slowed_down_before_any_handler() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let f = front(&site).await;
    for i in 0..3 {
        let a = if i % 2 == 0 {
            send(&f, A, rest(Method::GET, "/v1/vees", Some(&format!("guess-{i}")), "")).await
        } else {
            let a = send(&f, A, grpc("ListVees", Some("guess"), interfaces::vmi::ListVeesRequest::default())).await;
            assert_eq!(a.grpc_status(), Some("16"));
            a
        };
        assert!(a.status == 401 || a.status == 200, "guess {i}: {}", a.status);
    }
    // Over the burst: a wrong token waits, before any handler.
    let a = send(&f, A, rest(Method::GET, "/v1/vees", Some("guess-4"), "")).await;
    assert_eq!(
        (a.status, a.json()["error"]["status"].as_str()),
        (429, Some("RESOURCE_EXHAUSTED")),
        "{}",
        a.json()
    );
    assert_eq!(a.headers["retry-after"], "60");
    let a = send(
        &f,
        A,
        grpc("ListVees", Some("guess-5"), interfaces::vmi::ListVeesRequest::default()),
    )
    .await;
    assert_eq!(a.grpc_status(), Some("8"));
    // A right one is served (the other users behind the address).
    let a = send(
        &f,
        A,
        grpc("ListVees", Some("operator-token"), interfaces::vmi::ListVeesRequest::default()),
    )
    .await;
    assert_eq!((a.status, a.grpc_status()), (200, None), "no error in the head: the call ran");
    // Without credentials, nothing to slow down; another address is served.
    assert_eq!(send(&f, A, rest(Method::GET, "/v1/openapi.json", None, "")).await.status, 200);
    assert_eq!(
        send(&f, B, rest(Method::GET, "/v1/vees", Some("operator-token"), "")).await.status,
        200
    );
}

#[tokio::test]
async fn a_status_that_quotes_a_huge_input_is_cut_to_its_bound() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let f = front(&site).await;
    let huge = "x".repeat(1 << 20);
    let a = send(
        &f,
        A,
        grpc(
            "GetService",
            Some("operator-token"),
            interfaces::vmi::GetServiceRequest { service_id: huge.clone() },
        ),
    )
    .await;
    assert_eq!(a.grpc_status(), Some("5"));
    let msg = a.headers["grpc-message"].to_str().unwrap();
    assert!(
        msg.len() <= 3 * interfaces::excerpt::MESSAGE_BYTES && msg.contains("xxxx"),
        "{} bytes",
        msg.len()
    );
    let a = send(
        &f,
        A,
        rest(Method::GET, &format!("/v1/services/{}", &huge[..3000]), Some("operator-token"), ""),
    )
    .await;
    assert_eq!(a.status, 404);
    assert!(a.body.len() <= interfaces::excerpt::MESSAGE_BYTES + 200, "{} bytes", a.body.len());
}

#[test]
fn any_handlers_status_message_is_cut_whatever_made_it() {
    let long = format!("VEE {} not found", "é".repeat(1 << 19));
    let resp = bounded(Status::not_found(long).into_http::<Body>());
    let header = resp.headers()["grpc-message"].as_bytes();
    let text = percent_encoding::percent_decode(header).decode_utf8().unwrap();
    assert!(text.len() <= interfaces::excerpt::MESSAGE_BYTES, "{}", text.len());
    assert!(text.starts_with("VEE éé") && text.ends_with("[cut]"), "{text}");
    assert_eq!(resp.headers()["grpc-status"], "5");
}

#[tokio::test]
async fn supervisors_probe_liveness_and_readiness_without_a_token() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let f = Front::of(site.veem.clone(), &ListenerLimits::default()).await.unwrap();
    let probe = |path: &'static str| rest(Method::GET, path, None, "");
    // Starting: alive, not ready.
    assert_eq!(send(&f, A, probe("/healthz")).await.status, 200);
    let a = send(&f, A, probe("/readyz")).await;
    assert_eq!(a.status, 503);
    assert!(String::from_utf8_lossy(&a.body).contains("starting"));
    f.started().await;
    let a = send(&f, A, probe("/readyz")).await;
    assert_eq!(
        (a.status, String::from_utf8_lossy(&a.body).to_string()),
        (200, "ready\n".to_string())
    );
    // HEAD probes too; another method is no probe (the REST routes' 404).
    assert_eq!(send(&f, A, rest(Method::HEAD, "/readyz", None, "")).await.status, 200);
    assert_eq!(send(&f, A, rest(Method::POST, "/readyz", None, "")).await.status, 404);
    f.stopping().await;
    let a = send(&f, A, probe("/readyz")).await;
    assert!(a.status == 503 && String::from_utf8_lossy(&a.body).contains("stopping"));
    assert_eq!(send(&f, A, probe("/healthz")).await.status, 200);
    // A standby: alive, not ready, and says why.
    let port = crate::api::standby::Port::standing_by("site-a");
    let ask = |path: &'static str| {
        let port = port.clone();
        async move {
            let resp = port.router().oneshot(probe(path)).await.unwrap();
            let status = resp.status().as_u16();
            let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
            (status, String::from_utf8_lossy(&body).to_string())
        }
    };
    assert_eq!(ask("/healthz").await.0, 200);
    let (status, body) = ask("/readyz").await;
    assert!(status == 503 && body.contains("stands by"), "{status} {body}");
}

/// `front` served on a listener of its own (plain HTTP/1.1 and HTTP/2)
/// until the returned token is cancelled: its address.
async fn listening(front: &Arc<Front>) -> (SocketAddr, tokio_util::sync::CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let until = stop.clone().cancelled_owned();
    let router = front.clone().router();
    tokio::spawn(interfaces::connections::serve(
        listener,
        None,
        ListenerLimits::default(),
        router,
        until,
        Duration::from_secs(1),
    ));
    (addr, stop)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_throttled_address_still_gets_in_with_a_right_token_and_a_wrong_ones_body_gets_its_429() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let f = front(&site).await;
    let (addr, stop) = listening(&f).await;
    let http1 = interfaces::tls::http_client().build().unwrap();
    let url = |path: &str| format!("http://{addr}{path}");
    for i in 0..3 {
        let r = http1.get(url("/v1/vees")).bearer_auth(format!("guess-{i}")).send().await.unwrap();
        assert_eq!(r.status(), 401);
    }
    // Throttled now: a wrong token waits, a right one (the NAT's other
    // users) is served, on REST and on gRPC.
    let r = http1.get(url("/v1/vees")).bearer_auth("guess").send().await.unwrap();
    assert_eq!(r.status(), 429);
    let r = http1.get(url("/v1/vees")).bearer_auth("operator-token").send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let channel = tonic::transport::Endpoint::from_shared(url("")).unwrap().connect().await.unwrap();
    let mut vmi = interfaces::vmi::vmi_service_client::VmiServiceClient::new(channel);
    fn with<T>(token: &str, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
        r
    }
    vmi.list_vees(with("provider-token", interfaces::vmi::ListVeesRequest::default()))
        .await
        .expect("a right token is served under the throttle");
    // A wrong token's call with a large body: its 429 / RESOURCE_EXHAUSTED
    // every time, never a reset connection or stream.
    let body = "x".repeat(1 << 20);
    for i in 0..20 {
        let r = http1.post(url("/v1/services")).bearer_auth("guess").body(body.clone()).send().await;
        let status = r.map(|r| r.status().as_u16()).map_err(|e| format!("{e:?}"));
        assert_eq!(status, Ok(429), "HTTP/1.1 POST {i}");
        let deploy = interfaces::vmi::DeployRequest {
            manifest_toml: body.clone(),
            ..Default::default()
        };
        let code = vmi
            .deploy(with("guess", deploy))
            .await
            .map(|_| ())
            .map_err(|s| (s.code(), s.message().to_string()));
        assert!(matches!(&code, Err((Code::ResourceExhausted, _))), "HTTP/2 Deploy {i}: {code:?}");
        assert_eq!(
            curl_http2_post(&url("/v1/services"), "guess", &body).await,
            "429",
            "HTTP/2 POST {i}"
        );
    }
    stop.cancel();
}

/// The status curl reads for a POST of `body` to `url` over HTTP/2 (prior
/// knowledge) with `token`; `000` and curl's error when it read none (curl
/// 92: the stream was reset).
async fn curl_http2_post(url: &str, token: &str, body: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body");
    std::fs::write(&file, body).unwrap();
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(["-H", &format!("authorization: Bearer {token}"), "--data-binary"])
        .arg(format!("@{}", file.display()))
        .arg(url)
        .output()
        .await
        .expect("curl runs");
    let status = String::from_utf8_lossy(&out.stdout).to_string();
    if status == "429" {
        status
    } else {
        format!("{status} {}", String::from_utf8_lossy(&out.stderr).trim())
    }
}
