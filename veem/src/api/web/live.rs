//! What the web console streams: the events (Server-Sent Events from VMI
//! WatchEvents, each event the JSON of `crate::api::model::Event`), and a
//! VEE's console over a WebSocket (binary frames both ways: what the guest
//! writes, what is typed; a relay's notice as a text frame), relayed by
//! the VMI's console handler with the session's role. A WebSocket's
//! handshake must come from the console's own pages (its `Origin` is the
//! console's), besides the session cookie (`SameSite=Strict`).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use interfaces::vmi::vmi_service_server::VmiService as _;
use interfaces::vmi::{self};

use super::pages::EventFilter;
use super::{call, page_error, refused, Web};
use crate::api::model::Event;

/// Events of the history a stream starts with, at most.
const HISTORY: i32 = 200;

/// `GET /events/stream?service=ID&kind=KIND`: every event the caller may
/// see (the latest [`HISTORY`] first), those of `kind` only when given.
pub(super) async fn events(State(web): State<Arc<Web>>, headers: HeaderMap, Query(f): Query<EventFilter>) -> Response {
    let c = match web.ctx(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    // The live stream first (nothing is missed), then the newest page of
    // the stored events (never the whole log).
    let watch = vmi::WatchEventsRequest {
        service_id: f.service.clone(),
        history_only: false,
    };
    let live = match c.vmi.watch_events(call(&c.session, watch)).await {
        Ok(s) => s.into_inner(),
        Err(s) => return refused(s),
    };
    let newest = vmi::ListEventsRequest {
        service_id: f.service.clone(),
        page_size: HISTORY,
        latest: true,
        ..Default::default()
    };
    let past = match c.vmi.list_events(call(&c.session, newest)).await {
        Ok(r) => r.into_inner().events.into_iter().map(Ok),
        Err(s) => return refused(s),
    };
    // An event stored after the live stream began is in both: once.
    let mut last_past = 0;
    let past: Vec<_> = past
        .inspect(|e: &Result<vmi::Event, tonic::Status>| last_past = e.as_ref().map_or(0, |e| e.seq))
        .collect();
    let live = live.filter(move |e| std::future::ready(e.as_ref().map_or(true, |e| e.seq == 0 || e.seq > last_past)));
    let kind = f.kind;
    let events = futures::stream::iter(past).chain(live).filter_map(move |e| {
        let keep = e.as_ref().ok().filter(|e| kind.is_empty() || e.kind == kind).map(Event::from);
        std::future::ready(keep.map(|e| SseEvent::default().json_data(e)))
    });
    // The stream ends with its session (a logout, idle, maximum, evicted).
    let events = events.take_until(session_ends(web.clone(), &headers));
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

/// `GET /vees/{id}/console/ws`: the VEE's console over a WebSocket.
pub(super) async fn console(State(web): State<Arc<Web>>, headers: HeaderMap, Path(id): Path<String>, ws: WebSocketUpgrade) -> Response {
    let c = match web.ctx(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if !same_origin(&headers) {
        return page_error(
            StatusCode::FORBIDDEN,
            "a console's WebSocket is opened from the console's own pages",
        );
    }
    let Some(slot) = web.console_slot(&c.session.token) else {
        return page_error(StatusCode::TOO_MANY_REQUESTS, "too many consoles open: close one first");
    };
    let (keys, typed) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let input = Box::pin(tokio_stream::wrappers::ReceiverStream::new(typed));
    let shown = match c.vmi.console_for(&c.session.role, &id, false, input).await {
        Ok(s) => s,
        Err(s) => return refused(s),
    };
    let ends = session_ends(web.clone(), &headers);
    // Messages past the bound are refused by the WebSocket itself, before
    // they are buffered whole.
    ws.max_message_size(MAX_FRAME)
        .max_frame_size(MAX_FRAME)
        .on_upgrade(move |socket| async move {
            relay(socket, shown, keys, ends).await;
            drop(slot);
        })
        .into_response()
}

/// Whether the request's `Origin` is the console itself (`https://` and
/// its `Host`).
fn same_origin(headers: &HeaderMap) -> bool {
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    matches!((origin, host), (Some(o), Some(h)) if o == format!("https://{h}"))
}

/// Bytes of one WebSocket message the console takes (64 KiB, as a VMI
/// request's `data`).
const MAX_FRAME: usize = crate::api::server::CONSOLE_MAX_INPUT;

/// How often a stream looks whether its session still lives (ended by a
/// logout, `session_idle`, `session_max` or eviction).
const SESSION_CHECK: Duration = Duration::from_secs(2);

/// A console WebSocket is pinged this often; a browser that answers no
/// ping for three of them, or takes longer than one to take a message,
/// is gone (its slot is freed).
const PING: Duration = Duration::from_secs(10);

/// Resolves when the session of `headers`' cookie no longer lives.
fn session_ends(web: Arc<Web>, headers: &HeaderMap) -> impl std::future::Future<Output = ()> + Send + 'static {
    let id = super::session::cookie(headers, super::session::COOKIE).unwrap_or_default();
    async move {
        while web.sessions.is_live(&id) {
            tokio::time::sleep(SESSION_CHECK).await;
        }
    }
}

async fn relay(
    socket: WebSocket,
    mut shown: super::super::server::ConsoleStream,
    keys: tokio::sync::mpsc::Sender<Vec<u8>>,
    ends: impl std::future::Future<Output = ()>,
) {
    let (mut to_browser, mut from_browser) = socket.split();
    tokio::pin!(ends);
    let mut ping = tokio::time::interval(PING);
    let mut answered = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = &mut ends => break,
            _ = ping.tick() => {
                let sent = tokio::time::timeout(PING, to_browser.send(Message::Ping(Vec::new().into()))).await;
                if !matches!(sent, Ok(Ok(()))) || answered.elapsed() > 3 * PING { break }
            }
            m = from_browser.next() => match m {
                Some(Ok(Message::Binary(b))) if b.len() <= MAX_FRAME => {
                    if keys.send(b.into()).await.is_err() { break }
                }
                Some(Ok(Message::Text(t))) if t.len() <= MAX_FRAME => {
                    if keys.send(t.as_str().as_bytes().to_vec()).await.is_err() { break }
                }
                Some(Ok(Message::Pong(_))) => answered = tokio::time::Instant::now(),
                Some(Ok(Message::Ping(_))) => {}
                _ => break,
            },
            o = shown.next() => match o {
                Some(Ok(m)) => {
                    let data = if m.notice.is_empty() { m.data } else { format!("\r\n[{}]\r\n", m.notice).into_bytes() };
                    let sent = tokio::time::timeout(PING, to_browser.send(Message::Binary(data.into()))).await;
                    if !matches!(sent, Ok(Ok(()))) { break }
                }
                _ => break,
            },
        }
    }
    let _ = to_browser.send(Message::Close(None)).await;
}
