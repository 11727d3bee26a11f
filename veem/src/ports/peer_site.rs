//! A peer site as the workflows call it (`Core::peer`): the calls of a
//! [`Peer`], whatever carries them, each timed
//! (`veem_peer_call_duration_seconds`, by peer and call, failed ones
//! included) and its failure a [`CallError`] by kind: the one conversion
//! from the peer's gRPC status, so that no workflow reads a status code.

use std::sync::Arc;

use interfaces::vhi;
use tonic::Status;

use super::call::CallError;
use super::{Clock, ConsoleInput, ConsoleStream, Peer};
use crate::domain::peer::{IncomingVee, MigrationOutcome, RemoteVee, SpareRequest, UsageReceipt};
use crate::domain::Action;
use crate::metrics::VeemMetrics;
use crate::model::UsageRec;

/// [`Peer`] `inner` (site `site`), each call timed on `clock` into
/// `metrics`.
pub struct PeerSite {
    inner: Arc<dyn Peer>,
    site: String,
    metrics: Arc<VeemMetrics>,
    clock: Arc<dyn Clock>,
}

impl PeerSite {
    /// Peer `inner` of site `site`, its calls timed on `clock` into
    /// `metrics`.
    pub fn new(inner: Arc<dyn Peer>, site: &str, metrics: Arc<VeemMetrics>, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner,
            site: site.to_string(),
            metrics,
            clock,
        }
    }

    async fn timed<T>(&self, call: &'static str, work: impl std::future::Future<Output = Result<T, Status>>) -> Result<T, CallError> {
        let started = self.clock.now_ms();
        let out = work.await;
        self.metrics
            .peer_call(&self.site, call, self.clock.since_ms(started) as f64 / 1000.0);
        out.map_err(CallError::from)
    }

    /// Asks the peer to admit a VEE arriving from this site (a migration,
    /// a remote placement or a restore): where to send it.
    pub async fn prepare_incoming(&self, v: IncomingVee) -> Result<vhi::IncomingTarget, CallError> {
        self.timed("PrepareIncoming", self.inner.prepare_incoming(v)).await
    }
    /// The VEE arrived: the peer runs it from now on.
    pub async fn complete_incoming(&self, vee_id: &str) -> Result<RemoteVee, CallError> {
        self.timed("CompleteIncoming", self.inner.complete_incoming(vee_id)).await
    }
    /// The peer forgets an incoming VEE (or fences a copy it still runs).
    pub async fn abort_incoming(&self, vee_id: &str) -> Result<(), CallError> {
        self.timed("AbortIncoming", self.inner.abort_incoming(vee_id)).await
    }
    /// The peer gives back a VEE it runs for this site.
    pub async fn withdraw(&self, vee_id: &str) -> Result<(), CallError> {
        self.timed("Withdraw", self.inner.withdraw(vee_id)).await
    }
    /// The peer live-migrates this site's VEE to `target`: when done or
    /// failed.
    pub async fn send_vee(&self, vee_id: &str, target: vhi::IncomingTarget) -> Result<MigrationOutcome, CallError> {
        self.timed("SendVee", self.inner.send_vee(vee_id, target)).await
    }
    /// Usage records of VEEs this site (`from_site`) ran for the peer.
    pub async fn push_usage(&self, from_site: &str, records: &[UsageRec]) -> Result<UsageReceipt, CallError> {
        self.timed("PushUsage", self.inner.push_usage(from_site, records)).await
    }
    /// This site's VEE as the peer runs it.
    pub async fn get_vee(&self, vee_id: &str) -> Result<RemoteVee, CallError> {
        self.timed("GetVee", self.inner.get_vee(vee_id)).await
    }
    /// An action on this site's VEE that runs there (`checkpoint_id`: a
    /// restore's checkpoint, empty for the latest).
    pub async fn vee_action(&self, vee_id: &str, action: Action, checkpoint_id: &str) -> Result<RemoteVee, CallError> {
        self.timed("VeeAction", self.inner.vee_action(vee_id, action, checkpoint_id)).await
    }
    /// A network of this site's that runs VEEs at the peer has a new
    /// member table.
    pub async fn update_network(&self, u: vhi::NetworkUpdate) -> Result<(), CallError> {
        self.timed("UpdateNetwork", self.inner.update_network(u)).await
    }
    /// Holds spare capacity for a full-guarantee VEE: when the hold lapses
    /// unless confirmed (Unix ms).
    pub async fn reserve_spare(&self, r: &SpareRequest) -> Result<i64, CallError> {
        self.timed("ReserveSpare", self.inner.reserve_spare(r)).await
    }
    /// Keeps the spare held for the VEE (the admission here committed).
    pub async fn confirm_spare(&self, vee_id: &str) -> Result<(), CallError> {
        self.timed("ConfirmSpare", self.inner.confirm_spare(vee_id)).await
    }
    /// Drops the spare held for the VEE.
    pub async fn release_spare(&self, vee_id: &str) -> Result<(), CallError> {
        self.timed("ReleaseSpare", self.inner.release_spare(vee_id)).await
    }
    /// The console of this site's VEE that runs there, relayed by the peer;
    /// timed until it is attached, not for the session.
    pub async fn attach_console(&self, vee_id: &str, force: bool, input: ConsoleInput) -> Result<ConsoleStream, CallError> {
        self.timed("AttachConsole", self.inner.attach_console(vee_id, force, input)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    pub async fn every_call_is_timed_by_peer_and_call_failed_ones_too() {
        let metrics = Arc::new(VeemMetrics::default());
        let clock: Arc<dyn Clock> = Arc::new(crate::sim::FakeClock::new());
        let peer = PeerSite::new(Arc::new(crate::sim::SilentPeer), "site-b", metrics.clone(), clock);
        assert!(peer.get_vee("v1").await.is_err());
        assert!(peer.withdraw("v1").await.is_err());
        let mut r = prometheus_client::registry::Registry::default();
        metrics.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for call in ["GetVee", "Withdraw"] {
            let line = format!("peer_call_duration_seconds_count{{peer=\"site-b\",call=\"{call}\"}} 1");
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
    }
}
