//! Login and logout (`session`): a login form with its own CSRF token, a
//! login with a VMI token (failed ones slowed down per address, as the
//! VMI's; a right one logs in all the same), and a logout that ends the
//! session.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;

use super::pages::{html, LoginPage};
use super::session::{cookie, random_token, same, set_cookie, COOKIE, LOGIN_COOKIE};
use super::{page_error, Web};
use crate::config::Role;

/// `GET /login`: the form, with a fresh CSRF token in it and in its
/// cookie.
pub(super) async fn login_form() -> Response {
    login_page(None, StatusCode::OK)
}

fn login_page(error: Option<&str>, status: StatusCode) -> Response {
    let csrf = random_token();
    let page = LoginPage { csrf: &csrf, error };
    (status, [(header::SET_COOKIE, set_cookie(LOGIN_COOKIE, &csrf))], html(&page)).into_response()
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    // Missing fields are empty: a form without its CSRF token is refused
    // as one with a wrong token (403), a missing user's token as an
    // unknown one (401).
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /login`: a session for an operator's or a provider's token.
pub(super) async fn login(
    State(web): State<Arc<Web>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    // An empty cookie and an empty field are no token (`same` refuses an
    // empty one).
    let form_ok = cookie(&headers, LOGIN_COOKIE).is_some_and(|c| same(&f.csrf, &c));
    if !form_ok {
        return page_error(
            StatusCode::FORBIDDEN,
            "the login form's CSRF token is missing or wrong: load the login page again",
        );
    }
    let Some((veem, _)) = web.acting.get() else {
        return page_error(StatusCode::SERVICE_UNAVAILABLE, "no VEEM acts for the site here now");
    };
    // The token first (hashed, compared in constant time): a right one
    // logs in even from an address whose failures are throttled.
    let token = f.token.trim().to_string();
    let role = veem.core.cfg.role_of(&token);
    let valid = matches!(role, Some(Role::Operator | Role::Provider(_)));
    let addr = peer.map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |c| c.0 .0.ip());
    if let Some(wait) = web.throttle.admit(addr, valid) {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        return login_page(
            Some(&format!("too many failed logins from this address: retry in {secs} s")),
            StatusCode::TOO_MANY_REQUESTS,
        );
    }
    match role {
        Some(role @ (Role::Operator | Role::Provider(_))) => {
            let home = if role == Role::Operator { "/site" } else { "/services" };
            // Audited for the operator (a site event: no provider sees it).
            veem.core.event("", "", "web", format!("login of {role} from {addr}"));
            let id = web.sessions.start(role, token);
            let mut resp = Redirect::to(home).into_response();
            let h = resp.headers_mut();
            h.append(header::SET_COOKIE, set_cookie(COOKIE, &id).parse().expect("a cookie"));
            h.append(header::SET_COOKIE, set_cookie(LOGIN_COOKIE, "").parse().expect("a cookie"));
            resp
        }
        _ => {
            web.throttle.failed(addr);
            login_page(
                Some("unknown token (a peer site's token does not log in here)"),
                StatusCode::UNAUTHORIZED,
            )
        }
    }
}

#[derive(Deserialize)]
pub(super) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /logout`: ends the session (with its CSRF token).
pub(super) async fn logout(State(web): State<Arc<Web>>, headers: HeaderMap, Form(f): Form<CsrfForm>) -> Response {
    if let Some(s) = web.sessions.of(&headers) {
        if !same(&f.csrf, &s.csrf) {
            return page_error(StatusCode::FORBIDDEN, "the form's CSRF token is missing or wrong");
        }
        if let Some((veem, _)) = web.acting.get() {
            veem.core.event("", "", "web", format!("logout of {}", s.role));
        }
    }
    web.sessions.end(&headers);
    let mut resp = Redirect::to("/login").into_response();
    resp.headers_mut()
        .insert(header::SET_COOKIE, set_cookie(COOKIE, "").parse().expect("a cookie"));
    resp
}
