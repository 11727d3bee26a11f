//! The domain watch on a paced site: lists only when a host's domains
//! changed, and never judged by a list older than the record.

use crate::model::VeeState;
use crate::sim::{FakeSite, STANDARD};
use crate::workflows::reconcile::DomainWatch;

/// Two hosts, one heartbeat a second, 1 s rounds: each host heartbeated
/// every other round (paced).
const PACED: &str = "heartbeat_interval = \"1s\"\nmax_heartbeats_per_second = 1\n";

/// A paced site of two hosts running one VEE; returns it and its host
/// (heartbeated once, its generation `generation`).
async fn paced_site(generation: u64) -> (FakeSite, String, String) {
    let site = FakeSite::start(&["h1", "h2"], PACED).await;
    let vee = site.running_service(STANDARD).remove(0);
    let host = site.veem.core.vee(&vee).unwrap().host().unwrap().to_string();
    site.host(&host).script.lock().unwrap().domains_generation = generation;
    site.veem.core.hosts.heartbeat(&host, 3).await;
    (site, vee, host)
}

fn lists(site: &FakeSite, host: &str) -> usize {
    site.host(host).calls().iter().filter(|c| c.starts_with("list_domains")).count()
}

#[tokio::test]
async fn a_host_whose_generation_did_not_change_is_not_listed_again_one_that_changed_is() {
    let (site, _vee, host) = paced_site(7).await;
    let mut watch = DomainWatch::default();
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(lists(&site, &host), 1);
    site.veem.core.hosts.heartbeat(&host, 3).await;
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(lists(&site, &host), 1, "generation 7 again: its last list stands");
    site.host(&host).script.lock().unwrap().domains_generation = 8;
    site.veem.core.hosts.heartbeat(&host, 3).await;
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(lists(&site, &host), 2, "generation 8: listed again");
    // A VEEH that keeps no generation (0) is listed every round.
    site.host(&host).script.lock().unwrap().domains_generation = 0;
    site.veem.core.hosts.heartbeat(&host, 3).await;
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(lists(&site, &host), 4);
}

#[tokio::test]
async fn the_watch_starts_from_the_reconciles_lists_and_a_domain_lost_since_is_still_seen() {
    let (site, vee, host) = paced_site(7).await;
    site.veem
        .reconcile
        .reconcile(crate::workflows::reconcile::Strays::KeepWithoutRecords)
        .await
        .unwrap();
    assert_eq!(lists(&site, &host), 1, "the reconcile's list");
    let mut watch = site.veem.reconcile.take_watch_seed();
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(
        lists(&site, &host),
        1,
        "generation 7 as when the reconcile listed it: not listed again"
    );
    // Its domain destroyed behind the VEEM's back: the generation moves.
    site.host(&host).set_running(&vee, false);
    site.host(&host).script.lock().unwrap().domains_generation = 8;
    site.veem.core.hosts.heartbeat(&host, 3).await;
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!((lists(&site, &host), watch.missing(&vee)), (2, Some(1)));
}

#[tokio::test]
async fn an_unpaced_site_lists_every_round_whatever_the_generation() {
    let site = FakeSite::start(&["h1"], "").await;
    site.host("h1").script.lock().unwrap().domains_generation = 7;
    site.veem.core.hosts.heartbeat("h1", 3).await;
    let mut watch = DomainWatch::default();
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(lists(&site, "h1"), 2);
}

#[tokio::test]
async fn a_domain_gone_behind_the_veems_back_is_restored_once_the_generation_moves() {
    let (site, vee, host) = paced_site(7).await;
    let mut watch = DomainWatch::default();
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    site.host(&host).set_running(&vee, false);
    site.host(&host).script.lock().unwrap().domains_generation = 8;
    site.veem.core.hosts.heartbeat(&host, 3).await;
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(watch.missing(&vee), Some(1));
    // The next round judges by the same list (generation 8 still).
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(lists(&site, &host), 2);
    crate::sim::eventually("restored", || {
        site.host(&host).runs(&vee) && site.veem.core.vee(&vee).unwrap().state == VeeState::Running
    })
    .await;
}

#[tokio::test]
async fn a_vee_recorded_running_after_its_hosts_list_is_not_judged_by_it() {
    let (site, vee, host) = paced_site(7).await;
    // Its domain is not there yet when the host is listed.
    site.host(&host).set_running(&vee, false);
    let mut watch = DomainWatch::default();
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(watch.missing(&vee), Some(1));
    // Then it runs (restored, say: the VEEH's generation has not moved
    // yet) and its record is written after the list.
    site.host(&host).set_running(&vee, true);
    let v = site.veem.core.vee(&vee).unwrap();
    site.veem.core.save_vee(&v).unwrap();
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(watch.missing(&vee), None, "the list predates the record");
    assert_eq!(lists(&site, &host), 1);
    // So the host is listed again, and the VEE is found running.
    site.veem.reconcile.domain_watch_round(&mut watch).await;
    assert_eq!(lists(&site, &host), 2);
    assert_eq!(watch.missing(&vee), None);
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, VeeState::Running);
    assert!(!site.host(&host).calls().iter().any(|c| c.starts_with("restore")));
}
