//! The web console's sessions: a login with a VMI token (an operator's or
//! a provider's; a peer's is refused) makes a session whose ID, 256 random
//! bits, is the cookie `__Host-veem_session` (`HttpOnly`, `Secure`,
//! `SameSite=Strict`, `Path=/`, no `Domain`: the `__Host-` prefix makes
//! browsers refuse it from a sibling host or over plain HTTP, so that
//! neither can plant a session or a login form's token). Sessions live in memory: they end after
//! `[web] session_idle` without a request, `session_max` after the login,
//! at a logout, and when the VEEM restarts. Every form and every request
//! that changes something carries the session's CSRF token (a hidden
//! field `csrf`, or the header `X-CSRF-Token` htmx sends); the login form
//! its own, double-submitted (the cookie `__Host-veem_login` and the
//! field; an empty one is no token).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};

use crate::config::Role;

/// The session cookie's name.
pub const COOKIE: &str = "__Host-veem_session";
/// The login form's CSRF cookie.
pub const LOGIN_COOKIE: &str = "__Host-veem_login";
/// The header a request that changes something carries its CSRF token in
/// (or the form field `csrf`).
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Sessions at most: a login beyond it drops the oldest.
const MAX_SESSIONS: usize = 10_000;
/// Sessions of one token at most: a login beyond it drops that token's
/// least recently used, so that a client logging in over and over only
/// ever pushes out its own sessions, never another user's.
pub const SESSIONS_PER_TOKEN: usize = 16;

/// A logged-in user.
#[derive(Clone, Debug)]
pub struct Session {
    pub role: Role,
    /// The VMI token it logged in with: every call it makes carries it,
    /// so the VMI's handlers check it as for any client.
    pub token: String,
    /// Its CSRF token.
    pub csrf: String,
    started: Instant,
    seen: Instant,
}

/// The sessions by ID.
pub struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
    idle: Duration,
    max: Duration,
}

/// 256 random bits, hex (from the OS's generator, through UUIDs v4).
pub fn random_token() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

impl Sessions {
    pub fn new(idle: Duration, max: Duration) -> Self {
        Self {
            by_id: Mutex::default(),
            idle,
            max,
        }
    }

    /// A new session of `role` with `token`: its ID.
    pub fn start(&self, role: Role, token: String) -> String {
        let now = Instant::now();
        let id = random_token();
        let mut all = self.by_id.lock().unwrap();
        all.retain(|_, s| self.alive(s, now));
        let oldest = |all: &HashMap<String, Session>, of_token: bool| {
            all.iter()
                .filter(|(_, s)| !of_token || s.token == token)
                .min_by_key(|(_, s)| s.seen)
                .map(|(k, _)| k.clone())
        };
        if all.values().filter(|s| s.token == token).count() >= SESSIONS_PER_TOKEN {
            if let Some(id) = oldest(&all, true) {
                all.remove(&id);
            }
        }
        if all.len() >= MAX_SESSIONS {
            if let Some(id) = oldest(&all, false) {
                all.remove(&id);
            }
        }
        all.insert(
            id.clone(),
            Session {
                role,
                token,
                csrf: random_token(),
                started: now,
                seen: now,
            },
        );
        id
    }

    fn alive(&self, s: &Session, now: Instant) -> bool {
        now.duration_since(s.seen) < self.idle && now.duration_since(s.started) < self.max
    }

    /// The live session of the request's cookie, its last use now.
    pub fn of(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let now = Instant::now();
        let mut all = self.by_id.lock().unwrap();
        let alive = all.get(&id).is_some_and(|s| self.alive(s, now));
        if !alive {
            all.remove(&id);
            return None;
        }
        let s = all.get_mut(&id)?;
        s.seen = now;
        Some(s.clone())
    }

    /// The live session of the request's cookie, its last use unchanged.
    pub fn of_untouched(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let now = Instant::now();
        self.by_id.lock().unwrap().get(&id).filter(|s| self.alive(s, now)).cloned()
    }

    /// Whether session `id` lives (its last use unchanged: what a stream
    /// asks while it runs).
    pub fn is_live(&self, id: &str) -> bool {
        let now = Instant::now();
        self.by_id.lock().unwrap().get(id).is_some_and(|s| self.alive(s, now))
    }

    /// Ends the session of the request's cookie.
    pub fn end(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, COOKIE) {
            self.by_id.lock().unwrap().remove(&id);
        }
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// A `Set-Cookie` of `name` (HttpOnly, Secure, SameSite=Strict, Path=/,
/// no Domain: what a `__Host-` name needs), ending it when `value` is
/// empty.
pub fn set_cookie(name: &str, value: &str) -> String {
    let end = if value.is_empty() { "; Max-Age=0" } else { "" };
    format!("{name}={value}; HttpOnly; Secure; SameSite=Strict; Path=/{end}")
}

/// Whether `given` is `expected`, in constant time; never for an empty
/// `expected` (an emptied cookie is no token).
pub fn same(given: &str, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    !expected.is_empty() && given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(id: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, format!("other=1; {COOKIE}={id}").parse().unwrap());
        h
    }

    #[test]
    fn what_a_page_polls_by_itself_does_not_keep_its_session_alive() {
        let s = Sessions::new(Duration::from_millis(200), Duration::from_secs(60));
        let id = s.start(Role::Operator, "t".into());
        for _ in 0..3 {
            assert!(s.of_untouched(&with_cookie(&id)).is_some(), "alive within session_idle");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(150));
        assert!(s.of_untouched(&with_cookie(&id)).is_none(), "polled every 50 ms, yet idle past 200 ms");
        assert!(!s.is_live(&id));
    }

    #[test]
    fn a_session_lives_until_idle_or_ended() {
        let s = Sessions::new(Duration::from_millis(50), Duration::from_secs(60));
        let id = s.start(Role::Operator, "t".into());
        assert_eq!(id.len(), 64);
        let got = s.of(&with_cookie(&id)).unwrap();
        assert_eq!((got.role, got.csrf.len()), (Role::Operator, 64));
        assert!(s.of(&with_cookie("forged")).is_none());
        std::thread::sleep(Duration::from_millis(80));
        assert!(s.of(&with_cookie(&id)).is_none(), "idle too long");
        let id = s.start(Role::Provider("acme".into()), "t".into());
        s.end(&with_cookie(&id));
        assert!(s.of(&with_cookie(&id)).is_none(), "logged out");
    }

    #[test]
    fn a_session_ends_at_its_maximum_whatever() {
        let s = Sessions::new(Duration::from_secs(60), Duration::from_millis(50));
        let id = s.start(Role::Operator, "t".into());
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(20));
            let _ = s.of(&with_cookie(&id));
        }
        assert!(s.of(&with_cookie(&id)).is_none());
    }

    #[test]
    fn logging_in_over_and_over_pushes_out_only_the_same_tokens_sessions() {
        let s = Sessions::new(Duration::from_secs(60), Duration::from_secs(60));
        let operator = s.start(Role::Operator, "operator-token".into());
        let first = s.start(Role::Provider("acme".into()), "acme-token".into());
        let mut last = first.clone();
        for _ in 0..SESSIONS_PER_TOKEN * 4 {
            last = s.start(Role::Provider("acme".into()), "acme-token".into());
        }
        assert!(s.of(&with_cookie(&operator)).is_some(), "another token's session stays");
        assert!(s.of(&with_cookie(&last)).is_some());
        assert!(s.of(&with_cookie(&first)).is_none(), "its own oldest went");
        let acme = s.by_id.lock().unwrap().values().filter(|x| x.token == "acme-token").count();
        assert_eq!(acme, SESSIONS_PER_TOKEN);
    }

    #[test]
    fn cookies_are_strict_and_compared_in_constant_time() {
        assert_eq!(
            set_cookie(COOKIE, "x"),
            "__Host-veem_session=x; HttpOnly; Secure; SameSite=Strict; Path=/"
        );
        assert!(set_cookie(COOKIE, "").ends_with("Max-Age=0"));
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("ab", "abc"));
        assert!(!same("", ""), "an empty token is none");
    }
}
