//! The console relay against fake VEEHs (whose consoles echo what is
//! typed after a banner naming their host): output and input both ways,
//! the session audited with its byte counts, reattached at the VEE's new
//! host after a live migration with a notice naming no place, and refused
//! for a VEE that does not run.

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::config::Role;
use crate::model::MigrationState;
use crate::ports::{ConsoleInput, ConsoleOutput, ConsoleStream};
use crate::sim::{FakeSite, STANDARD};

fn acme() -> Role {
    Role::Provider("acme".into())
}

/// A console input the test types into.
fn keyboard() -> (mpsc::Sender<Vec<u8>>, ConsoleInput) {
    let (tx, rx) = mpsc::channel(16);
    (tx, Box::pin(ReceiverStream::new(rx)))
}

async fn next(out: &mut ConsoleStream) -> ConsoleOutput {
    tokio::time::timeout(std::time::Duration::from_secs(5), out.next())
        .await
        .expect("console output within 5 s")
        .expect("the console goes on")
        .expect("no error")
}

fn text(o: ConsoleOutput) -> String {
    match o {
        ConsoleOutput::Data(d) => String::from_utf8(d).unwrap(),
        ConsoleOutput::Notice(n) => format!("notice: {n}"),
    }
}

#[tokio::test]
async fn a_console_carries_both_ways_follows_a_migration_and_is_audited() {
    let site = FakeSite::start(&["h1", "h2"], "").await;
    site.clock.follow_runtime();
    let vee = site.running_service(STANDARD).remove(0);
    let from = site.veem.core.vee(&vee).unwrap().host().unwrap().to_string();
    let to = if from == "h1" { "h2" } else { "h1" };
    let (keys, input) = keyboard();
    let mut out = site.veem.consoles.attach(&acme(), &vee, false, input).await.unwrap();
    assert_eq!(text(next(&mut out).await), format!("console of {vee} at {from}\r\n"));
    keys.send(b"uname\n".to_vec()).await.unwrap();
    assert_eq!(text(next(&mut out).await), "uname\n");

    assert_eq!(site.migrate_to_host(&vee, to).await.state, MigrationState::Done);
    let notice = text(next(&mut out).await);
    assert_eq!(notice, "notice: the VEE moved: its console is attached again");
    assert!(!notice.contains(to) && !notice.contains(&from));
    assert_eq!(text(next(&mut out).await), format!("console of {vee} at {to}\r\n"));
    keys.send(b"ls\n".to_vec()).await.unwrap();
    assert_eq!(text(next(&mut out).await), "ls\n");

    drop(keys);
    crate::sim::eventually("the session's end audited", || {
        site.events(&vee).iter().any(|e| e.starts_with("console: detached"))
    })
    .await;
    let events = site.events(&vee);
    assert!(events.iter().any(|e| e == "console: attached by provider acme"), "{events:?}");
    let detached = events.iter().find(|e| e.starts_with("console: detached")).unwrap();
    assert!(
        detached.contains("provider acme, 9 bytes typed") && !detached.contains("uname"),
        "counts, never content: {detached}"
    );
}

#[tokio::test]
async fn a_vee_that_does_not_run_has_no_console() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    site.veem.lifecycle.vee_action(&vee, crate::domain::Action::Stop, "").await.unwrap();
    let (_keys, input) = keyboard();
    let e = site.veem.consoles.attach(&Role::Operator, &vee, false, input).await.err().unwrap();
    assert!(e.to_string().contains("is terminated: its console is there while it runs"), "{e}");
    let (_keys, input) = keyboard();
    let e = site
        .veem
        .consoles
        .attach(&Role::Operator, "no-such-vee", false, input)
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("not found"), "{e}");
}

/// The end of a console stream (within 5 s).
async fn ends(out: &mut ConsoleStream) {
    let end = tokio::time::timeout(std::time::Duration::from_secs(5), out.next()).await;
    assert!(
        matches!(end, Ok(None)),
        "the session ended: {:?}",
        end.map(|o| o.map(|r| r.map(text)))
    );
}

#[tokio::test]
async fn a_provider_cannot_take_the_console_from_the_operator() {
    let site = FakeSite::start(&["h1"], "").await;
    site.clock.follow_runtime();
    let vee = site.running_service(STANDARD).remove(0);
    let (keys, input) = keyboard();
    let mut op = site.veem.consoles.attach(&Role::Operator, &vee, false, input).await.unwrap();
    next(&mut op).await;
    let (_k, input) = keyboard();
    let e = site.veem.consoles.attach(&acme(), &vee, true, input).await.err().unwrap();
    assert!(e.to_string().contains("the site's operator holds the console"), "{e}");
    keys.send(b"still mine\n".to_vec()).await.unwrap();
    assert_eq!(text(next(&mut op).await), "still mine\n", "the operator's session goes on");
    // Without force, nobody takes a held console.
    let (_k, input) = keyboard();
    let e = site.veem.consoles.attach(&Role::Operator, &vee, false, input).await.err().unwrap();
    assert!(e.to_string().contains("another session holds the console"), "{e}");
}

#[tokio::test]
async fn a_session_taken_by_force_is_told_without_a_name_and_does_not_come_back() {
    let site = FakeSite::start(&["h1"], "").await;
    site.clock.follow_runtime();
    let vee = site.running_service(STANDARD).remove(0);
    let (_acme_keys, input) = keyboard();
    let mut provider = site.veem.consoles.attach(&acme(), &vee, false, input).await.unwrap();
    next(&mut provider).await;
    let (op_keys, input) = keyboard();
    let mut op = site.veem.consoles.attach(&Role::Operator, &vee, true, input).await.unwrap();
    next(&mut op).await;

    assert_eq!(text(next(&mut provider).await), "notice: the console was taken by another session");
    ends(&mut provider).await;
    op_keys.send(b"ok\n".to_vec()).await.unwrap();
    assert_eq!(text(next(&mut op).await), "ok\n");
    let events = site.events(&vee);
    assert!(
        events
            .iter()
            .any(|e| e == "console: attached by operator, forced, displacing provider acme"),
        "{events:?}"
    );
    crate::sim::eventually("the taken session's end audited", || {
        site.events(&vee)
            .iter()
            .any(|e| e.starts_with("console: detached (taken by another session): provider acme"))
    })
    .await;
    // Its relay is gone: the operator's session alone holds the console,
    // and a provider's force takes nothing back.
    let (_k, input) = keyboard();
    assert!(site.veem.consoles.attach(&acme(), &vee, true, input).await.is_err());
}

/// A tenant looping attach and detach (two events each) is refused once
/// over its rate, with RESOURCE_EXHAUSTED naming the limit and when to
/// retry, and may attach again once the bucket refills; another caller
/// has its own bucket.
#[tokio::test]
async fn a_tenant_looping_console_attaches_is_refused_after_its_rate() {
    let site = FakeSite::start(&["h1"], "[events]\nconsole_attaches_per_minute = 3\n").await;
    let vee = site.running_service(STANDARD).remove(0);
    for i in 0..3 {
        let (keys, input) = keyboard();
        let out = site.veem.consoles.attach(&acme(), &vee, false, input).await;
        assert!(out.is_ok(), "attach {i} within the rate: {:?}", out.as_ref().err());
        // Detached: its session ends, and with it its hold.
        drop(keys);
        let mut out = out.unwrap();
        while out.next().await.is_some() {}
    }
    let (_keys, input) = keyboard();
    let e = site.veem.consoles.attach(&acme(), &vee, false, input).await.err().expect("refused");
    let s = crate::api::status::status(e);
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
    assert!(
        s.message().contains("console_attaches_per_minute") && s.message().contains("3 per minute") && s.message().contains("retry in"),
        "{}",
        s.message()
    );
    let (keys, input) = keyboard();
    let other = site
        .veem
        .consoles
        .attach(&crate::config::Role::Provider("other".into()), &vee, false, input)
        .await;
    assert!(other.is_ok(), "another caller's own bucket");
    drop(keys);
    let mut other = other.unwrap();
    while other.next().await.is_some() {}
    site.clock.advance_ms(20_000);
    let (_keys, input) = keyboard();
    assert!(
        site.veem.consoles.attach(&acme(), &vee, false, input).await.is_ok(),
        "a token back after 20 s"
    );
}

/// A session open when the VEEM stops is ended with a notice and audited
/// before the stop's drain returns: the relay is one of the core's tasks,
/// not a task of its own that the drain neither waits for nor ends.
#[tokio::test]
async fn a_stop_ends_an_open_session_and_waits_for_its_audit() {
    let site = FakeSite::start(&["h1"], "").await;
    let vee = site.running_service(STANDARD).remove(0);
    let (_keys, input) = keyboard();
    let mut out = site.veem.consoles.attach(&acme(), &vee, false, input).await.unwrap();
    assert!(text(next(&mut out).await).starts_with("console of"));
    site.veem.core.stopping.cancel();
    let cut = site.veem.core.drain_tasks(std::time::Duration::from_secs(5)).await;
    assert_eq!(cut, 0, "the session ended within the grace");
    let events = site.events(&vee);
    assert!(
        events.iter().any(|e| e.starts_with("console: detached (the VEEM stopped)")),
        "{events:?}"
    );
    assert_eq!(text(next(&mut out).await), "notice: the VEEM stops: attach again");
}
