//! Which VEEM of a site leads (issue 38; DESIGN.md §11): two or more VEEMs
//! over the site's etcd cluster campaign in etcd's own election (the v3
//! election API, in Debian's etcd 3.4), each with a lease of `[store]
//! lease_ttl` it renews every third of it. The one elected holds the
//! election key `<prefix>/leader/<lease>`; its create revision is the
//! leader's epoch, the fencing token (Kleppmann's) that its store commits
//! compare ([`crate::store::EtcdEngine::fence_with`]) and that its calls to
//! hosts carry. A leader that cannot renew its lease within the TTL (it
//! crashed, stalled, or lost the cluster) has lost the site: [`Leader::lost`]
//! fires, and the daemon steps down. The standbys wait in the campaign and
//! tell clients where the leader is ([`Leadership::leader_endpoint`]).

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use etcd_client::Client;
use tokio_util::sync::CancellationToken;

/// One VEEM's part in its site's election.
pub struct Leadership {
    client: Client,
    /// The election's name: `<prefix>/leader`.
    name: String,
    /// What this VEEM campaigns with: the VMI URL clients reach it at.
    endpoint: String,
    ttl: Duration,
}

/// This VEEM leads its site.
pub struct Leader {
    /// The election key it holds.
    pub key: Vec<u8>,
    /// The key's create revision: the leader's epoch (fencing token).
    pub epoch: i64,
    /// Cancelled when the lease is lost (not renewed within its TTL, or
    /// gone): from then on this VEEM must not act as the leader.
    pub lost: CancellationToken,
    lease: i64,
    client: Client,
}

/// A leader dropped without [`Leader::resign`] stops renewing its lease,
/// which lapses within its TTL.
impl Drop for Leader {
    fn drop(&mut self) {
        self.lost.cancel();
    }
}

impl Leader {
    /// Gives the leadership up at a clean stop: the lease is revoked, so
    /// the election key goes at once and a standby takes over without
    /// waiting for the TTL (best effort: a lease not revoked lapses).
    pub async fn resign(mut self) {
        self.lost.cancel();
        let revoked = tokio::time::timeout(Duration::from_secs(2), self.client.lease_revoke(self.lease)).await;
        if !matches!(revoked, Ok(Ok(_))) {
            tracing::warn!(lease = self.lease, "the leader's lease was not revoked: it lapses within its TTL");
        }
    }
}

impl Leadership {
    /// The site's election `name` (`EtcdEngine::election`), for a VEEM
    /// reached at `endpoint`, with leases of `ttl` (whole seconds, at
    /// least 2 s: etcd's least). `client` has no per-call timeout: a
    /// campaign waits as long as another VEEM leads.
    pub fn new(client: Client, name: String, endpoint: &str, ttl: Duration) -> Self {
        Self {
            client,
            name,
            endpoint: endpoint.into(),
            ttl: ttl.max(Duration::from_secs(2)),
        }
    }

    /// Campaigns until this VEEM leads: a lease of the TTL (renewed in the
    /// background from now on), then etcd's campaign, which returns once
    /// every earlier candidate's key is gone. Errors: the cluster does not
    /// answer (the caller campaigns again).
    pub async fn campaign(&self) -> Result<Leader> {
        let mut c = self.client.clone();
        let lease = c
            .lease_grant(self.ttl.as_secs() as i64, None)
            .await
            .context("grant the leader's lease")?
            .id();
        let lost = CancellationToken::new();
        tokio::spawn(renew(c.clone(), lease, self.ttl, lost.clone()));
        let elected = tokio::select! {
            r = c.campaign(self.name.clone(), self.endpoint.clone(), lease) => r.context("campaign"),
            () = lost.cancelled() => Err(anyhow!("the lease lapsed while campaigning")),
        };
        let key = elected.and_then(|e| e.leader().cloned().ok_or_else(|| anyhow!("campaign answered no leader key")));
        match key {
            Ok(key) => Ok(Leader {
                key: key.key().to_vec(),
                epoch: key.rev(),
                lost,
                lease,
                client: c,
            }),
            Err(e) => {
                // No lease left behind to renew.
                lost.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(2), c.lease_revoke(lease)).await;
                Err(e)
            }
        }
    }

    /// The VMI URL of the site's leader now (what it campaigned with),
    /// `None` when none leads; errors (saying why) when the cluster does
    /// not answer within 2 s (no quorum, no member reachable).
    pub async fn leader_endpoint(&self) -> Result<Option<String>, String> {
        let mut c = self.client.clone();
        match tokio::time::timeout(Duration::from_secs(2), c.leader(self.name.clone())).await {
            Err(_) => Err("no answer within 2 s".into()),
            Ok(Ok(r)) => Ok(r.kv().and_then(|kv| kv.value_str().ok()).map(str::to_string)),
            // etcd's "election: no leader": nobody campaigns.
            Ok(Err(e)) if e.to_string().contains("no leader") && !e.to_string().contains("raft") => Ok(None),
            Ok(Err(e)) => Err(e.to_string()),
        }
    }
}

/// Renews `lease` every third of `ttl` until it is gone or was not renewed
/// for a whole `ttl` (then `lost` is cancelled). The keep-alive stream is
/// made again when the member serving it goes (the lease lives on in the
/// cluster until its TTL).
async fn renew(mut c: Client, lease: i64, ttl: Duration, lost: CancellationToken) {
    let mut renewed = tokio::time::Instant::now();
    let mut stream = None;
    loop {
        if lost.is_cancelled() {
            return;
        }
        // Every attempt ends by the lease's end as this VEEM counts it:
        // a member that hangs does not keep it believing it leads.
        let end = renewed + ttl;
        if tokio::time::Instant::now() >= end {
            tracing::error!(lease, ?ttl, "the leader's lease was not renewed within its TTL");
            lost.cancel();
            return;
        }
        // Counted from the request: the cluster's TTL runs from when it
        // was served, no earlier.
        let asked = tokio::time::Instant::now();
        let ask = async {
            if stream.is_none() {
                stream = Some(c.lease_keep_alive(lease).await?);
            }
            let (keeper, answers) = stream.as_mut().expect("made above");
            keeper.keep_alive().await?;
            answers.message().await
        };
        match tokio::time::timeout_at(end.min(asked + ttl / 3), ask).await {
            Ok(Ok(Some(a))) if a.ttl() > 0 => {
                renewed = asked;
                tokio::time::sleep(ttl / 3).await;
            }
            Ok(Ok(Some(_))) => {
                tracing::error!(lease, "the leader's lease is gone");
                lost.cancel();
                return;
            }
            // The stream broke or hung (its member went, an election is
            // under way): made again at once, on a member that answers.
            _ => {
                stream = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
