//! A VEE's serial console relayed to whoever may attach to it (VMI
//! AttachConsole, `veem console`, the web console): from the VEE's host
//! (VHI AttachConsole) or, for a VEE at a peer site, from that site's VMI
//! (which relays it from its host in turn). When the console closes while
//! the VEE moves (a live migration, a recovery), the relay waits for it to
//! run again and attaches at its new place, saying so in a notice that
//! names no place (E §3.4); a console that closes while its VEE stays
//! where it was is not attached again.
//!
//! One session holds a VEE's console; `force` takes it from the one that
//! holds it, except that a provider's or a peer's force never takes it
//! from the site's operator. The session taken from ends with a notice
//! that names no one and does not come back. Every session is audited as
//! two `console` events: who attached (forced, and whom it displaced),
//! and when it ended with the bytes typed and shown (never what they
//! were). A leaf: calls only the core.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::config::Role;
use crate::core::{Core, RecordError};
use crate::error::VeemError;
use crate::model::{Location, VeeRec, VeeState};
use crate::ports::call::CallError;
use crate::ports::{ConsoleInput, ConsoleOutput, ConsoleStream};

/// How long a relay waits for its VEE to run again after the console
/// closed, before it ends the session.
pub const REATTACH_WITHIN: Duration = Duration::from_secs(600);

/// How often the relay looks whether the VEE runs again.
const REATTACH_POLL: Duration = Duration::from_millis(500);

/// Why a console session was not opened (VMI AttachConsole). Each
/// variant's status is in `crate::api::status`.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No such VEE.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The caller is over its rate of sessions.
    #[error(transparent)]
    Request(#[from] VeemError),
    /// The VEE does not run: its console is there while it runs.
    #[error("VEE {vee} is {state}: its console is there while it runs")]
    NotRunning { vee: String, state: &'static str },
    /// Another session holds the console (`how`), and what takes it.
    #[error("{how} the console of VEE {vee}: {then}")]
    Held {
        vee: String,
        how: &'static str,
        then: &'static str,
    },
    /// Its host or peer site refused the console, or did not answer (by
    /// its message only: where the VEE runs is the caller's to redact).
    #[error("the console of VEE {vee}: {}", .call.message)]
    Unreached { vee: String, call: CallError },
}

/// The relays of VEEs' serial consoles (see the module doc). A leaf.
pub struct Consoles {
    core: Arc<Core>,
    /// The session holding each VEE's console, by VEE ID.
    holders: Mutex<HashMap<String, Holder>>,
    sessions: AtomicU64,
    /// Sessions each caller may still open (`[events]
    /// console_attaches_per_minute`): each writes two events.
    attaches: std::sync::Mutex<crate::domain::rate::Buckets>,
}

/// The session that holds a VEE's console.
#[derive(Clone)]
struct Holder {
    session: u64,
    /// Who, for the audit.
    who: String,
    /// The operator's session outranks the others: see [`rank`].
    rank: u8,
    /// Cancelled when another session takes the console.
    taken: CancellationToken,
}

/// A role's rank over a console: a force takes it only from a session of
/// the same rank or lower.
fn rank(role: &Role) -> u8 {
    match role {
        Role::Operator => 2,
        Role::Provider(_) | Role::Peer(_) => 1,
    }
}

/// What a session taken by another is told (naming no one).
const TAKEN: &str = "the console was taken by another session";

/// The notice a session gets when the VEEM stops (its client may attach
/// again at the site's next leader).
const STOPPING: &str = "the VEEM stops: attach again";

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
        Self {
            core,
            holders: Mutex::new(HashMap::new()),
            sessions: AtomicU64::new(0),
            attaches,
        }
    }

    /// Attaches `role` to the console of VEE `vee_id` (`force`: take it
    /// from the session that holds it, unless that is the operator's and
    /// `role` is not): what comes on `input` is typed into the guest, the
    /// stream carries what it writes and the relay's notices, until
    /// `input` ends, the caller stops reading, the VEE stops, or another
    /// session takes the console. The caller checked that `role` may.
    /// Errors: the VEE is unknown (NotFound) or does not run; the caller
    /// over its rate of sessions (`VeemError::RateLimited`:
    /// ResourceExhausted); another session holds the console (without
    /// `force`, or the operator's); the host's or peer's refusal, by its
    /// message.
    pub async fn attach(
        self: &Arc<Self>,
        role: &Role,
        vee_id: &str,
        force: bool,
        input: ConsoleInput,
    ) -> Result<ConsoleStream, ConsoleError> {
        let who = role.to_string();
        let v = self.vee(vee_id)?;
        if !matches!(v.state, VeeState::Running | VeeState::Checkpointing) {
            return Err(ConsoleError::NotRunning {
                vee: vee_id.into(),
                state: v.state.as_str(),
            });
        }
        self.take_attach(&who)?;
        // The session this one takes the console from ends first (told it
        // was taken), so that the host's console closing under it is never
        // taken for a close to recover from.
        let session = self.sessions.fetch_add(1, Ordering::Relaxed);
        let taken = CancellationToken::new();
        let displaced = {
            let mut holders = self.holders.lock().unwrap();
            match holders.get(vee_id) {
                Some(h) if h.rank > rank(role) => {
                    return Err(ConsoleError::Held {
                        vee: vee_id.into(),
                        how: "the site's operator holds",
                        then: "only the operator may take it",
                    });
                }
                Some(_) if !force => {
                    return Err(ConsoleError::Held {
                        vee: vee_id.into(),
                        how: "another session holds",
                        then: "`--force` takes it",
                    })
                }
                _ => {}
            }
            let holder = Holder {
                session,
                who: who.clone(),
                rank: rank(role),
                taken: taken.clone(),
            };
            holders.insert(v.id.clone(), holder)
        };
        if let Some(d) = &displaced {
            d.taken.cancel();
        }
        let first = match self.open(&v, force).await {
            Ok(first) => first,
            Err(e) => {
                self.release(&v.id, session);
                return Err(e);
            }
        };
        let mut detail = format!("attached by {who}");
        if force {
            detail.push_str(", forced");
        }
        if let Some(d) = displaced {
            detail.push_str(&format!(", displacing {}", d.who));
        }
        self.event(&v.id, &v.service_id, "console", detail);
        let (out, rx) = mpsc::channel(64);
        let relay = Relay {
            consoles: self.clone(),
            who,
            vee: v,
            session,
            taken,
            typed: 0,
            shown: 0,
            started_ms: self.clock.now_ms(),
        };
        // One of the core's tasks: a stop ends the session and waits for
        // its audit.
        self.spawn(relay.run(first, input, out));
        Ok(Box::pin(ReceiverStream::new(rx).map(Ok)))
    }

    /// Forgets that `session` holds VEE `vee_id`'s console (if it still
    /// does).
    fn release(&self, vee_id: &str, session: u64) {
        let mut holders = self.holders.lock().unwrap();
        if holders.get(vee_id).is_some_and(|h| h.session == session) {
            holders.remove(vee_id);
        }
    }

    /// Takes one of `who`'s console sessions; errors when it has none
    /// left this minute, saying when one is back.
    fn take_attach(&self, who: &str) -> Result<(), VeemError> {
        let mut buckets = self.attaches.lock().unwrap();
        buckets.take(who, self.clock.now_ms()).map_err(|wait_ms| {
            crate::error::VeemError::RateLimited {
                what: "console sessions",
                who: who.to_string(),
                per_minute: buckets.per_minute(),
                limit: "[events] console_attaches_per_minute",
                retry_s: (wait_ms + 999) / 1000,
            }
        })
    }

    /// Attaches to `v`'s console where it runs now.
    async fn open(&self, v: &VeeRec, force: bool) -> Result<Attachment, ConsoleError> {
        let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
        let input: ConsoleInput = Box::pin(ReceiverStream::new(rx));
        let opened = match &v.location {
            Location::Host(h) => match self.hosts.vhi(h) {
                Ok(vhi) => vhi.open_console(&v.id, force, input).await.map_err(CallError::from),
                Err(e) => Err(e),
            },
            Location::Site(s) => match self.peer(s) {
                Ok(p) => p.attach_console(&v.id, force, input).await,
                Err(e) => Err(e),
            },
            Location::Nowhere => {
                return Err(ConsoleError::NotRunning {
                    vee: v.id.clone(),
                    state: "placed nowhere",
                })
            }
        };
        // The message only: where the VEE runs is the caller's to redact.
        let out = opened.map_err(|call| ConsoleError::Unreached { vee: v.id.clone(), call })?;
        Ok((out, tx))
    }

    /// After the console of `v` closed: the VEE's console where it runs
    /// again once it moved (a migration, a recovery), or `None` when it
    /// stopped, stayed where it was (the console was taken, or its host's
    /// closed), or did not run again within [`REATTACH_WITHIN`]. Never
    /// forced: a session that takes the console is not taken from again.
    async fn reattach(&self, v: &VeeRec) -> Option<(Attachment, VeeRec)> {
        let deadline = self.clock.now_ms() + REATTACH_WITHIN.as_millis() as i64;
        while self.clock.now_ms() < deadline && !self.stopping.is_cancelled() {
            let now = self.vee(&v.id).ok()?;
            match now.state {
                VeeState::Running | VeeState::Checkpointing if now.location == v.location => return None,
                VeeState::Running | VeeState::Checkpointing => {
                    if let Ok(a) = self.open(&now, false).await {
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
    /// Its number, and cancelled when another session takes the console.
    session: u64,
    taken: CancellationToken,
    /// Bytes typed and shown.
    typed: u64,
    shown: u64,
    started_ms: i64,
}

impl Relay {
    async fn run(mut self, first: Attachment, mut input: ConsoleInput, out: mpsc::Sender<ConsoleOutput>) {
        let (mut console, mut to_guest) = first;
        let why = loop {
            tokio::select! {
                _ = self.consoles.stopping.cancelled() => {
                    let _ = out.send(ConsoleOutput::Notice(STOPPING.into())).await;
                    break "the VEEM stopped";
                }
                _ = self.taken.cancelled() => {
                    let _ = out.send(ConsoleOutput::Notice(TAKEN.into())).await;
                    break "taken by another session";
                }
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
                        if out.send(o).await.is_err() {
                            break "the caller left";
                        }
                    }
                    Some(Err(_)) | None if self.taken.is_cancelled() => {
                        let _ = out.send(ConsoleOutput::Notice(TAKEN.into())).await;
                        break "taken by another session";
                    }
                    Some(Err(_)) | None => match self.consoles.reattach(&self.vee).await {
                        Some(((c, t), now)) => {
                            (console, to_guest) = (c, t);
                            self.vee = now;
                            let notice = "the VEE moved: its console is attached again";
                            if out.send(ConsoleOutput::Notice(notice.into())).await.is_err() {
                                break "the caller left";
                            }
                        }
                        None => {
                            let state = self.consoles.vee(&self.vee.id).map(|v| v.state.as_str()).unwrap_or("gone");
                            let _ = out.send(ConsoleOutput::Notice(format!("the console closed: the VEE is {state}"))).await;
                            break "the console closed";
                        }
                    },
                },
            }
        };
        self.consoles.release(&self.vee.id, self.session);
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
