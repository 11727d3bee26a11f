//! Test double of a VEEH: a real VHI gRPC server on loopback whose answers a
//! test scripts (how many restores fail, and how), and which records the
//! calls it got. The workflows' unit tests drive the VEEM against a few of
//! these, so they cover the VEEM's failure branches without libvirt; the
//! end-to-end tests in `tests/` run the real VEEH.

// tonic's handlers return its large `Status` as their error.
#![allow(clippy::result_large_err)]

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::Stream;
use interfaces::vhi::vhi_server::{Vhi, VhiServer};
use interfaces::vhi::*;
use tonic::{Request, Response, Status};

/// What a fake host answers and what it saw.
#[derive(Debug, Default)]
pub struct Script {
    /// The next this many Restore calls fail with `restore_error`.
    pub failing_restores: u32,
    /// The status of a failing Restore (default: libvirt's lookup race).
    pub restore_error: Option<(tonic::Code, String)>,
    /// VEEs whose domain runs here.
    pub running: BTreeSet<String>,
    /// Every call: `restore <vee> fence=<owner>`, `destroy <vee>`, ...
    pub calls: Vec<String>,
}

/// One fake VEEH; clone it to keep a handle on its script.
#[derive(Clone, Default)]
pub struct FakeVhi {
    pub name: String,
    pub script: Arc<Mutex<Script>>,
}

impl FakeVhi {
    /// Serves a new fake host `name` on a free loopback port; returns it and
    /// its endpoint (`http://127.0.0.1:PORT`).
    pub async fn start(name: &str) -> (FakeVhi, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let fake = FakeVhi {
            name: name.into(),
            ..Default::default()
        };
        let served = fake.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(VhiServer::new(served))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        (fake, endpoint)
    }

    /// The calls this host got, in order.
    pub fn calls(&self) -> Vec<String> {
        self.script.lock().unwrap().calls.clone()
    }

    fn note(&self, call: String) -> std::sync::MutexGuard<'_, Script> {
        let mut s = self.script.lock().unwrap();
        s.calls.push(call);
        s
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
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn unscripted<T>(what: &str) -> R<T> {
    Err(Status::unimplemented(format!("fake VEEH: {what} is not scripted")))
}

#[tonic::async_trait]
impl Vhi for FakeVhi {
    async fn host_info(&self, _: Request<Empty>) -> R<HostInfoReply> {
        Ok(Response::new(HostInfoReply {
            host: self.name.clone(),
            vcpus: 4,
            memory_mib: 4096,
            disk_gib: 100,
            ..Default::default()
        }))
    }
    async fn prepare(&self, r: Request<VeeSpec>) -> R<PrepareReply> {
        drop(self.note(format!("prepare {}", r.get_ref().vee_id)));
        Ok(Response::new(PrepareReply::default()))
    }
    async fn create(&self, r: Request<VeeSpec>) -> R<VeeStatus> {
        drop(self.note(format!("create {}", r.get_ref().vee_id)));
        Ok(self.status(&r.get_ref().vee_id, false))
    }
    async fn start(&self, r: Request<VeeRef>) -> R<VeeStatus> {
        let id = r.into_inner().vee_id;
        self.note(format!("start {id}")).running.insert(id.clone());
        Ok(self.status(&id, true))
    }
    async fn shutdown(&self, _: Request<ShutdownRequest>) -> R<VeeStatus> {
        unscripted("Shutdown")
    }
    async fn destroy(&self, r: Request<DestroyRequest>) -> R<VeeStatus> {
        let id = r.into_inner().vee_id;
        self.note(format!("destroy {id}")).running.remove(&id);
        Ok(self.status(&id, false))
    }
    async fn suspend(&self, _: Request<VeeRef>) -> R<VeeStatus> {
        unscripted("Suspend")
    }
    async fn resume(&self, _: Request<VeeRef>) -> R<VeeStatus> {
        unscripted("Resume")
    }
    async fn checkpoint(&self, _: Request<CheckpointRequest>) -> R<CheckpointRecord> {
        unscripted("Checkpoint")
    }
    async fn restore(&self, r: Request<RestoreRequest>) -> R<VeeStatus> {
        let r = r.into_inner();
        let id = r.spec.map(|s| s.vee_id).unwrap_or_default();
        let mut s = self.note(format!("restore {id} fence={}", r.fence_owner));
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
    async fn prepare_incoming(&self, _: Request<VeeSpec>) -> R<IncomingTarget> {
        unscripted("PrepareIncoming")
    }
    async fn complete_incoming(&self, _: Request<VeeRef>) -> R<VeeStatus> {
        unscripted("CompleteIncoming")
    }
    async fn abort_incoming(&self, _: Request<VeeRef>) -> R<VeeStatus> {
        unscripted("AbortIncoming")
    }
    type MigrateOutStream = BoxStream<MigrationProgress>;
    async fn migrate_out(&self, _: Request<MigrateOutRequest>) -> R<Self::MigrateOutStream> {
        unscripted("MigrateOut")
    }
    async fn stats(&self, _: Request<VeeRef>) -> R<VeeStats> {
        unscripted("Stats")
    }
    async fn list_domains(&self, _: Request<Empty>) -> R<DomainList> {
        let s = self.script.lock().unwrap();
        let domains = s
            .running
            .iter()
            .map(|id| DomainInfo {
                vee_id: id.clone(),
                state: VeeState::Running as i32,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(DomainList { domains }))
    }
    async fn console(&self, _: Request<ConsoleRequest>) -> R<ConsoleReply> {
        unscripted("Console")
    }
    type WatchEventsStream = BoxStream<HostEvent>;
    async fn watch_events(&self, _: Request<Empty>) -> R<Self::WatchEventsStream> {
        unscripted("WatchEvents")
    }
}

/// A `standard` service of one 1-vCPU, 512 MiB VEE, penalty 36 per hour.
pub const STANDARD: &str = r#"
[service]
name = "shop"
provider = "acme"
[sla]
guarantee = "standard"
penalty_per_hour = 36.0
[[component]]
name = "vm"
vcpus = 1
memory_mib = 512
disk_gib = 1
image = "sha256:5555555555555555555555555555555555555555555555555555555555555555"
"#;

/// A VEEM over fake VEEHs, with a temporary database: the harness of the
/// workflows' unit tests.
pub struct FakeSite {
    pub veem: Arc<crate::manager::Veem>,
    pub hosts: Vec<FakeVhi>,
    _dir: tempfile::TempDir,
}

impl FakeSite {
    /// A site `site-a` with fake hosts `names` (4 vCPUs, 4096 MiB each),
    /// registered with the planner; `extra` is appended to the VEEM's
    /// configuration (e.g. a `[recovery]` table).
    pub async fn start(names: &[&str], extra: &str) -> FakeSite {
        let dir = tempfile::tempdir().unwrap();
        let mut hosts = Vec::new();
        let mut cfg = format!(
            "site_id = \"site-a\"\nlisten = \"127.0.0.1:1\"\ndb = \"{}\"\nimage_repo = \"http://127.0.0.1:1\"\n",
            dir.path().join("db").display()
        );
        let mut tables = String::new();
        for n in names {
            let (fake, endpoint) = FakeVhi::start(n).await;
            tables.push_str(&format!("[[hosts]]\nname = \"{n}\"\nendpoint = \"{endpoint}\"\n"));
            hosts.push(fake);
        }
        cfg.push_str(extra);
        cfg.push_str(&tables);
        let veem = crate::manager::Veem::open(crate::config::VeemConfig::parse(&cfg).unwrap()).unwrap();
        for n in names {
            let spec = crate::planner::HostSpec::new(*n, crate::planner::Resources::new(4, 4096, 100), "site-a", "site-a");
            veem.planner.lock().unwrap().add_host(spec).unwrap();
        }
        FakeSite { veem, hosts, _dir: dir }
    }

    /// A restart: this VEEM goes, another opens the same database over
    /// the same hosts.
    pub fn restart(self) -> FakeSite {
        let FakeSite { veem, hosts, _dir } = self;
        let cfg = veem.config().clone();
        drop(veem);
        let veem = crate::manager::Veem::open(cfg).unwrap();
        FakeSite { veem, hosts, _dir }
    }

    /// The fake host `name`.
    pub fn host(&self, name: &str) -> &FakeVhi {
        self.hosts.iter().find(|h| h.name == name).unwrap()
    }

    /// Admits `manifest` (TOML) as Deploy does, and records its VEEs as
    /// running on their planned hosts (without calling them), each with a
    /// checkpoint. Returns the VEE IDs.
    pub fn running_service(&self, manifest: &str) -> Vec<String> {
        use crate::model::{CheckpointRec, Location, VeeState};
        use crate::planner::Admission;
        use crate::store::Tree;
        let m = interfaces::manifest::Manifest::from_toml(manifest).unwrap();
        let req = self.veem.request(&m, &uuid::Uuid::new_v4().to_string());
        let admitted = match self.veem.planner.lock().unwrap().admit(&req) {
            Admission::Accepted(a) => a,
            other => panic!("not admitted: {other:?}"),
        };
        let (svc, vees) = self.veem.admission_records(&m, manifest, &req, &admitted, None);
        // As Deploy does.
        self.veem.commit_admission(&svc, &vees).unwrap();
        for mut v in vees.clone() {
            v.state = VeeState::Running;
            let Location::Host(h) = &v.location else { panic!("{v:?}") };
            self.host(h).script.lock().unwrap().running.insert(v.id.clone());
            self.veem.save_vee(&v).unwrap();
            let cp = CheckpointRec::new(&CheckpointRecord {
                checkpoint_id: uuid::Uuid::new_v4().to_string(),
                vee_id: v.id.clone(),
                memory_blob: format!("sha256:{}", "1".repeat(64)),
                taken_at_unix_ms: crate::model::now_ms(),
                host: h.clone(),
                ..Default::default()
            });
            self.veem.store.put(Tree::Checkpoints, &cp.id, &cp).unwrap();
        }
        vees.into_iter().map(|v| v.id).collect()
    }
}
