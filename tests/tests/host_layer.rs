//! The first real-guest test: the `veeh` crate's libvirt layer boots the
//! tiny guest on site A's libvirtd (TCG unless the CPU has vmx/svm), the
//! serial counter advances, and destroying it leaves no domain and no file.

use std::process::Command;
use std::time::Duration;

use e2e::{guest, lab};
use veeh::accel::Accel;
use veeh::config::AccelChoice;
use veeh::domain_xml::{self, DomainSpec};
use veeh::hypervisor::{DomainState, Hypervisor};

#[test]
fn boots_the_tiny_guest_and_cleans_up() {
    let _lab = lab::lock();
    let g = guest::image();
    let dir = lab::test_dir("host-layer");
    let overlay = dir.join("overlay.qcow2");
    let st = Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
        .arg(&g.disk)
        .arg(&overlay)
        .status()
        .unwrap();
    assert!(st.success());
    let vee_id = uuid::Uuid::new_v4().to_string();
    let owner = format!("host-layer-test-{}", &vee_id[..8]);
    let accel = Accel::detect(AccelChoice::Auto);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    if !cpuinfo.contains(" vmx") && !cpuinfo.contains(" svm") {
        assert_eq!(accel, Accel::Tcg, "without vmx/svm the guest must run under TCG");
    }
    let spec = DomainSpec {
        vee_id: vee_id.clone(),
        service_id: "host-layer".into(),
        owner: owner.clone(),
        accel,
        vcpus: 1,
        memory_mib: 128,
        max_vcpus: 0,
        max_memory_mib: 0,
        disk: Some(overlay.clone()),
        kernel: Some(g.kernel.clone()),
        initrd: Some(g.initrd.clone()),
        cmdline: g.cmdline.clone(),
        console: dir.join("console.log"),
        seed: None,
        nics: vec![],
    };
    let hv = Hypervisor::open(lab::SITE_A_URI, &owner).unwrap();
    hv.create(&domain_xml::generate(&spec)).unwrap();
    assert_eq!(hv.state(&vee_id).unwrap(), Some(DomainState::Running));
    let console = || std::fs::read_to_string(dir.join("console.log")).unwrap_or_default();
    let first = guest::wait_tick(console, 2, Duration::from_secs(90));
    let later = guest::wait_tick(console, first.0 + 3, Duration::from_secs(30));
    assert!(later.0 >= first.0 + 3, "counter must advance: {first:?} then {later:?}");
    assert_eq!(later.1, Some(later.0), "the guest reads back from its disk what it wrote");
    assert_eq!(hv.owned_domains().unwrap().len(), 1);
    // Another VEEH on the same libvirtd never sees our domain.
    let other = Hypervisor::open(lab::SITE_A_URI, "someone-else").unwrap();
    assert!(other.owned_domains().unwrap().iter().all(|d| d.vee_id != vee_id));
    hv.destroy(&vee_id).unwrap();
    assert_eq!(hv.state(&vee_id).unwrap(), None);
    let name = domain_xml::domain_name(&vee_id);
    let virsh = Command::new("virsh")
        .args(["-c", lab::SITE_A_URI, "list", "--all", "--name"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&virsh.stdout).contains(&name), "domain {name} left behind");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!dir.exists());
}
