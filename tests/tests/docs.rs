//! What a user reads (the guides, the READMEs, the configurations the
//! packages install and the lab's), checked as text: no tracker numbers,
//! every work cited by letter listed in `docs/references.md`, and the
//! versions of `ARCHITECTURE.md`'s format table those of the code.

use e2e::guides::{self, read_by_users};

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
    let root = &guides::root();
    let files = read_by_users();
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
    let root = guides::root();
    let refs = std::fs::read_to_string(root.join("docs/references.md")).unwrap();
    for f in read_by_users() {
        let text = std::fs::read_to_string(&f).unwrap();
        for key in ["H", "V", "D", "B", "E"] {
            if text.contains(&format!("{key} §")) {
                assert!(refs.contains(&format!("**[{key}]**")), "{} cites {key}", f.display());
            }
        }
    }
}

/// The TOML blocks of `file` (```` ```toml ```` fenced), in order.
fn toml_blocks(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(guides::root().join(file)).unwrap();
    guides::blocks(&text)
        .into_iter()
        .filter(|b| b.lang == "toml")
        .map(|b| b.text)
        .collect()
}

/// Which parser a guide's TOML block is for.
enum Kind {
    /// A whole service manifest, or `[[elasticity]]` rules to add to one.
    Manifest,
    Elasticity,
    /// A part of `veem.toml` (its sections, on top of the least
    /// configuration, with its TLS).
    Veem,
    /// The CLI's client configuration.
    Client,
}

fn kind(block: &str) -> Kind {
    if block.contains("[service]") {
        Kind::Manifest
    } else if block.trim_start().starts_with("[[elasticity]]") {
        Kind::Elasticity
    } else if block.contains("[[contexts]]") {
        Kind::Client
    } else {
        Kind::Veem
    }
}

/// Every TOML block of the guides parses with the parser its reader
/// hands it to, and passes its checks: a manifest (its placeholder IDs
/// given a real shape) with `vee_manifest`, a part of `veem.toml` with the
/// VEEM's configuration (on top of the least one), the client
/// configuration with the CLI's. A field renamed or a value the code
/// refuses fails here.
#[test]
fn the_guides_toml_parses_as_their_readers_use_it() {
    const LEAST: &str =
        "site_id = \"site-a\"\nlisten = \"10.0.0.21:7200\"\ndb = \"/var/lib/veem/db\"\nimage_repo = \"https://repo.example:7480\"\n";
    let id = format!("sha256:{}", "ab".repeat(32));
    let mut manifest = None;
    let mut checked = 0;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret.token");
    std::fs::write(&secret, "a-token-of-the-guides\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    for file in [
        "docs/manifest-reference.md",
        "docs/provider-guide.md",
        "docs/operator-guide.md",
        "docs/reliability.md",
        "docs/security.md",
        "README.md",
    ] {
        for (n, block) in toml_blocks(file).into_iter().enumerate() {
            let at = format!("{file}, TOML block {}", n + 1);
            checked += 1;
            match kind(&block) {
                Kind::Manifest => {
                    let m = block.replace("\"sha256:...\"", &format!("{id:?}"));
                    interfaces::manifest::Manifest::from_toml(&m).unwrap_or_else(|e| panic!("{at}: {e}"));
                    manifest = Some(m);
                }
                Kind::Elasticity => {
                    // The rules act on `web` and `db`: the manifest before
                    // with a `web` component beside its `db`.
                    let base = manifest.clone().unwrap_or_else(|| panic!("{at}: no manifest before it"));
                    let web = base.replacen("[[component]]\nname = \"db\"", "[[component]]\nname = \"web\"\nvcpus = 1\nmemory_mib = 256\ndisk_gib = 1\nimage = \"IMAGE\"\n[[component]]\nname = \"db\"", 1)
                        .replace("\"IMAGE\"", &format!("{id:?}"));
                    interfaces::manifest::Manifest::from_toml(&format!("{web}\n{block}")).unwrap_or_else(|e| panic!("{at}: {e}"));
                }
                Kind::Veem => {
                    // The secret files it names: one only the test may read.
                    let block: String = block
                        .lines()
                        .map(|l| match l.split_once("token_file = ") {
                            Some((key, _)) => format!("{key}token_file = {:?}", secret.display()),
                            None => l.to_string(),
                        })
                        .collect::<Vec<_>>()
                        .join("\n");
                    let tls = "[tls]\ncert = \"/etc/veem/vmi.crt\"\nkey = \"/etc/veem/vmi.key\"\n";
                    veem::config::VeemConfig::parse(&format!("{LEAST}{block}\n{tls}")).unwrap_or_else(|e| panic!("{at}: {e:#}"));
                }
                Kind::Client => {
                    toml::from_str::<veem::cli::context::ClientConfig>(&block).unwrap_or_else(|e| panic!("{at}: {e}"));
                }
            }
        }
    }
    assert!(checked >= 10, "{checked} blocks");
}

/// The configurations the packages install and the demo's hold no secret
/// in clear (they name files, or hold a token's SHA-256), and every
/// secret file a lab configuration names is one `scripts/demo` writes.
#[test]
fn the_installed_and_lab_configurations_hold_no_secret_in_clear() {
    let root = guides::root();
    let demo = std::fs::read_to_string(root.join("scripts/demo")).unwrap();
    let mut checked = 0;
    for dir in ["packaging/config", "configs/lab"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap();
            for line in text.lines().map(str::trim_start).filter(|l| !l.starts_with('#')) {
                let key = line.split('=').next().unwrap_or("").trim();
                assert!(
                    !matches!(key, "token" | "image_repo_token" | "password"),
                    "{}: a secret in clear: {line}",
                    e.path().display()
                );
                if let Some(file) = line.split('"').nth(1).and_then(|v| v.strip_prefix("@DEMO@/")) {
                    if key.ends_with("token_file") {
                        assert!(
                            demo.contains(&format!("$DEMO/{file}")),
                            "{}: scripts/demo does not write {file}",
                            e.path().display()
                        );
                    }
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} configurations");
}

/// The guides read as guides: no change-log phrases ("is now", "the next
/// step") where a user reads.
#[test]
fn the_guides_read_as_guides_not_as_change_logs() {
    let phrases = [
        " is now ",
        " are now ",
        " now do",
        "the next step",
        "as before",
        "previously",
        "used to be",
        "no longer relies",
    ];
    let mut found = Vec::new();
    for f in read_by_users() {
        let text = std::fs::read_to_string(&f).unwrap().to_lowercase().replace('\n', " ");
        for p in phrases {
            if text.contains(p) {
                found.push(format!("{}: {p:?}", f.display()));
            }
        }
    }
    assert!(found.is_empty(), "change-log phrases: {found:#?}");
}

/// The file a row of `ARCHITECTURE.md`'s versioned formats table names,
/// and its constant: `veem/src/store.rs` `FORMAT_VERSION`, or
/// `interfaces::chunks::CHUNK_INDEX_FORMAT` (the crate's module).
fn format_constant(cell: &str) -> Option<(String, String)> {
    let ticked: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
    let first = *ticked.first()?;
    if first.ends_with(".rs") {
        let name = ticked.get(1)?;
        return Some((first.to_string(), name.to_string()));
    }
    let mut path: Vec<&str> = first.split("::").collect();
    let name = path.pop()?.to_string();
    let krate = path.remove(0);
    let file = if path.is_empty() { format!("{krate}/src/lib.rs") } else { format!("{krate}/src/{}.rs", path.join("/")) };
    Some((file, name))
}

/// Each versioned format's version in `ARCHITECTURE.md` is its constant's
/// in the code it names.
#[test]
fn the_architectures_format_versions_are_the_codes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let table = doc.split("## Versioned formats").nth(1).unwrap();
    let mut checked = 0;
    for row in table.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')).skip(2) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let (file, name) = format_constant(cells[1]).unwrap_or_else(|| panic!("no file and constant in {row}"));
        let code = std::fs::read_to_string(root.join(&file)).unwrap_or_else(|e| panic!("{file} ({row}): {e}"));
        let value = code
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("pub const {name}:"))?.split('=').nth(1))
            .unwrap_or_else(|| panic!("no `pub const {name}` in {file}"));
        let value = value.trim().trim_end_matches(';').trim_matches('"');
        assert_eq!(value, cells[2], "{name} in {file}: the code says {value}, ARCHITECTURE.md {}", cells[2]);
        checked += 1;
    }
    assert!(checked >= 7, "only {checked} rows read");
}
