//! The `veem` command line against a real site (a VEEM, two VEEHs, the tiny
//! guest), as a provider's script uses it: `deploy --wait` follows the
//! service until its VEEs run; `migrate --wait --timeout` on a proposal no
//! operator approves says what it waits for and exits 6 when the time is
//! up; services and VEEs are found by name, `component-instance` or short
//! ID; `-q` prints IDs; a list's JSON is `{"items": [...]}`; `undeploy`
//! stops every VEE of a service and leaves it listed, terminated.

use std::process::Output;

use e2e::daemons::{ImageRepo, Veeh};
use e2e::site::{self, manifest, Veem, ACME};
use e2e::{guest, lab};

/// `veem ARGS` as `token`'s holder, against `veem`, with no client
/// configuration of this machine's.
fn cli(veem: &Veem, token: &str, args: &[&str]) -> Output {
    site::cli_at(&veem.endpoint, &veem.dir, token, args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_deploy_waits_until_running_and_an_unapproved_migration_times_out() {
    let _lab = lab::lock();
    let dir = lab::test_dir("cli-wait");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "cli-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let a2 = Veeh::start(&dir, "cli-a2", "site-a", lab::SITE_A_URI, &repo).await;
    let port = site::port();
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&a1, &a2], &[], "");
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let path = dir.join("shop.toml");
    std::fs::write(&path, manifest("shop", "acme", &ids, 1, "")).unwrap();

    let out = cli(&veem, ACME, &["deploy", path.to_str().unwrap(), "--wait", "--timeout", "4m"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("1/1 VEEs running"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("state:") && l.contains("running")), "{stdout}");

    let out = cli(&veem, ACME, &["-o", "json", "ls"]);
    let vees: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    let vee = vees["items"][0]["vee_id"].as_str().unwrap_or_else(|| panic!("{vees}")).to_string();

    // Found by name, by `component-instance`, by a short ID; `-q` lists IDs.
    let out = cli(&veem, ACME, &["-o", "json", "service", "shop"]);
    let svc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert_eq!(svc["name"], "shop");
    for word in ["web-0", "shop/web-0", &vee[..8]] {
        let out = cli(&veem, ACME, &["-q", "show", word]);
        assert_eq!(text(&out.stdout).trim(), vee, "{word}: {}", text(&out.stderr));
    }
    let out = cli(&veem, ACME, &["-q", "ls", "shop"]);
    assert_eq!(text(&out.stdout), format!("{vee}\n"));
    let out = cli(&veem, ACME, &["show", "nothing-here"]);
    assert_eq!(out.status.code(), Some(1), "NotFound");
    assert!(text(&out.stderr).starts_with("error: NotFound: "), "{}", text(&out.stderr));

    // A provider's migration is a proposal: nobody approves it.
    let out = cli(&veem, ACME, &["migrate", &vee, "--wait", "--timeout", "3s"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(6), "{stdout}{stderr}");
    assert!(
        stdout.contains(": proposed: waiting for an operator to approve it (veem approve "),
        "{stdout}"
    );
    assert!(
        stderr.starts_with("error: timed out after 3s waiting for migration ") && stderr.contains("(proposed: no operator approved it)"),
        "{stderr}"
    );
    // Undeployed by name: every VEE stopped, its domain gone; the service
    // stays listed, terminated.
    let out = cli(&veem, ACME, &["-o", "json", "undeploy", "shop"]);
    let svc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert_eq!(
        (svc["state"].as_str(), svc["vees"][0]["state"].as_str()),
        (Some("terminated"), Some("terminated")),
        "{svc}"
    );
    for host in [&a1, &a2] {
        assert!(host.domains().await.iter().all(|d| d.vee_id != vee), "a domain of {vee} is left");
    }
    let out = cli(&veem, ACME, &["-q", "services"]);
    assert_eq!(text(&out.stdout).lines().count(), 1, "still listed");
    drop((veem, a1, a2, repo));
    std::fs::remove_dir_all(&dir).unwrap();
}
