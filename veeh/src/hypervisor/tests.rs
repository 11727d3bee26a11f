//! Unit tests of `hypervisor`.

use super::*;

#[test]
fn versions_print_as_dotted() {
    assert_eq!(version_string(7_002_000), "7.2.0");
    assert_eq!(version_string(9_000_000), "9.0.0");
}

#[test]
fn canonical_machine_is_read_from_capabilities() {
    let caps = "<capabilities><guest><arch name='x86_64'><machine maxCpus='255'>pc-i440fx-7.2</machine><machine canonical='pc-i440fx-7.2' maxCpus='255'>pc</machine></arch></guest></capabilities>";
    assert_eq!(canonical_pc_machine(caps).as_deref(), Some("pc-i440fx-7.2"));
}

/// A running transient domain of VEE `vee_id` owned by `owner` in
/// libvirt's in-process test driver.
fn test_domain(vee_id: &str, owner: &str) -> Connect {
    let c = Connect::open(Some("test:///default")).unwrap();
    let xml = format!(
        "<domain type='test'><name>{}</name><metadata><veeh:vee xmlns:veeh='{}'><veeh:owner>{owner}</veeh:owner><veeh:service>s</veeh:service></veeh:vee></metadata><memory unit='MiB'>128</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>",
        domain_name(vee_id),
        domain_xml::METADATA_NS
    );
    c.create_domain_xml(&xml, 0).unwrap();
    c
}

/// A VEEH whose domains are destroyed right after every lookup: the
/// race of a copy that vanishes between lookup and use.
fn vanishing(owner: &str) -> Hypervisor {
    let mut h = Hypervisor::open("test:///default", owner).unwrap();
    h.after_lookup = Some(Box::new(|d: &Domain| {
        let _ = d.destroy();
    }));
    h
}

#[test]
fn a_domain_that_vanishes_after_lookup_is_no_domain() {
    let id = "00000000-0000-4000-8000-00000000aa01";
    type Op = fn(&Hypervisor, &str) -> Result<()>;
    let ops: [(&str, Op); 5] = [
        ("suspend", |h, id| h.suspend(id)),
        ("resume", |h, id| h.resume(id)),
        ("xml", |h, id| h.xml(id, false).map(|_| ())),
        ("counters", |h, id| h.counters(id, &[]).map(|_| ())),
        ("shutdown", |h, id| h.shutdown(id, Duration::from_millis(10)).map(|_| ())),
    ];
    for (what, op) in ops {
        let _c = test_domain(id, "host-v");
        let e = op(&vanishing("host-v"), id).unwrap_err();
        assert!(e.is::<NoDomain>(), "{what}: {e:#}");
        assert!(is_no_domain(&e), "{what}");
    }
    // Queries answer "no domain"; destroy of a vanished domain succeeds.
    let _c = test_domain(id, "host-v");
    assert_eq!(vanishing("host-v").state(id).unwrap(), None);
    let _c = test_domain(id, "host-v");
    assert!(vanishing("host-v").destroy(id).is_ok());
    let _c = test_domain(id, "host-v");
    assert!(vanishing("host-v").owned_domains().unwrap().is_empty());
}

#[test]
fn a_foreign_copy_is_seen_and_fenced_only_for_its_owner() {
    let id = "00000000-0000-4000-8000-00000000aa02";
    let c = test_domain(id, "host-failed");
    let h = Hypervisor::open("test:///default", "host-new").unwrap();
    assert_eq!(h.state(id).unwrap(), None, "not ours");
    assert_eq!(h.foreign_owner(id).unwrap().as_deref(), Some("host-failed"));
    h.fence_foreign(id, "host-other").unwrap();
    assert!(c.lookup_domain_by_name(&domain_name(id)).is_ok(), "another owner's copy is kept");
    h.fence_foreign(id, "host-failed").unwrap();
    assert!(
        c.lookup_domain_by_name(&domain_name(id)).is_err(),
        "the failed owner's copy is destroyed"
    );
    assert_eq!(h.foreign_owner(id).unwrap(), None);
    h.fence_foreign(id, "host-failed").unwrap();
}

/// libvirt's in-process test driver: the fake "test" domain has no
/// VEEH metadata, so this VEEH owns nothing there and never touches it.
#[test]
fn foreign_domains_are_invisible() {
    let h = Hypervisor::open("test:///default", "host-x").unwrap();
    assert!(h.owned_domains().unwrap().is_empty());
    assert_eq!(h.state("test").unwrap(), None);
    assert!(h.destroy("test").is_ok());
    let c = Connect::open(Some("test:///default")).unwrap();
    assert!(c.lookup_domain_by_name("test").unwrap().is_active().unwrap());
}
