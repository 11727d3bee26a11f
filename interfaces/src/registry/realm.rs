//! Where a registry's credentials may go. A registry that signs clients in
//! with tokens names its token service in the challenge of `/v2/`
//! (`WWW-Authenticate: Bearer realm="https://auth.example.com/token"`),
//! and oci-client sends the registry's Basic credentials to that realm,
//! whatever it is: over plain HTTP, or to another host. So before a call
//! with credentials, the challenge is read here (with the registry's own
//! client: HTTPS only, its CA) and its realm must be an `https://` URL on
//! the registry's host, or on one of its `realm_hosts`; else the call is
//! refused, naming the realm and the reason, and the credentials are not
//! sent. A checked realm is trusted for [`RECHECK`].
//!
//! What this does not stop: a registry that answers this check with one
//! challenge and oci-client's own request with another. Such a registry is
//! hostile, and could as well ask for the credentials itself (a Basic
//! challenge); what is stopped is a registry, honest or misconfigured,
//! sending them in clear or to a third party.

use std::time::{Duration, Instant};

use oci_client::secrets::RegistryAuth;
use reqwest::header::WWW_AUTHENTICATE;

use super::{registry_err, Entry};
use crate::error::Result;

/// How long a registry's checked realm is trusted before it is read again.
pub const RECHECK: Duration = Duration::from_secs(600);

impl Entry {
    /// The credentials to hand oci-client, once the registry's token realm
    /// (if it names one) is one they may go to. Anonymous access needs no
    /// check. Errors: [`crate::error::Error::Registry`], the challenge
    /// unreadable or its realm refused (naming it and why).
    pub(crate) async fn signed_in(&self) -> Result<&RegistryAuth> {
        if matches!(self.auth, RegistryAuth::Anonymous) {
            return Ok(&self.auth);
        }
        let mut checked = self.realm_checked.lock().await;
        if checked.is_some_and(|at| at.elapsed() < RECHECK) {
            return Ok(&self.auth);
        }
        let host = &self.config.host;
        let url = format!("https://{host}/v2/");
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| registry_err(host, "token realm", format!("GET {url}: {}", crate::error::chain(&e))))?;
        for value in resp.headers().get_all(WWW_AUTHENTICATE) {
            let value = String::from_utf8_lossy(value.as_bytes());
            for realm in bearer_realms(&value) {
                allowed(&realm, host, &self.config.realm_hosts)
                    .map_err(|why| registry_err(host, "token realm", format!("{realm:?}: {why}; the credentials were not sent")))?;
            }
        }
        *checked = Some(Instant::now());
        Ok(&self.auth)
    }
}

/// The realms of the `Bearer` challenges in a `WWW-Authenticate` value
/// (`Bearer realm="...",service="..."`, possibly after other challenges).
pub fn bearer_realms(value: &str) -> Vec<String> {
    let mut realms = Vec::new();
    let mut bearer = false;
    for part in split_params(value) {
        let part = part.trim();
        // A part starting a challenge: `SCHEME` or `SCHEME name=value`.
        let param = match part.split_once(' ') {
            Some((scheme, rest)) if !scheme.contains('=') => {
                bearer = scheme.eq_ignore_ascii_case("bearer");
                rest.trim()
            }
            _ if !part.contains('=') => {
                bearer = part.eq_ignore_ascii_case("bearer");
                continue;
            }
            _ => part,
        };
        if let Some((name, v)) = param.split_once('=') {
            if bearer && name.trim().eq_ignore_ascii_case("realm") {
                realms.push(unquote(v.trim()));
            }
        }
    }
    realms
}

/// `value` split at the commas outside quoted strings.
fn split_params(value: &str) -> Vec<String> {
    let (mut parts, mut cur, mut quoted, mut escaped) = (Vec::new(), String::new(), false, false);
    for c in value.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    parts.push(cur);
    parts
}

/// A parameter's value without its quotes and escapes.
fn unquote(v: &str) -> String {
    let Some(inner) = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return v.to_string();
    };
    let mut out = String::new();
    let mut escaped = false;
    for c in inner.chars() {
        if c == '\\' && !escaped {
            escaped = true;
            continue;
        }
        escaped = false;
        out.push(c);
    }
    out
}

/// Whether the credentials of `registry` (`host[:port]`) may go to
/// `realm`: an `https://` URL whose host and port are the registry's, or
/// one of `realm_hosts` (`host[:port]`; the port 443 when not given).
/// Errors: why not.
pub fn allowed(realm: &str, registry: &str, realm_hosts: &[String]) -> std::result::Result<(), String> {
    let url = reqwest::Url::parse(realm).map_err(|e| format!("not a URL ({e})"))?;
    if url.scheme() != "https" {
        return Err(format!(
            "the token realm is {}, not https: the registry's credentials would cross the network in clear",
            url.scheme()
        ));
    }
    let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    let port = url.port_or_known_default().unwrap_or(443);
    let same = |h: &String| authority(h).is_some_and(|(name, p)| name.eq_ignore_ascii_case(host) && p == port);
    if same(&registry.to_string()) || realm_hosts.iter().any(same) {
        return Ok(());
    }
    Err(format!(
        "the token realm is on {host}:{port}, not on the registry's host: list it in the registry's `realm_hosts` if it is the registry's token service"
    ))
}

/// `host[:port]` as its host (IPv6 without brackets) and port (443 when
/// not given).
fn authority(s: &str) -> Option<(String, u16)> {
    let url = reqwest::Url::parse(&format!("https://{s}/")).ok()?;
    let host = url.host_str()?.trim_start_matches('[').trim_end_matches(']').to_string();
    Some((host, url.port_or_known_default()?))
}

#[cfg(test)]
mod tests;
