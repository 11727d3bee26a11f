//! A fake VEEH: implements the VHI service trait in memory, answers as a
//! test scripts it (`FakeVhi::fail`, failing restores) and records the
//! calls it got.

// tonic's handlers return its large `Status` as their error.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use interfaces::vhi::vhi_service_server::VhiService as Vhi;
use interfaces::vhi::*;
use tonic::{Request, Response, Status};

use crate::ports::{BoxStream, ConsoleInput, ConsoleOutput, ConsoleStream, HostConsole};

/// What a fake host answers and what it saw.
#[derive(Debug, Default)]
pub struct Script {
    /// The next this many Restore calls fail with `restore_error`.
    pub failing_restores: u32,
    /// The status of a failing Restore (default: libvirt's lookup race).
    pub restore_error: Option<(tonic::Code, String)>,
    /// Calls (by their VHI name: `PrepareIncoming`, `MigrateOut`, ...)
    /// that fail with this status from now on.
    pub failing: HashMap<&'static str, (tonic::Code, String)>,
    /// As `failing`, for one VEE's calls only (call, VEE ID).
    pub failing_for: HashMap<(&'static str, String), (tonic::Code, String)>,
    /// VEEs whose domain runs here.
    pub running: BTreeSet<String>,
    /// VEEs ListDomains reports as migrating out (a MigrateOut under way
    /// here that outlived the VEEM that asked for it).
    pub migrating_out: BTreeSet<String>,
    /// Every call: `restore <vee> fence=<owner>`, `destroy <vee>`, ...
    pub calls: Vec<String>,
    /// The last spec each VEE's Prepare, Create, PrepareIncoming or
    /// Restore carried.
    pub specs: HashMap<String, VeeSpec>,
    /// The last member table UpdateNetwork gave each network (by VNI).
    pub networks: HashMap<u32, Vec<NetworkMember>>,
    /// The peer VTEPs the last UpdateNetwork of each network stretched it to.
    pub stretched_to: HashMap<u32, Vec<interfaces::vhi::Vtep>>,
    /// Whether the last UpdateNetwork of each network made this host its
    /// anchor.
    pub anchored: HashMap<u32, bool>,
    /// (host, site) HostInfo answers with instead of its own: another VEEH
    /// behind the configured endpoint.
    pub answers_as: Option<(String, String)>,
    /// The CPU load HostInfo reports.
    pub cpu_load: f64,
    /// How long a Checkpoint takes (ms).
    pub checkpoint_ms: u64,
    /// The memory and disk blobs a Checkpoint names (none: fixed IDs of
    /// 2s and 3s), e.g. a blob a benchmark pushed to a real repository.
    pub checkpoint_blobs: Option<(String, String)>,
    /// How long a MigrateOut takes before it answers (ms).
    pub migrate_out_ms: u64,
    /// Images whose VEEs never answer a Probe (a broken image).
    pub silent_images: BTreeSet<String>,
    /// How long a Restore takes before it answers (ms, the runtime's
    /// timer: virtual under a paused runtime).
    pub restore_ms: u64,
    /// How long a ListDomains takes before it answers (ms, the runtime's
    /// timer).
    pub list_domains_ms: u64,
    /// Restores under way now, and the most there ever were at once.
    pub restores_in_flight: u32,
    pub max_restores_in_flight: u32,
    /// When each Restore started (the runtime's clock), and of which VEE.
    pub restore_starts: Vec<(tokio::time::Instant, String)>,
    /// The vCPUs HostInfo reports (default 4).
    pub vcpus: Option<u32>,
    /// The `domains_generation` HostInfo reports (0, the default: a VEEH
    /// that keeps none). A test moves it on as a VEEH's state watch would.
    pub domains_generation: u64,
    /// The save formats its profile lists (none: an older VEEH, sequential
    /// only). With mapped-ram, a checkpoint that stops its guest is
    /// mapped-ram; a Restore of a format not listed is refused as the real
    /// VEEH refuses it.
    pub save_formats: Vec<interfaces::vhi::SaveFormat>,
}

/// One fake VEEH; clone it to keep a handle on its script.
#[derive(Clone, Default)]
pub struct FakeVhi {
    pub name: String,
    /// The site it says it belongs to.
    pub site: String,
    pub script: Arc<Mutex<Script>>,
}

impl FakeVhi {
    /// A fake host `name` of site `site` that runs nothing yet.
    pub fn new(name: &str, site: &str) -> FakeVhi {
        FakeVhi {
            name: name.into(),
            site: site.into(),
            ..Default::default()
        }
    }

    /// The calls this host got, in order.
    pub fn calls(&self) -> Vec<String> {
        self.script.lock().unwrap().calls.clone()
    }

    /// Makes VHI call `call` fail with `code` and `message` from now on.
    pub fn fail(&self, call: &'static str, code: tonic::Code, message: &str) {
        self.script.lock().unwrap().failing.insert(call, (code, message.into()));
    }

    /// Makes VHI call `call` on VEE `vee_id` fail with `code` and
    /// `message` from now on.
    pub fn fail_for(&self, call: &'static str, vee_id: &str, code: tonic::Code, message: &str) {
        self.script
            .lock()
            .unwrap()
            .failing_for
            .insert((call, vee_id.into()), (code, message.into()));
    }

    /// This host's VTEP: `10.77.0.N`, N from its name's bytes.
    pub fn vtep(&self) -> String {
        format!("10.77.0.{}", self.name.bytes().map(u32::from).sum::<u32>() % 250 + 1)
    }

    /// The last spec of `vee_id` this host got.
    pub fn spec(&self, vee_id: &str) -> Option<VeeSpec> {
        self.script.lock().unwrap().specs.get(vee_id).cloned()
    }

    fn keep_spec(&self, spec: &VeeSpec) {
        self.script.lock().unwrap().specs.insert(spec.vee_id.clone(), spec.clone());
    }

    /// Whether the domain of `vee_id` runs here.
    pub fn runs(&self, vee_id: &str) -> bool {
        self.script.lock().unwrap().running.contains(vee_id)
    }

    /// Makes the domain of `vee_id` run here or not, as the hypervisor
    /// would behind the VEEM's back (a migration it finished after its
    /// caller went).
    pub fn set_running(&self, vee_id: &str, running: bool) {
        let mut s = self.script.lock().unwrap();
        if running {
            s.running.insert(vee_id.into());
        } else {
            s.running.remove(vee_id);
        }
    }

    fn note(&self, call: String) -> std::sync::MutexGuard<'_, Script> {
        let mut s = self.script.lock().unwrap();
        s.calls.push(call);
        s
    }

    /// Records `call` on `vee_id` (`<call> <vee>` in snake case) and fails
    /// it if the script says so.
    fn call(&self, call: &'static str, vee_id: &str) -> Result<std::sync::MutexGuard<'_, Script>, Status> {
        let s = self.note(format!("{} {vee_id}", snake(call)));
        match s.failing.get(call).or_else(|| s.failing_for.get(&(call, vee_id.to_string()))) {
            Some((code, msg)) => Err(Status::new(*code, msg.clone())),
            None => Ok(s),
        }
    }

    /// `call` on `vee_id` (scripted as [`FakeVhi::call`]) after which its
    /// domain runs here (`running`) or not.
    fn domain_call(&self, call: &'static str, vee_id: &str, running: bool) -> R<VeeStatus> {
        let mut s = self.call(call, vee_id)?;
        if running {
            s.running.insert(vee_id.into());
        } else {
            s.running.remove(vee_id);
        }
        drop(s);
        Ok(self.status(vee_id, running))
    }

    fn status(&self, vee_id: &str, running: bool) -> Response<VeeStatus> {
        Response::new(VeeStatus {
            vee_id: vee_id.into(),
            state: if running { VeeState::Running } else { VeeState::Absent } as i32,
            domain: format!("vee-{vee_id}"),
        })
    }
}

type R<T> = Result<Response<T>, Status>;

/// `PrepareIncoming` -> `prepare_incoming`.
fn snake(call: &str) -> String {
    let mut out = String::new();
    for (i, c) in call.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

impl FakeVhi {
    /// Its compatibility profile: only the save formats it is scripted with.
    fn profile(&self) -> interfaces::vhi::CompatibilityProfile {
        interfaces::vhi::CompatibilityProfile {
            save_formats: self.script.lock().unwrap().save_formats.iter().map(|f| *f as i32).collect(),
            ..Default::default()
        }
    }
}

fn unscripted<T>(what: &str) -> R<T> {
    Err(Status::unimplemented(format!("fake VEEH: {what} is not scripted")))
}

#[tonic::async_trait]
impl Vhi for FakeVhi {
    async fn get_host_info(&self, _: Request<GetHostInfoRequest>) -> R<HostInfo> {
        let s = self.call("HostInfo", "-")?;
        let (host, site_id) = s.answers_as.clone().unwrap_or((self.name.clone(), self.site.clone()));
        let cpu_load = s.cpu_load;
        let vcpus = s.vcpus.unwrap_or(4);
        let domains_generation = s.domains_generation;
        drop(s);
        Ok(Response::new(HostInfo {
            domains_generation,
            host,
            site_id,
            vcpus,
            memory_mib: 4096,
            disk_gib: 100,
            vtep: self.vtep(),
            cpu_load,
            profile: Some(self.profile()),
            ..Default::default()
        }))
    }
    async fn prepare(&self, r: Request<PrepareRequest>) -> R<PrepareResponse> {
        let spec = r.into_inner().spec.unwrap_or_default();
        drop(self.call("Prepare", &spec.vee_id)?);
        self.keep_spec(&spec);
        Ok(Response::new(PrepareResponse::default()))
    }
    async fn create(&self, r: Request<CreateRequest>) -> R<VeeStatus> {
        let spec = r.into_inner().spec.unwrap_or_default();
        drop(self.call("Create", &spec.vee_id)?);
        self.keep_spec(&spec);
        Ok(self.status(&spec.vee_id, false))
    }
    async fn start(&self, r: Request<StartRequest>) -> R<VeeStatus> {
        self.domain_call("Start", &r.into_inner().vee_id, true)
    }
    async fn shutdown(&self, r: Request<ShutdownRequest>) -> R<ShutdownResponse> {
        let status = self.domain_call("Shutdown", &r.into_inner().vee_id, false)?.into_inner();
        Ok(Response::new(ShutdownResponse {
            status: Some(status),
            clean: true,
        }))
    }
    async fn destroy(&self, r: Request<DestroyRequest>) -> R<VeeStatus> {
        self.domain_call("Destroy", &r.into_inner().vee_id, false)
    }
    async fn suspend(&self, r: Request<SuspendRequest>) -> R<VeeStatus> {
        let id = r.into_inner().vee_id;
        drop(self.call("Suspend", &id)?);
        Ok(self.status(&id, true))
    }
    async fn resume(&self, r: Request<ResumeRequest>) -> R<VeeStatus> {
        let id = r.into_inner().vee_id;
        drop(self.call("Resume", &id)?);
        Ok(self.status(&id, true))
    }
    /// `checkpoint VEE`; with `stop_after` the domain no longer runs here.
    async fn checkpoint(&self, r: Request<CheckpointRequest>) -> R<CheckpointRecord> {
        let CheckpointRequest { vee_id: id, stop_after } = r.into_inner();
        let takes = self.script.lock().unwrap().checkpoint_ms;
        tokio::time::sleep(std::time::Duration::from_millis(takes)).await;
        let mut s = self.call("Checkpoint", &id)?;
        if stop_after {
            s.running.remove(&id);
        }
        let mapped_ram = stop_after && s.save_formats.contains(&interfaces::vhi::SaveFormat::MappedRam);
        let (memory_blob, disk_blob) = s
            .checkpoint_blobs
            .clone()
            .unwrap_or_else(|| (format!("sha256:{}", "2".repeat(64)), format!("sha256:{}", "3".repeat(64))));
        drop(s);
        Ok(Response::new(CheckpointRecord {
            checkpoint_id: uuid::Uuid::new_v4().to_string(),
            vee_id: id,
            memory_blob,
            disk_blob,
            take_time: interfaces::time::timestamp_ms(chrono::Utc::now().timestamp_millis()),
            host: self.name.clone(),
            format_version: interfaces::CHECKPOINT_RECORD_FORMAT,
            save_format: if mapped_ram {
                interfaces::vhi::SaveFormat::MappedRam
            } else {
                interfaces::vhi::SaveFormat::Sequential
            } as i32,
            ..Default::default()
        }))
    }
    async fn restore(&self, r: Request<RestoreRequest>) -> R<VeeStatus> {
        let r = r.into_inner();
        if let Some(spec) = &r.spec {
            self.keep_spec(spec);
        }
        let id = r.spec.map(|s| s.vee_id).unwrap_or_default();
        let format = r
            .checkpoint
            .as_ref()
            .map_or(interfaces::vhi::SaveFormat::Sequential, |c| c.save_format());
        if !self.profile().reads(format) {
            drop(self.note(format!("restore {id} refused: {}", format.as_str_name())));
            return Err(Status::failed_precondition(format!(
                "field `save_format`: the checkpoint's memory state is {}, which this host cannot read",
                format.as_str_name()
            )));
        }
        let takes = {
            let mut s = self.note(format!("restore {id} fence={}", r.fence_owner));
            s.restores_in_flight += 1;
            s.max_restores_in_flight = s.max_restores_in_flight.max(s.restores_in_flight);
            s.restore_starts.push((tokio::time::Instant::now(), id.clone()));
            s.restore_ms
        };
        // Counted out again however the call ends (its caller may drop it).
        struct InFlight<'a>(&'a Mutex<Script>);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.lock().unwrap().restores_in_flight -= 1;
            }
        }
        let in_flight = InFlight(&self.script);
        if takes > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(takes)).await;
        }
        drop(in_flight);
        let mut s = self.script.lock().unwrap();
        if let Some((code, msg)) = s.failing.get("Restore").or_else(|| s.failing_for.get(&("Restore", id.clone()))) {
            return Err(Status::new(*code, msg.clone()));
        }
        if s.failing_restores > 0 {
            s.failing_restores -= 1;
            let (code, msg) = s.restore_error.clone().unwrap_or((
                tonic::Code::NotFound,
                "Domain not found: no domain with matching uuid [code=nodomain (42)]".into(),
            ));
            return Err(Status::new(code, msg));
        }
        s.running.insert(id.clone());
        drop(s);
        Ok(self.status(&id, true))
    }
    async fn prepare_incoming(&self, r: Request<PrepareIncomingRequest>) -> R<IncomingTarget> {
        let spec = r.into_inner().spec.unwrap_or_default();
        self.keep_spec(&spec);
        let id = spec.vee_id;
        drop(self.call("PrepareIncoming", &id)?);
        Ok(Response::new(IncomingTarget {
            vee_id: id,
            host: self.name.clone(),
            ..Default::default()
        }))
    }
    async fn complete_incoming(&self, r: Request<CompleteIncomingRequest>) -> R<VeeStatus> {
        self.domain_call("CompleteIncoming", &r.into_inner().vee_id, true)
    }
    async fn abort_incoming(&self, r: Request<AbortIncomingRequest>) -> R<VeeStatus> {
        self.domain_call("AbortIncoming", &r.into_inner().vee_id, false)
    }
    type MigrateOutStream = BoxStream<MigrationProgress>;
    /// Succeeds (the VEE leaves this host) after `migrate_out_ms`, or
    /// streams a failed phase when `MigrateOut` is scripted to fail.
    async fn migrate_out(&self, r: Request<MigrateOutRequest>) -> R<Self::MigrateOutStream> {
        let id = r.into_inner().vee_id;
        let takes = self.script.lock().unwrap().migrate_out_ms;
        tokio::time::sleep(std::time::Duration::from_millis(takes)).await;
        let mut s = self.note(format!("migrate_out {id}"));
        let last = match s.failing.get("MigrateOut") {
            Some((_, msg)) => MigrationProgress {
                phase: MigrationPhase::Failed as i32,
                error: msg.clone(),
                ..Default::default()
            },
            None => {
                s.running.remove(&id);
                MigrationProgress {
                    phase: MigrationPhase::Done as i32,
                    total: interfaces::time::duration_ms(1200),
                    downtime: interfaces::time::duration_ms(40),
                    ..Default::default()
                }
            }
        };
        let first = MigrationProgress {
            phase: MigrationPhase::Preparing as i32,
            ..Default::default()
        };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(first), Ok(last)]))))
    }
    async fn stats(&self, r: Request<StatsRequest>) -> R<VeeStats> {
        let id = r.into_inner().vee_id;
        drop(self.call("Stats", &id)?);
        Ok(Response::new(VeeStats {
            vee_id: id,
            time: interfaces::time::timestamp_ms(chrono::Utc::now().timestamp_millis()),
            ..Default::default()
        }))
    }
    async fn list_stats(&self, r: Request<ListStatsRequest>) -> R<ListStatsResponse> {
        let s = self.call("ListStats", "-")?;
        let now = interfaces::time::timestamp_ms(chrono::Utc::now().timestamp_millis());
        // A VEE whose Stats the script fails is left out, as a VEEH leaves
        // out a VEE whose counters it cannot read.
        let stats = s
            .running
            .iter()
            .filter(|id| !s.failing.contains_key("Stats") && !s.failing_for.contains_key(&("Stats", id.to_string())))
            .map(|id| VeeStats {
                vee_id: id.clone(),
                time: now,
                ..Default::default()
            })
            .collect();
        drop(s);
        let r = r.get_ref();
        let (stats, next_page_token) = interfaces::pages::page(stats, |s: &VeeStats| s.vee_id.clone(), r.page_size, &r.page_token)?;
        Ok(Response::new(ListStatsResponse { stats, next_page_token }))
    }
    async fn list_domains(&self, r: Request<ListDomainsRequest>) -> R<ListDomainsResponse> {
        let takes = self.script.lock().unwrap().list_domains_ms;
        tokio::time::sleep(std::time::Duration::from_millis(takes)).await;
        let s = self.call("ListDomains", "-")?;
        let domains = s
            .running
            .iter()
            .map(|id| DomainInfo {
                vee_id: id.clone(),
                domain: format!("vee-{id}"),
                state: VeeState::Running as i32,
                migrating_out: s.migrating_out.contains(id),
            })
            .collect();
        drop(s);
        let r = r.get_ref();
        let (domains, next_page_token) = interfaces::pages::page(domains, |d| d.domain.clone(), r.page_size, &r.page_token)?;
        Ok(Response::new(ListDomainsResponse { domains, next_page_token }))
    }
    async fn console(&self, _: Request<ConsoleRequest>) -> R<ConsoleResponse> {
        unscripted("Console")
    }
    async fn resize(&self, r: Request<ResizeRequest>) -> R<VeeStatus> {
        let r = r.into_inner();
        let mut s = self.note(format!("resize {} vcpus={} memory_mib={}", r.vee_id, r.vcpus, r.memory_mib));
        if let Some((code, message)) = s.failing.get("Resize").cloned() {
            return Err(Status::new(code, message));
        }
        if let Some(spec) = s.specs.get_mut(&r.vee_id) {
            if r.vcpus > spec.max_vcpus.max(spec.vcpus) || r.memory_mib > spec.max_memory_mib.max(spec.memory_mib) {
                return Err(Status::invalid_argument("field `vcpus` or `memory_mib`: above the VEE's maximum"));
            }
            (spec.max_vcpus, spec.max_memory_mib) = (spec.max_vcpus.max(spec.vcpus), spec.max_memory_mib.max(spec.memory_mib));
            if r.vcpus > 0 {
                spec.vcpus = r.vcpus;
            }
            if r.memory_mib > 0 {
                spec.memory_mib = r.memory_mib;
            }
        }
        drop(s);
        Ok(self.status(&r.vee_id, true))
    }

    async fn probe(&self, r: Request<ProbeRequest>) -> R<ProbeResponse> {
        let r = r.into_inner();
        let s = self.call("Probe", &r.vee_id)?;
        let spec = s.specs.get(&r.vee_id).cloned().unwrap_or_default();
        if !spec.nics.iter().any(|n| n.ports.contains(&r.port)) {
            return Err(Status::invalid_argument(format!(
                "field `port`: {} is not a port this VEE declares",
                r.port
            )));
        }
        let answered = s.running.contains(&r.vee_id) && !s.silent_images.contains(&spec.image);
        Ok(Response::new(ProbeResponse {
            answered,
            target: format!("{}:{}", r.vee_id, r.port),
            detail: if answered { String::new() } else { "connection refused".into() },
        }))
    }

    async fn update_network(&self, r: Request<UpdateNetworkRequest>) -> R<UpdateNetworkResponse> {
        let u = r.into_inner().network.unwrap_or_default();
        // `update_network vb<VNI> to=<peer VTEPs>`: where it is stretched.
        let to: Vec<&str> = u.stretched_to.iter().map(|v| v.address.as_str()).collect();
        let mut s = self.call("UpdateNetwork", &format!("vb{} to={}", u.vni, to.join(",")))?;
        s.networks.insert(u.vni, u.members);
        s.stretched_to.insert(u.vni, u.stretched_to);
        s.anchored.insert(u.vni, u.anchor.is_some());
        Ok(Response::new(UpdateNetworkResponse {}))
    }
    type AttachConsoleStream = BoxStream<AttachConsoleResponse>;
    async fn attach_console(&self, _: Request<tonic::Streaming<AttachConsoleRequest>>) -> R<Self::AttachConsoleStream> {
        Err(Status::unimplemented("a VEEM attaches consoles as a client (HostConsole)"))
    }

    type WatchEventsStream = BoxStream<HostEvent>;
    async fn watch_events(&self, _: Request<WatchEventsRequest>) -> R<Self::WatchEventsStream> {
        unscripted("WatchEvents")
    }
}

/// A fake console: `console of VEE at HOST` first, then what is typed,
/// echoed back; it ends when the host no longer runs the VEE (checked
/// every 10 ms), as a real one ends when the domain stops or leaves.
#[tonic::async_trait]
impl HostConsole for FakeVhi {
    async fn open_console(&self, vee_id: &str, _force: bool, mut input: ConsoleInput) -> Result<ConsoleStream, Status> {
        use futures::StreamExt;
        if !self.runs(vee_id) {
            return Err(Status::not_found(format!("no domain of VEE {vee_id} on {}", self.name)));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let (host, vee) = (self.clone(), vee_id.to_string());
        let banner = format!("console of {vee} at {}\r\n", host.name).into_bytes();
        tokio::spawn(async move {
            if tx.send(Ok(ConsoleOutput::Data(banner))).await.is_err() {
                return;
            }
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(10));
            loop {
                tokio::select! {
                    typed = input.next() => match typed {
                        Some(data) => if tx.send(Ok(ConsoleOutput::Data(data))).await.is_err() { return },
                        None => return,
                    },
                    _ = tick.tick() => if !host.runs(&vee) { return },
                }
            }
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}
