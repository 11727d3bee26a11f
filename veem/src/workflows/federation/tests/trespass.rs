//! A peer's incoming VEE stays in what the peer runs here: it cannot join
//! a local provider's service, nor take the ID of a local VEE.

use super::*;
use crate::domain::peer::{Incoming, IncomingVee};
use crate::store::Tree;
use interfaces::manifest::GuaranteeLevel;

/// Site A's running VEE as A would send it to B, with `edit` applied.
fn incoming(a: &FakeSite, vee: &str, edit: impl FnOnce(&mut interfaces::vhi::VeeSpec)) -> IncomingVee {
    let mut spec = a.veem.networks.spec_of(&a.veem.core.vee(vee).unwrap());
    edit(&mut spec);
    IncomingVee {
        spec,
        primary_site: "site-a".into(),
        guarantee: GuaranteeLevel::Standard,
        how: Incoming::Boot,
    }
}

#[tokio::test]
async fn a_peer_cannot_place_its_vee_into_a_local_providers_service() {
    let (a, b, vee) = two_sites(B_TRUSTS_A).await;
    let local = b.running_service(STANDARD).remove(0);
    let local_service = b.veem.core.vee(&local).unwrap().service_id;
    let before: crate::model::ServiceRec = b.veem.core.store.get(Tree::Services, &local_service).unwrap().unwrap();

    let req = incoming(&a, &vee, |s| s.service_id = local_service.clone());
    let e = format!("{:#}", b.veem.federation.accept_incoming("site-a", req).await.unwrap_err());
    assert!(e.contains("service_id") && e.contains("site-a"), "{e}");

    let after: crate::model::ServiceRec = b.veem.core.store.get(Tree::Services, &local_service).unwrap().unwrap();
    assert_eq!(after.vees, before.vees, "the local service gained no VEE");
    assert!(b.veem.core.vee(&vee).is_err(), "no record of the peer's VEE");
    assert!(b.veem.core.planner().reservation(&vee).is_none(), "nothing reserved");
}

#[tokio::test]
async fn a_peer_cannot_take_the_id_of_a_local_vee() {
    let (a, b, vee) = two_sites(B_TRUSTS_A).await;
    let local = b.running_service(STANDARD).remove(0);
    b.veem.stop.stop_here(&local).await.unwrap();
    let before = b.veem.core.vee(&local).unwrap();

    let req = incoming(&a, &vee, |s| s.vee_id = local.clone());
    let e = format!("{:#}", b.veem.federation.accept_incoming("site-a", req).await.unwrap_err());
    assert!(e.contains("vee_id") && e.contains("site-a"), "{e}");

    let after = b.veem.core.vee(&local).unwrap();
    assert_eq!(
        (after.service_id, after.for_peer, after.state),
        (before.service_id, None, before.state)
    );
}
