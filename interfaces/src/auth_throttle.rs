//! Failed authentications slowed down per client address (issue 36): an
//! address may fail `burst` times at once, then once per `interval` (a
//! leaky bucket of failures, as GCRA counts requests). While an address is
//! over its bucket, a server answers its calls with wrong credentials with
//! 429 / RESOURCE_EXHAUSTED and `Retry-After` ([`AuthThrottle::admit`]);
//! right credentials still pass, so that one client sending bad tokens
//! from behind a shared NAT, a proxy or a peer site's egress does not lock
//! out everyone there. Tokens are checked first, hashed and compared in
//! constant time, whatever the bucket says. A right guess thus succeeds
//! at once, even under the throttle: the throttle holds a guesser to
//! `burst` plus one *wrong* guess per `interval`, and the tokens are 128
//! bits or more of randomness, so guessing one stays out of reach.
//! Calls without credentials (health, the API's description) are not held
//! up. IPv6 addresses count by /64 (`connections::peer_key`).
//!
//! A refused request's body is read (up to a bound, [`refuse`]) before
//! its 429 goes out: a client still sending it gets its answer, not a
//! reset connection (HTTP/1.1) or stream (HTTP/2).
//!
//! The table holds at most [`MAX_ADDRESSES`] addresses: when it is full,
//! emptied buckets go first; an address that still finds no room is not
//! tracked (memory stays bounded; the connection limits still hold it).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Addresses tracked at most.
pub const MAX_ADDRESSES: usize = 65_536;

/// The failures of each address; see the module doc.
pub struct AuthThrottle {
    burst: f64,
    interval: Duration,
    table: Mutex<HashMap<IpAddr, Bucket>>,
}

/// Failures not yet leaked away, as of `at`.
#[derive(Clone, Copy)]
struct Bucket {
    level: f64,
    at: Instant,
}

impl AuthThrottle {
    /// `burst` failures at once (at least 1), then one per `interval`.
    pub fn new(burst: u32, interval: Duration) -> Self {
        Self {
            burst: f64::from(burst.max(1)),
            interval: interval.max(Duration::from_millis(1)),
            table: Mutex::default(),
        }
    }

    /// Whether a call from `peer` whose credentials are `valid` (checked
    /// in constant time by the caller, throttled or not) goes on: `None`
    /// when they are right or the address is under its bucket, else
    /// `Some(wait)`, how long until it may try again. A refused call's
    /// failure is not counted again.
    pub fn admit(&self, peer: IpAddr, valid: bool) -> Option<Duration> {
        if valid {
            return None;
        }
        self.check(peer)
    }

    /// `Some(wait)` while `peer` may not try again: how long until it may.
    pub fn check(&self, peer: IpAddr) -> Option<Duration> {
        self.check_at(crate::connections::peer_key(peer), Instant::now())
    }

    /// Counts a failed authentication of `peer`.
    pub fn failed(&self, peer: IpAddr) {
        self.failed_at(crate::connections::peer_key(peer), Instant::now());
    }

    fn level(&self, b: Bucket, now: Instant) -> f64 {
        let leaked = now.saturating_duration_since(b.at).as_secs_f64() / self.interval.as_secs_f64();
        (b.level - leaked).max(0.0)
    }

    fn check_at(&self, peer: IpAddr, now: Instant) -> Option<Duration> {
        let b = *self.table.lock().unwrap().get(&peer)?;
        let over = self.level(b, now) - (self.burst - 1.0);
        (over > 0.0).then(|| self.interval.mul_f64(over))
    }

    fn failed_at(&self, peer: IpAddr, now: Instant) {
        let mut table = self.table.lock().unwrap();
        if table.len() >= MAX_ADDRESSES && !table.contains_key(&peer) {
            table.retain(|_, b| self.level(*b, now) > 0.0);
            if table.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let level = table.get(&peer).map_or(0.0, |b| self.level(*b, now));
        table.insert(
            peer,
            Bucket {
                level: level + 1.0,
                at: now,
            },
        );
    }
}

/// How long a refused request's body is read at most before its answer
/// goes out; and, past [`refuse`]'s bound, read on (and dropped) after it.
pub const DRAIN_TIME: Duration = Duration::from_secs(5);

/// `resp` (a refusal: 429, 401) for `req`, once `req`'s body is read and
/// dropped, at most `limit` bytes within [`DRAIN_TIME`]: a client still
/// sending its body then reads its answer instead of a reset (HTTP/1.1: the
/// server closing a socket with unread bytes; HTTP/2: the stream reset
/// when its body is dropped). A body larger or slower than that: over
/// HTTP/1.1 the answer says `Connection: close` and the rest is read for
/// at most [`DRAIN_TIME`] more while it goes out.
pub async fn refuse(req: axum::extract::Request, limit: u64, mut resp: axum::response::Response) -> axum::response::Response {
    let http1 = req.version() <= axum::http::Version::HTTP_11;
    let mut body = req.into_body();
    if tokio::time::timeout(DRAIN_TIME, drain(&mut body, limit)).await == Ok(true) {
        return resp;
    }
    if http1 {
        resp.headers_mut()
            .insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    tokio::spawn(async move {
        let _ = tokio::time::timeout(DRAIN_TIME, drain(&mut body, u64::MAX)).await;
    });
    resp
}

/// Reads `body` to its end: `true` if it ended within `limit` bytes.
async fn drain(body: &mut axum::body::Body, limit: u64) -> bool {
    use http_body_util::BodyExt;
    let mut read = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { return false };
        if let Some(data) = frame.data_ref() {
            read += data.len() as u64;
            if read > limit {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_failures_then_one_per_interval() {
        let t = AuthThrottle::new(3, Duration::from_secs(1));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(t.check_at(a, t0), None);
            t.failed_at(a, t0);
        }
        let wait = t.check_at(a, t0).expect("over the burst");
        assert_eq!(wait, Duration::from_secs(1));
        assert_eq!(t.check_at(b, t0), None, "another address is not held up");
        let later = t0 + Duration::from_millis(1001);
        assert_eq!(t.check_at(a, later), None, "one more try after the interval");
        t.failed_at(a, later);
        assert!(t.check_at(a, later).is_some());
        assert_eq!(t.check_at(a, t0 + Duration::from_secs(10)), None, "forgotten in time");
    }

    #[test]
    fn right_credentials_pass_a_throttled_address_wrong_ones_wait() {
        let t = AuthThrottle::new(1, Duration::from_secs(60));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(t.admit(a, false), None);
        t.failed(a);
        assert!(t.admit(a, false).is_some());
        assert_eq!(t.admit(a, true), None, "the NAT's other users get in");
    }

    /// A listener whose every answer is a refusal ([`refuse`]) reading at
    /// most `limit` bytes of a body: its address.
    async fn refusing(limit: u64) -> std::net::SocketAddr {
        use axum::http::StatusCode;
        use axum::response::IntoResponse;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| async move {
            refuse(req, limit, (StatusCode::TOO_MANY_REQUESTS, "slow down\n").into_response()).await
        });
        let limits = crate::connections::ListenerLimits::default();
        tokio::spawn(crate::connections::serve(
            listener,
            None,
            limits,
            app,
            std::future::pending(),
            Duration::from_secs(1),
        ));
        addr
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_refused_body_within_the_bound_is_read_and_the_connection_kept() {
        let addr = refusing(2 << 20).await;
        let client = crate::tls::http_client().build().unwrap();
        for i in 0..10 {
            let r = client.post(format!("http://{addr}/x")).body(vec![1u8; 1 << 20]).send().await;
            let r = r.unwrap_or_else(|e| panic!("POST {i}: {e:?}"));
            assert_eq!(r.status(), 429);
            assert!(!r.headers().contains_key("connection"), "kept alive");
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_refused_body_past_the_bound_gets_its_answer_and_connection_close() {
        let addr = refusing(1024).await;
        let client = crate::tls::http_client().build().unwrap();
        for i in 0..10 {
            let r = client.post(format!("http://{addr}/x")).body(vec![1u8; 1 << 20]).send().await;
            let r = r.unwrap_or_else(|e| panic!("POST {i}: {e:?}"));
            assert_eq!(r.status(), 429);
            assert_eq!(r.headers()["connection"], "close");
        }
    }

    #[test]
    fn ipv6_addresses_count_by_their_64() {
        let t = AuthThrottle::new(1, Duration::from_secs(60));
        t.failed("2001:db8:1:2::1".parse().unwrap());
        assert!(t.check("2001:db8:1:2::ffff".parse().unwrap()).is_some());
        assert!(t.check("2001:db8:1:3::1".parse().unwrap()).is_none());
    }

    #[test]
    fn the_table_stays_bounded() {
        let t = AuthThrottle::new(1, Duration::from_secs(3600));
        let now = Instant::now();
        for i in 0..(MAX_ADDRESSES as u32 + 10) {
            t.failed_at(IpAddr::from(i.to_be_bytes()), now);
        }
        assert_eq!(t.table.lock().unwrap().len(), MAX_ADDRESSES);
    }
}
