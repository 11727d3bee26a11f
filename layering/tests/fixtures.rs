//! The layering check on fixture crates (`tests/fixtures/`), one for each
//! way a check that reads lines of text is fooled: each hides a cycle the
//! check must find; `clean` holds what is not code (comments, doc
//! comments, strings, test modules) and must pass; `layers` holds a veem
//! whose code and `ARCHITECTURE.md` disagree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use vee_layering::{run, Options, Report};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn check(name: &str, tune: impl FnOnce(&mut Options)) -> (Report, String) {
    let root = fixture(name);
    let doc = root.join("ARCHITECTURE.md");
    let mut options = Options {
        root: root.clone(),
        architecture: doc.is_file().then_some(doc),
        ..Options::default()
    };
    options.crates = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    tune(&mut options);
    let report = run(&options).unwrap();
    let text = report.lines.join("\n");
    (report, text)
}

#[track_caller]
fn finds_cycle(name: &str, cycle: &str, edge: &str) {
    let (report, text) = check(name, |_| {});
    assert!(report.failed, "{name}: {text}");
    assert!(text.contains(&format!("demo: modules in a cycle: {cycle}")), "{name}: {text}");
    assert!(text.contains(edge), "{name}: {text}");
}

/// `crate::front::Front` where the root holds `pub use api::front`: the
/// path depends on `api`, so `a` and `api` are a cycle.
#[test]
fn a_path_through_a_re_export_reaches_the_module_that_defines_it() {
    finds_cycle("reexport", "a, api", "a -> api  (demo/src/a.rs:3)");
}

/// `use crate::*` where the root re-exports `b::*`: `Thing` is b's.
#[test]
fn a_glob_reaches_the_modules_it_brings_names_from() {
    finds_cycle("glob", "a, b", "a -> b  (demo/src/a.rs:1)");
}

/// Code after a `#[cfg(test)]` item of several lines is still read.
#[test]
fn code_after_a_test_item_of_several_lines_is_read() {
    finds_cycle("cfg_test", "c, d", "c -> d  (demo/src/c.rs:8)");
}

/// `"http://..."` on the line of a path does not cut the path off.
#[test]
fn a_url_in_a_string_does_not_hide_the_path_beside_it() {
    finds_cycle("string", "e, f", "e -> f  (demo/src/e.rs:3)");
}

/// `format!("{}", crate::h::NAME)`: a path inside a macro's tokens, which
/// syn leaves unparsed, is read.
#[test]
fn a_path_inside_a_macro_is_read() {
    finds_cycle("macro_path", "g, h", "g -> h  (demo/src/g.rs:2)");
}

/// Doc comments, comments, strings and test code name `crate::a::A` in `b`
/// where `a` uses `b`: none of them is an edge.
#[test]
fn comments_strings_and_test_code_are_not_edges() {
    let (report, text) = check("clean", |o| o.print_edges = true);
    assert!(!report.failed, "{text}");
    assert!(text.contains("a -> b  (demo/src/a.rs:1)"), "{text}");
    assert!(!text.contains("b -> a"), "{text}");
    assert!(text.contains("demo: 3 modules, 1 edges"), "{text}");
}

/// The layer table and the workflows table of `ARCHITECTURE.md` against
/// the code: a use upward, a module on no layer, a layer's module that does
/// not exist, a workflow's calls listed wrongly both ways, and the workflow
/// graph's depth printed and bounded.
#[test]
fn the_document_and_the_code_must_agree() {
    let (report, text) = check("layers", |o| o.max_workflow_depth = Some(2));
    assert!(report.failed, "{text}");
    for want in [
        "veem: `domain` (layer 0) uses `core` (layer 1), above it: veem/src/domain.rs:3",
        "veem: module `extra` is on no layer of ARCHITECTURE.md's layer table",
        "veem: ARCHITECTURE.md's layer table (line 17) names `ports`, which is no module of the crate",
        "veem: `steps::stop` (layer 2) uses `workflows::networks` (layer 3), above it: veem/src/steps/stop.rs:4",
        "veem: 2 steps, graph depth 2: stop -> shut",
        "steps table (line 6) lists what `stop` calls wrongly: it calls `shut` not listed; listed nothing it does not call",
        "veem: 3 workflows, graph depth 3: deploy -> boot -> networks",
        "lists what `boot` calls wrongly: it calls `networks` not listed; listed nothing it does not call",
        "lists what `deploy` calls wrongly: it calls nothing not listed; listed `networks` it does not call",
        "veem: the workflow graph is 3 deep, more than 2",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // Without the document or a bound, the same code passes: no cycle.
    let (report, text) = check("layers", |o| o.architecture = None);
    assert!(!report.failed, "{text}");
}

/// A cycle listed as still to cut is reported and does not fail; a listed
/// one that is gone fails.
#[test]
fn known_cycles_are_reported_and_a_gone_one_fails() {
    let known: BTreeSet<String> = ["demo: a api".to_string()].into();
    let (report, text) = check("reexport", |o| o.known = known.clone());
    assert!(!report.failed, "{text}");
    assert!(text.contains("known cycle, still to cut: demo: a api"), "{text}");
    let (report, text) = check("clean", |o| o.known = known);
    assert!(report.failed && text.contains("the known cycle `demo: a api` is gone"), "{text}");
}

/// `impl Veem` outside `manager.rs` fails unless the facade list names its
/// file, and a listed file with none left fails.
#[test]
fn impl_veem_belongs_to_the_facade() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("veem/src");
    std::fs::create_dir_all(&src).unwrap();
    let write = |file: &str, text: &str| std::fs::write(src.join(file), text).unwrap();
    write("lib.rs", "pub mod manager;\npub mod windows;\n");
    write("manager.rs", "pub struct Veem;\nimpl Veem {}\n");
    write("windows.rs", "use crate::manager::Veem;\nimpl Veem {\n    fn renew(&self) {}\n}\n");
    let facade = |listed: &[&str]| {
        let options = Options {
            root: dir.path().to_path_buf(),
            crates: vec![dir.path().join("veem")],
            facade: Some(listed.iter().map(|s| s.to_string()).collect()),
            ..Options::default()
        };
        let report = run(&options).unwrap();
        (report.failed, report.lines.join("\n"))
    };
    let (failed, text) = facade(&["windows.rs"]);
    assert!(!failed, "{text}");
    let (failed, text) = facade(&[]);
    assert!(failed && text.contains("veem/src/windows.rs has `impl Veem`"), "{text}");
    write("windows.rs", "pub struct Windows;\n");
    let (failed, text) = facade(&["windows.rs"]);
    assert!(failed && text.contains("veem/src/windows.rs has no `impl Veem` left"), "{text}");
}

/// The binary: exit status 1 on a finding, 0 on a pass; and the
/// repository itself passes with its lists, as `scripts/test` runs it.
#[test]
fn the_binary_fails_on_a_finding_and_passes_the_repository() {
    let bin = env!("CARGO_BIN_EXE_check-layers");
    let out = Command::new(bin)
        .arg("--root")
        .arg(fixture("string"))
        .arg(fixture("string/demo"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let out = Command::new(bin)
        .arg("--root")
        .arg(fixture("clean"))
        .arg(fixture("clean/demo"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(bin)
        .current_dir(&repo)
        .args(["--known", "scripts/layers-known-cycles", "--facade", "scripts/layers-facade"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("veem: 0 files still extend the facade"), "{text}");
}
