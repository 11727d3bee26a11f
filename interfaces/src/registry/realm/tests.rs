//! The token realm a registry names: parsed, checked, and never handed the
//! credentials over plain HTTP or on another host (a fake registry over
//! HTTPS whose challenge names a recording token service).

use std::sync::{Arc, Mutex};

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;

use super::*;
use crate::manifest::RegistryImage;
use crate::registry::{Registries, RegistryConfig, Scope};

#[test]
fn the_realms_of_bearer_challenges_are_read_whatever_comes_around_them() {
    assert_eq!(
        bearer_realms(r#"Bearer realm="https://auth.example.com/token",service="registry.example.com""#),
        ["https://auth.example.com/token"]
    );
    assert_eq!(
        bearer_realms(r#"Basic realm="x, y", bearer REALM="http://a/t\"q",scope="repository:a:pull""#),
        [r#"http://a/t"q"#]
    );
    assert!(bearer_realms(r#"Basic realm="image-repo", charset="UTF-8""#).is_empty());
}

#[test]
fn a_realm_must_be_https_on_the_registrys_host_or_a_listed_one() {
    let hosts = ["auth.example.com".to_string()];
    assert_eq!(allowed("https://reg.example.com/token", "reg.example.com", &[]), Ok(()));
    assert_eq!(allowed("https://reg.example.com:443/token", "reg.example.com", &[]), Ok(()));
    assert_eq!(allowed("https://[::1]:5000/t", "[::1]:5000", &[]), Ok(()));
    assert_eq!(allowed("https://auth.example.com/token", "reg.example.com", &hosts), Ok(()));
    let e = allowed("http://reg.example.com/token", "reg.example.com", &hosts).unwrap_err();
    assert!(e.contains("not https"), "{e}");
    let e = allowed("https://evil.example.net/token", "reg.example.com", &hosts).unwrap_err();
    assert!(e.contains("evil.example.net:443") && e.contains("realm_hosts"), "{e}");
    assert!(
        allowed("https://reg.example.com:8443/token", "reg.example.com", &[]).is_err(),
        "another port"
    );
    assert!(allowed("token", "reg.example.com", &[]).unwrap_err().contains("not a URL"));
}

/// What a token service saw: the `Authorization` headers it was sent.
type Seen = Arc<Mutex<Vec<String>>>;

fn token_service(seen: Seen) -> axum::Router {
    axum::Router::new().route(
        "/token",
        get(move |h: HeaderMap| async move {
            let auth = h.get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or_default().to_string());
            seen.lock().unwrap().push(auth.unwrap_or_default());
            axum::Json(serde_json::json!({ "token": "issued" }))
        }),
    )
}

/// A registry over HTTPS (for `127.0.0.1` and `localhost`) whose `/v2/`
/// challenge names `realm(its port)`, with a token service of its own at
/// `/token`; its CA file and address.
async fn registry(dir: &std::path::Path, realm: impl Fn(u16) -> String, seen: Seen) -> (std::path::PathBuf, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_file, key_file) = (dir.join("reg.crt"), dir.join("reg.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let challenge = format!("Bearer realm=\"{}\",service=\"fake\"", realm(port));
    let app = token_service(seen)
        .route(
            "/v2/",
            get(move || async move { (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, challenge)]).into_response() }),
        )
        .fallback(|| async { StatusCode::NOT_FOUND });
    let tls = crate::tls::http1_acceptor(&cert_file, &key_file).unwrap();
    let limits = crate::connections::ListenerLimits::default();
    tokio::spawn(crate::connections::serve(
        listener,
        Some(tls),
        limits,
        app,
        std::future::pending(),
        Duration::from_secs(1),
    ));
    (cert_file, format!("127.0.0.1:{port}"))
}

/// A token service over plain HTTP: its address.
async fn plain_token_service(seen: Seen) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, token_service(seen)).await });
    addr
}

async fn resolve(dir: &std::path::Path, ca: std::path::PathBuf, host: &str, realm_hosts: Vec<String>) -> String {
    let password = dir.join("password");
    std::fs::write(&password, "the-sites-registry-password\n").unwrap();
    let registries = Registries::new(&[RegistryConfig {
        host: host.into(),
        ca: Some(ca),
        username: Some("site-a".into()),
        password_file: Some(password),
        scope: Scope::Any,
        realm_hosts,
    }])
    .unwrap();
    let image = RegistryImage {
        registry: host.into(),
        repository: "acme/web".into(),
        tag: Some("v1".into()),
        digest: None,
    };
    registries
        .resolve(&image)
        .await
        .map(|_| String::new())
        .unwrap_or_else(|e| e.to_string())
}

#[tokio::test]
async fn the_credentials_never_go_to_a_plain_http_or_foreign_realm() {
    let dir = tempfile::tempdir().unwrap();
    // A realm over plain HTTP: refused, nothing sent to it.
    let plain_seen = Seen::default();
    let plain = plain_token_service(plain_seen.clone()).await;
    let (ca, host) = registry(dir.path(), move |_| format!("http://{plain}/token"), Seen::default()).await;
    let err = resolve(dir.path(), ca, &host, vec![]).await;
    assert!(err.contains("token realm") && err.contains("not https"), "{err}");
    assert!(
        plain_seen.lock().unwrap().is_empty(),
        "sent in clear: {:?}",
        plain_seen.lock().unwrap()
    );

    // A realm on another host (the same server by another name): refused
    // unless listed.
    let dir = tempfile::tempdir().unwrap();
    let seen = Seen::default();
    let (ca, host) = registry(dir.path(), |port| format!("https://localhost:{port}/token"), seen.clone()).await;
    let err = resolve(dir.path(), ca.clone(), &host, vec![]).await;
    assert!(err.contains("localhost") && err.contains("realm_hosts"), "{err}");
    assert!(seen.lock().unwrap().is_empty(), "sent to another host: {:?}", seen.lock().unwrap());
    let port = host.rsplit(':').next().unwrap();
    resolve(dir.path(), ca, &host, vec![format!("localhost:{port}")]).await;
    assert!(
        seen.lock().unwrap().iter().any(|a| a.starts_with("Basic ")),
        "a listed realm host gets the credentials: {:?}",
        seen.lock().unwrap()
    );

    // The registry's own token service gets them.
    let dir = tempfile::tempdir().unwrap();
    let seen = Seen::default();
    let (ca, host) = registry(dir.path(), |port| format!("https://127.0.0.1:{port}/token"), seen.clone()).await;
    let err = resolve(dir.path(), ca, &host, vec![]).await;
    assert!(!err.contains("token realm"), "{err}");
    assert!(
        seen.lock().unwrap().iter().any(|a| a.starts_with("Basic ")),
        "{:?}",
        seen.lock().unwrap()
    );
}
