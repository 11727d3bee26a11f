//! The `image-repo` command line against the real server binary.

mod common;

use common::{content, run, run_ok, write_file, Options, Repo, TOKEN};
use interfaces::repo_client::{BlobKind, BlobMeta};
use interfaces::BlobId;

#[test]
fn push_prints_the_id_alone_and_pull_ls_show_agree() {
    let repo = Repo::start();
    let data = content(1, 300_000);
    let file = write_file(repo.scratch(), "debian.qcow2", &data);
    let out = run_ok(repo.cli().args(["push"]).arg(&file).args([
        "--name",
        "debian-12",
        "--format",
        "qcow2",
        "--label",
        "os=debian",
        "--label",
        "arch=x86_64",
    ]));
    let id = BlobId::of(&data);
    assert_eq!(out.lines().last().unwrap(), id.to_string(), "stdout: {out:?}");

    let dest = repo.scratch().join("pulled.img");
    let out = run_ok(repo.cli().args(["pull", &id.to_string()]).arg(&dest));
    assert!(out.contains("300000 bytes"), "{out}");
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    assert!(!repo.scratch().join("pulled.img.partial").exists());

    let json = run_ok(repo.cli().args(["ls", "-o", "json"]));
    let list: Vec<BlobMeta> = serde_json::from_value(serde_json::from_str::<serde_json::Value>(&json).unwrap()["items"].clone()).unwrap();
    // -q: the IDs alone, as veem's.
    assert_eq!(run_ok(repo.cli().args(["ls", "-q"])), format!("{id}\n"));
    assert_eq!(list.len(), 1);
    let m = &list[0];
    assert_eq!(
        (m.id.clone(), m.name.as_str(), m.kind, m.size),
        (id.clone(), "debian-12", BlobKind::Disk, 300_000)
    );
    assert_eq!(m.format.as_deref(), Some("qcow2"));
    assert_eq!(m.labels.get("os").map(String::as_str), Some("debian"));
    assert_eq!(m.labels.get("arch").map(String::as_str), Some("x86_64"));

    let table = run_ok(repo.cli().arg("ls"));
    assert!(table.lines().next().unwrap().starts_with("ID"), "{table}");
    assert!(table.contains(&id.to_string()) && table.contains("debian-12"), "{table}");

    let text = run_ok(repo.cli().args(["show", &id.to_string()]));
    assert!(
        text.contains("name:    debian-12") && text.contains("labels:  arch=x86_64, os=debian"),
        "{text}"
    );
    let shown: BlobMeta = serde_json::from_str(&run_ok(repo.cli().args(["show", &id.to_string(), "--output", "json"]))).unwrap();
    assert_eq!(&shown, m);
    let yaml = run_ok(repo.cli().args(["show", &id.to_string(), "-o", "yaml"]));
    assert!(yaml.starts_with(&format!("id: {id}\n")), "{yaml}");
    assert!(yaml.contains("\nname: debian-12\n") && yaml.contains("\n  os: debian\n"), "{yaml}");
    let yaml = run_ok(repo.cli().args(["ls", "-o", "yaml"]));
    assert!(yaml.starts_with(&format!("items:\n- id: {id}\n")), "{yaml}");
}

#[test]
fn push_defaults_name_from_file_and_sniffs_format() {
    let repo = Repo::start();
    let mut qcow = b"QFI\xfb".to_vec();
    qcow.extend(content(2, 1000));
    let q = write_file(repo.scratch(), "a.img", &qcow);
    let r = write_file(repo.scratch(), "vmlinuz", &content(3, 1000));
    let qid = run_ok(repo.cli().arg("push").arg(&q)).trim().to_string();
    let kid = run_ok(repo.cli().arg("push").arg(&r).args(["--kind", "kernel"])).trim().to_string();
    let client = repo.client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let qm = rt.block_on(client.head(&qid.parse().unwrap())).unwrap().unwrap();
    let km = rt.block_on(client.head(&kid.parse().unwrap())).unwrap().unwrap();
    assert_eq!((qm.name.as_str(), qm.format.as_deref()), ("a.img", Some("qcow2")));
    assert_eq!(
        (km.name.as_str(), km.kind, km.format.as_deref()),
        ("vmlinuz", BlobKind::Kernel, None)
    );
}

#[test]
fn same_content_pushed_twice_is_stored_once() {
    let repo = Repo::start();
    let file = write_file(repo.scratch(), "f", &content(4, 50_000));
    let a = run_ok(repo.cli().arg("push").arg(&file).args(["--name", "first"]));
    let b = run_ok(repo.cli().arg("push").arg(&file).args(["--name", "second"]));
    assert_eq!(a.lines().last(), b.lines().last());
    let list: Vec<BlobMeta> = serde_json::from_value(
        serde_json::from_str::<serde_json::Value>(&run_ok(repo.cli().args(["ls", "-o", "json"]))).unwrap()["items"].clone(),
    )
    .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].name, "first");
    assert_eq!(repo.blob_files().len(), 1);
}

#[test]
fn rm_of_a_pinned_blob_needs_force() {
    let repo = Repo::start();
    let file = write_file(repo.scratch(), "mem", &content(5, 10_000));
    let id = run_ok(repo.cli().arg("push").arg(&file).args(["--kind", "checkpoint-memory"]))
        .trim()
        .to_string();
    run_ok(repo.cli().args(["pin", &id, "checkpoint:7"]));
    run_ok(repo.cli().args(["pin", &id, "site-b"]));
    let shown = run_ok(repo.cli().args(["show", &id]));
    assert!(shown.contains("pins:    checkpoint:7, site-b"), "{shown}");

    let (out, _, stderr) = run(repo.cli().args(["rm", &id]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("pinned by checkpoint:7, site-b") && stderr.contains(&id),
        "{stderr}"
    );
    run_ok(repo.cli().args(["show", &id]));

    run_ok(repo.cli().args(["unpin", &id, "checkpoint:7"]));
    run_ok(repo.cli().args(["unpin", &id, "checkpoint:7"])); // idempotent
    let (out, _, stderr) = run(repo.cli().args(["rm", &id]));
    assert!(!out.status.success() && stderr.contains("pinned by site-b"), "{stderr}");

    run_ok(repo.cli().args(["rm", &id, "--force"]));
    let (out, _, stderr) = run(repo.cli().args(["show", &id]));
    assert!(
        !out.status.success() && stderr.contains("not found") && stderr.contains(&id),
        "{stderr}"
    );
    assert!(repo.blob_files().is_empty());
}

#[test]
fn repo_and_token_file_flags_replace_the_environment() {
    let repo = Repo::start_with(Options {
        flags_only: true,
        ..Options::default()
    });
    let file = write_file(repo.scratch(), "f", &content(6, 1000));
    let mut cmd = std::process::Command::new(common::bin());
    cmd.env_remove("IMAGE_REPO_URL").env_remove("IMAGE_REPO_TOKEN");
    let token_file = write_file(repo.scratch(), "token", format!("{TOKEN}\n").as_bytes());
    let out = run_ok(
        cmd.arg("push")
            .arg(&file)
            .args(["--repo", &repo.url, "--token-file"])
            .arg(&token_file),
    );
    assert_eq!(out.trim(), BlobId::of(&content(6, 1000)).to_string());

    // A token on the command line is refused before anything is sent:
    // every user of the machine would see it in `ps`.
    let mut cmd = std::process::Command::new(common::bin());
    cmd.env_remove("IMAGE_REPO_URL").env_remove("IMAGE_REPO_TOKEN");
    let (out, _, stderr) = run(cmd.args(["ls", "--repo", &repo.url, "--token", TOKEN]));
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr.contains("--token: a token on the command line is visible") && stderr.contains("--token-file"),
        "{stderr}"
    );

    let mut cmd = std::process::Command::new(common::bin());
    cmd.env_remove("IMAGE_REPO_URL").env_remove("IMAGE_REPO_TOKEN");
    let (out, _, stderr) = run(cmd.arg("ls"));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("--repo"), "{stderr}");
}

#[test]
fn wrong_or_missing_token_is_refused_and_changes_nothing() {
    let repo = Repo::start();
    let file = write_file(repo.scratch(), "f", &content(7, 1000));
    for token in [None, Some("wrong-token")] {
        let mut cmd = repo.cli();
        match token {
            Some(t) => cmd.env("IMAGE_REPO_TOKEN", t),
            None => cmd.env_remove("IMAGE_REPO_TOKEN"),
        };
        let (out, stdout, stderr) = run(cmd.arg("push").arg(&file));
        assert_eq!(out.status.code(), Some(1));
        assert!(stdout.is_empty());
        assert!(stderr.contains("401") && stderr.contains("token"), "{stderr}");
    }
    assert!(repo.blob_files().is_empty());
    let id = run_ok(repo.cli().arg("push").arg(&file)).trim().to_string();
    let (out, _, stderr) = run(repo.cli().env("IMAGE_REPO_TOKEN", "wrong-token").args(["rm", &id]));
    assert!(!out.status.success() && stderr.contains("401"), "{stderr}");
    let (out, _, _) = run(repo.cli().env("IMAGE_REPO_TOKEN", "wrong-token").args(["pin", &id, "x"]));
    assert!(!out.status.success());
    assert!(run_ok(repo.cli().args(["show", &id])).contains("pins:    -"));
}

#[test]
fn reads_need_a_known_token() {
    let repo = Repo::start();
    let file = write_file(repo.scratch(), "f", &content(8, 1000));
    let id = run_ok(repo.cli().arg("push").arg(&file)).trim().to_string();
    let dest = repo.scratch().join("out");
    for token in [None, Some("wrong-token")] {
        let mut cmd = repo.cli();
        match token {
            Some(t) => cmd.env("IMAGE_REPO_TOKEN", t),
            None => cmd.env_remove("IMAGE_REPO_TOKEN"),
        };
        let (out, _, stderr) = run(cmd.arg("ls"));
        assert!(!out.status.success() && stderr.contains("401"), "{stderr}");
        let mut cmd = repo.cli();
        cmd.env("IMAGE_REPO_TOKEN", token.unwrap_or("")).args(["pull", &id]).arg(&dest);
        let (out, _, _) = run(&mut cmd);
        assert!(!out.status.success() && !dest.exists());
    }
}

#[test]
fn bad_input_on_the_command_line() {
    let repo = Repo::start();
    let dest = repo.scratch().join("out");
    let (out, _, stderr) = run(repo.cli().args(["pull", "sha256:xyz"]).arg(&dest));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("invalid blob ID"), "{stderr}");

    let unknown = BlobId::of(b"never pushed").to_string();
    let (out, _, stderr) = run(repo.cli().args(["pull", &unknown]).arg(&dest));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains(&unknown) && stderr.contains("not found"), "{stderr}");
    assert!(!dest.exists() && !repo.scratch().join("out.partial").exists());

    let file = write_file(repo.scratch(), "f", b"x");
    for name in ["a/b", "..", "x..y"] {
        let (out, _, stderr) = run(repo.cli().arg("push").arg(&file).args(["--name", name]));
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(stderr.contains("field `name`"), "{name}: {stderr}");
    }
    let (out, _, stderr) = run(repo.cli().arg("push").arg(&file).args(["--label", "os"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("not key=value"), "{stderr}");
    let (out, _, stderr) = run(repo.cli().arg("push").arg(&file).args(["--kind", "floppy"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("checkpoint-disk"), "{stderr}");
    let (out, _, stderr) = run(repo.cli().arg("push").arg(repo.scratch().join("missing")));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("missing"), "{stderr}");
    assert!(repo.blob_files().is_empty());
}

#[test]
fn progress_bar_only_on_a_terminal() {
    let repo = Repo::start();
    let data = content(9, 8 << 20);
    let file = write_file(repo.scratch(), "big", &data);
    // Not a terminal: stderr stays empty.
    let (out, stdout, stderr) = run(repo.cli().arg("push").arg(&file));
    assert!(out.status.success());
    assert_eq!(stdout.lines().count(), 1);
    assert!(stderr.is_empty(), "{stderr:?}");
    let id = stdout.trim().to_string();
    let dest = repo.scratch().join("pulled");
    let (out, _, stderr) = run(repo.cli().args(["pull", &id]).arg(&dest));
    assert!(out.status.success() && stderr.is_empty(), "{stderr:?}");

    // On a terminal (script(1) gives the command a pseudo-terminal): a bar.
    if std::process::Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipping the terminal half: script(1) is not installed");
        return;
    }
    std::fs::remove_file(&dest).unwrap();
    let line = format!("{} pull {id} {}", common::bin(), dest.display());
    let (out, tty, _) = run(std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("IMAGE_REPO_URL", &repo.url)
        .env("IMAGE_REPO_TOKEN", TOKEN)
        .env("TERM", "xterm"));
    assert!(out.status.success(), "{tty}");
    assert!(
        tty.contains("pull sha256:") && tty.contains("MiB"),
        "no progress bar on the terminal: {tty:?}"
    );
    assert_eq!(std::fs::read(&dest).unwrap(), data);
}
