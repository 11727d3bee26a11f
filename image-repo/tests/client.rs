//! The client library (`interfaces::repo_client`) against the real server.

mod common;

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use common::{content, write_file, Repo};
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient, RetryPolicy};
use interfaces::{BlobId, Error};

fn meta(name: &str) -> PushMeta {
    let mut m = PushMeta::new(name, BlobKind::Disk);
    m.format = Some("raw".into());
    m.labels.insert("os".into(), "debian".into());
    m
}

/// Records every progress call.
#[derive(Default, Clone)]
struct Calls(Arc<Mutex<Vec<(u64, u64)>>>);

impl Calls {
    fn callback(&self) -> impl Fn(u64, u64) + Send + Sync + '_ {
        move |done, total| self.0.lock().unwrap().push((done, total))
    }
    fn get(&self) -> Vec<(u64, u64)> {
        self.0.lock().unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn push_pull_head_list_with_progress() {
    let repo = Repo::start();
    let client = repo.client();
    let data = content(10, 3 << 20);
    let file = write_file(repo.scratch(), "disk.raw", &data);

    let pushed = Calls::default();
    let id = client
        .push_file_with_progress(&file, &meta("disk"), Some(&pushed.callback()))
        .await
        .unwrap();
    assert_eq!(id, BlobId::of(&data));
    assert_eq!(pushed.get().last(), Some(&(data.len() as u64, data.len() as u64)));

    let dest = repo.scratch().join("out/disk.raw");
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    let pulled = Calls::default();
    let n = client.pull(&id, &dest, Some(&pulled.callback())).await.unwrap();
    assert_eq!(n, data.len() as u64);
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    let calls = pulled.get();
    assert_eq!(calls.first(), Some(&(0, n)));
    assert_eq!(calls.last(), Some(&(n, n)));
    assert!(calls.windows(2).all(|w| w[0].0 <= w[1].0), "progress went backwards");

    let m = client.head(&id).await.unwrap().expect("stored");
    assert_eq!((m.size, m.name.as_str(), m.format.as_deref()), (n, "disk", Some("raw")));
    assert!(client.head(&BlobId::of(b"absent")).await.unwrap().is_none());
    assert_eq!(client.list().await.unwrap(), vec![m]);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_ids_give_blob_not_found_naming_the_id() {
    let repo = Repo::start();
    let client = repo.client();
    let id = BlobId::of(b"absent");
    let dest = repo.scratch().join("x");
    for err in [
        client.pull(&id, &dest, None).await.unwrap_err(),
        client.delete(&id, false).await.unwrap_err(),
        client.pin(&id, "site-b").await.unwrap_err(),
    ] {
        assert!(matches!(&err, Error::BlobNotFound { id: i } if *i == id.to_string()), "{err}");
    }
    assert!(!dest.exists() && !repo.scratch().join("x.partial").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn pins_guard_delete_through_the_library() {
    let repo = Repo::start();
    let client = repo.client();
    let file = write_file(repo.scratch(), "ckpt", &content(11, 5000));
    let mut m = PushMeta::new("vee-1-mem", BlobKind::CheckpointMemory);
    m.labels.insert("vee".into(), "vee-1".into());
    let id = client.push_file(&file, &m).await.unwrap();
    client.pin(&id, "checkpoint:vee-1:3").await.unwrap();
    assert_eq!(client.head(&id).await.unwrap().unwrap().pins, ["checkpoint:vee-1:3"]);
    let err = client.delete(&id, false).await.unwrap_err().to_string();
    assert!(err.contains("409") && err.contains("checkpoint:vee-1:3"), "{err}");
    let err = client.pin(&id, "../etc").await.unwrap_err().to_string();
    assert!(err.contains("'..'"), "{err}");
    client.unpin(&id, "checkpoint:vee-1:3").await.unwrap();
    client.delete(&id, false).await.unwrap();
    assert!(client.head(&id).await.unwrap().is_none());
    assert!(repo.blob_files().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_resumes_a_partial_file_with_range() {
    let repo = Repo::start();
    let client = repo.client();
    let data = content(12, 1 << 20);
    let id = client.push_file(&write_file(repo.scratch(), "f", &data), &meta("f")).await.unwrap();

    let dest = repo.scratch().join("resumed");
    let prefix = 300_000;
    std::fs::write(repo.scratch().join("resumed.partial"), &data[..prefix]).unwrap();
    let calls = Calls::default();
    client.pull(&id, &dest, Some(&calls.callback())).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    // The first report is the resumed length, not 0: only the rest was fetched.
    assert_eq!(calls.get().first(), Some(&(prefix as u64, data.len() as u64)));
    assert!(!repo.scratch().join("resumed.partial").exists());

    // A complete partial file needs no more bytes (the server answers 416).
    std::fs::remove_file(&dest).unwrap();
    std::fs::write(repo.scratch().join("resumed.partial"), &data).unwrap();
    assert_eq!(client.pull(&id, &dest, None).await.unwrap(), data.len() as u64);
    assert_eq!(std::fs::read(&dest).unwrap(), data);
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_starts_over_when_the_partial_file_is_foreign() {
    let repo = Repo::start();
    let client = repo.client();
    let data = content(13, 200_000);
    let id = client.push_file(&write_file(repo.scratch(), "f", &data), &meta("f")).await.unwrap();
    let dest = repo.scratch().join("d");
    let partial = repo.scratch().join("d.partial");

    // Wrong bytes in the prefix: detected by the digest, then downloaded afresh.
    std::fs::write(&partial, content(99, 50_000)).unwrap();
    client.pull(&id, &dest, None).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), data);

    // Longer than the blob: the 416 says so, and the pull starts over.
    std::fs::write(&partial, content(98, 300_000)).unwrap();
    client.pull(&id, &dest, None).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    assert!(!partial.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn corrupted_content_is_refused_and_nothing_is_left() {
    let repo = Repo::start();
    let client = repo.client();
    let data = content(14, 100_000);
    let id = client.push_file(&write_file(repo.scratch(), "f", &data), &meta("f")).await.unwrap();
    // Flip the server's copy (same length), as a bad disk would.
    std::fs::write(repo.data.join("blobs").join(id.hex()), content(15, 100_000)).unwrap();
    let dest = repo.scratch().join("d");
    let err = client.pull(&id, &dest, None).await.unwrap_err();
    match &err {
        Error::DigestMismatch { id: i, actual } => {
            assert_eq!(*i, id.to_string());
            assert_eq!(*actual, BlobId::of(&content(15, 100_000)).to_string());
        }
        other => panic!("expected a digest mismatch, got {other}"),
    }
    assert!(!dest.exists() && !repo.scratch().join("d.partial").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_metadata_is_refused_before_upload() {
    let repo = Repo::start();
    let client = repo.client();
    let file = write_file(repo.scratch(), "f", b"data");
    for (m, field) in [
        (PushMeta::new("a/b", BlobKind::Disk), "name"),
        (PushMeta::new("..", BlobKind::Disk), "name"),
        (
            PushMeta {
                format: Some("vmdk".into()),
                ..PushMeta::new("ok", BlobKind::Disk)
            },
            "format",
        ),
    ] {
        let err = client.push_file(&file, &m).await.unwrap_err().to_string();
        assert!(err.contains(&format!("field `{field}`")), "{err}");
    }
    assert!(client.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_pushes_of_the_same_content_both_succeed_once_stored() {
    let repo = Repo::start();
    let data = content(16, 4 << 20);
    let file = write_file(repo.scratch(), "f", &data);
    let (a, b) = (repo.client(), repo.client());
    let (ma, mb) = (meta("a"), meta("b"));
    let (ra, rb) = tokio::join!(a.push_file(&file, &ma), b.push_file(&file, &mb));
    assert_eq!(ra.unwrap(), BlobId::of(&data));
    assert_eq!(rb.unwrap(), BlobId::of(&data));
    let list = a.list().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(repo.blob_files(), [BlobId::of(&data).hex()]);
    assert!(repo.wait_tmp_empty().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn retries_until_the_repository_comes_up() {
    let mut repo = Repo::start();
    let id = repo
        .client()
        .push_file(&write_file(repo.scratch(), "f", b"hello"), &meta("f"))
        .await
        .unwrap();
    repo.kill();

    // Without retries: an immediate error naming what failed.
    let once = repo.client().with_retry(RetryPolicy::none());
    let err = once.list().await.unwrap_err();
    assert!(matches!(&err, Error::Repository { what, .. } if what == "list of blobs"), "{err}");

    let patient = repo.client().with_retry(RetryPolicy {
        attempts: 30,
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
    });
    let dest = repo.scratch().join("d");
    let (tx, rx) = mpsc::channel();
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        repo.restart();
        tx.send(()).unwrap();
        repo
    });
    let n = patient.pull(&id, &dest, None).await.unwrap();
    rx.recv().unwrap();
    let _repo = restarter.join().unwrap();
    assert_eq!(n, 5);
    assert_eq!(std::fs::read(&dest).unwrap(), b"hello");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_download_cut_by_a_server_crash_resumes_after_restart() {
    let repo = Repo::start();
    let data = content(17, 24 << 20);
    let id = repo
        .client()
        .push_file(&write_file(repo.scratch(), "big", &data), &meta("big"))
        .await
        .unwrap();
    let client: RepoClient = repo.client().with_retry(RetryPolicy {
        attempts: 30,
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(300),
    });

    // At a quarter of the download the callback stops the client until the
    // server has been killed and started again.
    let (crash_tx, crash_rx) = mpsc::channel::<()>();
    let (back_tx, back_rx) = mpsc::channel::<()>();
    let back_rx = Mutex::new(back_rx);
    let crash_tx = Mutex::new(Some(crash_tx));
    let seen = Calls::default();
    let progress = |done: u64, total: u64| {
        seen.0.lock().unwrap().push((done, total));
        if done > total / 4 {
            if let Some(tx) = crash_tx.lock().unwrap().take() {
                tx.send(()).unwrap();
                back_rx.lock().unwrap().recv().unwrap();
            }
        }
    };
    let mut repo = repo;
    let crasher = std::thread::spawn(move || {
        crash_rx.recv().unwrap();
        repo.kill();
        repo.restart();
        back_tx.send(()).unwrap();
        repo
    });
    let out_dir = tempfile::tempdir().unwrap();
    let dest = out_dir.path().join("big.out");
    let n = client.pull(&id, &dest, Some(&progress)).await.unwrap();
    let repo = crasher.join().unwrap();
    assert_eq!(n, data.len() as u64);
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    let calls = seen.get();
    let cut = calls.iter().position(|(d, t)| *d > t / 4).unwrap();
    // After the crash the download went on from where it was, never from 0.
    assert!(
        calls[cut..].iter().all(|(d, _)| *d >= calls[cut].0),
        "restarted from scratch: {calls:?}"
    );
    let log = repo.log();
    assert!(log.matches("image repository serving").count() >= 2, "{log}");
    let resumed = log.lines().filter(|l| l.contains("sending blob")).any(|l| {
        let start = l.split("start=").nth(1).and_then(|r| r.split_whitespace().next());
        start.is_some_and(|s| s != "0")
    });
    assert!(resumed, "no ranged request after the restart:\n{log}");
}
