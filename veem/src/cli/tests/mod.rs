//! Argument parsing, and whole commands against an in-process mock VMI
//! ([`mock`]).

mod console;
mod leader;
pub(crate) mod mock;

use std::sync::Arc;
use std::time::Duration;

use clap::error::ErrorKind;
use tonic::Request;

use super::commands::execute;
use super::{exit, Cli, Command, OutputFormat};
use mock::{serve, Mock};

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_args_from(std::iter::once("veem").chain(args.iter().copied()))
}

/// A valid manifest of service `name` (the mock's Negotiate answers the
/// verdict its name spells).
fn manifest(name: &str) -> String {
    format!(
        "[service]\nname = \"{name}\"\nprovider = \"acme\"\n[sla]\nguarantee = \"standard\"\n[[component]]\nname = \"vm\"\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"sha256:{}\"\n",
        "5".repeat(64)
    )
}

// ---------------------------------------------------------------- parsing

#[test]
fn migrate_takes_at_most_one_target() {
    // None: the site chooses (how a provider asks).
    assert!(matches!(
        parse(&["migrate", "v1"]).unwrap().command,
        Command::Migrate {
            to_host: None,
            to_site: None,
            ..
        }
    ));
    let e = parse(&["migrate", "v1", "--to-host", "h2", "--to-site", "site-b"]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ArgumentConflict);
    assert_eq!(e.exit_code(), exit::USAGE as i32);

    let cli = parse(&["migrate", "v1", "--to-site", "site-b", "--reason", "maintenance", "--wait"]).unwrap();
    match cli.command {
        Command::Migrate {
            vee,
            to_host,
            to_site,
            reason,
            wait,
        } => {
            assert_eq!(vee, "v1");
            assert_eq!(to_host, None);
            assert_eq!(to_site.as_deref(), Some("site-b"));
            assert_eq!(reason.as_deref(), Some("maintenance"));
            assert!(wait.wait && wait.timeout.is_none());
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse(&["migrate", "v1", "--to-host", "h2"]).unwrap().command,
        Command::Migrate {
            to_host: Some(_),
            to_site: None,
            wait: super::WaitOpts {
                wait: false,
                timeout: None
            },
            ..
        }
    ));
}

#[test]
fn reject_requires_a_reason() {
    let e = parse(&["reject", "m-1"]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MissingRequiredArgument);
    assert_eq!(e.exit_code(), exit::USAGE as i32);
    let cli = parse(&["reject", "m-1", "--reason", "not now"]).unwrap();
    assert!(matches!(cli.command, Command::Reject { ref id, ref reason } if id == "m-1" && reason == "not now"));
}

#[test]
fn global_options_anywhere_and_defaults() {
    let cli = parse(&["ls", "--output", "json", "--endpoint", "http://h:1", "--token-file", "/t"]).unwrap();
    assert_eq!(cli.global.output, OutputFormat::Json);
    assert_eq!(cli.global.endpoint.as_deref(), Some("http://h:1"));
    assert_eq!(cli.global.token_file.as_deref(), Some(std::path::Path::new("/t")));
    // A token is never taken from the command line, where `ps` shows it.
    assert_eq!(parse(&["ls", "--token", "t"]).unwrap_err().kind(), ErrorKind::UnknownArgument);
    assert!(matches!(cli.command, Command::Ls { service: None }));
    let cli = parse(&["-o", "table", "ls", "svc1"]).unwrap();
    assert!(matches!(cli.command, Command::Ls { service: Some(ref s) } if s == "svc1"));
    if std::env::var_os("VEEM_ENDPOINT").is_none() {
        assert_eq!(parse(&["services"]).unwrap().global.endpoint, None);
    }
    assert_eq!(parse(&["services"]).unwrap().global.output, OutputFormat::Table);
    assert_eq!(parse(&["-o", "yaml", "services"]).unwrap().global.output, OutputFormat::Yaml);
    assert_eq!(parse(&["-o", "xml", "services"]).unwrap_err().kind(), ErrorKind::InvalidValue);
}

#[test]
fn other_subcommands_parse() {
    assert!(matches!(
        parse(&["restore", "v1", "--checkpoint", "c9"]).unwrap().command,
        Command::Restore { checkpoint: Some(ref c), .. } if c == "c9"
    ));
    assert!(matches!(
        parse(&["restore", "v1"]).unwrap().command,
        Command::Restore { checkpoint: None, .. }
    ));
    assert!(matches!(
        parse(&["approve", "m-1", "--wait"]).unwrap().command,
        Command::Approve {
            wait: super::WaitOpts { wait: true, timeout: None },
            ..
        }
    ));
    // --timeout is a duration, and only with --wait.
    match parse(&["approve", "m-1", "--wait", "--timeout", "90s"]).unwrap().command {
        Command::Approve { wait, .. } => assert_eq!(wait.timeout, Some(Duration::from_secs(90))),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        parse(&["approve", "m-1", "--timeout", "90s"]).unwrap_err().kind(),
        ErrorKind::MissingRequiredArgument
    );
    assert!(matches!(
        parse(&["deploy", "m.toml", "--wait", "--timeout", "5m"]).unwrap().command,
        Command::Deploy {
            wait: super::WaitOpts {
                wait: true,
                timeout: Some(_)
            },
            ..
        }
    ));
    assert!(matches!(
        parse(&["events", "--service", "s"]).unwrap().command,
        Command::Events {
            service: Some(_),
            follow: false,
            after: None
        }
    ));
    assert!(matches!(
        parse(&["events", "-f"]).unwrap().command,
        Command::Events {
            service: None,
            follow: true,
            ..
        }
    ));
    assert!(matches!(
        parse(&["violations"]).unwrap().command,
        Command::Violations { service: None }
    ));
    assert!(matches!(
        parse(&["serve", "--config", "/etc/veem.toml"]).unwrap().command,
        Command::Serve { .. }
    ));
    for args in [
        &["stop", "v"][..],
        &["suspend", "v"],
        &["resume", "v"],
        &["checkpoint", "v"],
        &["show", "v"],
        &["service", "s"],
        &["usage", "s"],
        &["drain", "h1"],
        &["migrations"],
        &["negotiate", "m.toml"],
        &["deploy", "m.toml"],
    ] {
        parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
    assert_eq!(parse(&["show"]).unwrap_err().exit_code(), exit::USAGE as i32);
    assert_eq!(parse(&["frobnicate"]).unwrap_err().exit_code(), exit::USAGE as i32);
}

#[test]
fn token_interceptor_adds_bearer_header() {
    use tonic::service::Interceptor;
    let mut i = super::AuthInterceptor::new(Some("s3cret")).unwrap();
    let req = i.call(Request::new(())).unwrap();
    assert_eq!(req.metadata().get("authorization").unwrap(), "Bearer s3cret");
    let mut none = super::AuthInterceptor::new(None).unwrap();
    assert!(none.call(Request::new(())).unwrap().metadata().get("authorization").is_none());
    assert!(super::AuthInterceptor::new(Some("bad\ntoken")).is_err());
}

/// Run `veem ARGS` against `endpoint`; return (exit code, stdout, stderr).
pub(super) async fn run(endpoint: &str, args: &[&str]) -> (u8, String, String) {
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), "tok-1\n").unwrap();
    let mut full = vec!["--endpoint", endpoint, "--token-file", token.path().to_str().unwrap()];
    full.extend_from_slice(args);
    let cli = parse(&full).unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = execute(&cli, Duration::from_millis(5), &mut out, &mut err).await;
    (code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
}

#[tokio::test]
async fn negotiate_exit_codes_and_bearer_token() {
    let mock = Arc::new(Mock::default());
    let ep = serve(mock.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    // An unset verdict (a server that does not know it) is shown as such
    // and is an error.
    for (verdict, code) in [("accept", 0), ("counter-offer", 3), ("reject", 4), ("unspecified", 1)] {
        let path = dir.path().join(format!("{verdict}.toml"));
        std::fs::write(&path, manifest(verdict)).unwrap();
        let (c, out, err) = run(&ep, &["negotiate", path.to_str().unwrap()]).await;
        assert_eq!(c, code, "{verdict}: {out} {err}");
        assert!(out.starts_with(&format!("verdict: {verdict}\n")), "{out}");
        if verdict == "counter-offer" {
            assert!(out.contains("earliest window: 2026-11-28T08:00:00Z .. 2026-11-28T20:00:00Z"));
        }
    }
    let auth = mock.auth.lock().unwrap();
    assert_eq!(auth.len(), 4);
    assert!(auth.iter().all(|a| a.as_deref() == Some("Bearer tok-1")), "{auth:?}");
}

#[tokio::test]
async fn missing_manifest_is_an_error_before_connecting() {
    let (c, out, err) = run("http://127.0.0.1:1", &["deploy", "/nonexistent/m.toml"]).await;
    assert_eq!((c, out.as_str()), (exit::ERROR, ""));
    assert!(err.starts_with("error: cannot read manifest /nonexistent/m.toml"), "{err}");
}

#[tokio::test]
async fn grpc_errors_are_printed_with_their_code() {
    let ep = serve(Arc::new(Mock::default())).await;
    let (c, out, err) = run(&ep, &["show", "nope"]).await;
    assert_eq!((c, out.as_str(), err.as_str()), (1, "", "error: NotFound: no VEE nope\n"));
    // A refusal is exit 4, distinct from other errors.
    let (c, _, err) = run(&ep, &["drain", "h1"]).await;
    assert_eq!((c, err.as_str()), (exit::REJECT, "error: PermissionDenied: operator only\n"));
}

#[tokio::test]
async fn a_manifest_that_does_not_parse_or_validate_is_exit_5_and_never_sent() {
    let mock = Arc::new(Mock::default());
    let ep = serve(mock.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.toml");
    for (text, says) in [
        ("[service\n", "line 1, column 9: invalid table header; expected `.`, `]`: [service"),
        (&manifest("x").replace("vcpus = 1", "vcpus = 0"), "component[0].vcpus"),
    ] {
        std::fs::write(&path, text).unwrap();
        for cmd in ["negotiate", "deploy"] {
            let (c, out, err) = run(&ep, &[cmd, path.to_str().unwrap()]).await;
            assert_eq!((c, out.as_str()), (exit::INVALID, ""), "{cmd}: {err}");
            assert!(
                err.starts_with(&format!("error: invalid manifest {}", path.display())) && err.contains(says),
                "{err}"
            );
        }
    }
    assert!(mock.seen.lock().unwrap().is_empty(), "nothing reached the VEEM");
}

#[tokio::test]
async fn unreachable_endpoint_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let (c, out, err) = run(&ep, &["services"]).await;
    assert_eq!((c, out.as_str()), (exit::ERROR, ""));
    assert!(err.starts_with(&format!("error: cannot reach the VEEM at {ep}")), "{err}");
    let (c, _, err) = run("not a url", &["services"]).await;
    assert_eq!(c, exit::ERROR);
    assert!(err.contains("invalid endpoint URL"), "{err}");
}

#[tokio::test]
async fn an_https_endpoint_needs_the_ca_of_the_veem() {
    let (c, _, err) = run("https://127.0.0.1:1", &["services"]).await;
    assert_eq!(c, exit::ERROR);
    assert!(err.contains("is https: give the CA") && err.contains("--ca"), "{err}");
    let (c, _, err) = run("https://127.0.0.1:1", &["--ca", "/nonexistent/ca.crt", "services"]).await;
    assert_eq!(c, exit::ERROR);
    assert!(err.contains("cannot read CA /nonexistent/ca.crt"), "{err}");
}

#[tokio::test]
async fn show_ls_and_actions() {
    let mock = Arc::new(Mock::default());
    let ep = serve(mock.clone()).await;
    let (c, out, _) = run(&ep, &["show", "v1"]).await;
    assert_eq!(c, 0);
    assert!(out.lines().any(|l| l == "location: remote (site-b)"), "{out}");
    assert!(out.lines().any(|l| l == "state: running"), "{out}");

    let (c, out, _) = run(&ep, &["ls"]).await;
    assert_eq!(c, 0);
    assert_eq!(out.lines().count(), 3, "{out}");
    let (_, out, _) = run(&ep, &["-o", "json", "ls", "svc1"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"][1]["location"], "remote (site-b)");
    // YAML: the JSON's fields, in its order.
    let (c, out, _) = run(&ep, &["-o", "yaml", "ls", "svc1"]).await;
    assert_eq!(c, 0);
    assert!(out.starts_with("items:\n- vee_id: v1\n  service_id: "), "{out}");
    assert!(out.contains("\n  location: remote (site-b)\n"), "{out}");
    assert!(out.contains("\n  latest_checkpoint: null\n"), "{out}");
    let (_, out, _) = run(&ep, &["-q", "ls"]).await;
    assert_eq!(out, "v1\nv22\n", "-q: the IDs alone");

    let (c, _, _) = run(&ep, &["restore", "v1", "--checkpoint", "c7"]).await;
    assert_eq!(c, 0);
    let (c, _, _) = run(&ep, &["suspend", "v1"]).await;
    assert_eq!(c, 0);
    let (c, _, _) = run(&ep, &["withdraw", "v1"]).await;
    assert_eq!(c, 0);
    let seen = mock.seen.lock().unwrap().join("\n");
    assert!(
        seen.contains(r#"ListVeesRequest { service_id: "", page_size: 0, page_token: "" }"#),
        "{seen}"
    );
    // Both pages of service svc1's VEEs were asked for.
    assert!(
        seen.contains(r#"ListVeesRequest { service_id: "svc1", page_size: 0, page_token: "" }"#),
        "{seen}"
    );
    assert!(
        seen.contains(r#"ListVeesRequest { service_id: "svc1", page_size: 0, page_token: "after-v1" }"#),
        "{seen}"
    );
    assert!(seen.contains(r#"action: Restore, checkpoint_id: "c7""#), "{seen}");
    assert!(seen.contains(r#"action: Suspend, checkpoint_id: """#), "{seen}");
    assert!(seen.contains(r#"action: Withdraw, checkpoint_id: """#), "{seen}");
}

#[tokio::test]
async fn migrate_wait_follows_states_until_done() {
    let mock = Arc::new(Mock::default());
    *mock.migration_states.lock().unwrap() = vec![
        ("approved", ""),
        ("running", "memory 10%"),
        ("running", "memory 10%"),
        ("running", "memory 80%"),
        ("done", "ok"),
    ];
    let ep = serve(mock.clone()).await;
    let (c, out, err) = run(&ep, &["migrate", "v1", "--to-site", "site-b", "--reason", "x", "--wait"]).await;
    assert_eq!(c, 0, "{out}{err}");
    let tails: Vec<&str> = out.lines().map(|l| l.split_once(' ').unwrap().1).collect();
    assert_eq!(
        tails,
        [
            "m-1: approved",
            "m-1: running: memory 10%",
            "m-1: running: memory 80%",
            "m-1: done",
            "m-1 done: local (h1) -> remote (site-b) in 900 ms (downtime 40 ms)",
        ],
        "{out}"
    );
    assert!(mock.seen.lock().unwrap()[0].contains(r#"to_host: "", to_site: "site-b", reason: "x""#));
}

#[tokio::test]
async fn approve_wait_fails_unless_done_and_json_keeps_stdout_one_document() {
    let mock = Arc::new(Mock::default());
    *mock.migration_states.lock().unwrap() = vec![("running", "disk"), ("failed", "peer refused")];
    let ep = serve(mock).await;
    let (c, out, err) = run(&ep, &["-o", "json", "approve", "m-1", "--wait"]).await;
    assert_eq!(c, exit::ERROR);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["state"], "failed");
    assert_eq!(v["detail"], "peer refused");
    assert_eq!(err.lines().count(), 3, "{err}");
    assert!(err.lines().last().unwrap().ends_with("m-1: failed: peer refused"), "{err}");
}

#[tokio::test]
async fn a_proposal_no_one_approves_says_so_and_times_out_with_exit_6() {
    let mock = Arc::new(Mock::default());
    *mock.migration_states.lock().unwrap() = vec![("proposed", "")];
    *mock.migrate_state.lock().unwrap() = "proposed";
    let ep = serve(mock).await;
    let t = std::time::Instant::now();
    let (c, out, err) = run(&ep, &["migrate", "v1", "--wait", "--timeout", "1s"]).await;
    assert_eq!(c, exit::TIMEOUT, "{out}{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(
        out.contains("m-1: proposed: waiting for an operator to approve it (veem approve m-1, or veem reject m-1 --reason TEXT)"),
        "{out}"
    );
    assert_eq!(
        err,
        "error: timed out after 1s waiting for migration m-1 (proposed: no operator approved it)\n"
    );
}

#[tokio::test]
async fn events_stream_lines() {
    let ep = serve(Arc::new(Mock::default())).await;
    let (c, out, _) = run(&ep, &["events", "--follow", "--service", "svc1"]).await;
    assert_eq!(c, 0);
    assert_eq!(
        out,
        "2026-11-28T08:00:00.000Z svc1 v1 deploying\n2026-11-28T08:00:01.500Z svc1 v1 running\n"
    );
}

#[tokio::test]
async fn events_without_follow_read_the_stored_ones_page_after_page() {
    let mock = Arc::new(Mock::default());
    let ep = serve(mock.clone()).await;
    let (c, out, _) = run(&ep, &["events"]).await;
    assert_eq!(c, 0);
    let kinds: Vec<&str> = out.lines().filter_map(|l| l.split_whitespace().nth(3)).collect();
    assert_eq!(kinds, ["deploying", "running", "stopped"], "{out}");
    let (c, out, _) = run(&ep, &["events", "--after", "2", "-o", "json"]).await;
    assert_eq!(c, 0);
    assert!(
        out.contains("\"kind\":\"stopped\"") && out.contains("\"seq\":3") && !out.contains("running"),
        "{out}"
    );
}

#[tokio::test]
async fn hosts_show_health_and_reservations() {
    let ep = serve(Arc::new(Mock::default())).await;
    let (c, out, _) = run(&ep, &["hosts"]).await;
    assert_eq!(c, 0);
    let a2 = out.lines().find(|l| l.starts_with("a2")).unwrap();
    assert!(a2.contains("missing 1 heartbeats") && a2.contains("0/4096"), "{out}");
    // Why it is missing, in the operator's words of the transport.
    assert!(a2.contains("Connection refused"), "{out}");
    let a1 = out.lines().find(|l| l.starts_with("a1")).unwrap();
    assert!(!a1.contains("error"), "{out}");
    let (_, out, _) = run(&ep, &["-o", "json", "hosts"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"][0]["used_memory_mib"], 256);
}

#[tokio::test]
async fn limits_show_each_consumers_usage_sla_and_what_it_holds() {
    let ep = serve(Arc::new(Mock::default())).await;
    let (c, out, _) = run(&ep, &["limits"]).await;
    assert_eq!(c, 0);
    let acme = out.lines().find(|l| l.starts_with("acme")).unwrap();
    assert!(
        acme.contains("fixed") && acme.contains("3/1024/10") && acme.contains("2/256/2"),
        "{out}"
    );
    let globex = out.lines().find(|l| l.starts_with("globex")).unwrap();
    assert!(
        globex.contains("epoch 4/4096/40 over 86400 s, burst 8/8192/80 over 3600 s") && globex.contains("epoch 1/100/0, burst 2/128/0"),
        "{out}"
    );
    let (_, out, _) = run(&ep, &["-o", "json", "limits"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"][0]["held"]["vcpus"], 2);
    assert_eq!(v["items"][1]["burst_limit"]["memory_mib"], 8192);
    assert!(v["items"][0]["burst_limit"].is_null());
}

#[tokio::test]
async fn reject_and_deploy_errors() {
    let mock = Arc::new(Mock::default());
    let ep = serve(mock.clone()).await;
    let (c, out, _) = run(&ep, &["reject", "m-1", "--reason", "busy"]).await;
    assert_eq!(c, 0);
    assert!(out.lines().any(|l| l == "state: rejected"), "{out}");
    assert!(mock.seen.lock().unwrap()[0].contains(r#"reason: "busy""#));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.toml");
    std::fs::write(&path, manifest("x")).unwrap();
    let (c, _, err) = run(&ep, &["deploy", path.to_str().unwrap()]).await;
    assert_eq!(
        (c, err.as_str()),
        (exit::REJECT, "error: FailedPrecondition: manifest rejected: no capacity\n")
    );
    // The unanswered first Deploy was asked again with the same request ID.
    let seen = mock.seen.lock().unwrap();
    let ids: Vec<&str> = seen
        .iter()
        .filter(|s| s.contains("manifest_toml"))
        .map(|s| s.split("request_id: \"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{seen:?}");
    assert!(ids[0].len() == 36 && ids[0] == ids[1], "{ids:?}");
}

#[test]
fn extend_takes_an_rfc3339_time_or_a_duration_from_now() {
    let at = |args: &[&str]| match parse(args).unwrap().command {
        Command::Extend { id, until } => (id, until),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        at(&["extend", "s1", "--until", "2026-12-01T18:00:00Z"]),
        ("s1".into(), 1_796_148_000)
    );
    let (_, until) = at(&["extend", "s1", "--until", "+2h"]);
    assert!((until - chrono::Utc::now().timestamp() - 7200).abs() <= 2, "{until}");
    let e = parse(&["extend", "s1", "--until", "tomorrow"]).unwrap_err();
    assert_eq!(e.exit_code(), exit::USAGE as i32);
    assert!(e.to_string().contains("neither an RFC 3339 time nor +DURATION"), "{e}");
}

#[tokio::test]
async fn usage_takes_a_range_and_groups_by_vee_site_or_hour() {
    let ep = serve(Arc::new(Mock::default())).await;
    let (c, out, err) = run(&ep, &["-o", "json", "usage", "svc1", "--group-by", "vee"]).await;
    assert_eq!(c, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"][0]["key"], "v1");
    assert_eq!(
        (v["items"][0]["records"].as_u64(), v["items"][0]["cpu_seconds"].as_f64()),
        (Some(4), Some(40.0))
    );
    // 09:00-11:00: the records of hours 9 and 10 only.
    let args = [
        "-o",
        "json",
        "usage",
        "svc1",
        "--from",
        "2026-11-28T09:00:00Z",
        "--to",
        "2026-11-28T11:00:00Z",
    ];
    let (_, out, _) = run(&ep, &[&args[..], &["--group-by", "site"]].concat()).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let by_site: Vec<(String, u64)> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["key"].as_str().unwrap().to_string(), g["records"].as_u64().unwrap()))
        .collect();
    assert_eq!(by_site, [("site-a".to_string(), 3), ("site-b".to_string(), 1)]);
    let (_, out, _) = run(&ep, &["usage", "svc1", "--group-by", "hour"]).await;
    assert_eq!(out.lines().count(), 5, "a header and 4 hours: {out}");
    assert!(
        out.contains("2026-11-28T08:00:00Z") && out.contains("2026-11-28T11:00:00Z"),
        "{out}"
    );
    let (c, _, _) = run(&ep, &["usage", "svc1", "--from", "-1h"]).await;
    assert_eq!(c, 0);
    // Instance-hours per component: four hour-long records each.
    let (_, out, _) = run(&ep, &["usage", "svc1", "--group-by", "component"]).await;
    let rows: Vec<Vec<&str>> = out.lines().skip(1).map(|l| l.split_whitespace().take(3).collect()).collect();
    assert_eq!(rows, [["db", "4", "4.000"], ["web", "4", "4.000"]], "{out}");
}
