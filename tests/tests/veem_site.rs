//! One site with real `veem` and `veeh` processes and the tiny guest:
//! deployment with host anti-affinity, provider isolation, checkpoints, a
//! host failure recovered from the latest checkpoint, a rejected manifest
//! that changes nothing, and a VEEM killed mid-deploy.

use std::time::Duration;

use e2e::daemons::{console, wait_tick, ImageRepo, Veeh};
use e2e::site::{self, host_of, manifest, Veem, ACME, GLOBEX, OPERATOR};
use e2e::{guest, lab};
use interfaces::vmi::*;

const BOOT: Duration = Duration::from_secs(180);

fn by_name<'a>(hosts: &'a [&'a Veeh], name: &str) -> &'a Veeh {
    hosts.iter().find(|h| h.host == name).unwrap_or_else(|| panic!("no host {name}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_deploy_checkpoint_and_recover_from_host_failure() {
    let _lab = lab::lock();
    let dir = lab::test_dir("veem-site");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "a1", "site-a", lab::SITE_A_URI, &repo).await;
    let a2 = Veeh::start(&dir, "a2", "site-a", lab::SITE_A_URI, &repo).await;
    let a3 = Veeh::start(&dir, "a3", "site-a", lab::SITE_A_URI, &repo).await;
    let port = site::port();
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&a1, &a2, &a3], &[], "");
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;

    // Two instances, host anti-affinity: two different hosts.
    let svc = acme
        .deploy(DeployRequest {
            manifest_toml: manifest("shop", "acme", &ids, 2, ""),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(svc.vees.len(), 2);
    let mut placed = Vec::new();
    for v in &svc.vees {
        let info = veem
            .wait_vee(&v.vee_id, "running", BOOT, |i| i.state() == interfaces::vmi::VeeState::Running)
            .await;
        placed.push((v.vee_id.clone(), host_of(&info).expect("operator sees the host")));
    }
    assert_ne!(placed[0].1, placed[1].1, "anti-affinity: both instances on one host");
    let hosts = [&a1, &a2, &a3];
    for (vee, host) in &placed {
        wait_tick(&mut by_name(&hosts, host).client().await, vee, 2, BOOT).await;
    }
    // The service provider sees its VEEs, but not where they run.
    let mine = acme
        .get_vee(GetVeeRequest {
            vee_id: placed[0].0.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(mine.location, "placed");
    // Its VEEs page by page: one per page, then no next page.
    let page = |page_token: String| ListVeesRequest {
        service_id: svc.service_id.clone(),
        page_size: 1,
        page_token,
    };
    let first = acme.list_vees(page(String::new())).await.unwrap().into_inner();
    assert_eq!(first.vees.len(), 1);
    assert!(!first.next_page_token.is_empty());
    let second = acme.list_vees(page(first.next_page_token)).await.unwrap().into_inner();
    assert_eq!(second.vees.len(), 1);
    assert!(second.next_page_token.is_empty(), "two VEEs, two pages");
    let mut paged: Vec<String> = [first.vees, second.vees].concat().into_iter().map(|v| v.vee_id).collect();
    let mut all: Vec<String> = svc.vees.iter().map(|v| v.vee_id.clone()).collect();
    paged.sort();
    all.sort();
    assert_eq!(paged, all);
    let bad = acme.list_vees(page("not-a-token".into())).await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");

    // Another service provider cannot see them at all.
    let mut globex = veem.client(GLOBEX).await;
    assert_eq!(
        globex
            .get_service(GetServiceRequest {
                service_id: svc.service_id.clone()
            })
            .await
            .unwrap_err()
            .code(),
        tonic::Code::NotFound
    );
    assert_eq!(
        globex
            .get_vee(GetVeeRequest {
                vee_id: placed[0].0.clone()
            })
            .await
            .unwrap_err()
            .code(),
        tonic::Code::NotFound
    );
    assert!(globex
        .list_services(ListServicesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .services
        .is_empty());
    assert!(globex
        .list_vees(ListVeesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .vees
        .is_empty());
    let err = site::vee_action(&mut globex, &placed[0].0, interfaces::vmi::Action::Stop)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);

    // Checkpoint the first VEE, note its counter, then its host fails.
    let (victim, failed_host) = placed[0].clone();
    let failed = by_name(&hosts, &failed_host);
    let mut fc = failed.client().await;
    let before = guest::last_tick(&console(&mut fc, &victim).await).unwrap().0;
    let after_cp = site::vee_action(&mut acme, &victim, interfaces::vmi::Action::Checkpoint)
        .await
        .unwrap();
    assert!(!after_cp.latest_checkpoint.is_empty());
    let after = guest::last_tick(&console(&mut fc, &victim).await).unwrap().0;
    wait_tick(&mut fc, &victim, after + 3, Duration::from_secs(30)).await;
    checkpoints_are_the_sites_own(&repo, &mut globex, &ids).await;
    // The host dies: its VEEH is killed and its domains are gone.
    let failed_index = hosts.iter().position(|h| h.host == failed_host).unwrap();
    let mut owned = [a1, a2, a3];
    owned[failed_index].daemon.kill();
    let hv = veeh::hypervisor::Hypervisor::open(lab::SITE_A_URI, &failed_host).unwrap();
    hv.destroy(&victim).unwrap();

    // The VEEM declares the host failed and restores the VEE elsewhere.
    let other = placed[1].1.clone();
    let info = veem
        .wait_vee(&victim, "running on another host", Duration::from_secs(120), |i| {
            i.state() == interfaces::vmi::VeeState::Running && host_of(i).is_some_and(|h| h != failed_host)
        })
        .await;
    let new_host = host_of(&info).unwrap();
    assert_ne!(new_host, other, "anti-affinity holds after recovery");
    let nh = owned.iter().find(|h| h.host == new_host).unwrap();
    let mut nc = nh.client().await;
    wait_tick(&mut nc, &victim, 1, Duration::from_secs(60)).await;
    let first = guest::ticks(&console(&mut nc, &victim).await)[0];
    assert!(
        first > before && first <= after + 1,
        "restored from the checkpoint (ticks {before}..={after}), first tick now {first}"
    );
    site::assert_no_violations(&mut acme, &svc.service_id).await;

    // The operator sees the failed host and where the VEEs are now; the
    // event history tells the story; a provider sees no hosts.
    let mut op = veem.client(OPERATOR).await;
    let hosts = op.list_hosts(ListHostsRequest::default()).await.unwrap().into_inner().hosts;
    let status = |h: &str| hosts.iter().find(|x| x.name == h).unwrap().clone();
    assert_eq!(status(&failed_host).health(), interfaces::vmi::HostHealth::Failed);
    assert_eq!(
        (status(&new_host).health(), status(&new_host).vees),
        (interfaces::vmi::HostHealth::Up, 1)
    );
    assert!(status(&new_host).used_memory_mib >= 128 && status(&new_host).memory_mib > 0);
    assert_eq!(
        acme.list_hosts(ListHostsRequest::default()).await.unwrap_err().code(),
        tonic::Code::PermissionDenied
    );
    let history = site::history(&mut acme, &svc.service_id).await;
    assert!(
        history.iter().any(|e| e.vee_id == victim && e.kind == "checkpointed"),
        "{history:?}"
    );
    // The provider reads that it was restored, not where (E §3.4); the
    // operator reads where.
    assert!(
        history
            .iter()
            .any(|e| e.vee_id == victim && e.detail.contains("restored from checkpoint") && e.detail.ends_with("on [host]")),
        "{history:?}"
    );
    assert!(history.iter().all(|e| !e.detail.contains(&new_host)), "{history:?}");
    let mut op = veem.client(OPERATOR).await;
    let seen_by_operator = site::history(&mut op, &svc.service_id).await;
    assert!(
        seen_by_operator
            .iter()
            .any(|e| e.vee_id == victim && e.detail.contains("restored from checkpoint") && e.detail.contains(&new_host)),
        "{seen_by_operator:?}"
    );
    assert!(
        history.iter().all(|e| e.service_id == svc.service_id),
        "only the provider's own events"
    );

    // Stop the service: each guest shuts down by itself (ACPI or its agent,
    // within stop_timeout), and nothing is left on any host.
    for (vee, _) in &placed {
        site::vee_action(&mut acme, vee, interfaces::vmi::Action::Stop).await.unwrap();
    }
    let history = site::history(&mut acme, &svc.service_id).await;
    for (vee, _) in &placed {
        assert!(
            history
                .iter()
                .any(|e| &e.vee_id == vee && e.detail.ends_with("-> stopped: the guest shut down")),
            "{vee}: {history:?}"
        );
    }
    for h in owned.iter().enumerate().filter(|(i, _)| *i != failed_index).map(|(_, h)| h) {
        assert!(h.domains().await.is_empty(), "{} still runs domains", h.host);
    }
    drop(veem);
    drop(owned);
    drop(repo);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 13 S3: a checkpoint's blobs belong to the site that took it. No
/// provider and no anonymous caller reads them, and a provider cannot name
/// one as its image.
async fn checkpoints_are_the_sites_own(repo: &ImageRepo, globex: &mut veem::peers::PeerClient, ids: &e2e::daemons::GuestIds) {
    use interfaces::repo_client::BlobKind;
    let all = repo.client().list().await.unwrap();
    // Its parts' chunk indexes and the chunks they list.
    let index = |part: &str| {
        all.iter()
            .find(|m| m.kind == BlobKind::CheckpointIndex && m.name.ends_with(part))
            .unwrap_or_else(|| panic!("a checkpoint's {part} index"))
    };
    let (memory, disk) = (index("-memory"), index("-disk"));
    let chunk = all
        .iter()
        .find(|m| m.kind == BlobKind::CheckpointChunk)
        .expect("a checkpoint chunk");
    for m in [memory, disk, chunk] {
        assert_eq!(m.owner, "site-a", "{m:?}");
    }
    let anonymous = interfaces::repo_client::RepoClient::with_ca(&repo.url, None, Some(&repo.ca)).unwrap();
    for client in [repo.client_as(&repo.provider_token("acme")), anonymous] {
        for id in [&memory.id, &chunk.id] {
            assert!(
                client.head(id).await.map_or(true, |m| m.is_none()),
                "the guest's RAM is readable: {id}"
            );
            let dest = lab::test_dir("stolen-checkpoint").join("memory");
            assert!(client.pull(id, &dest, None).await.is_err() && !dest.exists());
        }
    }
    let stolen = manifest("thief", "globex", ids, 1, "").replace(&ids.disk, &disk.id.to_string());
    let e = site::deploy(globex, stolen).await.unwrap_err();
    assert!(
        e.message().contains("component[0].image") && e.message().contains("not an image provider \"globex\" may use"),
        "{}",
        e.message()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_rejected_manifest_changes_nothing_and_a_killed_veem_resumes() {
    let _lab = lab::lock();
    let dir = lab::test_dir("veem-restart");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "r1", "site-a", lab::SITE_A_URI, &repo).await;
    let a2 = Veeh::start(&dir, "r2", "site-a", lab::SITE_A_URI, &repo).await;
    let port = site::port();
    // acme's usage SLA (D §3.3): never more than 3 vCPUs at this site.
    let limit = "[usage_limits.acme]\nkind = \"fixed\"\nlimit = { vcpus = 3, memory_mib = 1024, disk_gib = 10 }\n";
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&a1, &a2], &[], limit);
    let mut veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;

    // Rejected: an image the repository does not hold; too big; bad field.
    let unknown = manifest("shop", "acme", &ids, 2, "").replace(&ids.disk, &format!("sha256:{}", "0".repeat(64)));
    let e = site::deploy(&mut acme, unknown).await.unwrap_err();
    assert!(
        e.message().contains("component[0].image") && e.message().contains("not in the image repository"),
        "{}",
        e.message()
    );
    let e = site::deploy(&mut acme, manifest("shop", "acme", &ids, 3, "")).await.unwrap_err();
    assert!(
        e.message().contains("reject"),
        "3 anti-affine instances on 2 hosts: {}",
        e.message()
    );
    let e = site::deploy(
        &mut acme,
        manifest("shop", "acme", &ids, 2, "").replace("memory_mib = 128", "memory_mib = 0"),
    )
    .await
    .unwrap_err();
    assert!(e.message().contains("memory_mib"), "{}", e.message());
    let e = site::deploy(&mut acme, manifest("shop", "globex", &ids, 1, "")).await.unwrap_err();
    assert!(e.message().contains("service.provider"), "{}", e.message());
    // A provider's private image: its own manifests may use it, another's may not.
    let own = repo.client_as(&repo.provider_token("acme"));
    let mut private = std::fs::read(&guest::image().initrd).unwrap();
    private.extend_from_slice(b"acme's own build");
    let file = dir.join("acme-initrd.img");
    std::fs::write(&file, &private).unwrap();
    let meta = interfaces::repo_client::PushMeta::new("acme-initrd", interfaces::repo_client::BlobKind::Initrd);
    let acme_initrd = own.push_file(&file, &meta).await.unwrap().to_string();
    let with_private = |provider: &str| manifest("shop", provider, &ids, 2, "").replace(&ids.initrd, &acme_initrd);
    let n = site::negotiate(&mut acme, with_private("acme")).await;
    assert_eq!(n.verdict(), interfaces::vmi::Verdict::Accept, "{:?}", n.reasons);
    let mut globex = veem.client(GLOBEX).await;
    let n = site::negotiate(&mut globex, with_private("globex")).await;
    assert_eq!(n.verdict(), interfaces::vmi::Verdict::Reject);
    assert!(
        n.reasons
            .iter()
            .any(|r| r.contains("component[0].initrd") && r.contains(&acme_initrd)),
        "{:?}",
        n.reasons
    );
    let n = site::negotiate(&mut acme, manifest("shop", "acme", &ids, 2, "")).await;
    assert_eq!(n.verdict(), interfaces::vmi::Verdict::Accept);
    assert!(
        acme.list_services(ListServicesRequest::default())
            .await
            .unwrap()
            .into_inner()
            .services
            .is_empty(),
        "nothing deployed by rejections or negotiation"
    );
    assert!(a1.domains().await.is_empty() && a2.domains().await.is_empty());

    // Nothing was reserved: a deployment that needs both hosts fits. The
    // VEEM is killed right after accepting it, mid-deploy.
    let shop = DeployRequest {
        manifest_toml: manifest("shop", "acme", &ids, 2, ""),
        request_id: "shop-deploy-1".into(),
    };
    let svc = acme.deploy(shop.clone()).await.unwrap().into_inner();
    // Killed as soon as it answers: its VEEHs are still preparing.
    veem.restart().await;
    // The client never saw the answer and asks again with its request ID:
    // the same service, deployed once (R1).
    let mut acme = veem.client(ACME).await;
    assert_eq!(acme.deploy(shop).await.unwrap().into_inner().service_id, svc.service_id);
    for v in &svc.vees {
        veem.wait_vee(&v.vee_id, "running", BOOT, |i| i.state() == interfaces::vmi::VeeState::Running)
            .await;
    }
    // Nothing lost, nothing duplicated: exactly one domain per VEE.
    let (d1, d2) = (a1.domains().await, a2.domains().await);
    assert_eq!(d1.len() + d2.len(), 2, "{d1:?} {d2:?}");
    assert_eq!(d1.len(), 1);
    let mut acme = veem.client(ACME).await;
    let again = acme
        .get_service(GetServiceRequest {
            service_id: svc.service_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.vees.len(), 2);
    assert_eq!(again.state(), interfaces::vmi::ServiceState::Running);

    // The usage SLA, read again from the configuration after the restart:
    // acme holds 2 vCPUs, so 2 more are refused although the hosts have
    // room for them; 1 more is within the limit; globex has no limit.
    let over = site::negotiate(&mut acme, manifest("shop2", "acme", &ids, 2, "")).await;
    assert_eq!(over.verdict(), interfaces::vmi::Verdict::Reject, "{over:?}");
    assert!(
        over.reasons
            .iter()
            .any(|r| r.contains("usage SLA of consumer \"acme\"") && r.contains("fixed limit")),
        "{over:?}"
    );
    let e = site::deploy(&mut acme, manifest("shop2", "acme", &ids, 2, "")).await.unwrap_err();
    assert!(e.message().contains("fixed limit"), "{}", e.message());
    let within = site::negotiate(&mut acme, manifest("shop2", "acme", &ids, 1, "")).await;
    assert_eq!(within.verdict(), interfaces::vmi::Verdict::Accept, "{within:?}");
    let mut globex = veem.client(GLOBEX).await;
    let other = site::negotiate(&mut globex, manifest("bazaar", "globex", &ids, 2, "")).await;
    assert_eq!(other.verdict(), interfaces::vmi::Verdict::Accept, "no limit for globex: {other:?}");
    assert_eq!(
        acme.list_services(ListServicesRequest::default())
            .await
            .unwrap()
            .into_inner()
            .services
            .len(),
        1
    );
    let mine = acme
        .list_usage_limits(ListUsageLimitsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .limits;
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(
        (mine[0].consumer.as_str(), mine[0].kind()),
        ("acme", interfaces::vmi::UsageLimitKind::Fixed)
    );
    assert_eq!(mine[0].held.as_ref().map(|h| (h.vcpus, h.memory_mib)), Some((2, 256)));
    assert!(globex
        .list_usage_limits(ListUsageLimitsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .limits
        .is_empty());
    for h in [&a1, &a2] {
        h.destroy_all().await;
    }
    let mut op = veem.client(OPERATOR).await;
    assert!(op.list_vees(ListVeesRequest::default()).await.unwrap().into_inner().vees.len() == 2);
    drop((veem, a1, a2, repo));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_vee_destroyed_behind_the_veems_back_is_restored_from_its_checkpoint() {
    let _lab = lab::lock();
    let dir = lab::test_dir("veem-vanish");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "a1", "site-a", lab::SITE_A_URI, &repo).await;
    let port = site::port();
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&a1], &[], "");
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    let svc = site::deploy(&mut acme, manifest("shop", "acme", &ids, 1, "")).await.unwrap();
    let vee = svc.vees[0].vee_id.clone();
    veem.wait_vee(&vee, "running", BOOT, |i| i.state() == interfaces::vmi::VeeState::Running)
        .await;
    let mut c = a1.client().await;
    wait_tick(&mut c, &vee, 2, BOOT).await;
    let before = guest::last_tick(&console(&mut c, &vee).await).unwrap().0;
    site::vee_action(&mut acme, &vee, interfaces::vmi::Action::Checkpoint)
        .await
        .unwrap();
    let after = guest::last_tick(&console(&mut c, &vee).await).unwrap().0;
    wait_tick(&mut c, &vee, after + 3, Duration::from_secs(30)).await;

    // Destroyed behind the VEEM's back (its host stays up).
    let killed = std::process::Command::new("virsh")
        .args(["-c", lab::SITE_A_URI, "destroy", &format!("vee-{vee}")])
        .output()
        .unwrap();
    assert!(killed.status.success(), "{}", String::from_utf8_lossy(&killed.stderr));
    let start = std::time::Instant::now();
    let first = loop {
        let ticks = guest::ticks(&console(&mut c, &vee).await);
        if let Some(i) = ticks.windows(2).rposition(|w| w[1] <= w[0]) {
            break ticks[i + 1];
        }
        assert!(start.elapsed() < Duration::from_secs(90), "never restored: {ticks:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!("destroyed behind the VEEM's back: ticking again after {:?}", start.elapsed());
    assert!(
        first > before && first <= after + 1,
        "restored from the checkpoint (ticks {before}..={after}), first tick again {first}"
    );
    let info = veem
        .wait_vee(&vee, "running", Duration::from_secs(30), |i| {
            i.state() == interfaces::vmi::VeeState::Running
        })
        .await;
    assert_eq!(host_of(&info).as_deref(), Some(a1.host.as_str()));
    let mut op = veem.client(OPERATOR).await;
    let events = site::history(&mut op, &svc.service_id).await;
    assert!(events.iter().any(|e| e.detail.contains("vanished from")), "{events:?}");
    site::vee_action(&mut acme, &vee, interfaces::vmi::Action::Stop).await.unwrap();
    drop((veem, a1));
    std::fs::remove_dir_all(&dir).unwrap();
}
