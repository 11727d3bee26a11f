//! One repository per site (issue 39, item 4), with two real servers:
//! site A's, configured with site B's as a peer (`[[peers]]`, with
//! site A's token at B). A blob A lacks is pulled through from B by digest
//! for site A's callers, verified; a blob B holds with the wrong bytes is
//! refused and leaves nothing at A; a grant for a provider goes on to B;
//! a replicated checkpoint is at B, readable by site B.

mod common;

use common::{content, write_file, Options, Repo, ACME_TOKEN, SITE_TOKEN};
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::BlobId;

/// Site A's repository with `b` as its peer `site-b`.
fn site_a(b: &Repo) -> Repo {
    Repo::start_with(Options {
        extra_config: format!("[[peers]]\nname = \"site-b\"\nurl = {:?}\ntoken = {SITE_TOKEN:?}\n", b.url),
        ..Default::default()
    })
}

async fn push(client: &RepoClient, repo: &Repo, name: &str, kind: BlobKind, data: &[u8]) -> BlobId {
    let file = write_file(repo.scratch(), name, data);
    client.push_file(&file, &PushMeta::new(name, kind)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blob_only_at_a_peer_is_pulled_through_by_digest_for_the_site() {
    let mut b = Repo::start();
    let a = site_a(&b);
    let data = content(1, 300_000);
    let id = push(
        &b.client_with(Some(SITE_TOKEN)),
        &b,
        "vee-1-cp-memory",
        BlobKind::CheckpointMemory,
        &data,
    )
    .await;
    assert!(a.blob_files().is_empty());

    // Site A's VEEH asks its own repository: A fetches it from B, verified.
    let site = a.client_with(Some(SITE_TOKEN));
    let dest = a.scratch().join("pulled");
    site.pull(&id, &dest, None).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    assert_eq!(a.blob_files(), [id.hex()]);
    let meta = site.head(&id).await.unwrap().unwrap();
    assert_eq!((meta.kind, meta.owner.as_str()), (BlobKind::CheckpointMemory, "site-a"));
    // From then on A serves it with B gone.
    b.kill();
    let again = a.scratch().join("again");
    site.pull(&id, &again, None).await.unwrap();
    assert_eq!(std::fs::read(&again).unwrap(), data);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_does_not_reach_the_peers_with_the_sites_credential() {
    let b = Repo::start();
    let a = site_a(&b);
    let id = push(
        &b.client_with(Some(SITE_TOKEN)),
        &b,
        "site-only",
        BlobKind::CheckpointMemory,
        b"site a's at b",
    )
    .await;
    // The provider asks site A's repository for a blob site A may read at
    // B: no pull-through on its behalf, as if it did not exist.
    let acme = a.client_with(Some(ACME_TOKEN));
    assert!(acme.head(&id).await.unwrap().is_none());
    assert!(a.blob_files().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peer_blob_whose_bytes_do_not_match_its_digest_is_refused_and_not_cached() {
    let b = Repo::start();
    let a = site_a(&b);
    let data = content(2, 200_000);
    let id = push(&b.client_with(Some(SITE_TOKEN)), &b, "disk", BlobKind::Disk, &data).await;
    // B's copy is corrupted on its disk: same length, other bytes.
    let mut bad = data.clone();
    bad[1000] ^= 0xff;
    let file = b.data.join("blobs").join(id.hex());
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::write(&file, &bad).unwrap();

    let site = a.client_with(Some(SITE_TOKEN));
    let err = site.pull(&id, &a.scratch().join("x"), None).await.unwrap_err();
    assert!(matches!(err, interfaces::Error::BlobNotFound { .. }), "{err}");
    assert!(a.blob_files().is_empty(), "a blob that fails its digest was stored");
    assert!(a.wait_tmp_empty().is_empty(), "a partial file was left");
    assert!(a.log().contains("pull-through failed"), "{}", a.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_for_a_provider_goes_on_to_the_peers_and_pulls_the_image_through() {
    let b = Repo::start();
    let a = site_a(&b);
    let image = content(3, 100_000);
    let id = push(&b.client_with(Some(ACME_TOKEN)), &b, "acme.qcow2", BlobKind::Disk, &image).await;
    // Site A's VEEM asks before a deploy whether acme may use the image.
    let site = a.client_with(Some(SITE_TOKEN));
    assert!(site.grant_for(&id, "acme").await.unwrap());
    // It is acme's at A as at B, and site A may pull it for its hosts.
    let meta = a.client().head(&id).await.unwrap().unwrap();
    assert_eq!((meta.owner.as_str(), meta.readers.clone()), ("acme", vec!["site-a".to_string()]));
    let dest = a.scratch().join("image");
    site.pull(&id, &dest, None).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), image);
    // Another provider's grant is refused at B too: nothing pulled.
    let other = push(
        &b.client_with(Some(ACME_TOKEN)),
        &b,
        "acme2.qcow2",
        BlobKind::Disk,
        b"acme's other image",
    )
    .await;
    assert!(!site.grant_for(&other, "globex").await.unwrap());
    assert!(a.client().head(&other).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replicated_checkpoint_is_at_the_peer_readable_by_that_site() {
    let b = Repo::start();
    let a = site_a(&b);
    let site = a.client_with(Some(SITE_TOKEN));
    let memory = content(4, 250_000);
    let id = push(&site, &a, "vee-7-cp-memory", BlobKind::CheckpointMemory, &memory).await;
    site.replicate(&id, "site-b").await.unwrap();
    let at_b = b.client().head(&id).await.unwrap().unwrap();
    assert_eq!(at_b.owner, "site-a");
    assert_eq!(at_b.readers, ["site-b"]);
    let dest = b.scratch().join("cp");
    b.client().pull(&id, &dest, None).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), memory);
    // A peer that is not configured, a provider asking: refused.
    let err = site.replicate(&id, "site-z").await.unwrap_err().to_string();
    assert!(err.contains("no peer repository named"), "{err}");
    assert!(a.client_with(Some(ACME_TOKEN)).replicate(&id, "site-b").await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_oci_api_pulls_a_blob_through_into_the_sites_repository() {
    let b = Repo::start();
    let a = site_a(&b);
    let data = content(6, 50_000);
    let id = push(&b.client_with(Some(SITE_TOKEN)), &b, "cp-memory", BlobKind::CheckpointMemory, &data).await;
    let get = |who: &str, token: &str, repo: &str| {
        interfaces::tls::http_client().build().unwrap()
            .get(format!("{}/v2/{repo}/blobs/{id}", a.url))
            .basic_auth(who, Some(token.to_string()))
            .send()
    };
    // A provider's request reaches no peer.
    assert_eq!(get("acme", ACME_TOKEN, "acme/x").await.unwrap().status(), 404);
    assert!(a.blob_files().is_empty());
    // Site A's, in its own namespace: pulled through, linked, served.
    let r = get("site-a", SITE_TOKEN, "site-a/checkpoints").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().to_vec(), data);
    assert_eq!(a.blob_files(), [id.hex()]);
}
