//! `veem serve` stops cleanly on SIGTERM (what systemd sends), also while a
//! client follows a WatchEvents stream: the stream ends, the VEEM exits with
//! success at once (well within its grace period), says so in its log, and
//! its database opens again at once (no lock left behind). Needs no guest,
//! so it does not take the lab.

use std::time::{Duration, Instant};

use e2e::daemons::ImageRepo;
use e2e::{lab, site};
use interfaces::vmi::WatchRequest;

#[tokio::test]
async fn veem_stops_cleanly_on_sigterm_and_starts_again_on_the_same_database() {
    let dir = lab::test_dir("veem-stop");
    let repo = ImageRepo::start(&dir).await;
    let port = site::port();
    let config = site::write_config(&dir, "site-a", port, &repo, &[], &[], "");
    let veem = site::Veem::start(&dir, "site-a", port, config.clone()).await;
    // A client that follows the events and never lets go.
    let mut watcher = veem.client(site::OPERATOR).await;
    let _stream = watcher.watch_events(WatchRequest::default()).await.unwrap().into_inner();
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
