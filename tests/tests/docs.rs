//! What a user reads (the guides, the READMEs, the configurations the
//! packages install and the lab's), checked as text: no tracker numbers,
//! and every work cited by letter listed in `docs/references.md`.

use std::path::{Path, PathBuf};

/// The files a user reads: `docs/*.md`, the READMEs, `ARCHITECTURE.md`,
/// and the TOML under `packaging/` and `configs/`.
fn read_by_users(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![
        root.join("README.md"),
        root.join("ARCHITECTURE.md"),
        root.join("image-repo/README.md"),
    ];
    let mut dirs = vec![root.join("docs"), root.join("packaging"), root.join("configs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md" || x == "toml") {
                files.push(p);
            }
        }
    }
    files.retain(|f| f.exists());
    files
}

/// Where `text` names a tracker number (`issue 12`, `Issue 7`): the
/// lines, numbered from 1.
fn tracker_numbers(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let l = l.to_ascii_lowercase();
            l.match_indices("issue ")
                .any(|(i, m)| l[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
        })
        .map(|(n, _)| n + 1)
        .collect()
}

#[test]
fn nothing_a_user_reads_names_a_tracker_number() {
    assert_eq!(tracker_numbers("see issue 39 for\nfine\nIssue 7"), vec![1, 3]);
    assert!(tracker_numbers("an issue to fix, 3 issues").is_empty());
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let files = read_by_users(root);
    assert!(files.len() > 10, "{files:?}");
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            tracker_numbers(&text)
                .into_iter()
                .map(move |n| format!("{}:{n}", f.strip_prefix(root).unwrap_or(f).display()))
        })
        .collect();
    assert!(found.is_empty(), "tracker numbers where users read: {found:?}");
}

#[test]
fn every_work_cited_by_letter_is_in_the_references() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let refs = std::fs::read_to_string(root.join("docs/references.md")).unwrap();
    for f in read_by_users(root) {
        let text = std::fs::read_to_string(&f).unwrap();
        for key in ["H", "V", "D", "B", "E"] {
            if text.contains(&format!("{key} §")) {
                assert!(refs.contains(&format!("**[{key}]**")), "{} cites {key}", f.display());
            }
        }
    }
}
