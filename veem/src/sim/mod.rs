//! The simulation ports (issue 37; the cargo feature `sim`, and the unit
//! tests): in-memory implementations of the VEEM's ports (`crate::ports`)
//! and `FakeSite`, a VEEM over them with its database in memory: fake
//! VEEHs (each implements the VHI service trait, answers as a test or a
//! simulation scripts it and records the calls it got), a fake image
//! repository, peer sites that are other in-process VEEMs (or silent), and
//! a clock that moves when told or follows the runtime's (virtual under a
//! paused runtime). The workflows' unit tests run on them, so can a
//! simulator or a benchmark drive the same workflows and loops; they cover
//! the VEEM's failure branches without libvirt or a network, and the
//! end-to-end tests in `tests/` run the real daemons.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use interfaces::vhi::CheckpointRecord;
use interfaces::BlobId;

use crate::ports::{Clock, HostVhi, ImageRepository, Ports};

mod engine_contract;
mod host;
mod observed;
mod peer;

pub use engine_contract::engine_contract;
pub use host::FakeVhi;
pub use observed::ObservedEngine;
pub use peer::{local_peer, FakePeers, LocalPeer, SilentPeer};

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

/// The image repository's fake: the blobs it holds; `down` makes every
/// call fail as an unreachable repository does.
#[derive(Default)]
pub struct FakeRepo {
    pub blobs: Mutex<BTreeSet<String>>,
    pub down: AtomicBool,
    /// `pin BLOB NAME` for each pin.
    pub pins: Mutex<Vec<String>>,
    /// `share BLOB SITE` for each share.
    pub shares: Mutex<Vec<String>>,
    /// Peer sites' repositories by site ID: a blob replicated to one is in
    /// its `blobs` (none: replication only recorded in `shares`).
    pub peers: Mutex<std::collections::HashMap<String, Arc<FakeRepo>>>,
    /// Replication refused (as a peer's repository that is down).
    pub refuse_replication: AtomicBool,
    /// Replication held (a slow copy): it waits while this is set.
    pub hold_replication: AtomicBool,
    /// A pin of a blob not in `blobs` refused, as the real repository
    /// does (off by default: most tests pin what a fake host made).
    pub strict_pins: AtomicBool,
}

impl FakeRepo {
    fn reachable(&self) -> anyhow::Result<()> {
        if self.down.load(Ordering::SeqCst) {
            anyhow::bail!("image repository http://127.0.0.1:1: connection refused");
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl ImageRepository for FakeRepo {
    /// Every stored blob is public here: ownership is the real
    /// repository's (its own tests, and the e2e `image_ownership`).
    async fn grant_for(&self, id: &BlobId, _provider: &str) -> anyhow::Result<bool> {
        self.reachable()?;
        Ok(self.blobs.lock().unwrap().contains(&id.to_string()))
    }
    async fn share(&self, id: &BlobId, site: &str) -> anyhow::Result<()> {
        self.reachable()?;
        self.shares.lock().unwrap().push(format!("share {id} {site}"));
        Ok(())
    }
    async fn pin(&self, id: &BlobId, pin: &str) -> anyhow::Result<()> {
        self.reachable()?;
        if self.strict_pins.load(Ordering::SeqCst) && !self.blobs.lock().unwrap().contains(&id.to_string()) {
            anyhow::bail!("blob {id} not found");
        }
        self.pins.lock().unwrap().push(format!("pin {id} {pin}"));
        Ok(())
    }
    async fn unpin(&self, id: &BlobId, pin: &str) -> anyhow::Result<()> {
        self.reachable()?;
        self.pins.lock().unwrap().retain(|p| p != &format!("pin {id} {pin}"));
        Ok(())
    }
    async fn replicate(&self, id: &BlobId, site: &str) -> anyhow::Result<()> {
        self.reachable()?;
        while self.hold_replication.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        if self.refuse_replication.load(Ordering::SeqCst) {
            anyhow::bail!("replicate {id} to {site:?}: the peer's repository refused it: 502 Bad Gateway");
        }
        self.shares.lock().unwrap().push(format!("replicate {id} {site}"));
        if let Some(peer) = self.peers.lock().unwrap().get(site) {
            peer.blobs.lock().unwrap().insert(id.to_string());
        }
        Ok(())
    }
    async fn forget_checkpoint(&self, site: &str, checkpoint_id: &str, _blobs: &[BlobId]) -> anyhow::Result<()> {
        self.reachable()?;
        self.shares.lock().unwrap().push(format!("forget {site} {checkpoint_id}"));
        Ok(())
    }
}

/// A clock a test sets. It starts at the system's time and, until
/// [`FakeClock::follow_runtime`], moves only when told; its waits are the
/// runtime's timers. Following the runtime, it moves with tokio's clock
/// too: real time, or virtual time under `#[tokio::test(start_paused =
/// true)]`, where the runtime jumps to the next timer whenever every task
/// waits (a day of a site in seconds).
pub struct FakeClock {
    /// Milliseconds since the Unix epoch at `since`, or now when `since`
    /// is `None`.
    base_ms: AtomicI64,
    since: Mutex<Option<tokio::time::Instant>>,
    /// The waits asked of it, in order.
    asked: Mutex<Vec<std::time::Duration>>,
}

impl FakeClock {
    /// A clock at the system's time, moving only when told.
    pub fn new() -> Self {
        Self {
            base_ms: AtomicI64::new(chrono::Utc::now().timestamp_millis()),
            since: Mutex::new(None),
            asked: Mutex::new(Vec::new()),
        }
    }

    /// The waits asked of this clock so far (what a workflow waited for
    /// on it, not on the runtime's own timers).
    pub fn waits(&self) -> Vec<std::time::Duration> {
        self.asked.lock().unwrap().clone()
    }

    /// Moves the clock `ms` milliseconds on.
    pub fn advance_ms(&self, ms: i64) {
        self.base_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// From now on the clock also moves with the runtime's clock.
    pub fn follow_runtime(&self) {
        let mut since = self.since.lock().unwrap();
        if since.is_none() {
            *since = Some(tokio::time::Instant::now());
        }
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        let moved = self.since.lock().unwrap().map_or(0, |t| t.elapsed().as_millis() as i64);
        self.base_ms.load(Ordering::SeqCst) + moved
    }

    /// The runtime's timer: real time, as the workflows' unit tests were
    /// written for (a test that does not follow the runtime moves the
    /// time it reads by itself), or virtual time in a paused runtime.
    fn sleep(&self, d: std::time::Duration) -> futures::future::BoxFuture<'static, ()> {
        self.asked.lock().unwrap().push(d);
        Box::pin(tokio::time::sleep(d))
    }
}

/// A VEEM over fake VEEHs, with a temporary database: the harness of the
/// workflows' unit tests.
pub struct FakeSite {
    pub veem: Arc<crate::manager::Veem>,
    pub hosts: Vec<FakeVhi>,
    pub repo: Arc<FakeRepo>,
    pub peers: FakePeers,
    pub clock: Arc<FakeClock>,
    /// The site's database, in memory: a restart opens it again.
    store: crate::store::Store,
    /// The repository port the VEEM calls: `repo`, or a real repository
    /// ([`FakeSite::start_with_repo`]).
    repo_port: Arc<dyn ImageRepository>,
}

impl FakeSite {
    /// A site `site-a` with fake hosts `names` (4 vCPUs, 4096 MiB each),
    /// registered with the planner; `extra` is appended to the VEEM's
    /// configuration (e.g. a `[recovery]` table).
    pub async fn start(names: &[&str], extra: &str) -> FakeSite {
        Self::start_site("site-a", names, extra)
    }

    /// [`FakeSite::start`] for site `site_id`.
    pub fn start_site(site_id: &str, names: &[&str], extra: &str) -> FakeSite {
        let store = crate::store::Store::on(Arc::new(crate::store::MemoryEngine::default()), "memory").unwrap();
        Self::start_on(site_id, names, extra, store)
    }

    /// [`FakeSite::start_site`] over database `store` (e.g. on a real
    /// etcd cluster).
    pub fn start_on(site_id: &str, names: &[&str], extra: &str, store: crate::store::Store) -> FakeSite {
        let sized: Vec<(&str, crate::planner::Resources)> =
            names.iter().map(|n| (*n, crate::planner::Resources::new(4, 4096, 100))).collect();
        Self::start_sized_on(site_id, &sized, extra, store)
    }

    /// [`FakeSite::start`] with hosts of the given capacities in the
    /// planner (vCPUs, MiB, GiB), e.g. a host that runs ten VEEs.
    pub async fn start_sized(hosts: &[(&str, crate::planner::Resources)], extra: &str) -> FakeSite {
        let store = crate::store::Store::on(Arc::new(crate::store::MemoryEngine::default()), "memory").unwrap();
        Self::start_sized_on("site-a", hosts, extra, store)
    }

    /// [`FakeSite::start_site`] whose VEEM calls repository `repo` (e.g.
    /// a real image repository's client, for a benchmark) instead of the
    /// fake one (`FakeSite::repo` is then not called).
    pub fn start_with_repo(site_id: &str, names: &[&str], extra: &str, repo: Arc<dyn ImageRepository>) -> FakeSite {
        let store = crate::store::Store::on(Arc::new(crate::store::MemoryEngine::default()), "memory").unwrap();
        let sized: Vec<(&str, crate::planner::Resources)> =
            names.iter().map(|n| (*n, crate::planner::Resources::new(4, 4096, 100))).collect();
        Self::start_ported(site_id, &sized, extra, store, Some(repo))
    }

    fn start_sized_on(site_id: &str, sized: &[(&str, crate::planner::Resources)], extra: &str, store: crate::store::Store) -> FakeSite {
        Self::start_ported(site_id, sized, extra, store, None)
    }

    fn start_ported(
        site_id: &str,
        sized: &[(&str, crate::planner::Resources)],
        extra: &str,
        store: crate::store::Store,
        repo_port: Option<Arc<dyn ImageRepository>>,
    ) -> FakeSite {
        let names: Vec<&str> = sized.iter().map(|(n, _)| *n).collect();
        let mut cfg = format!(
            "site_id = \"{site_id}\"\nlisten = \"127.0.0.1:1\"\ndb = \"/nonexistent/{site_id}.db\"\nimage_repo = \"http://127.0.0.1:1\"\n"
        );
        let mut tables = String::new();
        let hosts: Vec<FakeVhi> = names.iter().map(|n| FakeVhi::new(n, site_id)).collect();
        for n in &names {
            tables.push_str(&format!("[[hosts]]\nname = \"{n}\"\nendpoint = \"http://127.0.0.1:1\"\n"));
        }
        cfg.push_str(extra);
        cfg.push_str(&tables);
        let repo = Arc::new(FakeRepo::default());
        let repo_port = repo_port.unwrap_or_else(|| repo.clone());
        let peers = FakePeers::default();
        let clock = Arc::new(FakeClock::new());
        let cfg = crate::config::VeemConfig::parse(&cfg).unwrap();
        let veem = crate::manager::Veem::with_store(cfg, Self::ports(&hosts, &repo_port, &peers, &clock), store.clone()).unwrap();
        for (n, capacity) in sized {
            let spec = crate::planner::HostSpec::new(*n, *capacity, site_id, site_id);
            veem.core.planner.lock().unwrap().add_host(spec).unwrap();
        }
        FakeSite {
            veem,
            hosts,
            repo,
            peers,
            clock,
            store,
            repo_port,
        }
    }

    fn ports(hosts: &[FakeVhi], repo: &Arc<dyn ImageRepository>, peers: &FakePeers, clock: &Arc<FakeClock>) -> Ports {
        Ports {
            hosts: hosts
                .iter()
                .map(|h| (h.name.clone(), Arc::new(h.clone()) as Arc<HostVhi>))
                .collect(),
            peers: Arc::new(peers.clone()),
            repo: repo.clone(),
            registries: Arc::new(interfaces::registry::Registries::new(&[]).expect("no registries")),
            clock: clock.clone(),
            metrics: Default::default(),
        }
    }

    /// Another VEEM of this site beside this one, over the same database,
    /// hosts, repository, peers and clock (as a standby is).
    pub fn another_veem(&self) -> Arc<crate::manager::Veem> {
        let cfg = self.veem.core.config().clone();
        crate::manager::Veem::with_store(
            cfg,
            Self::ports(&self.hosts, &self.repo_port, &self.peers, &self.clock),
            self.store.clone(),
        )
        .unwrap()
    }

    /// A restart: this VEEM goes, another opens the same database over
    /// the same hosts, repository, peers and clock.
    pub fn restart(self) -> FakeSite {
        let cfg = self.veem.core.config().clone();
        self.restart_as(cfg).unwrap()
    }

    /// [`FakeSite::restart`] with configuration `cfg` (e.g. another
    /// site's ID over the same database).
    pub fn restart_as(self, cfg: crate::config::VeemConfig) -> anyhow::Result<FakeSite> {
        let FakeSite {
            veem,
            hosts,
            repo,
            peers,
            clock,
            store,
            repo_port,
        } = self;
        drop(veem);
        let veem = crate::manager::Veem::with_store(cfg, Self::ports(&hosts, &repo_port, &peers, &clock), store.clone())?;
        Ok(FakeSite {
            veem,
            hosts,
            repo,
            peers,
            clock,
            store,
            repo_port,
        })
    }

    /// Makes `other` a peer of this site: this site reaches it as
    /// `other`'s site ID with token `token`, which `other` must map to
    /// role peer (its configuration's `[[tokens]]`).
    pub fn peer_with(&self, other: &FakeSite, token: &str) {
        let id = other.veem.core.config().site_id.clone();
        let peer = local_peer(crate::api::server::VmiService::handler(other.veem.clone()), token);
        self.peers.0.lock().unwrap().insert(id, Arc::new(peer));
    }

    /// Makes `other`'s repository the one this site's replicates to as
    /// `other`'s site ID (the image repository's `[[peers]]`).
    pub fn replicates_to(&self, other: &FakeSite) {
        let id = other.veem.core.config().site_id.clone();
        self.repo.peers.lock().unwrap().insert(id, other.repo.clone());
    }

    /// The fake host `name`.
    pub fn host(&self, name: &str) -> &FakeVhi {
        self.hosts.iter().find(|h| h.name == name).unwrap()
    }

    /// Admits `manifest` (TOML) as Deploy does, and records its VEEs as
    /// running on their planned hosts (without calling them), each with a
    /// checkpoint. A `full` service's spares at a peer site are taken as
    /// offered by site `site-z` (nothing asks it). Returns the VEE IDs.
    pub fn running_service(&self, manifest: &str) -> Vec<String> {
        use crate::model::{CheckpointRec, Location, VeeState};
        use crate::planner::{Admission, PeerSpare};
        use crate::store::Tree;
        let m = interfaces::manifest::Manifest::from_toml(manifest).unwrap();
        let mut req = self.veem.deploy.request(&m, &uuid::Uuid::new_v4().to_string());
        if m.sla.guarantee == interfaces::manifest::GuaranteeLevel::Full {
            req.peer_spare = PeerSpare::Offered { site: "site-z".into() };
        }
        let admitted = match self.veem.core.planner.lock().unwrap().admit(&req) {
            Admission::Accepted(a) => a,
            other => panic!("not admitted: {other:?}"),
        };
        let (mut svc, mut vees) = self.veem.deploy.admission_records(&m, manifest, &req, Some(&admitted), None);
        // As Deploy does: the networks assigned, then the admission in one
        // commit.
        let one = self.veem.networks.ipam.try_lock().expect("no other admission under way");
        self.veem.networks.assign_networks(&one, &m, &mut svc, &mut vees).unwrap();
        self.veem.core.commit_admission(&svc, &vees).unwrap();
        for mut v in vees.clone() {
            v.state = VeeState::Running;
            let Location::Host(h) = &v.location else { panic!("{v:?}") };
            self.host(h).script.lock().unwrap().running.insert(v.id.clone());
            self.veem.core.save_vee(&v).unwrap();
            let cp = CheckpointRec::new(&CheckpointRecord {
                checkpoint_id: uuid::Uuid::new_v4().to_string(),
                vee_id: v.id.clone(),
                memory_blob: format!("sha256:{}", "1".repeat(64)),
                take_time: interfaces::time::timestamp_ms(self.clock.now_ms()),
                host: h.clone(),
                ..Default::default()
            });
            self.veem.core.store.put(Tree::Checkpoints, &cp.id, &cp).unwrap();
        }
        vees.into_iter().map(|v| v.id).collect()
    }
}

/// Polls `done` every 10 ms for up to 5 s; panics naming `what` when it
/// never holds (background tasks: deploys, migrations, recoveries).
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{what}: not after 5 s");
}

impl FakeSite {
    /// The replication of checkpoint `id` as its record holds it (panics
    /// when there is no such record).
    pub fn checkpoint_replication(&self, id: &str) -> crate::domain::ReplicationRec {
        self.veem
            .core
            .store
            .get::<crate::model::CheckpointRec>(crate::store::Tree::Checkpoints, id)
            .unwrap()
            .unwrap()
            .replication
    }

    /// The events of VEE `vee` as `kind: detail`, oldest first.
    pub fn events(&self, vee: &str) -> Vec<String> {
        let all = self.veem.core.store.events().unwrap();
        all.into_iter()
            .filter(|e| e.vee_id == vee)
            .map(|e| format!("{}: {}", e.kind, e.detail))
            .collect()
    }

    /// The migration `id` once it ended (done, failed or rejected).
    pub async fn finished(&self, id: &str) -> crate::model::MigrationRec {
        eventually("migration ended", || !self.veem.migration.migration(id).unwrap().state.is_open()).await;
        self.veem.migration.migration(id).unwrap()
    }

    /// A migration of `vee` to host `to` as a VEEM that died mid-way
    /// leaves it: recorded running, the VEE migrating, nothing more (the
    /// hosts not asked). The migration's record.
    pub fn migration_cut_short(&self, vee: &str, to: &str) -> crate::model::MigrationRec {
        use crate::model::{MigrationState, VeeState};
        use crate::workflows::migration::{Dest, Proposer};
        let mut m = self
            .veem
            .migration
            .propose(vee, Dest::Host(to.into()), "maintenance", Proposer::Operator)
            .unwrap();
        m.advance(MigrationState::Approved).unwrap();
        m.advance(MigrationState::Running).unwrap();
        self.veem.core.store.put(crate::store::Tree::Migrations, &m.id, &m).unwrap();
        let mut v = self.veem.core.vee(vee).unwrap();
        self.veem.core.transition(&mut v, VeeState::Migrating, "to the other host").unwrap();
        m
    }

    /// Proposes (as the operator, for maintenance) and approves moving
    /// `vee` to host `to`; the migration once it ended.
    pub async fn migrate_to_host(&self, vee: &str, to: &str) -> crate::model::MigrationRec {
        use crate::workflows::migration::{Dest, Proposer};
        let m = self
            .veem
            .migration
            .propose(vee, Dest::Host(to.into()), "maintenance", Proposer::Operator)
            .unwrap();
        self.veem.migration.approve(&m.id, "operator").unwrap();
        self.finished(&m.id).await
    }
}
