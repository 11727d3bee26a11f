//! The bounds of a blob's record through the real server: pins per blob
//! (`max_pins_per_blob`), and the largest metadata a push may give.

mod common;

use common::{content, Repo};
use interfaces::repo_client::{BlobKind, PushMeta};

/// A blob takes `max_pins_per_blob` pins (64 by default; 300 made a 36 KB
/// record, rewritten and synced on every change): one more is refused with
/// 409 naming the key, a pin it has is set again, and an unpin makes room.
#[tokio::test(flavor = "multi_thread")]
async fn pins_of_a_blob_stop_at_max_pins_per_blob() {
    let repo = Repo::start();
    let client = repo.client();
    let file = common::write_file(repo.scratch(), "pinned", &content(21, 1000));
    let id = client.push_file(&file, &PushMeta::new("pinned", BlobKind::Disk)).await.unwrap();
    // The longest pin names (128 bytes).
    let name = |i: usize| format!("{i:03}-{}", "p".repeat(124));
    for i in 0..64 {
        client.pin(&id, &name(i)).await.unwrap();
    }
    let err = client.pin(&id, &name(64)).await.unwrap_err().to_string();
    assert!(
        err.contains("409") && err.contains("64 pins") && err.contains("max_pins_per_blob"),
        "{err}"
    );
    client.pin(&id, &name(0)).await.unwrap();
    client.unpin(&id, &name(0)).await.unwrap();
    client.pin(&id, &name(64)).await.unwrap();
    let record = client.head(&id).await.unwrap().unwrap();
    assert_eq!(record.pins.len(), 64);
    let bytes = serde_json::to_vec(&record).unwrap().len();
    assert!(bytes < 10_000, "a record of {bytes} bytes");
}

/// The largest metadata the limits accept (a name of 255 bytes, 64 labels
/// of 64-byte keys and 255-byte values, every byte percent-encoded in
/// the query: 54 KB) is stored as given; the head limit (16 KiB) refused
/// it with 431 before. One label more is refused naming the field.
#[tokio::test(flavor = "multi_thread")]
async fn the_largest_metadata_the_limits_accept_is_pushed() {
    use interfaces::repo_client::types::{MAX_LABELS, MAX_LABEL_KEY_LEN, MAX_LABEL_VALUE_LEN, MAX_NAME_LEN};
    let repo = Repo::start();
    let client = repo.client();
    let widest = |bytes: usize| "\u{4e2d}".repeat(bytes / 3) + &"%".repeat(bytes % 3);
    let mut meta = PushMeta::new(widest(MAX_NAME_LEN), BlobKind::Disk);
    meta.format = Some("raw".into());
    for i in 0..MAX_LABELS {
        meta.labels
            .insert(format!("{i:02}{}", "k".repeat(MAX_LABEL_KEY_LEN - 2)), widest(MAX_LABEL_VALUE_LEN));
    }
    let file = common::write_file(repo.scratch(), "largest", &content(22, 1000));
    let id = client.push_file(&file, &meta).await.unwrap();
    let record = client.head(&id).await.unwrap().unwrap();
    assert_eq!((record.name, record.labels), (meta.name.clone(), meta.labels.clone()));

    // One label more: 400 naming `labels`, not a refused head.
    let url = format!("{}/v1/blobs/{}", repo.url, interfaces::BlobId::of(b"more"));
    let mut query = interfaces::repo_client::protocol::meta_to_query(&meta);
    query.push(("label.one-more".into(), widest(MAX_LABEL_VALUE_LEN)));
    let http = interfaces::tls::http_client().build().unwrap();
    let r = http
        .put(url)
        .query(&query)
        .bearer_auth(common::TOKEN)
        .body("more")
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    assert!(
        status == 400 && body.contains("`labels`") && body.contains("at most 64"),
        "{status} {body}"
    );
}
