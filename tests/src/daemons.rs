//! Real daemons as child processes (`vee_testkit::daemon::Daemon`): the
//! image repository, VEEHs and VEEMs. Each writes its log into its test
//! directory; dropping a [`Daemon`] kills it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use interfaces::repo_client::{BlobKind, PushMeta, RepoClient};
use interfaces::vhi::vhi_service_client::VhiServiceClient;
use interfaces::vhi::{
    ConsoleRequest, DomainInfo, IncomingTarget, ListDomainsRequest, MigrateOutRequest, MigrationProgress, StartRequest, VeeSpec, VeeState,
};
use tonic::transport::Channel;

use crate::guest::{last_tick, GuestImage};
use crate::lab::{free_port, Place};
pub use vee_testkit::daemon::Daemon;

/// A running `image-repo serve`: a lab's one repository at site A's end
/// of the WAN ([`ImageRepo::start`]: both sites' VEEHs pull from it, site
/// B's across the WAN), or one per site ([`ImageRepo::per_site`]). Its
/// tokens: the
/// operator's ([`ImageRepo::token`]), one per site ([`ImageRepo::site_token`],
/// for `site-a` and `site-b`: their VEEMs and VEEHs use it) and one per
/// service provider (`acme`, `globex`: [`ImageRepo::provider_token`]).
pub struct ImageRepo {
    pub daemon: Daemon,
    pub url: String,
    /// The operator's token.
    pub token: String,
    /// The CA of its certificate (TLS).
    pub ca: PathBuf,
    /// `ADDR:PORT` of its metrics listener (`/metrics`, `/healthz`,
    /// `/readyz`; plain HTTP).
    pub metrics: String,
}

/// Sites and providers the test repository has tokens for.
const REPO_SITES: [&str; 2] = ["site-a", "site-b"];
const REPO_PROVIDERS: [&str; 2] = ["acme", "globex"];

impl ImageRepo {
    /// The one repository of a lab whose sites share it, at site A.
    pub async fn start(dir: &Path) -> Self {
        Self::start_at(dir, Place::SiteA, "image-repo", free_port(), &[]).await
    }

    /// One repository per site (issue 39): site A's at site A, site B's
    /// in site B's namespaces, each the other's peer (`[[peers]]`, with
    /// its own site's token there), so that a blob one lacks is pulled
    /// through from the other.
    pub async fn per_site(dir: &Path) -> (Self, Self) {
        let (pa, pb) = (free_port(), free_port());
        let url = |place: Place, port: u16| format!("https://{}:{port}", place.addr());
        let a = Self::start_at(
            dir,
            Place::SiteA,
            "repo-a",
            pa,
            &[("site-b", "site-a", url(Place::SiteB, pb), Place::SiteB)],
        )
        .await;
        let b = Self::start_at(
            dir,
            Place::SiteB,
            "repo-b",
            pb,
            &[("site-a", "site-b", url(Place::SiteA, pa), Place::SiteA)],
        )
        .await;
        (a, b)
    }

    /// A repository at `place` on `port`, data and configuration under
    /// `dir/<name>`, with `peers` (peer site, this site, the peer's URL and
    /// place).
    async fn start_at(dir: &Path, place: Place, name: &str, port: u16, peers: &[(&str, &str, String, Place)]) -> Self {
        let data = dir.join(name);
        let listen = format!("{}:{port}", place.addr());
        let token = "test-write-token".to_string();
        let (tls, ca) = vee_testkit::pki::repo(place.addr());
        let metrics = format!("{}:{}", place.addr(), free_port());
        let mut cfg = format!(
            "listen = \"{listen}\"\ndata = \"{}\"\ntoken = \"{token}\"\n[tls]\ncert = \"{}\"\nkey = \"{}\"\n[metrics]\nlisten = \"{metrics}\"\n",
            data.display(),
            tls.cert.display(),
            tls.key.display()
        );
        for (peer, me, url, peer_place) in peers {
            let (_, peer_ca) = vee_testkit::pki::repo(peer_place.addr());
            cfg += &format!(
                "\n[[peers]]\nname = \"{peer}\"\nurl = \"{url}\"\nca = \"{}\"\ntoken = \"{}\"\n",
                peer_ca.display(),
                Self::token_of(me)
            );
        }
        for (names, role) in [(REPO_SITES, "site"), (REPO_PROVIDERS, "provider")] {
            for name in names {
                let digest = interfaces::tokens::digest_hex(&Self::token_of(name));
                cfg += &format!("\n[[tokens]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{digest}\"\n");
            }
        }
        let cfg_path = dir.join(format!("{name}.toml"));
        std::fs::write(&cfg_path, cfg).unwrap();
        let daemon = Daemon::spawn_at(place, name, "image-repo", &["serve", "--config", cfg_path.to_str().unwrap()], dir);
        let url = format!("https://{listen}");
        let client = RepoClient::with_ca(&url, Some(token.clone()), Some(&ca)).unwrap();
        let start = Instant::now();
        while client.list().await.is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "image-repo did not answer; log:\n{}",
                daemon.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self {
            daemon,
            url,
            token,
            ca,
            metrics,
        }
    }

    fn token_of(name: &str) -> String {
        format!("repo-token-of-{name}")
    }

    /// The lines of a VEEM's or VEEH's configuration at `site` that name
    /// this repository: its URL and, for an `image-repo` (not an
    /// `oci://` registry, whose credentials are its `[[registries]]`
    /// entry's), the site's token and the CA.
    pub fn config_lines(&self, site: &str) -> String {
        if self.url.starts_with("oci://") {
            return format!("image_repo = \"{}\"\n", self.url);
        }
        format!(
            "image_repo = \"{}\"\nimage_repo_token = \"{}\"\nimage_repo_ca = \"{}\"\n",
            self.url,
            self.site_token(site),
            self.ca.display()
        )
    }

    /// The token of site `site` (its VEEM's and VEEHs').
    pub fn site_token(&self, site: &str) -> String {
        assert!(REPO_SITES.contains(&site), "the test repository has no token for {site}");
        Self::token_of(site)
    }

    /// The token of service provider `provider` (`acme` or `globex`).
    pub fn provider_token(&self, provider: &str) -> String {
        assert!(
            REPO_PROVIDERS.contains(&provider),
            "the test repository has no token for {provider}"
        );
        Self::token_of(provider)
    }

    /// A client with the operator's token.
    pub fn client(&self) -> RepoClient {
        self.client_as(&self.token)
    }

    /// A client with `token`.
    pub fn client_as(&self, token: &str) -> RepoClient {
        RepoClient::with_ca(&self.url, Some(token.to_string()), Some(&self.ca)).unwrap()
    }

    /// Pushes the guest's kernel, initrd and data disk as the operator and
    /// marks them public, as a cloud's stock images; returns their IDs.
    pub async fn push_guest(&self, g: &GuestImage) -> GuestIds {
        let c = self.client();
        let kernel = c
            .push_file(&g.kernel, &PushMeta::new("vee-guest-kernel", BlobKind::Kernel))
            .await
            .unwrap()
            .to_string();
        let initrd = c
            .push_file(&g.initrd, &PushMeta::new("vee-guest-initrd", BlobKind::Initrd))
            .await
            .unwrap()
            .to_string();
        let mut meta = PushMeta::new("vee-guest-disk", BlobKind::Disk);
        meta.format = Some("qcow2".into());
        let disk = c.push_file(&g.disk, &meta).await.unwrap().to_string();
        for id in [&kernel, &initrd, &disk] {
            c.set_public(&id.parse().unwrap(), true).await.unwrap();
        }
        GuestIds {
            kernel,
            initrd,
            disk,
            cmdline: g.cmdline.clone(),
        }
    }

    /// Pushes the guest's data disk again as raw (another content ID, as
    /// a new version of the image would have; the guest boots the same),
    /// public; its ID. Scratch files go under `dir`.
    pub async fn push_guest_disk_v2(&self, g: &GuestImage, dir: &Path) -> String {
        let raw = dir.join("disk-v2.raw");
        let out = std::process::Command::new("qemu-img")
            .args(["convert", "-f", "qcow2", "-O", "raw"])
            .arg(&g.disk)
            .arg(&raw)
            .output()
            .unwrap();
        assert!(out.status.success(), "qemu-img convert: {}", String::from_utf8_lossy(&out.stderr));
        let mut meta = PushMeta::new("vee-guest-disk-v2", BlobKind::Disk);
        meta.format = Some("raw".into());
        let c = self.client();
        let id = c.push_file(&raw, &meta).await.unwrap();
        c.set_public(&id, true).await.unwrap();
        id.to_string()
    }
}

/// Repository IDs of the guest's images.
#[derive(Clone, Debug)]
pub struct GuestIds {
    pub kernel: String,
    pub initrd: String,
    pub disk: String,
    pub cmdline: String,
}

impl GuestIds {
    /// A VHI spec for a new VEE of the tiny guest: 1 vCPU, 128 MiB, 1 GiB.
    pub fn spec(&self, service_id: &str) -> VeeSpec {
        VeeSpec {
            vee_id: uuid::Uuid::new_v4().to_string(),
            service_id: service_id.into(),
            vcpus: 1,
            memory_mib: 128,
            disk_gib: 1,
            image: self.disk.clone(),
            kernel: self.kernel.clone(),
            initrd: self.initrd.clone(),
            cmdline: self.cmdline.clone(),
            nics: vec![],
            cloud_init: None,
            ..Default::default()
        }
    }
}

/// A running `veeh serve`.
pub struct Veeh {
    pub daemon: Daemon,
    pub host: String,
    /// Its site (whose PKI its certificate is from).
    pub site: String,
    pub endpoint: String,
    pub state_dir: PathBuf,
    pub uri: String,
    pub config: PathBuf,
    /// `ADDR:PORT` of its metrics listener (`/metrics`, `/healthz`,
    /// `/readyz`; plain HTTP).
    pub metrics: String,
}

impl Drop for Veeh {
    /// Kills the daemon and destroys every domain it still owns, also when
    /// a test panics.
    fn drop(&mut self) {
        self.daemon.kill();
        if let Ok(hv) = veeh::hypervisor::Hypervisor::open(&self.uri, &self.host) {
            for d in hv.owned_domains().unwrap_or_default() {
                let _ = hv.destroy(&d.vee_id);
            }
        }
    }
}

impl Veeh {
    /// Sends `signal` (e.g. `-STOP`, `-CONT`) to its process: a stall as
    /// a host under memory pressure or a hung kernel shows it.
    pub fn signal(&self, signal: &str) {
        let pid = self.daemon.child.as_ref().expect("running").id().to_string();
        let st = std::process::Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(st.success(), "kill {signal} {pid}");
    }

    /// Starts a VEEH named `<host>-<random>` (so domains a failed run left
    /// behind belong to nobody here) of `site` on libvirt `uri`, state under
    /// `dir/<host>`, capacity 2 vCPUs / 1024 MiB / 20 GiB. On site B's
    /// libvirtd it runs in site B's namespaces ([`Place`]); it listens,
    /// migrates and has its VTEP at its place's end of the WAN.
    pub async fn start(dir: &Path, host: &str, site: &str, uri: &str, repo: &ImageRepo) -> Self {
        Self::start_sized(dir, host, site, uri, repo, (2, 1024)).await
    }

    /// [`Veeh::start`] offering `(vcpus, memory_mib)` (vCPUs, MiB).
    pub async fn start_sized(dir: &Path, host: &str, site: &str, uri: &str, repo: &ImageRepo, size: (u32, u64)) -> Self {
        Self::start_configured(dir, host, site, uri, repo, size, "").await
    }

    /// [`Veeh::start_sized`] with `extra` TOML tables at the end of its
    /// configuration (`[[registries]]`).
    pub async fn start_configured(dir: &Path, host: &str, site: &str, uri: &str, repo: &ImageRepo, size: (u32, u64), extra: &str) -> Self {
        Self::start_with(dir, host, site, uri, repo, size, "", extra).await
    }

    /// [`Veeh::start`] with its checkpoint's `failpoints` armed
    /// (`veeh::failpoints`, e.g. `checkpoint-after-indexes=return`).
    pub async fn start_failing(dir: &Path, host: &str, site: &str, uri: &str, repo: &ImageRepo, failpoints: &str) -> Self {
        let top = format!("failpoints = \"{failpoints}\"\n");
        Self::start_with(dir, host, site, uri, repo, (2, 1024), &top, "").await
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_with(
        dir: &Path,
        host: &str,
        site: &str,
        uri: &str,
        repo: &ImageRepo,
        (vcpus, memory_mib): (u32, u64),
        top: &str,
        extra: &str,
    ) -> Self {
        let port = free_port();
        let host = &format!("{host}-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
        let state_dir = dir.join(host);
        std::fs::create_dir_all(&state_dir).unwrap();
        let peer_uri = if uri == crate::lab::SITE_A_URI {
            crate::lab::SITE_A_PEER_URI
        } else {
            uri
        };
        let place = Place::of_uri(uri);
        let addr = place.addr();
        let tls = vee_testkit::pki::site(site).host(host);
        let metrics = format!("{addr}:{}", free_port());
        let cfg = format!(
            "{top}host = \"{host}\"\nsite_id = \"{site}\"\nlibvirt_uri = \"{uri}\"\npeer_libvirt_uri = \"{peer_uri}\"\nlisten = \"{addr}:{port}\"\nstate_dir = \"{}\"\nmigration_address = \"{addr}\"\naccel = \"auto\"\n{}[capacity]\nvcpus = {vcpus}\nmemory_mib = {memory_mib}\ndisk_gib = 20\n[metrics]\nlisten = \"{metrics}\"\n[tls]\n{}{extra}",
            state_dir.display(),
            repo.config_lines(site),
            vee_testkit::pki::toml(&tls)
        );
        let cfg_path = dir.join(format!("{host}.toml"));
        std::fs::write(&cfg_path, cfg).unwrap();
        let daemon = Daemon::spawn_at(place, host, "veeh", &["serve", "--config", cfg_path.to_str().unwrap()], dir);
        let endpoint = format!("https://{addr}:{port}");
        let mut v = Self {
            daemon,
            host: host.into(),
            site: site.into(),
            endpoint,
            state_dir,
            uri: uri.into(),
            config: cfg_path.clone(),
            metrics,
        };
        let start = Instant::now();
        loop {
            if v.try_client().await.is_ok() {
                break;
            }
            v.daemon.assert_alive();
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "veeh {host} did not answer; log:\n{}",
                v.daemon.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        v
    }

    /// A VHI client of this VEEH, as its site's VEEM (mutual TLS).
    pub async fn client(&self) -> VhiServiceClient<Channel> {
        self.try_client().await.unwrap()
    }

    /// The domains this VEEH's libvirtd runs for it (VHI ListDomains).
    pub async fn domains(&self) -> Vec<DomainInfo> {
        self.client()
            .await
            .list_domains(ListDomainsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .domains
    }

    /// Destroys every domain this VEEH runs and removes its files (a
    /// test's clean-up).
    pub async fn destroy_all(&self) {
        let mut c = self.client().await;
        for d in self.domains().await {
            destroy(&mut c, &d.vee_id).await;
        }
    }

    /// [`Veeh::client`], or the error connecting.
    pub async fn try_client(&self) -> Result<VhiServiceClient<Channel>, tonic::transport::Error> {
        vee_testkit::pki::site(&self.site)
            .vhi_service_client(&self.endpoint, &self.host)
            .await
    }

    /// Starts the (killed) daemon again on the same configuration: the same
    /// host coming back.
    pub async fn restart(&mut self) {
        self.daemon.kill();
        let dir = self.config.parent().unwrap().to_path_buf();
        self.daemon = Daemon::spawn_at(
            Place::of_uri(&self.uri),
            &format!("{}-again", self.host),
            "veeh",
            &["serve", "--config", self.config.to_str().unwrap()],
            &dir,
        );
        let start = Instant::now();
        while self.try_client().await.is_err() {
            self.daemon.assert_alive();
            assert!(start.elapsed() < Duration::from_secs(30), "veeh {} did not come back", self.host);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The VEE's console through the VHI Console call: its last 2 KiB.
pub async fn console(c: &mut VhiServiceClient<Channel>, vee_id: &str) -> String {
    console_tail(c, vee_id, 2048).await
}

/// The last `tail_bytes` bytes of the VEE's console (empty when the host
/// has none).
pub async fn console_tail(c: &mut VhiServiceClient<Channel>, vee_id: &str, tail_bytes: u64) -> String {
    c.console(ConsoleRequest {
        vee_id: vee_id.into(),
        tail_bytes,
    })
    .await
    .map(|r| r.into_inner().text)
    .unwrap_or_default()
}

/// Prepares, creates and starts `spec` on `c`'s host and waits (up to
/// 120 s, TCG) for its third tick; returns it as [`wait_tick`] does.
pub async fn boot(c: &mut VhiServiceClient<Channel>, spec: &VeeSpec) -> (u64, Option<u64>) {
    start(c, spec).await;
    wait_tick(c, &spec.vee_id, 3, Duration::from_secs(120)).await
}

/// Prepares, creates and starts `spec` on `c`'s host; panics unless its
/// domain runs. Returns at once: nothing in the guest has booted yet.
pub async fn start(c: &mut VhiServiceClient<Channel>, spec: &VeeSpec) {
    c.prepare(interfaces::vhi::PrepareRequest { spec: Some(spec.clone()) })
        .await
        .unwrap();
    c.create(interfaces::vhi::CreateRequest { spec: Some(spec.clone()) }).await.unwrap();
    let st = c
        .start(StartRequest {
            vee_id: spec.vee_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state(), VeeState::Running);
}

/// Waits until the VEE's console shows tick `min` or later; returns the
/// last (tick, disk tick). Panics with the console tail after `timeout`.
pub async fn wait_tick(c: &mut VhiServiceClient<Channel>, vee_id: &str, min: u64, timeout: Duration) -> (u64, Option<u64>) {
    let start = Instant::now();
    let mut text = String::new();
    while start.elapsed() < timeout {
        text = console(c, vee_id).await;
        if let Some(t) = last_tick(&text) {
            if t.0 >= min {
                return t;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("VEE {vee_id} did not reach tick {min} in {timeout:?}; console tail:\n{text}");
}

/// Waits until the VEE's console has a line starting with `prefix` after
/// the first `skip` such lines; returns that line. Panics with the console
/// tail after `timeout`.
pub async fn wait_console_line(c: &mut VhiServiceClient<Channel>, vee_id: &str, prefix: &str, skip: usize, timeout: Duration) -> String {
    let what = format!("{prefix:?} (after {skip})");
    wait_console(c, vee_id, 2048, &what, timeout, |text| {
        text.lines().filter(|l| l.starts_with(prefix)).nth(skip).map(str::to_string)
    })
    .await
}

/// Polls the last `tail_bytes` of the VEE's console every 300 ms until
/// `find` finds something in it; returns that. Panics naming `what`, with
/// the console's tail, after `timeout`.
pub async fn wait_console<T>(
    c: &mut VhiServiceClient<Channel>,
    vee_id: &str,
    tail_bytes: u64,
    what: &str,
    timeout: Duration,
    find: impl Fn(&str) -> Option<T>,
) -> T {
    let start = Instant::now();
    let mut text = String::new();
    while start.elapsed() < timeout {
        text = console_tail(c, vee_id, tail_bytes).await;
        if let Some(found) = find(&text) {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!(
        "VEE {vee_id}: no console line {what} in {timeout:?}; console tail:\n{}",
        crate::site::tail(&text, 3000)
    );
}

/// Live-migrates `vee` from `c`'s host to `target` (max downtime 500 ms,
/// `bandwidth_mib_s` 0 = unlimited): every progress message, the last the
/// outcome.
pub async fn migrate(c: &mut VhiServiceClient<Channel>, vee: &str, target: IncomingTarget, bandwidth_mib_s: u64) -> Vec<MigrationProgress> {
    let req = MigrateOutRequest {
        vee_id: vee.into(),
        target: Some(target),
        max_downtime: interfaces::time::duration_ms(500),
        bandwidth_mib_s,
    };
    let mut s = c.migrate_out(req).await.unwrap().into_inner();
    let mut seen = Vec::new();
    while let Some(p) = futures::StreamExt::next(&mut s).await {
        seen.push(p.unwrap());
    }
    seen
}

/// A live checkpoint of `vee` (it runs on): the record.
pub async fn checkpoint(c: &mut VhiServiceClient<Channel>, vee: &str) -> interfaces::vhi::CheckpointRecord {
    let req = interfaces::vhi::CheckpointRequest {
        vee_id: vee.into(),
        stop_after: false,
    };
    c.checkpoint(req).await.unwrap().into_inner()
}

/// Destroys `vee` and removes its files and record from the host.
pub async fn destroy(c: &mut VhiServiceClient<Channel>, vee: &str) {
    let req = interfaces::vhi::DestroyRequest {
        vee_id: vee.into(),
        remove: true,
    };
    c.destroy(req).await.unwrap();
}
