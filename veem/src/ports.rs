//! The ports: what the workflows talk to, as traits, with the network
//! implementations (adapters) beside them. Production wires the adapters
//! ([`Ports::connect`]); the workflows' unit tests wire in-memory fakes
//! (`fakes`), so that every failure branch (a host that refuses or dies
//! mid-way, a silent peer, a repository that is down) runs without libvirt
//! or a network.
//!
//! | port | trait | adapter |
//! |---|---|---|
//! | a VEEH of the site | [`HostVhi`]: the VHI service trait generated from `vhi.proto` | [`GrpcHost`] (tonic channel) |
//! | a peer site | [`Peer`]: the VMI peer calls the workflows make | [`GrpcPeer`] (tonic, the agreement's bearer token) |
//! | the image repository | [`ImageRepository`] | `interfaces::repo_client::RepoClient` (reqwest), or `registry_repository::RegistryRepository` for a site whose repository is an OCI registry |
//! | the clock | [`Clock`] | [`SystemClock`] |

// tonic's calls return its large `Status` as their error.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use futures::Stream;
use interfaces::fencing::Stamp;
use interfaces::repo_client::RepoClient;
use interfaces::vhi::vhi_service_client::VhiServiceClient;
use interfaces::vhi::{self, vhi_service_server};
use interfaces::vmi;
use interfaces::BlobId;
use tonic::client::GrpcService;
use tonic::codegen::{Body, Bytes, StdError};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

use crate::config::{PeerEntry, VeemConfig};
use crate::domain::Action;
use crate::domain::peer::{IncomingVee, MigrationOutcome, RemoteVee, SpareRequest, UsageReceipt};
use crate::model::UsageRec;
use crate::peers::{Bearer, PeerChannel};
use crate::wire::peer as wire;

mod console;
pub mod call;
mod clock;
pub use clock::{retry, within, Clock, SystemClock};
mod following;
pub mod host;
mod registry_repository;
pub mod peer_site;
use console::console_requests;
pub use console::{ConsoleInput, ConsoleOutput, ConsoleStream, HostConsole};

/// A stream of replies, as the VHI's streaming calls return them.
pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// One VEEH as the workflows see it: the VHI itself (`vhi.proto`, one
/// method per call), so that a fake host implements the same trait the
/// real VEEH serves, and its console as a client attaches to it
/// ([`HostConsole`]: a client-streaming call the server trait cannot
/// carry).
pub type HostVhi = dyn Vhi;

/// The VHI's server trait with its streams, and the console of
/// [`HostConsole`].
pub trait Vhi:
    vhi_service_server::VhiService<
        MigrateOutStream = BoxStream<vhi::MigrationProgress>,
        WatchEventsStream = BoxStream<vhi::HostEvent>,
        AttachConsoleStream = BoxStream<vhi::AttachConsoleResponse>,
    > + HostConsole
{
}

impl<T> Vhi for T where
    T: vhi_service_server::VhiService<
            MigrateOutStream = BoxStream<vhi::MigrationProgress>,
            WatchEventsStream = BoxStream<vhi::HostEvent>,
            AttachConsoleStream = BoxStream<vhi::AttachConsoleResponse>,
        > + HostConsole
{
}

type R<T> = Result<Response<T>, Status>;

/// Every domain the VEEH `vhi` runs for itself (VHI ListDomains, read
/// page after page).
pub async fn domains(vhi: &HostVhi) -> Result<Vec<vhi::DomainInfo>, Status> {
    let call = |page_token| vhi.list_domains(Request::new(vhi::ListDomainsRequest { page_size: 0, page_token }));
    interfaces::pages::all(call, |r| (r.domains, r.next_page_token)).await
}

/// [`HostVhi`] over the network: a tonic client of the VEEH's endpoint,
/// each call stamped with this VEEM's epoch when it leads its site over
/// etcd (`interfaces::fencing`).
#[derive(Clone)]
pub struct GrpcHost(VhiServiceClient<InterceptedService<Channel, Stamp>>);

impl GrpcHost {
    /// A lazy channel to host `name` at `endpoint` (nothing is dialled
    /// yet): 2 s to connect, 600 s per call at most (a migration's
    /// stream). An `https://` endpoint needs `tls` (the host's certificate
    /// must be for `name`, mutual TLS); an `http://` one needs `insecure`.
    /// `epoch`: this VEEM's, carried by every call.
    pub fn new(name: &str, endpoint: &str, tls: Option<&interfaces::tls::TlsFiles>, insecure: bool, epoch: Option<i64>) -> Result<Self> {
        let mut ep = Endpoint::from_shared(endpoint.to_string())
            .map_err(|err| anyhow!("host {name}: endpoint {endpoint:?}: {err}"))?
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(600));
        match (endpoint.starts_with("https://"), tls) {
            (true, Some(tls)) => ep = ep.tls_config(tls.client(name)?).map_err(|e| anyhow!("host {name}: TLS: {e}"))?,
            (true, None) => anyhow::bail!("host {name}: endpoint {endpoint:?} is https and the configuration has no [vhi_tls]"),
            (false, _) if !insecure => {
                anyhow::bail!("host {name}: endpoint {endpoint:?} is plaintext: use https (with [vhi_tls]) or set insecure = true")
            }
            (false, _) => {}
        }
        Ok(Self(VhiServiceClient::with_interceptor(ep.connect_lazy(), Stamp(epoch))))
    }
}

#[tonic::async_trait]
impl vhi_service_server::VhiService for GrpcHost {
    async fn get_host_info(&self, r: Request<vhi::GetHostInfoRequest>) -> R<vhi::HostInfo> {
        self.0.clone().get_host_info(r).await
    }
    async fn prepare(&self, r: Request<vhi::PrepareRequest>) -> R<vhi::PrepareResponse> {
        self.0.clone().prepare(r).await
    }
    async fn create(&self, r: Request<vhi::CreateRequest>) -> R<vhi::VeeStatus> {
        self.0.clone().create(r).await
    }
    async fn start(&self, r: Request<vhi::StartRequest>) -> R<vhi::VeeStatus> {
        self.0.clone().start(r).await
    }
    async fn shutdown(&self, r: Request<vhi::ShutdownRequest>) -> R<vhi::ShutdownResponse> {
        self.0.clone().shutdown(r).await
    }
    async fn destroy(&self, r: Request<vhi::DestroyRequest>) -> R<vhi::VeeStatus> {
        self.0.clone().destroy(r).await
    }
    async fn suspend(&self, r: Request<vhi::SuspendRequest>) -> R<vhi::VeeStatus> {
        self.0.clone().suspend(r).await
    }
    async fn resume(&self, r: Request<vhi::ResumeRequest>) -> R<vhi::VeeStatus> {
        self.0.clone().resume(r).await
    }
    async fn checkpoint(&self, r: Request<vhi::CheckpointRequest>) -> R<vhi::CheckpointRecord> {
        self.0.clone().checkpoint(r).await
    }
    async fn restore(&self, r: Request<vhi::RestoreRequest>) -> R<vhi::VeeStatus> {
        self.0.clone().restore(r).await
    }
    async fn prepare_incoming(&self, r: Request<vhi::PrepareIncomingRequest>) -> R<vhi::IncomingTarget> {
        self.0.clone().prepare_incoming(r).await
    }
    async fn complete_incoming(&self, r: Request<vhi::CompleteIncomingRequest>) -> R<vhi::VeeStatus> {
        self.0.clone().complete_incoming(r).await
    }
    async fn abort_incoming(&self, r: Request<vhi::AbortIncomingRequest>) -> R<vhi::VeeStatus> {
        self.0.clone().abort_incoming(r).await
    }
    type MigrateOutStream = BoxStream<vhi::MigrationProgress>;
    async fn migrate_out(&self, r: Request<vhi::MigrateOutRequest>) -> R<Self::MigrateOutStream> {
        let stream = self.0.clone().migrate_out(r).await?.into_inner();
        Ok(Response::new(Box::pin(stream)))
    }
    async fn stats(&self, r: Request<vhi::StatsRequest>) -> R<vhi::VeeStats> {
        self.0.clone().stats(r).await
    }
    async fn list_stats(&self, r: Request<vhi::ListStatsRequest>) -> R<vhi::ListStatsResponse> {
        self.0.clone().list_stats(r).await
    }
    async fn list_domains(&self, r: Request<vhi::ListDomainsRequest>) -> R<vhi::ListDomainsResponse> {
        self.0.clone().list_domains(r).await
    }
    async fn console(&self, r: Request<vhi::ConsoleRequest>) -> R<vhi::ConsoleResponse> {
        self.0.clone().console(r).await
    }
    async fn update_network(&self, r: Request<vhi::UpdateNetworkRequest>) -> R<vhi::UpdateNetworkResponse> {
        self.0.clone().update_network(r).await
    }
    async fn probe(&self, r: Request<vhi::ProbeRequest>) -> R<vhi::ProbeResponse> {
        self.0.clone().probe(r).await
    }
    async fn resize(&self, r: Request<vhi::ResizeRequest>) -> R<vhi::VeeStatus> {
        self.0.clone().resize(r).await
    }
    type AttachConsoleStream = BoxStream<vhi::AttachConsoleResponse>;
    async fn attach_console(&self, _: Request<tonic::Streaming<vhi::AttachConsoleRequest>>) -> R<Self::AttachConsoleStream> {
        Err(Status::unimplemented("a VEEM attaches consoles as a client (HostConsole)"))
    }
    type WatchEventsStream = BoxStream<vhi::HostEvent>;
    async fn watch_events(&self, r: Request<vhi::WatchEventsRequest>) -> R<Self::WatchEventsStream> {
        let stream = self.0.clone().watch_events(r).await?.into_inner();
        Ok(Response::new(Box::pin(stream)))
    }
}

/// A peer site as the workflows see it: the calls one VEEM makes to
/// another under their framework agreement (DESIGN.md §7), in domain
/// values ([`crate::domain::peer`]; the VEE's spec, a checkpoint record
/// and an incoming target are the VHI's, handed on as they are). Errors
/// are the peer's status (or Unavailable when it does not answer).
#[tonic::async_trait]
pub trait Peer: Send + Sync {
    /// Admits a VEE arriving from this site (a migration, a remote
    /// placement or a restore) and returns where to send it.
    async fn prepare_incoming(&self, v: IncomingVee) -> Result<vhi::IncomingTarget, Status>;
    /// The VEE arrived: the peer runs it from now on.
    async fn complete_incoming(&self, vee_id: &str) -> Result<RemoteVee, Status>;
    /// Forget an incoming VEE (or fence a copy the peer still runs).
    async fn abort_incoming(&self, vee_id: &str) -> Result<(), Status>;
    /// The peer runs the VEE for us and gives it back.
    async fn withdraw(&self, vee_id: &str) -> Result<(), Status>;
    /// The peer live-migrates our VEE `vee_id` to `target`; returns when
    /// done or failed.
    async fn send_vee(&self, vee_id: &str, target: vhi::IncomingTarget) -> Result<MigrationOutcome, Status>;
    /// Usage records of VEEs this site (`from_site`) ran for the peer.
    async fn push_usage(&self, from_site: &str, records: &[UsageRec]) -> Result<UsageReceipt, Status>;
    async fn get_vee(&self, vee_id: &str) -> Result<RemoteVee, Status>;
    /// An action on our VEE that runs there (`checkpoint_id`: a restore's
    /// checkpoint, empty for the latest).
    async fn vee_action(&self, vee_id: &str, action: Action, checkpoint_id: &str) -> Result<RemoteVee, Status>;
    /// A network of ours that runs VEEs at the peer has a new member table.
    async fn update_network(&self, u: vhi::NetworkUpdate) -> Result<(), Status>;
    /// Hold spare capacity for our full-guarantee VEE
    /// (`crate::steps::spares`); returns when the hold lapses unless
    /// confirmed (Unix ms).
    async fn reserve_spare(&self, r: &SpareRequest) -> Result<i64, Status>;
    /// Keep the spare held for our VEE (the admission here committed).
    async fn confirm_spare(&self, vee_id: &str) -> Result<(), Status>;
    /// Drop the spare held for our VEE.
    async fn release_spare(&self, vee_id: &str) -> Result<(), Status>;
    /// The console of our VEE that runs there (as [`HostConsole`]; the
    /// peer relays it from its host, reattaching it when the VEE moves
    /// there).
    async fn attach_console(&self, vee_id: &str, force: bool, input: ConsoleInput) -> Result<ConsoleStream, Status>;
}

/// What a VMI client runs over: a tonic channel to a peer (with the
/// agreement's bearer token), or, in the simulation, another VEEM's VMI
/// server in the same process.
pub trait VmiTransport:
    GrpcService<
        tonic::body::Body,
        Error: Into<StdError>,
        Future: Send,
        ResponseBody: Body<Data = Bytes, Error: Into<StdError> + Send> + Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<T> VmiTransport for T where
    T: GrpcService<
            tonic::body::Body,
            Error: Into<StdError>,
            Future: Send,
            ResponseBody: Body<Data = Bytes, Error: Into<StdError> + Send> + Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// [`Peer`] as VMI calls: a tonic VMI client over transport `T` (by
/// default the network, with the bearer token this site presents under
/// the framework agreement); the messages are made and read by
/// `wire::peer`.
#[derive(Clone)]
pub struct GrpcPeer<T = PeerChannel>(vmi::vmi_service_client::VmiServiceClient<T>);

/// How often a peer's connection is pinged, and how long a ping may go
/// unanswered before the connection is closed.
pub const PEER_KEEP_ALIVE: Duration = Duration::from_secs(2);

impl GrpcPeer {
    /// A lazy channel to the peer of `entry` at `endpoint` (one of the
    /// entry's; 3 s to connect, TLS included; [`PEER_KEEP_ALIVE`]). An `https://` endpoint needs this site's
    /// identity `tls` (shown to the peer: mutual TLS) and the peer's CA
    /// (`ca` of the entry), and the peer's certificate must be for its
    /// site ID; an `http://` one needs `insecure`. `epoch`: this VEEM's,
    /// carried by every call.
    pub fn new(
        entry: &PeerEntry,
        endpoint: &str,
        tls: Option<&interfaces::tls::SiteIdentity>,
        insecure: bool,
        epoch: Option<i64>,
    ) -> Result<Self> {
        let site = &entry.site_id;
        // A frozen peer VEEM (SIGSTOP, a paused VM: its kernel still
        // takes connections) is given up within seconds: the handshakes
        // (TCP and TLS) within the connect timeout, an open connection
        // whose pings go unanswered by the keep-alive (its calls then fail
        // as a connection lost, and `Following` goes to the next endpoint).
        let mut ep = Endpoint::from_shared(endpoint.to_string())
            .map_err(|e| anyhow!("peer {site}: endpoint {endpoint:?}: {e}"))?
            .connect_timeout(Duration::from_secs(3))
            .http2_keep_alive_interval(PEER_KEEP_ALIVE)
            .keep_alive_timeout(PEER_KEEP_ALIVE)
            .keep_alive_while_idle(true);
        match (endpoint.starts_with("https://"), tls, &entry.ca) {
            (true, Some(tls), Some(ca)) => {
                ep = ep
                    .tls_config(tls.client_to(site, ca)?)
                    .map_err(|e| anyhow!("peer {site}: TLS: {e}"))?
            }
            (true, None, _) => anyhow::bail!("peer {site}: endpoint {endpoint:?} is https and the configuration has no [tls]"),
            (true, _, None) => anyhow::bail!("peer {site}: endpoint {endpoint:?} is https and the peer has no `ca`"),
            (false, ..) if !insecure => anyhow::bail!(
                "peer {site}: endpoint {endpoint:?} is plaintext: use https (with [tls] and the peer's `ca`) or set insecure = true"
            ),
            (false, ..) => {}
        }
        Ok(Self::over(InterceptedService::new(
            ep.connect_lazy(),
            Bearer::new(&entry.token)?.with_epoch(epoch),
        )))
    }
}

impl<T: VmiTransport> GrpcPeer<T> {
    /// A VMI client over `transport`.
    pub fn over(transport: T) -> Self {
        Self(vmi::vmi_service_client::VmiServiceClient::new(transport))
    }

    fn client(&self) -> vmi::vmi_service_client::VmiServiceClient<T> {
        self.0.clone()
    }
}

#[tonic::async_trait]
impl<T: VmiTransport> Peer for GrpcPeer<T> {
    async fn prepare_incoming(&self, v: IncomingVee) -> Result<vhi::IncomingTarget, Status> {
        Ok(self.client().prepare_incoming(wire::prepare_incoming(v)).await?.into_inner())
    }
    async fn complete_incoming(&self, vee_id: &str) -> Result<RemoteVee, Status> {
        let r = vmi::CompleteIncomingRequest { vee_id: vee_id.into() };
        Ok(wire::remote_vee(self.client().complete_incoming(r).await?.into_inner()))
    }
    async fn abort_incoming(&self, vee_id: &str) -> Result<(), Status> {
        let r = vmi::AbortIncomingRequest { vee_id: vee_id.into() };
        self.client().abort_incoming(r).await.map(|_| ())
    }
    async fn withdraw(&self, vee_id: &str) -> Result<(), Status> {
        let r = vmi::WithdrawRequest { vee_id: vee_id.into() };
        self.client().withdraw(r).await.map(|_| ())
    }
    async fn send_vee(&self, vee_id: &str, target: vhi::IncomingTarget) -> Result<MigrationOutcome, Status> {
        let r = vmi::SendVeeRequest {
            vee_id: vee_id.into(),
            target: Some(target),
        };
        Ok(wire::migration_outcome(self.client().send_vee(r).await?.into_inner()))
    }
    async fn push_usage(&self, from_site: &str, records: &[UsageRec]) -> Result<UsageReceipt, Status> {
        let r = vmi::PushUsageRequest {
            from_site: from_site.into(),
            records: records.iter().map(wire::usage_record).collect(),
        };
        Ok(wire::receipt_of(self.client().push_usage(r).await?.into_inner()))
    }
    async fn get_vee(&self, vee_id: &str) -> Result<RemoteVee, Status> {
        let r = vmi::GetVeeRequest { vee_id: vee_id.into() };
        Ok(wire::remote_vee(self.client().get_vee(r).await?.into_inner()))
    }
    async fn vee_action(&self, vee_id: &str, action: Action, checkpoint_id: &str) -> Result<RemoteVee, Status> {
        let r = vmi::VeeActionRequest {
            vee_id: vee_id.into(),
            action: vmi::Action::from(action) as i32,
            checkpoint_id: checkpoint_id.into(),
        };
        Ok(wire::remote_vee(self.client().vee_action(r).await?.into_inner()))
    }
    async fn update_network(&self, u: vhi::NetworkUpdate) -> Result<(), Status> {
        let r = vmi::UpdateNetworkRequest { network: Some(u) };
        self.client().update_network(r).await.map(|_| ())
    }
    async fn reserve_spare(&self, s: &SpareRequest) -> Result<i64, Status> {
        let held = self.client().reserve_spare(wire::reserve_spare(s)).await?.into_inner();
        Ok(wire::spare_confirm_by(&held))
    }
    async fn confirm_spare(&self, vee_id: &str) -> Result<(), Status> {
        let r = vmi::ConfirmSpareRequest { vee_id: vee_id.into() };
        self.client().confirm_spare(r).await.map(|_| ())
    }
    async fn release_spare(&self, vee_id: &str) -> Result<(), Status> {
        let r = vmi::ReleaseSpareRequest { vee_id: vee_id.into() };
        self.client().release_spare(r).await.map(|_| ())
    }
    async fn attach_console(&self, vee_id: &str, force: bool, input: ConsoleInput) -> Result<ConsoleStream, Status> {
        use futures::StreamExt;
        let first = vmi::AttachConsoleRequest {
            vee_id: vee_id.into(),
            force,
            data: vec![],
        };
        let requests = console_requests(first, input, |data| vmi::AttachConsoleRequest {
            data,
            ..Default::default()
        });
        let out = self.client().attach_console(requests).await?.into_inner();
        Ok(Box::pin(out.map(|r| {
            r.map(|m| match m.notice.is_empty() {
                true => ConsoleOutput::Data(m.data),
                false => ConsoleOutput::Notice(m.notice),
            })
        })))
    }
}

/// Connects to peer sites: the network ([`GrpcPeers`]) or, in tests, other
/// VEEMs in the same process.
pub trait PeerDirectory: Send + Sync {
    /// The peer of framework agreement `entry`.
    fn connect(&self, entry: &PeerEntry) -> Result<Arc<dyn Peer>>;
}

/// [`PeerDirectory`] over the network ([`GrpcPeer`]), with this site's
/// VMI identity (`[tls]`) and whether plaintext is allowed.
pub struct GrpcPeers {
    tls: Option<interfaces::tls::SiteIdentity>,
    insecure: bool,
    epoch: Option<i64>,
}

impl PeerDirectory for GrpcPeers {
    /// The peer of `entry`: at its one endpoint, or, for a peer site whose
    /// VEEMs are several (a leader and standbys over etcd), at whichever
    /// of its endpoints leads ([`following::Following`]).
    fn connect(&self, entry: &PeerEntry) -> Result<Arc<dyn Peer>> {
        let endpoints = entry.endpoints();
        let mut peers = Vec::new();
        for e in &endpoints {
            peers.push((e.clone(), GrpcPeer::new(entry, e, self.tls.as_ref(), self.insecure, self.epoch)?));
        }
        match peers.len() {
            1 => Ok(Arc::new(peers.remove(0).1)),
            _ => Ok(Arc::new(following::Following::new(peers))),
        }
    }
}

/// The image repository as the workflows see it.
#[tonic::async_trait]
pub trait ImageRepository: Send + Sync {
    /// Whether service provider `provider` may read blob `id` (its own,
    /// shared with it, or public); if so, this site may read it from then
    /// on, to pull it on its hosts. False for a blob the repository lacks
    /// or keeps from the provider. Errors when the repository cannot say
    /// (unreachable, refused).
    async fn grant_for(&self, id: &BlobId, provider: &str) -> Result<bool>;
    /// Lets peer site `site` read blob `id` (an image or checkpoint of a
    /// VEE handed to it, or a checkpoint taken for it). Errors: the
    /// repository is unreachable, or this site may not read the blob.
    async fn share(&self, id: &BlobId, site: &str) -> Result<()>;
    /// Keeps blob `id` from garbage collection under the name `pin`.
    async fn pin(&self, id: &BlobId, pin: &str) -> Result<()>;
    /// Lets go of pin `pin` of blob `id` (idempotent): the repository may
    /// collect the blob once nothing else needs it.
    async fn unpin(&self, id: &BlobId, pin: &str) -> Result<()>;
    /// Has blob `id` pushed to peer site `site`'s own repository, readable
    /// by that site there (one repository per site, issue 39): a checkpoint
    /// the peer may restore while this site's repository is down. Errors:
    /// the repository is unreachable, has no such peer, or the peer refuses.
    async fn replicate(&self, id: &BlobId, site: &str) -> Result<()>;
    /// Removes checkpoint `checkpoint_id`'s OCI artifact from site `site`'s
    /// `SITE/checkpoints` repository and unlinks its blobs there (those
    /// its manifest names and `blobs`; idempotent), before the VEEM unpins
    /// them; its subject in `SITE/images` too when no checkpoint refers to
    /// it any more. Errors: the repository is unreachable or refuses.
    async fn forget_checkpoint(&self, site: &str, checkpoint_id: &str, blobs: &[BlobId]) -> Result<()>;
}

#[tonic::async_trait]
impl ImageRepository for RepoClient {
    async fn grant_for(&self, id: &BlobId, provider: &str) -> Result<bool> {
        Ok(RepoClient::grant_for(self, id, provider).await?)
    }
    async fn share(&self, id: &BlobId, site: &str) -> Result<()> {
        Ok(RepoClient::share(self, id, site).await?)
    }
    async fn pin(&self, id: &BlobId, pin: &str) -> Result<()> {
        Ok(RepoClient::pin(self, id, pin).await?)
    }
    async fn unpin(&self, id: &BlobId, pin: &str) -> Result<()> {
        Ok(RepoClient::unpin(self, id, pin).await?)
    }
    async fn replicate(&self, id: &BlobId, site: &str) -> Result<()> {
        Ok(RepoClient::replicate(self, id, site).await?)
    }
    async fn forget_checkpoint(&self, site: &str, checkpoint_id: &str, blobs: &[BlobId]) -> Result<()> {
        Ok(self
            .drop_checkpoint_artifact(&format!("{site}/checkpoints"), &format!("{site}/images"), checkpoint_id, blobs)
            .await?)
    }
}

/// Everything a VEEM talks to.
pub struct Ports {
    /// The site's VEEHs by name.
    pub hosts: HashMap<String, Arc<HostVhi>>,
    pub peers: Arc<dyn PeerDirectory>,
    pub repo: Arc<dyn ImageRepository>,
    /// The OCI registries the site trusts (`[[registries]]`): registry
    /// images resolved at admission.
    pub registries: Arc<interfaces::registry::Registries>,
    pub clock: Arc<dyn Clock>,
    /// What the VEEM counts as it works (`crate::metrics`): one per
    /// process, kept across leadership terms.
    pub metrics: Arc<crate::metrics::VeemMetrics>,
}

impl Ports {
    /// The network adapters for configuration `cfg` (lazy: nothing is
    /// dialled yet), their calls to hosts stamped with `epoch` (a leader's
    /// over etcd; `None` on the embedded store). Errors: a malformed
    /// endpoint or token.
    pub fn connect(cfg: &VeemConfig, epoch: Option<i64>, metrics: Arc<crate::metrics::VeemMetrics>) -> Result<Self> {
        let registries = Arc::new(interfaces::registry::Registries::new(&cfg.registries)?);
        let mut hosts: HashMap<String, Arc<HostVhi>> = HashMap::new();
        for h in &cfg.hosts {
            hosts.insert(
                h.name.clone(),
                Arc::new(GrpcHost::new(&h.name, &h.endpoint, cfg.vhi_tls.as_ref(), cfg.insecure, epoch)?),
            );
        }
        Ok(Self {
            hosts,
            peers: Arc::new(GrpcPeers {
                tls: cfg.tls.clone(),
                insecure: cfg.insecure,
                epoch,
            }),
            repo: match interfaces::registry::SiteRegistry::parse(&cfg.image_repo, &cfg.registries) {
                Some(site) => Arc::new(registry_repository::RegistryRepository {
                    site: site.map_err(|why| anyhow!("field `image_repo`: {why}"))?,
                    registries: registries.clone(),
                }),
                None => Arc::new(RepoClient::with_ca(
                    &cfg.image_repo,
                    cfg.image_repo_token.clone(),
                    cfg.image_repo_ca.as_deref(),
                )?),
            },
            registries,
            clock: Arc::new(SystemClock),
            metrics,
        })
    }
}
