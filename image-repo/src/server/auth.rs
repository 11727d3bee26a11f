//! Who is calling, and what it may do with a blob (issue 13 S3).
//!
//! Every call but health carries `Authorization: Bearer TOKEN`. The token
//! names a [`Caller`]: the operator (`token` of the configuration), or one
//! of `[[tokens]]` — a site (its VEEM and VEEHs) or a service provider.
//! A blob belongs to the caller that pushed its content first; the rules
//! are in [`Caller::may_read`] and [`Caller::may_manage`].

use axum::http::{header, HeaderMap};
use interfaces::repo_client::{BlobMeta, OPERATOR};

use super::config::Config;
pub use super::config::Role;
use super::error::ApiError;

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Its name (`operator`, a site ID, a provider ID), which owners and
    /// readers of blobs hold.
    pub name: String,
    /// What it may do.
    pub role: Role,
}

impl Caller {
    /// The operator.
    pub fn operator() -> Self {
        Self {
            name: OPERATOR.into(),
            role: Role::Operator,
        }
    }

    /// Whether the caller may read `m` (download, metadata, list, pin):
    /// the operator, the owner, a reader, anyone if public.
    pub fn may_read(&self, m: &BlobMeta) -> bool {
        self.role == Role::Operator || m.public || m.owner == self.name || m.readers.iter().any(|r| r == &self.name)
    }

    /// Whether the caller may delete `m` or share it: the operator and the
    /// owner (sites also share what they may read: see the route).
    pub fn may_manage(&self, m: &BlobMeta) -> bool {
        self.role == Role::Operator || m.owner == self.name
    }

    /// `m` as this caller sees it: the readers only for its manager.
    pub fn view(&self, mut m: BlobMeta) -> BlobMeta {
        if !self.may_manage(&m) {
            m.readers.clear();
        }
        m
    }

    /// `m` if the caller may read it; else 404 as if it did not exist, so
    /// that IDs of others' blobs cannot be probed.
    pub fn readable(&self, m: Option<BlobMeta>, id: &interfaces::BlobId) -> Result<BlobMeta, ApiError> {
        m.filter(|m| self.may_read(m)).ok_or_else(|| ApiError::not_found(id))
    }
}

/// The caller `token` names, if any (compared in constant time with
/// every known token's digest).
pub fn caller_of(config: &Config, token: &str) -> Option<Caller> {
    match interfaces::tokens::find(token, &config.digests)? {
        0 => Some(Caller::operator()),
        i => {
            let t = &config.tokens[i - 1];
            Some(Caller {
                name: t.name.clone(),
                role: t.role,
            })
        }
    }
}

/// The service provider named `name`, if a token speaks for one.
pub fn provider(config: &Config, name: &str) -> Option<Caller> {
    config
        .tokens
        .iter()
        .find(|t| t.role == Role::Provider && t.name == name)
        .map(|t| Caller {
            name: t.name.clone(),
            role: t.role,
        })
}

/// The caller a request's `Authorization` header names: `Bearer TOKEN`,
/// or `Basic` with the token as password and any user name (as
/// `skopeo --creds NAME:TOKEN` and `oras login -u NAME -p TOKEN` send it).
/// Errors: 401 saying whether the token is missing, malformed or unknown.
pub fn caller(config: &Config, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(ApiError::unauthorized(
            "this repository needs a token (Authorization: Bearer TOKEN, or Basic with the token as password)",
        ));
    };
    let token =
        value.to_str().ok().and_then(token_of).ok_or_else(|| {
            ApiError::unauthorized("the Authorization header is neither `Bearer TOKEN` nor `Basic` with a token as password")
        })?;
    caller_of(config, &token).ok_or_else(|| ApiError::unauthorized("the token is not known to this repository"))
}

/// Whether `headers` carry a token this repository knows (hashed and
/// compared in constant time, as [`caller`] does).
pub fn known(config: &Config, headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(token_of)
        .is_some_and(|t| caller_of(config, &t).is_some())
}

/// The token of an `Authorization` header's value, if it has the form
/// of one (`Bearer TOKEN`, or `Basic base64(USER:TOKEN)`).
fn token_of(value: &str) -> Option<String> {
    let (scheme, rest) = value.split_once(' ')?;
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.trim().to_string());
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD.decode(rest.trim()).ok()?;
    let pair = String::from_utf8(raw).ok()?;
    let (_user, token) = pair.split_once(':')?;
    Some(token.to_string())
}

/// [`caller`], which must have `role`. Errors: 401; 403 naming the role.
pub fn caller_as(config: &Config, headers: &HeaderMap, roles: &[Role], doing: &str) -> Result<Caller, ApiError> {
    let c = caller(config, headers)?;
    if roles.contains(&c.role) {
        Ok(c)
    } else {
        Err(ApiError::forbidden(format!("{} ({:?}) may not {doing}", c.name, c.role)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use interfaces::repo_client::BlobKind;
    use interfaces::BlobId;

    fn config() -> Config {
        let text = "data = \"/nonexistent\"\ntoken = \"operator-token\"\ninsecure = true\n\
            [[tokens]]\nname = \"acme\"\nrole = \"provider\"\ntoken = \"acme-token\"\n\
            [[tokens]]\nname = \"site-a\"\nrole = \"site\"\ntoken_sha256 = \"HASH\"\n"
            .replace("HASH", &interfaces::tokens::digest_hex("site-a-token"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("repo.toml");
        std::fs::write(&file, text).unwrap();
        Config::load(Some(&file), Default::default()).unwrap()
    }

    fn bearer(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {t}")).unwrap());
        h
    }

    fn blob(owner: &str) -> BlobMeta {
        BlobMeta {
            id: BlobId::of(b"x"),
            name: "x".into(),
            kind: BlobKind::CheckpointMemory,
            format: None,
            size: 1,
            created: chrono::Utc::now(),
            labels: Default::default(),
            pins: vec![],
            owner: owner.into(),
            public: false,
            readers: vec!["site-b".into()],
        }
    }

    #[test]
    fn tokens_name_callers() {
        let c = config();
        assert_eq!(caller(&c, &bearer("operator-token")).unwrap(), Caller::operator());
        assert_eq!(caller(&c, &bearer("acme-token")).unwrap().name, "acme");
        let site = caller(&c, &bearer("site-a-token")).unwrap();
        assert_eq!((site.name.as_str(), site.role), ("site-a", Role::Site));
        assert!(caller(&c, &bearer("other-token")).is_err());
        let basic = |user_token: &str| {
            use base64::Engine as _;
            let mut h = HeaderMap::new();
            let v = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(user_token));
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(&v).unwrap());
            h
        };
        assert_eq!(caller(&c, &basic("anyone:acme-token")).unwrap().name, "acme");
        assert!(caller(&c, &basic("acme:wrong")).is_err());
        assert!(caller(&c, &basic("acme-token")).is_err());
        assert!(caller(&c, &HeaderMap::new()).is_err());
        let e = caller_as(&c, &bearer("acme-token"), &[Role::Operator], "mark blobs public").unwrap_err();
        assert_eq!(e.status(), axum::http::StatusCode::FORBIDDEN);
    }

    #[test]
    fn owners_readers_and_public() {
        let c = config();
        let acme = caller(&c, &bearer("acme-token")).unwrap();
        let site_a = caller(&c, &bearer("site-a-token")).unwrap();
        let site_b = Caller {
            name: "site-b".into(),
            role: Role::Site,
        };
        let mut m = blob("site-a");
        assert!(site_a.may_read(&m) && site_a.may_manage(&m));
        assert!(site_b.may_read(&m) && !site_b.may_manage(&m));
        assert!(!acme.may_read(&m));
        assert!(Caller::operator().may_read(&m) && Caller::operator().may_manage(&m));
        assert!(site_b.view(m.clone()).readers.is_empty());
        assert_eq!(site_a.view(m.clone()).readers, ["site-b"]);
        m.public = true;
        assert!(acme.may_read(&m) && !acme.may_manage(&m));
    }
}
