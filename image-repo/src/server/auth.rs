//! Bearer-token access control: the write token for push, delete and pins;
//! reads open or token-protected by configuration.

use axum::http::{header, HeaderMap};

use super::config::Config;
use super::error::ApiError;

/// What a request wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Download, metadata, list.
    Read,
    /// Push, delete, pin, unpin.
    Write,
}

/// Checks the `Authorization: Bearer` header of a request for `access`.
/// Errors: 401 saying whether the token is missing or wrong.
pub fn require(config: &Config, headers: &HeaderMap, access: Access) -> Result<(), ApiError> {
    if access == Access::Read && !config.protect_reads {
        return Ok(());
    }
    let what = match access {
        Access::Read => "reading from this repository",
        Access::Write => "writing to this repository",
    };
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(ApiError::unauthorized(format!(
            "{what} needs a bearer token (Authorization: Bearer TOKEN)"
        )));
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| ApiError::unauthorized("the Authorization header is not `Bearer TOKEN`"))?
        .trim();
    let mut ok = constant_time_eq(token.as_bytes(), config.token.as_bytes());
    if access == Access::Read {
        for read in &config.read_tokens {
            ok |= constant_time_eq(token.as_bytes(), read.as_bytes());
        }
    }
    if ok {
        Ok(())
    } else {
        Err(ApiError::unauthorized(format!("the bearer token is not valid for {what}")))
    }
}

/// Compares without an early exit on the first differing byte, so the time
/// taken does not tell how much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn config(protect_reads: bool) -> Config {
        Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            data: "/nonexistent".into(),
            token: "write-token".into(),
            protect_reads,
            read_tokens: vec!["read-token".into()],
            max_bytes: None,
            reserve_bytes: 0,
            max_connections: 1,
            header_timeout_s: 1,
            body_idle_timeout_s: 1,
            min_upload_bytes_per_s: 1,
            tls: None,
            insecure: true,
        }
    }

    fn bearer(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {t}")).unwrap());
        h
    }

    #[test]
    fn write_needs_the_write_token() {
        let c = config(false);
        assert!(require(&c, &bearer("write-token"), Access::Write).is_ok());
        assert!(require(&c, &bearer("read-token"), Access::Write).is_err());
        assert!(require(&c, &HeaderMap::new(), Access::Write).is_err());
        assert!(require(&c, &HeaderMap::new(), Access::Read).is_ok());
    }

    #[test]
    fn protected_reads_accept_read_and_write_tokens() {
        let c = config(true);
        assert!(require(&c, &HeaderMap::new(), Access::Read).is_err());
        assert!(require(&c, &bearer("read-token"), Access::Read).is_ok());
        assert!(require(&c, &bearer("write-token"), Access::Read).is_ok());
        assert!(require(&c, &bearer("other"), Access::Read).is_err());
    }
}
