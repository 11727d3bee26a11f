//! The web console against a site of fake VEEHs, request by request: a
//! login (its CSRF cookie and field, strict session cookies, peers and
//! wrong tokens refused and slowed down), the operator's pages, what a
//! provider is refused (the hosts, another provider's service and
//! console), forms without their CSRF token refused, approving and
//! rejecting a proposal, the security headers.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use tower::ServiceExt;

use super::*;
use crate::api::front::Front;
use crate::model::MigrationState;
use crate::sim::{FakeSite, STANDARD};
use crate::workflows::migration::{Dest, Proposer};

const TOKENS: &str = "[[tokens]]\ntoken = \"operator-token-for-tests\"\nrole = \"operator\"\n\
[[tokens]]\ntoken = \"acme-token-for-tests\"\nrole = \"provider\"\nname = \"acme\"\n\
[[tokens]]\ntoken = \"globex-token-for-tests\"\nrole = \"provider\"\nname = \"globex\"\n\
[[tokens]]\ntoken = \"peer-token-for-tests\"\nrole = \"peer\"\nname = \"site-b\"\n";

struct Console {
    site: FakeSite,
    app: axum::Router,
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl Console {
    async fn new() -> Self {
        let site = FakeSite::start(&["h1", "h2"], TOKENS).await;
        let front = Front::of(site.veem.clone(), &Default::default()).await.unwrap();
        front.started().await;
        let acting = Acting::default();
        acting.set(site.veem.clone(), front);
        let cfg = WebConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            session_idle: Duration::from_secs(60),
            session_max: Duration::from_secs(600),
        };
        let app = router(Web::new(&cfg, acting, &Default::default()));
        Self { site, app }
    }

    async fn send(&self, req: Request<Body>) -> Answer {
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let (status, headers) = (resp.status(), resp.headers().clone());
        let body = axum::body::to_bytes(resp.into_body(), 1 << 22).await.unwrap();
        Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    async fn get(&self, path: &str, cookie: &str) -> Answer {
        self.send(Request::get(path).header(header::COOKIE, cookie).body(Body::empty()).unwrap())
            .await
    }

    async fn post(&self, path: &str, cookie: &str, form: &str) -> Answer {
        let req = Request::post(path)
            .header(header::COOKIE, cookie)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(form.to_string()))
            .unwrap();
        self.send(req).await
    }

    /// Logs in with `token`: the session's cookie and CSRF token.
    async fn login(&self, token: &str) -> (String, String) {
        let form = self.get("/login", "").await;
        let login_csrf = cookie_value(&form, session::LOGIN_COOKIE);
        let a = self
            .post(
                "/login",
                &format!("{}={login_csrf}", session::LOGIN_COOKIE),
                &format!("token={token}&csrf={login_csrf}"),
            )
            .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
        let id = cookie_value(&a, session::COOKIE);
        let cookie = format!("{}={id}", session::COOKIE);
        let page = self.get("/migrations", &cookie).await;
        let csrf = page
            .body
            .split("name=\"csrf\" value=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_string();
        (cookie, csrf)
    }
}

fn cookie_value(a: &Answer, name: &str) -> String {
    let set = a
        .headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no cookie {name}: {:?}", a.headers));
    assert!(set.contains("HttpOnly; Secure; SameSite=Strict; Path=/"), "{set}");
    set[name.len() + 1..].split(';').next().unwrap().to_string()
}

#[tokio::test]
async fn a_login_needs_its_forms_token_and_a_users_token() {
    let c = Console::new().await;
    let a = c.get("/site", "").await;
    assert_eq!(
        (a.status, a.headers.get(header::LOCATION).unwrap().to_str().unwrap()),
        (StatusCode::SEE_OTHER, "/login")
    );
    let form = c.get("/login", "").await;
    let csrf = cookie_value(&form, session::LOGIN_COOKIE);
    assert!(form.body.contains(&format!("name=\"csrf\" value=\"{csrf}\"")));
    // Without the form's cookie, or with another token: refused.
    let a = c.post("/login", "", &format!("token=operator-token-for-tests&csrf={csrf}")).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let jar = format!("{}={csrf}", session::LOGIN_COOKIE);
    let a = c.post("/login", &jar, "token=operator-token-for-tests&csrf=forged").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = c.post("/login", &jar, "token=operator-token-for-tests").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "no CSRF field: {}", a.body);
    assert!(a.body.contains("CSRF token is missing or wrong"), "{}", a.body);
    // A peer's token and an unknown one do not log in; many failures are
    // slowed down.
    for token in ["peer-token-for-tests", "nobody"] {
        let a = c.post("/login", &jar, &format!("token={token}&csrf={csrf}")).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{token}");
    }
    let mut last = StatusCode::OK;
    for _ in 0..20 {
        last = c.post("/login", &jar, &format!("token=nobody&csrf={csrf}")).await.status;
    }
    assert_eq!(last, StatusCode::TOO_MANY_REQUESTS);
    // Throttled, the address's other users still log in with their token.
    let a = c.post("/login", &jar, &format!("token=operator-token-for-tests&csrf={csrf}")).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
}

#[tokio::test]
async fn cookies_take_the_host_prefix_and_an_empty_login_token_is_refused() {
    let c = Console::new().await;
    let form = c.get("/login", "").await;
    let set = form.headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    assert!(
        set.starts_with("__Host-veem_login=") && set.contains("; Path=/") && !set.contains("Domain"),
        "{set}"
    );
    // An emptied login cookie and an empty field: no token, refused.
    let jar = format!("{}=", session::LOGIN_COOKIE);
    let a = c.post("/login", &jar, "token=operator-token-for-tests&csrf=").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.body);
    let (cookie, _) = c.login("operator-token-for-tests").await;
    assert!(cookie.starts_with("__Host-veem_session="), "{cookie}");
}

#[tokio::test]
async fn the_operator_sees_the_site_and_decides_proposals_with_the_forms_token() {
    let c = Console::new().await;
    let vee = c.site.running_service(STANDARD).remove(0);
    let (cookie, csrf) = c.login("operator-token-for-tests").await;
    let site = c.get("/site", &cookie).await;
    assert_eq!(site.status, StatusCode::OK);
    assert!(
        site.body.contains("data-host=\"h1\"") && site.body.contains("data-host=\"h2\""),
        "{}",
        site.body
    );
    for h in ["content-security-policy", "x-frame-options", "x-content-type-options"] {
        assert!(site.headers.contains_key(h), "{h}");
    }
    let res = c.get("/reservations", &cookie).await;
    assert!(res.body.contains(&format!("data-vee=\"{vee}\"")), "{}", res.body);
    let svc = c.site.veem.core.vee(&vee).unwrap().service_id;
    let page = c.get(&format!("/services/{svc}"), &cookie).await;
    assert!(page.body.contains(&format!("/vees/{vee}/console")), "{}", page.body);

    let from = c.site.veem.core.vee(&vee).unwrap().host().unwrap().to_string();
    let to = if from == "h1" { "h2" } else { "h1" };
    let propose = || {
        c.site
            .veem
            .migration
            .propose(&vee, Dest::Host(to.into()), "maintenance", Proposer::Operator)
            .unwrap()
    };
    let m = propose();
    let table = c.get("/migrations/table", &cookie).await;
    assert!(table.body.contains(&format!("/migrations/{}/approve", m.id)), "{}", table.body);
    // Without the form's token: refused, nothing changes.
    let a = c.post(&format!("/migrations/{}/reject", m.id), &cookie, "reason=no").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert_eq!(c.site.veem.migration.migration(&m.id).unwrap().state, MigrationState::Proposed);
    let a = c
        .post(
            &format!("/migrations/{}/reject", m.id),
            &cookie,
            &format!("csrf={csrf}&reason=not+during+the+sale"),
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let rejected = c.site.veem.migration.migration(&m.id).unwrap();
    assert_eq!(rejected.state, MigrationState::Rejected);
    assert!(rejected.detail.contains("not during the sale"), "{}", rejected.detail);
    let m = propose();
    let a = c
        .post(&format!("/migrations/{}/approve", m.id), &cookie, &format!("csrf={csrf}"))
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(c.site.finished(&m.id).await.state, MigrationState::Done);
    // Logged out: the session is gone.
    let a = c.post("/logout", &cookie, &format!("csrf={csrf}")).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    assert_eq!(c.get("/site", &cookie).await.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn a_provider_sees_its_own_services_only() {
    let c = Console::new().await;
    let theirs = c.site.running_service(&STANDARD.replace("acme", "globex")).remove(0);
    let mine = c.site.running_service(STANDARD).remove(0);
    let (cookie, _) = c.login("acme-token-for-tests").await;
    assert_eq!(c.get("/site", &cookie).await.status, StatusCode::FORBIDDEN);
    assert_eq!(c.get("/reservations", &cookie).await.status, StatusCode::FORBIDDEN);
    let list = c.get("/services", &cookie).await;
    let (my_svc, their_svc) = (
        c.site.veem.core.vee(&mine).unwrap().service_id,
        c.site.veem.core.vee(&theirs).unwrap().service_id,
    );
    assert!(list.body.contains(&my_svc) && !list.body.contains(&their_svc), "{}", list.body);
    assert_eq!(
        c.get(&format!("/services/{their_svc}"), &cookie).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        c.get(&format!("/vees/{theirs}/console"), &cookie).await.status,
        StatusCode::NOT_FOUND
    );
    let mine_page = c.get(&format!("/services/{my_svc}"), &cookie).await;
    assert!(
        mine_page.body.contains("class=\"location\">placed<") && !mine_page.body.contains("local ("),
        "no host named: {}",
        mine_page.body
    );
}

#[test]
fn console_websockets_are_counted_per_token_and_in_all() {
    let cfg = WebConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        session_idle: Duration::from_secs(60),
        session_max: Duration::from_secs(600),
    };
    let web = Web::new(&cfg, Acting::default(), &Default::default());
    let mine: Vec<_> = (0..MAX_CONSOLES_PER_TOKEN).map(|_| web.console_slot("s1").unwrap()).collect();
    assert!(web.console_slot("s1").is_none(), "one token's limit");
    drop(mine);
    let all: Vec<_> = (0..MAX_CONSOLES)
        .map(|i| {
            web.console_slot(&format!("s{}", i % (MAX_CONSOLES / MAX_CONSOLES_PER_TOKEN)))
                .unwrap()
        })
        .collect();
    assert!(web.console_slot("another").is_none(), "the limit in all");
    drop(all);
    assert!(web.console_slot("s1").is_some(), "given back when closed");
}

/// A stream of the web console lives no longer than its session: the
/// event stream (SSE) ends within seconds of the logout.
#[tokio::test]
async fn the_event_stream_ends_with_its_session() {
    use http_body_util::BodyExt;
    let c = Console::new().await;
    let (cookie, csrf) = c.login("operator-token-for-tests").await;
    let req = Request::get("/events/stream")
        .header(header::COOKIE, &cookie)
        .body(Body::empty())
        .unwrap();
    let resp = c.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let open = tokio::time::timeout(Duration::from_millis(2500), async {
        while let Some(f) = body.frame().await {
            f.unwrap();
        }
    })
    .await;
    assert!(open.is_err(), "the stream stays open while the session lives");
    let out = c.post("/logout", &cookie, &format!("csrf={csrf}")).await;
    assert!(out.status.is_redirection(), "{}", out.status);
    // Both audited, as site events.
    let audit: Vec<String> = c
        .site
        .veem
        .core
        .store
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "web")
        .map(|e| e.detail)
        .collect();
    assert!(audit.iter().any(|d| d.starts_with("login of operator from ")), "{audit:?}");
    assert!(audit.iter().any(|d| d == "logout of operator"), "{audit:?}");
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(f) = body.frame().await {
            f.unwrap();
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream ended after the logout");
}
