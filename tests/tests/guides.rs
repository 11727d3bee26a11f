//! The guides' shell blocks run as a reader pastes them. Every fenced
//! shell block of what a user reads is marked on the line before it:
//! `<!-- run: tests/tests/guides.rs -->`, run here against a real site (a
//! VEEM over TLS, a VEEH, the image repository, the tiny guest), or
//! `<!-- not run: REASON -->`. A block runs under `bash -euo pipefail` in
//! a directory holding the files it names (the reader's manifest, CA and
//! token files), with only the example's host names replaced by the
//! lab's: a flag renamed, a port changed or a command gone fails here.

use std::path::Path;
use std::process::Output;

use e2e::daemons::{ImageRepo, Veeh};
use e2e::guides::{self, Block, Mark};
use e2e::site::{self, manifest, Veem, ACME};
use e2e::{guest, lab};

/// Every shell block of the guides says whether a test runs it, and one
/// marked to run here is run by the test below (its file is listed there).
#[test]
fn every_shell_block_of_the_guides_is_run_or_says_why_not() {
    let mut unmarked = Vec::new();
    for f in guides::read_by_users()
        .into_iter()
        .filter(|f| f.extension().is_some_and(|x| x == "md"))
    {
        let text = std::fs::read_to_string(&f).unwrap();
        for b in guides::blocks(&text).into_iter().filter(Block::is_shell) {
            let at = format!("{}:{}", f.strip_prefix(guides::root()).unwrap_or(&f).display(), b.line);
            match &b.mark {
                Mark::Unmarked => unmarked.push(at),
                Mark::NotRun(why) => assert!(!why.is_empty(), "{at}: `not run:` without a reason"),
                Mark::Run(test) => {
                    assert_eq!(test, "tests/tests/guides.rs", "{at}: no other test runs guides' blocks");
                    assert!(
                        GUIDES.iter().any(|g| at.starts_with(g)),
                        "{at}: run here, but {GUIDES:?} does not list its file"
                    );
                }
            }
        }
    }
    assert!(
        unmarked.is_empty(),
        "shell blocks without `<!-- run: tests/tests/guides.rs -->` or `<!-- not run: REASON -->` on the line before: {unmarked:#?}"
    );
}

/// The files whose blocks [`lab_the_guides_commands_run_as_written`] runs.
const GUIDES: [&str; 2] = ["docs/provider-guide.md", "docs/operator-guide.md"];

/// `block` run by bash in `cwd`, the example's hosts replaced as
/// `hosts` says, with the daemons' binaries first on the PATH, `home` as
/// HOME and no `VEEM_*` of this machine's.
fn run(block: &Block, cwd: &Path, home: &Path, hosts: &[(&str, &str)]) -> Output {
    let mut script = block.text.clone();
    for (example, lab) in hosts {
        script = script.replace(example, lab);
    }
    let bin = lab::binary("veem");
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = std::process::Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", &script])
        .current_dir(cwd)
        .env("PATH", path)
        .env("HOME", home);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("VEEM_") || k.starts_with("IMAGE_REPO_")) {
        cmd.env_remove(k);
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Writes a secret file as a reader keeps one: mode 0600.
fn secret(path: &Path, value: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("{value}\n")).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_the_guides_commands_run_as_written() {
    let _lab = lab::lock();
    let dir = lab::test_dir("guides");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "guides-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let port = site::port();
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&a1], &[], "");
    let veem = Veem::start(&dir, "site-a", port, cfg).await;

    // The reader's files, as the guides name them.
    let cwd = dir.join("reader");
    let home = dir.join("home");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::write(cwd.join("shop.toml"), manifest("shop", "acme", &ids, 1, "")).unwrap();
    std::fs::copy(vee_testkit::pki::site("site-a").vmi_ca(), cwd.join("vmi-ca.pem")).unwrap();
    std::fs::copy(&repo.ca, cwd.join("repo-ca.pem")).unwrap();
    std::fs::copy(guest::image().disk, cwd.join("disk.qcow2")).unwrap();
    secret(&home.join(".config/veem/acme.token"), ACME);
    secret(&cwd.join("acme-repo.token"), &repo.provider_token("acme"));
    let vmi = veem.endpoint.trim_start_matches("https://").to_string();
    let hosts = [
        ("https://veem.example:7200", veem.endpoint.as_str()),
        ("veem.example:7200", vmi.as_str()),
        ("https://repo.example:7480", repo.url.as_str()),
    ];

    let mut ran = 0;
    for file in GUIDES {
        for b in guides::run_by(file, "guides") {
            let out = run(&b, &cwd, &home, &hosts);
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            assert!(out.status.success(), "{file}:{}: {}\n{stdout}\n{stderr}", b.line, out.status);
            // What is stable in what they print.
            if b.text.contains("veem deploy") {
                assert!(stdout.contains("1/1 VEEs running"), "{file}:{}: {stdout}", b.line);
                assert!(stdout.contains("terminated"), "{file}:{}: undeployed: {stdout}", b.line);
            }
            if b.text.contains("image-repo push ") {
                let id = stdout.lines().last().unwrap_or_default();
                assert!(
                    id.starts_with("sha256:") && id.len() == 71,
                    "{file}:{}: a content ID last: {stdout}",
                    b.line
                );
            }
            if b.text.contains("/readyz") {
                assert_eq!(stdout.trim(), "ready", "{file}:{}", b.line);
            }
            ran += 1;
        }
    }
    assert!(ran >= 3, "{ran} blocks ran");
}
