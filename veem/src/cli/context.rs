//! Where the CLI finds its VEEM and its bearer token, never on the command
//! line (where `ps` shows it to every user of the machine): flags and the
//! environment first, then the current context of the client configuration,
//! in the style of kubeconfig.
//!
//! ```toml
//! # $VEEM_CLIENT_CONFIG, or $XDG_CONFIG_HOME/veem/config.toml, or
//! # ~/.config/veem/config.toml
//! current_context = "acme@site-a"
//! [[contexts]]
//! name = "acme@site-a"
//! endpoint = "https://10.77.0.1:7200"
//! ca = "/var/lib/vee-lab/pki/site-a/vmi-ca.crt"  # the CA of the VEEM's certificate
//! token_file = "/root/.config/veem/acme.token"   # or token = "..."
//! ```
//!
//! Endpoint: `--endpoint` / `VEEM_ENDPOINT`, else the context's, else
//! [`super::DEFAULT_ENDPOINT`]. Token: `--token-file` / `VEEM_TOKEN_FILE`,
//! else `VEEM_TOKEN`, else the context's `token_file` or `token`, else none.
//! CA (for an `https://` endpoint): `--ca` / `VEEM_CA`, else the context's.
//! Context: `--context` / `VEEM_CONTEXT`, else `current_context`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::Deserialize;

use super::GlobalOpts;

/// The client configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// The context used when none is named.
    #[serde(default)]
    pub current_context: Option<String>,
    #[serde(default)]
    pub contexts: Vec<Context>,
}

/// A VEEM and the identity to use there.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    pub name: String,
    #[serde(default)]
    pub endpoint: Option<String>,
    /// A file holding the token (first line).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The token itself (keep the file mode 0600).
    #[serde(default)]
    pub token: Option<String>,
    /// The CA (PEM file) that signed the VEEM's certificate.
    #[serde(default)]
    pub ca: Option<PathBuf>,
}

/// Where a command goes, with which token, trusting which CA.
#[derive(Debug, PartialEq, Eq)]
pub struct Target {
    pub endpoint: String,
    pub token: Option<String>,
    pub ca: Option<PathBuf>,
}

/// The client configuration's path: `VEEM_CLIENT_CONFIG` (which must
/// exist), or the default one (which may not), from `env`.
fn config_path(env: &dyn Fn(&str) -> Option<String>) -> Option<(PathBuf, bool)> {
    if let Some(p) = env("VEEM_CLIENT_CONFIG") {
        return Some((PathBuf::from(p), true));
    }
    let base = env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some((base.join("veem").join("config.toml"), false))
}

/// Resolves the endpoint and token of a client command from `g`, the
/// environment `env` and the client configuration. Errors: a named context
/// that the configuration does not have, an unreadable configuration or
/// token file.
pub fn resolve(g: &GlobalOpts, env: &dyn Fn(&str) -> Option<String>) -> Result<Target> {
    let config = match config_path(env) {
        Some((path, must_exist)) => match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str::<ClientConfig>(&text).with_context(|| format!("client configuration {}", path.display()))?,
            Err(e) if !must_exist && e.kind() == std::io::ErrorKind::NotFound => ClientConfig::default(),
            Err(e) => return Err(e).with_context(|| format!("cannot read client configuration {}", path.display())),
        },
        None => ClientConfig::default(),
    };
    let name = g.context.clone().or(config.current_context.clone());
    let context = match &name {
        Some(n) => Some(
            config
                .contexts
                .iter()
                .find(|c| &c.name == n)
                .with_context(|| format!("context {n:?} is not in the client configuration"))?,
        ),
        None => None,
    };
    let endpoint = g
        .endpoint
        .clone()
        .or_else(|| context.and_then(|c| c.endpoint.clone()))
        .unwrap_or_else(|| super::DEFAULT_ENDPOINT.to_string());
    let token = match (&g.token_file, env("VEEM_TOKEN").filter(|t| !t.is_empty()), context) {
        (Some(path), _, _) => Some(interfaces::tokens::read_file(path)?),
        (None, Some(t), _) => Some(t),
        (None, None, Some(c)) => match (&c.token_file, &c.token) {
            (Some(path), _) => Some(interfaces::tokens::read_file(path)?),
            (None, t) => t.clone(),
        },
        (None, None, None) => None,
    };
    let ca = g.ca.clone().or_else(|| context.and_then(|c| c.ca.clone()));
    Ok(Target { endpoint, token, ca })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::OutputFormat;

    fn opts(endpoint: Option<&str>, token_file: Option<&Path>, context: Option<&str>) -> GlobalOpts {
        GlobalOpts {
            endpoint: endpoint.map(str::to_string),
            token_file: token_file.map(Path::to_path_buf),
            ca: None,
            context: context.map(str::to_string),
            output: OutputFormat::Table,
            quiet: false,
            request_timeout: std::time::Duration::from_secs(30),
            probe_timeout: std::time::Duration::from_secs(2),
        }
    }

    #[test]
    fn flags_then_the_environment_then_the_current_context() {
        let t = tempfile::tempdir().unwrap();
        let token_file = t.path().join("acme.token");
        std::fs::write(&token_file, "acme-token\n").unwrap();
        std::fs::create_dir_all(t.path().join("veem")).unwrap();
        std::fs::write(
            t.path().join("veem/config.toml"),
            format!(
                "current_context = \"acme@a\"\n\
                 [[contexts]]\nname = \"acme@a\"\nendpoint = \"http://a:7200\"\ntoken_file = \"{}\"\n\
                 [[contexts]]\nname = \"ops@b\"\nendpoint = \"http://b:7200\"\ntoken = \"ops-token\"\nca = \"/pki/b-ca.crt\"\n",
                token_file.display()
            ),
        )
        .unwrap();
        let home = t.path().to_str().unwrap().to_string();
        let env = |extra: &'static [(&'static str, &'static str)]| {
            let home = home.clone();
            move |k: &str| {
                extra
                    .iter()
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| v.to_string())
                    .or_else(|| (k == "XDG_CONFIG_HOME").then(|| home.clone()))
            }
        };
        let target = |g: &GlobalOpts, e: &dyn Fn(&str) -> Option<String>| resolve(g, e).unwrap();
        let t1 = target(&opts(None, None, None), &env(&[]));
        assert_eq!(
            t1,
            Target {
                endpoint: "http://a:7200".into(),
                token: Some("acme-token".into()),
                ca: None
            }
        );
        let t2 = target(&opts(None, None, Some("ops@b")), &env(&[]));
        assert_eq!(
            t2,
            Target {
                endpoint: "http://b:7200".into(),
                token: Some("ops-token".into()),
                ca: Some("/pki/b-ca.crt".into())
            }
        );
        let t3 = target(&opts(Some("http://c:1"), None, None), &env(&[("VEEM_TOKEN", "from-env")]));
        assert_eq!(
            t3,
            Target {
                endpoint: "http://c:1".into(),
                token: Some("from-env".into()),
                ca: None
            }
        );
        let other = t.path().join("other.token");
        std::fs::write(&other, "from-file").unwrap();
        let t4 = target(&opts(None, Some(&other), None), &env(&[("VEEM_TOKEN", "from-env")]));
        assert_eq!(t4.token.as_deref(), Some("from-file"));
        let e = resolve(&opts(None, None, Some("nobody")), &env(&[])).unwrap_err();
        assert!(
            format!("{e:#}").contains("context \"nobody\" is not in the client configuration"),
            "{e:#}"
        );
        // No configuration at all: the defaults.
        let none = |_: &str| None;
        assert_eq!(
            resolve(&opts(None, None, None), &none).unwrap(),
            Target {
                endpoint: crate::cli::DEFAULT_ENDPOINT.into(),
                token: None,
                ca: None
            }
        );
        // A configuration named explicitly must exist.
        let missing = |k: &str| (k == "VEEM_CLIENT_CONFIG").then(|| "/nonexistent/veem.toml".to_string());
        assert!(resolve(&opts(None, None, None), &missing).is_err());
    }
}
