//! Checkpoints in chunks (`interfaces::chunks`) against a real server:
//! `POST /v1/blobs/missing` names what a caller must push and never
//! whether others' content exists; an index is stored only when every
//! chunk it lists is there for its uploader; reading an index reads its
//! chunks; a listed chunk is kept from deletes and collections, and a
//! checkpoint's rollover frees only the chunks no kept index lists.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::chunks::{assemble, chunk, index_of, push_checkpoint, SITE_B_CONFIG, SITE_B_TOKEN};
use common::{Options, Repo, ACME_TOKEN, SITE_TOKEN};
use interfaces::chunks::{MAX_CHUNK, MAX_INDEX_BYTES};
use interfaces::repo_client::protocol::MAX_MISSING_QUERY;
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::BlobId;
use reqwest::StatusCode;

async fn push_chunk(client: &RepoClient, data: &[u8]) -> BlobId {
    let id = BlobId::of(data);
    let meta = PushMeta::new("chunk", BlobKind::CheckpointChunk);
    client.push_bytes(&id, data.to_vec().into(), &meta).await.unwrap();
    id
}

/// `PUT /v1/blobs/{id}?name=..&kind=KIND` of `body` with `token`: the
/// status and the error body's text.
async fn put(repo: &Repo, token: &str, kind: &str, body: Vec<u8>) -> (StatusCode, String) {
    let id = BlobId::of(&body);
    let r = interfaces::tls::http_client()
        .build()
        .unwrap()
        .put(format!("{}/v1/blobs/{id}?name=x&kind={kind}", repo.url))
        .bearer_auth(token)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap_or_default())
}

/// `POST /v1/blobs/missing` with `body`: the status and the body.
async fn missing_raw(repo: &Repo, token: &str, body: String) -> (StatusCode, String) {
    let r = interfaces::tls::http_client()
        .build()
        .unwrap()
        .post(format!("{}/v1/blobs/missing", repo.url))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

fn two_sites() -> Repo {
    Repo::start_with(Options {
        extra_config: SITE_B_CONFIG.into(),
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_names_what_the_caller_must_push_and_never_others_content() {
    let repo = Repo::start();
    let (site, acme) = (repo.client_with(Some(SITE_TOKEN)), repo.client_with(Some(ACME_TOKEN)));
    let (mine, theirs, nobodys) = (chunk(1, 1000), chunk(2, 1000), chunk(3, 1000));
    let mine_id = push_chunk(&site, &mine).await;
    let theirs_id = push_chunk(&acme, &theirs).await;
    let nobodys_id = BlobId::of(&nobodys);
    // In the query's order: acme's chunk is missing for the site, as one
    // that is not stored at all.
    let asked = [theirs_id.clone(), mine_id.clone(), nobodys_id.clone()];
    assert_eq!(site.missing(&asked).await.unwrap(), [theirs_id.clone(), nobodys_id.clone()]);
    // Pushing the content proves the site holds it: from then on it is
    // the site's to read, and not missing.
    push_chunk(&site, &theirs).await;
    assert_eq!(site.missing(&asked).await.unwrap(), std::slice::from_ref(&nobodys_id));
    // The client splits a long list; the server bounds each query.
    let many: Vec<BlobId> = (0..MAX_MISSING_QUERY as u64 + 5).map(|n| BlobId::of(&n.to_le_bytes())).collect();
    assert_eq!(site.missing(&many).await.unwrap().len(), many.len());
    let body = serde_json::json!({ "digests": many }).to_string();
    let (status, text) = missing_raw(&repo, SITE_TOKEN, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("`digests`") && text.contains("4101 digests"), "{text}");
    let (status, text) = missing_raw(&repo, SITE_TOKEN, "{\"digests\": [\"md5:x\"]}".into()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("`digests`"), "{text}");
    let (status, _) = missing_raw(&repo, "not-a-token", "{\"digests\": []}".into()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_index_is_stored_only_when_every_chunk_it_lists_is_there_for_its_uploader() {
    let repo = Repo::start();
    let (site, acme) = (repo.client_with(Some(SITE_TOKEN)), repo.client_with(Some(ACME_TOKEN)));
    let (one, two, acmes) = (chunk(1, 3000), chunk(2, 2000), chunk(3, 1000));
    push_chunk(&site, &one).await;
    push_chunk(&acme, &acmes).await;
    // A chunk not stored: 409 naming it, nothing stored.
    let (_, raw) = index_of(&[&one, &two]);
    let (status, text) = put(&repo, SITE_TOKEN, "checkpoint-index", raw.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    assert!(text.contains("chunk_missing") && text.contains(&BlobId::of(&two).to_string()), "{text}");
    assert!(repo.client().head(&BlobId::of(&raw)).await.unwrap().is_none());
    // Another's chunk: refused in the same words, as if absent.
    let (_, others) = index_of(&[&one, &acmes]);
    let (status, text) = put(&repo, SITE_TOKEN, "checkpoint-index", others).await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    assert!(text.contains("is not stored, or site-a may not read it"), "{text}");
    // A blob of another kind listed as a chunk.
    let image = b"an image, not a chunk".to_vec();
    assert_eq!(put(&repo, SITE_TOKEN, "disk", image.clone()).await.0, StatusCode::CREATED);
    let (_, listed) = index_of(&[&one, &image]);
    let (status, text) = put(&repo, SITE_TOKEN, "checkpoint-index", listed).await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    assert!(text.contains("is a disk, not a checkpoint-chunk"), "{text}");
    // Malformed: 400 naming the field.
    let (mut index, _) = index_of(&[&one]);
    index.size += 1;
    let (status, text) = put(&repo, SITE_TOKEN, "checkpoint-index", index.to_bytes()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("`size`"), "{text}");
    // Once the chunk is pushed: stored, and pushed again it is 200.
    push_chunk(&site, &two).await;
    assert_eq!(put(&repo, SITE_TOKEN, "checkpoint-index", raw.clone()).await.0, StatusCode::CREATED);
    assert_eq!(put(&repo, SITE_TOKEN, "checkpoint-index", raw.clone()).await.0, StatusCode::OK);
    // Pushing a stored index proves only that one knows its digests: acme
    // may read neither chunk, so it does not become a reader.
    let (status, _) = put(&repo, ACME_TOKEN, "checkpoint-index", raw.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(acme.head(&BlobId::of(&raw)).await.unwrap().is_none());
    assert!(acme.head(&BlobId::of(&one)).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn chunks_and_indexes_over_their_bounds_are_refused_naming_the_field() {
    let repo = Repo::start();
    let big = chunk(9, MAX_CHUNK as usize + 1);
    let (status, text) = put(&repo, SITE_TOKEN, "checkpoint-chunk", big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    assert!(text.contains("`Content-Length`") && text.contains("checkpoint-chunk"), "{text}");
    assert!(repo.blob_files().is_empty());
    assert!(repo.wait_tmp_empty().is_empty());
    // Without a length: cut where it passes the bound.
    let stream = futures::stream::iter((0..5).map(|_| Ok::<_, std::io::Error>(vec![7u8; 1 << 20])));
    let body = [7u8; 1 << 20].repeat(5);
    let r = interfaces::tls::http_client()
        .build()
        .unwrap()
        .put(format!("{}/v1/blobs/{}?name=x&kind=checkpoint-chunk", repo.url, BlobId::of(&body)))
        .bearer_auth(SITE_TOKEN)
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(r.text().await.unwrap().contains("`body`"));
    // The upload check says so before a byte is sent.
    let site = repo.client_with(Some(SITE_TOKEN));
    let err = site
        .check_push(&BlobId::of(b"x"), MAX_INDEX_BYTES + 1, &PushMeta::new("x", BlobKind::CheckpointIndex))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("413") && err.contains("`size`"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_site_reads_a_chunk_only_once_the_index_is_shared_with_it() {
    let repo = two_sites();
    let (a, b) = (repo.client_with(Some(SITE_TOKEN)), repo.client_with(Some(SITE_B_TOKEN)));
    let (one, two) = (chunk(1, 5000), chunk(2, 4000));
    let (index, _) = push_checkpoint(&a, &[&one, &two]).await;
    let one_id = BlobId::of(&one);
    // Site B: no metadata, no content, and `missing` names it.
    assert!(b.head(&one_id).await.unwrap().is_none());
    assert!(b.pull(&one_id, &repo.scratch().join("x"), None).await.is_err());
    assert_eq!(b.missing(std::slice::from_ref(&one_id)).await.unwrap(), std::slice::from_ref(&one_id));
    // Site A shares the index (as it does with a peer site): B reads it
    // and every chunk it lists, and needs to push none of them.
    a.share(&index, "site-b").await.unwrap();
    assert_eq!(b.head(&one_id).await.unwrap().unwrap().kind, BlobKind::CheckpointChunk);
    assemble(&b, repo.scratch(), &index, &[&one, &two]).await;
    assert!(b.missing(std::slice::from_ref(&one_id)).await.unwrap().is_empty());
    // A provider still reads none of them.
    assert!(repo.client_with(Some(ACME_TOKEN)).head(&one_id).await.unwrap().is_none());
    // A listed chunk is not deleted without force, as a pinned blob.
    let err = a.delete(&one_id, false).await.unwrap_err().to_string();
    assert!(err.contains("409") && err.contains(&index.to_string()), "{err}");
    a.delete(&index, false).await.unwrap();
    a.delete(&one_id, false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoint_rollover_collects_the_dropped_index_and_only_the_chunks_no_kept_index_lists() {
    let repo = Repo::start();
    let site = repo.client_with(Some(SITE_TOKEN));
    let c: Vec<Vec<u8>> = (0..7).map(|n| chunk(n, 2000 + n as usize)).collect();
    // Three checkpoints of one VEE: most of memory unchanged between them.
    let parts_a: Vec<&[u8]> = vec![&c[0], &c[1], &c[2], &c[3]];
    let parts_b: Vec<&[u8]> = vec![&c[0], &c[1], &c[4], &c[3]];
    let parts_c: Vec<&[u8]> = vec![&c[0], &c[5], &c[4], &c[6]];
    let (a, sent_a) = push_checkpoint(&site, &parts_a).await;
    let (b, sent_b) = push_checkpoint(&site, &parts_b).await;
    let (cc, sent_c) = push_checkpoint(&site, &parts_c).await;
    assert_eq!((sent_a, sent_b, sent_c), (4, 1, 2));
    // Pinned as the VEEM pins the checkpoints it keeps.
    for (id, cp) in [(&a, "a"), (&b, "b"), (&cc, "c")] {
        site.pin(id, &format!("site-a-checkpoint-{cp}")).await.unwrap();
    }
    let operator = repo.client();
    assert!(operator.gc(Duration::ZERO, false).await.unwrap().removed.is_empty());
    // `checkpoints_kept` rolls over: A is unpinned.
    site.unpin(&a, "site-a-checkpoint-a").await.unwrap();
    // Young: kept by the grace.
    assert!(operator.gc(Duration::from_secs(3600), false).await.unwrap().removed.is_empty());
    let expected = BTreeSet::from([a.clone(), BlobId::of(&c[2])]);
    let dry = operator.gc(Duration::ZERO, true).await.unwrap();
    assert_eq!(dry.removed.iter().cloned().collect::<BTreeSet<_>>(), expected);
    let done = operator.gc(Duration::ZERO, false).await.unwrap();
    assert_eq!(done.removed.iter().cloned().collect::<BTreeSet<_>>(), expected);
    assert!(operator.head(&a).await.unwrap().is_none());
    assemble(&site, repo.scratch(), &b, &parts_b).await;
    assemble(&site, repo.scratch(), &cc, &parts_c).await;
    // B and C dropped as well: every chunk goes with them.
    site.unpin(&b, "site-a-checkpoint-b").await.unwrap();
    site.unpin(&cc, "site-a-checkpoint-c").await.unwrap();
    let last = operator.gc(Duration::ZERO, false).await.unwrap();
    assert_eq!(last.removed.len(), 2 + 6);
    assert!(repo.blob_files().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chunk_missing_reported_present_keeps_its_grace_until_an_index_lists_it() {
    let repo = Repo::start();
    let site = repo.client_with(Some(SITE_TOKEN));
    let (told, forgotten) = (chunk(1, 1000), chunk(2, 1000));
    let told_id = push_chunk(&site, &told).await;
    let forgotten_id = push_chunk(&site, &forgotten).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // A host asks: the chunk is there, its grace starts again.
    assert!(site.missing(std::slice::from_ref(&told_id)).await.unwrap().is_empty());
    let done = repo.client().gc(Duration::from_secs(1), false).await.unwrap();
    assert_eq!(done.removed, [forgotten_id]);
    // The index that follows finds it.
    let (_, raw) = index_of(&[&told]);
    assert_eq!(put(&repo, SITE_TOKEN, "checkpoint-index", raw).await.0, StatusCode::CREATED);
}
