//! The core's event log: an event is appended to the store and broadcast
//! (the VMI's WatchEvents follows the broadcast); the leader's retention
//! round removes what `[events]` no longer keeps (`crate::loops`).

use anyhow::Result;

use super::Core;
use crate::model::EventRec;

impl Core {
    /// Persists and broadcasts an event, with its `seq` in the log; its
    /// detail (often an error that quotes a host's, a peer's or a
    /// caller's words) is bounded to [`interfaces::excerpt::MESSAGE_BYTES`].
    pub fn event(&self, vee_id: &str, service_id: &str, kind: &str, detail: impl Into<String>) {
        let detail: String = detail.into();
        let mut e = EventRec {
            vee_id: vee_id.into(),
            service_id: service_id.into(),
            kind: kind.into(),
            detail: interfaces::excerpt::message(&detail).into_owned(),
            at_ms: self.clock.now_ms(),
            seq: 0,
        };
        match self.store.append_event(&e) {
            Ok(seq) => e.seq = seq,
            Err(err) => tracing::error!(%err, "cannot persist event"),
        }
        tracing::info!(vee = %e.vee_id, kind = %e.kind, detail = %e.detail, "event");
        let _ = self.events.send(e);
    }

    /// One retention round: removes the oldest events beyond
    /// `[events] keep` and those older than `[events] max_age`; returns
    /// how many (on a blocking thread: the first round after an upgrade
    /// may remove many).
    pub async fn prune_events(&self) -> Result<u64> {
        let (store, keep) = (self.store.clone(), self.cfg.events.keep);
        let age = i64::try_from(self.cfg.events.max_age.as_millis()).unwrap_or(i64::MAX);
        let cut = self.clock.now_ms().saturating_sub(age);
        let removed = tokio::task::spawn_blocking(move || store.prune_events(keep, cut)).await??;
        if removed > 0 {
            tracing::info!(removed, keep, "events pruned ([events] keep, max_age)");
        }
        Ok(removed)
    }
}
