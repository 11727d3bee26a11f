//! Paced metering: a round asks only the hosts in turn.

use crate::sim::{FakeSite, STANDARD};
use crate::workflows::accounting::LastMeters;

fn list_stats(site: &FakeSite, host: &str) -> usize {
    site.host(host).calls().iter().filter(|c| c.starts_with("list_stats")).count()
}

#[tokio::test]
async fn a_paced_round_meters_only_the_hosts_in_turn_and_keeps_the_others_meters() {
    // One host a 1 s round (1 a second): each of two hosts every other round.
    let site = FakeSite::start(&["h1", "h2"], "usage_interval = \"1s\"\nmax_heartbeats_per_second = 1\n").await;
    let mut vees = site.running_service(STANDARD);
    vees.extend(site.running_service(STANDARD));
    // One of them on each host, whatever the placement.
    for (v, h) in vees.iter().zip(["h1", "h2"]) {
        let mut rec = site.veem.core.vee(v).unwrap();
        if let Some(from) = rec.host() {
            site.host(from).set_running(v, false);
        }
        rec.location = crate::model::Location::Host(h.into());
        site.veem.core.save_vee(&rec).unwrap();
        site.host(h).set_running(v, true);
    }
    let on = |h: &str| vees.iter().filter(|v| site.veem.core.vee(v).unwrap().host() == Some(h)).count();
    assert!(on("h1") > 0 && on("h2") > 0, "a VEE on each host");
    let (mut last, mut cursor) = (LastMeters::default(), 0);
    site.veem.accounting.paced_round(&mut last, &mut cursor).await;
    assert_eq!((list_stats(&site, "h1"), list_stats(&site, "h2")), (1, 0));
    assert_eq!(last.len(), on("h1"));
    site.veem.accounting.paced_round(&mut last, &mut cursor).await;
    assert_eq!((list_stats(&site, "h1"), list_stats(&site, "h2")), (1, 1));
    // h1's meters were kept while it waited for its turn.
    assert_eq!(last.len(), vees.len());
    site.veem.accounting.paced_round(&mut last, &mut cursor).await;
    assert_eq!((list_stats(&site, "h1"), list_stats(&site, "h2")), (2, 1));
}

#[tokio::test]
async fn a_vee_stopped_on_a_host_waiting_for_its_turn_loses_its_meter_in_that_turn() {
    use crate::store::Tree;
    use crate::workflows::accounting::rounds::meters_key;
    let site = FakeSite::start(&["h1", "h2"], "usage_interval = \"1s\"\nmax_heartbeats_per_second = 1\n").await;
    let v = site.running_service(STANDARD).remove(0);
    let h = site.veem.core.vee(&v).unwrap().host().unwrap().to_string();
    let (mut last, mut cursor) = (LastMeters::default(), 0);
    // Both turns: the VEE is metered on its host, whose meters are stored.
    site.veem.accounting.paced_round(&mut last, &mut cursor).await;
    site.veem.accounting.paced_round(&mut last, &mut cursor).await;
    assert!(last.has(&v));
    assert!(site.veem.core.store.get_raw(Tree::Meters, &meters_key(&h)).unwrap().is_some());
    site.veem.stop.stop_here(&v).await.unwrap();
    // The other host's turn keeps it; its own host's turn drops it (h2's
    // is no sweep: the cycle starts at h1).
    let (other, own) = if h == "h1" { (cursor + 1, cursor) } else { (cursor, cursor + 1) };
    let mut at = other;
    site.veem.accounting.paced_round(&mut last, &mut at).await;
    assert!(last.has(&v), "dropped in another host's turn");
    let mut at = own;
    site.veem.accounting.paced_round(&mut last, &mut at).await;
    assert!(!last.has(&v), "kept after its host's turn");
    assert!(site.veem.core.store.get_raw(Tree::Meters, &meters_key(&h)).unwrap().is_none());
}
