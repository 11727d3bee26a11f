//! The configuration reference (docs/configuration.md) from the code: a
//! daemon's configuration type as a JSON Schema (schemars: serde's names,
//! defaults and required keys, doc comments as descriptions) rendered into
//! a table of every key, its type, default and meaning, and the checks
//! that keep the document equal to it.
//!
//! A daemon's test renders its table ([`table`]) and compares it with the
//! generated block of its section ([`check_generated`]); with
//! `UPDATE_REFERENCE=1` the test rewrites the block instead. The TOML
//! examples of a section name only keys the table has
//! ([`check_examples`]).
//!
//! A default of `u32::MAX` or `u64::MAX` is written "no limit"; a
//! duration's as humantime writes it (`"2s"`), a size's in the largest
//! binary unit that divides it (`"4 GiB"`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// The environment variable that makes [`check_generated`] rewrite the
/// document instead of comparing.
pub const UPDATE_ENV: &str = "UPDATE_REFERENCE";

/// One key of a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Dotted path: `store.tls.ca`, `hosts[].name` (an array of tables),
    /// `usage_limits.<name>.kind` (a table of tables, any name).
    pub key: String,
    /// `string`, `integer`, `duration`, `size`, `table`, an enumeration
    /// of values, ...
    pub ty: String,
    /// `required`, the default value, `none` or `—` (a table).
    pub default: String,
    /// The field's doc comment, on one line.
    pub description: String,
}

/// The keys of `T`, a configuration file's type, depth first in
/// alphabetical order.
pub fn rows<T: schemars::JsonSchema>() -> Vec<Row> {
    let schema = schemars::schema_for!(T);
    let root = schema.as_value();
    let mut out = Vec::new();
    walk_object(root, root, "", &mut out);
    out
}

/// The Markdown table of [`rows`].
pub fn table<T: schemars::JsonSchema>() -> String {
    let mut s = String::from("| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n");
    for r in rows::<T>() {
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} |",
            r.key,
            cell(&r.ty),
            cell(&r.default),
            cell(&r.description)
        );
    }
    s
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// Follows a `$ref` to its definition; other schemas as they are.
fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix("#/$defs/")
            .and_then(|name| root.get("$defs").and_then(|d| d.get(name)))
            .map(|d| resolve(root, d))
            .unwrap_or(node),
        None => node,
    }
}

/// `Option<T>`'s schema without its `null`: `anyOf: [T, null]` gives T.
fn non_null(node: &Value) -> &Value {
    if let Some(any) = node.get("anyOf").and_then(Value::as_array) {
        let rest: Vec<&Value> = any.iter().filter(|s| s.get("type") != Some(&"null".into())).collect();
        if rest.len() == 1 {
            return rest[0];
        }
    }
    node
}

fn is_duration(node: &Value) -> bool {
    node.get("$ref").and_then(Value::as_str) == Some("#/$defs/Duration")
}

fn types(node: &Value) -> Vec<&str> {
    match node.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
        _ => Vec::new(),
    }
}

/// The values of an enumeration (`enum`, `const`, or `oneOf` of those),
/// with each one's description.
fn values(node: &Value) -> Option<Vec<(String, String)>> {
    let describe = |v: &Value| {
        v.get("description")
            .and_then(Value::as_str)
            .map(first_paragraph)
            .unwrap_or_default()
    };
    if let Some(c) = node.get("const") {
        return Some(vec![(c.to_string(), describe(node))]);
    }
    if let Some(e) = node.get("enum").and_then(Value::as_array) {
        return Some(e.iter().map(|v| (v.to_string(), String::new())).collect());
    }
    let one_of = node.get("oneOf").and_then(Value::as_array)?;
    let mut out = Vec::new();
    for v in one_of {
        out.extend(
            values(v)?
                .into_iter()
                .map(|(k, d)| if d.is_empty() { (k, describe(v)) } else { (k, d) }),
        );
    }
    Some(out)
}

fn is_table(node: &Value) -> bool {
    node.get("properties").is_some() || variants(node).is_some()
}

/// The object variants of a tagged enum (alone or flattened into a
/// struct): `oneOf` whose members have properties.
fn variants(node: &Value) -> Option<&Vec<Value>> {
    let one_of = node.get("oneOf").and_then(Value::as_array)?;
    one_of.iter().all(|v| v.get("properties").is_some()).then_some(one_of)
}

/// The first paragraph of a doc comment, on one line.
fn first_paragraph(doc: &str) -> String {
    one_line(doc.split("\n\n").next().unwrap_or(""))
}

/// A doc comment on one line; rustdoc's links (`` [`x`] ``) as code.
fn one_line(doc: &str) -> String {
    doc.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("[`", "`")
        .replace("`]", "`")
}

struct Key<'a> {
    schema: &'a Value,
    required: bool,
    /// The enumerations' values this key takes in the variants that have
    /// it (a flattened enum's tag), and in which variants it is.
    tag_values: Vec<(String, String)>,
    only_in: Vec<String>,
}

/// Rows for the keys of the table `node` under `prefix` (`""` at the top,
/// else ending in `.`).
fn walk_object(root: &Value, node: &Value, prefix: &str, out: &mut Vec<Row>) {
    let node = resolve(root, node);
    let mut keys: BTreeMap<String, Key> = BTreeMap::new();
    let mut tag = None;
    let required_of = |n: &Value, k: &str| {
        n.get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|x| x == k))
    };
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (k, s) in props {
            let required = required_of(node, k);
            keys.insert(
                k.clone(),
                Key {
                    schema: s,
                    required,
                    tag_values: Vec::new(),
                    only_in: Vec::new(),
                },
            );
        }
    }
    if let Some(vs) = variants(node) {
        // The tag: the property every variant gives a constant.
        tag = vs[0]
            .get("properties")
            .and_then(Value::as_object)
            .and_then(|p| p.iter().find(|(_, s)| s.get("const").is_some()).map(|(k, _)| k.clone()));
        for v in vs {
            let props = v.get("properties").and_then(Value::as_object).expect("variants have properties");
            let tag_value = tag
                .as_ref()
                .and_then(|t| props.get(t))
                .and_then(|s| s.get("const"))
                .map(|c| c.to_string());
            let variant_doc = v
                .get("description")
                .and_then(Value::as_str)
                .map(first_paragraph)
                .unwrap_or_default();
            for (k, s) in props {
                let key = keys.entry(k.clone()).or_insert(Key {
                    schema: s,
                    required: true,
                    tag_values: Vec::new(),
                    only_in: Vec::new(),
                });
                key.required &= required_of(v, k);
                if Some(k) == tag.as_ref() {
                    key.tag_values.push((tag_value.clone().unwrap_or_default(), variant_doc.clone()));
                } else if let Some(t) = &tag_value {
                    key.only_in.push(t.clone());
                }
            }
        }
        // A key in every variant is not "only in" some.
        for key in keys.values_mut() {
            if key.only_in.len() == vs.len() {
                key.only_in.clear();
            }
        }
    }
    for (k, key) in keys {
        let path = format!("{prefix}{k}");
        let field = key.schema;
        let mut description = field.get("description").and_then(Value::as_str).map(one_line).unwrap_or_default();
        let inner = non_null(field);
        let resolved = non_null(resolve(root, inner));
        if description.is_empty() {
            description = resolved
                .get("description")
                .and_then(Value::as_str)
                .map(first_paragraph)
                .unwrap_or_default();
        }
        if let (false, Some(tag)) = (key.only_in.is_empty(), &tag) {
            let values = key.only_in.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(" or ");
            description = format!("(only with `{tag}` {values}) {description}").trim_end().to_string();
        }
        let default = if key.required {
            "required".to_string()
        } else {
            field.get("default").map(|d| default_text(d, resolved)).unwrap_or_else(|| {
                if is_table(resolved) {
                    "—".to_string()
                } else {
                    "none".to_string()
                }
            })
        };
        let mut row = |ty: String, description: String| {
            out.push(Row {
                key: path.clone(),
                ty,
                default: default.clone(),
                description,
            })
        };
        if !key.tag_values.is_empty() {
            let listed = key.tag_values.iter().map(|(v, _)| format!("`{v}`")).collect::<Vec<_>>().join(" | ");
            row(listed, with_values(description, &key.tag_values));
            continue;
        }
        if is_duration(inner) {
            row("duration".into(), description);
            continue;
        }
        if let Some(vals) = values(resolved) {
            let listed = vals.iter().map(|(v, _)| format!("`{v}`")).collect::<Vec<_>>().join(" | ");
            row(listed, with_values(description, &vals));
            continue;
        }
        if is_table(resolved) {
            row("table".into(), description);
            walk_object(root, resolved, &format!("{path}."), out);
            continue;
        }
        let ts = types(resolved);
        if ts == ["array"] {
            let items = resolved.get("items").map(|i| resolve(root, i)).unwrap_or(&Value::Null);
            if is_table(items) {
                row("array of tables".into(), description);
                walk_object(root, items, &format!("{path}[]."), out);
            } else {
                row(
                    format!("array of {}", leaf_type(root, resolved.get("items").unwrap_or(&Value::Null))),
                    description,
                );
            }
            continue;
        }
        if ts == ["object"] {
            if let Some(values) = resolved.get("additionalProperties").filter(|v| v.is_object()) {
                let values = resolve(root, values);
                if is_table(values) {
                    row("table of tables".into(), description);
                    walk_object(root, values, &format!("{path}.<name>."), out);
                    continue;
                }
            }
        }
        row(leaf_type(root, inner), description);
    }
}

fn with_values(description: String, values: &[(String, String)]) -> String {
    let described: Vec<String> = values
        .iter()
        .filter(|(_, d)| !d.is_empty())
        .map(|(v, d)| format!("`{v}`: {d}"))
        .collect();
    if described.is_empty() {
        description
    } else {
        format!("{description} {}", described.join(" ")).trim().to_string()
    }
}

fn leaf_type(root: &Value, node: &Value) -> String {
    if is_duration(node) {
        return "duration".into();
    }
    let node = non_null(resolve(root, non_null(node)));
    if node.get("format").and_then(Value::as_str) == Some(SIZE_FORMAT) {
        return "size".into();
    }
    if let Some(vals) = values(node) {
        return vals.iter().map(|(v, _)| format!("`{v}`")).collect::<Vec<_>>().join(" | ");
    }
    match types(node).as_slice() {
        [t] => (*t).to_string(),
        _ => "any".into(),
    }
}

/// A default value as the file would write it.
fn default_text(d: &Value, schema: &Value) -> String {
    match d {
        Value::Null => "none".into(),
        Value::Object(o) if o.contains_key("secs") && o.contains_key("nanos") => {
            let secs = o["secs"].as_u64().unwrap_or(0);
            let nanos = o["nanos"].as_u64().unwrap_or(0) as u32;
            format!("`\"{}\"`", humantime::format_duration(Duration::new(secs, nanos)))
        }
        Value::Number(n) if schema.get("format").and_then(Value::as_str) == Some(SIZE_FORMAT) => {
            format!("`\"{}\"`", size_text(n.as_u64().unwrap_or(0)))
        }
        Value::Array(a) if a.is_empty() => "none".into(),
        Value::Number(n) if n.as_u64() == Some(u32::MAX.into()) || n.as_u64() == Some(u64::MAX) => "no limit".into(),
        other => format!("`{other}`"),
    }
}

/// Bytes as the largest binary unit that divides them: `4 GiB`, `16 KiB`.
pub fn size_text(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} B")
}

/// The `format` of sizes in the schema ([`super::Size`]).
pub const SIZE_FORMAT: &str = "size";

/// The generated block `name` of the document at `doc`: between
/// `<!-- BEGIN GENERATED: name -->` and `<!-- END GENERATED: name -->`.
/// Compares it with `generated` and panics, naming `regenerate` (the
/// command that rewrites it), when they differ; with `UPDATE_REFERENCE`
/// set, writes `generated` there instead.
pub fn check_generated(doc: &Path, name: &str, generated: &str, regenerate: &str) {
    compare(doc, name, generated, regenerate, std::env::var_os(UPDATE_ENV).is_some())
}

/// [`check_generated`], rewriting the block when `update`.
fn compare(doc: &Path, name: &str, generated: &str, regenerate: &str, update: bool) {
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let begin = format!("<!-- BEGIN GENERATED: {name} -->\n");
    let end = format!("<!-- END GENERATED: {name} -->");
    let (Some(b), Some(e)) = (text.find(&begin), text.find(&end)) else {
        panic!("{} has no block {begin:?} ... {end:?}", doc.display());
    };
    let start = b + begin.len();
    let current = &text[start..e];
    if current == generated {
        return;
    }
    if update {
        let updated = format!("{}{generated}{}", &text[..start], &text[e..]);
        // Through a new file, so that a test reading the document meanwhile
        // sees it whole.
        let tmp = doc.with_extension(format!("md.{name}.tmp"));
        std::fs::write(&tmp, updated)
            .and_then(|()| std::fs::rename(&tmp, doc))
            .unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        return;
    }
    let differs = current
        .lines()
        .zip(generated.lines())
        .find(|(a, b)| a != b)
        .map(|(a, b)| format!("the document has\n  {a}\nthe code gives\n  {b}"))
        .unwrap_or_else(|| "one has more lines than the other".into());
    panic!(
        "{}: the block {name:?} differs from the code ({differs}).\nRegenerate it with `{UPDATE_ENV}=1 {regenerate}` and review the diff.",
        doc.display()
    );
}

/// The keys of a TOML text as [`Row::key`]s: `hosts[].name` for an array
/// of tables, every table's own key too.
pub fn example_keys(toml_text: &str) -> Result<Vec<String>, toml::de::Error> {
    fn walk(t: &toml::Table, prefix: &str, out: &mut Vec<String>) {
        for (k, v) in t {
            let path = format!("{prefix}{k}");
            out.push(path.clone());
            match v {
                toml::Value::Table(t) => walk(t, &format!("{path}."), out),
                toml::Value::Array(a) if a.iter().all(toml::Value::is_table) => {
                    for t in a.iter().filter_map(toml::Value::as_table) {
                        walk(t, &format!("{path}[]."), out);
                    }
                }
                _ => {}
            }
        }
    }
    let table: toml::Table = toml_text.parse()?;
    let mut out = Vec::new();
    walk(&table, "", &mut out);
    Ok(out)
}

/// Whether `key` (of an example) is the row key `row` or a table above
/// it (`<name>` matches any one name).
fn matches(row: &str, key: &str) -> bool {
    let (r, k): (Vec<&str>, Vec<&str>) = (row.split('.').collect(), key.split('.').collect());
    r.len() >= k.len() && r.iter().zip(&k).all(|(r, k)| r == k || *r == "<name>")
}

/// Checks the TOML examples (```` ```toml ```` blocks) of the section of
/// `doc` under the heading `heading` (up to the next heading of its
/// level) against `T`, the configuration's type: each parses, names only
/// keys of `T`, and deserializes as `T` on top of `base` (the required
/// keys an example may leave out; the daemon's own checks, which read
/// files, are not run). Panics naming the example's line and the key.
pub fn check_examples<T: serde::de::DeserializeOwned + schemars::JsonSchema>(doc: &Path, heading: &str, base: &str) {
    let rows = rows::<T>();
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let level = heading.split(' ').next().unwrap_or("#");
    let start = text
        .lines()
        .position(|l| l == heading)
        .unwrap_or_else(|| panic!("{} has no heading {heading:?}", doc.display()));
    let lines: Vec<&str> = text.lines().collect();
    let mut i = start + 1;
    let mut examples = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.starts_with('#') && l.split(' ').next() == Some(level) {
            break;
        }
        if l.trim() == "```toml" {
            let first = i + 1;
            let mut j = first;
            while j < lines.len() && lines[j].trim() != "```" {
                j += 1;
            }
            let block = lines[first..j].join("\n");
            check_example::<T>(&rows, &block, &format!("{}:{}", doc.display(), first + 1), base);
            examples += 1;
            i = j;
        }
        i += 1;
    }
    assert!(examples > 0, "{} has no TOML example under {heading:?}", doc.display());
}

/// Checks the configuration file at `path` (a packaged example) as
/// [`check_examples`] checks an example: it parses, names only keys of
/// `T`, and deserializes as `T` on top of `base`.
pub fn check_file<T: serde::de::DeserializeOwned + schemars::JsonSchema>(path: &Path, base: &str) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    check_example::<T>(&rows::<T>(), &text, &path.display().to_string(), base);
}

/// One example, `block`, at `at` (a file and line, for the panics).
fn check_example<T: serde::de::DeserializeOwned>(rows: &[Row], block: &str, at: &str, base: &str) {
    let keys = example_keys(block).unwrap_or_else(|e| panic!("{at}: the example is not TOML: {e}"));
    for k in keys {
        assert!(
            rows.iter().any(|r| matches(&r.key, &k)),
            "{at}: the example names `{k}`, which is no key of the configuration"
        );
    }
    let mut table: toml::Table = base.parse().expect("the base configuration is TOML");
    table.extend(block.parse::<toml::Table>().expect("parsed above"));
    if let Err(e) = serde_path_to_error::deserialize::<_, T>(toml::Value::Table(table)) {
        panic!("{at}: the example does not read: `{}`: {}", e.path(), e.inner());
    }
}

#[cfg(test)]
mod tests;
