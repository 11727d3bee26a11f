//! Two sites of one VEEH each, whose VEEMs know each other (the
//! federation tests' lab).

use std::time::Duration;

use interfaces::vmi::{DeployRequest, ServiceInfo};

use crate::daemons::{wait_tick, GuestIds, ImageRepo, Veeh};
use crate::site::{self, manifest, Veem};
use crate::{guest, lab};

/// How long a guest may take to boot and tick (TCG).
const BOOT: Duration = Duration::from_secs(180);

/// Site A (VEEH `a1`) and site B (VEEH `b1`), each with its own image
/// repository (issue 39; site A's holds the test guest, `ids`, which site
/// B's pulls through when its hosts need it); test files under `dir`.
pub struct TwoSites {
    pub dir: std::path::PathBuf,
    pub ids: GuestIds,
    pub a: Veem,
    pub b: Veem,
    pub a1: Veeh,
    pub b1: Veeh,
    /// Site A's repository.
    pub repo_a: ImageRepo,
    /// Site B's repository.
    pub repo_b: ImageRepo,
}

impl TwoSites {
    /// Starts both sites for test `name`, with `a_extra` in site A's VEEM
    /// configuration.
    pub async fn start(name: &str, a_extra: &str) -> TwoSites {
        Self::start_both(name, a_extra, "").await
    }

    /// [`TwoSites::start`] with `b_extra` in site B's VEEM configuration.
    pub async fn start_both(name: &str, a_extra: &str, b_extra: &str) -> TwoSites {
        let dir = lab::test_dir(name);
        let (repo_a, repo_b) = ImageRepo::per_site(&dir).await;
        let ids = repo_a.push_guest(&guest::image()).await;
        let a1 = Veeh::start(&dir, "fa1", "site-a", lab::SITE_A_URI, &repo_a).await;
        let b1 = Veeh::start(&dir, "fb1", "site-b", lab::SITE_B_URI, &repo_b).await;
        let (pa, pb) = (site::port(), site::port());
        let (to_b, to_a) = site::peer_links(pa, pb, false);
        let ca = site::write_config(&dir, "site-a", pa, &repo_a, &[&a1], &[to_b], a_extra);
        let cb = site::write_config(&dir, "site-b", pb, &repo_b, &[&b1], &[to_a], b_extra);
        let a = Veem::start(&dir, "site-a", pa, ca).await;
        let b = Veem::start(&dir, "site-b", pb, cb).await;
        TwoSites {
            dir,
            ids,
            a,
            b,
            a1,
            b1,
            repo_a,
            repo_b,
        }
    }

    /// Site A's only host dies as in a power loss: its VEEH is killed and
    /// the domain of `vee` there is gone with it.
    pub fn power_off_a1(&mut self, vee: &str) {
        self.a1.daemon.kill();
        veeh::hypervisor::Hypervisor::open(lab::SITE_A_URI, &self.a1.host)
            .unwrap()
            .destroy(vee)
            .unwrap();
    }

    /// Deploys a one-VEE service as `acme` at site A; returns it and the
    /// VEE's ID once its guest has ticked three times.
    pub async fn deploy_one(&self, acme: &mut veem::peers::PeerClient) -> (ServiceInfo, String) {
        let svc = acme
            .deploy(DeployRequest {
                manifest_toml: manifest("shop", "acme", &self.ids, 1, ""),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let vee = svc.vees[0].vee_id.clone();
        self.a
            .wait_vee(&vee, "running", BOOT, |i| i.state() == interfaces::vmi::VeeState::Running)
            .await;
        wait_tick(&mut self.a1.client().await, &vee, 3, BOOT).await;
        (svc, vee)
    }
}
