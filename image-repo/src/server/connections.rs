//! Connections: the repository serves on the daemons' shared listener
//! (`interfaces::connections`, issue 36), whose limits keep slow, idle,
//! stalled and too many clients from taking it down: connections at once
//! and per client address (a newcomer takes an idle connection's slot, so
//! clients that stall cannot hold them all), head, idle and send timeouts,
//! and a stop that cuts what is still open after `shutdown_grace`.
//! Request bodies are watched by the uploads themselves
//! (`upload::Incoming`). Here: TLS, and failed authentications slowed
//! down per address ([`throttle_auth`]).

use std::net::SocketAddr;

use anyhow::Result;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio_rustls::TlsAcceptor;

use super::config::ServerTls;
use super::error::ApiError;
use super::oci::error::{codes, OciError};
use super::AppState;

/// The TLS acceptor of `tls` (rustls, ring). Errors: a file cannot be
/// read or holds no usable certificate or key, naming it.
pub fn acceptor(tls: &ServerTls) -> Result<TlsAcceptor> {
    interfaces::tls::http1_acceptor(&tls.cert, &tls.key)
}

/// Failed authentications slowed down per client address
/// (`interfaces::auth_throttle`; it answered 6,000 wrong tokens a second
/// before issue 39): a request's token is checked first (hashed, compared
/// in constant time); from an address over its bucket, one with a wrong
/// token is answered 429 with `Retry-After` once its body is read (up to
/// `[listener] max_body_size`), one with a right token goes on, so that
/// a client sending bad tokens does not lock out the others behind its
/// NAT or proxy. A 401 counts against the address. Requests without
/// credentials (health, the challenge of `/v2/`) are not held up.
pub async fn throttle_auth(State(app): State<AppState>, req: Request, next: Next) -> Response {
    // In-process calls (the fuzzer) have no address: one unnamed client.
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |c| c.0.ip());
    if !req.headers().contains_key(header::AUTHORIZATION) {
        return next.run(req).await;
    }
    let valid = super::auth::known(&app.config, req.headers());
    if let Some(wait) = app.throttle.admit(peer, valid) {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        let message = format!("too many failed authentications from this address: retry in {secs} s");
        let mut resp = if req.uri().path().starts_with("/v2") {
            OciError::new(StatusCode::TOO_MANY_REQUESTS, codes::TOO_MANY_REQUESTS, message).into_response()
        } else {
            ApiError::too_many_requests(message).into_response()
        };
        resp.headers_mut().insert(header::RETRY_AFTER, secs.into());
        return interfaces::auth_throttle::refuse(req, app.config.listener.max_body_size, resp).await;
    }
    let resp = next.run(req).await;
    if resp.status() == StatusCode::UNAUTHORIZED {
        app.throttle.failed(peer);
    }
    resp
}
