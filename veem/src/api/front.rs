//! What every request on the VMI's port passes before a handler (issue
//! 36), for gRPC and REST alike:
//!
//! - **gRPC or REST** by the request's content type (`application/grpc`,
//!   `+proto` and the like): gRPC goes to the VMI, health and reflection
//!   services, everything else to the REST routes, whose unknown paths are
//!   404 and wrong methods 405. Nothing falls through from one to the
//!   other.
//! - **Start-up**: until the VEEM has reconciled with its hosts
//!   ([`Front::started`]), calls are answered UNAVAILABLE (503 with
//!   `Retry-After`), except health (NOT_SERVING meanwhile), reflection and
//!   the API's description.
//! - **Failed authentications** per client address
//!   (`interfaces::auth_throttle`): a call's bearer token is checked first
//!   (hashed, compared in constant time); from an address over its bucket,
//!   a call with a wrong one is answered RESOURCE_EXHAUSTED (429 with
//!   `Retry-After`) once its body is read, a right one goes on (others
//!   behind the same NAT or proxy are not locked out); an UNAUTHENTICATED
//!   answer to a call with credentials fills the bucket.
//! - **Probes for supervisors**: `GET /healthz` answers 200 while the
//!   process answers; `GET /readyz` 200 when calls are served (as the gRPC
//!   health service's SERVING), else 503 with why (starting, stopping, a
//!   standby); no token, before anything else ([`probe`]).
//! - **Bounded status messages**: a gRPC status message longer than
//!   `interfaces::excerpt::MESSAGE_BYTES` is cut, whichever handler made it
//!   (REST errors are bounded by `rest::RestError`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use interfaces::auth_throttle::AuthThrottle;
use interfaces::connections::ListenerLimits;
use tonic::{Code, Status};
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;
use tower::ServiceExt;

use crate::api::rest::RestError;
use crate::api::server::VmiService;
use crate::manager::Veem;

/// The VEEM acting for the site now, with its front (none: starting, or
/// standing by); the daemon sets it as it starts and leads.
#[derive(Clone, Default)]
pub struct Acting(Arc<RwLock<Option<ActingVeem>>>);

/// A VEEM acting for its site, and its front.
type ActingVeem = (Arc<Veem>, Arc<Front>);

impl Acting {
    /// `veem` acts for the site, `front` answering for it.
    pub fn set(&self, veem: Arc<Veem>, front: Arc<Front>) {
        *self.0.write().unwrap() = Some((veem, front));
    }

    /// No VEEM acts (it stepped down).
    pub fn clear(&self) {
        *self.0.write().unwrap() = None;
    }

    pub(crate) fn get(&self) -> Option<ActingVeem> {
        self.0.read().unwrap().clone()
    }
}

/// The VMI's service name in gRPC health checks (`grpc.health.v1`).
pub const VMI_SERVICE: &str = "vmi.v1.VmiService";

/// Bytes of a gRPC message at most (tonic's default decoding limit).
const GRPC_MESSAGE_BYTES: u64 = 4 * 1024 * 1024;

/// The front of the VMI's port: see the module doc.
pub struct Front {
    grpc: axum::Router,
    rest: axum::Router,
    throttle: AuthThrottle,
    /// Bytes of a refused call's body read before its answer.
    drain_limit: u64,
    veem: Arc<Veem>,
    starting: AtomicBool,
    stopping: AtomicBool,
    health: HealthReporter,
    /// The VMI's handlers, which the web console calls too.
    handlers: Arc<VmiService>,
}

impl Front {
    /// The front of `veem`'s VMI within `limits`: its handlers (with the
    /// peers' CAs under `[tls]`) as gRPC with health and reflection, and
    /// as REST; starting up (health NOT_SERVING, [`Front::started`]).
    /// Errors: a peer's CA cannot be read.
    pub async fn of(veem: Arc<Veem>, limits: &ListenerLimits) -> anyhow::Result<Arc<Self>> {
        let handlers = Arc::new(VmiService::checked(veem.clone())?);
        let vmi = interfaces::vmi::vmi_service_server::VmiServiceServer::from_arc(handlers.clone());
        let (grpc, health) = interfaces::daemon::routes_with_health_and_reflection(
            tonic::service::Routes::new(vmi),
            VMI_SERVICE,
            interfaces::vmi::FILE_DESCRIPTOR_SET,
            ServingStatus::NotServing,
        )
        .await?;
        health.set_service_status("", ServingStatus::NotServing).await;
        let max_body = usize::try_from(limits.max_body_size).unwrap_or(usize::MAX);
        Ok(Arc::new(Self {
            grpc: grpc.into_axum_router(),
            rest: crate::api::rest::router(handlers.clone(), max_body),
            handlers,
            throttle: AuthThrottle::new(limits.auth_failures_burst, limits.auth_failure_interval),
            drain_limit: limits.max_body_size.max(GRPC_MESSAGE_BYTES),
            veem,
            starting: AtomicBool::new(true),
            stopping: AtomicBool::new(false),
            health,
        }))
    }

    /// The VMI's handlers (the web console calls them in-process).
    pub(crate) fn handlers(&self) -> Arc<VmiService> {
        self.handlers.clone()
    }

    /// The VEEM has reconciled: calls are served, health says SERVING.
    pub async fn started(&self) {
        self.starting.store(false, Ordering::SeqCst);
        self.set_health(ServingStatus::Serving).await;
    }

    /// The VEEM stops: health says NOT_SERVING.
    pub async fn stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.set_health(ServingStatus::NotServing).await;
    }

    /// Whether calls are served (the gRPC health service's SERVING), or
    /// why not.
    pub(crate) fn readiness(&self) -> Result<(), String> {
        if self.stopping.load(Ordering::SeqCst) {
            Err("the VEEM is stopping".into())
        } else if self.starting.load(Ordering::SeqCst) {
            Err("the VEEM is starting: it reconciles with its hosts".into())
        } else {
            Ok(())
        }
    }

    async fn set_health(&self, status: ServingStatus) {
        let health = self.health.clone();
        for service in [VMI_SERVICE, ""] {
            health.set_service_status(service, status).await;
        }
    }

    /// The front as the router the listener serves.
    pub fn router(self: Arc<Self>) -> axum::Router {
        axum::Router::new().fallback(handle).with_state(self)
    }
}

/// Whether `req` is a gRPC call (content type `application/grpc`,
/// `application/grpc+proto`, ...).
pub(crate) fn is_grpc(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// What is answered while the VEEM starts up: whether it serves, its
/// schema, and the REST API's description.
fn open_while_starting(req: &Request, grpc: bool) -> bool {
    let path = req.uri().path();
    if grpc {
        path.starts_with("/grpc.health.v1.Health/") || path.starts_with("/grpc.reflection.")
    } else {
        path == "/v1/openapi.json"
    }
}

async fn handle(State(front): State<Arc<Front>>, req: Request) -> Response {
    answer(front, req).await
}

/// The answer to a supervisor's probe (`GET` or `HEAD` of `/healthz`,
/// `/readyz`;
/// see the module doc), `ready` saying whether calls are served or why
/// not; `None` for any other request.
pub(crate) fn probe(req: &Request, ready: Result<(), String>) -> Option<Response> {
    if is_grpc(req) {
        return None;
    }
    interfaces::metrics::probe(req.method(), req.uri().path(), || ready)
}

/// What `front` answers to `req` (see the module doc).
pub(crate) async fn answer(front: Arc<Front>, req: Request) -> Response {
    if let Some(resp) = probe(&req, front.readiness()) {
        return resp;
    }
    let grpc = is_grpc(&req);
    // In-process calls (tests) have no address: one unnamed client.
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |c| c.0.ip());
    let credentials = req.headers().contains_key(header::AUTHORIZATION);
    if front.starting.load(Ordering::SeqCst) && !open_while_starting(&req, grpc) {
        let status = Status::unavailable("the VEEM is starting: it reconciles with its hosts; retry shortly");
        let mut resp = refusal(grpc, status, StatusCode::SERVICE_UNAVAILABLE, Duration::from_secs(1));
        resp.headers_mut()
            .insert(interfaces::fencing::NOT_ACTING, HeaderValue::from_static("starting"));
        return resp;
    }
    if credentials {
        let valid = bearer(&req).is_some_and(|t| front.veem.core.cfg.role_of(t).is_some());
        if let Some(wait) = front.throttle.admit(peer, valid) {
            let secs = wait.as_secs_f64().ceil().max(1.0);
            let status = Status::resource_exhausted(format!("too many failed authentications from this address: retry in {secs} s"));
            let resp = refusal(grpc, status, StatusCode::TOO_MANY_REQUESTS, Duration::from_secs_f64(secs));
            return interfaces::auth_throttle::refuse(req, front.drain_limit, resp).await;
        }
    }
    let to = if grpc { &front.grpc } else { &front.rest };
    let Ok(resp) = to.clone().oneshot(req).await;
    if credentials && unauthenticated(&resp, grpc) {
        front.throttle.failed(peer);
    }
    if grpc {
        bounded(resp)
    } else {
        resp
    }
}

/// The token of `req`'s `Authorization: Bearer TOKEN`, as the VMI's
/// handlers read it.
fn bearer(req: &Request) -> Option<&str> {
    req.headers().get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ")
}

/// `status` as a gRPC answer, or as REST's JSON error with `http`; both
/// with `Retry-After: wait`.
pub(crate) fn refusal(grpc: bool, status: Status, http: StatusCode, wait: Duration) -> Response {
    let mut resp = if grpc {
        status.into_http::<Body>()
    } else {
        RestError::http(http, status.code(), status.message().to_string()).into_response()
    };
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs().max(1)));
    resp
}

/// Whether `resp` refused its caller's credentials.
fn unauthenticated(resp: &Response, grpc: bool) -> bool {
    if grpc {
        resp.headers().get("grpc-status").is_some_and(|v| v.as_bytes() == b"16")
    } else {
        resp.status() == StatusCode::UNAUTHORIZED
    }
}

/// `resp` with its `grpc-message` at most `MESSAGE_BYTES` once decoded.
fn bounded(mut resp: Response) -> Response {
    let Some(msg) = resp.headers().get("grpc-message") else {
        return resp;
    };
    if msg.len() <= interfaces::excerpt::MESSAGE_BYTES {
        return resp;
    }
    let text = percent_encoding::percent_decode(msg.as_bytes()).decode_utf8_lossy();
    let code = resp
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(Code::Unknown, Code::from);
    let cut = Status::new(code, interfaces::excerpt::message(&text)).into_http::<()>();
    if let Some(v) = cut.headers().get("grpc-message") {
        resp.headers_mut().insert("grpc-message", v.clone());
    }
    resp
}

#[cfg(test)]
mod tests;
