//! Both hypervisor stacks side by side: site A's hosts run libvirt 11.3
//! and QEMU 10.0 from bookworm-backports, its stock host Debian 12's own
//! libvirt 9.0 and QEMU 7.2 (`scripts/setup-host`: unpacked and
//! bind-mounted in the stock host's namespaces). A real VEEH on each: what
//! it probes, a guest booted, checkpointed and restored on the stock stack,
//! and a mapped-ram checkpoint of the backports host that the stock host
//! refuses with its reason.

use std::time::Duration;

use e2e::daemons::{boot, checkpoint, console, destroy, wait_tick, ImageRepo, Veeh};
use e2e::{guest, lab};
use interfaces::vhi::vhi_service_client::VhiServiceClient;
use interfaces::vhi::*;
use tonic::transport::Channel;

async fn profile(c: &mut VhiServiceClient<Channel>) -> CompatibilityProfile {
    c.get_host_info(GetHostInfoRequest::default())
        .await
        .unwrap()
        .into_inner()
        .profile
        .expect("a compatibility profile")
}

fn major(version: &str) -> u32 {
    version.split('.').next().unwrap().parse().unwrap()
}

fn restore_request(spec: &VeeSpec, cp: &CheckpointRecord) -> RestoreRequest {
    RestoreRequest {
        spec: Some(spec.clone()),
        checkpoint: Some(cp.clone()),
        fence_owner: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_stock_host_runs_checkpoints_and_refuses_a_mapped_ram_checkpoint_with_the_reason() {
    let _lab = lab::lock();
    let dir = lab::test_dir("stock-host");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let new = Veeh::start(&dir, "backports", "site-a", lab::SITE_A_URI, &repo).await;
    let stock = Veeh::start(&dir, "stock", "site-a", lab::SITE_A_STOCK_URI, &repo).await;
    let (mut cn, mut cs) = (new.client().await, stock.client().await);

    // Each VEEH says what its libvirt and QEMU are and which save formats
    // they write and read, as probed.
    let (pn, ps) = (profile(&mut cn).await, profile(&mut cs).await);
    assert!(
        ps.qemu_version.starts_with("7.2.") && ps.libvirt_version.starts_with("9.0."),
        "{ps:?}"
    );
    assert_eq!(ps.save_formats().collect::<Vec<_>>(), [SaveFormat::Sequential], "{ps:?}");
    assert!(major(&pn.qemu_version) >= 9 && major(&pn.libvirt_version) >= 11, "{pn:?}");
    assert!(pn.save_formats().any(|f| f == SaveFormat::MappedRam), "{pn:?}");

    // A guest boots on the stock stack; its live checkpoint (sequential,
    // QEMU 7.2's state and machine type) restores there after the guest
    // was destroyed, and the guest counts on.
    let spec = ids.spec("svc-stock");
    let vee = spec.vee_id.clone();
    boot(&mut cs, &spec).await;
    let cp = checkpoint(&mut cs, &vee).await;
    assert_eq!(cp.save_format(), SaveFormat::Sequential);
    assert_eq!(cp.profile.as_ref().unwrap().qemu_version, ps.qemu_version);
    let at = guest::last_tick(&console(&mut cs, &vee).await).unwrap().0;
    destroy(&mut cs, &vee).await;
    let st = cs.restore(restore_request(&spec, &cp)).await.unwrap().into_inner();
    assert_eq!(st.state(), VeeState::Running);
    wait_tick(&mut cs, &vee, at + 2, Duration::from_secs(60)).await;
    destroy(&mut cs, &vee).await;

    // The same guest on the backports host.
    boot(&mut cn, &spec).await;
    // Saved to stop it on the backports host: mapped-ram, which the stock
    // host cannot read. It refuses the restore naming the field, the
    // format and its own stack, and keeps nothing of it.
    let saved = cn
        .checkpoint(CheckpointRequest {
            vee_id: vee.clone(),
            stop_after: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(saved.save_format(), SaveFormat::MappedRam);
    let refused = cs.restore(restore_request(&spec, &saved)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    for part in ["`save_format`", "SAVE_FORMAT_MAPPED_RAM", &ps.qemu_version, &ps.libvirt_version] {
        assert!(refused.message().contains(part), "{part} not in: {}", refused.message());
    }
    assert!(stock.domains().await.is_empty(), "{:?}", stock.domains().await);
    // The backports host reads it: the guest counts on from where it stopped.
    let stopped_at = guest::last_tick(&console(&mut cn, &vee).await).unwrap().0;
    destroy(&mut cn, &vee).await;
    let st = cn.restore(restore_request(&spec, &saved)).await.unwrap().into_inner();
    assert_eq!(st.state(), VeeState::Running);
    wait_tick(&mut cn, &vee, stopped_at + 2, Duration::from_secs(60)).await;
    destroy(&mut cn, &vee).await;
}
