//! A VEE's serial console on real guests: through the VMI (gRPC) as its
//! provider, a command typed and its answer read, refused to another
//! provider; attached again by itself after a live migration to another
//! host; audited as events (bytes, never the content); and `veem console`
//! in a terminal (a pty), Ctrl-] detaching.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use e2e::console::Console;
use e2e::daemons::{ImageRepo, Veeh};
use e2e::site::{self, Veem, ACME, GLOBEX, OPERATOR};
use e2e::{guest, lab};
use futures::StreamExt;
use interfaces::vmi::*;

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_vees_console_answers_follows_a_migration_and_is_audited() {
    let _lab = lab::lock();
    let dir = lab::test_dir("console");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let c1 = Veeh::start(&dir, "k1", "site-a", lab::SITE_A_URI, &repo).await;
    let c2 = Veeh::start(&dir, "k2", "site-a", lab::SITE_A2_URI, &repo).await;
    let port = site::port();
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&c1, &c2], &[], "");
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    let (svc, info) = veem.deploy_running(&mut acme, "shop", &ids).await;
    let vee = info.vee_id.clone();

    // Another provider is told there is no such VEE.
    let mut globex = veem.client(GLOBEX).await;
    let refused = Console::attach(&mut globex, &vee).await.err().expect("refused");
    assert_eq!(refused.code(), tonic::Code::NotFound, "{refused:?}");

    // Its provider types a command; the guest's shell answers.
    let console = Console::attach(&mut acme, &vee).await.unwrap();
    console.type_line("echo hello-$((6*7))").await;
    console.wait_for("hello-42", Duration::from_secs(60)).await;
    // The guest's own output comes too.
    console.wait_for("tick ", Duration::from_secs(10)).await;

    // A live migration to the other host: the console comes back.
    let from = site::host_of(&info).unwrap();
    let to = if from == c1.host { &c2.host } else { &c1.host };
    let m = site::migrate_approved(&veem, &vee, "", to).await;
    assert_eq!(m.state(), MigrationState::Done, "{m:?}");
    console
        .wait_for("[notice: the VEE moved: its console is attached again]", Duration::from_secs(30))
        .await;
    console.type_line("echo again-$((6*7))").await;
    console.wait_for("again-42", Duration::from_secs(60)).await;
    assert!(
        !console.shown.lock().unwrap().contains(to.as_str()),
        "a provider never learns the host"
    );
    drop(console);

    // `veem console` in a terminal: a pty, Ctrl-] detaches.
    let (text, code) = cli_console(&veem.endpoint, &dir, &vee).await;
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("pty-42") && text.contains("detached"), "{text}");

    // Audited: who, and bytes each way, never what was typed.
    let mut op = veem.client(OPERATOR).await;
    let events: Vec<Event> = op
        .watch_events(WatchEventsRequest {
            service_id: svc.service_id.clone(),
            history_only: true,
        })
        .await
        .unwrap()
        .into_inner()
        .filter_map(|e| std::future::ready(e.ok()))
        .collect()
        .await;
    let console_events: Vec<&str> = events.iter().filter(|e| e.kind == "console").map(|e| e.detail.as_str()).collect();
    assert_eq!(
        console_events.iter().filter(|d| d.starts_with("attached by provider acme")).count(),
        2,
        "{console_events:?}"
    );
    let detached: Vec<&&str> = console_events.iter().filter(|d| d.starts_with("detached")).collect();
    assert_eq!(detached.len(), 2, "{console_events:?}");
    assert!(
        detached.iter().any(|d| d.contains("provider acme, 40 bytes typed")),
        "the two lines typed: {console_events:?}"
    );
    assert!(console_events.iter().all(|d| !d.contains("echo")), "{console_events:?}");
}

/// Runs `veem console VEE` as acme in a pseudo-terminal: waits for the
/// guest's shell, types a command, waits for its answer, types Ctrl-];
/// what the terminal showed and the exit code.
async fn cli_console(endpoint: &str, dir: &std::path::Path, vee: &str) -> (String, Option<i32>) {
    let pty = nix::pty::openpty(None, None).unwrap();
    let tty = || std::process::Stdio::from(pty.slave.try_clone().unwrap());
    let mut child = std::process::Command::new(lab::binary("veem"))
        .env("VEEM_TOKEN", ACME)
        .env("VEEM_CA", vee_testkit::pki::site("site-a").vmi_ca())
        .env_remove("VEEM_CLIENT_CONFIG")
        .env("HOME", dir)
        .args(["--endpoint", endpoint, "console", vee])
        .stdin(tty())
        .stdout(tty())
        .stderr(tty())
        .spawn()
        .unwrap();
    drop(pty.slave);
    let fd = pty.master.as_raw_fd();
    // Non-blocking reads of the terminal's screen.
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
    let mut master = std::fs::File::from(pty.master);
    let mut screen = String::new();
    let read_until = |master: &mut std::fs::File, screen: &mut String, what: &str, within: Duration| {
        let start = Instant::now();
        let mut buf = [0u8; 4096];
        while !screen.contains(what) && start.elapsed() < within {
            match master.read(&mut buf) {
                Ok(n) if n > 0 => screen.push_str(&String::from_utf8_lossy(&buf[..n])),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        screen.contains(what)
    };
    assert!(
        read_until(&mut master, &mut screen, "escape character is ^]", Duration::from_secs(20)),
        "{screen}"
    );
    // The terminal is raw: the Enter key sends a carriage return.
    master.write_all(b"echo pty-$((6*7))\r").unwrap();
    let answered = read_until(&mut master, &mut screen, "pty-42", Duration::from_secs(60));
    master.write_all(&[0x1d]).unwrap();
    read_until(&mut master, &mut screen, "detached", Duration::from_secs(10));
    let start = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    read_until(&mut master, &mut screen, "\u{0}", Duration::from_millis(200));
    assert!(answered, "no answer in the terminal: {screen}");
    (screen, code)
}
