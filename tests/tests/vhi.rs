//! A real `veeh` process over gRPC against the lab's libvirtds and the tiny
//! guest: boot, checkpoint and restore on a second host, live migration from
//! site A to site B, an interrupted migration, and libvirtd restarting under
//! a running VEEH.

use std::process::Command;
use std::time::Duration;

use e2e::daemons::{boot, checkpoint, console, migrate, wait_tick, ImageRepo, Veeh};
use e2e::guest::last_tick;
use e2e::{disk, guest, lab};
use interfaces::manifest::RegistryImage;
use interfaces::registry::{Registries, RegistryConfig, Scope};
use interfaces::vhi::vhi_service_client::VhiServiceClient;
use interfaces::vhi::*;
use interfaces::BlobId;
use tonic::transport::Channel;

const BOOT: Duration = Duration::from_secs(120);

async fn domains(c: &mut VhiServiceClient<Channel>) -> Vec<DomainInfo> {
    c.list_domains(ListDomainsRequest::default()).await.unwrap().into_inner().domains
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_checkpoint_then_restore_on_another_host_continues_the_counter() {
    let _lab = lab::lock();
    let dir = lab::test_dir("vhi-checkpoint");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "cp-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let a2 = Veeh::start(&dir, "cp-a2", "site-a", lab::SITE_A_URI, &repo).await;
    let (mut c1, mut c2) = (a1.client().await, a2.client().await);
    let spec = ids.spec("svc-checkpoint");
    let vee = spec.vee_id.clone();
    boot(&mut c1, &spec).await;

    let before = guest::last_tick(&console(&mut c1, &vee).await).unwrap().0;
    let cp = checkpoint(&mut c1, &vee).await;
    let after = guest::last_tick(&console(&mut c1, &vee).await).unwrap().0;
    assert!(cp.memory_blob.starts_with("sha256:") && cp.disk_blob.starts_with("sha256:"));
    assert!(
        cp.memory_bytes > 1 << 20,
        "memory state of a 128 MiB guest: {} bytes",
        cp.memory_bytes
    );
    let profile = cp.profile.clone().unwrap();
    assert!(!profile.machine.is_empty() && !profile.qemu_version.is_empty() && !profile.accel.is_empty());
    // Its parts went in chunks (an image-repo site), memory state
    // sequential (a live snapshot); a second checkpoint of the guest
    // sends only the chunks that changed: about 45 % of the first's bytes
    // for this busy counter (docs/benchmarks.md).
    assert_eq!(cp.layout(), CheckpointLayout::Chunked);
    assert_eq!(cp.save_format(), SaveFormat::Sequential);
    assert!(cp.bytes_sent > 1 << 20, "the first checkpoint sent {} bytes", cp.bytes_sent);
    let second = checkpoint(&mut c1, &vee).await;
    assert!(
        second.bytes_sent * 4 < cp.bytes_sent * 3,
        "the second checkpoint sent {} bytes, the first {}",
        second.bytes_sent,
        cp.bytes_sent
    );
    // The VEE runs on after the checkpoint.
    wait_tick(&mut c1, &vee, after + 2, Duration::from_secs(30)).await;
    // The repository holds both parts.
    // The repository holds both parts, as the site's own (issue 13 S3).
    let r = repo.client();
    for id in [&cp.memory_blob, &cp.disk_blob] {
        let meta = r.head(&id.parse().unwrap()).await.unwrap();
        assert_eq!(meta.expect("in the repository").owner, "site-a", "{id}");
    }
    // It is an OCI artifact too, whose subject is the image artifact of
    // the VEE's boot files (content IDs) in site-a/images.
    let password = dir.join("site-token");
    std::fs::write(&password, repo.site_token("site-a")).unwrap();
    let host = repo.url.trim_start_matches("https://").to_string();
    let ours = Registries::new(&[RegistryConfig {
        host: host.clone(),
        ca: Some(repo.ca.clone()),
        username: Some("site-a".into()),
        password_file: Some(password),
        scope: Scope::Any,
        realm_hosts: Vec::new(),
    }])
    .unwrap();
    let at = |repository: &str, tag: Option<String>, digest: Option<BlobId>| RegistryImage {
        registry: host.clone(),
        repository: repository.into(),
        tag,
        digest,
    };
    // The artifact is written after the checkpoint is answered.
    let tagged = at("site-a/checkpoints", Some(cp.checkpoint_id.clone()), None);
    let mut tries = 0;
    let raw = loop {
        match ours.raw_manifest(&tagged).await {
            Ok(raw) => break raw,
            Err(_) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no artifact for checkpoint {}: {e}", cp.checkpoint_id),
        }
    };
    let m: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    let subject: BlobId = m["subject"]["digest"].as_str().expect("a subject").parse().unwrap();
    let image = ours.resolve(&at("site-a/images", None, Some(subject.clone()))).await.unwrap();
    let files: Vec<String> = image.layers().map(|l| l.digest.to_string()).collect();
    assert_eq!(files, [spec.image.clone(), spec.kernel.clone(), spec.initrd.clone()]);
    let found = ours
        .referrers(
            &at("site-a/checkpoints", None, None),
            &subject,
            interfaces::artifact::CHECKPOINT_ARTIFACT_TYPE,
        )
        .await
        .unwrap();
    // Both checkpoints of the VEE refer to its image.
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.contains(&BlobId::of(&raw)), "{found:?}");

    // Host a1's VEEH dies; its domain goes on running at the libvirtd a1
    // and a2 share. a2 restores the VEE from the checkpoint, naming a1 as
    // the failed VEEH to fence (as the VEEM's recovery does): a1's copy is
    // destroyed first, and the libvirtd holds one copy, a2's.
    let mut a1 = a1;
    a1.daemon.kill();
    let failed_view = veeh::hypervisor::Hypervisor::open(lab::SITE_A_URI, &a1.host).unwrap();
    assert_eq!(failed_view.state(&vee).unwrap(), Some(veeh::hypervisor::DomainState::Running));
    let st = c2
        .restore(RestoreRequest {
            spec: Some(spec.clone()),
            checkpoint: Some(cp.clone()),
            fence_owner: a1.host.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state(), VeeState::Running);
    assert_eq!(failed_view.state(&vee).unwrap(), None, "the failed VEEH's copy is gone");
    assert_eq!(
        failed_view.foreign_owner(&vee).unwrap(),
        Some(a2.host.clone()),
        "the one copy is a2's"
    );
    let resumed = wait_tick(&mut c2, &vee, 1, Duration::from_secs(30)).await;
    let first_after_restore = guest::ticks(&console(&mut c2, &vee).await)[0];
    assert!(
        first_after_restore > before && first_after_restore <= after + 1,
        "counter must continue from the checkpoint (between {before} and {after}), not restart: first tick after restore {first_after_restore}"
    );
    assert_eq!(resumed.1, Some(resumed.0), "the restored guest reads its own ticks back from disk");
    let last = wait_tick(&mut c2, &vee, first_after_restore + 2, Duration::from_secs(30)).await.0;

    // Restoring the same VEE a second time while it runs is refused.
    let again = c2
        .restore(RestoreRequest {
            spec: Some(spec.clone()),
            checkpoint: Some(cp.clone()),
            fence_owner: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition, "{again:?}");
    // So is a checkpoint whose compatibility profile does not match.
    let mut foreign = cp.clone();
    foreign.profile.as_mut().unwrap().accel = if profile.accel == "tcg" { "kvm".into() } else { "tcg".into() };
    let err = c2
        .restore(RestoreRequest {
            spec: Some(spec.clone()),
            checkpoint: Some(foreign),
            fence_owner: String::new(),
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("`accel`"), "{}", err.message());

    // A checkpoint whose parts this host keeps restores without pulling
    // anything: a2 checkpoints the VEE, its domain goes, and the restore
    // gives QEMU the memory state as it was written.
    let kept = checkpoint(&mut c2, &vee).await;
    // The guest runs a tick past the checkpoint before its domain goes. The
    // console log outlives the domain: the restored guest's progress shows
    // only past the last tick printed before the destroy.
    let now = last_tick(&console(&mut c2, &vee).await).map_or(last, |t| t.0);
    let printed = wait_tick(&mut c2, &vee, now + 1, Duration::from_secs(30)).await.0;
    c2.destroy(DestroyRequest {
        vee_id: vee.clone(),
        remove: false,
    })
    .await
    .unwrap();
    let metrics_at = a2.metrics.clone();
    let metric = |name: &'static str| {
        let at = metrics_at.clone();
        async move {
            let text = interfaces::tls::http_client()
                .build()
                .unwrap()
                .get(format!("http://{at}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            text.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|l| l.strip_prefix(' ')))
                .map_or(0.0, |v| v.trim().parse::<f64>().unwrap())
        }
    };
    let fetched = || metric("veeh_restore_fetched_bytes_total");
    // A chunked checkpoint's memory goes to QEMU through a FIFO while its
    // chunks are read: the first restore on a2 was streamed so.
    assert_eq!(metric("veeh_restores_total{memory=\"streamed\"}").await, 1.0);
    // The parts are kept after the checkpoint's answer.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while metric("veeh_checkpoint_cache_pending").await > 0.0 {
        assert!(std::time::Instant::now() < deadline, "the checkpoint's parts are never kept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before_restore = fetched().await;
    c2.restore(RestoreRequest {
        spec: Some(spec.clone()),
        checkpoint: Some(kept.clone()),
        fence_owner: String::new(),
    })
    .await
    .unwrap();
    let pulled = fetched().await - before_restore;
    assert_eq!(
        pulled, 0.0,
        "a restore from kept parts fetched {pulled} bytes of {} + {}",
        kept.memory_bytes, kept.disk_bytes
    );
    assert_eq!(metric("veeh_restores_total{memory=\"cached\"}").await, 1.0);
    assert_eq!(metric("veeh_restores_total{memory=\"streamed\"}").await, 1.0);
    assert_eq!(metric("veeh_restores_total{memory=\"file\"}").await, 0.0);
    let last = wait_tick(&mut c2, &vee, printed + 1, Duration::from_secs(30)).await.0;

    // The disk holds every tick, 1..n, across the checkpoint and restore.
    c2.destroy(DestroyRequest {
        vee_id: vee.clone(),
        remove: false,
    })
    .await
    .unwrap();
    let on_disk = disk::ticks_on_disk(&a2.state_dir.join("vees").join(&vee).join("overlay.qcow2"), &dir);
    disk::assert_contiguous(&on_disk, last);
    c2.destroy(DestroyRequest {
        vee_id: vee.clone(),
        remove: true,
    })
    .await
    .unwrap();
    assert!(!a2.state_dir.join("vees").join(&vee).exists());
    drop((a1, a2, repo));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_live_migration_from_site_a_to_site_b_keeps_the_counter_going() {
    let _lab = lab::lock();
    let dir = lab::test_dir("vhi-migrate");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a = Veeh::start(&dir, "mig-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let b = Veeh::start(&dir, "mig-b1", "site-b", lab::SITE_B_URI, &repo).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let spec = ids.spec("svc-migrate");
    let vee = spec.vee_id.clone();
    boot(&mut ca, &spec).await;
    let before = wait_tick(&mut ca, &vee, 4, BOOT).await.0;

    let target = cb
        .prepare_incoming(interfaces::vhi::PrepareIncomingRequest { spec: Some(spec.clone()) })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(target.libvirt_uri, lab::SITE_B_URI);
    assert!(target.disk_path.starts_with(b.state_dir.to_str().unwrap()));
    let progress = migrate(&mut ca, &vee, target, 0).await;
    let last = progress.last().unwrap();
    assert_eq!(
        last.phase(),
        interfaces::vhi::MigrationPhase::Done,
        "migration failed: {:?}",
        last.error
    );
    assert!(interfaces::time::ms_of_duration(&last.total) > 0);
    cb.complete_incoming(CompleteIncomingRequest { vee_id: vee.clone() }).await.unwrap();

    // Exactly one copy: at B, none at A.
    assert!(domains(&mut ca).await.is_empty(), "VEE still at site A");
    let at_b = domains(&mut cb).await;
    assert_eq!(at_b.len(), 1);
    assert_eq!(at_b[0].state(), VeeState::Running);
    let first_at_b = {
        wait_tick(&mut cb, &vee, 1, Duration::from_secs(30)).await;
        guest::ticks(&console(&mut cb, &vee).await)[0]
    };
    assert!(first_at_b > before, "counter must go on at B (was {before} at A), got {first_at_b}");
    let (n, d) = wait_tick(&mut cb, &vee, first_at_b + 2, Duration::from_secs(30)).await;
    assert_eq!(d, Some(n), "the guest at B reads its ticks back from its disk");
    assert!(
        !a.state_dir.join("vees").join(&vee).exists(),
        "site A keeps no files of a migrated VEE"
    );

    cb.destroy(DestroyRequest {
        vee_id: vee.clone(),
        remove: false,
    })
    .await
    .unwrap();
    let on_disk = disk::ticks_on_disk(&b.state_dir.join("vees").join(&vee).join("overlay.qcow2"), &dir);
    disk::assert_contiguous(&on_disk, n);
    cb.destroy(DestroyRequest {
        vee_id: vee.clone(),
        remove: true,
    })
    .await
    .unwrap();
    drop((a, b, repo));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_migration_whose_destination_dies_leaves_the_vee_running_at_the_source() {
    let _lab = lab::lock();
    let dir = lab::test_dir("vhi-migrate-fail");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a = Veeh::start(&dir, "migf-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let b = Veeh::start(&dir, "migf-b1", "site-b", lab::SITE_B_URI, &repo).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let spec = ids.spec("svc-migrate-fail");
    let vee = spec.vee_id.clone();
    boot(&mut ca, &spec).await;
    let target = cb
        .prepare_incoming(interfaces::vhi::PrepareIncomingRequest { spec: Some(spec.clone()) })
        .await
        .unwrap()
        .into_inner();

    // Throttle to 4 MiB/s so the copy takes long enough to kill the
    // destination QEMU (the one started with -incoming) midway.
    let name = format!("guest=vee-{vee}");
    let killer = std::thread::spawn(move || {
        for _ in 0..200 {
            let out = Command::new("pgrep").args(["-f", &format!("{name}.*-incoming")]).output().unwrap();
            let pids = String::from_utf8_lossy(&out.stdout).to_string();
            if let Some(pid) = pids.split_whitespace().next() {
                std::thread::sleep(Duration::from_secs(2));
                return Command::new("kill").args(["-9", pid]).status().unwrap().success();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    });
    let progress = migrate(&mut ca, &vee, target, 4).await;
    assert!(killer.join().unwrap(), "never saw the destination QEMU");
    let last = progress.last().unwrap();
    assert_eq!(last.phase(), interfaces::vhi::MigrationPhase::Failed, "{progress:?}");
    assert!(!last.error.is_empty());

    // Still running at the source, counter going on; the destination cleans up.
    let at_a = domains(&mut ca).await;
    assert_eq!(at_a.len(), 1);
    assert_eq!(at_a[0].state(), VeeState::Running);
    let now = guest::last_tick(&console(&mut ca, &vee).await).unwrap().0;
    wait_tick(&mut ca, &vee, now + 2, Duration::from_secs(30)).await;
    cb.abort_incoming(AbortIncomingRequest { vee_id: vee.clone() }).await.unwrap();
    assert!(domains(&mut cb).await.is_empty());
    assert!(!b.state_dir.join("vees").join(&vee).exists(), "destination left its prepared files");

    ca.destroy(DestroyRequest {
        vee_id: vee.clone(),
        remove: true,
    })
    .await
    .unwrap();
    drop((a, b, repo));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_libvirtd_restart_under_a_running_veeh() {
    let _lab = lab::lock();
    let dir = lab::test_dir("vhi-libvirtd-restart");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a = Veeh::start(&dir, "rst-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let mut c = a.client().await;
    let spec = ids.spec("svc-restart");
    let vee = spec.vee_id.clone();
    boot(&mut c, &spec).await;

    let pidfile = "/var/lib/vee-lab/run/site-a-libvirtd.pid";
    let pid = std::fs::read_to_string(pidfile).expect("site A libvirtd started by scripts/setup-host");
    assert!(Command::new("kill").arg(pid.trim()).status().unwrap().success());
    std::thread::sleep(Duration::from_secs(1));
    let st = Command::new("bash")
        .arg(lab::repo_root().join("scripts/setup-host"))
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));

    // The VEEH reconnects: the guest never stopped and every call works.
    let doms = domains(&mut c).await;
    assert_eq!(doms.len(), 1, "{doms:?}");
    assert_eq!(doms[0].state(), VeeState::Running);
    let now = guest::last_tick(&console(&mut c, &vee).await).unwrap().0;
    wait_tick(&mut c, &vee, now + 2, Duration::from_secs(30)).await;
    let stats = c.stats(StatsRequest { vee_id: vee.clone() }).await.unwrap().into_inner();
    assert!(stats.cpu_seconds > 0.0 && stats.memory_mib >= 100, "{stats:?}");
    c.destroy(DestroyRequest {
        vee_id: vee.clone(),
        remove: true,
    })
    .await
    .unwrap();
    assert!(domains(&mut c).await.is_empty());
    drop((a, repo));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_an_image_naming_a_host_file_is_refused_before_libvirt_sees_it() {
    use interfaces::repo_client::{BlobKind, PushMeta};
    use std::os::unix::fs::MetadataExt;
    let _lab = lab::lock();
    let dir = lab::test_dir("vhi-hostile-image");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let a1 = Veeh::start(&dir, "hi-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let mut c = a1.client().await;
    // A tenant's qcow2 images naming a host file as their backing file and
    // as their external data file (made first: qemu-img creates the data
    // file), then the host file's content.
    let host_file = dir.join("host-file");
    let mut hostile = Vec::new();
    for (what, opts) in [
        ("backing file", format!("-u -F raw -b {}", host_file.display())),
        ("external data file", format!("-o data_file={}", host_file.display())),
    ] {
        let evil = dir.join(format!("evil-{}.qcow2", hostile.len()));
        let made = Command::new("sh")
            .arg("-c")
            .arg(format!("qemu-img create -q -f qcow2 {opts} {} 1M", evil.display()))
            .status()
            .unwrap();
        assert!(made.success());
        hostile.push((what, evil));
    }
    std::fs::write(&host_file, b"the host's, not the guest's").unwrap();
    std::fs::set_permissions(&host_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let before = std::fs::metadata(&host_file).unwrap();
    for (what, evil) in hostile {
        // A provider's image, granted to the site as its VEEM does before a deploy.
        let id = repo
            .client_as(&repo.provider_token("acme"))
            .push_file(&evil, &PushMeta::new("evil", BlobKind::Disk))
            .await
            .unwrap();
        assert!(repo.client_as(&repo.site_token("site-a")).grant_for(&id, "acme").await.unwrap());
        let spec = VeeSpec {
            image: id.to_string(),
            ..ids.spec("svc-hostile")
        };
        let e = c
            .prepare(interfaces::vhi::PrepareRequest { spec: Some(spec.clone()) })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{what}: {}", e.message());
        assert!(
            e.message().contains("field `image`") && e.message().contains(what),
            "{what}: {}",
            e.message()
        );
        assert!(
            c.create(interfaces::vhi::CreateRequest { spec: Some(spec) }).await.is_err(),
            "{what}: a domain on the refused image"
        );
        assert!(domains(&mut c).await.is_empty());
    }
    let after = std::fs::metadata(&host_file).unwrap();
    assert_eq!(
        (after.uid(), after.gid(), after.mode(), after.len(), after.mtime()),
        (before.uid(), before.gid(), before.mode(), before.len(), before.mtime()),
        "the host file was touched"
    );
    assert_eq!(std::fs::read(&host_file).unwrap(), b"the host's, not the guest's");
    drop(a1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_the_vhi_answers_only_its_sites_veem_over_mutual_tls() {
    use tonic::transport::{ClientTlsConfig, Endpoint};
    use vee_testkit::pki;
    let _lab = lab::lock();
    let dir = lab::test_dir("vhi-tls");
    let repo = ImageRepo::start(&dir).await;
    let a1 = Veeh::start(&dir, "tls-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let answers = |c: Result<VhiServiceClient<Channel>, tonic::transport::Error>| async move {
        match c {
            Ok(mut c) => c
                .list_domains(ListDomainsRequest::default())
                .await
                .map(|_| ())
                .map_err(|e| e.message().to_string()),
            Err(e) => Err(format!("{e:?}")),
        }
    };
    let connect = |tls: Option<ClientTlsConfig>, url: String| async move {
        let mut ep = Endpoint::from_shared(url).unwrap();
        if let Some(tls) = tls {
            ep = ep.tls_config(tls).unwrap();
        }
        ep.connect().await.map(VhiServiceClient::new)
    };
    let site_a = pki::site("site-a").veem();
    let ca_only = ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(std::fs::read(&site_a.ca).unwrap()))
        .domain_name(a1.host.clone());
    // Its site's VEEM: answered; health and reflection too (behind the same
    // mutual TLS).
    assert_eq!(answers(a1.try_client().await).await, Ok(()));
    let ch = Endpoint::from_shared(a1.endpoint.clone())
        .unwrap()
        .tls_config(site_a.client(&a1.host).unwrap())
        .unwrap()
        .connect()
        .await
        .unwrap();
    use tonic_health::pb::health_check_response::ServingStatus;
    assert_eq!(
        e2e::grpc::health(ch.clone(), "vhi.v1.VhiService").await.unwrap(),
        ServingStatus::Serving
    );
    let (services, described) = e2e::grpc::reflection(ch, "vhi.v1.VhiService").await.unwrap();
    assert!(services.contains(&"vhi.v1.VhiService".to_string()), "{services:?}");
    assert!(described);
    // In plaintext, without a client certificate, with another site's VEEM
    // certificate: refused.
    let plain = a1.endpoint.replace("https://", "http://");
    let other_site = pki::site("site-b").veem();
    let other = interfaces::tls::TlsFiles {
        ca: site_a.ca.clone(),
        ..other_site
    };
    for (who, c) in [
        ("plaintext", connect(None, plain).await),
        ("no client certificate", connect(Some(ca_only), a1.endpoint.clone()).await),
        (
            "site B's VEEM",
            connect(Some(other.client(&a1.host).unwrap()), a1.endpoint.clone()).await,
        ),
    ] {
        assert!(answers(c).await.is_err(), "{who} was answered");
    }
    // And the VEEM checks whom it talks to: this host's certificate is not
    // another host's.
    let wrong = connect(Some(site_a.client("a2-somewhere").unwrap()), a1.endpoint.clone()).await;
    assert!(answers(wrong).await.is_err(), "a1 passed for another host");
    drop(a1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A checkpoint that fails at any of its stages (its memory state's
/// chunks sent; its overlay's; both chunk indexes) is not answered, its VEE
/// runs on, and the repository's garbage collection keeps nothing it sent.
#[tokio::test(flavor = "multi_thread")]
async fn lab_a_checkpoint_failing_at_any_stage_leaves_nothing_kept() {
    use interfaces::repo_client::BlobKind;
    let _lab = lab::lock();
    let dir = lab::test_dir("vhi-checkpoint-stages");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let r = repo.client();
    let checkpoint_blobs = || async {
        r.list()
            .await
            .unwrap()
            .into_iter()
            .filter(|m| matches!(m.kind, BlobKind::CheckpointChunk | BlobKind::CheckpointIndex))
            .map(|m| format!("{} {}", m.kind, m.id))
            .collect::<Vec<_>>()
    };
    for stage in [
        "checkpoint-after-memory-chunks",
        "checkpoint-after-disk-chunks",
        "checkpoint-after-indexes",
    ] {
        let h = Veeh::start_failing(&dir, "stage", "site-a", lab::SITE_A_URI, &repo, &format!("{stage}=return")).await;
        let mut c = h.client().await;
        let spec = ids.spec(&format!("svc-{}", &stage[11..]));
        boot(&mut c, &spec).await;
        let err = c
            .checkpoint(CheckpointRequest {
                vee_id: spec.vee_id.clone(),
                stop_after: false,
            })
            .await
            .unwrap_err();
        assert!(err.message().contains(stage), "{stage}: {err:?}");
        assert!(
            !checkpoint_blobs().await.is_empty(),
            "{stage}: the checkpoint sent nothing before failing"
        );
        // Nor does the host's cache keep a part of it (its cutters end
        // once their receivers are gone).
        let cached = || {
            std::fs::read_dir(h.state_dir.join("cache/chunks")).map_or(vec![], |d| d.map(|e| e.unwrap().file_name()).collect::<Vec<_>>())
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !cached().is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(cached(), Vec::<std::ffi::OsString>::new(), "{stage}: kept in the host's cache");
        // The VEE runs on.
        let now = guest::last_tick(&console(&mut c, &spec.vee_id).await).unwrap().0;
        wait_tick(&mut c, &spec.vee_id, now + 2, Duration::from_secs(30)).await;
        // Nothing it sent is kept: an index goes, then the chunks it listed.
        for _ in 0..2 {
            r.gc(Duration::ZERO, false).await.unwrap();
        }
        assert_eq!(
            checkpoint_blobs().await,
            Vec::<String>::new(),
            "{stage}: kept after garbage collection"
        );
        c.destroy(DestroyRequest {
            vee_id: spec.vee_id.clone(),
            remove: true,
        })
        .await
        .unwrap();
    }
}
