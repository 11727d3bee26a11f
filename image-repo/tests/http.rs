//! The HTTP API of the real server, request by request: status codes, error
//! bodies, ranges, authentication and what is (not) left on disk.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{content, Options, Repo, TOKEN};
use interfaces::repo_client::protocol::ErrorBody;
use interfaces::BlobId;
use reqwest::{header, Client, Method, StatusCode};

fn http() -> Client {
    interfaces::tls::http_client().build().unwrap()
}

/// Sends `method url` with the write token and `body`; returns status, headers and body.
async fn call(method: Method, url: &str, token: Option<&str>, body: Vec<u8>) -> (StatusCode, header::HeaderMap, Vec<u8>) {
    let mut req = http().request(method, url).body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    (status, headers, resp.bytes().await.unwrap().to_vec())
}

fn error_body(body: &[u8]) -> ErrorBody {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("not an error body ({e}): {}", String::from_utf8_lossy(body)))
}

async fn put(repo: &Repo, id: &str, query: &str, data: &[u8]) -> (StatusCode, ErrorBody) {
    let url = format!("{}/v1/blobs/{id}?{query}", repo.url);
    let (status, _, body) = call(Method::PUT, &url, Some(TOKEN), data.to_vec()).await;
    let err = if status.is_success() {
        ErrorBody {
            code: String::new(),
            error: String::new(),
            actual: None,
        }
    } else {
        error_body(&body)
    };
    (status, err)
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_ids_get_400_on_every_route() {
    let repo = Repo::start();
    for bad in [
        "sha256:xyz",
        "md5:0123",
        "sha256:..%2F..%2Fetc",
        &format!("sha256:{}", "A".repeat(64)),
    ] {
        for (method, suffix) in [
            (Method::GET, ""),
            (Method::PUT, "?name=x&kind=disk"),
            (Method::DELETE, ""),
            (Method::GET, "/meta"),
            (Method::PUT, "/pins/site-b"),
            (Method::POST, "/check?name=x&kind=disk&size=1"),
        ] {
            let url = format!("{}/v1/blobs/{bad}{suffix}", repo.url);
            let (status, _, body) = call(method.clone(), &url, Some(TOKEN), b"x".to_vec()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {url}");
            let err = error_body(&body);
            assert_eq!(err.code, "bad_request");
            assert!(err.error.contains("invalid blob ID"), "{}", err.error);
        }
        let (status, _, _) = call(Method::HEAD, &format!("{}/v1/blobs/{bad}", repo.url), Some(TOKEN), vec![]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
    assert!(repo.blob_files().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_ids_get_404_naming_the_id() {
    let repo = Repo::start();
    let id = BlobId::of(b"nothing");
    for (method, suffix) in [
        (Method::GET, ""),
        (Method::DELETE, ""),
        (Method::GET, "/meta"),
        (Method::PUT, "/pins/p"),
    ] {
        let (status, _, body) = call(method.clone(), &format!("{}/v1/blobs/{id}{suffix}", repo.url), Some(TOKEN), vec![]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {suffix}");
        let err = error_body(&body);
        assert_eq!(err.code, "not_found");
        assert!(err.error.contains(&id.to_string()), "{}", err.error);
    }
    let (status, _, _) = call(Method::HEAD, &format!("{}/v1/blobs/{id}", repo.url), Some(TOKEN), vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, body) = call(Method::GET, &format!("{}/v3/blobs", repo.url), None, vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error_body(&body).error.contains("/v1 (the repository's own API) or /v2"));
}

#[tokio::test(flavor = "multi_thread")]
async fn body_not_matching_the_declared_digest_is_rejected_and_not_stored() {
    let repo = Repo::start();
    let declared = BlobId::of(b"what the client claims");
    let (status, err) = put(&repo, &declared.to_string(), "name=x&kind=disk", b"something else").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(err.code, "digest_mismatch");
    assert_eq!(err.actual.as_deref(), Some(BlobId::of(b"something else").to_string().as_str()));
    assert!(err.error.contains(&declared.to_string()) && err.error.contains("nothing stored"));
    assert!(repo.blob_files().is_empty());
    assert!(repo.wait_tmp_empty().is_empty());
    let (_, _, list) = call(Method::GET, &format!("{}/v1/blobs", repo.url), Some(TOKEN), vec![]).await;
    assert_eq!(list, b"[]");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_metadata_is_rejected_naming_the_field() {
    let repo = Repo::start();
    let id = BlobId::of(b"x").to_string();
    for (query, field) in [
        ("name=a%2Fb&kind=disk", "name"),
        ("name=..&kind=disk", "name"),
        ("name=ok..&kind=disk", "name"),
        ("name=&kind=disk", "name"),
        ("kind=disk", "name"),
        ("name=x&kind=floppy", "kind"),
        ("name=x&kind=disk&format=vmdk", "format"),
        ("name=x&kind=disk&label.OS=x", "label.OS"),
        ("name=x&kind=disk&colour=red", "colour"),
        ("name=x&name=y&kind=disk", "name"),
    ] {
        let (status, err) = put(&repo, &id, query, b"x").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert!(err.error.starts_with(&format!("field `{field}`")), "{query}: {}", err.error);
    }
    let (status, _, body) = call(Method::PUT, &format!("{}/v1/blobs/{id}/pins/a..b", repo.url), Some(TOKEN), vec![]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_body(&body).error.contains("pin name"));
    assert!(repo.blob_files().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_without_a_known_token_get_401_and_change_nothing() {
    let repo = Repo::start();
    let data = b"guarded".to_vec();
    let id = BlobId::of(&data);
    let url = format!("{}/v1/blobs/{id}?name=g&kind=disk", repo.url);
    for token in [None, Some("wrong")] {
        let (status, headers, body) = call(Method::PUT, &url, token, data.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
        assert!(headers.contains_key(header::WWW_AUTHENTICATE));
        assert_eq!(error_body(&body).code, "unauthorized");
    }
    assert!(repo.blob_files().is_empty());

    assert_eq!(call(Method::PUT, &url, Some(TOKEN), data.clone()).await.0, StatusCode::CREATED);
    let blob = format!("{}/v1/blobs/{id}", repo.url);
    assert_eq!(call(Method::DELETE, &blob, Some("wrong"), vec![]).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        call(Method::PUT, &format!("{blob}/pins/p"), None, vec![]).await.0,
        StatusCode::UNAUTHORIZED
    );
    let (_, _, meta) = call(Method::GET, &format!("{blob}/meta"), Some(TOKEN), vec![]).await;
    let meta: interfaces::repo_client::BlobMeta = serde_json::from_slice(&meta).unwrap();
    assert!(meta.pins.is_empty());
    assert_eq!(call(Method::GET, &blob, Some(TOKEN), vec![]).await.2, data);
    // Reads too (S3: a checkpoint's memory downloaded without a token).
    for read in [blob.clone(), format!("{blob}/meta"), format!("{}/v1/blobs", repo.url)] {
        assert_eq!(call(Method::GET, &read, None, vec![]).await.0, StatusCode::UNAUTHORIZED, "{read}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_upload_twice_answers_201_then_200() {
    let repo = Repo::start();
    let data = content(20, 10_000);
    let id = BlobId::of(&data);
    let url = format!("{}/v1/blobs/{id}?name=first&kind=disk", repo.url);
    let (status, _, body) = call(Method::PUT, &url, Some(TOKEN), data.clone()).await;
    assert_eq!(status, StatusCode::CREATED);
    let first: interfaces::repo_client::BlobMeta = serde_json::from_slice(&body).unwrap();
    let url = format!("{}/v1/blobs/{id}?name=second&kind=disk", repo.url);
    let (status, _, body) = call(Method::PUT, &url, Some(TOKEN), data).await;
    assert_eq!(status, StatusCode::OK);
    let second: interfaces::repo_client::BlobMeta = serde_json::from_slice(&body).unwrap();
    assert_eq!(first, second);
    assert_eq!(repo.blob_files().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn ranges_and_head() {
    let repo = Repo::start();
    let data = content(21, 1000);
    let id = BlobId::of(&data);
    call(
        Method::PUT,
        &format!("{}/v1/blobs/{id}?name=r&kind=disk", repo.url),
        Some(TOKEN),
        data.clone(),
    )
    .await;
    let url = format!("{}/v1/blobs/{id}", repo.url);
    let get_range = |range: &'static str| {
        let url = url.clone();
        async move {
            let resp = http()
                .get(&url)
                .bearer_auth(TOKEN)
                .header(header::RANGE, range)
                .send()
                .await
                .unwrap();
            let status = resp.status();
            let cr = resp.headers().get(header::CONTENT_RANGE).map(|v| v.to_str().unwrap().to_string());
            (status, cr, resp.bytes().await.unwrap().to_vec())
        }
    };
    assert_eq!(
        get_range("bytes=10-19").await,
        (StatusCode::PARTIAL_CONTENT, Some("bytes 10-19/1000".into()), data[10..20].to_vec())
    );
    assert_eq!(
        get_range("bytes=990-").await,
        (StatusCode::PARTIAL_CONTENT, Some("bytes 990-999/1000".into()), data[990..].to_vec())
    );
    assert_eq!(
        get_range("bytes=-5").await,
        (StatusCode::PARTIAL_CONTENT, Some("bytes 995-999/1000".into()), data[995..].to_vec())
    );
    let (status, cr, _) = get_range("bytes=1000-").await;
    assert_eq!((status, cr.as_deref()), (StatusCode::RANGE_NOT_SATISFIABLE, Some("bytes */1000")));
    let (status, _, body) = get_range("bytes=0-1,5-6").await;
    assert_eq!((status, body), (StatusCode::OK, data.clone()));

    let resp = http().head(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_LENGTH], "1000");
    assert_eq!(resp.headers()[header::ACCEPT_RANGES], "bytes");
    assert_eq!(resp.headers()["x-content-id"], id.to_string().as_str());
    assert!(resp.bytes().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_truncated_upload_leaves_nothing_behind() {
    let repo = Repo::start();
    let data = content(22, 1 << 20);
    let id = BlobId::of(&data);
    // Declare 1 MiB, send 100 KiB, hang up.
    let mut tcp = TcpStream::connect(&repo.addr).unwrap();
    write!(
        tcp,
        "PUT /v1/blobs/{id}?name=t&kind=disk HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        data.len()
    )
    .unwrap();
    tcp.write_all(&data[..100 << 10]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(repo.tmp_files().len(), 1, "the upload should be in progress");
    drop(tcp);
    assert!(repo.wait_tmp_empty().is_empty(), "temporary file left behind");
    assert!(repo.blob_files().is_empty());
    let (status, _, _) = call(Method::GET, &format!("{}/v1/blobs/{id}/meta", repo.url), Some(TOKEN), vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A chunked upload cut before its last chunk: same result.
    let mut tcp = TcpStream::connect(&repo.addr).unwrap();
    write!(
        tcp,
        "PUT /v1/blobs/{id}?name=t&kind=disk HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
        4096
    )
    .unwrap();
    tcp.write_all(&data[..4096]).unwrap();
    tcp.write_all(b"\r\n").unwrap();
    tcp.shutdown(std::net::Shutdown::Write).unwrap();
    let mut reply = String::new();
    let _ = tcp.read_to_string(&mut reply);
    assert!(reply.is_empty() || reply.contains("upload_interrupted"), "{reply}");
    assert!(repo.wait_tmp_empty().is_empty());
    assert!(repo.blob_files().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_upload_check_reports_presence_and_room() {
    let repo = Repo::start_with(Options {
        max_bytes: Some(1 << 20),
        ..Options::default()
    });
    let id = BlobId::of(b"x");
    let check = |size: u64| {
        let url = format!("{}/v1/blobs/{id}/check?name=x&kind=disk&size={size}", repo.url);
        async move { call(Method::POST, &url, Some(TOKEN), vec![]).await }
    };
    let (status, _, body) = check(1).await;
    assert_eq!((status, body), (StatusCode::OK, br#"{"exists":false}"#.to_vec()));
    let (status, _, body) = check(2 << 20).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE);
    assert!(error_body(&body).error.contains("quota of 1048576 bytes"));
    put(&repo, &id.to_string(), "name=x&kind=disk", b"x").await;
    let (_, _, body) = check(1).await;
    assert_eq!(body, br#"{"exists":true}"#.to_vec());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_images_alias_lists_like_blobs() {
    let repo = Repo::start();
    put(&repo, &BlobId::of(b"a").to_string(), "name=a&kind=initrd", b"a").await;
    let (_, _, blobs) = call(Method::GET, &format!("{}/v1/blobs", repo.url), Some(TOKEN), vec![]).await;
    let (_, _, images) = call(Method::GET, &format!("{}/v1/images", repo.url), Some(TOKEN), vec![]).await;
    assert_eq!(blobs, images);
    assert!(String::from_utf8(blobs).unwrap().contains("\"kind\":\"initrd\""));
    for path in ["/v1/health", "/healthz", "/readyz"] {
        let (status, _, body) = call(Method::GET, &format!("{}{path}", repo.url), None, vec![]).await;
        assert_eq!((status, body), (StatusCode::OK, b"ok".to_vec()), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_come_in_pages_with_a_link_to_the_next() {
    let repo = Repo::start();
    let client = repo.client();
    for i in 0..5u64 {
        let file = common::write_file(repo.scratch(), &format!("b{i}"), &content(i, 100));
        client
            .push_file(
                &file,
                &interfaces::repo_client::PushMeta::new(format!("b{i}"), interfaces::repo_client::BlobKind::Disk),
            )
            .await
            .unwrap();
    }
    let (status, headers, body) = call(Method::GET, &format!("{}/v1/blobs?n=2", repo.url), Some(TOKEN), vec![]).await;
    assert_eq!(status, StatusCode::OK);
    let first: Vec<interfaces::repo_client::BlobMeta> = serde_json::from_slice(&body).unwrap();
    assert_eq!(first.len(), 2);
    let link = headers.get(header::LINK).unwrap().to_str().unwrap().to_string();
    let next = interfaces::repo_client::protocol::next_link(&link).unwrap();
    assert_eq!(next, format!("/blobs?n=2&last={}", first[1].id));
    let (_, _, body) = call(Method::GET, &format!("{}/v1{next}", repo.url), Some(TOKEN), vec![]).await;
    let second: Vec<interfaces::repo_client::BlobMeta> = serde_json::from_slice(&body).unwrap();
    assert_eq!(second.len(), 2);
    assert!(first[1].id < second[0].id, "pages follow each other in digest order");
    // The client follows the pages: every blob, sorted by name.
    let names: Vec<_> = client.list().await.unwrap().into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["b0", "b1", "b2", "b3", "b4"]);
    let (status, _, _) = call(Method::GET, &format!("{}/v1/blobs?last=nonsense", repo.url), Some(TOKEN), vec![]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_what_came_in_and_went_out_and_what_did_not_verify() {
    let metrics = format!(
        "127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    );
    let repo = Repo::start_with(Options {
        extra_config: format!("[metrics]\nlisten = \"{metrics}\"\n"),
        ..Options::default()
    });
    let data = content(7, 3000);
    let id = BlobId::of(&data).to_string();
    assert_eq!(put(&repo, &id, "name=x&kind=disk", &data).await.0, StatusCode::CREATED);
    let (status, _, got) = call(Method::GET, &format!("{}/v1/blobs/{id}", repo.url), Some(TOKEN), vec![]).await;
    assert_eq!((status, got.len()), (StatusCode::OK, 3000));
    let declared = BlobId::of(b"what the client claims").to_string();
    assert_eq!(
        put(&repo, &declared, "name=y&kind=disk", b"something else").await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let (status, _, body) = call(Method::GET, &format!("http://{metrics}/metrics"), None, vec![]).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(body).unwrap();
    for line in [
        "image_repo_received_bytes_total 3000\n",
        "image_repo_sent_bytes_total 3000\n",
        "image_repo_blobs 1\n",
        "image_repo_stored_bytes 3000\n",
        "image_repo_verification_failures_total{source=\"upload\"} 1\n",
    ] {
        assert!(text.contains(line), "{line:?} missing:\n{text}");
    }
    let (status, _, _) = call(Method::GET, &format!("http://{metrics}/readyz"), None, vec![]).await;
    assert_eq!(status, StatusCode::OK);
}
