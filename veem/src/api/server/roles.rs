//! Who calls the VMI and what they may see: the caller's role from its
//! bearer token (a peer's also from its certificate, and its epoch against
//! the newest seen from it), the roles each call admits, the services and
//! VEEs a role may see, a refusal's words as it may read them, and what a
//! role may ask of a move (Migrate).

use interfaces::vmi::{MigrateRequest, MigrationInfo};
use tonic::{Request, Response, Status};

use super::info::migration_info;
use super::VmiService;
use crate::api::status::status;
use crate::api::visibility::Redactor;
use crate::config::Role;
use crate::model::{ServiceRec, VeeRec};
use crate::workflows::migration::{Dest, Proposer};
use futures::future::BoxFuture;

impl VmiService {
    /// The caller's role from `authorization: Bearer TOKEN`.
    pub(super) fn caller<T>(&self, req: &Request<T>) -> Result<Role, Status> {
        let token = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Status::unauthenticated("missing `authorization: Bearer TOKEN`"))?;
        let role = self
            .veem
            .core
            .cfg
            .role_of(token)
            .ok_or_else(|| Status::unauthenticated("unknown token"))?;
        if let (Role::Peer(site), Some(cas)) = (&role, &self.peer_cas) {
            let ca = cas
                .get(site)
                .ok_or_else(|| Status::unauthenticated(format!("peer {site}: no CA configured for it")))?;
            let chain = req.peer_certs().unwrap_or_default();
            ca.check(&chain, site).map_err(Status::unauthenticated)?;
        }
        if let Role::Peer(site) = &role {
            self.admit_peer_epoch(site, interfaces::fencing::epoch_of(req)?)?;
        }
        Ok(role)
    }

    /// A peer's call carries the epoch of the VEEM that leads it (over
    /// etcd; `interfaces::fencing`), checked by
    /// [`crate::workflows::peer_epochs::PeerEpochs::admit`]: refused
    /// (FAILED_PRECONDITION) when older than the newest seen from that
    /// peer, or absent once epochs were seen (after the peer's
    /// `epochless_grace`). Returns the epoch the call runs under (0: none).
    pub(super) fn admit_peer_epoch(&self, site: &str, epoch: Option<i64>) -> Result<i64, Status> {
        self.veem.peer_epochs.admit(site, epoch).map_err(status)
    }

    /// What ends a stream of `role` opened by `req` when its caller's
    /// leadership does: for a peer's call, the admission of a newer epoch
    /// of that peer; never for the others.
    pub(super) fn fenced_later<T>(&self, role: &Role, req: &Request<T>) -> Result<BoxFuture<'static, ()>, Status> {
        match role {
            Role::Peer(site) => {
                let under = interfaces::fencing::epoch_of(req)?.unwrap_or(0);
                Ok(Box::pin(self.veem.peer_epochs.superseded(site, under)))
            }
            _ => Ok(Box::pin(std::future::pending())),
        }
    }

    /// Service providers and operators only (no peers).
    pub(super) fn user<T>(&self, req: &Request<T>) -> Result<Role, Status> {
        match self.caller(req)? {
            Role::Peer(site) => Err(Status::permission_denied(format!("peer site {site} may call only peer operations"))),
            r => Ok(r),
        }
    }

    pub(super) fn operator<T>(&self, req: &Request<T>) -> Result<String, Status> {
        match self.caller(req)? {
            Role::Operator => Ok("operator".into()),
            _ => Err(Status::permission_denied("only the site's operator may do this")),
        }
    }

    pub(super) fn peer<T>(&self, req: &Request<T>) -> Result<String, Status> {
        match self.caller(req)? {
            Role::Peer(site) => Ok(site),
            _ => Err(Status::permission_denied("peer operation: a peer site's token is required")),
        }
    }

    /// The service, if `role` may see it (NotFound otherwise: a provider
    /// cannot even learn that another's service exists).
    pub(super) fn visible_service(&self, role: &Role, id: &str) -> Result<ServiceRec, Status> {
        let s = self.veem.core.service(id).map_err(status)?;
        if sees(role, &s) {
            Ok(s)
        } else {
            Err(Status::not_found(format!("service {id} not found")))
        }
    }

    pub(super) fn visible_vee(&self, role: &Role, id: &str) -> Result<VeeRec, Status> {
        let v = self.veem.core.vee(id).map_err(status)?;
        self.visible_service(role, &v.service_id)
            .map_err(|_| Status::not_found(format!("VEE {id} not found")))?;
        Ok(v)
    }

    /// The status of error `e` as `role` may read it: its message redacted
    /// (a planner's or a host's reason may name hosts and sites).
    pub(super) fn refusal(&self, role: &Role, e: impl crate::api::status::Coded) -> Status {
        let s = status(e);
        match self.redactor(role) {
            Some(r) => Status::new(s.code(), r.text(s.message())),
            None => s,
        }
    }

    /// What `role` may not see in free text ([`Redactor::for_role`]).
    pub(super) fn redactor(&self, role: &Role) -> Option<Redactor> {
        Redactor::for_role(&self.veem.core.cfg, &self.veem.core.hosts.names(), role)
    }

    /// A Migrate call of `role`: operators may name a host or a peer
    /// site; a provider only asks for a move and the site chooses where
    /// (location unawareness, E §3.4). A caller's reason is recorded,
    /// never matched against the site policy. Errors: InvalidArgument for
    /// both destinations named, PermissionDenied for a provider naming
    /// one, the proposal's refusal as `role` may read it.
    pub(super) async fn propose(&self, role: &Role, req: MigrateRequest) -> Result<Response<MigrationInfo>, Status> {
        let role = role.clone();
        self.visible_vee(&role, &req.vee_id)?;
        let to = match (req.to_host.is_empty(), req.to_site.is_empty()) {
            (true, true) => None,
            (false, true) => Some(Dest::Host(req.to_host)),
            (true, false) => Some(Dest::Site(req.to_site)),
            (false, false) => return Err(Status::invalid_argument("give at most one of `to_host` and `to_site`")),
        };
        let by = match &role {
            Role::Provider(p) => Proposer::Provider(p.clone()),
            _ => Proposer::Operator,
        };
        if to.is_some() && matches!(by, Proposer::Provider(_)) {
            return Err(Status::permission_denied(
                "only the site's operator names hosts or sites; ask without a destination and the site chooses where",
            ));
        }
        let reason = if req.reason.is_empty() {
            "requested".to_string()
        } else {
            req.reason
        };
        let m = match to {
            Some(to) => self.veem.migration.propose(&req.vee_id, to, &reason, by),
            None => self.veem.migration.propose_anywhere(&req.vee_id, &reason, by),
        };
        let redactor = self.redactor(&role);
        m.map(|m| Response::new(migration_info(&m, redactor.as_ref())))
            .map_err(|e| self.refusal(&role, e))
    }
}

/// Whether `role` may see service `s`: the operator every one, a provider
/// its own, a peer site those run here for it.
pub(super) fn sees(role: &Role, s: &ServiceRec) -> bool {
    match role {
        Role::Operator => true,
        Role::Provider(p) => &s.provider == p && s.for_peer.is_none(),
        Role::Peer(site) => s.for_peer.as_deref() == Some(site.as_str()),
    }
}
