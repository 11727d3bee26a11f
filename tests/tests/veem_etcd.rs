//! A site's VEEM over etcd (issue 38, item 1): `[store] engine = "etcd"`
//! with a real cluster (Debian's etcd 3.4, client certificates), a real
//! VEEH and the tiny guest. The records live in the cluster under the
//! site's prefix, not on the VEEM's disk: a VEEM killed and started again
//! finds its service, its VEE and its planner there.

use std::time::Duration;

use e2e::daemons::{ImageRepo, Veeh};
use e2e::site::{self, manifest, Veem, ACME, OPERATOR};
use e2e::{guest, lab};
use interfaces::vmi::*;
use vee_testkit::etcd::EtcdCluster;

const BOOT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_veem_over_etcd_keeps_its_site_in_the_cluster_across_a_kill() {
    let _lab = lab::lock();
    let dir = lab::test_dir("veem-etcd");
    let cluster = tokio::task::block_in_place(|| EtcdCluster::start(&dir, 3)).unwrap();
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let h1 = Veeh::start(&dir, "e1", "site-a", lab::SITE_A_URI, &repo).await;
    let port = site::port();
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&h1], &[], &cluster.store_toml("/vee/site-a"));
    let mut veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    let svc = site::deploy(&mut acme, manifest("shop", "acme", &ids, 1, "")).await.unwrap();
    let vee = svc.vees[0].vee_id.clone();
    veem.wait_vee(&vee, "running", BOOT, |i| i.state() == VeeState::Running).await;

    // The records are in the cluster under the site's prefix; the sled
    // directory of `db` was never made.
    let keys = cluster
        .etcdctl(&cluster.endpoints(), &["get", "--prefix", "--keys-only", "/vee/site-a/vees/"])
        .unwrap();
    assert!(keys.contains(&format!("/vee/site-a/vees/{vee}")), "{keys}");
    assert!(!dir.join("site-a.db").exists(), "nothing on the VEEM's disk");

    // Killed, and started again: the site is read back from the cluster.
    let mut op = veem.client(OPERATOR).await;
    let before = op.list_vees(ListVeesRequest::default()).await.unwrap().into_inner().vees;
    veem.restart().await;
    let mut op = veem.client(OPERATOR).await;
    let after = op.list_vees(ListVeesRequest::default()).await.unwrap().into_inner().vees;
    assert_eq!(
        after.iter().map(|v| (&v.vee_id, v.state())).collect::<Vec<_>>(),
        before.iter().map(|v| (&v.vee_id, v.state())).collect::<Vec<_>>()
    );
    assert_eq!(h1.domains().await.len(), 1, "the VEE ran on, once");
    // The planner came back with its reservation.
    let hosts = op.list_hosts(ListHostsRequest::default()).await.unwrap().into_inner().hosts;
    assert_eq!((hosts[0].used_vcpus, hosts[0].vees), (1, 1), "{hosts:?}");

    h1.destroy_all().await;
    drop((veem, h1, repo, cluster));
    let _ = std::fs::remove_dir_all(&dir);
}
