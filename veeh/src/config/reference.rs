//! docs/configuration.md's section of `veeh.toml` against the code: its
//! table of keys is the one rendered from [`VeehConfig`]'s schema, and its TOML
//! examples name only keys of it.

use std::path::PathBuf;

use interfaces::config::reference;

use super::VeehConfig;

fn doc() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md")
}

#[test]
fn the_reference_lists_every_key_with_its_type_default_and_meaning() {
    reference::check_generated(
        &doc(),
        "veeh.toml",
        &reference::table::<VeehConfig>(),
        "cargo test -p veeh --lib config::reference",
    );
}

#[test]
fn the_examples_name_only_keys_of_the_configuration() {
    reference::check_examples(&doc(), "## `veeh.toml`", &reference::rows::<VeehConfig>());
}
