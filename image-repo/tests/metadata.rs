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
