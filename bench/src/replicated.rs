//! `vee-bench checkpoint-replicated` (cargo feature `sim`): a checkpoint
//! of a VEE that site A runs for site B, through the VEEM's own workflow
//! (`veem::sim`'s fake VEEH answers the Checkpoint with a blob already in
//! A's repository; the VEEM calls A's real `image-repo`), timed from the
//! checkpoint's answer to its record `replicated` (the blob in B's
//! repository: the VEEM's background copy, `POST /v1/blobs/ID/replicate`),
//! next to a plain copy of the same bytes between the two repositories
//! (`curl` out of A piped into `curl -T -` to B, which hashes them again).
//! The blob is removed from B's repository before each. Prints
//! `{"metrics": [checkpoint_replicated_ms_<size>]}`.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use interfaces::repo_client::RepoClient;
use interfaces::BlobId;
use veem::domain::Replication;
use veem::model::CheckpointRec;
use veem::sim::FakeSite;
use veem::store::Tree;

/// The longest a copy may take before the run fails.
const DEADLINE: Duration = Duration::from_secs(600);

/// What to measure: repositories A (with B as its peer `site-b`) and B,
/// the operator's token of both, blob `blob` (in A's repository) of `mib`
/// MiB, `reps` times each.
pub struct Run<'a> {
    pub repo_a: &'a str,
    pub repo_b: &'a str,
    pub token: &'a str,
    pub blob: &'a str,
    pub mib: usize,
    pub reps: usize,
}

/// The metric's rows (see the module doc). Errors: a repository refuses,
/// the copy fails or takes longer than [`DEADLINE`].
pub async fn run(r: Run<'_>) -> Result<Vec<serde_json::Value>> {
    let id: BlobId = r.blob.parse().with_context(|| format!("blob ID {:?}", r.blob))?;
    let a = RepoClient::new(r.repo_a, Some(r.token.into()))?;
    let b = RepoClient::new(r.repo_b, Some(r.token.into()))?;
    ensure!(a.head(&id).await?.is_some(), "{id} is not in site A's repository {}", r.repo_a);
    let site = FakeSite::start_with_repo("site-a", &["h1"], "replicate_checkpoints = true\n", Arc::new(a));
    site.clock.follow_runtime();
    let vee = site.running_service(veem::sim::STANDARD).remove(0);
    let mut v = site.veem.vee(&vee)?;
    v.for_peer = Some("site-b".into());
    site.veem.save_vee(&v)?;
    site.host("h1").script.lock().unwrap().checkpoint_blobs = Some((r.blob.to_string(), String::new()));
    let (mut ours, mut copies) = (Vec::new(), Vec::new());
    for i in 1..=r.reps {
        eprintln!("checkpoint-replicated: {i}/{}", r.reps);
        remove(&b, &id).await?;
        let cp = site.veem.lifecycle.checkpoint_vee(&vee).await?;
        let answered = Instant::now();
        loop {
            let rec: CheckpointRec = site.veem.store().get(Tree::Checkpoints, &cp.id)?.context("the checkpoint's record")?;
            match rec.replication.state {
                Replication::Replicated => break,
                Replication::Failed => bail!("checkpoint {} not replicated: {}", cp.id, rec.replication.error),
                _ if answered.elapsed() > DEADLINE => bail!("checkpoint {} not replicated in {DEADLINE:?}", cp.id),
                _ => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
        ours.push(answered.elapsed().as_secs_f64() * 1000.0);
        ensure!(b.head(&id).await?.is_some(), "replicated, yet {id} is not in site B's repository");
        remove(&b, &id).await?;
        copies.push(plain_copy(&r, &id)?);
    }
    let size = if r.mib.is_multiple_of(1024) { format!("{}gib", r.mib / 1024) } else { format!("{}mib", r.mib) };
    Ok(vec![crate::metric::metric(
        &format!("checkpoint_replicated_ms_{size}"),
        "ms",
        &format!(
            "a {} MiB checkpoint of a VEE run for a peer site, from the checkpoint's answer (recorded local-only) to its record replicated, the blob in the peer's repository (the VEEM's background copy)",
            r.mib
        ),
        &ours,
        Some(("curl -o - from A | curl -T - to B (a plain copy of the same bytes)", &copies)),
    )])
}

/// Removes blob `id` from repository `b` (forced: pins and links go too);
/// one it does not hold is fine.
async fn remove(b: &RepoClient, id: &BlobId) -> Result<()> {
    if b.head(id).await?.is_some() {
        b.delete(id, true).await?;
    }
    Ok(())
}

/// One plain copy of blob `id` from A to B, in ms.
fn plain_copy(r: &Run<'_>, id: &BlobId) -> Result<f64> {
    let started = Instant::now();
    let ok = Command::new("bash")
        .arg("-c")
        .arg(
            r#"set -o pipefail; curl -sf -H "Authorization: Bearer $1" "$2/v1/blobs/$4" |
            curl -sf -T - -H "Authorization: Bearer $1" "$3/v1/blobs/$4?name=cp&kind=checkpoint-memory" >/dev/null"#,
        )
        .args(["_", r.token, r.repo_a, r.repo_b, &id.to_string()])
        .status()?
        .success();
    ensure!(ok, "the plain copy of {id} from A to B failed");
    Ok(started.elapsed().as_secs_f64() * 1000.0)
}
