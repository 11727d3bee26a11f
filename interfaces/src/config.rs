//! How the three daemons read their TOML configuration, in one style:
//! every error names the file, the line and column, the field path and the
//! reason (`/etc/veeh/veeh.toml:7:1: field `capacity.vcpus`: invalid type:
//! string "8", expected u32`), whether serde or a daemon's own check found
//! it; durations and sizes are written with units (`"30s"`, `"4 GiB"`),
//! the old integer keys still read.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use toml_edit::{ImDocument, Item, Table, Value};
use vee_manifest::excerpt::line_col;

pub mod reference;

/// A configuration error: where and why.
#[derive(Debug, thiserror::Error)]
#[error("{}{}{}{reason}", file_prefix(.file), location(.at), field_prefix(.field))]
pub struct ConfigError {
    /// The file; `None` for text given directly.
    pub file: Option<PathBuf>,
    /// 1-based line and column of the field (or of the syntax error).
    pub at: Option<(usize, usize)>,
    /// The field path (`hosts[0].endpoint`); empty for the whole file.
    pub field: String,
    pub reason: String,
}

fn file_prefix(f: &Option<PathBuf>) -> String {
    f.as_ref().map(|f| format!("{}:", f.display())).unwrap_or_default()
}
fn location(at: &Option<(usize, usize)>) -> String {
    match at {
        Some((l, c)) => format!("{l}:{c}: "),
        None => " ".into(),
    }
}
fn field_prefix(f: &str) -> String {
    if f.is_empty() {
        String::new()
    } else {
        format!("field `{f}`: ")
    }
}

/// Where field `path` (`hosts[0].endpoint`, `tls`) is written in `text`:
/// the line and column of its key, or of its table's header; `None` when
/// the file does not have it (a missing field: then its table, if any).
pub fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let doc = ImDocument::parse(text).ok()?;
    let mut span: Option<Range<usize>> = None;
    let mut at = Node::Table(doc.as_table());
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (key, indices) = match seg.split_once('[') {
            Some((k, rest)) => (k, rest.trim_end_matches(']').split("][").filter_map(|i| i.parse().ok()).collect()),
            None => (seg, vec![]),
        };
        let Some((k, item)) = at.get(key) else { break };
        span = k.span().or(span);
        at = Node::Item(item);
        for i in indices {
            match at.index(i) {
                Some((s, next)) => {
                    span = s.or(span);
                    at = next;
                }
                None => break,
            }
        }
    }
    span.map(|s| line_col(text, s.start))
}

/// A place in a parsed document.
enum Node<'a> {
    Item(&'a Item),
    Table(&'a Table),
    Value(&'a Value),
}

impl<'a> Node<'a> {
    fn get(&self, key: &str) -> Option<(&'a toml_edit::Key, &'a Item)> {
        match *self {
            Node::Table(t) => t.get_key_value(key),
            Node::Item(Item::Table(t)) => t.get_key_value(key),
            Node::Item(Item::Value(Value::InlineTable(t))) | Node::Value(Value::InlineTable(t)) => t.get_key_value(key),
            _ => None,
        }
    }

    fn index(&self, i: usize) -> Option<(Option<Range<usize>>, Node<'a>)> {
        match *self {
            Node::Item(Item::ArrayOfTables(a)) => a.get(i).map(|t| (t.span(), Node::Table(t))),
            Node::Item(Item::Value(Value::Array(a))) | Node::Value(Value::Array(a)) => a.get(i).map(|v| (v.span(), Node::Value(v))),
            _ => None,
        }
    }
}

/// Parses `text` into `T`. Errors: a [`ConfigError`] with the field path
/// (serde's, through `serde_path_to_error`) and where it is.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(|e| {
        let field = field_of(e.path());
        let inner = e.into_inner();
        let at = locate(text, &field).or_else(|| inner.span().map(|s| line_col(text, s.start)));
        ConfigError {
            file: None,
            at,
            field,
            reason: inner.message().trim().to_string(),
        }
    })
}

/// Reads `path` and parses it into `T`, then runs `check` on it (a daemon's
/// own rules: a failing check's [`Invalid`] is located in the file like a
/// parse error). Errors: the file cannot be read, or a [`ConfigError`].
pub fn load<T: DeserializeOwned>(path: &Path, check: impl FnOnce(&mut T) -> Result<(), Invalid>) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(parse_checked(&text, check).map_err(|mut e| {
        e.file = Some(path.to_path_buf());
        e
    })?)
}

/// [`parse`] then `check`, for text not read from a file.
pub fn parse_checked<T: DeserializeOwned>(text: &str, check: impl FnOnce(&mut T) -> Result<(), Invalid>) -> Result<T, ConfigError> {
    run_check(parse(text)?, check, |field| locate(text, field))
}

/// The field path `serde_path_to_error` reports; empty for the whole
/// document.
fn field_of(path: &serde_path_to_error::Path) -> String {
    let path = path.to_string();
    if matches!(path.as_str(), "." | "?") {
        String::new()
    } else {
        path
    }
}

/// `cfg` once `check` accepts it; its [`Invalid`] located by `at`.
fn run_check<T>(
    mut cfg: T,
    check: impl FnOnce(&mut T) -> Result<(), Invalid>,
    at: impl Fn(&str) -> Option<(usize, usize)>,
) -> Result<T, ConfigError> {
    check(&mut cfg).map_err(|Invalid { field, reason }| ConfigError {
        file: None,
        at: at(&field),
        field,
        reason,
    })?;
    Ok(cfg)
}

/// A daemon's own rule broken by field `field`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {reason}")]
pub struct Invalid {
    pub field: String,
    pub reason: String,
}

/// [`Invalid`] of `field` for `reason`.
pub fn invalid(field: impl Into<String>, reason: impl std::fmt::Display) -> Invalid {
    Invalid {
        field: field.into(),
        reason: reason.to_string(),
    }
}

/// Reads a duration: a humantime string (`"2s"`, `"5m"`) or a bare number
/// of seconds (the form of the older `*_s` keys, read through an alias).
pub fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = Duration;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a duration such as \"30s\" or \"5m\", or whole seconds")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Duration, E> {
            Ok(Duration::from_secs(v))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Duration, E> {
            u64::try_from(v)
                .map(Duration::from_secs)
                .map_err(|_| E::custom(format!("{v} is negative")))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Duration, E> {
            humantime::parse_duration(v).map_err(|e| E::custom(format!("{v:?}: {e}")))
        }
    }
    d.deserialize_any(V)
}

/// Reads a size in bytes: a string with a unit (`"4 GiB"`, `"500 GB"`,
/// `"512MiB"`: the `bytesize` crate's forms) or a bare number of bytes (the
/// form of older keys such as `max_bytes`).
pub fn size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a size such as \"4 GiB\" or \"500 GB\", or whole bytes")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("{v} is negative")))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u64, E> {
            v.parse::<bytesize::ByteSize>()
                .map(|b| b.as_u64())
                .map_err(|e| E::custom(format!("{v:?}: {e}")))
        }
    }
    d.deserialize_any(V)
}

/// A size in bytes read by [`size`], for optional fields
/// (`Option<Size>`). In a configuration's schema (`#[schemars(with =
/// "Size")]` on a `u64` read by [`size`]): a string with a unit or a
/// number of bytes, of format `size` ([`reference`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Size(pub u64);

impl schemars::JsonSchema for Size {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Size".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": ["string", "integer"], "format": reference::SIZE_FORMAT })
    }
}

impl<'de> serde::Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        size(d).map(Size)
    }
}

/// Deserializes a TOML table built in memory (a file's table with
/// command-line values merged in) into `T`, then runs `check`; errors are
/// located in `text`, the file the table was read from, when there is one.
pub fn from_table<T: DeserializeOwned>(
    table: toml::Table,
    text: Option<&str>,
    check: impl FnOnce(&mut T) -> Result<(), Invalid>,
) -> Result<T, ConfigError> {
    let at = |field: &str| text.and_then(|t| locate(t, field));
    let cfg: T = serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let field = field_of(e.path());
        ConfigError {
            file: None,
            at: at(&field),
            reason: e.into_inner().message().trim().to_string(),
            field,
        }
    })?;
    run_check(cfg, check, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Cfg {
        name: String,
        #[serde(default, deserialize_with = "duration", alias = "timeout_s")]
        timeout: Duration,
        #[serde(default, deserialize_with = "size", alias = "max_bytes")]
        max_size: u64,
        #[serde(default)]
        hosts: Vec<Host>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Host {
        name: String,
        port: u16,
    }

    const TEXT: &str = "name = \"a\"\ntimeout = \"90s\"\nmax_size = \"4 GiB\"\n\n[[hosts]]\nname = \"h1\"\nport = 1\n\n[[hosts]]\nname = \"h2\"\n  port = \"x\"\n";

    #[test]
    fn a_type_error_names_the_field_its_line_and_column() {
        let e = parse::<Cfg>(TEXT).unwrap_err();
        assert_eq!(e.field, "hosts[1].port");
        assert_eq!(e.at, Some((11, 3)));
        assert!(
            e.to_string().starts_with("11:3: field `hosts[1].port`: invalid type: string \"x\""),
            "{e}"
        );
    }

    #[test]
    fn a_checks_error_is_located_like_a_parse_error_and_names_the_file() {
        let text = TEXT.replace("port = \"x\"", "port = 2");
        let cfg: Cfg = parse(&text).unwrap();
        assert_eq!((cfg.timeout, cfg.max_size), (Duration::from_secs(90), 4 << 30));
        assert_eq!((cfg.name.as_str(), cfg.hosts[1].name.as_str(), cfg.hosts[1].port), ("a", "h2", 2));
        let e = parse_checked::<Cfg>(&text, |c| match c.hosts.iter().position(|h| h.name == "h2") {
            Some(i) => Err(invalid(format!("hosts[{i}].name"), "duplicate")),
            None => Ok(()),
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "10:1: field `hosts[1].name`: duplicate");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "name = 1\n").unwrap();
        let e = load::<Cfg>(&path, |_| Ok(())).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{}:1:1: field `name`: invalid type: integer `1`, expected a string", path.display())
        );
    }

    #[test]
    fn durations_and_sizes_take_units_and_the_old_integer_keys() {
        let cfg: Cfg = parse("name = \"a\"\ntimeout_s = 7\nmax_bytes = 500000000000\n").unwrap();
        assert_eq!((cfg.timeout, cfg.max_size), (Duration::from_secs(7), 500_000_000_000));
        let cfg: Cfg = parse("name = \"a\"\ntimeout = \"2m 5s\"\nmax_size = \"500 GB\"\n").unwrap();
        assert_eq!((cfg.timeout, cfg.max_size), (Duration::from_secs(125), 500_000_000_000));
        let e = parse::<Cfg>("name = \"a\"\nmax_size = \"lots\"\n").unwrap_err();
        assert_eq!((e.field.as_str(), e.at), ("max_size", Some((2, 1))));
        let e = parse::<Cfg>("name = \"a\"\n[oops\n").unwrap_err();
        assert_eq!((e.field.as_str(), e.at.map(|a| a.0)), ("", Some(2)), "{e}");
        let e = parse::<Cfg>("name = \"a\"\nnope = 1\n").unwrap_err();
        assert!(e.to_string().starts_with("2:1: field `nope`: unknown field `nope`"), "{e}");
    }
}
