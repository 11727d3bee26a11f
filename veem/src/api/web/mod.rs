//! The web console (`[web]`): pages for operators and providers, served by
//! the VEEM over HTTPS with the VMI's certificate, on a listener of its own
//! within the VMI's `[listener]` limits. Every page and action calls the
//! VMI's handlers in-process with the session's token (as REST does), so
//! that what a user may see and do is the VMI's rule, and the records are
//! shown in the CLI's JSON shapes (`crate::api::model`):
//!
//! - **Site** (operator): hosts with health, accelerator, capacity and
//!   what is reserved now; peers with their agreements; the control plane.
//! - **Reservations** (operator): each host's reservations over the
//!   planning horizon as a server-drawn SVG timeline (`svg`), failed hosts
//!   and their blocked interval marked.
//! - **Services** and a service's VEEs: state, addresses, latest
//!   checkpoint, guarantee, violations, CPU use over time.
//! - **Migrations**: proposals with Approve and Reject-with-a-reason
//!   (VMI ApproveMigration, RejectMigration), the table refreshed every
//!   2 s (htmx).
//! - **Events**: the live stream (Server-Sent Events from VMI
//!   WatchEvents), filtered by service and kind.
//! - **A VEE's console**: xterm.js over a WebSocket, relayed by the VMI's
//!   console handler (`live`).
//!
//! Logins and sessions: `session`. Front-end packages (htmx, xterm.js)
//! are vendored from npm (`veem/web/package-lock.json`, `vendor/`) and
//! served from the binary; nothing is fetched at run time. Every answer
//! carries a Content-Security-Policy of `'self'` only, and refuses
//! framing.

// A page's error is an axum `Response` (an error page, or a redirect to
// the login), as its handlers return it: large, and axum's to size.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use tonic::Code;

use super::front::Acting;
use super::server::VmiService;
use crate::config::WebConfig;
use crate::manager::Veem;

mod live;
mod pages;
pub mod session;
mod svg;
pub use svg::timeline;

use session::{Session, Sessions};

/// The web console's state: the VEEM acting for the site (none while it
/// starts or stands by), the sessions, failed logins per address.
pub struct Web {
    acting: Acting,
    sessions: Sessions,
    throttle: interfaces::auth_throttle::AuthThrottle,
    /// Console WebSockets open, in all and per token (an upgraded
    /// connection leaves the listener's count: these are its limits).
    consoles: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

/// Console WebSockets open at once, in all.
pub const MAX_CONSOLES: usize = 64;
/// Console WebSockets open at once with one token, whatever its sessions
/// (a token has several: [`session::SESSIONS_PER_TOKEN`]), so that one
/// user cannot take them all.
pub const MAX_CONSOLES_PER_TOKEN: usize = 8;

/// A console WebSocket counted while it lives.
pub(crate) struct ConsoleSlot {
    web: Arc<Web>,
    token: String,
}

impl Drop for ConsoleSlot {
    fn drop(&mut self) {
        let mut open = self.web.consoles.lock().unwrap();
        if let Some(n) = open.get_mut(&self.token) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.token);
            }
        }
    }
}

impl Web {
    /// A slot for one more console WebSocket of a session of `token`
    /// (its VMI token); `None` over [`MAX_CONSOLES`] or
    /// [`MAX_CONSOLES_PER_TOKEN`].
    pub(crate) fn console_slot(self: &Arc<Self>, token: &str) -> Option<ConsoleSlot> {
        let mut open = self.consoles.lock().unwrap();
        let total: usize = open.values().sum();
        let mine = open.get(token).copied().unwrap_or(0);
        if total >= MAX_CONSOLES || mine >= MAX_CONSOLES_PER_TOKEN {
            return None;
        }
        open.insert(token.to_string(), mine + 1);
        Some(ConsoleSlot {
            web: self.clone(),
            token: token.to_string(),
        })
    }
}

/// A request's user and the VEEM acting for the site.
pub(crate) struct Ctx {
    pub session: Session,
    pub veem: Arc<Veem>,
    pub vmi: Arc<VmiService>,
}

impl Web {
    pub fn new(cfg: &WebConfig, acting: Acting, limits: &interfaces::connections::ListenerLimits) -> Arc<Self> {
        Arc::new(Self {
            acting,
            sessions: Sessions::new(cfg.session_idle, cfg.session_max),
            throttle: interfaces::auth_throttle::AuthThrottle::new(limits.auth_failures_burst, limits.auth_failure_interval),
            consoles: Default::default(),
        })
    }

    /// The request's session and the acting VEEM. Errors: no session (to
    /// the login page), no VEEM acting here (503).
    pub(crate) fn ctx(&self, headers: &HeaderMap) -> Result<Ctx, Response> {
        self.ctx_of(self.sessions.of(headers))
    }

    /// [`Web::ctx`] for what a page polls by itself (the migrations
    /// table): the session's last use stays as it was, so that an
    /// unattended page does not keep it alive past `session_idle`.
    pub(crate) fn polled_ctx(&self, headers: &HeaderMap) -> Result<Ctx, Response> {
        self.ctx_of(self.sessions.of_untouched(headers))
    }

    fn ctx_of(&self, session: Option<Session>) -> Result<Ctx, Response> {
        let session = session.ok_or_else(|| Redirect::to("/login").into_response())?;
        let (veem, front) = self.acting.get().ok_or_else(|| {
            page_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no VEEM acts for the site here now (it starts, or stands by)",
            )
        })?;
        Ok(Ctx {
            session,
            veem,
            vmi: front.handlers(),
        })
    }
}

/// `msg` as a VMI call with the session's token.
pub(crate) fn call<T>(s: &Session, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Ok(v) = format!("Bearer {}", s.token).parse() {
        r.metadata_mut().insert("authorization", v);
    }
    r
}

/// The web console's router (see the module doc).
pub fn router(web: Arc<Web>) -> Router {
    Router::new()
        .route("/login", get(session_routes::login_form).post(session_routes::login))
        .route("/logout", post(session_routes::logout))
        .route("/", get(pages::home))
        .route("/site", get(pages::site))
        .route("/reservations", get(pages::reservations))
        .route("/services", get(pages::services))
        .route("/services/{id}", get(pages::service))
        .route("/migrations", get(pages::migrations))
        .route("/migrations/table", get(pages::migrations_table))
        .route("/migrations/{id}/approve", post(pages::approve))
        .route("/migrations/{id}/reject", post(pages::reject))
        .route("/events", get(pages::events))
        .route("/events/stream", get(live::events))
        .route("/vees/{id}/console", get(pages::console))
        .route("/vees/{id}/console/ws", get(live::console))
        .route("/assets/{name}", get(asset))
        .fallback(|| async { page_error(StatusCode::NOT_FOUND, "no such page") })
        .with_state(web)
        .layer(axum::middleware::from_fn(headers))
}

mod session_routes;

/// The security headers of every answer.
async fn headers(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

/// The front-end files, from the binary.
const ASSETS: &[(&str, &str, &[u8])] = &[
    ("htmx.min.js", "text/javascript", include_bytes!("../../../web/vendor/htmx.min.js")),
    ("xterm.js", "text/javascript", include_bytes!("../../../web/vendor/xterm.js")),
    ("xterm.css", "text/css", include_bytes!("../../../web/vendor/xterm.css")),
    (
        "addon-attach.js",
        "text/javascript",
        include_bytes!("../../../web/vendor/addon-attach.js"),
    ),
    (
        "addon-fit.js",
        "text/javascript",
        include_bytes!("../../../web/vendor/addon-fit.js"),
    ),
    ("console.js", "text/javascript", include_bytes!("../../../web/console.js")),
    ("events.js", "text/javascript", include_bytes!("../../../web/events.js")),
    ("app.css", "text/css", include_bytes!("../../../web/app.css")),
];

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, ..)| *n == name) {
        Some((_, kind, body)) => (
            [(header::CONTENT_TYPE, *kind), (header::CACHE_CONTROL, "private, max-age=3600")],
            *body,
        )
            .into_response(),
        None => page_error(StatusCode::NOT_FOUND, "no such asset"),
    }
}

/// An error page with `status`.
pub(crate) fn page_error(status: StatusCode, message: &str) -> Response {
    let body = pages::ErrorPage {
        status: status.as_u16(),
        message,
    };
    (status, pages::html(&body)).into_response()
}

/// A VMI refusal as an error page: PermissionDenied 403, NotFound 404,
/// InvalidArgument and FailedPrecondition 400, Unavailable 503, else 500.
pub(crate) fn refused(s: tonic::Status) -> Response {
    let status = match s.code() {
        Code::PermissionDenied | Code::Unauthenticated => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::InvalidArgument | Code::FailedPrecondition | Code::AlreadyExists => StatusCode::BAD_REQUEST,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    page_error(status, s.message())
}

/// Serves `web` on `listener` over TLS with the site's identity `tls`
/// (HTTP/1.1) within `limits` until `stop`. Errors: the certificate or
/// key cannot be read.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: &interfaces::tls::SiteIdentity,
    limits: interfaces::connections::ListenerLimits,
    web: Arc<Web>,
    stop: impl std::future::Future<Output = ()>,
    grace: Duration,
) -> anyhow::Result<()> {
    let acceptor = interfaces::tls::http1_acceptor(&tls.cert, &tls.key)?;
    interfaces::connections::serve(listener, Some(acceptor), limits, router(web), stop, grace).await
}

#[cfg(test)]
mod tests;
