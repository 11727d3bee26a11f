//! Garbage collection (issue 39) against a real server: it removes the
//! checkpoint blobs and OCI content nothing needs, and never a blob a
//! retained (pinned) checkpoint, a provider's image, an OCI repository or
//! a young upload still needs.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{content, write_file, Repo, ACME_TOKEN, SITE_TOKEN};
use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::BlobId;

async fn push(client: &RepoClient, repo: &Repo, name: &str, kind: BlobKind, data: &[u8]) -> BlobId {
    let file = write_file(repo.scratch(), name, data);
    client.push_file(&file, &PushMeta::new(name, kind)).await.unwrap()
}

/// Pushes `data` through the OCI API into `name` as acme; its digest.
async fn push_oci(repo: &Repo, name: &str, data: &[u8]) -> BlobId {
    let id = BlobId::of(data);
    let r = interfaces::tls::http_client().build().unwrap()
        .post(format!("{}/v2/{name}/blobs/uploads/?digest={id}", repo.url))
        .basic_auth("acme", Some(ACME_TOKEN))
        .body(data.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    id
}

#[tokio::test(flavor = "multi_thread")]
async fn gc_removes_only_what_nothing_needs() {
    let repo = Repo::start();
    let site = repo.client_with(Some(SITE_TOKEN));
    let acme = repo.client_with(Some(ACME_TOKEN));
    let kept_checkpoint = push(&site, &repo, "vee-1-cp-1-memory", BlobKind::CheckpointMemory, &content(1, 1000)).await;
    site.pin(&kept_checkpoint, "site-a-checkpoint-1").await.unwrap();
    let dropped_checkpoint = push(&site, &repo, "vee-1-cp-0-memory", BlobKind::CheckpointDisk, &content(2, 1000)).await;
    let image = push(&acme, &repo, "acme.qcow2", BlobKind::Disk, &content(3, 1000)).await;
    let in_repository = push_oci(&repo, "acme/os", &content(4, 1000)).await;
    let unlinked = push_oci(&repo, "acme/os", &content(5, 1000)).await;
    let r = interfaces::tls::http_client().build().unwrap()
        .delete(format!("{}/v2/acme/os/blobs/{unlinked}", repo.url))
        .basic_auth("acme", Some(ACME_TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);

    let operator = repo.client();
    // Everything is younger than the default grace: nothing goes.
    assert!(operator.gc(Duration::from_secs(3600), false).await.unwrap().removed.is_empty());
    // A dry run lists, removes nothing.
    let dry = operator.gc(Duration::ZERO, true).await.unwrap();
    let expected = BTreeSet::from([dropped_checkpoint.clone(), unlinked.clone()]);
    assert_eq!(dry.removed.iter().cloned().collect::<BTreeSet<_>>(), expected);
    assert_eq!(dry.bytes, 2000);
    assert_eq!(repo.blob_files().len(), 5);
    // Collected: the unpinned checkpoint and the unlinked OCI blob.
    let done = operator.gc(Duration::ZERO, false).await.unwrap();
    assert_eq!(done.removed.iter().cloned().collect::<BTreeSet<_>>(), expected);
    let left: BTreeSet<_> = repo.blob_files().into_iter().collect();
    let kept: BTreeSet<_> = [&kept_checkpoint, &image, &in_repository]
        .iter()
        .map(|id| id.hex().to_string())
        .collect();
    assert_eq!(left, kept);
    assert!(operator.head(&dropped_checkpoint).await.unwrap().is_none());
    // Unpinned, the retained checkpoint goes at the next collection.
    site.unpin(&kept_checkpoint, "site-a-checkpoint-1").await.unwrap();
    let next = operator.gc(Duration::ZERO, false).await.unwrap();
    assert_eq!(next.removed, [kept_checkpoint]);
    // Only the operator collects.
    let err = site.gc(Duration::ZERO, false).await.unwrap_err().to_string();
    assert!(err.contains("403") || err.contains("may not collect garbage"), "{err}");
}

/// A checkpoint as the VEEH records it at an image-repo site (issue 39,
/// item 2): blobs through `/v1`, then its OCI artifact in `SITE/checkpoints`
/// (`RepoClient::put_checkpoint_artifact`). Its blobs stay while the
/// artifact links them, even unpinned; once the VEEM forgets it
/// (`drop_checkpoint_artifact`) and unpins them, gc takes them.
#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_artifact_keeps_its_blobs_until_it_is_dropped() {
    use interfaces::artifact::{self, Layer};
    let repo = Repo::start();
    let site = repo.client_with(Some(SITE_TOKEN));
    let memory = push(&site, &repo, "vee-1-cp-2-memory", BlobKind::CheckpointMemory, &content(6, 1000)).await;
    let disk = push(&site, &repo, "vee-1-cp-2-disk", BlobKind::CheckpointDisk, &content(7, 500)).await;
    let layer = |digest: &BlobId, size, media_type: &str| Layer {
        digest: digest.clone(),
        size,
        media_type: media_type.into(),
    };
    let layers = [
        layer(&memory, 1000, artifact::MEMORY_STATE),
        layer(&disk, 500, artifact::DISK_OVERLAY),
    ];
    let config = br#"{"checkpoint_id":"cp-2"}"#.to_vec();
    let digest = site
        .put_checkpoint_artifact("site-a/checkpoints", "cp-2", config.clone(), &layers, None)
        .await
        .unwrap();
    // The manifest is there under its tag, as the artifact the VEEH built.
    let got = interfaces::tls::http_client().build().unwrap()
        .get(format!("{}/v2/site-a/checkpoints/manifests/cp-2", repo.url))
        .bearer_auth(SITE_TOKEN)
        .header("Accept", artifact::OCI_MANIFEST)
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    let raw = got.bytes().await.unwrap();
    assert_eq!(BlobId::of(&raw), digest);
    let m: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(m["artifactType"], artifact::CHECKPOINT_ARTIFACT_TYPE);
    // A provider may not record one in the site's namespace.
    let acme = repo.client_with(Some(ACME_TOKEN));
    assert!(acme
        .put_checkpoint_artifact("site-a/checkpoints", "cp-x", config, &layers, None)
        .await
        .is_err());

    let operator = repo.client();
    assert!(operator.gc(Duration::ZERO, false).await.unwrap().removed.is_empty(), "linked: kept");
    let blobs = [memory.clone(), disk.clone()];
    site.drop_checkpoint_artifact("site-a/checkpoints", "site-a/images", "cp-2", &blobs)
        .await
        .unwrap();
    site.drop_checkpoint_artifact("site-a/checkpoints", "site-a/images", "cp-2", &blobs)
        .await
        .unwrap();
    let removed: BTreeSet<BlobId> = operator.gc(Duration::ZERO, false).await.unwrap().removed.into_iter().collect();
    assert!(removed.contains(&memory) && removed.contains(&disk), "{removed:?}");
}

/// A VEE booted from a provider's content IDs: its checkpoints' subject is
/// the image artifact of its boot files in `SITE/images`, which holds the
/// provider's blobs (their `/v1` delete refused: a restore needs them)
/// until the last checkpoint of it is dropped; a blob another image
/// artifact there names stays linked until that one goes too.
#[tokio::test(flavor = "multi_thread")]
async fn the_image_artifact_of_content_ids_lives_as_long_as_a_checkpoint_of_it() {
    use interfaces::artifact::{self, Layer};
    let repo = Repo::start();
    let (site, acme) = (repo.client_with(Some(SITE_TOKEN)), repo.client_with(Some(ACME_TOKEN)));
    let file = |id: BlobId, size: usize, media_type: &str| Layer {
        digest: id,
        size: size as u64,
        media_type: media_type.into(),
    };
    let disk = file(
        push(&acme, &repo, "disk", BlobKind::Disk, &content(1, 3000)).await,
        3000,
        artifact::DISK_QCOW2,
    );
    let k1 = file(
        push(&acme, &repo, "k1", BlobKind::Kernel, &content(2, 200)).await,
        200,
        artifact::KERNEL,
    );
    let k2 = file(
        push(&acme, &repo, "k2", BlobKind::Kernel, &content(3, 200)).await,
        200,
        artifact::KERNEL,
    );
    for l in [&disk, &k1, &k2] {
        assert!(site.grant_for(&l.digest, "acme").await.unwrap());
    }
    let one = site.put_image_artifact("site-a/images", &[disk.clone(), k1.clone()]).await.unwrap();
    let two = site.put_image_artifact("site-a/images", &[disk.clone(), k2.clone()]).await.unwrap();
    // Put again: the same artifact.
    assert_eq!(
        site.put_image_artifact("site-a/images", &[disk.clone(), k1.clone()]).await.unwrap(),
        one
    );
    let mut n = 0;
    let mut checkpoint = |image: &artifact::ImageArtifact| {
        n += 1;
        let (site, repo, image) = (&site, &repo, image.clone());
        async move {
            let tag = format!("cp-{n}");
            let memory = push(
                site,
                repo,
                &format!("{tag}-memory"),
                BlobKind::CheckpointMemory,
                &content(10 + n, 100),
            )
            .await;
            let layers = [file(memory, 100, artifact::MEMORY_STATE)];
            let config = format!(r#"{{"checkpoint_id":"{tag}"}}"#).into_bytes();
            site.put_checkpoint_artifact("site-a/checkpoints", &tag, config, &layers, Some((&image.digest, image.size)))
                .await
                .unwrap();
            tag
        }
    };
    let (c1, c2, c3) = (checkpoint(&one).await, checkpoint(&one).await, checkpoint(&two).await);
    let refused = |id: BlobId| {
        let acme = &acme;
        async move { acme.delete(&id, false).await.err().map(|e| e.to_string()) }
    };
    let e = refused(k1.digest.clone()).await.expect("held by site-a/images");
    assert!(e.contains("site-a/images"), "{e}");
    let drop = |tag: String| {
        let site = &site;
        async move {
            site.drop_checkpoint_artifact("site-a/checkpoints", "site-a/images", &tag, &[])
                .await
                .unwrap()
        }
    };
    let image_there = |a: &artifact::ImageArtifact| {
        let url = format!("{}/v2/site-a/images/manifests/{}", repo.url, a.digest);
        async move {
            let r = interfaces::tls::http_client().build().unwrap()
                .get(url)
                .basic_auth("site-a", Some(SITE_TOKEN))
                .header("accept", artifact::OCI_MANIFEST)
                .send()
                .await
                .unwrap();
            r.status() == 200
        }
    };
    // One of its two checkpoints dropped: the image artifact stays.
    drop(c1).await;
    assert!(image_there(&one).await);
    assert!(refused(k1.digest.clone()).await.is_some());
    // The last: it goes, and its kernel is the provider's to delete again;
    // the disk stays held while the other image artifact names it.
    drop(c2).await;
    assert!(!image_there(&one).await);
    assert!(image_there(&two).await);
    assert_eq!(refused(k1.digest.clone()).await, None);
    assert!(refused(disk.digest.clone()).await.is_some());
    drop(c3).await;
    assert!(!image_there(&two).await);
    assert_eq!(refused(disk.digest.clone()).await, None);
}
