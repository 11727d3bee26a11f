//! The web console's pages (templates in `veem/templates/web/`), each from
//! the VMI's handlers called with the session's token.

use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use interfaces::vmi::vmi_service_server::VmiService as _;
use interfaces::vmi::{self, HostStatus};
use serde::Deserialize;

use super::session::{same, Session, CSRF_HEADER};
use super::{call, page_error, refused, svg, Ctx, Web};
use crate::api::model::{Migration, Service, SlaViolation, Usage};
use crate::config::Role;
use crate::ports::call::Failure;

/// A template rendered, or an error page if it cannot be.
pub(crate) fn html(t: &impl Template) -> Html<String> {
    Html(
        t.render()
            .unwrap_or_else(|e| format!("<!doctype html><p>the page could not be made: {e}</p>")),
    )
}

/// What every page's frame needs: who is logged in, the CSRF token of
/// its forms.
pub(crate) struct Nav {
    pub who: String,
    pub operator: bool,
    pub csrf: String,
}

impl Nav {
    fn of(s: &Session) -> Self {
        Self {
            who: s.role.to_string(),
            operator: s.role == Role::Operator,
            csrf: s.csrf.clone(),
        }
    }
}

#[derive(Template)]
#[template(path = "web/login.html")]
pub(crate) struct LoginPage<'a> {
    pub csrf: &'a str,
    pub error: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "web/error.html")]
pub(crate) struct ErrorPage<'a> {
    pub status: u16,
    pub message: &'a str,
}

/// `GET /`: the operator's site, or the provider's services.
pub(super) async fn home(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    match web.ctx(&headers) {
        Ok(c) if c.session.role == Role::Operator => Redirect::to("/site").into_response(),
        Ok(_) => Redirect::to("/services").into_response(),
        Err(r) => r,
    }
}

/// A host as the site page shows it.
pub(crate) struct HostRow {
    pub name: String,
    pub health: String,
    pub accel: String,
    pub vcpus: String,
    pub memory: String,
    pub vees: u32,
    pub last_error: String,
}

impl From<&HostStatus> for HostRow {
    fn from(h: &HostStatus) -> Self {
        Self {
            name: h.name.clone(),
            health: h.health().to_string(),
            accel: h.accel.clone(),
            vcpus: format!("{} of {}", h.used_vcpus, h.vcpus),
            memory: format!("{} of {} MiB", h.used_memory_mib, h.memory_mib),
            vees: h.vees,
            last_error: h.last_error.clone(),
        }
    }
}

/// A peer site as the site page shows it.
pub(crate) struct PeerRow {
    pub site: String,
    pub endpoint: String,
    pub agreement: String,
    pub answers: bool,
}

#[derive(Template)]
#[template(path = "web/site.html")]
struct SitePage {
    nav: Nav,
    site: String,
    control: String,
    hosts: Vec<HostRow>,
    peers: Vec<PeerRow>,
}

/// `GET /site` (the operator): hosts, peers, the control plane.
pub(super) async fn site(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    let c = match web.ctx(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let hosts = match c.vmi.list_hosts(call(&c.session, vmi::ListHostsRequest::default())).await {
        Ok(r) => r.into_inner().hosts,
        Err(s) => return refused(s),
    };
    let cfg = &c.veem.core.cfg;
    let mut peers = Vec::new();
    for p in &cfg.peers {
        // A call with an ID no VEE has: any answer but Unavailable (or
        // none within 2 s) says the peer answers.
        let answers = match c.veem.core.peer(&p.site_id) {
            Ok(peer) => matches!(
                tokio::time::timeout(Duration::from_secs(2), peer.get_vee("00000000-0000-4000-8000-000000000000")).await,
                Ok(Err(s)) if !matches!(s.failure, Failure::Unreachable | Failure::NotActing)
            ),
            Err(_) => false,
        };
        peers.push(PeerRow {
            site: p.site_id.clone(),
            endpoint: p.endpoint.clone(),
            agreement: format!(
                "up to {} vCPUs, {} MiB; {} per VEE-hour; levels {}",
                p.agreement.max_vcpus,
                p.agreement.max_memory_mib,
                p.agreement.price_per_vee_hour,
                p.agreement
                    .guarantee_levels
                    .iter()
                    .map(|g| g.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            answers,
        });
    }
    let control = match cfg.store.engine {
        crate::config::EngineKind::Sled => format!("one VEEM over its embedded store ({})", cfg.db.display()),
        crate::config::EngineKind::Etcd => "a site over etcd: this VEEM leads it (standbys answer with its address)".into(),
    };
    let page = SitePage {
        nav: Nav::of(&c.session),
        site: cfg.site_id.clone(),
        control,
        hosts: hosts.iter().map(HostRow::from).collect(),
        peers,
    };
    html(&page).into_response()
}

#[derive(Template)]
#[template(path = "web/reservations.html")]
struct ReservationsPage {
    nav: Nav,
    svg: String,
}

/// `GET /reservations` (the operator): the hosts' timeline.
pub(super) async fn reservations(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    let c = match web.ctx(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    // The operator's page: the same check as ListHosts.
    if let Err(s) = c.vmi.list_hosts(call(&c.session, vmi::ListHostsRequest::default())).await {
        return refused(s);
    }
    let page = ReservationsPage {
        nav: Nav::of(&c.session),
        svg: svg::timeline(&c.veem),
    };
    html(&page).into_response()
}

#[derive(Template)]
#[template(path = "web/services.html")]
struct ServicesPage {
    nav: Nav,
    services: Vec<Service>,
}

/// `GET /services`: the caller's services (all of them for the operator).
pub(super) async fn services(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    let c = match web.ctx(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let req = vmi::ListServicesRequest { page_size: 0, page_token };
        match c.vmi.list_services(call(&c.session, req)).await {
            Ok(r) => {
                let r = r.into_inner();
                all.extend(r.services.iter().map(Service::from));
                if r.next_page_token.is_empty() {
                    break;
                }
                page_token = r.next_page_token;
            }
            Err(s) => return refused(s),
        }
    }
    html(&ServicesPage {
        nav: Nav::of(&c.session),
        services: all,
    })
    .into_response()
}

#[derive(Template)]
#[template(path = "web/service.html")]
struct ServicePage {
    nav: Nav,
    service: Service,
    violations: Vec<SlaViolation>,
    penalty: f64,
    chart: String,
}

/// `GET /services/{id}`: one service's VEEs, violations and CPU use.
pub(super) async fn service(State(web): State<Arc<Web>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let c = match web.ctx(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let s = match c
        .vmi
        .get_service(call(&c.session, vmi::GetServiceRequest { service_id: id.clone() }))
        .await
    {
        Ok(s) => Service::from(&s.into_inner()),
        Err(s) => return refused(s),
    };
    let usage = match c.vmi.get_usage(call(&c.session, vmi::GetUsageRequest { service_id: id })).await {
        Ok(u) => Usage::from(&u.into_inner()),
        Err(s) => return refused(s),
    };
    html(&ServicePage {
        nav: Nav::of(&c.session),
        chart: svg::usage(&usage),
        penalty: usage.totals.penalty,
        violations: usage.violations,
        service: s,
    })
    .into_response()
}

#[derive(Template)]
#[template(path = "web/migrations.html")]
struct MigrationsPage {
    nav: Nav,
}

#[derive(Template)]
#[template(path = "web/migrations_table.html")]
struct MigrationsTable {
    rows: Vec<Migration>,
    operator: bool,
    csrf: String,
}

/// `GET /migrations`: the page; its table comes from
/// [`migrations_table`], every 2 s.
pub(super) async fn migrations(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    match web.ctx(&headers) {
        Ok(c) => html(&MigrationsPage { nav: Nav::of(&c.session) }).into_response(),
        Err(r) => r,
    }
}

/// `GET /migrations/table`: the migrations and proposals, newest first.
pub(super) async fn migrations_table(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    let c = match web.polled_ctx(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    match c.vmi.list_migrations(call(&c.session, vmi::ListMigrationsRequest::default())).await {
        Ok(r) => {
            let mut rows: Vec<Migration> = r.into_inner().migrations.iter().map(Migration::from).collect();
            rows.sort_by(|a, b| b.created.cmp(&a.created));
            html(&MigrationsTable {
                rows,
                operator: c.session.role == Role::Operator,
                csrf: c.session.csrf.clone(),
            })
            .into_response()
        }
        Err(s) => refused(s),
    }
}

/// The CSRF token of a request that changes something: the header htmx
/// sends, or the form's field.
fn csrf_ok(c: &Ctx, headers: &HeaderMap, field: Option<&str>) -> bool {
    let given = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).or(field);
    given.is_some_and(|g| same(g, &c.session.csrf))
}

#[derive(Deserialize)]
pub(super) struct ActionForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    reason: String,
}

/// `POST /migrations/{id}/approve` (VMI ApproveMigration).
pub(super) async fn approve(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<ActionForm>,
) -> Response {
    let c = match web.ctx(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if !csrf_ok(&c, &headers, f.csrf.as_deref()) {
        return page_error(StatusCode::FORBIDDEN, "the form's CSRF token is missing or wrong");
    }
    let req = vmi::ApproveMigrationRequest { migration_id: id };
    match c.vmi.approve_migration(call(&c.session, req)).await {
        Ok(_) => Redirect::to("/migrations").into_response(),
        Err(s) => refused(s),
    }
}

/// `POST /migrations/{id}/reject` with a reason (VMI RejectMigration).
pub(super) async fn reject(State(web): State<Arc<Web>>, headers: HeaderMap, Path(id): Path<String>, Form(f): Form<ActionForm>) -> Response {
    let c = match web.ctx(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if !csrf_ok(&c, &headers, f.csrf.as_deref()) {
        return page_error(StatusCode::FORBIDDEN, "the form's CSRF token is missing or wrong");
    }
    let req = vmi::RejectMigrationRequest {
        migration_id: id,
        reason: f.reason,
    };
    match c.vmi.reject_migration(call(&c.session, req)).await {
        Ok(_) => Redirect::to("/migrations").into_response(),
        Err(s) => refused(s),
    }
}

#[derive(Template)]
#[template(path = "web/events.html")]
struct EventsPage {
    nav: Nav,
    service: String,
    kind: String,
}

/// The events page's filters.
#[derive(Deserialize, Default)]
pub(super) struct EventFilter {
    #[serde(default)]
    pub service: String,
    #[serde(default)]
    pub kind: String,
}

/// `GET /events?service=ID&kind=KIND`: the live stream, filtered.
pub(super) async fn events(State(web): State<Arc<Web>>, headers: HeaderMap, Query(f): Query<EventFilter>) -> Response {
    match web.ctx(&headers) {
        Ok(c) => html(&EventsPage {
            nav: Nav::of(&c.session),
            service: f.service,
            kind: f.kind,
        })
        .into_response(),
        Err(r) => r,
    }
}

#[derive(Template)]
#[template(path = "web/console.html")]
struct ConsolePage {
    nav: Nav,
    vee_id: String,
    component: String,
}

/// `GET /vees/{id}/console`: the terminal (a VEE the caller may see).
pub(super) async fn console(State(web): State<Arc<Web>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let c = match web.ctx(&headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    match c.vmi.get_vee(call(&c.session, vmi::GetVeeRequest { vee_id: id.clone() })).await {
        Ok(v) => {
            let v = v.into_inner();
            html(&ConsolePage {
                nav: Nav::of(&c.session),
                component: format!("{}-{}", v.component, v.instance),
                vee_id: id,
            })
            .into_response()
        }
        Err(s) => refused(s),
    }
}
