//! A VEE's serial console relayed to whoever may attach to it (VMI
//! AttachConsole, `veem console`, the web console): from the VEE's host
//! (VHI AttachConsole) or, for a VEE at a peer site, from that site's VMI
//! (which relays it from its host in turn). When the console closes while
//! the VEE moves (a live migration, a recovery), the relay waits for it to
//! run again and attaches at its new place, saying so in a notice that
//! names no place (E §3.4). Every session is audited as two `console`
//! events: who attached, and when it ended with the bytes typed and shown
//! (never what they were). A leaf: calls only the core.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::core::Core;
use crate::model::{Location, VeeRec, VeeState};
use crate::ports::{ConsoleInput, ConsoleOutput, ConsoleStream};

/// How long a relay waits for its VEE to run again after the console
/// closed, before it ends the session.
pub const REATTACH_WITHIN: Duration = Duration::from_secs(600);

/// How often the relay looks whether the VEE runs again.
const REATTACH_POLL: Duration = Duration::from_millis(500);

/// The relays of VEEs' serial consoles (see the module doc). A leaf.
pub struct Consoles {
    core: Arc<Core>,
    /// Sessions each caller may still open (`[events]
    /// console_attaches_per_minute`): each writes two events.
    attaches: std::sync::Mutex<crate::domain::rate::Buckets>,
}

impl Deref for Consoles {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

/// One attachment: its output, and where what is typed goes.
type Attachment = (ConsoleStream, mpsc::Sender<Vec<u8>>);

impl Consoles {
    pub fn new(core: Arc<Core>) -> Self {
        let attaches = std::sync::Mutex::new(crate::domain::rate::Buckets::new(core.cfg.events.console_attaches_per_minute));
        Self { core, attaches }
    }

    /// Attaches `who` (for the audit) to the console of VEE `vee_id`
    /// (`force`: take it from a session that holds it): what comes on
    /// `input` is typed into the guest, the stream carries what it writes
    /// and the relay's notices, until `input` ends, the caller stops
    /// reading, or the VEE stops. The caller checked that `who` may.
    /// Errors: the VEE is unknown (NotFound) or does not run; `who` over
    /// its rate of sessions (`VeemError::RateLimited`: ResourceExhausted);
    /// the host's or peer's refusal (another session holds the console),
    /// by its message.
    pub async fn attach(self: &Arc<Self>, who: &str, vee_id: &str, force: bool, input: ConsoleInput) -> Result<ConsoleStream> {
        let v = self.vee(vee_id)?;
        if !matches!(v.state, VeeState::Running | VeeState::Checkpointing) {
            bail!("VEE {vee_id} is {}: its console is there while it runs", v.state.as_str());
        }
        self.take_attach(who)?;
        let first = self.open(&v, force).await?;
        self.event(&v.id, &v.service_id, "console", format!("attached by {who}"));
        let (out, rx) = mpsc::channel(64);
        let relay = Relay {
            consoles: self.clone(),
            who: who.to_string(),
            vee: v,
            force,
            typed: 0,
            shown: 0,
            started_ms: self.clock.now_ms(),
        };
        tokio::spawn(relay.run(first, input, out));
        Ok(Box::pin(ReceiverStream::new(rx)))
    }

    /// Takes one of `who`'s console sessions; errors when it has none
    /// left this minute, saying when one is back.
    fn take_attach(&self, who: &str) -> Result<()> {
        let mut buckets = self.attaches.lock().unwrap();
        buckets.take(who, self.clock.now_ms()).map_err(|wait_ms| {
            crate::error::VeemError::RateLimited {
                what: "console sessions",
                who: who.to_string(),
                per_minute: buckets.per_minute(),
                limit: "[events] console_attaches_per_minute",
                retry_s: (wait_ms + 999) / 1000,
            }
            .into()
        })
    }

    /// Attaches to `v`'s console where it runs now.
    async fn open(&self, v: &VeeRec, force: bool) -> Result<Attachment> {
        let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
        let input: ConsoleInput = Box::pin(ReceiverStream::new(rx));
        let opened = match &v.location {
            Location::Host(h) => self.hosts.vhi(h)?.open_console(&v.id, force, input).await,
            Location::Site(s) => self.peer(s)?.attach_console(&v.id, force, input).await,
            Location::Nowhere => bail!("VEE {} runs nowhere", v.id),
        };
        // The message only: where the VEE runs is the caller's to redact.
        let out = opened.map_err(|s: Status| anyhow!("the console of VEE {}: {}", v.id, s.message()))?;
        Ok((out, tx))
    }

    /// After the console of `v` closed: the VEE's console where it runs
    /// again (it moved, or its host's console came back), or `None` when
    /// it stopped, or did not run again within [`REATTACH_WITHIN`].
    async fn reattach(&self, v: &VeeRec, force: bool) -> Option<(Attachment, VeeRec)> {
        let deadline = self.clock.now_ms() + REATTACH_WITHIN.as_millis() as i64;
        while self.clock.now_ms() < deadline && !self.stopping.is_cancelled() {
            let now = self.vee(&v.id).ok()?;
            match now.state {
                VeeState::Running | VeeState::Checkpointing => {
                    if let Ok(a) = self.open(&now, force).await {
                        return Some((a, now));
                    }
                }
                VeeState::Migrating | VeeState::Recovering | VeeState::Deploying | VeeState::Failed => {}
                _ => return None,
            }
            self.clock.sleep(REATTACH_POLL).await;
        }
        None
    }
}

/// One session's relay and what it counts for the audit.
struct Relay {
    consoles: Arc<Consoles>,
    who: String,
    vee: VeeRec,
    force: bool,
    /// Bytes typed and shown.
    typed: u64,
    shown: u64,
    started_ms: i64,
}

impl Relay {
    async fn run(mut self, first: Attachment, mut input: ConsoleInput, out: mpsc::Sender<Result<ConsoleOutput, Status>>) {
        let (mut console, mut to_guest) = first;
        let why = loop {
            tokio::select! {
                typed = input.next() => match typed {
                    Some(data) => {
                        self.typed += data.len() as u64;
                        // A console closing meanwhile shows on its output.
                        let _ = to_guest.send(data).await;
                    }
                    None => break "the caller detached",
                },
                shown = console.next() => match shown {
                    Some(Ok(o)) => {
                        if let ConsoleOutput::Data(d) = &o {
                            self.shown += d.len() as u64;
                        }
                        if out.send(Ok(o)).await.is_err() {
                            break "the caller left";
                        }
                    }
                    Some(Err(_)) | None => match self.consoles.reattach(&self.vee, self.force).await {
                        Some(((c, t), now)) => {
                            (console, to_guest) = (c, t);
                            let moved = now.location != self.vee.location;
                            self.vee = now;
                            let notice = if moved {
                                "the VEE moved: its console is attached again"
                            } else {
                                "the console was attached again"
                            };
                            if out.send(Ok(ConsoleOutput::Notice(notice.into()))).await.is_err() {
                                break "the caller left";
                            }
                        }
                        None => {
                            let state = self.consoles.vee(&self.vee.id).map(|v| v.state.as_str()).unwrap_or("gone");
                            let _ = out.send(Ok(ConsoleOutput::Notice(format!("the console closed: the VEE is {state}")))).await;
                            break "the VEE stopped";
                        }
                    },
                },
            }
        };
        let secs = self.consoles.clock.since_ms(self.started_ms) / 1000;
        self.consoles.event(
            &self.vee.id,
            &self.vee.service_id,
            "console",
            format!(
                "detached ({why}): {}, {} bytes typed, {} bytes shown, {secs} s",
                self.who, self.typed, self.shown
            ),
        );
    }
}

#[cfg(test)]
mod tests;
