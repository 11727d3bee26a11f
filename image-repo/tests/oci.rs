//! The OCI Distribution API (`/v2/`, issue 39) against the real server,
//! request by request as the OCI Distribution Specification v1.1 states
//! them ("Pull", "Push", "Content Discovery", "Content Management", "Error
//! Codes"): each test names the section it checks. The third-party
//! clients (skopeo, the Distribution registry) are in `tests/interop.rs`.

mod common;

use common::{Repo, ACME_TOKEN, GLOBEX_TOKEN};
use interfaces::BlobId;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// An answer: status, headers, body.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The first error's code of a specification error body.
    fn code(&self) -> String {
        self.json()["errors"][0]["code"].as_str().unwrap_or_default().to_string()
    }
}

/// A caller of the API with Basic authentication (the token as password).
struct Oci {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Oci {
    fn new(repo: &Repo, token: Option<&str>) -> Self {
        Self {
            http: interfaces::tls::http_client().build().unwrap(),
            base: repo.url.clone(),
            token: token.map(String::from),
        }
    }

    async fn call(&self, method: Method, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Answer {
        let url = if path.starts_with("http") {
            path.to_string()
        } else {
            format!("{}{path}", self.base)
        };
        let mut req = self.http.request(method, url).body(body);
        if let Some(t) = &self.token {
            req = req.basic_auth("anyone", Some(t));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        Answer {
            status: resp.status(),
            headers: resp.headers().clone(),
            body: resp.bytes().await.unwrap().to_vec(),
        }
    }

    /// Pushes `data` monolithically (`POST ?digest=`); its digest.
    async fn push_blob(&self, name: &str, data: &[u8]) -> BlobId {
        let id = BlobId::of(data);
        let a = self
            .call(Method::POST, &format!("/v2/{name}/blobs/uploads/?digest={id}"), &[], data.to_vec())
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&a.body));
        id
    }

    async fn put_manifest(&self, name: &str, reference: &str, manifest: &Value) -> Answer {
        let media = manifest["mediaType"]
            .as_str()
            .unwrap_or("application/vnd.oci.image.manifest.v1+json")
            .to_string();
        self.call(
            Method::PUT,
            &format!("/v2/{name}/manifests/{reference}"),
            &[("content-type", &media)],
            serde_json::to_vec(manifest).unwrap(),
        )
        .await
    }
}

fn descriptor(media: &str, data: &[u8]) -> Value {
    json!({ "mediaType": media, "digest": BlobId::of(data).to_string(), "size": data.len() })
}

/// An image manifest of a VM disk artifact whose blobs are pushed.
async fn disk_artifact(oci: &Oci, name: &str, disk: &[u8]) -> Value {
    let config = b"{}";
    oci.push_blob(name, config).await;
    oci.push_blob(name, disk).await;
    json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.vee.image.v1",
        "config": descriptor("application/vnd.oci.empty.v1+json", config),
        "layers": [descriptor("application/vnd.vee.disk.v1+qcow2", disk)],
        "annotations": { "org.opencontainers.image.title": "tiny.qcow2" }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_base_endpoint_challenges_with_basic_and_accepts_basic_or_bearer() {
    let repo = Repo::start();
    // "end-1": GET /v2/ answers 200 to an authenticated client.
    let anonymous = Oci::new(&repo, None).call(Method::GET, "/v2/", &[], vec![]).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert!(
        anonymous.header("www-authenticate").starts_with("Basic realm="),
        "{:?}",
        anonymous.headers
    );
    assert_eq!(anonymous.code(), "UNAUTHORIZED");
    let basic = Oci::new(&repo, Some(ACME_TOKEN)).call(Method::GET, "/v2/", &[], vec![]).await;
    assert_eq!(basic.status, StatusCode::OK);
    assert_eq!(basic.header("docker-distribution-api-version"), "registry/2.0");
    let bearer = interfaces::tls::http_client().build().unwrap()
        .get(format!("{}/v2/", repo.url))
        .bearer_auth(ACME_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), StatusCode::OK);
    let wrong = Oci::new(&repo, Some("not-a-token")).call(Method::GET, "/v2/", &[], vec![]).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread")]
async fn monolithic_push_then_pull_whole_and_by_range() {
    let repo = Repo::start();
    let acme = Oci::new(&repo, Some(ACME_TOKEN));
    let data = common::content(7, 100_000);
    // "end-4b": POST ?digest= with the body: 201 with the blob's Location.
    let id = BlobId::of(&data);
    let a = acme
        .call(Method::POST, &format!("/v2/acme/os/blobs/uploads/?digest={id}"), &[], data.clone())
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert_eq!(a.header("location"), format!("/v2/acme/os/blobs/{id}"));
    // "end-2": HEAD and GET the blob; its digest in Docker-Content-Digest.
    let head = acme.call(Method::HEAD, &format!("/v2/acme/os/blobs/{id}"), &[], vec![]).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.header("content-length"), "100000");
    assert_eq!(head.header("docker-content-digest"), id.to_string());
    // Content behind a token is private to caches (it said public before).
    assert!(
        head.header("cache-control").starts_with("private"),
        "{}",
        head.header("cache-control")
    );
    let get = acme.call(Method::GET, &format!("/v2/acme/os/blobs/{id}"), &[], vec![]).await;
    assert_eq!(get.body, data);
    let part = acme
        .call(Method::GET, &format!("/v2/acme/os/blobs/{id}"), &[("range", "bytes=10-19")], vec![])
        .await;
    assert_eq!(part.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(part.body, data[10..20]);
    // A digest that does not match the body: 400 DIGEST_INVALID, nothing stored.
    let claimed = BlobId::of(b"something else");
    let bad = acme
        .call(
            Method::POST,
            &format!("/v2/acme/os/blobs/uploads/?digest={claimed}"),
            &[],
            data.clone(),
        )
        .await;
    assert_eq!((bad.status, bad.code().as_str()), (StatusCode::BAD_REQUEST, "DIGEST_INVALID"));
    let gone = acme.call(Method::GET, &format!("/v2/acme/os/blobs/{claimed}"), &[], vec![]).await;
    assert_eq!((gone.status, gone.code().as_str()), (StatusCode::NOT_FOUND, "BLOB_UNKNOWN"));
    assert!(repo.wait_tmp_empty().is_empty());
    // The same content is one blob of the store, seen by /v1 as acme's.
    let meta = repo.client().head(&id).await.unwrap().unwrap();
    assert_eq!((meta.owner.as_str(), meta.kind.as_str()), ("acme", "oci-blob"));
}

#[tokio::test(flavor = "multi_thread")]
async fn chunked_push_in_order_with_status_and_out_of_order_chunks_refused() {
    let repo = Repo::start();
    let acme = Oci::new(&repo, Some(ACME_TOKEN));
    let data = common::content(3, 30_000);
    // "end-4a": POST opens a session: 202 with its Location.
    let open = acme.call(Method::POST, "/v2/acme/os/blobs/uploads/", &[], vec![]).await;
    assert_eq!(open.status, StatusCode::ACCEPTED);
    let session = open.header("location").to_string();
    assert!(session.starts_with("/v2/acme/os/blobs/uploads/"), "{session}");
    // "end-5": PATCH chunks with Content-Range; 202 with the Range so far.
    let first = acme
        .call(
            Method::PATCH,
            &session,
            &[("content-range", "0-9999"), ("content-type", "application/octet-stream")],
            data[..10_000].to_vec(),
        )
        .await;
    assert_eq!(first.status, StatusCode::ACCEPTED);
    assert_eq!(first.header("range"), "0-9999");
    let session = first.header("location").to_string();
    // A chunk that does not start where the upload is: 416 with the Range.
    let skipped = acme
        .call(
            Method::PATCH,
            &session,
            &[("content-range", "20000-29999")],
            data[20_000..].to_vec(),
        )
        .await;
    assert_eq!(skipped.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(skipped.header("range"), "0-9999");
    // "end-13": GET the session: 204 with the Range.
    let status = acme.call(Method::GET, &session, &[], vec![]).await;
    assert_eq!((status.status, status.header("range")), (StatusCode::NO_CONTENT, "0-9999"));
    let second = acme
        .call(
            Method::PATCH,
            &session,
            &[("content-range", "10000-19999")],
            data[10_000..20_000].to_vec(),
        )
        .await;
    assert_eq!(second.header("range"), "0-19999");
    // "end-6": PUT ?digest= with the last chunk closes it: 201.
    let id = BlobId::of(&data);
    let close = acme
        .call(Method::PUT, &format!("{session}?digest={id}"), &[], data[20_000..].to_vec())
        .await;
    assert_eq!(close.status, StatusCode::CREATED);
    assert_eq!(close.header("docker-content-digest"), id.to_string());
    let get = acme.call(Method::GET, &format!("/v2/acme/os/blobs/{id}"), &[], vec![]).await;
    assert_eq!(get.body, data);
    // The closed session is gone.
    let after = acme.call(Method::GET, &session, &[], vec![]).await;
    assert_eq!(
        (after.status, after.code().as_str()),
        (StatusCode::NOT_FOUND, "BLOB_UPLOAD_UNKNOWN")
    );
    // A session closed with a wrong digest stores nothing.
    let open = acme.call(Method::POST, "/v2/acme/os/blobs/uploads/", &[], vec![]).await;
    let s = open.header("location").to_string();
    let wrong = acme
        .call(Method::PUT, &format!("{s}?digest={}", BlobId::of(b"x")), &[], b"y".to_vec())
        .await;
    assert_eq!((wrong.status, wrong.code().as_str()), (StatusCode::BAD_REQUEST, "DIGEST_INVALID"));
    assert!(repo.wait_tmp_empty().is_empty());
    // "end-14": DELETE cancels a session.
    let open = acme.call(Method::POST, "/v2/acme/os/blobs/uploads/", &[], vec![]).await;
    let s = open.header("location").to_string();
    assert_eq!(acme.call(Method::DELETE, &s, &[], vec![]).await.status, StatusCode::NO_CONTENT);
    assert_eq!(acme.call(Method::GET, &s, &[], vec![]).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread")]
async fn mount_links_a_readable_blob_and_falls_back_to_an_upload_otherwise() {
    let repo = Repo::start();
    let acme = Oci::new(&repo, Some(ACME_TOKEN));
    let globex = Oci::new(&repo, Some(GLOBEX_TOKEN));
    let id = acme.push_blob("acme/os", b"a layer of acme's").await;
    // "end-11": POST ?mount=&from=: 201 once mounted.
    let m = acme
        .call(
            Method::POST,
            &format!("/v2/acme/other/blobs/uploads/?mount={id}&from=acme/os"),
            &[],
            vec![],
        )
        .await;
    assert_eq!(m.status, StatusCode::CREATED);
    assert_eq!(m.header("location"), format!("/v2/acme/other/blobs/{id}"));
    assert_eq!(
        acme.call(Method::HEAD, &format!("/v2/acme/other/blobs/{id}"), &[], vec![])
            .await
            .status,
        StatusCode::OK
    );
    // Another provider cannot mount what it may not read: it gets an
    // upload session (202), as the specification says, and no blob.
    let g = globex
        .call(
            Method::POST,
            &format!("/v2/globex/x/blobs/uploads/?mount={id}&from=acme/os"),
            &[],
            vec![],
        )
        .await;
    assert_eq!(g.status, StatusCode::ACCEPTED);
    assert_eq!(
        globex
            .call(Method::HEAD, &format!("/v2/globex/x/blobs/{id}"), &[], vec![])
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // Nor read it in acme's repository, nor push there.
    let read = globex.call(Method::GET, &format!("/v2/acme/os/blobs/{id}"), &[], vec![]).await;
    assert_eq!((read.status, read.code().as_str()), (StatusCode::NOT_FOUND, "BLOB_UNKNOWN"));
    let push = globex.call(Method::POST, "/v2/acme/os/blobs/uploads/", &[], vec![]).await;
    assert_eq!((push.status, push.code().as_str()), (StatusCode::FORBIDDEN, "DENIED"));
    // "end-10": DELETE unlinks the blob from one repository only.
    assert_eq!(
        acme.call(Method::DELETE, &format!("/v2/acme/other/blobs/{id}"), &[], vec![])
            .await
            .status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        acme.call(Method::HEAD, &format!("/v2/acme/other/blobs/{id}"), &[], vec![])
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        acme.call(Method::HEAD, &format!("/v2/acme/os/blobs/{id}"), &[], vec![])
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn manifests_by_tag_and_digest_and_their_checks() {
    let repo = Repo::start();
    let acme = Oci::new(&repo, Some(ACME_TOKEN));
    let manifest = disk_artifact(&acme, "acme/tiny", b"qcow2 bytes of a tiny disk").await;
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let id = BlobId::of(&bytes);
    // "end-7": PUT by tag: 201 with Location and digest.
    let put = acme.put_manifest("acme/tiny", "v1", &manifest).await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&put.body));
    assert_eq!(put.header("location"), format!("/v2/acme/tiny/manifests/{id}"));
    assert_eq!(put.header("docker-content-digest"), id.to_string());
    // "end-3": GET by tag and by digest: the bytes pushed, with their media type.
    for reference in ["v1".to_string(), id.to_string()] {
        let get = acme
            .call(Method::GET, &format!("/v2/acme/tiny/manifests/{reference}"), &[], vec![])
            .await;
        assert_eq!(get.status, StatusCode::OK);
        assert_eq!(get.body, bytes);
        assert_eq!(get.header("content-type"), "application/vnd.oci.image.manifest.v1+json");
        assert_eq!(get.header("docker-content-digest"), id.to_string());
    }
    let head = acme.call(Method::HEAD, "/v2/acme/tiny/manifests/v1", &[], vec![]).await;
    assert_eq!(
        (head.status, head.header("content-length")),
        (StatusCode::OK, bytes.len().to_string().as_str())
    );
    // A manifest naming a blob the repository lacks: MANIFEST_BLOB_UNKNOWN.
    let mut missing = manifest.clone();
    missing["layers"][0] = descriptor("application/vnd.vee.disk.v1+qcow2", b"never pushed");
    let a = acme.put_manifest("acme/tiny", "v2", &missing).await;
    assert_eq!((a.status, a.code().as_str()), (StatusCode::BAD_REQUEST, "MANIFEST_BLOB_UNKNOWN"));
    // A descriptor whose size is not the blob's: MANIFEST_INVALID.
    let mut wrong_size = manifest.clone();
    wrong_size["layers"][0]["size"] = json!(3);
    let a = acme.put_manifest("acme/tiny", "v2", &wrong_size).await;
    assert_eq!((a.status, a.code().as_str()), (StatusCode::BAD_REQUEST, "MANIFEST_INVALID"));
    // Pushed by a digest it does not have: DIGEST_INVALID.
    let a = acme.put_manifest("acme/tiny", &BlobId::of(b"other").to_string(), &manifest).await;
    assert_eq!((a.status, a.code().as_str()), (StatusCode::BAD_REQUEST, "DIGEST_INVALID"));
    // Not JSON, another media type, an invalid tag.
    let a = acme
        .call(
            Method::PUT,
            "/v2/acme/tiny/manifests/v3",
            &[("content-type", "application/vnd.oci.image.manifest.v1+json")],
            b"{".to_vec(),
        )
        .await;
    assert_eq!(a.code(), "MANIFEST_INVALID");
    let a = acme
        .call(
            Method::PUT,
            "/v2/acme/tiny/manifests/v3",
            &[("content-type", "text/plain")],
            bytes.clone(),
        )
        .await;
    assert_eq!(a.code(), "MANIFEST_INVALID");
    let a = acme.put_manifest("acme/tiny", ".hidden", &manifest).await;
    assert_eq!(a.code(), "MANIFEST_INVALID");
    // Bounded metadata: too many annotations, a bidi control in one.
    let mut many = manifest.clone();
    many["annotations"] = json!((0..65)
        .map(|i| (format!("k{i}"), "v".to_string()))
        .collect::<std::collections::BTreeMap<_, _>>());
    let a = acme.put_manifest("acme/tiny", "v3", &many).await;
    assert_eq!(a.code(), "MANIFEST_INVALID");
    assert!(a.json()["errors"][0]["message"].as_str().unwrap().contains("at most 64"));
    let mut bidi = manifest.clone();
    bidi["annotations"]["org.opencontainers.image.title"] = json!("tiny\u{202E}2woc.qcow2");
    assert_eq!(acme.put_manifest("acme/tiny", "v3", &bidi).await.code(), "MANIFEST_INVALID");
    let mut long_type = manifest.clone();
    long_type["artifactType"] = json!(format!("application/{}", "x".repeat(300)));
    assert_eq!(acme.put_manifest("acme/tiny", "v3", &long_type).await.code(), "MANIFEST_INVALID");
    // Nothing of the refused pushes is visible.
    let tags = acme.call(Method::GET, "/v2/acme/tiny/tags/list", &[], vec![]).await;
    assert_eq!(tags.json(), json!({ "name": "acme/tiny", "tags": ["v1"] }));
    // Another provider sees none of it.
    let globex = Oci::new(&repo, Some(GLOBEX_TOKEN));
    let g = globex.call(Method::GET, "/v2/acme/tiny/manifests/v1", &[], vec![]).await;
    assert_eq!((g.status, g.code().as_str()), (StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN"));
    let g = globex.call(Method::GET, "/v2/acme/tiny/tags/list", &[], vec![]).await;
    assert_eq!((g.status, g.code().as_str()), (StatusCode::NOT_FOUND, "NAME_UNKNOWN"));
    // "end-9": DELETE by tag removes the tag, by digest the manifest.
    acme.put_manifest("acme/tiny", "latest", &manifest).await;
    assert_eq!(
        acme.call(Method::DELETE, "/v2/acme/tiny/manifests/latest", &[], vec![])
            .await
            .status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        acme.call(Method::GET, "/v2/acme/tiny/manifests/latest", &[], vec![]).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        acme.call(Method::GET, "/v2/acme/tiny/manifests/v1", &[], vec![]).await.status,
        StatusCode::OK
    );
    assert_eq!(
        acme.call(Method::DELETE, &format!("/v2/acme/tiny/manifests/{id}"), &[], vec![])
            .await
            .status,
        StatusCode::ACCEPTED
    );
    let gone = acme.call(Method::GET, "/v2/acme/tiny/manifests/v1", &[], vec![]).await;
    assert_eq!((gone.status, gone.code().as_str()), (StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN"));
}

#[tokio::test(flavor = "multi_thread")]
async fn tag_lists_page_with_n_and_last_and_a_link() {
    let repo = Repo::start();
    let acme = Oci::new(&repo, Some(ACME_TOKEN));
    let manifest = disk_artifact(&acme, "acme/many", b"disk").await;
    for tag in ["c", "a", "b", "d"] {
        assert_eq!(acme.put_manifest("acme/many", tag, &manifest).await.status, StatusCode::CREATED);
    }
    // "end-8b": n and last; a Link header to the next page.
    let page = acme.call(Method::GET, "/v2/acme/many/tags/list?n=2", &[], vec![]).await;
    assert_eq!(page.json()["tags"], json!(["a", "b"]));
    assert_eq!(page.header("link"), "</v2/acme/many/tags/list?n=2&last=b>; rel=\"next\"");
    let next = acme.call(Method::GET, "/v2/acme/many/tags/list?n=2&last=b", &[], vec![]).await;
    assert_eq!(next.json()["tags"], json!(["c", "d"]));
    assert_eq!(next.header("link"), "");
    // An unknown repository: NAME_UNKNOWN; an invalid name: NAME_INVALID.
    let none = acme.call(Method::GET, "/v2/acme/none/tags/list", &[], vec![]).await;
    assert_eq!((none.status, none.code().as_str()), (StatusCode::NOT_FOUND, "NAME_UNKNOWN"));
    let bad = acme.call(Method::GET, "/v2/acme/Bad%E2%80%AEName/tags/list", &[], vec![]).await;
    assert_eq!((bad.status, bad.code().as_str()), (StatusCode::BAD_REQUEST, "NAME_INVALID"));
}

#[tokio::test(flavor = "multi_thread")]
async fn referrers_list_what_names_a_subject_filtered_by_artifact_type() {
    let repo = Repo::start();
    let site = Oci::new(&repo, Some(common::SITE_TOKEN));
    let image = disk_artifact(&site, "site-a/checkpoints", b"the base image").await;
    let image_put = site.put_manifest("site-a/checkpoints", "base", &image).await;
    let subject = image_put.header("docker-content-digest").to_string();
    let memory = b"memory state";
    site.push_blob("site-a/checkpoints", memory).await;
    site.push_blob("site-a/checkpoints", b"{\"vee\":\"v1\"}").await;
    let checkpoint = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.vee.checkpoint.v1",
        "config": descriptor("application/vnd.vee.checkpoint.config.v1+json", b"{\"vee\":\"v1\"}"),
        "layers": [descriptor("application/vnd.vee.checkpoint.memory.v1", memory)],
        "subject": { "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": subject, "size": serde_json::to_vec(&image).unwrap().len() },
        "annotations": { "vee.checkpoint/sequence": "1" }
    });
    // "end-7" with a subject: the answer says OCI-Subject.
    let put = site
        .put_manifest(
            "site-a/checkpoints",
            &BlobId::of(&serde_json::to_vec(&checkpoint).unwrap()).to_string(),
            &checkpoint,
        )
        .await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&put.body));
    assert_eq!(put.header("oci-subject"), subject);
    // "end-12a": the referrers: an image index of descriptors.
    let r = site
        .call(Method::GET, &format!("/v2/site-a/checkpoints/referrers/{subject}"), &[], vec![])
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), "application/vnd.oci.image.index.v1+json");
    let index = r.json();
    assert_eq!(index["manifests"].as_array().unwrap().len(), 1);
    let d = &index["manifests"][0];
    assert_eq!(d["digest"], json!(put.header("docker-content-digest")));
    assert_eq!(d["artifactType"], json!("application/vnd.vee.checkpoint.v1"));
    assert_eq!(d["annotations"]["vee.checkpoint/sequence"], json!("1"));
    // "end-12b": filtered by artifactType, which the answer says.
    let f = site
        .call(
            Method::GET,
            &format!("/v2/site-a/checkpoints/referrers/{subject}?artifactType=application/other"),
            &[],
            vec![],
        )
        .await;
    assert_eq!(f.header("oci-filters-applied"), "artifactType");
    assert_eq!(f.json()["manifests"], json!([]));
    // An unknown subject: 200 with none, never 404.
    let u = site
        .call(
            Method::GET,
            &format!("/v2/site-a/checkpoints/referrers/{}", BlobId::of(b"?")),
            &[],
            vec![],
        )
        .await;
    assert_eq!((u.status, u.json()["manifests"].clone()), (StatusCode::OK, json!([])));
    // Another caller does not see the site's checkpoints among them.
    let acme = Oci::new(&repo, Some(ACME_TOKEN));
    let other = acme
        .call(Method::GET, &format!("/v2/site-a/checkpoints/referrers/{subject}"), &[], vec![])
        .await;
    assert_eq!(other.json()["manifests"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn upload_sessions_are_bounded_per_caller_and_stalled_ones_expire() {
    let repo = Repo::start_with(common::Options {
        extra_config: "upload_session_timeout = \"1s\"\nmax_uploads_per_caller = 2\n".into(),
        ..Default::default()
    });
    let acme = Oci::new(&repo, Some(ACME_TOKEN));
    let open = |n: usize| {
        let acme = &acme;
        async move {
            let a = acme.call(Method::POST, "/v2/acme/os/blobs/uploads/", &[], vec![]).await;
            (n, a)
        }
    };
    let (_, a) = open(1).await;
    let first = a.header("location").to_string();
    acme.call(Method::PATCH, &first, &[], vec![1u8; 1000]).await;
    open(2).await;
    let (_, third) = open(3).await;
    assert_eq!(
        (third.status, third.code().as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "TOOMANYREQUESTS")
    );
    // Another caller has its own sessions.
    let globex = Oci::new(&repo, Some(GLOBEX_TOKEN));
    assert_eq!(
        globex.call(Method::POST, "/v2/globex/os/blobs/uploads/", &[], vec![]).await.status,
        StatusCode::ACCEPTED
    );
    // Left without a request, they expire with their bytes and free the slot.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert_eq!(acme.call(Method::GET, &first, &[], vec![]).await.status, StatusCode::NOT_FOUND);
    assert!(repo.wait_tmp_empty().is_empty());
    assert_eq!(open(4).await.1.status, StatusCode::ACCEPTED);
}

/// The repository's own `/v1` delete of content an OCI repository holds:
/// refused, naming the repositories, unless forced; forced, the content
/// leaves every repository with it (no link outlives it), across a
/// restart too (the index by digest is on disk).
#[tokio::test(flavor = "multi_thread")]
async fn a_v1_delete_of_what_a_repository_holds_is_refused_unless_forced_and_leaves_no_link() {
    let mut repo = Repo::start();
    let acme = Oci::new(&repo, Some(ACME_TOKEN));
    let disk: &[u8] = b"qcow2 bytes of a disk held twice";
    let manifest = disk_artifact(&acme, "acme/tiny", disk).await;
    assert_eq!(acme.put_manifest("acme/tiny", "v1", &manifest).await.status, StatusCode::CREATED);
    let id = BlobId::of(disk);
    let mounted = acme
        .call(Method::POST, &format!("/v2/acme/copy/blobs/uploads/?mount={id}"), &[], vec![])
        .await;
    assert_eq!(mounted.status, StatusCode::CREATED);
    repo.restart();
    let v1 = repo.client_with(Some(ACME_TOKEN));
    let refused = v1.delete(&id, false).await.unwrap_err().to_string();
    assert!(
        refused.contains("acme/tiny (a blob)") && refused.contains("acme/copy (a blob)") && refused.contains("force"),
        "{refused}"
    );
    // The manifest's own content, too.
    let manifest_id = BlobId::of(&serde_json::to_vec(&manifest).unwrap());
    let refused = v1.delete(&manifest_id, false).await.unwrap_err().to_string();
    assert!(refused.contains("acme/tiny (a manifest)"), "{refused}");
    let head = |name: &'static str, id: BlobId| {
        let acme = &acme;
        async move { acme.call(Method::HEAD, &format!("/v2/{name}/blobs/{id}"), &[], vec![]).await.status }
    };
    assert_eq!(head("acme/copy", id.clone()).await, StatusCode::OK);
    // Unlinked through /v2 from one repository, still held by the other.
    assert_eq!(
        acme.call(Method::DELETE, &format!("/v2/acme/copy/blobs/{id}"), &[], vec![])
            .await
            .status,
        StatusCode::ACCEPTED
    );
    let refused = v1.delete(&id, false).await.unwrap_err().to_string();
    assert!(refused.contains("acme/tiny") && !refused.contains("acme/copy"), "{refused}");
    // Forced: gone, and from every repository that held it.
    v1.delete(&manifest_id, true).await.unwrap();
    v1.delete(&id, true).await.unwrap();
    assert_eq!(head("acme/tiny", id.clone()).await, StatusCode::NOT_FOUND);
    let get = acme.call(Method::GET, "/v2/acme/tiny/manifests/v1", &[], vec![]).await;
    assert_eq!((get.status, get.code().as_str()), (StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN"));
    let tags = acme.call(Method::GET, "/v2/acme/tiny/tags/list", &[], vec![]).await;
    assert_eq!(tags.json()["tags"], json!([]), "{}", String::from_utf8_lossy(&tags.body));
    // Pushed again, it is new content in no repository: deleted at once.
    let file = common::write_file(repo.scratch(), "disk", disk);
    let meta = interfaces::repo_client::PushMeta::new("disk", interfaces::repo_client::BlobKind::Disk);
    assert_eq!(v1.push_file(&file, &meta).await.unwrap(), id);
    v1.delete(&id, false).await.unwrap();
}
