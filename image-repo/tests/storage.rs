//! Running out of room: the quota and a really full disk (a small tmpfs).
//! Either way the upload is answered with 507, and nothing is left behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use common::{content, write_file, Options, Repo, TOKEN};
use interfaces::repo_client::protocol::ErrorBody;
use interfaces::repo_client::{BlobKind, PushMeta};
use interfaces::{BlobId, Error};
use reqwest::StatusCode;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Feeds the body of a chunked upload.
type BodyTx = mpsc::Sender<Result<Bytes, std::io::Error>>;
/// Status and error body of an upload.
type Answer = tokio::task::JoinHandle<(StatusCode, Option<ErrorBody>)>;

/// Starts a chunked upload (no Content-Length) whose body is fed through
/// the returned sender; the task yields the status and error body.
fn chunked_upload(repo: &Repo, data: &[u8]) -> (BodyTx, Answer) {
    let (tx, rx) = mpsc::channel(1024);
    let url = format!("{}/v1/blobs/{}?name=chunked&kind=disk", repo.url, BlobId::of(data));
    let task = tokio::spawn(async move {
        let resp = interfaces::tls::http_client().build().unwrap()
            .put(url)
            .bearer_auth(TOKEN)
            .body(reqwest::Body::wrap_stream(ReceiverStream::new(rx)))
            .send()
            .await
            .expect("the server answers");
        let status = resp.status();
        let body = resp.bytes().await.unwrap();
        (status, serde_json::from_slice(&body).ok())
    });
    (tx, task)
}

async fn feed(tx: &BodyTx, data: &[u8]) {
    for chunk in data.chunks(64 << 10) {
        if tx.send(Ok(Bytes::copy_from_slice(chunk))).await.is_err() {
            return; // the server stopped reading
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quota_refuses_blobs_that_do_not_fit() {
    let repo = Repo::start_with(Options {
        max_bytes: Some(1 << 20),
        ..Options::default()
    });
    let client = repo.client();
    let big = write_file(repo.scratch(), "big", &content(30, 2 << 20));
    let err = client.push_file(&big, &PushMeta::new("big", BlobKind::Disk)).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Repository { .. }), "{msg}");
    assert!(
        msg.contains("507") && msg.contains("quota of 1048576 bytes") && msg.contains(&BlobId::of(&content(30, 2 << 20)).to_string()),
        "{msg}"
    );

    let small = write_file(repo.scratch(), "small", &content(31, 600_000));
    client.push_file(&small, &PushMeta::new("small", BlobKind::Disk)).await.unwrap();
    let other = write_file(repo.scratch(), "other", &content(32, 600_000));
    let msg = client
        .push_file(&other, &PushMeta::new("other", BlobKind::Disk))
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.contains("600000 used"), "{msg}");

    // Without a declared length the server finds out while receiving.
    let data = content(33, 2 << 20);
    let (tx, task) = chunked_upload(&repo, &data);
    feed(&tx, &data).await;
    drop(tx);
    let (status, body) = task.await.unwrap();
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE);
    let body = body.unwrap();
    assert!(
        body.error.contains("exceeds the room left") && body.error.contains("nothing stored"),
        "{}",
        body.error
    );
    assert!(repo.wait_tmp_empty().is_empty());
    assert_eq!(repo.blob_files().len(), 1);
}

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_mid_upload_answers_507_and_frees_the_space() {
    let scratch = tempfile::tempdir().unwrap();
    let Some(_disk) = Tmpfs::mount(&scratch.path().join("disk"), "8m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let repo = Repo::start_with(Options {
        data: Some(scratch.path().join("disk/data")),
        ..Options::default()
    });

    // Two 5 MiB uploads on an 8 MiB disk: each fits the free space when it
    // starts, together they do not, so one is refused while writing: by
    // the room the other holds (issue 39), or by ENOSPC.
    let a = content(40, 5 << 20);
    let b = content(41, 5 << 20);
    let (tx_a, task_a) = chunked_upload(&repo, &a);
    let (tx_b, task_b) = chunked_upload(&repo, &b);
    feed(&tx_a, &a[..3 << 20]).await;
    feed(&tx_b, &b[..3 << 20]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    feed(&tx_a, &a[3 << 20..]).await;
    feed(&tx_b, &b[3 << 20..]).await;
    drop((tx_a, tx_b));
    let results = [task_a.await.unwrap(), task_b.await.unwrap()];

    let refused: Vec<_> = results.iter().filter(|(s, _)| *s == StatusCode::INSUFFICIENT_STORAGE).collect();
    assert!(!refused.is_empty(), "both uploads fit on an 8 MiB disk? {results:?}");
    for (_, body) in &refused {
        let body = body.as_ref().unwrap();
        assert_eq!(body.code, "insufficient_storage");
        assert!(
            (body.error.contains("disk full") || body.error.contains("room left")) && body.error.contains("nothing stored"),
            "{}",
            body.error
        );
    }
    assert!(repo.wait_tmp_empty().is_empty(), "temporary files left on the full disk");
    // Whatever was accepted is complete and correct.
    let client = repo.client();
    for ((status, _), data) in results.iter().zip([&a, &b]) {
        let id = BlobId::of(data);
        if *status == StatusCode::CREATED {
            let dest = scratch.path().join("check");
            client.pull(&id, &dest, None).await.unwrap();
            assert_eq!(&std::fs::read(&dest).unwrap(), data);
        } else {
            assert!(client.head(&id).await.unwrap().is_none());
        }
    }
    // The space of the refused upload is free again.
    let small = write_file(scratch.path(), "small", &content(42, 1 << 20));
    client.push_file(&small, &PushMeta::new("small", BlobKind::Disk)).await.unwrap();
    drop(repo);
}
