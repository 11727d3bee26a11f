//! A VMI server the CLI tests talk to: it records each call (token and
//! request) and answers with canned replies.

use std::sync::{Arc, Mutex};

use interfaces::vmi;
use interfaces::vmi::vmi_service_server::{VmiService as Vmi, VmiServiceServer};
use interfaces::vmi::*;
use tonic::{Request, Response, Status};

#[derive(Default)]
pub(crate) struct Mock {
    /// `authorization` metadata of every call.
    pub(super) auth: Mutex<Vec<Option<String>>>,
    /// Requests seen, as debug strings.
    pub(crate) seen: Mutex<Vec<String>>,
    /// States that successive ListMigrations return for migration m-1.
    pub(super) migration_states: Mutex<Vec<(&'static str, &'static str)>>,
    /// The state Migrate answers with (default `approved`).
    pub(super) migrate_state: Mutex<&'static str>,
    /// Deploy calls so far: the first is answered Unavailable, as a lost answer.
    pub(super) deploys: std::sync::atomic::AtomicU32,
    /// The leader this VEEM names while it stands by (`None`: it leads).
    pub(super) standby_for: Mutex<Option<String>>,
    /// Health checks answered so far.
    pub(super) health_checks: std::sync::atomic::AtomicU32,
    /// `vee-request-id` metadata of every call.
    pub(super) request_ids: Mutex<Vec<Option<String>>>,
    /// VeeAction calls still to answer as a VEEM gone mid-call would
    /// (Unknown: transport error).
    pub(super) actions_lost: std::sync::atomic::AtomicU32,
}

/// The gRPC health of the mock: serving while it leads, else a
/// standby's answer naming the leader (as `api::standby`).
struct MockHealth(Arc<Mock>);

#[tonic::async_trait]
impl tonic_health::pb::health_server::Health for MockHealth {
    async fn check(
        &self,
        _: Request<tonic_health::pb::HealthCheckRequest>,
    ) -> Result<Response<tonic_health::pb::HealthCheckResponse>, Status> {
        use tonic_health::pb::health_check_response::ServingStatus;
        self.0.health_checks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.0.standby_for.lock().unwrap().clone() {
            None => Ok(Response::new(tonic_health::pb::HealthCheckResponse {
                status: ServingStatus::Serving as i32,
            })),
            Some(leader) => {
                let mut s = Status::unavailable(format!("this VEEM stands by; the site's leader is {leader}"));
                s.metadata_mut().insert(interfaces::fencing::LEADER, leader.parse().unwrap());
                Err(s)
            }
        }
    }

    type WatchStream = std::pin::Pin<Box<dyn futures::Stream<Item = Result<tonic_health::pb::HealthCheckResponse, Status>> + Send>>;
    async fn watch(&self, _: Request<tonic_health::pb::HealthCheckRequest>) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented(""))
    }
}

impl Mock {
    fn note<T: std::fmt::Debug>(&self, req: &Request<T>) {
        let auth = req.metadata().get("authorization").map(|v| v.to_str().unwrap().to_string());
        self.auth.lock().unwrap().push(auth);
        let id = req.metadata().get("vee-request-id").map(|v| v.to_str().unwrap().to_string());
        self.request_ids.lock().unwrap().push(id);
        self.seen.lock().unwrap().push(format!("{:?}", req.get_ref()));
    }
}

pub(super) fn vee(id: &str, location: &str) -> VeeInfo {
    VeeInfo {
        vee_id: id.into(),
        service_id: "svc1".into(),
        component: "db".into(),
        state: vmi::VeeState::Running as i32,
        location: location.into(),
        vcpus: 1,
        memory_mib: 256,
        update_time: interfaces::time::timestamp_ms(1_795_852_800_000),
        ..Default::default()
    }
}

pub(super) fn migration(state: &str, detail: &str) -> MigrationInfo {
    MigrationInfo {
        migration_id: "m-1".into(),
        vee_id: "v1".into(),
        source: "local (h1)".into(),
        destination: "remote (site-b)".into(),
        state: state.parse::<vmi::MigrationState>().unwrap() as i32,
        detail: detail.into(),
        total: interfaces::time::duration_ms(900),
        downtime: interfaces::time::duration_ms(40),
        ..Default::default()
    }
}

type R<T> = Result<Response<T>, Status>;

/// The served handle (the trait cannot be implemented for `Arc<Mock>` itself).
pub(super) struct MockSvc(Arc<Mock>);

impl std::ops::Deref for MockSvc {
    type Target = Mock;
    fn deref(&self) -> &Mock {
        &self.0
    }
}

#[tonic::async_trait]
impl Vmi for MockSvc {
    async fn negotiate(&self, r: Request<NegotiateRequest>) -> R<NegotiateResponse> {
        self.note(&r);
        // An unknown word leaves the verdict unset.
        let name = interfaces::manifest::Manifest::from_toml(&r.get_ref().manifest_toml).map(|m| m.service.name);
        let verdict = name.ok().and_then(|n| n.parse::<vmi::Verdict>().ok()).map_or(0, |v| v as i32);
        Ok(Response::new(NegotiateResponse {
            verdict,
            reasons: vec!["because".into()],
            earliest_start: interfaces::time::timestamp_s(1_795_852_800),
            earliest_end: interfaces::time::timestamp_s(1_795_896_000),
        }))
    }
    async fn deploy(&self, r: Request<DeployRequest>) -> R<ServiceInfo> {
        self.note(&r);
        if self.deploys.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Err(Status::unavailable("connection reset"));
        }
        Err(Status::failed_precondition("manifest rejected: no capacity"))
    }
    async fn get_service(&self, r: Request<GetServiceRequest>) -> R<ServiceInfo> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn reserve_spare(&self, r: Request<ReserveSpareRequest>) -> R<ReserveSpareResponse> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn confirm_spare(&self, r: Request<ConfirmSpareRequest>) -> R<ConfirmSpareResponse> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn release_spare(&self, r: Request<ReleaseSpareRequest>) -> R<ReleaseSpareResponse> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn extend_service(&self, r: Request<ExtendServiceRequest>) -> R<ServiceInfo> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn scale_component(&self, r: Request<ScaleComponentRequest>) -> R<ServiceInfo> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn update_component(&self, r: Request<UpdateComponentRequest>) -> R<Rollout> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn resize_vee(&self, r: Request<ResizeVeeRequest>) -> R<VeeInfo> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn get_rollout(&self, r: Request<GetRolloutRequest>) -> R<Rollout> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn delete_service(&self, r: Request<DeleteServiceRequest>) -> R<ServiceInfo> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn list_services(&self, r: Request<ListServicesRequest>) -> R<ListServicesResponse> {
        self.note(&r);
        Err(Status::unimplemented(""))
    }
    async fn list_vees(&self, r: Request<ListVeesRequest>) -> R<ListVeesResponse> {
        self.note(&r);
        // One VEE per page: the CLI asks for the next until the token is empty.
        Ok(Response::new(match r.get_ref().page_token.as_str() {
            "" => ListVeesResponse {
                vees: vec![vee("v1", "local (h1)")],
                next_page_token: "after-v1".into(),
            },
            "after-v1" => ListVeesResponse {
                vees: vec![vee("v22", "remote (site-b)")],
                next_page_token: String::new(),
            },
            other => return Err(Status::invalid_argument(format!("field `page_token`: {other:?}"))),
        }))
    }
    async fn get_vee(&self, r: Request<GetVeeRequest>) -> R<VeeInfo> {
        self.note(&r);
        match r.get_ref().vee_id.as_str() {
            "v1" => Ok(Response::new(vee("v1", "remote (site-b)"))),
            other => Err(Status::not_found(format!("no VEE {other}"))),
        }
    }
    async fn vee_action(&self, r: Request<VeeActionRequest>) -> R<VeeInfo> {
        self.note(&r);
        use std::sync::atomic::Ordering::SeqCst;
        if self.actions_lost.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(Status::unknown("transport error"));
        }
        Ok(Response::new(vee(&r.get_ref().vee_id, "local")))
    }
    async fn migrate(&self, r: Request<MigrateRequest>) -> R<MigrationInfo> {
        self.note(&r);
        let state = *self.migrate_state.lock().unwrap();
        Ok(Response::new(migration(if state.is_empty() { "approved" } else { state }, "")))
    }
    async fn list_migrations(&self, r: Request<ListMigrationsRequest>) -> R<ListMigrationsResponse> {
        self.note(&r);
        let mut states = self.migration_states.lock().unwrap();
        let (state, detail) = if states.len() > 1 { states.remove(0) } else { states[0] };
        Ok(Response::new(ListMigrationsResponse {
            migrations: vec![migration(state, detail)],
            next_page_token: String::new(),
        }))
    }
    async fn approve_migration(&self, r: Request<ApproveMigrationRequest>) -> R<MigrationInfo> {
        self.note(&r);
        Ok(Response::new(migration("approved", "")))
    }
    async fn reject_migration(&self, r: Request<RejectMigrationRequest>) -> R<MigrationInfo> {
        self.note(&r);
        Ok(Response::new(migration("rejected", "")))
    }
    async fn drain(&self, r: Request<DrainRequest>) -> R<DrainResponse> {
        self.note(&r);
        Err(Status::permission_denied("operator only"))
    }
    type AttachConsoleStream = std::pin::Pin<Box<dyn futures::Stream<Item = Result<AttachConsoleResponse, Status>> + Send>>;
    /// A console that says whose it is, then echoes what is typed in
    /// upper case, and a notice after `migrate\r`.
    async fn attach_console(&self, r: Request<tonic::Streaming<AttachConsoleRequest>>) -> R<Self::AttachConsoleStream> {
        let auth = r.metadata().get("authorization").map(|v| v.to_str().unwrap().to_string());
        self.auth.lock().unwrap().push(auth);
        let mut input = r.into_inner();
        let first = input.message().await?.unwrap_or_default();
        self.seen
            .lock()
            .unwrap()
            .push(format!("AttachConsole {} force={}", first.vee_id, first.force));
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let banner = format!("console of {}\r\n", first.vee_id).into_bytes();
        let mock = self.0.clone();
        tokio::spawn(async move {
            let _ = tx
                .send(Ok(AttachConsoleResponse {
                    data: banner,
                    notice: String::new(),
                }))
                .await;
            while let Ok(Some(m)) = input.message().await {
                mock.seen
                    .lock()
                    .unwrap()
                    .push(format!("typed {:?}", String::from_utf8_lossy(&m.data)));
                let notice = if m.data.ends_with(b"migrate\r") {
                    // With what a hostile relay could slip in: a screen
                    // clear and a window title.
                    "\x1b[2J\x1b]0;pwned\x07the VEE moved: its console is attached again"
                } else {
                    ""
                };
                let data = m.data.to_ascii_uppercase();
                let _ = tx
                    .send(Ok(AttachConsoleResponse {
                        data,
                        notice: String::new(),
                    }))
                    .await;
                if !notice.is_empty() {
                    let _ = tx
                        .send(Ok(AttachConsoleResponse {
                            data: vec![],
                            notice: notice.into(),
                        }))
                        .await;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    type WatchEventsStream = tokio_stream::Iter<std::vec::IntoIter<Result<interfaces::vmi::Event, Status>>>;
    async fn watch_events(&self, r: Request<WatchEventsRequest>) -> R<Self::WatchEventsStream> {
        self.note(&r);
        Ok(Response::new(tokio_stream::iter(vec![
            Ok(mock_event("deploying", 1_795_852_800_000, 1)),
            Ok(mock_event("running", 1_795_852_801_500, 2)),
        ])))
    }

    /// Two pages: events 1 and 2, then 3 (after the first page's token).
    async fn list_events(&self, r: Request<ListEventsRequest>) -> R<ListEventsResponse> {
        self.note(&r);
        let (events, next_page_token) = match (r.get_ref().page_token.as_str(), r.get_ref().after_seq) {
            ("", 0) => (
                vec![
                    mock_event("deploying", 1_795_852_800_000, 1),
                    mock_event("running", 1_795_852_801_500, 2),
                ],
                "after-2".to_string(),
            ),
            ("after-2", 0) | ("", 2) => (vec![mock_event("stopped", 1_795_852_802_000, 3)], String::new()),
            other => return Err(Status::invalid_argument(format!("unexpected {other:?}"))),
        };
        Ok(Response::new(ListEventsResponse { events, next_page_token }))
    }
    async fn get_usage(&self, r: Request<GetUsageRequest>) -> R<UsageReport> {
        self.note(&r);
        // Two VEEs, one record an hour each from 2026-11-28T08:00:00Z, v1's
        // from 10:00 at site-b.
        let rec = |vee: &str, hour: i64, site: &str| UsageRecord {
            record_id: format!("{vee}-{hour}"),
            abc_id: "svc1".into(),
            vee_id: vee.into(),
            site_chain: vec![site.into()],
            start_time: interfaces::time::timestamp_s(1_795_852_800 + hour * 3600),
            end_time: interfaces::time::timestamp_s(1_795_852_800 + (hour + 1) * 3600),
            cpu_seconds: 10.0,
            memory_mib_seconds: 100.0,
            disk_bytes: 1,
            net_bytes: 2,
            kpis: Default::default(),
            component: if vee == "v1" { "web" } else { "db" }.into(),
        };
        let mut records = vec![];
        for hour in 0..4 {
            records.push(rec("v1", hour, if hour >= 2 { "site-b" } else { "site-a" }));
            records.push(rec("v22", hour, "site-a"));
        }
        Ok(Response::new(UsageReport {
            service_id: r.into_inner().service_id,
            records,
            violations: vec![],
        }))
    }
    async fn prepare_incoming(&self, _: Request<PrepareIncomingRequest>) -> R<interfaces::vhi::IncomingTarget> {
        Err(Status::unimplemented(""))
    }
    async fn complete_incoming(&self, _: Request<CompleteIncomingRequest>) -> R<VeeInfo> {
        Err(Status::unimplemented(""))
    }
    async fn abort_incoming(&self, _: Request<AbortIncomingRequest>) -> R<AbortIncomingResponse> {
        Err(Status::unimplemented(""))
    }
    async fn withdraw(&self, _: Request<WithdrawRequest>) -> R<WithdrawResponse> {
        Err(Status::unimplemented(""))
    }
    async fn list_hosts(&self, r: Request<ListHostsRequest>) -> R<ListHostsResponse> {
        self.note(&r);
        let h = |name: &str, health: vmi::HostHealth, vees| HostStatus {
            name: name.into(),
            health: health as i32,
            missed_heartbeats: u32::from(health == vmi::HostHealth::Missing),
            vcpus: 4,
            memory_mib: 4096,
            disk_gib: 20,
            used_vcpus: vees,
            used_memory_mib: 128 * vees as u64,
            used_disk_gib: vees as u64,
            vees,
            accel: "tcg".into(),
            last_error: match health {
                vmi::HostHealth::Up => String::new(),
                _ => format!("host {name}: transport error: tcp connect error: Connection refused (os error 111)"),
            },
            cpu_load: 0.25,
        };
        Ok(Response::new(ListHostsResponse {
            hosts: vec![h("a1", vmi::HostHealth::Up, 2), h("a2", vmi::HostHealth::Missing, 0)],
            next_page_token: String::new(),
        }))
    }
    async fn list_usage_limits(&self, r: Request<ListUsageLimitsRequest>) -> R<ListUsageLimitsResponse> {
        self.note(&r);
        let a = |vcpus, memory_mib, disk_gib| {
            Some(Amount {
                vcpus,
                memory_mib,
                disk_gib,
            })
        };
        Ok(Response::new(ListUsageLimitsResponse {
            limits: vec![
                UsageLimitInfo {
                    consumer: "acme".into(),
                    kind: vmi::UsageLimitKind::Fixed as i32,
                    limit: a(3, 1024, 10),
                    held: a(2, 256, 2),
                    ..Default::default()
                },
                UsageLimitInfo {
                    consumer: "globex".into(),
                    kind: vmi::UsageLimitKind::Commitment as i32,
                    limit: a(4, 4096, 40),
                    burst_limit: a(8, 8192, 80),
                    epoch: interfaces::time::duration_s(86400),
                    burst: interfaces::time::duration_s(3600),
                    held: a(1, 128, 1),
                    epoch_avg: a(1, 100, 0),
                    burst_avg: a(2, 128, 0),
                },
            ],
            next_page_token: String::new(),
        }))
    }
    async fn send_vee(&self, _: Request<SendVeeRequest>) -> R<MigrationInfo> {
        Err(Status::unimplemented(""))
    }
    async fn push_usage(&self, _: Request<PushUsageRequest>) -> R<PushUsageResponse> {
        Err(Status::unimplemented(""))
    }
    async fn update_network(&self, _: Request<UpdateNetworkRequest>) -> R<UpdateNetworkResponse> {
        Err(Status::unimplemented(""))
    }
}

/// Serve `mock` on a free local port; return its endpoint URL.
pub(crate) async fn serve(mock: Arc<Mock>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(tonic_health::pb::health_server::HealthServer::new(MockHealth(mock.clone())))
            .add_service(VmiServiceServer::new(MockSvc(mock)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

/// An event of VEE v1 of service svc1.
fn mock_event(kind: &str, ms: i64, seq: u64) -> interfaces::vmi::Event {
    interfaces::vmi::Event {
        vee_id: "v1".into(),
        service_id: "svc1".into(),
        kind: kind.into(),
        detail: String::new(),
        time: interfaces::time::timestamp_ms(ms),
        seq,
    }
}
