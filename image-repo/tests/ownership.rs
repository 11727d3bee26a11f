//! Who may read, share and delete which blob (issue 13 S3), against the
//! real server: providers see only their own blobs and public ones, a
//! site's checkpoints are its own until it shares them, the operator sees
//! everything, and nobody reads anonymously.

mod common;

use common::{content, write_file, Repo, ACME_TOKEN, GLOBEX_TOKEN, SITE_TOKEN};
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::{BlobId, Error};
use reqwest::StatusCode;

async fn push(client: &RepoClient, repo: &Repo, name: &str, kind: BlobKind, data: &[u8]) -> BlobId {
    let file = write_file(repo.scratch(), name, data);
    client.push_file(&file, &PushMeta::new(name, kind)).await.unwrap()
}

fn ids(list: Vec<interfaces::repo_client::BlobMeta>) -> Vec<BlobId> {
    list.into_iter().map(|m| m.id).collect()
}

/// The HTTP status of a refused call.
fn status(e: Error) -> String {
    match e {
        Error::BlobNotFound { .. } => "404".into(),
        Error::Repository { reason, .. } => reason.split(' ').next().unwrap_or("").to_string(),
        other => panic!("unexpected error {other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn providers_read_only_their_own_and_public_blobs() {
    let repo = Repo::start();
    let (acme, globex, operator) = (
        repo.client_with(Some(ACME_TOKEN)),
        repo.client_with(Some(GLOBEX_TOKEN)),
        repo.client(),
    );
    let private = push(&acme, &repo, "acme.qcow2", BlobKind::Disk, &content(1, 5000)).await;
    let meta = acme.head(&private).await.unwrap().unwrap();
    assert_eq!((meta.owner.as_str(), meta.public), ("acme", false));

    // Another provider: not listed, not readable, as if it did not exist.
    assert!(!ids(globex.list().await.unwrap()).contains(&private));
    assert!(globex.head(&private).await.unwrap().is_none());
    let dest = repo.scratch().join("stolen");
    assert_eq!(status(globex.pull(&private, &dest, None).await.unwrap_err()), "404");
    assert!(!dest.exists());
    assert!(!globex
        .check_push(&private, 5000, &PushMeta::new("x", BlobKind::Disk))
        .await
        .unwrap());
    assert_eq!(status(globex.delete(&private, true).await.unwrap_err()), "404");
    assert_eq!(status(globex.pin(&private, "mine").await.unwrap_err()), "404");
    assert_eq!(status(globex.share(&private, "globex").await.unwrap_err()), "404");
    // Nobody reads anonymously.
    let anonymous = repo.client_with(None);
    assert!(anonymous.list().await.is_err());
    assert!(anonymous.head(&private).await.is_err());

    // The operator sees everything; only it marks a blob public.
    assert!(ids(operator.list().await.unwrap()).contains(&private));
    assert_eq!(status(acme.set_public(&private, true).await.unwrap_err()), "403");
    operator.set_public(&private, true).await.unwrap();
    globex.pull(&private, &dest, None).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), content(1, 5000));
    assert_eq!(status(globex.delete(&private, true).await.unwrap_err()), "403");
    operator.set_public(&private, false).await.unwrap();
    assert!(globex.head(&private).await.unwrap().is_none());

    // The owner shares; the reader does not see who else reads.
    acme.share(&private, "globex").await.unwrap();
    assert!(globex.head(&private).await.unwrap().unwrap().readers.is_empty());
    assert_eq!(acme.head(&private).await.unwrap().unwrap().readers, ["globex"]);
    assert_eq!(status(globex.delete(&private, false).await.unwrap_err()), "403");
    acme.delete(&private, false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn pushing_content_someone_else_stored_makes_the_pusher_a_reader() {
    let repo = Repo::start();
    let (acme, globex) = (repo.client_with(Some(ACME_TOKEN)), repo.client_with(Some(GLOBEX_TOKEN)));
    let id = push(&acme, &repo, "base.qcow2", BlobKind::Disk, &content(2, 3000)).await;
    // Globex holds the same bytes: it proves so by sending them, and may read them.
    assert_eq!(push(&globex, &repo, "mine.qcow2", BlobKind::Disk, &content(2, 3000)).await, id);
    let seen = globex.head(&id).await.unwrap().unwrap();
    assert_eq!((seen.owner.as_str(), seen.name.as_str()), ("acme", "base.qcow2"));
    assert_eq!(repo.blob_files().len(), 1, "one copy kept");
    // An ID alone is not enough: a check by a stranger says "not stored".
    let other = repo.client_with(Some(SITE_TOKEN));
    assert!(!other.check_push(&id, 3000, &PushMeta::new("x", BlobKind::Disk)).await.unwrap());
    assert!(acme.check_push(&id, 3000, &PushMeta::new("x", BlobKind::Disk)).await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoints_stay_with_their_site_until_shared_and_grants_follow_providers() {
    let repo = Repo::start();
    let (site, acme, globex, operator) = (
        repo.client_with(Some(SITE_TOKEN)),
        repo.client_with(Some(ACME_TOKEN)),
        repo.client_with(Some(GLOBEX_TOKEN)),
        repo.client(),
    );
    let memory = push(&site, &repo, "vee-1.mem", BlobKind::CheckpointMemory, &content(3, 8000)).await;
    assert!(acme.head(&memory).await.unwrap().is_none(), "a provider reads no checkpoint");
    assert!(
        !acme.grant_for(&memory, "acme").await.is_ok_and(|x| x),
        "a provider may not ask grants"
    );
    assert!(
        !site.grant_for(&memory, "acme").await.unwrap(),
        "a checkpoint is no provider's image"
    );
    site.share(&memory, "site-b").await.unwrap();
    assert_eq!(site.head(&memory).await.unwrap().unwrap().readers, ["site-b"]);

    // A site asks whether a provider may use an image, and may then pull it.
    let image = push(&acme, &repo, "web.qcow2", BlobKind::Disk, &content(4, 2000)).await;
    assert!(site.head(&image).await.unwrap().is_none());
    assert!(!site.grant_for(&image, "globex").await.unwrap());
    assert!(!site.grant_for(&image, "site-a").await.unwrap(), "only providers' names");
    assert!(site.head(&image).await.unwrap().is_none(), "a refused grant gives nothing");
    assert!(site.grant_for(&image, "acme").await.unwrap());
    site.pull(&image, &repo.scratch().join("pulled"), None).await.unwrap();
    // and share it with the peer site that will run the VEE.
    site.share(&image, "site-b").await.unwrap();
    assert_eq!(status(globex.share(&image, "globex").await.unwrap_err()), "404");
    let refused = status(acme.grant_for(&image, "acme").await.unwrap_err());
    assert_eq!(refused, StatusCode::FORBIDDEN.as_u16().to_string());
    assert!(operator.grant_for(&image, "acme").await.unwrap());
    // A public image is every provider's, even one without a token here.
    assert!(!operator.grant_for(&image, "initech").await.unwrap());
    operator.set_public(&image, true).await.unwrap();
    assert!(site.grant_for(&image, "initech").await.unwrap());
    assert_eq!(operator.head(&image).await.unwrap().unwrap().readers, ["site-a", "site-b"]);
}

#[test]
fn the_cli_shares_publishes_and_hashes_tokens() {
    let repo = Repo::start();
    let file = write_file(repo.scratch(), "k", &content(5, 1000));
    let out = common::run_ok(repo.cli().env("IMAGE_REPO_TOKEN", ACME_TOKEN).arg("push").arg(&file));
    let id = out.trim().to_string();
    let as_globex = || {
        let mut c = repo.cli();
        c.env("IMAGE_REPO_TOKEN", GLOBEX_TOKEN);
        c
    };
    assert!(!common::run_ok(as_globex().arg("ls")).contains(&id));
    let listed = common::run_ok(repo.cli().arg("ls"));
    assert!(listed.contains("OWNER") && listed.contains("acme"), "{listed}");
    common::run_ok(repo.cli().args(["public", &id]));
    assert!(common::run_ok(as_globex().args(["show", &id])).contains("public:  yes"));
    common::run_ok(repo.cli().args(["private", &id]));
    let (out, _, _) = common::run(as_globex().args(["show", &id]));
    assert!(!out.status.success());
    common::run_ok(repo.cli().env("IMAGE_REPO_TOKEN", ACME_TOKEN).args(["share", &id, "globex"]));
    assert!(common::run_ok(as_globex().args(["show", &id])).contains("owner:   acme"));

    let mut hash = std::process::Command::new(common::bin());
    hash.arg("hash-token")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = hash.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{GLOBEX_TOKEN}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        interfaces::tokens::digest_hex(GLOBEX_TOKEN)
    );
}
