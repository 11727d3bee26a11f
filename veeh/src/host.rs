//! A VEE host: the operations behind the VHI, independent of gRPC.
//! Lifecycle and images here; checkpoints in `checkpoint`, live migration in
//! `migration`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use interfaces::vhi::{self, CompatibilityProfile, HostEvent, HostEventKind, VeeSpec, VeeState};
use tokio::sync::broadcast;

use crate::accel::Accel;
use crate::config::VeehConfig;
use crate::domain_xml::{self, DomainSpec};
pub use crate::error::ForeignCopy;
use crate::error::HostError;
use crate::hypervisor::{DomainState, Hypervisor};
use crate::image_cache::ImageCache;
use crate::qemu_img;
use crate::repository::Repository;
use crate::vee_store::{VeeRecord, VeeStore};

mod guest;
mod images;

pub use images::ImagePaths;

/// How long a restore or start waits for another VEEH's copy of the same
/// VEE to vanish from a shared libvirtd.
pub const FOREIGN_COPY_WAIT: Duration = Duration::from_secs(30);

/// See the module documentation.
pub struct Host {
    pub cfg: VeehConfig,
    pub accel: Accel,
    pub hv: Arc<Hypervisor>,
    pub cache: ImageCache,
    /// Checkpoint chunks kept on this host (`crate::chunks::cache`).
    pub chunks: Arc<crate::chunks::ChunkCache>,
    pub repo: Repository,
    pub vees: VeeStore,
    pub events: broadcast::Sender<HostEvent>,
    /// Read once at start: libvirt's capabilities call is expensive (and
    /// HostInfo is the VEEM's heartbeat).
    facts: crate::hypervisor::HostFacts,
    /// One lifecycle operation at a time per VEE: a retried call (say from
    /// a restarted VEEM) waits for the first and then finds it done.
    vee_locks: std::sync::Mutex<interfaces::locks::LockMap>,
    /// The last CPU load measurement ([`Host::cpu_load`]), and whether
    /// one is under way.
    load: Arc<std::sync::Mutex<LoadSample>>,
    measuring: Arc<std::sync::atomic::AtomicBool>,
    /// The KPIs the VEEs here report (`crate::kpi`).
    kpis: Arc<crate::kpi::Kpis>,
    /// The VEEs a live migration out of this host is under way for
    /// ([`Host::migrate_out`]), as ListDomains reports them.
    pub(crate) outgoing: OutgoingSet,
    /// HostInfo's `domains_generation`: changed by the state watch
    /// whenever the owned domains or their states change
    /// ([`Host::spawn_state_watch`]); from the start time in µs, so that a
    /// restarted VEEH does not repeat the values of the one before.
    domains_generation: Arc<std::sync::atomic::AtomicU64>,
}

/// The VEEs a live migration out of this host is under way for (by ID).
pub(crate) type OutgoingSet = Arc<std::sync::Mutex<std::collections::HashSet<String>>>;

/// One measurement of the VEEs' CPU time, and the load it gave.
#[derive(Clone, Copy, Debug, Default)]
struct LoadSample {
    at: Option<std::time::Instant>,
    /// The VEEs' CPU time then (s), summed.
    cpu_seconds: f64,
    /// vCPU-seconds per second over the host's vCPUs.
    load: f64,
}

/// The shortest period a load measurement spans: HostInfo (the heartbeat,
/// every second or so) gets the last value in between.
const LOAD_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// The first `domains_generation` of this VEEH: µs since the Unix epoch
/// (never 0, which means "not kept").
fn first_generation() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_micros()).unwrap_or(0).max(1)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// VHI state of a libvirt domain state.
pub fn vhi_state(s: Option<DomainState>) -> VeeState {
    match s {
        None => VeeState::Absent,
        Some(DomainState::Running) => VeeState::Running,
        Some(DomainState::Paused) => VeeState::Paused,
        Some(DomainState::Shutoff) => VeeState::Shutoff,
        Some(DomainState::Crashed) => VeeState::Crashed,
        Some(DomainState::Other) => VeeState::Unspecified,
    }
}

/// A host event of `vee_id`, now.
pub(crate) fn host_event(vee_id: &str, kind: HostEventKind, detail: String) -> HostEvent {
    HostEvent {
        vee_id: vee_id.into(),
        kind: kind as i32,
        detail,
        time: interfaces::time::timestamp_ms(now_ms()),
    }
}

/// How long a resize waits for the guest's balloon to reach its target.
pub const BALLOON_WAIT: Duration = Duration::from_secs(10);

impl Host {
    /// Opens libvirt, the image cache and the VEE records of `cfg`.
    pub fn open(cfg: VeehConfig) -> Result<Arc<Self>> {
        let accel = Accel::detect(cfg.accel);
        let hv = Arc::new(Hypervisor::open(&cfg.libvirt_uri, &cfg.host)?);
        let registries = Arc::new(interfaces::registry::Registries::new(&cfg.registries)?);
        let repo = Repository::open(&cfg, registries.clone())?;
        let cache = ImageCache::new(&cfg.cache_dir(), cfg.cache_limit >> 20, repo.client().cloned(), registries)?;
        let chunks = crate::chunks::ChunkCache::open(&cfg.cache_dir().join("chunks"), cfg.checkpoint_cache_limit)
            .context("open the checkpoint chunk cache")?
            .counting(hv.metrics.cache_pending.clone());
        let vees = VeeStore::open(&cfg.state_dir)?;
        let (events, _) = broadcast::channel(256);
        let facts = hv.facts()?;
        tracing::info!(host = %cfg.host, uri = %cfg.libvirt_uri, accel = accel.name(), qemu = %facts.qemu_version, machine = %facts.machine, save_formats = ?facts.save_formats, "VEEH ready");
        Ok(Arc::new(Self {
            cfg,
            accel,
            hv,
            cache,
            chunks: Arc::new(chunks),
            repo,
            vees,
            events,
            facts,
            vee_locks: Default::default(),
            load: Default::default(),
            measuring: Default::default(),
            kpis: Default::default(),
            outgoing: Default::default(),
            domains_generation: Arc::new(std::sync::atomic::AtomicU64::new(first_generation())),
        }))
    }

    /// Serialises lifecycle operations on one VEE.
    pub async fn lock_vee(&self, vee_id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let m = interfaces::locks::entry(&mut self.vee_locks.lock().unwrap(), vee_id);
        m.lock_owned().await
    }

    /// Runs a blocking libvirt call off the async runtime.
    pub async fn blocking<T: Send + 'static>(&self, f: impl FnOnce(&Hypervisor) -> Result<T> + Send + 'static) -> Result<T> {
        let hv = self.hv.clone();
        tokio::task::spawn_blocking(move || f(&hv)).await?
    }

    /// libvirt's state of this VEEH's domain of `vee_id` (`None`: no domain).
    pub async fn domain_state(&self, vee_id: &str) -> Result<Option<DomainState>> {
        let id = vee_id.to_string();
        self.blocking(move |hv| hv.state(&id)).await
    }

    /// Errors when this VEEH already runs a domain for `vee_id`; then
    /// [`Host::await_no_foreign_copy`] with `fence`.
    pub async fn ensure_no_domain(&self, vee_id: &str, fence: Option<&str>) -> Result<()> {
        if self.domain_state(vee_id).await?.is_some() {
            return Err(HostError::AlreadyHere {
                vee_id: vee_id.to_string(),
                host: self.cfg.host.clone(),
            }
            .into());
        }
        self.await_no_foreign_copy(vee_id, fence).await
    }

    /// Returns once no other VEEH's copy of `vee_id` is at this libvirtd
    /// (one libvirtd shared by several VEEHs). Such a copy is fenced first
    /// when its owner is `fence` (a VEEH the VEEM declared failed), and
    /// waited for otherwise: it is being destroyed, which takes 1-2 s for a
    /// TCG guest. Two copies never run: a copy still there after
    /// [`FOREIGN_COPY_WAIT`] is [`ForeignCopy`].
    pub async fn await_no_foreign_copy(&self, vee_id: &str, fence: Option<&str>) -> Result<()> {
        let deadline = tokio::time::Instant::now() + FOREIGN_COPY_WAIT;
        loop {
            let id = vee_id.to_string();
            let Some(owner) = self.blocking(move |hv| hv.foreign_owner(&id)).await? else {
                return Ok(());
            };
            if fence == Some(owner.as_str()) {
                let (id, o) = (vee_id.to_string(), owner.clone());
                match self.blocking(move |hv| hv.fence_foreign(&id, &o)).await {
                    Ok(()) => self.event(
                        vee_id,
                        HostEventKind::Fenced,
                        format!("the copy of failed host {owner} was destroyed"),
                    ),
                    // A destroy under way holds the domain's job lock: wait.
                    Err(e) => tracing::warn!(vee = %vee_id, %owner, error = %format!("{e:#}"), "cannot fence the copy yet"),
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ForeignCopy {
                    vee_id: vee_id.to_string(),
                    owner,
                    waited: FOREIGN_COPY_WAIT,
                }
                .into());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The save formats this host writes and reads (probed at start).
    pub fn save_formats(&self) -> &[vhi::SaveFormat] {
        &self.facts.save_formats
    }

    /// Emits a host event to WatchEvents subscribers.
    pub fn event(&self, vee_id: &str, kind: HostEventKind, detail: impl Into<String>) {
        let _ = self.events.send(host_event(vee_id, kind, detail.into()));
    }

    /// The host's compatibility profile (H §4.4): a checkpoint restores only
    /// onto a host whose profile matches.
    pub async fn profile(&self) -> Result<CompatibilityProfile> {
        let facts = self.facts.clone();
        Ok(CompatibilityProfile {
            arch: std::env::consts::ARCH.to_string(),
            machine: facts.machine,
            qemu_version: facts.qemu_version,
            libvirt_version: facts.libvirt_version,
            accel: self.accel.name().to_string(),
            cpu_model: match self.accel {
                Accel::Tcg => "qemu64".into(),
                Accel::Kvm => "host-model".into(),
            },
            save_formats: facts.save_formats.iter().map(|f| *f as i32).collect(),
        })
    }

    pub async fn host_info(&self) -> Result<vhi::HostInfo> {
        Ok(vhi::HostInfo {
            host: self.cfg.host.clone(),
            site_id: self.cfg.site_id.clone(),
            vcpus: self.cfg.capacity.vcpus,
            memory_mib: self.cfg.capacity.memory_mib,
            disk_gib: self.cfg.capacity.disk_gib,
            profile: Some(self.profile().await?),
            libvirt_uri: self.cfg.peer_libvirt_uri().to_string(),
            migration_address: self.cfg.migration_address.clone(),
            vtep: self.cfg.vtep().to_string(),
            cpu_load: self.cpu_load().await,
            domains_generation: self.domains_generation.load(std::sync::atomic::Ordering::Acquire),
        })
    }

    /// The CPU load of this host's VEEs: the CPU time their domains used
    /// since the previous measurement, per second, over the host's vCPUs
    /// (`[capacity] vcpus`). Measured at most every [`LOAD_PERIOD`], in the
    /// background: the answer is the last value and never waits for
    /// libvirt (a domain busy with a job, a restore or a snapshot, holds
    /// its statistics for as long, and the heartbeat that asks must not
    /// miss for it). A VEE that left or arrived in between (a sum that
    /// went down) starts a new period. 0 until the first period ends.
    pub async fn cpu_load(&self) -> f64 {
        use std::sync::atomic::Ordering;
        let last = *self.load.lock().unwrap();
        if last.at.is_some_and(|at| at.elapsed() < LOAD_PERIOD) || self.measuring.swap(true, Ordering::AcqRel) {
            return last.load;
        }
        let ids: Vec<String> = self.vees.list().unwrap_or_default().into_iter().map(|r| r.vee_id).collect();
        let (hv, sample, measuring) = (self.hv.clone(), self.load.clone(), self.measuring.clone());
        let vcpus = f64::from(self.cfg.capacity.vcpus.max(1));
        tokio::task::spawn_blocking(move || {
            let cpu_seconds: f64 = ids.iter().filter_map(|id| hv.counters(id, &[]).ok()).map(|c| c.cpu_seconds).sum();
            let now = std::time::Instant::now();
            let mut s = sample.lock().unwrap();
            let load = match s.at {
                Some(at) if cpu_seconds >= s.cpu_seconds => (cpu_seconds - s.cpu_seconds) / now.duration_since(at).as_secs_f64() / vcpus,
                _ => s.load,
            };
            *s = LoadSample {
                at: Some(now),
                cpu_seconds,
                load,
            };
            measuring.store(false, Ordering::Release);
        });
        last.load
    }

    /// Prepare: images into the cache, the VEE's record and an empty
    /// overlay on the base image. Evicts unused images above the limit.
    pub async fn prepare(&self, spec: &VeeSpec) -> Result<vhi::PrepareResponse> {
        let rec = VeeRecord::from_spec(spec)?;
        let _g = self.lock_vee(&rec.vee_id).await;
        let mut reply = vhi::PrepareResponse::default();
        let paths = self.ensure_images(&rec, &mut reply).await?;
        if let Some(existing) = self.vees.load(&rec.vee_id)? {
            if existing.incoming {
                anyhow::bail!("VEE {} is being received by a migration here", rec.vee_id);
            }
        }
        self.vees.save(&rec)?;
        self.write_seed(&rec).await?;
        let overlay = self.vees.overlay(&rec.vee_id);
        if let (Some(base), false) = (paths.base.clone(), overlay.exists()) {
            let size = rec.disk_gib * 1024 * 1024 * 1024;
            tokio::task::spawn_blocking(move || qemu_img::create_overlay(&base, &overlay, size))
                .await?
                .with_context(|| format!("VEE {}: field `image` ({})", rec.vee_id, rec.image))?;
        }
        let in_use = self.images_in_use()?;
        for id in self.cache.evict(&in_use)? {
            tracing::info!(%id, "evicted from the image cache");
        }
        Ok(reply)
    }

    /// The domain XML of `rec` with this host's paths.
    pub fn domain_spec(&self, rec: &VeeRecord) -> Result<DomainSpec> {
        let paths = self.image_paths(rec)?;
        Ok(DomainSpec {
            vee_id: rec.vee_id.clone(),
            service_id: rec.service_id.clone(),
            owner: self.cfg.host.clone(),
            accel: self.accel,
            vcpus: rec.vcpus,
            memory_mib: rec.memory_mib,
            max_vcpus: rec.max_vcpus,
            max_memory_mib: rec.max_memory_mib,
            disk: paths.base.map(|_| self.vees.overlay(&rec.vee_id)),
            kernel: paths.kernel,
            initrd: paths.initrd,
            cmdline: rec.cmdline.clone(),
            console: self.vees.console(&rec.vee_id),
            seed: rec.cloud_init.as_ref().map(|_| self.vees.seed(&rec.vee_id)),
            nics: rec
                .nics
                .iter()
                .map(|n| domain_xml::NicXml {
                    mac: n.mac.clone(),
                    bridge: crate::network::bridge_of(n.vni, n.overlay_port),
                    mtu: n.mtu,
                })
                .collect(),
        })
    }

    /// Create: prepare if needed and write the domain XML (domains are
    /// transient: Start hands the XML to libvirt).
    pub async fn create(&self, spec: &VeeSpec) -> Result<vhi::VeeStatus> {
        crate::vee_store::check_vee_id(&spec.vee_id)?;
        if self.vees.load(&spec.vee_id)?.is_none() || !self.vees.overlay(&spec.vee_id).exists() && !spec.image.is_empty() {
            self.prepare(spec).await?;
        }
        let _g = self.lock_vee(&spec.vee_id).await;
        let rec = self.vees.get(&spec.vee_id)?;
        let xml = domain_xml::generate(&self.domain_spec(&rec)?);
        std::fs::write(self.vees.dir(&rec.vee_id).join("domain.xml"), xml)?;
        self.event(&rec.vee_id, HostEventKind::Defined, "");
        self.status(&rec.vee_id).await
    }

    /// Starts the created VEE; a VEE already running succeeds (idempotent).
    pub async fn start(&self, vee_id: &str) -> Result<vhi::VeeStatus> {
        let rec = self.vees.get(vee_id)?;
        let _g = self.lock_vee(vee_id).await;
        if self.domain_state(vee_id).await? == Some(DomainState::Running) {
            return self.status(vee_id).await;
        }
        let path = self.vees.dir(vee_id).join("domain.xml");
        let xml = std::fs::read_to_string(&path).with_context(|| format!("VEE {vee_id} is not created on this host"))?;
        self.await_no_foreign_copy(vee_id, None).await?;
        crate::network::ensure_networks(self.cfg.vtep(), &rec.nics).await?;
        if let Err(e) = self.blocking(move |hv| hv.create(&xml)).await {
            // The domain may exist already: started by an earlier call whose
            // caller went away, possibly still starting. Wait for it.
            let mut running = false;
            for _ in 0..40 {
                match self.domain_state(vee_id).await? {
                    Some(DomainState::Running) => {
                        running = true;
                        break;
                    }
                    Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
                    None => break,
                }
            }
            if !running {
                return Err(e);
            }
        }
        tracing::info!(vee = %rec.vee_id, "started");
        self.event(vee_id, HostEventKind::Started, "");
        self.status(vee_id).await
    }

    pub async fn status(&self, vee_id: &str) -> Result<vhi::VeeStatus> {
        let mut st = vhi_state(self.domain_state(vee_id).await?);
        if st == VeeState::Absent && self.vees.load(vee_id)?.is_some() {
            st = VeeState::Defined;
        }
        Ok(vhi::VeeStatus {
            vee_id: vee_id.into(),
            state: st as i32,
            domain: domain_xml::domain_name(vee_id),
        })
    }

    /// Hard stop; with `remove` also deletes the VEE's files and record.
    pub async fn destroy(&self, vee_id: &str, remove: bool) -> Result<vhi::VeeStatus> {
        crate::vee_store::check_vee_id(vee_id)?;
        let _g = self.lock_vee(vee_id).await;
        let id = vee_id.to_string();
        self.blocking(move |hv| hv.destroy(&id)).await?;
        self.release_networks(vee_id).await?;
        if remove {
            self.vees.remove(vee_id)?;
        }
        self.event(
            vee_id,
            HostEventKind::Stopped,
            if remove { "destroyed, files removed" } else { "destroyed" },
        );
        self.status(vee_id).await
    }

    /// Removes the bridges of `vee_id`'s networks that no NIC uses any
    /// more (its domain is gone).
    async fn release_networks(&self, vee_id: &str) -> Result<()> {
        if let Some(rec) = self.vees.load(vee_id)? {
            crate::network::release_networks(&rec.nics).await;
        }
        Ok(())
    }

    /// Resize (VHI): the running VEE's vCPUs and memory (MiB; 0: as it
    /// is) within the maxima its spec set at creation, the guest's balloon
    /// waited for up to [`BALLOON_WAIT`]. Errors: a field above its
    /// maximum (InvalidArgument); the machine or the guest cannot
    /// (FailedPrecondition, the reason; the record keeps the old size).
    pub async fn resize(&self, vee_id: &str, vcpus: u32, memory_mib: u64) -> Result<vhi::VeeStatus> {
        let _g = self.lock_vee(vee_id).await;
        let mut rec = self.vees.get(vee_id)?;
        let (max_vcpus, max_memory_mib) = (rec.max_vcpus.max(rec.vcpus), rec.max_memory_mib.max(rec.memory_mib));
        if vcpus > max_vcpus {
            bail!(HostError::field(
                "vcpus",
                format!("{vcpus} is more than this VEE's maximum of {max_vcpus}")
            ));
        }
        if memory_mib > max_memory_mib {
            bail!(HostError::field(
                "memory_mib",
                format!("{memory_mib} MiB is more than this VEE's maximum of {max_memory_mib} MiB")
            ));
        }
        let id = vee_id.to_string();
        let (v, m) = ((vcpus > 0).then_some(vcpus), (memory_mib > 0).then_some(memory_mib));
        self.blocking(move |hv| hv.resize(&id, v, m, BALLOON_WAIT)).await?;
        (rec.max_vcpus, rec.max_memory_mib) = (max_vcpus, max_memory_mib);
        rec.vcpus = v.unwrap_or(rec.vcpus);
        rec.memory_mib = m.unwrap_or(rec.memory_mib);
        self.vees.save(&rec)?;
        tracing::info!(vee = %vee_id, vcpus = rec.vcpus, memory_mib = rec.memory_mib, "resized");
        self.status(vee_id).await
    }

    pub async fn suspend(&self, vee_id: &str) -> Result<vhi::VeeStatus> {
        let _g = self.lock_vee(vee_id).await;
        let id = vee_id.to_string();
        self.blocking(move |hv| hv.suspend(&id)).await?;
        self.event(vee_id, HostEventKind::Suspended, "");
        self.status(vee_id).await
    }

    pub async fn resume(&self, vee_id: &str) -> Result<vhi::VeeStatus> {
        let _g = self.lock_vee(vee_id).await;
        let id = vee_id.to_string();
        self.blocking(move |hv| hv.resume(&id)).await?;
        self.event(vee_id, HostEventKind::Resumed, "");
        self.sync_guest_clock(vee_id, "resume");
        self.status(vee_id).await
    }

    /// Resource counters of a running VEE.
    pub async fn stats(&self, vee_id: &str) -> Result<vhi::VeeStats> {
        let id = vee_id.to_string();
        let macs: Vec<String> = self
            .vees
            .load(vee_id)?
            .map(|r| r.nics.into_iter().map(|n| n.mac).collect())
            .unwrap_or_default();
        let c = self.blocking(move |hv| hv.counters(&id, &macs)).await?;
        let now = now_ms();
        let kpis = self
            .kpis
            .report(self.hv.uri(), vee_id, now)
            .into_iter()
            .map(|(name, r)| vhi::Kpi {
                name,
                value: r.value,
                time: interfaces::time::timestamp_ms(r.at_ms),
            })
            .collect();
        Ok(vhi::VeeStats {
            kpis,
            vee_id: vee_id.into(),
            cpu_seconds: c.cpu_seconds,
            memory_mib: c.memory_mib,
            disk_read_bytes: c.disk_read_bytes,
            disk_write_bytes: c.disk_write_bytes,
            net_rx_bytes: c.net_rx_bytes,
            net_tx_bytes: c.net_tx_bytes,
            time: interfaces::time::timestamp_ms(now),
        })
    }

    /// The Stats of every VEE whose domain runs here (VHI ListStats), by
    /// VEE ID; a VEE whose counters cannot be read (its domain vanished
    /// meanwhile, or is not running) is left out.
    pub async fn list_stats(&self) -> Result<Vec<vhi::VeeStats>> {
        let doms = self.blocking(|hv| hv.owned_domains()).await?;
        let mut out = Vec::with_capacity(doms.len());
        for d in doms {
            if let Ok(s) = self.stats(&d.vee_id).await {
                out.push(s);
            }
        }
        out.sort_by(|a, b| a.vee_id.cmp(&b.vee_id));
        Ok(out)
    }

    /// What libvirt really runs for this VEEH, each domain marked
    /// `migrating_out` while a live migration of it is under way here.
    pub async fn list_domains(&self) -> Result<Vec<vhi::DomainInfo>> {
        let doms = self.blocking(|hv| hv.owned_domains()).await?;
        let outgoing = self.outgoing.lock().unwrap();
        Ok(doms
            .into_iter()
            .map(|d| vhi::DomainInfo {
                migrating_out: outgoing.contains(&d.vee_id),
                vee_id: d.vee_id,
                domain: d.name,
                state: vhi_state(Some(d.state)) as i32,
            })
            .collect())
    }

    /// The last `tail_bytes` (default 4 KiB) of the VEE's serial console.
    pub fn console(&self, vee_id: &str, tail_bytes: u64) -> Result<String> {
        crate::vee_store::check_vee_id(vee_id)?;
        let data = std::fs::read(self.vees.console(vee_id)).with_context(|| format!("VEE {vee_id}: no console log on this host"))?;
        let n = if tail_bytes == 0 { 4096 } else { tail_bytes as usize };
        let start = data.len().saturating_sub(n);
        Ok(String::from_utf8_lossy(&data[start..]).into_owned())
    }

    /// Polls libvirt every `period` and emits an event for each change of
    /// an owned domain's state (started, stopped, suspended, resumed,
    /// crashed, vanished); any change also moves HostInfo's
    /// `domains_generation` on.
    pub fn spawn_state_watch(self: &Arc<Self>, period: Duration) {
        let host = self.clone();
        tokio::spawn(async move {
            let mut last: std::collections::HashMap<String, DomainState> = Default::default();
            loop {
                tokio::time::sleep(period).await;
                let Ok(doms) = host.blocking(|hv| hv.owned_domains()).await else {
                    continue;
                };
                host.hv.metrics.set_domains(doms.iter().map(|d| d.state.name()));
                let mut now = std::collections::HashMap::new();
                for d in doms {
                    if last.get(&d.vee_id) != Some(&d.state) {
                        host.event(&d.vee_id, HostEventKind::State, d.state.name());
                    }
                    now.insert(d.vee_id, d.state);
                }
                for gone in last.keys().filter(|k| !now.contains_key(*k)) {
                    host.event(gone, HostEventKind::State, "absent");
                }
                if now != last {
                    host.domains_generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                }
                last = now;
            }
        });
    }
}
