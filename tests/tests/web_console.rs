//! The web console in a real headless Chromium (`e2e::browser`), on the
//! two-site lab: the operator logs in, sees the site's host, the
//! reservations and the events, rejects one proposal with a reason and
//! approves another, which moves the VEE to site B; the VEE's console in
//! the browser answers a command before and after the move; a provider
//! is refused the site's pages and another provider's service and
//! console; a form without its CSRF token is refused. Each page's
//! screenshot goes to `target/console/`.

use std::time::Duration;

use e2e::browser::Browser;
use e2e::lab;
use e2e::site::{self, manifest, ACME, GLOBEX, OPERATOR};
use e2e::two_sites::TwoSites;
use fantoccini::Locator;
use interfaces::vmi::*;

/// Logs in with `token` on the console at `base`; the page it lands on.
async fn login(b: &Browser, base: &str, token: &str) -> String {
    b.open(&format!("{base}/login"), "#token").await;
    b.client.find(Locator::Css("#token")).await.unwrap().send_keys(token).await.unwrap();
    b.client.find(Locator::Css("#login")).await.unwrap().click().await.unwrap();
    b.wait_for("#who").await;
    b.client.current_url().await.unwrap().path().to_string()
}

/// Types `line` and Enter into the console page's terminal and waits
/// (at most 60 s) for `answer` on it.
async fn console_answers(b: &Browser, line: &str, answer: &str) {
    assert!(
        b.until(
            "document.getElementById('console-state').textContent === 'attached'",
            Duration::from_secs(30)
        )
        .await,
        "the console did not attach: {}",
        b.text().await
    );
    let input = b.wait_for(".xterm-helper-textarea").await;
    input.send_keys(&format!("{line}\n")).await.unwrap();
    let seen = b
        .until(&format!("window.veeConsole.text().includes('{answer}')"), Duration::from_secs(60))
        .await;
    let text: serde_json::Value = b.client.execute("return window.veeConsole.text();", vec![]).await.unwrap();
    assert!(seen, "{answer:?} not in the terminal:\n{}", text.as_str().unwrap_or_default());
}

/// Proposes moving `vee` to site B (the operator, over the VMI).
async fn propose(l: &TwoSites, vee: &str) -> MigrationInfo {
    l.a.client(OPERATOR)
        .await
        .migrate(MigrateRequest {
            vee_id: vee.into(),
            to_host: String::new(),
            to_site: "site-b".into(),
            reason: "cheaper there".into(),
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_the_web_console_in_a_browser() {
    let _lab = lab::lock();
    let web = format!("{}:{}", lab::Place::SiteA.addr(), lab::free_port());
    let l = TwoSites::start("web-console", &format!("[web]\nlisten = \"{web}\"\n")).await;
    let base = format!("https://{web}");
    let mut acme = l.a.client(ACME).await;
    let (svc, vee) = l.deploy_one(&mut acme).await;
    let b = Browser::start().await;

    // The operator: the site's host, the reservations, the events.
    b.open(&format!("{base}/login"), "#token").await;
    b.screenshot("login").await;
    assert_eq!(login(&b, &base, OPERATOR).await, "/site");
    b.wait_for(&format!("#hosts tr[data-host='{}']", l.a1.host)).await;
    assert!(b.text().await.contains("host_health_up") || b.text().await.to_lowercase().contains("up"));
    b.screenshot("site").await;
    b.open(&format!("{base}/reservations"), "#timeline svg").await;
    b.wait_for(&format!("#timeline rect[data-vee='{vee}']")).await;
    b.screenshot("reservations").await;
    b.open(&format!("{base}/services/{}", svc.service_id), "#vees").await;
    b.wait_for(&format!("#vees tr[data-vee='{vee}']")).await;
    b.screenshot("service").await;

    // The console, before the move.
    b.open(&format!("{base}/vees/{vee}/console"), "#terminal").await;
    console_answers(&b, "echo web-a-$((6*7))", "web-a-42").await;
    b.screenshot("console").await;

    // A proposal rejected with a reason: nothing moves.
    let p = propose(&l, &vee).await;
    b.open(&format!("{base}/migrations"), &format!("tr[data-migration='{}']", p.migration_id))
        .await;
    let row = format!("tr[data-migration='{}']", p.migration_id);
    b.client
        .find(Locator::Css(&format!("{row} input.reason")))
        .await
        .unwrap()
        .send_keys("not during the sale")
        .await
        .unwrap();
    b.client
        .find(Locator::Css(&format!("{row} button.reject")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for(&format!("{row}[data-state='rejected']")).await;
    let m = site::wait_migration(&l.a, &p.migration_id, Duration::from_secs(10)).await;
    assert_eq!(m.state(), MigrationState::Rejected);
    assert!(m.detail.contains("not during the sale"), "{m:?}");

    // Another, approved: the VEE moves to site B, and the table says so.
    let p = propose(&l, &vee).await;
    let row = format!("tr[data-migration='{}']", p.migration_id);
    b.open(&format!("{base}/migrations"), &row).await;
    b.client
        .find(Locator::Css(&format!("{row} button.approve")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let m = site::wait_migration(&l.a, &p.migration_id, Duration::from_secs(180)).await;
    assert_eq!(m.state(), MigrationState::Done, "{m:?}");
    b.open(&format!("{base}/migrations"), &format!("{row}[data-state='done']")).await;
    b.screenshot("migrations").await;
    b.open(&format!("{base}/services/{}", svc.service_id), "#vees").await;
    let where_ = b
        .client
        .find(Locator::Css(&format!("tr[data-vee='{vee}'] .location")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(where_, "remote (site-b)");

    // The console, after the move: relayed from site B.
    b.open(&format!("{base}/vees/{vee}/console"), "#terminal").await;
    console_answers(&b, "echo web-b-$((6*7))", "web-b-42").await;

    // The events, live: the migration and the console sessions.
    b.open(&format!("{base}/events?kind=console"), "#events").await;
    assert!(
        b.until("document.querySelectorAll('#events tbody tr').length >= 2", Duration::from_secs(20))
            .await
    );
    b.screenshot("events").await;

    // A form without its CSRF token is refused (a page of the console's
    // own origin posting one).
    let status = b
        .client
        .execute_async(
            "const done = arguments[0]; fetch('/migrations/x/reject', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'reason=x'}).then(r => done(r.status));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, serde_json::json!(403));
    b.client.find(Locator::Css("#logout")).await.unwrap().click().await.unwrap();
    b.wait_for("#token").await;

    // A provider: refused the site's pages and another provider's
    // service and console.
    let theirs =
        l.a.client(GLOBEX)
            .await
            .deploy(DeployRequest {
                manifest_toml: manifest("blog", "globex", &l.ids, 1, ""),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(login(&b, &base, ACME).await, "/services");
    b.wait_for(&format!("#services tr[data-service='{}']", svc.service_id)).await;
    assert!(!b.text().await.contains("blog"), "another provider's service listed");
    for (path, status) in [
        ("/site".to_string(), "403"),
        (format!("/services/{}", theirs.service_id), "404"),
        (format!("/vees/{}/console", theirs.vees[0].vee_id), "404"),
    ] {
        b.open(&format!("{base}{path}"), "#status").await;
        let shown = b.client.find(Locator::Css("#status")).await.unwrap().text().await.unwrap();
        assert_eq!(shown, status, "{path}");
    }
    b.screenshot("refused").await;
    let _ = b.client.clone().close().await;
}
