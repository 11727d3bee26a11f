//! A whole site as real processes: a VEEM over some VEEHs, with the tokens
//! of two service providers, an operator and peer sites.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use interfaces::vmi::vmi_service_client::VmiServiceClient;
use interfaces::vmi::{
    Action, DeployRequest, Event, GetVeeRequest, ListEventsRequest, NegotiateRequest, NegotiateResponse, ServiceInfo, VeeActionRequest,
    VeeInfo,
};
use veem::peers::{Bearer, PeerClient};

use crate::daemons::{Daemon, ImageRepo, Veeh};
use crate::lab::{free_port, Place};

/// Token of service provider `acme`.
pub const ACME: &str = "sp-acme-token";
/// Token of service provider `globex`.
pub const GLOBEX: &str = "sp-globex-token";
/// The site operator's token.
pub const OPERATOR: &str = "operator-token";

/// A peer this site federates with.
#[derive(Default)]
pub struct PeerLink {
    pub site_id: String,
    pub endpoint: String,
    /// Token this site presents to the peer.
    pub token_out: String,
    /// Token the peer presents to this site.
    pub token_in: String,
    /// The peer's VTEP: an overlay is agreed (`[peers.overlay]`, UDP port
    /// [`OVERLAY_PORT`]).
    pub overlay_vtep: Option<String>,
}

/// The UDP port of the lab's agreed overlays.
pub const OVERLAY_PORT: u16 = 4790;

/// Token site A presents to site B.
pub const A_TO_B: &str = "token-a-presents-to-b";
/// Token site B presents to site A.
pub const B_TO_A: &str = "token-b-presents-to-a";

/// The lab's two sites as each other's peers, their VEEMs on ports `pa`
/// and `pb`, with an overlay agreed both ways or not: (A's link to B, B's
/// link to A).
pub fn peer_links(pa: u16, pb: u16, overlay: bool) -> (PeerLink, PeerLink) {
    let to_b = PeerLink {
        site_id: "site-b".into(),
        endpoint: endpoint("site-b", pb),
        token_out: A_TO_B.into(),
        token_in: B_TO_A.into(),
        overlay_vtep: overlay.then(|| crate::lab::SITE_B_ADDR.into()),
    };
    let to_a = PeerLink {
        site_id: "site-a".into(),
        endpoint: endpoint("site-a", pa),
        token_out: B_TO_A.into(),
        token_in: A_TO_B.into(),
        overlay_vtep: overlay.then(|| crate::lab::SITE_A_ADDR.into()),
    };
    (to_b, to_a)
}

/// A running `veem serve`.
pub struct Veem {
    pub daemon: Daemon,
    pub site_id: String,
    pub endpoint: String,
    pub config: PathBuf,
    pub dir: PathBuf,
}

/// Writes the VEEM config of `site_id` over `hosts` and returns its path.
/// `extra` is TOML inserted before the hosts: top-level keys first, then
/// tables; it may set `heartbeat_interval` (default 1 s),
/// `heartbeat_miss_limit` (3) and `usage_interval` (3 s) itself.
pub fn write_config(dir: &Path, site_id: &str, port: u16, repo: &ImageRepo, hosts: &[&Veeh], peers: &[PeerLink], extra: &str) -> PathBuf {
    let mut defaults = String::new();
    for (key, value) in [
        ("heartbeat_interval", "\"1s\""),
        ("heartbeat_miss_limit", "3"),
        ("usage_interval", "\"3s\""),
    ] {
        if !extra.lines().any(|l| l.trim_start().starts_with(key)) {
            defaults += &format!("{key} = {value}\n");
        }
    }
    let mut cfg = format!(
        "site_id = \"{site_id}\"\nlisten = \"{}:{port}\"\ndb = \"{}\"\n{}{defaults}{extra}\n",
        Place::of_site(site_id).addr(),
        dir.join(format!("{site_id}.db")).display(),
        repo.config_lines(site_id),
    );
    for h in hosts {
        cfg += &format!("[[hosts]]\nname = \"{}\"\nendpoint = \"{}\"\n", h.host, h.endpoint);
    }
    let pki = vee_testkit::pki::site(site_id);
    cfg += &format!("[vhi_tls]\n{}", vee_testkit::pki::toml(&pki.veem()));
    let vmi = pki.vmi(Place::of_site(site_id).addr());
    cfg += &format!("[tls]\ncert = \"{}\"\nkey = \"{}\"\n", vmi.cert.display(), vmi.key.display());
    for (t, role) in [
        (ACME, "role = \"provider\"\nname = \"acme\""),
        (GLOBEX, "role = \"provider\"\nname = \"globex\""),
        (OPERATOR, "role = \"operator\""),
    ] {
        cfg += &format!("[[tokens]]\ntoken = \"{t}\"\n{role}\n");
    }
    for p in peers {
        cfg += &format!(
            "[[tokens]]\ntoken = \"{}\"\nrole = \"peer\"\nname = \"{}\"\n",
            p.token_in, p.site_id
        );
        cfg += &format!(
            "[[peers]]\nsite_id = \"{}\"\nendpoint = \"{}\"\ntoken = \"{}\"\nca = \"{}\"\n[peers.agreement]\nprice_per_vee_hour = 0.1\n",
            p.site_id,
            p.endpoint,
            p.token_out,
            vee_testkit::pki::site(&p.site_id).vmi_ca().display()
        );
        if let Some(vtep) = &p.overlay_vtep {
            cfg += &format!("[peers.overlay]\nvtep = \"{vtep}\"\nport = {OVERLAY_PORT}\n");
        }
    }
    let path = dir.join(format!("{site_id}.toml"));
    std::fs::write(&path, cfg).unwrap();
    path
}

impl Veem {
    /// Starts the VEEM of `config` listening on `port`; waits until this
    /// VEEM (not whatever else may hold the port) answers a VMI call and
    /// sees each of its hosts up (as an operator checks `veem hosts` before
    /// deploying; a host still down after 20 s is left to the test, whose
    /// failure then shows the VEEM's log with each heartbeat's reason).
    pub async fn start(dir: &Path, site_id: &str, port: u16, config: PathBuf) -> Self {
        let v = Self::start_serving(dir, site_id, port, config).await;
        let mut op = v.client(OPERATOR).await;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            let hosts = op
                .list_hosts(interfaces::vmi::ListHostsRequest::default())
                .await
                .map(|r| r.into_inner().hosts)
                .unwrap_or_default();
            if hosts.iter().all(|h| h.health() == interfaces::vmi::HostHealth::Up) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        v
    }

    /// [`Veem::start`] without waiting for the hosts (a restart may find
    /// one dead on purpose).
    async fn start_serving(dir: &Path, site_id: &str, port: u16, config: PathBuf) -> Self {
        Self::start_wrapped(dir, site_id, port, config, &[]).await
    }

    /// [`Veem::start`] without waiting for the hosts, through `wrapper`
    /// (`Daemon::try_spawn_wrapped`: `prlimit --nofile=1024:1024 --`).
    pub async fn start_wrapped(dir: &Path, site_id: &str, port: u16, config: PathBuf, wrapper: &[&str]) -> Self {
        let place = Place::of_site(site_id);
        let daemon = Daemon::try_spawn_wrapped(
            place,
            wrapper,
            &format!("veem-{site_id}"),
            "veem",
            &["serve", "--config", config.to_str().unwrap()],
            dir,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut v = Self {
            daemon,
            site_id: site_id.into(),
            endpoint: endpoint(site_id, port),
            config,
            dir: dir.into(),
        };
        let start = Instant::now();
        loop {
            if let Ok(ch) = vee_testkit::pki::site(site_id).vmi_channel(&v.endpoint, None).await {
                let mut c = VmiServiceClient::with_interceptor(ch, Bearer::new(OPERATOR).unwrap());
                if c.list_migrations(interfaces::vmi::ListMigrationsRequest::default()).await.is_ok() {
                    v.daemon.assert_alive();
                    break;
                }
            }
            v.daemon.assert_alive();
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "veem {site_id} did not answer; log:\n{}",
                v.daemon.log_text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        v
    }

    /// Kills (SIGKILL) and starts the VEEM again on the same config and
    /// database.
    pub async fn restart(&mut self) {
        self.daemon.kill();
        let port: u16 = self.endpoint.rsplit(':').next().unwrap().parse().unwrap();
        let fresh = Veem::start_serving(&self.dir, &self.site_id.clone(), port, self.config.clone()).await;
        *self = fresh;
    }

    /// Writes the VEEM's configuration with `line` as its only
    /// `failpoints` line (none when empty); the next start reads it.
    pub fn set_failpoints(&self, line: &str) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let rest: String = text
            .lines()
            .filter(|l| !l.starts_with("failpoints"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&self.config, format!("{line}{rest}")).unwrap();
    }

    /// Restarts the VEEM with failpoint `name` armed (`panic`: it dies
    /// there as kill -9 would; a test build's `veem::failpoints`).
    pub async fn arm(&mut self, name: &str) {
        self.set_failpoints(&format!("failpoints = \"{name}=panic\"\n"));
        self.restart().await;
    }

    /// Waits (60 s at most) for the VEEM to die at its failpoint, disarms
    /// it and starts the VEEM again on the same database.
    pub async fn restart_after_failpoint(&mut self) {
        let start = Instant::now();
        while self.daemon.check_alive().is_ok() {
            assert!(start.elapsed() < Duration::from_secs(60), "the VEEM never reached its failpoint");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(self.daemon.log_text().contains("failpoint"), "{}", self.daemon.log_text());
        self.set_failpoints("");
        self.restart().await;
    }

    /// A VMI client presenting `token`.
    pub async fn client(&self, token: &str) -> PeerClient {
        let ch = vee_testkit::pki::site(&self.site_id)
            .vmi_channel(&self.endpoint, None)
            .await
            .unwrap();
        VmiServiceClient::with_interceptor(ch, Bearer::new(token).unwrap())
    }

    /// A VMI client as peer site `peer` calls: its certificate, and
    /// `token`.
    pub async fn peer_client(&self, peer: &str, token: &str) -> PeerClient {
        let id = vee_testkit::pki::site(peer).vmi(Place::of_site(peer).addr());
        let ch = vee_testkit::pki::site(&self.site_id)
            .vmi_channel(&self.endpoint, Some(&id))
            .await
            .unwrap();
        VmiServiceClient::with_interceptor(ch, Bearer::new(token).unwrap())
    }

    /// Deploys a one-VEE service `name` of the tiny guest (`ids`) as
    /// `client` (acme's) and waits (at most 180 s) until its VEE runs:
    /// the service and the VEE's info.
    pub async fn deploy_running(&self, client: &mut PeerClient, name: &str, ids: &crate::daemons::GuestIds) -> (ServiceInfo, VeeInfo) {
        let svc = client
            .deploy(DeployRequest {
                manifest_toml: manifest(name, "acme", ids, 1, ""),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let vee = svc.vees[0].vee_id.clone();
        let info = self
            .wait_vee(&vee, "running", Duration::from_secs(180), |v| {
                v.state() == interfaces::vmi::VeeState::Running
            })
            .await;
        (svc, info)
    }

    /// Polls GetVee (as the operator) until `pred` holds; returns the info.
    pub async fn wait_vee(&self, vee_id: &str, what: &str, timeout: Duration, pred: impl Fn(&VeeInfo) -> bool) -> VeeInfo {
        let mut c = self.client(OPERATOR).await;
        let start = Instant::now();
        let mut last = None;
        while start.elapsed() < timeout {
            if let Ok(i) = c.get_vee(GetVeeRequest { vee_id: vee_id.into() }).await {
                let i = i.into_inner();
                if pred(&i) {
                    return i;
                }
                last = Some(i);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!(
            "VEE {vee_id} never became {what} in {timeout:?}; last {last:?}\nVEEM log tail:\n{}",
            tail(&self.daemon.log_text(), 4000)
        );
    }
}

/// Asserts that service `service_id` has no SLA violation (as `c` sees
/// its usage): a recovered VEE is none.
pub async fn assert_no_violations(c: &mut PeerClient, service_id: &str) {
    let usage = c
        .get_usage(interfaces::vmi::GetUsageRequest {
            service_id: service_id.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        usage.violations.is_empty(),
        "a recovered VEE is no SLA violation: {:?}",
        usage.violations
    );
}

/// Asks `a`'s operator to move `vee` (to site `to_site` or host `to_host`),
/// checks that the move waits for approval, approves it and waits (up to
/// 180 s) for its end: the migration's record.
pub async fn migrate_approved(a: &Veem, vee: &str, to_site: &str, to_host: &str) -> interfaces::vmi::MigrationInfo {
    let m = approved(a, vee, to_site, to_host).await;
    wait_migration(a, &m.migration_id, Duration::from_secs(180)).await
}

/// [`migrate_approved`] without waiting: the proposal, just approved.
pub async fn approved(a: &Veem, vee: &str, to_site: &str, to_host: &str) -> interfaces::vmi::MigrationInfo {
    use interfaces::vmi::{ApproveMigrationRequest, MigrateRequest, MigrationState};
    let mut op = a.client(OPERATOR).await;
    let m = op
        .migrate(MigrateRequest {
            vee_id: vee.into(),
            to_host: to_host.into(),
            to_site: to_site.into(),
            reason: "test".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(m.state(), MigrationState::Proposed, "an operator approves moves: {m:?}");
    op.approve_migration(ApproveMigrationRequest {
        migration_id: m.migration_id.clone(),
    })
    .await
    .unwrap()
    .into_inner()
}

/// Polls site `v`'s migrations (as its operator) until migration `id` is
/// done, failed or rejected (at most `timeout`): its record.
pub async fn wait_migration(v: &Veem, id: &str, timeout: Duration) -> interfaces::vmi::MigrationInfo {
    use interfaces::vmi::MigrationState::{Done, Failed, Rejected};
    let mut op = v.client(OPERATOR).await;
    let start = Instant::now();
    loop {
        let m = op
            .list_migrations(interfaces::vmi::ListMigrationsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .migrations
            .into_iter()
            .find(|m| m.migration_id == id)
            .unwrap();
        if matches!(m.state(), Done | Failed | Rejected) {
            return m;
        }
        assert!(
            start.elapsed() < timeout,
            "migration {id} still {} after {timeout:?}: {}",
            m.state,
            tail(&v.daemon.log_text(), 3000)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The last `n` bytes of a text.
pub fn tail(s: &str, n: usize) -> &str {
    let mut i = s.len().saturating_sub(n);
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// The host name in an operator's `local (HOST)` location.
pub fn host_of(info: &VeeInfo) -> Option<String> {
    info.location
        .strip_prefix("local (")
        .and_then(|s| s.strip_suffix(')'))
        .map(str::to_string)
}

/// A manifest of `instances` tiny guests with host anti-affinity.
pub fn manifest(name: &str, provider: &str, ids: &crate::daemons::GuestIds, instances: u32, extra_sla: &str) -> String {
    format!(
        "[service]\nname = \"{name}\"\nprovider = \"{provider}\"\n[sla]\nguarantee = \"standard\"\nmigration = \"federation\"\npenalty_per_hour = 12.0\n{extra_sla}\n[[component]]\nname = \"web\"\ninstances = {instances}\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"{}\"\nkernel = \"{}\"\ninitrd = \"{}\"\ncmdline = \"{}\"\n[[constraint]]\nkind = \"anti-affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"web\"]\n",
        ids.disk, ids.kernel, ids.initrd, ids.cmdline
    )
}

/// Negotiates `manifest_toml` with `c`; panics on a VMI error (a refusal
/// is a verdict, not an error).
pub async fn negotiate(c: &mut PeerClient, manifest_toml: String) -> NegotiateResponse {
    c.negotiate(NegotiateRequest { manifest_toml }).await.unwrap().into_inner()
}

/// Deploys `manifest_toml` with `c`: the service, or the VMI error.
pub async fn deploy(c: &mut PeerClient, manifest_toml: String) -> Result<ServiceInfo, tonic::Status> {
    c.deploy(DeployRequest {
        manifest_toml,
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

/// The events so far of service `service_id` as `c` may see them.
/// The VEEs of `service` (the first page: up to 100), by instance.
pub async fn vees(c: &mut PeerClient, service: &str) -> Vec<VeeInfo> {
    let mut vees = c
        .list_vees(interfaces::vmi::ListVeesRequest {
            service_id: service.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .vees;
    vees.sort_by_key(|v| v.instance);
    vees
}

/// Every stored event of service `service_id` that `c` may see, oldest
/// first, read page after page (ListEvents).
pub async fn history(c: &mut PeerClient, service_id: &str) -> Vec<Event> {
    let (mut v, mut token) = (Vec::new(), String::new());
    loop {
        let page = c
            .list_events(ListEventsRequest {
                service_id: service_id.into(),
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        v.extend(page.events);
        if page.next_page_token.is_empty() {
            return v;
        }
        token = page.next_page_token;
    }
}

/// Asks `c` for `action` (stop, checkpoint, withdraw, ...) on VEE `vee`:
/// the VEE as it is afterwards, or the VMI error.
pub async fn vee_action(c: &mut PeerClient, vee: &str, action: Action) -> Result<VeeInfo, tonic::Status> {
    c.vee_action(VeeActionRequest {
        vee_id: vee.into(),
        action: action as i32,
        checkpoint_id: String::new(),
    })
    .await
    .map(|r| r.into_inner())
}

/// A free port for a VEEM.
/// The VMI endpoint of site `site_id`'s VEEM on `port` (at its place of
/// the lab: peers call it across the WAN).
pub fn endpoint(site_id: &str, port: u16) -> String {
    format!("https://{}:{port}", Place::of_site(site_id).addr())
}

pub fn port() -> u16 {
    free_port()
}

/// `veem ARGS` (the CLI binary) as `token`'s holder against site A's VMI
/// at `endpoint` (one URL, or several separated by commas), trusting site
/// A's VMI CA, with no client configuration of this machine's (`home` as
/// its HOME).
pub fn cli_at(endpoint: &str, home: &Path, token: &str, args: &[&str]) -> std::process::Output {
    cli_of("site-a", endpoint, home, token, args)
}

/// [`cli_at`] for site `site_id`'s VEEMs (trusting its CA).
pub fn cli_of(site_id: &str, endpoint: &str, home: &Path, token: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(crate::lab::binary("veem"))
        .env("VEEM_TOKEN", token)
        .env("VEEM_CA", vee_testkit::pki::site(site_id).vmi_ca())
        .env_remove("VEEM_CLIENT_CONFIG")
        .env("HOME", home)
        .args(["--endpoint", endpoint])
        .args(args)
        .output()
        .unwrap()
}
