//! When a VEE record next needs the scheduler's or the SLA round's
//! attention: its deployment, its window's end, its next checkpoint, a
//! breach of its SLA beginning, an open-ended window's renewal (the core's
//! due-time index, `crate::core`).

use super::{VeeRec, VeeState};

/// How long after its window opened a VEE may still be starting before
/// the SLA counts it late (s).
pub const START_GRACE_S: i64 = 120;

impl VeeRec {
    /// When this VEE next needs the scheduler's or the SLA round's
    /// attention, in Unix ms (`None`: only an event will change that): its
    /// deployment ([`VeeRec::deploy_due`]), the end of its window, its
    /// next checkpoint, a breach of its SLA beginning (a checkpoint missed
    /// for two intervals, not running [`START_GRACE_S`] after its window
    /// opened), the renewal of an open-ended window `renew_ahead_s` before
    /// its end. Never later than the first moment any of these holds (a
    /// unit test checks it against the scheduler's and the SLA's own
    /// tests); the rounds then check the record itself.
    pub fn due_ms(&self, renew_ahead_s: i64) -> Option<i64> {
        let on_host = self.host().is_some();
        // Checkpoints and the SLA are the primary site's, not a peer's.
        let primary = self.for_peer.is_none();
        let mut due: Option<i64> = None;
        let mut at = |ms: i64| due = Some(due.map_or(ms, |d| d.min(ms)));
        if self.state == VeeState::Admitted && on_host {
            at(self.deploy_from() * 1000);
        }
        if self.state == VeeState::Running && on_host {
            at(self.window_end_unix * 1000);
        }
        if primary && matches!(self.state, VeeState::Admitted | VeeState::Deploying) {
            at((self.window_start_unix + START_GRACE_S) * 1000);
        }
        let checkpointed = matches!(self.state, VeeState::Running | VeeState::Checkpointing);
        if let (true, Some(every)) = (primary && checkpointed, self.checkpoint_interval_s) {
            at(self.checkpointed_ms().saturating_add(every as i64 * 1000));
        }
        if self.open_ended && self.state.is_live() && on_host {
            at((self.window_end_unix - renew_ahead_s) * 1000);
        }
        due
    }

    /// Whether an admitted VEE is to be deployed at `now` (Unix s): its
    /// window starts within its initialization lead.
    pub fn deploy_due(&self, now: i64) -> bool {
        self.deploy_from() <= now
    }

    /// When an admitted VEE's deployment starts (Unix s): its window's
    /// start less its initialization lead.
    fn deploy_from(&self) -> i64 {
        self.window_start_unix - self.init_lead_s
    }

    /// When its state was last saved in a checkpoint (Unix ms): its last
    /// checkpoint, or, before the first, its record's last change.
    pub fn checkpointed_ms(&self) -> i64 {
        self.last_checkpoint_ms.unwrap_or(self.updated_ms)
    }
}
