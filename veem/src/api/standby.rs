//! The VMI's port of a VEEM over etcd (issue 38): while it stands by for
//! its site's leadership, every call is answered UNAVAILABLE (503 with
//! `Retry-After` in REST), health included, with the leader's VMI URL in
//! the `vee-leader` metadata (REST: the `Vee-Leader` header) and its
//! message, so that clients and peers go there; once it leads, the
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

/// What answers on the VMI's port (see the module doc).
pub struct Port {
    site: String,
    front: RwLock<Option<Arc<Front>>>,
    leader: RwLock<Option<String>>,
}

impl Port {
    /// The port of a VEEM of site `site` that does not lead it yet.
    pub fn standing_by(site: &str) -> Arc<Self> {
        Arc::new(Self {
            site: site.into(),
            front: RwLock::new(None),
            leader: RwLock::new(None),
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

    /// The site's leader is reached at `endpoint` (`None`: none leads, or
    /// the cluster does not say).
    pub fn set_leader(&self, endpoint: Option<String>) {
        *self.leader.write().unwrap() = endpoint;
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
    let leader = port.leader.read().unwrap().clone();
    let text = match &leader {
        Some(url) => format!("this VEEM stands by for site {}: its leader is at {url}; call it there", port.site),
        None => format!(
            "this VEEM stands by for site {}, which has no leader now (an election is under way); retry shortly",
            port.site
        ),
    };
    let mut resp = front::refusal(
        front::is_grpc(&req),
        Status::unavailable(text),
        StatusCode::SERVICE_UNAVAILABLE,
        Duration::from_secs(1),
    );
    if let Some(v) = leader.and_then(|url| HeaderValue::from_str(&url).ok()) {
        resp.headers_mut().insert(LEADER, v);
    }
    resp
}
