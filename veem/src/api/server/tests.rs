//! The VMI handlers as each role sees them: location unawareness (E §3.4)
//! for providers, and who may name a migration's destination.

use futures::StreamExt;
use tonic::{Code, Request};

use super::*;
use crate::model::{UsageRec, ViolationRec};
use crate::sim::{FakeSite, STANDARD};
use crate::store::Tree;
use crate::workflows::migration::Dest;

const TOKENS: &str = "[[tokens]]\ntoken = \"provider-token\"\nrole = \"provider\"\nname = \"acme\"\n\
[[tokens]]\ntoken = \"operator-token\"\nrole = \"operator\"\n\
[[peers]]\nsite_id = \"site-b\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"t\"\n[peers.agreement]\nprice_per_vee_hour = 0.5\n";

fn as_<T>(token: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

/// Everything `token`'s caller reads of service `svc` and VEE `vee`, as
/// one text: the VEE, the service, the migrations, the events, the usage.
async fn everything_seen(vmi: &VmiService, token: &str, svc: &str, vee: &str) -> String {
    let mut seen = String::new();
    let v = vmi
        .get_vee(as_(token, GetVeeRequest { vee_id: vee.into() }))
        .await
        .unwrap()
        .into_inner();
    seen.push_str(&format!("{v:?}\n"));
    let s = vmi
        .get_service(as_(token, GetServiceRequest { service_id: svc.into() }))
        .await
        .unwrap()
        .into_inner();
    seen.push_str(&format!("{s:?}\n"));
    let m = vmi
        .list_migrations(as_(token, ListMigrationsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    seen.push_str(&format!("{m:?}\n"));
    let watch = WatchEventsRequest {
        service_id: svc.into(),
        history_only: true,
    };
    let events: Vec<_> = vmi.watch_events(as_(token, watch)).await.unwrap().into_inner().collect().await;
    for e in events {
        seen.push_str(&format!("{:?}\n", e.unwrap()));
    }
    let u = vmi
        .get_usage(as_(token, GetUsageRequest { service_id: svc.into() }))
        .await
        .unwrap()
        .into_inner();
    seen.push_str(&format!("{u:?}\n"));
    seen
}

#[tokio::test]
async fn a_provider_never_learns_hosts_or_sites_and_cannot_name_them() {
    let site = FakeSite::start(&["h1", "h2"], TOKENS).await;
    let vee = site.running_service(STANDARD).remove(0);
    let v = site.veem.core.vee(&vee).unwrap();
    let host = v.host().unwrap().to_string();
    let other = if host == "h1" { "h2" } else { "h1" };
    let vmi = VmiService::handler(site.veem.clone());

    // Naming a host or a site is the operator's.
    for (to_host, to_site) in [(other, ""), ("", "site-b")] {
        let req = MigrateRequest {
            vee_id: vee.clone(),
            to_host: to_host.into(),
            to_site: to_site.into(),
            reason: "consolidation".into(),
        };
        let e = vmi.migrate(as_("provider-token", req)).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("only the site's operator names hosts or sites"), "{e:?}");
    }
    // Asking without a destination: the site chooses, an operator approves.
    let req = MigrateRequest {
        vee_id: vee.clone(),
        reason: "consolidation".into(),
        ..Default::default()
    };
    let m = vmi.migrate(as_("provider-token", req)).await.unwrap().into_inner();
    assert_eq!(m.state(), vmi::MigrationState::Proposed);
    assert_eq!((m.source.as_str(), m.destination.as_str()), ("host:[host]", "host:[host]"));
    assert_eq!(site.veem.migration.migration(&m.migration_id).unwrap().to, Dest::Host(other.into()));
    // A violation and a usage record that name where the VEE ran.
    let violation = ViolationRec {
        id: "x".into(),
        service_id: v.service_id.clone(),
        vee_id: vee.clone(),
        term: format!("restore on {host} took 9 s, more than max_downtime_ms at site-a"),
        start_unix: 1,
        end_unix: 2,
        penalty: 1.0,
    };
    site.veem.core.store.put(Tree::Violations, "x", &violation).unwrap();
    let usage = UsageRec {
        record_id: "u".into(),
        abc_id: v.service_id.clone(),
        vee_id: vee.clone(),
        site_chain: vec!["site-b".into(), "site-a".into()],
        start_unix: 1,
        end_unix: 2,
        cpu_seconds: 1.0,
        memory_mib_seconds: 1.0,
        disk_bytes: 0,
        net_bytes: 0,
        sent: false,
        kpis: Default::default(),
    };
    site.veem.core.store.put(Tree::Usage, "u", &usage).unwrap();

    let provider = everything_seen(&vmi, "provider-token", &v.service_id, &vee).await;
    for name in ["h1", "h2", "site-a", "site-b"] {
        assert!(!provider.contains(name), "the provider sees {name:?} in:\n{provider}");
    }
    assert!(provider.contains("location: \"placed\""), "{provider}");
    // Its usage names the VEE's component (`veem usage --group-by component`).
    assert!(
        provider.contains(&format!("kpis: [], component: \"{}\"", v.component)),
        "{provider}"
    );
    assert!(
        provider.contains("migration") && provider.contains("restore on [host] took 9 s"),
        "{provider}"
    );
    // The operator sees it all.
    let operator = everything_seen(&vmi, "operator-token", &v.service_id, &vee).await;
    for name in [host.as_str(), other, "site-a", "site-b"] {
        assert!(operator.contains(name), "the operator does not see {name:?} in:\n{operator}");
    }
}

/// An action the caller left unset is refused at the VMI, naming the
/// field, before any workflow or host is asked (the workflows' actions
/// are a domain enum with no unset value).
#[tokio::test]
async fn an_unset_action_is_refused_naming_the_field() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let vee = site.running_service(STANDARD).remove(0);
    let vmi = VmiService::handler(site.veem.clone());
    let req = VeeActionRequest {
        vee_id: vee,
        action: 0,
        checkpoint_id: String::new(),
    };
    let e = vmi.vee_action(as_("provider-token", req)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("field `action`"), "{}", e.message());
    assert!(site.host("h1").calls().is_empty(), "no host asked");
}

/// A peer's calls carry the epoch of the VEEM that leads it: once this
/// site has seen a newer one, an older one's calls are refused before
/// any handler (issue 38: a peer's stalled old leader is fenced here too).
#[tokio::test]
async fn a_peer_call_of_an_older_epoch_than_seen_is_refused() {
    let peer_token = "[[tokens]]\ntoken = \"b-to-a-token\"\nrole = \"peer\"\nname = \"site-b\"\n";
    let site = FakeSite::start(&["h1"], &format!("{TOKENS}{peer_token}")).await;
    let vmi = VmiService::handler(site.veem.clone());
    let call = |epoch: Option<i64>| {
        let mut r = as_("b-to-a-token", ReleaseSpareRequest { vee_id: "v-nope".into() });
        if let Some(e) = epoch {
            r.metadata_mut().insert(interfaces::fencing::EPOCH, e.into());
        }
        r
    };
    let fenced = |r: &Result<Response<ReleaseSpareResponse>, Status>| matches!(r, Err(s) if s.code() == Code::FailedPrecondition && s.message().starts_with("fenced"));
    assert!(!fenced(&vmi.release_spare(call(Some(7))).await), "epoch 7 is the newest");
    let old = vmi.release_spare(call(Some(5))).await;
    assert!(fenced(&old), "{old:?}");
    let msg = old.unwrap_err().message().to_string();
    assert!(msg.contains("epoch 5") && msg.contains("epoch 7"), "{msg}");
    assert!(!fenced(&vmi.release_spare(call(Some(9))).await));
    assert!(fenced(&vmi.release_spare(call(Some(7))).await), "9 is the newest now");
    let restarted = VmiService::handler(site.veem.clone());
    assert!(fenced(&restarted.release_spare(call(Some(8))).await), "kept in the store");
    assert!(
        fenced(&vmi.release_spare(call(None)).await),
        "no epoch, once the peer has led with epochs"
    );
}

/// A peer's stream (here its event stream) admitted under an epoch ends
/// when a call of a newer leader of that peer is admitted.
#[tokio::test]
async fn a_peers_stream_ends_when_a_newer_leader_of_it_calls() {
    use std::time::Duration;
    let peer_token = "[[tokens]]\ntoken = \"b-to-a-token\"\nrole = \"peer\"\nname = \"site-b\"\n";
    let site = FakeSite::start(&["h1"], &format!("{TOKENS}{peer_token}")).await;
    let vmi = VmiService::handler(site.veem.clone());
    fn stamped<T>(e: i64, mut r: Request<T>) -> Request<T> {
        r.metadata_mut().insert(interfaces::fencing::EPOCH, e.into());
        r
    }
    let watch = stamped(5, as_("b-to-a-token", interfaces::vmi::WatchEventsRequest::default()));
    let mut events = vmi.watch_events(watch).await.unwrap().into_inner();
    let still = tokio::time::timeout(Duration::from_millis(200), events.next()).await;
    assert!(still.is_err(), "the stream stays open: {still:?}");
    let _ = vmi
        .release_spare(stamped(6, as_("b-to-a-token", ReleaseSpareRequest { vee_id: "v-nope".into() })))
        .await;
    let end = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
    assert!(matches!(end, Ok(None)), "the stream ended: {end:?}");
}

fn with_id<T>(token: &str, id: &str, msg: T) -> Request<T> {
    let mut r = as_(token, msg);
    r.metadata_mut().insert(replies::REQUEST_ID, id.parse().unwrap());
    r
}

/// A change asked again with its request ID (a retry after a lost answer
/// or a takeover) gets the first call's answer and is not made twice;
/// the same ID for another change is refused, and so is a malformed ID.
#[tokio::test]
async fn a_change_asked_again_with_its_request_id_is_made_once() {
    let site = FakeSite::start(&["h1"], TOKENS).await;
    let vee = site.running_service(STANDARD).remove(0);
    let vmi = VmiService::handler(site.veem.clone());
    let checkpoint = |action: Action| VeeActionRequest {
        vee_id: vee.clone(),
        action: vmi::Action::from(action) as i32,
        checkpoint_id: String::new(),
    };
    let first = vmi
        .vee_action(with_id("provider-token", "cp-1", checkpoint(Action::Checkpoint)))
        .await
        .unwrap()
        .into_inner();
    // Asked again, even by a VEEM started anew over the same store.
    let site = site.restart();
    let vmi = VmiService::handler(site.veem.clone());
    let again = vmi
        .vee_action(with_id("provider-token", "cp-1", checkpoint(Action::Checkpoint)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first, again);
    let taken = |site: &FakeSite| site.host("h1").calls().iter().filter(|c| c.starts_with("checkpoint")).count();
    assert_eq!(taken(&site), 1, "{:?}", site.host("h1").calls());
    // Another change under the same ID: refused, nothing done.
    let e = vmi
        .vee_action(with_id("provider-token", "cp-1", checkpoint(Action::Suspend)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(
        e.message().contains("\"cp-1\"") && e.message().contains("VeeAction"),
        "{}",
        e.message()
    );
    assert_eq!(site.veem.core.vee(&vee).unwrap().state, crate::model::VeeState::Running);
    // Without an ID, or with another, a change is made each time.
    for id in [None, Some("cp-2")] {
        let r = match id {
            Some(id) => with_id("provider-token", id, checkpoint(Action::Checkpoint)),
            None => as_("provider-token", checkpoint(Action::Checkpoint)),
        };
        vmi.vee_action(r).await.unwrap();
    }
    assert_eq!(taken(&site), 3);
    let e = vmi
        .vee_action(with_id("provider-token", "no spaces", checkpoint(Action::Checkpoint)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("vee-request-id"), "{}", e.message());
    // A failed change keeps nothing: asked again, it runs again.
    site.host("h1").fail("Checkpoint", Code::Unavailable, "libvirt busy");
    let r = || with_id("provider-token", "cp-3", checkpoint(Action::Checkpoint));
    assert!(vmi.vee_action(r()).await.is_err());
    site.host("h1").script.lock().unwrap().failing.clear();
    vmi.vee_action(r()).await.expect("run again once the host answers");
}

/// GetVee shows where the latest checkpoint is held to the operator (a
/// VEE run for a peer: `local-only` while its copy at the primary is held
/// up), never to a provider (it would tell of sites); lists leave it unset.
#[tokio::test]
async fn the_operator_sees_the_latest_checkpoints_replication_and_a_provider_does_not() {
    let site = FakeSite::start_site("site-b", &["h1"], &format!("replicate_checkpoints = true\n{TOKENS}"));
    let vee = site.running_service(STANDARD).remove(0);
    let mut v = site.veem.core.vee(&vee).unwrap();
    v.for_peer = Some("site-a".into());
    site.veem.core.save_vee(&v).unwrap();
    site.repo.hold_replication.store(true, std::sync::atomic::Ordering::SeqCst);
    site.veem.lifecycle.checkpoint_vee(&vee).await.unwrap();
    let vmi = VmiService::handler(site.veem.clone());
    let seen = |token: &'static str| {
        let vmi = &vmi;
        let vee = vee.clone();
        async move {
            vmi.get_vee(as_(token, GetVeeRequest { vee_id: vee }))
                .await
                .unwrap()
                .into_inner()
                .latest_checkpoint_replication()
        }
    };
    let operator = seen("operator-token").await;
    assert!(
        matches!(operator, CheckpointReplication::LocalOnly | CheckpointReplication::Replicating),
        "{operator:?}"
    );
    assert_eq!(seen("provider-token").await, CheckpointReplication::Unspecified);
    let listed = vmi
        .list_vees(as_("operator-token", ListVeesRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.vees[0].latest_checkpoint_replication(), CheckpointReplication::Unspecified);
    site.repo.hold_replication.store(false, std::sync::atomic::Ordering::SeqCst);
}
