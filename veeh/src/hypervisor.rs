//! The VEEH's only door to libvirt: one connection to one libvirtd, domains
//! named `vee-<uuid>` and marked with this VEEH as owner. Every call is
//! blocking; the VHI server runs them on tokio's blocking pool.
//!
//! Several VEEHs may share one libvirtd (the lab does): each sees and
//! touches only the domains whose metadata names it as owner.
//!
//! A domain can vanish between the lookup and any later call on its handle
//! (another VEEH's copy being destroyed on a shared libvirtd, a guest that
//! powers itself off). Every call here treats libvirt's `NoDomain` from a
//! handle it just looked up exactly as if the lookup had found nothing:
//! queries answer "no domain", `destroy` succeeds, and operations that need
//! the domain fail with [`NoDomain`], never with a raw libvirt error.

use std::sync::RwLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use virt::connect::Connect;
use virt::domain::Domain;
use virt::sys;

use crate::domain_xml::{self, domain_name};
use crate::error::HostError;
pub use crate::error::NoDomain;

mod guest;
mod jobs;
pub mod save_formats;
pub use guest::GuestClock;
pub use jobs::completed_job_downtime;
use jobs::job_stats;

/// True when `e` (or any error in its chain) is libvirt's `NoDomain`: the
/// domain does not exist (any more).
pub fn is_no_domain(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<virt::error::Error>()
            .is_some_and(|v| v.code().is(virt::error::ErrorNumber::NoDomain))
            || c.is::<NoDomain>()
    })
}

/// `Ok(None)` for an error that says the domain is gone, the error itself
/// otherwise.
fn gone_as_none<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_no_domain(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// libvirt's last error as a typed error (so that [`is_no_domain`] sees
/// its code) with `what` as context.
fn last_error(what: &'static str) -> anyhow::Error {
    anyhow::Error::new(virt::error::Error::last_error()).context(what)
}

/// libvirt's view of one of our domains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainState {
    Running,
    Paused,
    Shutoff,
    Crashed,
    Other,
}

impl DomainState {
    /// `running`, `paused`, `shutoff`, `crashed` or `other`.
    pub fn name(self) -> &'static str {
        match self {
            DomainState::Running => "running",
            DomainState::Paused => "paused",
            DomainState::Shutoff => "shutoff",
            DomainState::Crashed => "crashed",
            DomainState::Other => "other",
        }
    }
}

/// One domain this VEEH owns, as libvirt reports it.
#[derive(Clone, Debug)]
pub struct OwnedDomain {
    pub vee_id: String,
    pub name: String,
    pub state: DomainState,
    pub service_id: String,
}

/// Resource counters of a running domain.
#[derive(Clone, Debug, Default)]
pub struct DomainCounters {
    /// CPU time used, seconds.
    pub cpu_seconds: f64,
    /// Current memory, MiB.
    pub memory_mib: u64,
    pub disk_read_bytes: u64,
    pub disk_write_bytes: u64,
    /// Bytes the guest received and sent on the NICs asked for.
    pub net_rx_bytes: u64,
    pub net_tx_bytes: u64,
}

/// Versions and machine facts that go into the compatibility profile.
#[derive(Clone, Debug)]
pub struct HostFacts {
    /// QEMU version, e.g. `7.2.0`.
    pub qemu_version: String,
    pub libvirt_version: String,
    /// Canonical machine type `pc` resolves to, e.g. `pc-i440fx-7.2`.
    pub machine: String,
    /// What this host's QEMU and libvirt save in ([`save_formats::probe`]).
    pub save_formats: Vec<interfaces::vhi::SaveFormat>,
}

#[cfg(test)]
type LookupHook = Box<dyn Fn(&Domain) + Send + Sync>;

/// A libvirt connection that reconnects when libvirtd restarts.
pub struct Hypervisor {
    uri: String,
    owner: String,
    conn: RwLock<Connect>,
    /// Each operation's latency, and the domain counts the host's state
    /// watch sets.
    pub metrics: std::sync::Arc<crate::metrics::HostMetrics>,
    /// Test hook: runs right after a domain was looked up, before it is
    /// used (to make it vanish in between).
    #[cfg(test)]
    after_lookup: Option<LookupHook>,
}

fn version_string(v: u32) -> String {
    format!("{}.{}.{}", v / 1_000_000, (v / 1000) % 1000, v % 1000)
}

impl Hypervisor {
    /// Opens `uri` for the VEEH named `owner`. libvirt's own printing of
    /// errors to stderr is switched off: errors come back as values.
    pub fn open(uri: &str, owner: &str) -> Result<Self> {
        virt::error::clear_error_callback();
        let conn = Connect::open(Some(uri)).with_context(|| format!("libvirt {uri}"))?;
        Ok(Self {
            uri: uri.to_string(),
            owner: owner.to_string(),
            conn: RwLock::new(conn),
            metrics: Default::default(),
            #[cfg(test)]
            after_lookup: None,
        })
    }

    /// The libvirt URI this VEEH uses.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Runs `f` (operation `call`, timed in
    /// `veeh_libvirt_call_duration_seconds`) on the connection; if it
    /// fails and the connection is dead (libvirtd restarted), reconnects
    /// once and runs `f` again.
    fn with<T>(&self, call: &'static str, f: impl Fn(&Connect) -> Result<T>) -> Result<T> {
        let started = Instant::now();
        let r = self.with_reconnect(f);
        self.metrics.libvirt_call(call, started.elapsed());
        r
    }

    fn with_reconnect<T>(&self, f: impl Fn(&Connect) -> Result<T>) -> Result<T> {
        let first = {
            let c = self.conn.read().unwrap();
            match f(&c) {
                Ok(v) => return Ok(v),
                Err(e) if c.is_alive().unwrap_or(false) => return Err(e),
                Err(e) => e,
            }
        };
        tracing::warn!(uri = %self.uri, error = %first, "libvirt connection lost; reconnecting");
        let fresh = Connect::open(Some(&self.uri)).with_context(|| format!("reconnect to {}", self.uri))?;
        let old = std::mem::replace(&mut *self.conn.write().unwrap(), fresh);
        // Closing a connection to a dead daemon may fail, and virt's Drop
        // panics on that: let the old handle go without closing it.
        std::mem::forget(old);
        let c = self.conn.read().unwrap();
        f(&c)
    }

    /// The domain named for `vee_id` at this libvirtd, whoever owns it,
    /// and its owner (`None`: no VEEH metadata); `None` when there is no
    /// such domain, or it vanished while its owner was read.
    fn lookup(&self, c: &Connect, vee_id: &str) -> Result<Option<(Domain, Option<String>)>> {
        let dom = match c.lookup_domain_by_name(&domain_name(vee_id)) {
            Ok(d) => d,
            Err(e) if e.code().is(virt::error::ErrorNumber::NoDomain) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        #[cfg(test)]
        if let Some(hook) = &self.after_lookup {
            hook(&dom);
        }
        let Some(xml) = gone_as_none(dom.xml_desc(0).map_err(Into::into))? else {
            return Ok(None);
        };
        let owner = domain_xml::ownership(&xml).map(|o| o.owner);
        Ok(Some((dom, owner)))
    }

    /// Our domain of `vee_id`, `None` when libvirt has none (or it
    /// vanished while we read its owner, or another VEEH owns it).
    fn owned(&self, c: &Connect, vee_id: &str) -> Result<Option<Domain>> {
        Ok(self
            .lookup(c, vee_id)?
            .and_then(|(d, owner)| (owner.as_deref() == Some(self.owner.as_str())).then_some(d)))
    }

    fn no_domain(&self, vee_id: &str) -> NoDomain {
        NoDomain {
            vee_id: vee_id.to_string(),
            domain: domain_name(vee_id),
            owner: self.owner.clone(),
            uri: self.uri.clone(),
        }
    }

    /// Runs `f` on our domain of `vee_id`. Errors with [`NoDomain`] when
    /// there is none, or when it vanishes while `f` uses it.
    fn on_domain<T>(&self, call: &'static str, vee_id: &str, f: impl Fn(&Domain) -> Result<T>) -> Result<T> {
        self.with(call, |c| {
            let d = self.owned(c, vee_id)?.ok_or_else(|| self.no_domain(vee_id))?;
            f(&d).map_err(|e| if is_no_domain(&e) { self.no_domain(vee_id).into() } else { e })
        })
    }

    /// Starts a transient domain from `xml`.
    pub fn create(&self, xml: &str) -> Result<()> {
        self.with("create", |c| {
            c.create_domain_xml(xml, 0).context("create domain")?;
            Ok(())
        })
    }

    /// The state of `vee_id`'s domain; `None` when libvirt has none of ours.
    pub fn state(&self, vee_id: &str) -> Result<Option<DomainState>> {
        self.with("state", |c| match self.owned(c, vee_id)? {
            None => Ok(None),
            Some(d) => Ok(gone_as_none(d.state().map_err(Into::into))?.map(|s| map_state(s.0))),
        })
    }

    /// Hard stop. Succeeds when the domain is already gone, or vanishes
    /// meanwhile.
    pub fn destroy(&self, vee_id: &str) -> Result<()> {
        self.with("destroy", |c| {
            if let Some(d) = self.owned(c, vee_id)? {
                gone_as_none(destroy_domain(&d))?;
            }
            Ok(())
        })
    }

    /// The owner (VEEH name) of a domain of `vee_id` at this libvirtd that
    /// another VEEH owns: on a libvirtd shared by several VEEHs, a copy
    /// left by a failed one. `None` when there is no such domain.
    pub fn foreign_owner(&self, vee_id: &str) -> Result<Option<String>> {
        self.with("foreign_owner", |c| {
            Ok(self.lookup(c, vee_id)?.and_then(|(_, o)| o).filter(|o| *o != self.owner))
        })
    }

    /// Destroys the domain of `vee_id` that VEEH `owner` (not this one)
    /// left at this libvirtd: fencing on the VEEM's word that `owner`
    /// failed. Succeeds when there is none (any more).
    pub fn fence_foreign(&self, vee_id: &str, owner: &str) -> Result<()> {
        self.with("fence_foreign", |c| {
            if let Some((d, Some(o))) = self.lookup(c, vee_id)? {
                if o == owner && o != self.owner {
                    gone_as_none(destroy_domain(&d))?;
                }
            }
            Ok(())
        })
    }

    pub fn suspend(&self, vee_id: &str) -> Result<()> {
        self.on_domain("suspend", vee_id, |d| Ok(d.suspend().map(|_| ())?))
    }

    pub fn resume(&self, vee_id: &str) -> Result<()> {
        self.on_domain("resume", vee_id, |d| Ok(d.resume().map(|_| ())?))
    }

    /// Sets the running domain's online vCPUs (hot-plug or unplug) and its
    /// balloon target (MiB), each when given, and waits up to
    /// `balloon_wait` for the guest's balloon to reach the target.
    /// Errors: [`HostError::CannotResize`] with libvirt's reason (a machine
    /// that cannot hot-plug, a count above the domain's maximum) or when
    /// the guest's balloon does not follow (no `virtio_balloon` driver).
    pub fn resize(&self, vee_id: &str, vcpus: Option<u32>, memory_mib: Option<u64>, balloon_wait: Duration) -> Result<()> {
        let cannot = |why: String| HostError::CannotResize {
            vee_id: vee_id.to_string(),
            why,
        };
        self.on_domain("resize", vee_id, |d| {
            if let Some(n) = vcpus {
                d.set_vcpus_flags(n, sys::VIR_DOMAIN_AFFECT_LIVE)
                    .map_err(|e| cannot(format!("setting {n} vCPUs: {e}")))?;
            }
            let Some(mib) = memory_mib else { return Ok(()) };
            d.set_memory_flags(mib * 1024, sys::VIR_DOMAIN_AFFECT_LIVE)
                .map_err(|e| cannot(format!("setting the balloon to {mib} MiB: {e}")))?;
            let until = Instant::now() + balloon_wait;
            loop {
                let actual_kib = d
                    .memory_stats(0)
                    .ok()
                    .and_then(|s| s.into_iter().find(|m| m.tag == sys::VIR_DOMAIN_MEMORY_STAT_ACTUAL_BALLOON))
                    .map(|m| m.val);
                if actual_kib.is_some_and(|a| a.abs_diff(mib * 1024) <= 1024) {
                    return Ok(());
                }
                if Instant::now() >= until {
                    let actual = actual_kib.map_or("unknown".to_string(), |a| format!("{} MiB", a / 1024));
                    bail!(cannot(format!(
                        "its balloon is at {actual}, not {mib} MiB, {} s after it was asked (has the guest the virtio_balloon driver?)",
                        balloon_wait.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    }

    /// The live domain XML (`migratable` drops host-local details).
    pub fn xml(&self, vee_id: &str, migratable: bool) -> Result<String> {
        let flags = if migratable { sys::VIR_DOMAIN_XML_MIGRATABLE } else { 0 };
        self.on_domain("xml", vee_id, |d| Ok(d.xml_desc(flags)?))
    }

    /// Domains this VEEH owns, whatever their state.
    pub fn owned_domains(&self) -> Result<Vec<OwnedDomain>> {
        self.with("owned_domains", |c| {
            let mut out = Vec::new();
            for d in c.list_all_domains(0)? {
                let Ok(name) = d.name() else { continue };
                let Some(vee_id) = domain_xml::vee_id_of(&name) else { continue };
                #[cfg(test)]
                if let Some(hook) = &self.after_lookup {
                    hook(&d);
                }
                // A domain that vanishes while we look at it is not listed.
                let Ok(xml) = d.xml_desc(0) else { continue };
                let Some(o) = domain_xml::ownership(&xml) else { continue };
                if o.owner != self.owner {
                    continue;
                }
                let state = match gone_as_none(d.state().map_err(Into::into)) {
                    Ok(Some(s)) => map_state(s.0),
                    Ok(None) => continue,
                    Err(_) => DomainState::Other,
                };
                out.push(OwnedDomain {
                    vee_id: vee_id.to_string(),
                    name,
                    state,
                    service_id: o.service_id,
                });
            }
            Ok(out)
        })
    }

    /// CPU, memory and disk counters of `vee_id`'s domain.
    pub fn counters(&self, vee_id: &str, macs: &[String]) -> Result<DomainCounters> {
        self.on_domain("counters", vee_id, |d| {
            let info = d.info()?;
            let blk = d.block_stats("vda").ok();
            // libvirt names an interface by its MAC as well as its tap.
            let nets: Vec<_> = macs.iter().filter_map(|m| d.interface_stats(m).ok()).collect();
            Ok(DomainCounters {
                cpu_seconds: info.cpu_time as f64 / 1e9,
                memory_mib: info.memory / 1024,
                disk_read_bytes: blk.as_ref().map(|b| b.rd_bytes.max(0) as u64).unwrap_or(0),
                disk_write_bytes: blk.as_ref().map(|b| b.wr_bytes.max(0) as u64).unwrap_or(0),
                net_rx_bytes: nets.iter().map(|s| s.rx_bytes.max(0) as u64).sum(),
                net_tx_bytes: nets.iter().map(|s| s.tx_bytes.max(0) as u64).sum(),
            })
        })
    }

    /// QEMU and libvirt versions and the canonical `pc` machine type.
    pub fn facts(&self) -> Result<HostFacts> {
        self.with("facts", |c| {
            let caps = c.capabilities()?;
            let libvirt = c.lib_version()?;
            let emulator = emulator(&caps).unwrap_or_else(|| "qemu-system-x86_64".into());
            Ok(HostFacts {
                qemu_version: version_string(c.hyp_version()?),
                libvirt_version: version_string(libvirt),
                machine: canonical_pc_machine(&caps).unwrap_or_else(|| "pc".into()),
                save_formats: save_formats::probe(std::path::Path::new(&emulator), libvirt),
            })
        })
    }

    /// Live external snapshot of memory+device state to `memory_file` and of
    /// disk `vda` (the guest goes on writing to `new_top`; its previous
    /// overlay becomes read-only and consistent with `memory_file`).
    /// Returns the guest downtime in ms as libvirt measured it, when it did.
    /// (shared/notes/libvirt-lab.md, "Live whole-VM checkpoint".)
    pub fn live_snapshot(&self, vee_id: &str, name: &str, memory_file: &str, new_top: &str) -> Result<Option<u64>> {
        let xml = format!(
            "<domainsnapshot><name>{name}</name><memory snapshot='external' file='{memory_file}'/><disks><disk name='vda' snapshot='external' type='file'><driver type='qcow2'/><source file='{new_top}'/></disk></disks></domainsnapshot>"
        );
        self.on_domain("live_snapshot", vee_id, |d| {
            d.create_snapshot_xml(
                &xml,
                sys::VIR_DOMAIN_SNAPSHOT_CREATE_LIVE | sys::VIR_DOMAIN_SNAPSHOT_CREATE_NO_METADATA,
            )
            .context("live snapshot")?;
            Ok(job_stats(d, sys::VIR_DOMAIN_JOB_STATS_COMPLETED).and_then(|s| s.downtime))
        })
    }

    /// Saves `vee_id`'s memory and device state to `file` in libvirt's
    /// "sparse" image format (QEMU's mapped-ram: each page at a fixed
    /// offset) over `channels` parallel channels, and stops the domain
    /// (`virDomainSaveParams` with `image_format` and `parallel.channels`,
    /// libvirt >= 11.2; `virsh save --image-format sparse
    /// --parallel-channels N`). The guest is paused from the start of the
    /// call. Errors: libvirt's, naming the call.
    pub fn save_mapped_ram(&self, vee_id: &str, file: &str, channels: u32) -> Result<()> {
        self.on_domain("save_mapped_ram", vee_id, |d| {
            let mut params: sys::virTypedParameterPtr = std::ptr::null_mut();
            let (mut n, mut max) = (0, 0);
            let file = std::ffi::CString::new(file)?;
            // SAFETY: the parameter list is built by libvirt's helpers from
            // NUL-terminated strings, passed to one call and freed once.
            let rc = unsafe {
                let mut rc = sys::virTypedParamsAddString(&mut params, &mut n, &mut max, c"file".as_ptr(), file.as_ptr());
                if rc == 0 {
                    rc = sys::virTypedParamsAddString(&mut params, &mut n, &mut max, c"image_format".as_ptr(), c"sparse".as_ptr());
                }
                if rc == 0 {
                    rc = sys::virTypedParamsAddInt(&mut params, &mut n, &mut max, c"parallel.channels".as_ptr(), channels as i32);
                }
                if rc == 0 {
                    rc = sys::virDomainSaveParams(d.as_ptr(), params, n, 0);
                }
                sys::virTypedParamsFree(params, n);
                rc
            };
            if rc < 0 {
                return Err(last_error("save (mapped-ram)"));
            }
            Ok(())
        })
    }

    /// Merges the active top layer of `vda` into its backing file and pivots
    /// the guest onto it (`virsh blockcommit --active --pivot`), so snapshot
    /// chains do not grow without bound.
    pub fn block_commit_active(&self, vee_id: &str, timeout: Duration) -> Result<()> {
        self.on_domain("block_commit_active", vee_id, |d| {
            let disk = std::ffi::CString::new("vda").unwrap();
            // SAFETY: valid domain pointer and NUL-terminated disk name.
            // NULL top is the active layer; SHALLOW commits it into its
            // immediate backing file (the VEE's overlay), never deeper into
            // the shared read-only base image.
            let rc = unsafe {
                sys::virDomainBlockCommit(
                    d.as_ptr(),
                    disk.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    0,
                    sys::VIR_DOMAIN_BLOCK_COMMIT_ACTIVE | sys::VIR_DOMAIN_BLOCK_COMMIT_SHALLOW,
                )
            };
            if rc < 0 {
                return Err(last_error("block commit"));
            }
            let start = Instant::now();
            // Polled from 1 ms, doubling up to 50 ms: a checkpoint's top
            // layer holds what the guest wrote during the upload, and its
            // commit is often done within a few ms (a fixed 50 ms poll
            // was most of an idle guest's commit).
            let mut poll = Duration::from_millis(1);
            let mut pause = || {
                std::thread::sleep(poll);
                poll = (poll * 2).min(Duration::from_millis(50));
            };
            loop {
                let mut info: sys::virDomainBlockJobInfo = unsafe { std::mem::zeroed() };
                // SAFETY: info is a valid out pointer.
                let rc = unsafe { sys::virDomainGetBlockJobInfo(d.as_ptr(), disk.as_ptr(), &mut info, 0) };
                if rc < 0 {
                    return Err(last_error("block job info"));
                }
                if rc == 1 && info.end > 0 && info.cur == info.end {
                    break;
                }
                if start.elapsed() > timeout {
                    bail!("block commit did not converge in {timeout:?}");
                }
                pause();
            }
            // The job is ready when QEMU says so (libvirt's BLOCK_JOB_READY),
            // which can come a moment after cur == end on a busy host: a
            // pivot refused as not ready yet is asked again.
            loop {
                // SAFETY: as above.
                let rc = unsafe { sys::virDomainBlockJobAbort(d.as_ptr(), disk.as_ptr(), sys::VIR_DOMAIN_BLOCK_JOB_ABORT_PIVOT) };
                if rc == 0 {
                    break;
                }
                let e = virt::error::Error::last_error();
                let not_ready = Result::<virt::error::ErrorNumber, _>::from(e.code()) == Ok(virt::error::ErrorNumber::BlockCopyActive);
                if !not_ready || start.elapsed() > timeout {
                    return Err(anyhow::Error::new(e).context("block commit pivot"));
                }
                pause();
            }
            loop {
                let mut info: sys::virDomainBlockJobInfo = unsafe { std::mem::zeroed() };
                let rc = unsafe { sys::virDomainGetBlockJobInfo(d.as_ptr(), disk.as_ptr(), &mut info, 0) };
                if rc <= 0 || start.elapsed() > timeout {
                    break;
                }
                pause();
            }
            Ok(())
        })
    }

    /// The domain XML stored in a saved memory-state file.
    pub fn save_image_xml(&self, memory_file: &str) -> Result<String> {
        self.with("save_image_xml", |c| Ok(c.save_image_xml_desc(memory_file, 0)?))
    }

    /// Restores a domain from `memory_file` with `xml` (its paths rewritten
    /// to this host's), running.
    pub fn restore(&self, memory_file: &str, xml: &str) -> Result<()> {
        self.with("restore", |c| {
            c.restore_domain_flags(memory_file, Some(xml), sys::VIR_DOMAIN_SAVE_RUNNING)
                .with_context(|| format!("restore from {memory_file}"))?;
            Ok(())
        })
    }
}

/// Destroys `d` if it runs and undefines it if it is persistent.
fn destroy_domain(d: &Domain) -> Result<()> {
    if d.is_active()? {
        d.destroy()?;
    }
    if d.is_persistent()? {
        d.undefine()?;
    }
    Ok(())
}

fn map_state(s: virt::domain::DomainStateEnum) -> DomainState {
    use virt::domain::DomainState as L;
    use virt::enumutil::Enum;
    match s {
        Enum::Known(L::Running) | Enum::Known(L::Blocked) => DomainState::Running,
        Enum::Known(L::Paused) | Enum::Known(L::PMSuspended) => DomainState::Paused,
        Enum::Known(L::Shutoff) | Enum::Known(L::Shutdown) => DomainState::Shutoff,
        Enum::Known(L::Crashed) => DomainState::Crashed,
        _ => DomainState::Other,
    }
}

/// The QEMU binary libvirt runs x86_64 guests with (`<emulator>` of the
/// capabilities' x86_64 guest).
fn emulator(caps: &str) -> Option<String> {
    let doc = roxmltree::Document::parse(caps).ok()?;
    doc.descendants()
        .filter(|n| n.has_tag_name("arch") && n.attribute("name") == Some("x86_64"))
        .find_map(|a| a.children().find(|n| n.has_tag_name("emulator"))?.text().map(str::to_string))
}

/// `canonical` attribute of the `pc` machine in libvirt's capabilities XML.
fn canonical_pc_machine(caps: &str) -> Option<String> {
    let doc = roxmltree::Document::parse(caps).ok()?;
    doc.descendants()
        .find(|n| n.has_tag_name("machine") && n.text() == Some("pc") && n.attribute("canonical").is_some())
        .and_then(|n| n.attribute("canonical"))
        .map(str::to_string)
}

#[cfg(test)]
mod tests;
