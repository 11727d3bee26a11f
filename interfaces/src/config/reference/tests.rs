use std::time::Duration;

use serde::Deserialize;

use super::*;

/// A section of a made-up daemon.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Toy {
    /// The site's name.
    site_id: String,
    /// Time between two rounds.
    #[serde(default = "two_seconds", deserialize_with = "crate::config::duration")]
    interval: Duration,
    /// Cache size at most.
    #[serde(default = "four_gib", deserialize_with = "crate::config::size")]
    #[schemars(with = "crate::config::Size")]
    cache: u64,
    #[serde(default)]
    hosts: Vec<Host>,
    #[serde(default)]
    limits: std::collections::BTreeMap<String, Limit>,
    #[serde(default)]
    engine: Engine,
}

/// One host.
#[derive(Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Host {
    /// Its name.
    name: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[allow(dead_code)]
enum Limit {
    /// Never more than this.
    Fixed { vcpus: u32 },
    /// On average.
    Average { vcpus: u32, window: u32 },
}

#[derive(Default, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Engine {
    /// Embedded.
    #[default]
    Sled,
    /// Shared.
    Etcd,
}

fn two_seconds() -> Duration {
    Duration::from_secs(2)
}
fn four_gib() -> u64 {
    4 << 30
}

fn row(rows: &[Row], key: &str) -> Row {
    rows.iter()
        .find(|r| r.key == key)
        .unwrap_or_else(|| panic!("no row {key}: {rows:#?}"))
        .clone()
}

#[test]
fn every_key_has_its_type_default_and_description() {
    let rows = rows::<Toy>();
    let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "cache",
            "engine",
            "hosts",
            "hosts[].name",
            "interval",
            "limits",
            "limits.<name>.kind",
            "limits.<name>.vcpus",
            "limits.<name>.window",
            "site_id"
        ]
    );
    let site = row(&rows, "site_id");
    assert_eq!(
        (site.ty.as_str(), site.default.as_str(), site.description.as_str()),
        ("string", "required", "The site's name.")
    );
    let interval = row(&rows, "interval");
    assert_eq!((interval.ty.as_str(), interval.default.as_str()), ("duration", "`\"2s\"`"));
    let cache = row(&rows, "cache");
    assert_eq!((cache.ty.as_str(), cache.default.as_str()), ("size", "`\"4 GiB\"`"));
    let engine = row(&rows, "engine");
    assert_eq!(engine.ty, "`\"sled\"` | `\"etcd\"`");
    assert_eq!(engine.default, "`\"sled\"`");
    assert!(engine.description.contains("`\"etcd\"`: Shared."), "{engine:?}");
    let kind = row(&rows, "limits.<name>.kind");
    assert_eq!(kind.ty, "`\"fixed\"` | `\"average\"`");
    assert!(kind.description.contains("`\"average\"`: On average."), "{kind:?}");
    assert!(row(&rows, "limits.<name>.window")
        .description
        .starts_with("(only with `kind` `\"average\"`)"));
    assert_eq!(row(&rows, "hosts").ty, "array of tables");
}

#[test]
fn examples_may_name_only_keys_of_the_configuration_and_must_read() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("doc.md");
    std::fs::write(
        &doc,
        "## toy\n\n```toml\nsite_id = \"a\"\n[[hosts]]\nname = \"h\"\n[limits.acme]\nkind = \"fixed\"\nvcpus = 2\n```\n",
    )
    .unwrap();
    check_examples::<Toy>(&doc, "## toy", "site_id = \"base\"");
    let fails = |example: &str| {
        std::fs::write(&doc, format!("## toy\n\n```toml\n{example}\n```\n")).unwrap();
        let e = std::panic::catch_unwind(|| check_examples::<Toy>(&doc, "## toy", "site_id = \"base\"")).unwrap_err();
        e.downcast_ref::<String>().unwrap().clone()
    };
    let msg = fails("[[hosts]]\nnmae = \"h\"");
    assert!(msg.contains("doc.md:4: the example names `hosts[].nmae`"), "{msg}");
    let msg = fails("interval = \"2 fortnights\"");
    assert!(msg.contains("doc.md:4: the example does not read: `interval`"), "{msg}");
}

#[test]
fn a_generated_block_that_differs_from_the_code_fails_and_says_how_to_regenerate() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("doc.md");
    std::fs::write(&doc, "x\n<!-- BEGIN GENERATED: toy -->\nold\n<!-- END GENERATED: toy -->\ny\n").unwrap();
    let e = std::panic::catch_unwind(|| compare(&doc, "toy", "new\n", "cargo test -p toy", false)).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(msg.contains("UPDATE_REFERENCE=1 cargo test -p toy"), "{msg}");
    compare(&doc, "toy", "old\n", "cargo test -p toy", false);
    compare(&doc, "toy", "new\n", "cargo test -p toy", true);
    assert!(std::fs::read_to_string(&doc).unwrap().contains("-->\nnew\n<!--"));
}

#[test]
fn sizes_are_written_in_the_largest_unit_that_divides_them() {
    assert_eq!(size_text(4 << 30), "4 GiB");
    assert_eq!(size_text(16 * 1024), "16 KiB");
    assert_eq!(size_text(1000), "1000 B");
}
