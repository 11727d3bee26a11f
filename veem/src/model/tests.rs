//! The records' conversions and formats.

use super::*;

#[test]
fn checkpoint_records_round_trip() {
    let r = interfaces::vhi::CheckpointRecord {
        checkpoint_id: "c1".into(),
        vee_id: "v".into(),
        memory_bytes: 7,
        take_time: interfaces::time::timestamp_ms(1_763_000_000_123),
        downtime: interfaces::time::duration_ms(87),
        format_version: interfaces::CHECKPOINT_RECORD_FORMAT,
        ..Default::default()
    };
    let c = CheckpointRec::new(&r);
    assert_eq!(c.taken_ms, 1_763_000_000_123);
    assert_eq!(c.record().unwrap(), r);
}

#[test]
#[allow(deprecated)] // a record of format 1, as a VEEM of that version stored it
fn a_format_1_checkpoint_record_reads_with_its_times() {
    let old = interfaces::vhi::CheckpointRecord {
        checkpoint_id: "c1".into(),
        taken_at_unix_ms: 1_763_000_000_123,
        downtime_ms: 87,
        format_version: 1,
        ..Default::default()
    };
    let c = CheckpointRec::new(&old);
    assert_eq!(c.taken_ms, 1_763_000_000_123);
    let r = c.record().unwrap();
    assert_eq!(interfaces::time::ms_of(&r.take_time), 1_763_000_000_123);
    assert_eq!(interfaces::time::ms_of_duration(&r.downtime), 87);
    assert_eq!((r.taken_at_unix_ms, r.format_version), (0, interfaces::CHECKPOINT_RECORD_FORMAT));
}

#[test]
fn the_vhi_description_converts_both_ways() {
    let s = interfaces::vhi::VeeSpec {
        vee_id: "v".into(),
        service_id: "s".into(),
        vcpus: 2,
        memory_mib: 256,
        max_vcpus: 4,
        max_memory_mib: 1024,
        disk_gib: 3,
        image: "i".into(),
        kernel: "k".into(),
        initrd: "r".into(),
        cmdline: "c".into(),
        nics: vec![interfaces::vhi::Nic {
            network: "public".into(),
            vni: 101,
            mac: "02:00:00:65:00:02".into(),
            address: "10.240.1.2/24".into(),
            gateway: "10.240.1.1".into(),
            mtu: 1450,
            external_address: "192.0.2.10".into(),
            ports: vec![80, 7000],
            ..Default::default()
        }],
        cloud_init: Some(interfaces::vhi::CloudInit {
            hostname: "web-0".into(),
            user_data: "#cloud-config\n".into(),
            ssh_authorized_keys: vec!["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB alice@laptop".into()],
        }),
    };
    assert_eq!(VeeRec::from_spec(&s, 0).unwrap().spec(), s);
    // A peer's first-boot data is checked like a manifest's.
    let mut bad = s.clone();
    bad.cloud_init.as_mut().unwrap().ssh_authorized_keys = vec!["ssh-rsa not-a-key!".into()];
    let e = VeeRec::from_spec(&bad, 0).unwrap_err().to_string();
    assert!(e.contains("field `cloud_init.ssh_authorized_keys[0]`"), "{e}");
    let mut bad = s.clone();
    bad.nics[0].address = "10.240.1.2".into();
    let e = VeeRec::from_spec(&bad, 0).unwrap_err().to_string();
    assert!(e.contains("field `nics[0].address`"), "{e}");
    bad.nics[0].address = "10.240.1.2/24".into();
    bad.nics[0].ports = vec![70000];
    assert!(VeeRec::from_spec(&bad, 0)
        .unwrap_err()
        .to_string()
        .contains("70000 is not a TCP port"));
}

#[test]
fn a_damaged_or_newer_checkpoint_record_is_an_error_not_a_panic() {
    let r = interfaces::vhi::CheckpointRecord {
        checkpoint_id: "c1".into(),
        format_version: interfaces::CHECKPOINT_RECORD_FORMAT,
        ..Default::default()
    };
    let mut c = CheckpointRec::new(&r);
    c.record_hex.push('a'); // odd length: the old decoder panicked here
    assert!(format!("{:#}", c.record().unwrap_err()).contains("checkpoint c1: field `record_hex`"));
    c.record_hex = "zz".into();
    assert!(c.record().is_err());
    let newer = CheckpointRec::new(&interfaces::vhi::CheckpointRecord {
        format_version: interfaces::CHECKPOINT_RECORD_FORMAT + 1,
        ..r
    });
    let e = format!("{:#}", newer.record().unwrap_err());
    let newer = format!(
        "checkpoint record c1 has format version {}",
        interfaces::CHECKPOINT_RECORD_FORMAT + 1
    );
    assert!(e.contains(&newer), "{e}");
}
