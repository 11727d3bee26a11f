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

/// The required keys an example may leave out.
const BASE: &str = "host = \"host-a1\"\nsite_id = \"site-a\"\nlibvirt_uri = \"qemu:///system\"\nlisten = \"127.0.0.1:7101\"\nstate_dir = \"/var/lib/veeh\"\nmigration_address = \"127.0.0.1\"\nimage_repo = \"https://repo.example:7480\"\n[capacity]\nvcpus = 1\nmemory_mib = 512\ndisk_gib = 1\n";

#[test]
fn the_examples_name_only_keys_of_the_configuration_and_read() {
    reference::check_examples::<VeehConfig>(&doc(), "## `veeh.toml`", BASE);
}

/// The configuration the package installs (commented keys aside).
#[test]
fn the_packaged_configuration_names_only_keys_of_the_configuration_and_reads() {
    let packaged = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging/config/veeh.toml");
    reference::check_file::<VeehConfig>(&packaged, BASE);
}
