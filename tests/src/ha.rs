//! Site A's control plane on etcd in the lab's tests (issue 38): its
//! VEEMs started without waiting for them to lead, asked whether they
//! lead, waited for until one does.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use interfaces::vmi::vmi_service_client::VmiServiceClient;
use interfaces::vmi::{ListVeesRequest, VeeInfo};

use crate::daemons::{Daemon, ImageRepo, Veeh};
use crate::lab;
use crate::site::{self, PeerLink, Veem, OPERATOR};

/// A VEEM of site A named `name` (its log) on `port` with `config`, not
/// waiting for it to lead.
pub fn spawn(dir: &Path, name: &str, port: u16, config: &Path) -> Veem {
    let daemon = Daemon::spawn_at(
        lab::Place::SiteA,
        name,
        "veem",
        &["serve", "--config", config.to_str().unwrap()],
        dir,
    );
    Veem {
        daemon,
        site_id: "site-a".into(),
        endpoint: site::endpoint("site-a", port),
        config: config.to_path_buf(),
        dir: dir.to_path_buf(),
    }
}

/// A VMI client of site A's VEEM at `endpoint` presenting `token`, or
/// UNAVAILABLE when it cannot be reached (unlike `Veem::client`, which
/// panics: a VEEM here may be dead or stopped on purpose).
pub async fn client(endpoint: &str, token: &str) -> Result<veem::peers::PeerClient, tonic::Status> {
    let ch = vee_testkit::pki::site("site-a")
        .vmi_channel(endpoint, None)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    Ok(VmiServiceClient::with_interceptor(ch, veem::peers::Bearer::new(token).unwrap()))
}

/// What `v` answers the operator's ListVees: the VEEs when it leads, its
/// status otherwise (a standby's names the leader).
pub async fn list(v: &Veem) -> Result<Vec<VeeInfo>, tonic::Status> {
    let mut c = client(&v.endpoint, OPERATOR).await?;
    Ok(c.list_vees(ListVeesRequest::default()).await?.into_inner().vees)
}

/// Waits until `v` leads (answers ListVees); how long it took.
pub async fn wait_leading(v: &mut Veem, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if list(v).await.is_ok() {
            return start.elapsed();
        }
        v.daemon.assert_alive();
        assert!(
            start.elapsed() < within,
            "{} did not lead within {within:?}; log:\n{}",
            v.daemon.name,
            v.daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The config of one of site A's VEEMs named `name` on `port`, over
/// `hosts`, with `peers` and `store` (its `[store]` table), in its own
/// file.
pub fn config(dir: &Path, name: &str, port: u16, repo: &ImageRepo, hosts: &[&Veeh], peers: &[PeerLink], store: &str) -> PathBuf {
    let written = site::write_config(dir, "site-a", port, repo, hosts, peers, store);
    let own = dir.join(format!("{name}.toml"));
    std::fs::rename(written, &own).unwrap();
    own
}
