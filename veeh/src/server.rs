//! The VHI gRPC server (tonic) over a [`Host`].

// Handlers return tonic's `Status` as their error, as tonic's service
// traits require; it is large, and that is tonic's choice to make.
#![allow(clippy::result_large_err)]

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use interfaces::fencing::Gate;
use interfaces::vhi::vhi_service_server::{VhiService as Vhi, VhiServiceServer};
use interfaces::vhi::*;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{BroadcastStream, ReceiverStream};
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status};

use crate::error::status;
use crate::host::Host;

/// The VHI service.
pub struct VhiService {
    host: Arc<Host>,
}

type R<T> = Result<Response<T>, Status>;
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn ok<T>(r: anyhow::Result<T>) -> R<T> {
    r.map(Response::new).map_err(status)
}

/// Runs `op` on `host` to its end whatever the caller does: in a task of
/// its own, so that a VEEM that dies or is cut off mid-call (kill -9, a
/// takeover, a dropped connection, which drop the handler's future) does
/// not leave a domain paused mid-snapshot, a checkpoint half pushed or a
/// temporary file behind. The next leader finds the operation finished
/// (or failed cleanly) on the host. Errors: the operation's; a task that
/// panicked is INTERNAL.
async fn detached<T, F, Fut>(host: &Arc<Host>, op: F) -> R<T>
where
    T: Send + 'static,
    F: FnOnce(Arc<Host>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
{
    match tokio::spawn(op(host.clone())).await {
        Ok(r) => ok(r),
        Err(e) => Err(Status::internal(format!("the operation's task ended: {e}"))),
    }
}

/// Errors when a console request's `data` is over
/// [`crate::console::MAX_INPUT`], naming the field.
fn check_console_input(r: &AttachConsoleRequest) -> Result<(), Status> {
    if r.data.len() > crate::console::MAX_INPUT {
        return Err(Status::invalid_argument(format!(
            "field `data`: {} bytes, more than the {} one request may carry",
            r.data.len(),
            crate::console::MAX_INPUT
        )));
    }
    Ok(())
}

/// The VEE of a Prepare, Create or PrepareIncoming request.
fn spec(spec: Option<VeeSpec>) -> Result<VeeSpec, Status> {
    spec.ok_or_else(|| Status::invalid_argument("field `spec` is required"))
}

impl VhiService {
    pub fn new(host: Arc<Host>) -> VhiServiceServer<Self> {
        VhiServiceServer::new(Self { host })
    }

    /// The VHI service behind `gate`: a call from a VEEM of an epoch
    /// older than the newest this host has seen is refused before any
    /// handler (`interfaces::fencing`).
    pub fn fenced(host: Arc<Host>, gate: Gate) -> InterceptedService<VhiServiceServer<Self>, Gate> {
        VhiServiceServer::with_interceptor(Self { host }, gate)
    }
}

#[tonic::async_trait]
impl Vhi for VhiService {
    async fn get_host_info(&self, _: Request<GetHostInfoRequest>) -> R<HostInfo> {
        ok(self.host.host_info().await)
    }
    async fn prepare(&self, r: Request<PrepareRequest>) -> R<PrepareResponse> {
        ok(self.host.prepare(&spec(r.into_inner().spec)?).await)
    }
    // Every call that changes a domain runs to its end even when its
    // caller goes away (`detached`).
    async fn create(&self, r: Request<CreateRequest>) -> R<VeeStatus> {
        let spec = spec(r.into_inner().spec)?;
        detached(&self.host, |h| async move { h.create(&spec).await }).await
    }
    async fn start(&self, r: Request<StartRequest>) -> R<VeeStatus> {
        let id = r.into_inner().vee_id;
        detached(&self.host, |h| async move { h.start(&id).await }).await
    }
    async fn shutdown(&self, r: Request<ShutdownRequest>) -> R<ShutdownResponse> {
        let r = r.into_inner();
        let timeout_s = interfaces::time::s_of_duration(&r.timeout);
        detached(&self.host, |h| async move { h.shutdown(&r.vee_id, timeout_s).await }).await
    }
    async fn destroy(&self, r: Request<DestroyRequest>) -> R<VeeStatus> {
        let r = r.into_inner();
        detached(&self.host, |h| async move { h.destroy(&r.vee_id, r.remove).await }).await
    }
    async fn suspend(&self, r: Request<SuspendRequest>) -> R<VeeStatus> {
        let id = r.into_inner().vee_id;
        detached(&self.host, |h| async move { h.suspend(&id).await }).await
    }
    async fn resume(&self, r: Request<ResumeRequest>) -> R<VeeStatus> {
        let id = r.into_inner().vee_id;
        detached(&self.host, |h| async move { h.resume(&id).await }).await
    }
    async fn checkpoint(&self, r: Request<CheckpointRequest>) -> R<CheckpointRecord> {
        let r = r.into_inner();
        detached(&self.host, |h| async move { h.checkpoint(&r.vee_id, r.stop_after).await }).await
    }
    async fn restore(&self, r: Request<RestoreRequest>) -> R<VeeStatus> {
        let r = r.into_inner();
        detached(&self.host, |h| async move { h.restore(r).await }).await
    }
    async fn prepare_incoming(&self, r: Request<PrepareIncomingRequest>) -> R<IncomingTarget> {
        let spec = spec(r.into_inner().spec)?;
        detached(&self.host, |h| async move { h.prepare_incoming(&spec).await }).await
    }
    async fn complete_incoming(&self, r: Request<CompleteIncomingRequest>) -> R<VeeStatus> {
        let id = r.into_inner().vee_id;
        detached(&self.host, |h| async move { h.complete_incoming(&id).await }).await
    }
    async fn abort_incoming(&self, r: Request<AbortIncomingRequest>) -> R<VeeStatus> {
        let id = r.into_inner().vee_id;
        detached(&self.host, |h| async move { h.abort_incoming(&id).await }).await
    }

    type MigrateOutStream = BoxStream<MigrationProgress>;
    async fn migrate_out(&self, r: Request<MigrateOutRequest>) -> R<Self::MigrateOutStream> {
        let r = r.into_inner();
        let target = r.target.ok_or_else(|| Status::invalid_argument("field `target` is required"))?;
        self.host.vees.get(&r.vee_id).map_err(status)?;
        let (tx, rx) = mpsc::channel(16);
        let host = self.host.clone();
        tokio::spawn(async move {
            // The outcome travels in the stream's last message.
            let _ = host
                .migrate_out(
                    &r.vee_id,
                    target,
                    (interfaces::time::ms_of_duration(&r.max_downtime), r.bandwidth_mib_s),
                    tx,
                )
                .await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx).map(Ok))))
    }

    async fn stats(&self, r: Request<StatsRequest>) -> R<VeeStats> {
        ok(self.host.stats(&r.get_ref().vee_id).await)
    }
    async fn list_stats(&self, r: Request<ListStatsRequest>) -> R<ListStatsResponse> {
        let stats = self.host.list_stats().await.map_err(status)?;
        let r = r.get_ref();
        let (stats, next_page_token) = interfaces::pages::page(stats, |s| s.vee_id.clone(), r.page_size, &r.page_token)?;
        Ok(Response::new(ListStatsResponse { stats, next_page_token }))
    }
    async fn list_domains(&self, r: Request<ListDomainsRequest>) -> R<ListDomainsResponse> {
        let domains = self.host.list_domains().await.map_err(status)?;
        let r = r.get_ref();
        let (domains, next_page_token) = interfaces::pages::page(domains, |d| d.domain.clone(), r.page_size, &r.page_token)?;
        Ok(Response::new(ListDomainsResponse { domains, next_page_token }))
    }
    async fn console(&self, r: Request<ConsoleRequest>) -> R<ConsoleResponse> {
        let r = r.into_inner();
        ok(self.host.console(&r.vee_id, r.tail_bytes).map(|text| ConsoleResponse { text }))
    }

    async fn update_network(&self, r: Request<UpdateNetworkRequest>) -> R<UpdateNetworkResponse> {
        let network = r
            .into_inner()
            .network
            .ok_or_else(|| Status::invalid_argument("field `network` is required"))?;
        ok(crate::network::update_network(self.host.cfg.vtep(), &network)
            .await
            .map(|_| UpdateNetworkResponse {}))
    }

    async fn resize(&self, r: Request<ResizeRequest>) -> R<VeeStatus> {
        let r = r.into_inner();
        detached(&self.host, |h| async move { h.resize(&r.vee_id, r.vcpus, r.memory_mib).await }).await
    }

    async fn probe(&self, r: Request<ProbeRequest>) -> R<ProbeResponse> {
        let r = r.into_inner();
        let rec = self.host.vees.get(&r.vee_id).map_err(status)?;
        let target = crate::network::probe::target(&rec.nics, r.port).map_err(|e| status(e.into()))?;
        let timeout_s = match interfaces::time::s_of_duration(&r.timeout) {
            0 => crate::network::probe::DEFAULT_TIMEOUT_S,
            s => s.min(crate::network::probe::MAX_TIMEOUT_S),
        };
        let answer = crate::network::probe::probe(target, std::time::Duration::from_secs(timeout_s)).await;
        Ok(Response::new(answer))
    }

    type AttachConsoleStream = BoxStream<AttachConsoleResponse>;
    async fn attach_console(&self, r: Request<tonic::Streaming<AttachConsoleRequest>>) -> R<Self::AttachConsoleStream> {
        let mut input = r.into_inner();
        let first = input
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("field `vee_id`: the first request names the VEE"))?;
        check_console_input(&first)?;
        self.host.vees.get(&first.vee_id).map_err(status)?;
        let (uri, owner) = (self.host.cfg.libvirt_uri.clone(), self.host.cfg.host.clone());
        let vee = first.vee_id.clone();
        let session = tokio::task::spawn_blocking(move || crate::console::attach(&uri, &owner, &vee, first.force))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(status)?;
        let typed = session.input;
        if !first.data.is_empty() {
            let _ = typed.send(first.data).await;
        }
        // What the caller types, until it ends its side (or sends too
        // much at once, which ends the session).
        tokio::spawn(async move {
            while let Ok(Some(m)) = input.message().await {
                if check_console_input(&m).is_err() || typed.send(m.data).await.is_err() {
                    break;
                }
            }
        });
        let output = ReceiverStream::new(session.output).map(|data| Ok(AttachConsoleResponse { data }));
        Ok(Response::new(Box::pin(output)))
    }

    type WatchEventsStream = BoxStream<HostEvent>;
    async fn watch_events(&self, _: Request<WatchEventsRequest>) -> R<Self::WatchEventsStream> {
        let rx = self.host.events.subscribe();
        Ok(Response::new(Box::pin(BroadcastStream::new(rx).filter_map(|e| e.ok().map(Ok)))))
    }
}
