//! The VMI over TLS (issue 13, S1): a real `veem serve` with `[tls]`
//! answers only TLS clients that trust its site's VMI CA, and a call made
//! with a peer's token counts only with that peer's own client certificate
//! (mutual TLS between peer VEEMs): a stolen peer token is not enough.

use std::time::Duration;

use e2e::daemons::ImageRepo;
use e2e::lab;
use e2e::site::{self, Veem, B_TO_A, OPERATOR};
use interfaces::vmi::vmi_service_client::VmiServiceClient;
use interfaces::vmi::{ListMigrationsRequest, PushUsageRequest};
use tonic::transport::{Channel, Endpoint};
use veem::peers::Bearer;

/// A peer's call (PushUsage of nothing) with `token` over `ch`.
async fn peer_call(ch: Channel, token: &str) -> Result<(), tonic::Status> {
    let mut c = VmiServiceClient::with_interceptor(ch, Bearer::new(token).unwrap());
    c.push_usage(PushUsageRequest {
        from_site: "site-b".into(),
        records: Vec::new(),
    })
    .await
    .map(|_| ())
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_the_vmi_needs_tls_and_a_peer_needs_its_own_certificate() {
    let dir = lab::test_dir("vmi-tls");
    let repo = ImageRepo::start(&dir).await;
    let (pa, pb) = (site::port(), site::port());
    let (to_b, _) = site::peer_links(pa, pb, false);
    let cfg = site::write_config(&dir, "site-a", pa, &repo, &[], &[to_b], "");
    let veem = Veem::start(&dir, "site-a", pa, cfg).await;
    let (pki_a, pki_b) = (vee_testkit::pki::site("site-a"), vee_testkit::pki::site("site-b"));

    // A client that trusts site A's VMI CA and shows the operator's token:
    // served (Veem::start already connected this way).
    veem.client(OPERATOR)
        .await
        .list_migrations(ListMigrationsRequest::default())
        .await
        .unwrap();

    // Health and reflection, as grpcurl or a load balancer asks them, over
    // TLS and without a token.
    let ch = pki_a.vmi_channel(&veem.endpoint, None).await.unwrap();
    use tonic_health::pb::health_check_response::ServingStatus;
    assert_eq!(
        e2e::grpc::health(ch.clone(), "vmi.v1.VmiService").await.unwrap(),
        ServingStatus::Serving
    );
    assert_eq!(
        e2e::grpc::health(ch.clone(), "").await.unwrap(),
        ServingStatus::Serving,
        "the server as a whole"
    );
    let (services, described) = e2e::grpc::reflection(ch, "vmi.v1.VmiService").await.unwrap();
    assert!(
        services.contains(&"vmi.v1.VmiService".to_string()) && services.contains(&"grpc.health.v1.Health".to_string()),
        "{services:?}"
    );
    assert!(described, "reflection describes vmi.v1.VmiService");

    // Plaintext: no answer.
    let plain = veem.endpoint.replace("https://", "http://");
    let plain = match Endpoint::from_shared(plain)
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
    {
        Err(e) => Err(e.to_string()),
        Ok(ch) => VmiServiceClient::with_interceptor(ch, Bearer::new(OPERATOR).unwrap())
            .list_migrations(ListMigrationsRequest::default())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    };
    assert!(plain.is_err(), "a plaintext call was served");

    // A client that trusts another CA does not accept site A's VEEM.
    let wrong_ca = pki_b.vmi_channel(&veem.endpoint, None).await;
    assert!(wrong_ca.is_err(), "site A's VEEM passed as a certificate of site B's CA");

    // Site B's token without site B's certificate: refused, naming why.
    let no_cert = pki_a.vmi_channel(&veem.endpoint, None).await.unwrap();
    let err = peer_call(no_cert, B_TO_A).await.expect_err("a peer token without a certificate");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("no client certificate"), "{err:?}");

    // Site B's token with a certificate of another CA (site A's own): the
    // handshake refuses it, or the call does.
    let not_b = match pki_a.vmi_channel(&veem.endpoint, Some(&pki_a.vmi(lab::SITE_A_ADDR))).await {
        Err(e) => Err(e.to_string()),
        Ok(ch) => peer_call(ch, B_TO_A).await.map_err(|e| e.to_string()),
    };
    assert!(not_b.is_err(), "site B's token with site A's certificate was served");

    // Site B's token with site B's certificate: served.
    let b = pki_a.vmi_channel(&veem.endpoint, Some(&pki_b.vmi(lab::SITE_B_ADDR))).await.unwrap();
    peer_call(b.clone(), B_TO_A).await.unwrap();
    // Site B's certificate does not make a provider of it: the token decides.
    let err = peer_call(b, "no-such-token").await.expect_err("an unknown token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");

    // The REST routes on the same port and TLS, as curl calls them.
    let curl_with = |opts: &[&str], token: Option<&str>, method: &str, path: &str, body: Option<&str>| {
        let mut c = std::process::Command::new("curl");
        c.args(opts)
            .args(["-sS", "--max-time", "20", "--cacert"])
            .arg(pki_a.vmi_ca())
            .args(["-X", method, "-w", "\n%{http_code} %{http_version}"]);
        if let Some(t) = token {
            c.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        if let Some(b) = body {
            c.args(["-H", "Content-Type: application/toml", "--data-binary", b]);
        }
        let out = c.arg(format!("{}{path}", veem.endpoint)).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (json, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (
            status.to_string(),
            serde_json::from_str::<serde_json::Value>(json).unwrap_or_default(),
        )
    };
    let curl = |token: Option<&str>, method: &str, path: &str, body: Option<&str>| curl_with(&[], token, method, path, body);
    let (status, list) = curl(Some(OPERATOR), "GET", "/v1/services", None);
    assert_eq!((status.as_str(), &list["items"]), ("200 2", &serde_json::json!([])), "{list}");
    // A client that speaks only HTTP/1.1 over TLS (Python's requests) is
    // served too: the VMI's ALPN offers both.
    let (status, list) = curl_with(&["--http1.1"], Some(OPERATOR), "GET", "/v1/services", None);
    assert_eq!((status.as_str(), &list["items"]), ("200 1.1", &serde_json::json!([])), "{list}");
    let (status, e) = curl(None, "GET", "/v1/vees", None);
    assert_eq!(
        (status.as_str(), e["error"]["status"].as_str()),
        ("401 2", Some("UNAUTHENTICATED")),
        "{e}"
    );
    // A peer's token is not enough without its certificate, here as over gRPC.
    let (status, e) = curl(Some(B_TO_A), "GET", "/v1/vees", None);
    assert_eq!(status, "401 2", "{e}");
    let manifest = format!(
        "[service]\nname = \"rest\"\nprovider = \"acme\"\n[sla]\nguarantee = \"standard\"\n\
         [[component]]\nname = \"web\"\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"sha256:{}\"\n",
        "0".repeat(64)
    );
    let (status, n) = curl(Some(site::ACME), "POST", "/v1/negotiations", Some(&manifest));
    assert_eq!(status, "200 2", "{n}");
    assert_eq!(n["verdict"], "reject", "a site without hosts: {n}");
    let (status, doc) = curl(None, "GET", "/v1/openapi.json", None);
    assert_eq!((status.as_str(), doc["openapi"].as_str()), ("200 2", Some("3.1.0")), "{doc}");

    // What no route matches is 404 in the API's error shape, over HTTP/2
    // and HTTP/1.1, with a token or without: never a gRPC answer.
    for (opts, version) in [(&[][..], "2"), (&["--http1.1"][..], "1.1")] {
        for token in [None, Some(OPERATOR)] {
            for path in ["/", "/v1/hosts", "/v1/nope", "/vmi.v1.VmiService/ListServices"] {
                let (status, e) = curl_with(opts, token, "GET", path, None);
                assert_eq!(
                    (status, e["error"]["status"].as_str()),
                    (format!("404 {version}"), Some("NOT_FOUND")),
                    "{path}: {e}"
                );
            }
        }
        let (status, e) = curl_with(opts, Some(OPERATOR), "PATCH", "/v1/services", None);
        assert_eq!(status, format!("405 {version}"), "{e}");
    }
    // A route that needs no body, sent one, answers every time over HTTP/2
    // (curl exits 0 with the answer; not a reset stream, curl's error 92).
    let json = ["-H", "Content-Type: application/json", "--data-binary", "{}"];
    for (token, want) in [(OPERATOR, "404 2"), (site::ACME, "403 2")] {
        for _ in 0..20 {
            let (status, e) = curl_with(&json, Some(token), "POST", "/v1/migrations/m-none/approve", None);
            assert_eq!(status, want, "{e}");
            assert!(e["error"]["message"].is_string(), "{e}");
        }
    }
}
