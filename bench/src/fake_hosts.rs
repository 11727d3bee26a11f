//! Fake VEEHs for the `veem serve` measurement with hosts configured
//! (`veem_rss`): one tonic server in this process listening on one
//! loopback port per host, answering the VHI calls a VEEM makes while idle
//! as each host would: GetHostInfo (its name, site, capacity, profile and
//! an unchanging domains generation, for the heartbeats), ListDomains (the VEEs the state places on it, for
//! start-up reconciliation and the domain watch) and Stats and ListStats
//! (steadily growing counters, for metering). Every other call is UNIMPLEMENTED (an
//! idle VEEM makes none). Which host a call is for is told by the local
//! port its connection came in on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Result;
use futures::StreamExt;
use interfaces::vhi::vhi_service_server::{VhiService, VhiServiceServer};
use interfaces::vhi::*;
use tonic::{Request, Response, Status};

type R<T> = Result<Response<T>, Status>;
type BoxStream<T> = std::pin::Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

/// Reads the calls the fake hosts answered so far: GetHostInfo,
/// ListDomains, Stats, ListStats.
pub type Calls = Box<dyn Fn() -> [u64; 4] + Send + Sync>;

/// One fake host: its name and the VEEs it runs (IDs, sorted).
pub struct FakeHost {
    pub name: String,
    pub vees: Vec<String>,
}

/// Every fake host, by the local port its listener is on.
struct Hosts {
    site: String,
    /// Each host's capacity: vCPUs, MiB, GiB.
    capacity: (u32, u64, u64),
    by_port: HashMap<u16, FakeHost>,
    /// Calls answered, by kind (for the bench's log).
    calls: [AtomicU64; 4],
    /// Answer ListStats UNIMPLEMENTED, as a VEEH before it
    /// (`BENCH_FAKE_NO_LIST_STATS`): the VEEM asks Stats per VEE.
    no_list_stats: bool,
}

#[derive(Clone)]
struct Fake(Arc<Hosts>);

impl Fake {
    fn host<T>(&self, r: &Request<T>) -> Result<&FakeHost, Status> {
        let port = r.local_addr().map(|a| a.port()).unwrap_or(0);
        self.0
            .by_port
            .get(&port)
            .ok_or_else(|| Status::not_found(format!("no fake host on port {port}")))
    }
}

/// Starts the fake hosts of site `site`, each of `capacity` (vCPUs, MiB,
/// GiB), on the runtime `rt`; returns each host's endpoint
/// (`http://127.0.0.1:PORT`) in the order given, and a reader of the
/// calls answered so far (GetHostInfo, ListDomains, Stats, ListStats).
pub fn start(
    rt: &tokio::runtime::Runtime,
    site: &str,
    capacity: (u32, u64, u64),
    hosts: Vec<FakeHost>,
) -> Result<(Vec<(String, String)>, Calls)> {
    let _g = rt.enter();
    let mut listeners = Vec::new();
    let mut by_port = HashMap::new();
    let mut endpoints = Vec::new();
    for h in hosts {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.set_nonblocking(true)?;
        let port = l.local_addr()?.port();
        endpoints.push((h.name.clone(), format!("http://127.0.0.1:{port}")));
        by_port.insert(port, h);
        listeners.push(tokio::net::TcpListener::from_std(l)?);
    }
    let fake = Fake(Arc::new(Hosts {
        site: site.to_string(),
        capacity,
        by_port,
        calls: Default::default(),
        no_list_stats: std::env::var_os("BENCH_FAKE_NO_LIST_STATS").is_some(),
    }));
    let incoming = futures::stream::select_all(listeners.into_iter().map(|l| {
        futures::stream::unfold(l, |l| async move {
            let s = l.accept().await.map(|(s, _)| {
                let _ = s.set_nodelay(true);
                s
            });
            Some((s, l))
        })
        .boxed()
    }));
    let calls = fake.0.clone();
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(VhiServiceServer::new(fake).max_decoding_message_size(usize::MAX))
            .serve_with_incoming(incoming),
    );
    Ok((
        endpoints,
        Box::new(move || std::array::from_fn(|i| calls.calls[i].load(Ordering::Relaxed))),
    ))
}

/// A VEE's counters now: a steady 10 % of one vCPU since the epoch, 512
/// MiB in use.
fn stats_now(vee_id: String) -> VeeStats {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    VeeStats {
        vee_id,
        cpu_seconds: now_ms as f64 / 10_000.0,
        memory_mib: 512,
        disk_read_bytes: (now_ms as u64) * 10,
        disk_write_bytes: (now_ms as u64) * 5,
        net_rx_bytes: (now_ms as u64) * 20,
        net_tx_bytes: (now_ms as u64) * 20,
        time: interfaces::time::timestamp_ms(now_ms),
        kpis: Vec::new(),
    }
}

fn none<T>(what: &str) -> R<T> {
    Err(Status::unimplemented(format!("fake VEEH: {what}")))
}

#[tonic::async_trait]
impl VhiService for Fake {
    async fn get_host_info(&self, r: Request<GetHostInfoRequest>) -> R<HostInfo> {
        let h = self.host(&r)?;
        self.0.calls[0].fetch_add(1, Ordering::Relaxed);
        let (vcpus, memory_mib, disk_gib) = self.0.capacity;
        Ok(Response::new(HostInfo {
            host: h.name.clone(),
            site_id: self.0.site.clone(),
            vcpus,
            memory_mib,
            disk_gib,
            profile: Some(CompatibilityProfile {
                arch: "x86_64".into(),
                machine: "pc-q35-8.2".into(),
                qemu_version: "8.2.2".into(),
                libvirt_version: "10.0.0".into(),
                accel: "kvm".into(),
                cpu_model: "host-model".into(),
                save_formats: vec![interfaces::vhi::SaveFormat::Sequential as i32],
            }),
            vtep: "127.0.0.1".into(),
            cpu_load: 0.25,
            // Its VEEs never change: one generation throughout.
            domains_generation: 1,
            ..Default::default()
        }))
    }
    async fn list_domains(&self, r: Request<ListDomainsRequest>) -> R<ListDomainsResponse> {
        let h = self.host(&r)?;
        self.0.calls[1].fetch_add(1, Ordering::Relaxed);
        let domains = h
            .vees
            .iter()
            .map(|id| DomainInfo {
                vee_id: id.clone(),
                domain: format!("vee-{id}"),
                state: VeeState::Running as i32,
                migrating_out: false,
            })
            .collect();
        let q = r.get_ref();
        let (domains, next_page_token) = interfaces::pages::page(domains, |d| d.domain.clone(), q.page_size, &q.page_token)?;
        Ok(Response::new(ListDomainsResponse { domains, next_page_token }))
    }
    async fn stats(&self, r: Request<StatsRequest>) -> R<VeeStats> {
        let _ = self.host(&r)?;
        self.0.calls[2].fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(stats_now(r.into_inner().vee_id)))
    }
    async fn list_stats(&self, r: Request<ListStatsRequest>) -> R<ListStatsResponse> {
        let h = self.host(&r)?;
        if self.0.no_list_stats {
            return none("ListStats");
        }
        self.0.calls[3].fetch_add(1, Ordering::Relaxed);
        let stats = h.vees.iter().map(|id| stats_now(id.clone())).collect();
        let q = r.get_ref();
        let (stats, next_page_token) = interfaces::pages::page(stats, |s: &VeeStats| s.vee_id.clone(), q.page_size, &q.page_token)?;
        Ok(Response::new(ListStatsResponse { stats, next_page_token }))
    }
    async fn prepare(&self, _: Request<PrepareRequest>) -> R<PrepareResponse> {
        none("Prepare")
    }
    async fn create(&self, _: Request<CreateRequest>) -> R<VeeStatus> {
        none("Create")
    }
    async fn start(&self, _: Request<StartRequest>) -> R<VeeStatus> {
        none("Start")
    }
    async fn shutdown(&self, _: Request<ShutdownRequest>) -> R<ShutdownResponse> {
        none("Shutdown")
    }
    async fn destroy(&self, _: Request<DestroyRequest>) -> R<VeeStatus> {
        none("Destroy")
    }
    async fn suspend(&self, _: Request<SuspendRequest>) -> R<VeeStatus> {
        none("Suspend")
    }
    async fn resume(&self, _: Request<ResumeRequest>) -> R<VeeStatus> {
        none("Resume")
    }
    async fn checkpoint(&self, _: Request<CheckpointRequest>) -> R<CheckpointRecord> {
        none("Checkpoint")
    }
    async fn restore(&self, _: Request<RestoreRequest>) -> R<VeeStatus> {
        none("Restore")
    }
    async fn prepare_incoming(&self, _: Request<PrepareIncomingRequest>) -> R<IncomingTarget> {
        none("PrepareIncoming")
    }
    async fn complete_incoming(&self, _: Request<CompleteIncomingRequest>) -> R<VeeStatus> {
        none("CompleteIncoming")
    }
    async fn abort_incoming(&self, _: Request<AbortIncomingRequest>) -> R<VeeStatus> {
        none("AbortIncoming")
    }
    type MigrateOutStream = BoxStream<MigrationProgress>;
    async fn migrate_out(&self, _: Request<MigrateOutRequest>) -> R<Self::MigrateOutStream> {
        none("MigrateOut")
    }
    async fn console(&self, _: Request<ConsoleRequest>) -> R<ConsoleResponse> {
        none("Console")
    }
    type WatchEventsStream = BoxStream<HostEvent>;
    async fn watch_events(&self, _: Request<WatchEventsRequest>) -> R<Self::WatchEventsStream> {
        none("WatchEvents")
    }
    async fn update_network(&self, _: Request<UpdateNetworkRequest>) -> R<UpdateNetworkResponse> {
        none("UpdateNetwork")
    }
    async fn probe(&self, _: Request<ProbeRequest>) -> R<ProbeResponse> {
        none("Probe")
    }
    async fn resize(&self, _: Request<ResizeRequest>) -> R<VeeStatus> {
        none("Resize")
    }
    type AttachConsoleStream = BoxStream<AttachConsoleResponse>;
    async fn attach_console(&self, _: Request<tonic::Streaming<AttachConsoleRequest>>) -> R<Self::AttachConsoleStream> {
        none("AttachConsole")
    }
}
