//! docs/configuration.md's section of `image-repo.toml` against the code: its
//! table of keys is the one rendered from [`Config`]'s schema, and its TOML
//! examples name only keys of it.

use std::path::PathBuf;

use interfaces::config::reference;

use super::Config;

fn doc() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md")
}

#[test]
fn the_reference_lists_every_key_with_its_type_default_and_meaning() {
    reference::check_generated(
        &doc(),
        "image-repo.toml",
        &reference::table::<Config>(),
        "cargo test -p image-repo --lib server::config::reference",
    );
}

/// The required keys an example may leave out.
const BASE: &str = "data = \"/var/lib/image-repo\"\n";

#[test]
fn the_examples_name_only_keys_of_the_configuration_and_read() {
    reference::check_examples::<Config>(&doc(), "## `image-repo.toml`", BASE);
}

/// The configuration the package installs (commented keys aside).
#[test]
fn the_packaged_configuration_names_only_keys_of_the_configuration_and_reads() {
    let packaged = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging/config/image-repo.toml");
    reference::check_file::<Config>(&packaged, BASE);
}
