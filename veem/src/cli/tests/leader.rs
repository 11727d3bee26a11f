//! Commands against a site of several VEEMs whose leader dies, freezes
//! or changes: endpoints asked at once within the probe deadline, a
//! takeover waited through, a command cut by a lost leader run again
//! with its request ID.

use std::sync::Arc;
use std::time::Duration;

use super::exit;
use super::mock::{serve, Mock};
use super::run;

/// An endpoint whose VEEM is frozen (SIGSTOP): the kernel completes its
/// TCP handshakes, nothing answers.
fn frozen_endpoint() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = format!("http://{}", listener.local_addr().unwrap());
    (listener, ep)
}

#[tokio::test]
async fn a_frozen_first_endpoint_is_skipped_within_the_probe_deadline() {
    let (_frozen, frozen) = frozen_endpoint();
    let mock = Arc::new(Mock::default());
    let ep = serve(mock.clone()).await;
    let started = std::time::Instant::now();
    let (c, out, err) = tokio::time::timeout(Duration::from_secs(10), run(&format!("{frozen},{ep}"), &["ls"]))
        .await
        .expect("the CLI waited on the frozen endpoint");
    assert_eq!(c, exit::OK, "{err}");
    assert!(out.lines().count() > 1, "{out}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_standby_naming_a_frozen_leader_is_asked_again_and_answers_once_it_leads() {
    let (_frozen, frozen) = frozen_endpoint();
    let mock = Arc::new(Mock::default());
    *mock.standby_for.lock().unwrap() = Some(frozen.clone());
    let ep = serve(mock.clone()).await;
    let takeover = tokio::spawn({
        let mock = mock.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            *mock.standby_for.lock().unwrap() = None;
            std::time::Instant::now()
        }
    });
    let (c, out, err) = tokio::time::timeout(Duration::from_secs(20), run(&format!("{frozen},{ep}"), &["ls"]))
        .await
        .expect("the CLI waited out its request timeout");
    let answered = std::time::Instant::now();
    let led = takeover.await.unwrap();
    assert_eq!(c, exit::OK, "{err}");
    assert!(out.lines().count() > 1, "{out}");
    assert!(
        answered.duration_since(led) < Duration::from_secs(3),
        "{:?} after the takeover",
        answered.duration_since(led)
    );
    assert!(mock.health_checks.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    // No takeover comes: asked again until the request deadline, then
    // the error names each endpoint's answer.
    *mock.standby_for.lock().unwrap() = Some(frozen.clone());
    let started = std::time::Instant::now();
    let (c, _, err) = run(&format!("{ep},{frozen}"), &["--request-timeout", "3s", "services"]).await;
    assert_eq!(c, exit::ERROR);
    assert!(
        err.contains("no VEEM of the site serves as its leader") && err.contains("stands by"),
        "{err}"
    );
    assert!(err.contains("probe deadline"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

/// A VEEM that went away mid-call (a takeover): the command is asked
/// again, with the same request ID, and answers; past the retries, the
/// error says what happened.
#[tokio::test]
async fn a_change_cut_by_a_lost_leader_is_asked_again_with_its_request_id() {
    let mock = Arc::new(Mock::default());
    let ep = serve(mock.clone()).await;
    mock.actions_lost.store(1, std::sync::atomic::Ordering::SeqCst);
    let (c, out, err) = run(&ep, &["checkpoint", "v-1"]).await;
    assert_eq!(c, exit::OK, "{err}");
    assert!(out.contains("v-1"), "{out}");
    let ids = mock.request_ids.lock().unwrap().clone();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids[0].is_some() && ids[0] == ids[1], "one request ID for both: {ids:?}");
    // Another command, another ID.
    let (c, _, _) = run(&ep, &["checkpoint", "v-1"]).await;
    assert_eq!(c, exit::OK);
    let ids = mock.request_ids.lock().unwrap().clone();
    assert_ne!(ids[2], ids[1]);
    // Lost every time: given up after the retries, saying so.
    mock.actions_lost.store(100, std::sync::atomic::Ordering::SeqCst);
    let (c, _, err) = run(&ep, &["checkpoint", "v-1"]).await;
    assert_eq!(c, exit::ERROR);
    assert!(err.contains("went away mid-call") && err.contains("asked 4 times"), "{err}");
}

/// Which errors make the CLI ask the site's leader again: a VEEM gone
/// (the connection lost, a standby or a leader still starting), not the
/// leader's own answers nor a read-only site.
#[test]
fn only_a_veem_gone_mid_call_is_asked_again() {
    use crate::cli::retries::leader_lost;
    use tonic::Status;
    let status = |s: Status| anyhow::Error::from(s);
    let mut standby = Status::unavailable("this VEEM stands by");
    standby
        .metadata_mut()
        .insert(interfaces::fencing::NOT_ACTING, "standby".parse().unwrap());
    let mut read_only = Status::unavailable("site site-a's control plane is read-only");
    read_only
        .metadata_mut()
        .insert(interfaces::fencing::NOT_ACTING, "read-only".parse().unwrap());
    read_only
        .metadata_mut()
        .insert(interfaces::fencing::READ_ONLY, "etcd".parse().unwrap());
    assert!(leader_lost(&status(standby)));
    assert!(leader_lost(&status(Status::unknown("transport error"))));
    assert!(leader_lost(&status(crate::cli::retries::made_here(Status::unavailable(
        "http2 error"
    )))));
    assert!(!leader_lost(&status(Status::unavailable(
        "host h1: transport error: connection refused"
    ))));
    assert!(!leader_lost(&status(read_only)));
    assert!(!leader_lost(&status(Status::unavailable("host h1 did not answer"))));
    assert!(!leader_lost(&status(Status::failed_precondition("no room"))));
    assert!(!leader_lost(&anyhow::anyhow!("cannot read manifest m.toml")));
}
