//! The daemons as processes (issue 15): `veem serve` stops cleanly on
//! SIGTERM (what systemd sends), also while a client follows a WatchEvents
//! stream: the stream ends, the VEEM exits with success at once (well
//! within its grace period), says so in its log, and its database opens
//! again at once (no lock left behind); `veeh serve` and `image-repo serve`
//! stop the same way; every binary prints its version with the git
//! revision. Only the VEEH's test takes the lab (its libvirtd); none boots
//! a guest.

use std::time::{Duration, Instant};

use e2e::daemons::{ImageRepo, Veeh};
use e2e::{lab, site};
use interfaces::vmi::WatchEventsRequest;

#[tokio::test]
async fn veem_stops_cleanly_on_sigterm_and_starts_again_on_the_same_database() {
    let dir = lab::test_dir("veem-stop");
    let repo = ImageRepo::start(&dir).await;
    let port = site::port();
    let config = site::write_config(&dir, "site-a", port, &repo, &[], &[], "");
    let veem = site::Veem::start(&dir, "site-a", port, config.clone()).await;
    // A client that follows the events and never lets go.
    let mut watcher = veem.client(site::OPERATOR).await;
    let _stream = watcher.watch_events(WatchEventsRequest::default()).await.unwrap().into_inner();
    let start = Instant::now();
    let mut daemon = veem.daemon;
    let status = tokio::task::spawn_blocking(move || {
        let st = daemon.terminate(Duration::from_secs(30));
        (st, daemon)
    })
    .await
    .unwrap();
    let (status, daemon) = status;
    let status = status.unwrap();
    assert!(status.success(), "exit: {status}; log:\n{}", daemon.log_text());
    assert!(daemon.log_text().contains("stopped"), "{}", daemon.log_text());
    println!("stopped {:?} after SIGTERM with a stream open", start.elapsed());
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the open stream ended at the stop instead of holding it for the grace period: {:?}",
        start.elapsed()
    );
    // The same database, at once: the stopped VEEM released it.
    let again = site::Veem::start(&dir, "site-a", port, config).await;
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A VEEM whose hosts do not answer takes seconds to start (it waits for
/// their heartbeats, then reconciles): meanwhile its port answers, health
/// NOT_SERVING and calls UNAVAILABLE, and a SIGTERM at any moment of it is
/// a clean stop that leaves the database to the next start (issue 36).
#[tokio::test(flavor = "multi_thread")]
async fn veem_answers_not_serving_while_it_starts_and_stops_cleanly_at_any_moment_of_it() {
    let dir = lab::test_dir("veem-start-stop");
    let repo = ImageRepo::start(&dir).await;
    let port = site::port();
    let hosts = "[[hosts]]\nname = \"gone\"\nendpoint = \"https://127.0.0.1:1\"\n";
    let config = site::write_config(&dir, "site-a", port, &repo, &[], &[], hosts);
    let spawn = || {
        vee_testkit::daemon::Daemon::spawn_at(
            lab::Place::SiteA,
            "veem-site-a",
            "veem",
            &["serve", "--config", config.to_str().unwrap()],
            &dir,
        )
    };
    let endpoint = site::endpoint("site-a", port);
    let pki = vee_testkit::pki::site("site-a");
    for delay in [100, 400] {
        let mut veem = spawn();
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let took = stops_cleanly(&mut veem);
        println!("stopped {delay} ms into its start-up in {took:?}");
    }
    let mut veem = spawn();
    let start = Instant::now();
    let ch = loop {
        if let Ok(ch) = pki.vmi_channel(&endpoint, None).await {
            break ch;
        }
        assert!(start.elapsed() < Duration::from_secs(3), "the port is not served at once");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    use tonic_health::pb::health_check_response::ServingStatus;
    assert_eq!(
        e2e::grpc::health(ch.clone(), "vmi.v1.VmiService").await.unwrap(),
        ServingStatus::NotServing
    );
    let mut op =
        interfaces::vmi::vmi_service_client::VmiServiceClient::with_interceptor(ch, veem::peers::Bearer::new(site::OPERATOR).unwrap());
    let err = op
        .list_services(interfaces::vmi::ListServicesRequest::default())
        .await
        .expect_err("served while starting");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}: the test needs the start-up still under way",
        start.elapsed()
    );
    let took = stops_cleanly(&mut veem);
    assert!(took < Duration::from_secs(3), "{took:?}");
    // The same database, at once, to the end of its start-up.
    let mut veem = spawn();
    let start = Instant::now();
    loop {
        if let Ok(ch) = pki.vmi_channel(&endpoint, None).await {
            if matches!(e2e::grpc::health(ch, "vmi.v1.VmiService").await, Ok(ServingStatus::Serving)) {
                break;
            }
        }
        veem.assert_alive();
        assert!(start.elapsed() < Duration::from_secs(30), "{}", veem.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stops_cleanly(&mut veem);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends SIGTERM to `daemon` and returns how long it took to exit, after
/// asserting that it exited with success and logged its stop.
fn stops_cleanly(daemon: &mut vee_testkit::daemon::Daemon) -> Duration {
    let start = Instant::now();
    let status = tokio::task::block_in_place(|| daemon.terminate(Duration::from_secs(30))).unwrap();
    assert!(status.success(), "exit: {status}; log:\n{}", daemon.log_text());
    assert!(daemon.log_text().contains("stopped"), "{}", daemon.log_text());
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread")]
async fn veeh_and_image_repo_stop_cleanly_on_sigterm() {
    let _lab = lab::lock();
    let dir = lab::test_dir("daemons-stop");
    let repo = ImageRepo::start(&dir).await;
    let mut veeh = Veeh::start(&dir, "st1", "site-a", lab::SITE_A_URI, &repo).await;
    let took = stops_cleanly(&mut veeh.daemon);
    assert!(took < Duration::from_secs(5), "veeh took {took:?}");
    let mut repo = repo;
    let took = stops_cleanly(&mut repo.daemon);
    assert!(took < Duration::from_secs(5), "image-repo took {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_binary_prints_its_version_with_the_git_revision() {
    for bin in ["veem", "veeh", "image-repo"] {
        let out = std::process::Command::new(lab::binary(bin)).arg("--version").output().unwrap();
        assert!(out.status.success(), "{bin} --version: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let want = format!("{bin} {}", interfaces::daemon::version());
        assert_eq!(text.trim(), want, "{bin}");
    }
}

#[test]
fn a_daemon_started_with_log_format_json_logs_one_json_object_per_line() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "a-token-of-the-operator\n").unwrap();
    let mut child = std::process::Command::new(lab::binary("image-repo"))
        .args(["serve", "--insecure", "--log-format", "json", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data"))
        .arg("--token-file")
        .arg(&token)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let serving = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.contains("image repository serving"))
        .expect("a serving line");
    let v: serde_json::Value = serde_json::from_str(&serving).unwrap_or_else(|e| panic!("{e}: {serving}"));
    assert_eq!(v["level"], "INFO", "{v}");
    assert_eq!(v["fields"]["message"], "image repository serving", "{v}");
    assert!(v["timestamp"].is_string() && v["fields"]["addr"].is_string(), "{v}");
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(child.wait().unwrap().success());
    assert!(
        rest.iter().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()),
        "{rest:?}"
    );
}

#[test]
fn every_daemon_names_the_file_line_column_and_field_of_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = |bin: &str, args: &[&str]| {
        let out = std::process::Command::new(lab::binary(bin)).args(args).output().unwrap();
        assert!(!out.status.success(), "{bin} {args:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    // A type error, where it is.
    let veeh = file(
        "veeh.toml",
        "host = \"h1\"\nsite_id = \"a\"\nlibvirt_uri = \"qemu:///system\"\nlisten = \"127.0.0.1:1\"\nstate_dir = \"/tmp/x\"\nmigration_address = \"127.0.0.1\"\nimage_repo = \"http://127.0.0.1:1\"\ninsecure = true\ncache_limit = \"lots\"\n[capacity]\nvcpus = 1\nmemory_mib = 1\ndisk_gib = 1\n",
    );
    let e = run("veeh", &["serve", "--config", &veeh]);
    assert!(e.contains(&format!("{veeh}:9:1: field `cache_limit`: ")), "{e}");
    // A daemon's own rule, located the same way.
    let veem = file(
        "veem.toml",
        "site_id = \"a\"\nlisten = \"127.0.0.1:1\"\ndb = \"/tmp/y\"\nrank_policy = \"random\"\nimage_repo = \"http://127.0.0.1:1\"\ninsecure = true\n",
    );
    let e = run("veem", &["serve", "--config", &veem]);
    assert!(e.contains(&format!("{veem}:4:1: field `rank_policy`: ")), "{e}");
    let repo = file(
        "repo.toml",
        "data = \"/tmp/z\"\ntoken = \"a-long-operator-token\"\ninsecure = true\nmax_size = -1\n",
    );
    let e = run("image-repo", &["serve", "--config", &repo]);
    assert!(e.contains(&format!("{repo}:4:1: field `max_size`: ")), "{e}");
    // Without --config, the daemons read their file under /etc.
    let e = run("veeh", &["serve"]);
    assert!(e.contains("/etc/veeh/veeh.toml"), "{e}");
    let e = std::process::Command::new(lab::binary("veem"))
        .args(["serve"])
        .env_remove("VEEM_CONFIG")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&e.stderr).contains("/etc/veem/veem.toml"), "{e:?}");
}

#[test]
fn every_binary_prints_its_shell_completions_and_man_page() {
    let dir = tempfile::tempdir().unwrap();
    for bin in ["veem", "veeh", "image-repo"] {
        let run = |args: &[&str]| {
            let out = std::process::Command::new(lab::binary(bin)).args(args).output().unwrap();
            assert!(out.status.success(), "{bin} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap()
        };
        let bash = run(&["completions", "bash"]);
        let script = dir.path().join(format!("{bin}.bash"));
        std::fs::write(&script, &bash).unwrap();
        // The script is valid bash and completes the binary's subcommands.
        let check = std::process::Command::new("bash").arg("-n").arg(&script).status().unwrap();
        assert!(check.success(), "{bin}: bash -n");
        assert!(
            bash.contains(&format!("complete -F _{}", bin.replace('-', "__"))) && bash.contains("serve"),
            "{bin}"
        );
        for shell in ["zsh", "fish"] {
            assert!(run(&["completions", shell]).contains("serve"), "{bin} {shell}");
        }
        let man = run(&["man"]);
        assert!(
            man.contains(&format!(".TH {bin} 1")) && man.contains("serve"),
            "{bin}: {}",
            &man[..man.len().min(300)]
        );
    }
}
