//! The VMI's port of a VEEM over etcd (issue 38): while it stands by for
//! its site's leadership, every call is answered UNAVAILABLE (503 with
//! `Retry-After` in REST), health included, with the leader's VMI URL in
//! the `vee-leader` metadata (REST: the `Vee-Leader` header) and its
//! message, so that clients and peers go there (when the site's etcd has
//! no quorum, nobody can lead: the answer says so and is marked
//! `vee-read-only`); once it leads, the
//! [`Front`] answers. A standby serves no reads: its records would be
//! those it read when it started, which could mislead.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use tonic::Status;

use crate::api::front::{self, Front};

/// The metadata key (and REST header) naming the site's leader.
pub use interfaces::fencing::LEADER;
use interfaces::fencing::{NOT_ACTING, READ_ONLY};

/// What answers on the VMI's port (see the module doc).
pub struct Port {
    site: String,
    front: RwLock<Option<Arc<Front>>>,
    /// The leader's VMI URL (`None`: none leads), or why the cluster
    /// does not say.
    leader: RwLock<Result<Option<String>, String>>,
}

impl Port {
    /// The port of a VEEM of site `site` that does not lead it yet.
    pub fn standing_by(site: &str) -> Arc<Self> {
        Arc::new(Self {
            site: site.into(),
            front: RwLock::new(None),
            leader: RwLock::new(Ok(None)),
        })
    }

    /// The port of a VEEM whose `front` answers from the start (the
    /// embedded store: no election).
    pub fn of(site: &str, front: Arc<Front>) -> Arc<Self> {
        let port = Self::standing_by(site);
        port.lead(front);
        port
    }

    /// This VEEM leads: `front` answers from now on.
    pub fn lead(&self, front: Arc<Front>) {
        *self.front.write().unwrap() = Some(front);
    }

    /// The site's leader is reached at `endpoint` (`Ok(None)`: none
    /// leads; `Err`: the cluster does not answer, and why).
    pub fn set_leader(&self, endpoint: Result<Option<String>, String>) {
        *self.leader.write().unwrap() = endpoint;
    }

    /// This VEEM no longer leads (it lost its lease): the standby's
    /// answers from now on.
    pub fn stand_by(&self) {
        *self.front.write().unwrap() = None;
        *self.leader.write().unwrap() = Ok(None);
    }

    /// The port as the router the listener serves.
    pub fn router(self: Arc<Self>) -> axum::Router {
        axum::Router::new().fallback(dispatch).with_state(self)
    }
}

async fn dispatch(State(port): State<Arc<Port>>, req: Request) -> Response {
    let front = port.front.read().unwrap().clone();
    if let Some(front) = front {
        return front::answer(front, req).await;
    }
    if let Some(resp) = front::probe(&req, Err(format!("this VEEM stands by for site {}", port.site))) {
        return resp;
    }
    let leader = port.leader.read().unwrap().clone();
    let text = match &leader {
        Ok(Some(url)) => format!("this VEEM stands by for site {}: its leader is at {url}; call it there", port.site),
        Ok(None) => format!(
            "this VEEM stands by for site {}, which has no leader now (an election is under way); retry shortly",
            port.site
        ),
        Err(why) => format!(
            "site {}'s control plane is read-only: its store (etcd) does not answer ({}), so no VEEM can lead it; its VEEs keep running, and it resumes by itself once etcd has a quorum again",
            port.site,
            interfaces::excerpt::message(why)
        ),
    };
    let mut resp = front::refusal(
        front::is_grpc(&req),
        Status::unavailable(text),
        StatusCode::SERVICE_UNAVAILABLE,
        Duration::from_secs(1),
    );
    // Headers, which gRPC clients read as the status's metadata.
    let why = if leader.is_err() {
        resp.headers_mut().insert(READ_ONLY, HeaderValue::from_static("1"));
        "read-only"
    } else {
        "standby"
    };
    resp.headers_mut().insert(NOT_ACTING, HeaderValue::from_static(why));
    if let Some(v) = leader.ok().flatten().and_then(|url| HeaderValue::from_str(&url).ok()) {
        resp.headers_mut().insert(LEADER, v);
    }
    resp
}
