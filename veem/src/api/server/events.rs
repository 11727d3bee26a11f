//! VMI WatchEvents and ListEvents: the events a caller may see (its own
//! services' for a provider, those of the VEEs run here for it for a
//! peer site, every event for the operator), live from the core's
//! broadcast or stored, a page at a time. No call reads the whole log: a
//! page reads [`READ_AT_MOST`] stored events at most, a live stream none.

use std::collections::HashMap;
use std::sync::Arc;

use interfaces::vmi::{Event, ListEventsRequest, ListEventsResponse, WatchEventsRequest};
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::StreamExt;
use tonic::{Request, Status};

use super::{BoxStream, VmiService};
use crate::api::status::status;
use crate::api::visibility::{redact, Redactor};
use crate::config::Role;
use crate::manager::Veem;
use crate::model::EventRec;

/// Events in a page when the request gives no `page_size`.
pub const DEFAULT_PAGE: usize = 500;
/// The most events in a page, whatever the request asks for.
pub const MAX_PAGE: usize = 1000;
/// Stored events one call reads at most (a caller may see few of them:
/// its page is then short, and its token goes on from there).
pub const READ_AT_MOST: usize = 2000;
/// What every page token starts with (its format's version).
const TOKEN_PREFIX: &str = "e1/";
/// Services whose visibility a live stream remembers before it forgets
/// them all.
const REMEMBERED: usize = 10_000;

/// Which events a caller may see, with the services it looked up.
struct Visible {
    veem: Arc<Veem>,
    role: Role,
    /// Only this service's (empty: every one the role may see).
    service: String,
    seen: HashMap<String, bool>,
}

impl Visible {
    fn of(&mut self, e: &EventRec) -> bool {
        if !self.service.is_empty() && e.service_id != self.service {
            return false;
        }
        if self.role == Role::Operator {
            return true;
        }
        if self.seen.len() >= REMEMBERED {
            self.seen.clear();
        }
        let (veem, role) = (&self.veem, &self.role);
        *self.seen.entry(e.service_id.clone()).or_insert_with(|| {
            veem.core.service(&e.service_id).ok().is_some_and(|s| match role {
                Role::Provider(p) => &s.provider == p && s.for_peer.is_none(),
                Role::Peer(site) => s.for_peer.as_deref() == Some(site.as_str()),
                Role::Operator => true,
            })
        })
    }
}

/// An event as `redactor`'s role reads it.
fn shown(redactor: Option<&Redactor>, e: EventRec) -> Event {
    Event {
        detail: redact(redactor, &e.detail),
        vee_id: e.vee_id,
        service_id: e.service_id,
        kind: e.kind,
        time: interfaces::time::timestamp_ms(e.at_ms),
        seq: e.seq,
    }
}

/// The token of the page after event `seq`.
fn token(seq: u64) -> String {
    hex::encode(format!("{TOKEN_PREFIX}{seq}"))
}

/// The `seq` a page token goes on after. Errors: InvalidArgument naming
/// the field, for a token this server did not give.
fn after_token(t: &str) -> Result<u64, Status> {
    hex::decode(t)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.strip_prefix(TOKEN_PREFIX).and_then(|n| n.parse().ok()))
        .ok_or_else(|| Status::invalid_argument("field `page_token`: not a next_page_token of ListEvents"))
}

impl VmiService {
    fn visible(&self, role: &Role, service: &str) -> Result<Visible, Status> {
        if !service.is_empty() {
            self.visible_service(role, service)?;
        }
        Ok(Visible {
            veem: self.veem.clone(),
            role: role.clone(),
            service: service.to_string(),
            seen: HashMap::new(),
        })
    }

    /// WatchEvents: the events as they happen (reading no stored one), or
    /// with `history_only` the newest page of the stored ones.
    pub(super) fn watch(&self, r: Request<WatchEventsRequest>) -> Result<BoxStream<Event>, Status> {
        let role = self.caller(&r)?;
        let fenced = self.fenced_later(&role, &r)?;
        let WatchEventsRequest { service_id, history_only } = r.into_inner();
        if history_only {
            let latest = ListEventsRequest {
                service_id,
                latest: true,
                ..Default::default()
            };
            let page = self.events_page(&role, &latest)?;
            return Ok(Box::pin(futures::stream::iter(page.events.into_iter().map(Ok))));
        }
        let mut visible = self.visible(&role, &service_id)?;
        let redactor = self.redactor(&role);
        let rx = self.veem.core.events.subscribe();
        let stream = BroadcastStream::new(rx).filter_map(move |e| {
            let e = e.ok()?;
            visible.of(&e).then(|| Ok(shown(redactor.as_ref(), e)))
        });
        // A stop ends the stream (the client sees it end), so that no
        // follower holds the VEEM up.
        let stream = futures::StreamExt::take_until(stream, self.veem.core.stopping.clone().cancelled_owned());
        // A peer's stream ends when a newer leader of that peer is seen.
        let stream = futures::StreamExt::take_until(stream, fenced);
        Ok(Box::pin(stream))
    }

    /// ListEvents for `role` (see `vmi.proto`). Errors: InvalidArgument
    /// naming the field (a negative `page_size`, a token this server did
    /// not give, `page_token` with `after_seq`, `latest` with either);
    /// NotFound (a service the caller may not see); the store's.
    pub(super) fn events_page(&self, role: &Role, r: &ListEventsRequest) -> Result<ListEventsResponse, Status> {
        let size = match usize::try_from(r.page_size) {
            Err(_) => return Err(Status::invalid_argument(format!("field `page_size`: {} is negative", r.page_size))),
            Ok(0) => DEFAULT_PAGE,
            Ok(n) => n.min(MAX_PAGE),
        };
        let after = match (r.page_token.is_empty(), r.after_seq) {
            (true, seq) => seq,
            (false, 0) => after_token(&r.page_token)?,
            (false, _) => {
                return Err(Status::invalid_argument(
                    "field `after_seq`: not with `page_token` (which goes on by itself)",
                ))
            }
        };
        if r.latest && after != 0 {
            return Err(Status::invalid_argument("field `latest`: not with `page_token` or `after_seq`"));
        }
        let mut visible = self.visible(role, &r.service_id)?;
        let (events, next) = if r.latest {
            (self.latest_page(&mut visible, size)?, String::new())
        } else {
            self.page_after(&mut visible, after, size)?
        };
        let redactor = self.redactor(role);
        Ok(ListEventsResponse {
            events: events.into_iter().map(|e| shown(redactor.as_ref(), e)).collect(),
            next_page_token: next,
        })
    }

    /// Up to `size` visible events after `after`, oldest first, reading
    /// [`READ_AT_MOST`] (and one) stored events at most; and the next
    /// page's token.
    fn page_after(&self, visible: &mut Visible, after: u64, size: usize) -> Result<(Vec<EventRec>, String), Status> {
        let (mut page, mut cursor, mut read) = (Vec::new(), after, 0);
        loop {
            let chunk = (size - page.len()).min(READ_AT_MOST - read);
            let (events, more) = self.veem.core.store.events_after(cursor, chunk).map_err(status)?;
            // With the one read to know whether more follow.
            read += events.len() + usize::from(more);
            for e in events {
                cursor = e.seq;
                if visible.of(&e) {
                    page.push(e);
                }
            }
            if !more {
                return Ok((page, String::new()));
            }
            if page.len() == size || read >= READ_AT_MOST {
                return Ok((page, token(cursor)));
            }
        }
    }

    /// The newest `size` visible events, oldest first: the newest `size`
    /// stored, and when the caller may not see them all, the newest
    /// [`READ_AT_MOST`].
    fn latest_page(&self, visible: &mut Visible, size: usize) -> Result<Vec<EventRec>, Status> {
        let mut page = Vec::new();
        for limit in [size, READ_AT_MOST] {
            let newest = self.veem.core.store.latest_events(limit).map_err(status)?;
            let all = newest.len() < limit;
            page = newest.into_iter().filter(|e| visible.of(e)).take(size).collect();
            if page.len() == size || all {
                break;
            }
        }
        page.reverse();
        Ok(page)
    }
}

#[cfg(test)]
mod tests;
