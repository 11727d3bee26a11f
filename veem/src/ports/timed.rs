//! A peer site's calls timed (`veem_peer_call_duration_seconds`, by peer
//! and call, failed ones included): the decorator `Core::peer` puts around
//! every [`Peer`] it hands out, whatever carries the calls.

use std::sync::Arc;

use interfaces::vhi;
use tonic::Status;

use super::{Clock, ConsoleInput, ConsoleStream, Peer};
use crate::domain::peer::{IncomingVee, MigrationOutcome, RemoteVee, SpareRequest, UsageReceipt};
use crate::domain::Action;
use crate::metrics::VeemMetrics;
use crate::model::UsageRec;

/// [`Peer`] `inner` (site `site`), each call timed on `clock` into
/// `metrics`.
pub struct Timed {
    inner: Arc<dyn Peer>,
    site: String,
    metrics: Arc<VeemMetrics>,
    clock: Arc<dyn Clock>,
}

impl Timed {
    pub fn new(inner: Arc<dyn Peer>, site: &str, metrics: Arc<VeemMetrics>, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner,
            site: site.to_string(),
            metrics,
            clock,
        }
    }

    async fn timed<T>(&self, call: &'static str, work: impl std::future::Future<Output = T>) -> T {
        let started = self.clock.now_ms();
        let out = work.await;
        self.metrics
            .peer_call(&self.site, call, self.clock.since_ms(started) as f64 / 1000.0);
        out
    }
}

#[tonic::async_trait]
impl Peer for Timed {
    async fn prepare_incoming(&self, v: IncomingVee) -> Result<vhi::IncomingTarget, Status> {
        self.timed("PrepareIncoming", self.inner.prepare_incoming(v)).await
    }
    async fn complete_incoming(&self, vee_id: &str) -> Result<RemoteVee, Status> {
        self.timed("CompleteIncoming", self.inner.complete_incoming(vee_id)).await
    }
    async fn abort_incoming(&self, vee_id: &str) -> Result<(), Status> {
        self.timed("AbortIncoming", self.inner.abort_incoming(vee_id)).await
    }
    async fn withdraw(&self, vee_id: &str) -> Result<(), Status> {
        self.timed("Withdraw", self.inner.withdraw(vee_id)).await
    }
    async fn send_vee(&self, vee_id: &str, target: vhi::IncomingTarget) -> Result<MigrationOutcome, Status> {
        self.timed("SendVee", self.inner.send_vee(vee_id, target)).await
    }
    async fn push_usage(&self, from_site: &str, records: &[UsageRec]) -> Result<UsageReceipt, Status> {
        self.timed("PushUsage", self.inner.push_usage(from_site, records)).await
    }
    async fn get_vee(&self, vee_id: &str) -> Result<RemoteVee, Status> {
        self.timed("GetVee", self.inner.get_vee(vee_id)).await
    }
    async fn vee_action(&self, vee_id: &str, action: Action, checkpoint_id: &str) -> Result<RemoteVee, Status> {
        self.timed("VeeAction", self.inner.vee_action(vee_id, action, checkpoint_id)).await
    }
    async fn update_network(&self, u: vhi::NetworkUpdate) -> Result<(), Status> {
        self.timed("UpdateNetwork", self.inner.update_network(u)).await
    }
    async fn reserve_spare(&self, r: &SpareRequest) -> Result<i64, Status> {
        self.timed("ReserveSpare", self.inner.reserve_spare(r)).await
    }
    async fn confirm_spare(&self, vee_id: &str) -> Result<(), Status> {
        self.timed("ConfirmSpare", self.inner.confirm_spare(vee_id)).await
    }
    async fn release_spare(&self, vee_id: &str) -> Result<(), Status> {
        self.timed("ReleaseSpare", self.inner.release_spare(vee_id)).await
    }
    /// Timed until the console is attached, not for the session.
    async fn attach_console(&self, vee_id: &str, force: bool, input: ConsoleInput) -> Result<ConsoleStream, Status> {
        self.timed("AttachConsole", self.inner.attach_console(vee_id, force, input)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_call_is_timed_by_peer_and_call_failed_ones_too() {
        let metrics = Arc::new(VeemMetrics::default());
        let clock: Arc<dyn Clock> = Arc::new(crate::sim::FakeClock::new());
        let peer = Timed::new(Arc::new(crate::sim::SilentPeer), "site-b", metrics.clone(), clock);
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
