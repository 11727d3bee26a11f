//! docs/configuration.md's section of `veem.toml` against the code: its
//! table of keys is the one rendered from [`VeemConfig`]'s schema, and its TOML
//! examples name only keys of it.

use std::path::PathBuf;

use interfaces::config::reference;

use super::VeemConfig;

fn doc() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md")
}

#[test]
fn the_reference_lists_every_key_with_its_type_default_and_meaning() {
    reference::check_generated(
        &doc(),
        "veem.toml",
        &reference::table::<VeemConfig>(),
        "cargo test -p veem --lib config::reference",
    );
}

/// The required keys an example may leave out.
const BASE: &str = "site_id = \"site-a\"\nlisten = \"127.0.0.1:7200\"\nimage_repo = \"https://repo.example:7480\"\n";

#[test]
fn the_examples_name_only_keys_of_the_configuration_and_read() {
    reference::check_examples::<VeemConfig>(&doc(), "## `veem.toml`", BASE);
}

/// The configuration the package installs (commented keys aside).
#[test]
fn the_packaged_configuration_names_only_keys_of_the_configuration_and_reads() {
    let packaged = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging/config/veem.toml");
    reference::check_file::<VeemConfig>(&packaged, BASE);
}
