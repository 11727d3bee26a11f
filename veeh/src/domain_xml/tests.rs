use super::*;

fn spec() -> DomainSpec {
    DomainSpec {
        vee_id: "3b7c1a9e-0000-4000-8000-000000000001".into(),
        service_id: "svc-1".into(),
        owner: "host-a1".into(),
        accel: Accel::Tcg,
        vcpus: 1,
        memory_mib: 128,
        max_vcpus: 0,
        max_memory_mib: 0,
        disk: Some("/s/a/overlay.qcow2".into()),
        kernel: Some("/c/blobs/k".into()),
        initrd: Some("/c/blobs/i".into()),
        cmdline: "console=ttyS0 quiet".into(),
        console: "/s/a/console.log".into(),
        seed: None,
        nics: vec![],
    }
}

/// [`spec`] with NICs on bridges vb100 and vb101.
fn two_nics() -> DomainSpec {
    let nic = |mac: &str, bridge: &str| NicXml {
        mac: mac.into(),
        bridge: bridge.into(),
        mtu: 1450,
    };
    DomainSpec {
        nics: vec![nic("02:00:00:64:00:02", "vb100"), nic("02:00:00:65:00:02", "vb101")],
        ..spec()
    }
}

#[test]
fn each_nic_is_a_virtio_interface_on_its_bridge_with_its_mac_and_mtu() {
    let xml = generate(&two_nics());
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let ifaces: Vec<(String, String, String, String)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("interface"))
        .map(|i| {
            let attr = |tag: &str, a: &str| {
                i.children()
                    .find(|c| c.has_tag_name(tag))
                    .and_then(|c| c.attribute(a))
                    .unwrap()
                    .to_string()
            };
            (
                attr("mac", "address"),
                attr("source", "bridge"),
                attr("model", "type"),
                attr("mtu", "size"),
            )
        })
        .collect();
    let want = |mac: &str, br: &str| (mac.to_string(), br.to_string(), "virtio".to_string(), "1450".to_string());
    assert_eq!(
        ifaces,
        [want("02:00:00:64:00:02", "vb100"), want("02:00:00:65:00:02", "vb101")],
        "in NIC order"
    );
    assert!(!generate(&spec()).contains("<interface"), "no NIC, no interface");
}

#[test]
fn generated_xml_has_tcg_direct_boot_disk_and_serial_file() {
    let xml = generate(&spec());
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let root = doc.root_element();
    assert_eq!(root.attribute("type"), Some("qemu"));
    let text = |t: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name(t))
            .and_then(|n| n.text())
            .unwrap()
            .to_string()
    };
    assert_eq!(text("name"), "vee-3b7c1a9e-0000-4000-8000-000000000001");
    assert_eq!(text("memory"), "128");
    assert_eq!(text("kernel"), "/c/blobs/k");
    assert_eq!(text("cmdline"), "console=ttyS0 quiet");
    let source_of = |dev: &str| {
        let d = doc.descendants().find(|n| n.has_tag_name(dev)).unwrap();
        let s = d.children().find(|c| c.has_tag_name("source")).unwrap();
        s.attributes().map(|a| format!("{}={}", a.name(), a.value())).collect::<Vec<_>>()
    };
    assert_eq!(source_of("disk"), ["file=/s/a/overlay.qcow2"]);
    let serial = doc.descendants().find(|n| n.has_tag_name("serial")).unwrap();
    assert_eq!(serial.attribute("type"), Some("pty"));
    let log = serial.children().find(|c| c.has_tag_name("log")).unwrap();
    assert_eq!(
        (log.attribute("file"), log.attribute("append")),
        (Some("/s/a/console.log"), Some("on"))
    );
    assert!(!xml.contains("graphics"));
    assert_eq!(
        ownership(&xml),
        Some(Ownership {
            owner: "host-a1".into(),
            service_id: "svc-1".into()
        })
    );
}

#[test]
fn kvm_uses_kvm_domain_type() {
    let xml = generate(&DomainSpec {
        accel: Accel::Kvm,
        ..spec()
    });
    let doc = roxmltree::Document::parse(&xml).unwrap();
    assert_eq!(doc.root_element().attribute("type"), Some("kvm"));
    let kvmclock = doc
        .descendants()
        .find(|n| n.has_tag_name("timer") && n.attribute("name") == Some("kvmclock"));
    assert_eq!(kvmclock.and_then(|t| t.attribute("present")), Some("yes"));
}

/// `(tag, attribute, value)` of every element under `parent` in `xml`.
fn children_of(xml: &str, parent: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(xml).unwrap();
    let p = doc.descendants().find(|n| n.has_tag_name(parent)).unwrap();
    p.descendants()
        .filter(|n| n.is_element() && *n != p)
        .map(|n| {
            let attrs: Vec<String> = n.attributes().map(|a| format!("{}={}", a.name(), a.value())).collect();
            format!("{} {}", n.tag_name().name(), attrs.join(" ")).trim_end().to_string()
        })
        .collect()
}

#[test]
fn a_domain_has_acpi_a_utc_clock_and_a_guest_agent_channel() {
    let xml = generate(&spec());
    // ACPI: libvirt's shutdown is a power button press the guest sees.
    assert_eq!(children_of(&xml, "features"), ["acpi", "apic"]);
    assert_eq!(
        children_of(&xml, "clock"),
        [
            "timer name=rtc tickpolicy=catchup",
            "timer name=pit tickpolicy=delay",
            "timer name=hpet present=no"
        ],
        "no kvm-clock under TCG"
    );
    assert_eq!(
        children_of(&xml, "channel"),
        ["source mode=bind", "target type=virtio name=org.qemu.guest_agent.0"]
    );
}

#[test]
fn the_seed_is_a_read_only_virtio_disk_outside_snapshots() {
    let xml = generate(&DomainSpec {
        seed: Some("/s/a/seed.iso".into()),
        ..spec()
    });
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let seed = doc
        .descendants()
        .filter(|n| n.has_tag_name("disk"))
        .find(|d| d.children().any(|c| c.has_tag_name("target") && c.attribute("dev") == Some("vdb")))
        .expect("disk vdb");
    assert_eq!(seed.attribute("snapshot"), Some("no"));
    assert!(seed.children().any(|c| c.has_tag_name("readonly")));
    assert_eq!(
        seed.children().find(|c| c.has_tag_name("source")).unwrap().attribute("file"),
        Some("/s/a/seed.iso")
    );
    assert!(!generate(&spec()).contains("vdb"), "no first-boot data, no seed disk");
}

#[test]
fn the_generated_xml_is_valid_for_libvirt() {
    // libvirt's own schema (virt-xml-validate runs xmllint: libxml2-utils,
    // installed by scripts/setup-host), with and without NICs and disk, KVM too.
    let specs = [
        spec(),
        DomainSpec {
            seed: Some("/s/a/seed.iso".into()),
            ..two_nics()
        },
        DomainSpec {
            accel: Accel::Kvm,
            disk: None,
            kernel: None,
            initrd: None,
            ..spec()
        },
        DomainSpec {
            max_vcpus: 4,
            max_memory_mib: 1024,
            ..spec()
        },
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, s) in specs.iter().enumerate() {
        let path = dir.path().join(format!("{i}.xml"));
        std::fs::write(&path, generate(s)).unwrap();
        let out = std::process::Command::new("virt-xml-validate")
            .arg(&path)
            .arg("domain")
            .output()
            .expect("virt-xml-validate (libvirt-clients and libxml2-utils: scripts/setup-host)");
        assert!(
            out.status.success(),
            "spec {i}: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            generate(s)
        );
    }
}

#[test]
fn cmdline_is_escaped() {
    let xml = generate(&DomainSpec {
        cmdline: "a<b & 'c'".into(),
        ..spec()
    });
    assert!(roxmltree::Document::parse(&xml).is_ok());
    assert!(xml.contains("a&lt;b &amp; &apos;c&apos;"));
}

#[test]
fn a_rewrite_fills_an_empty_owner_and_edits_each_interface_once() {
    // Found by fuzz/domain_xml: an empty owner mark failed the rewrite;
    // two entries for one MAC edited one attribute twice (garbage XML).
    let xml = generate(&DomainSpec {
        owner: String::new(),
        ..two_nics()
    });
    let to = PathMap {
        bridges: vec![
            ("02:00:00:64:00:02".into(), "vbx".into()),
            ("02:00:00:64:00:02".into(), "vby-longer".into()),
        ],
        ..Default::default()
    };
    let out = rewrite_for(&xml, &to, "b1").unwrap();
    assert_eq!(ownership(&out).unwrap().owner, "b1");
    assert_eq!(bridges(&out).unwrap()[0], ("02:00:00:64:00:02".into(), "vbx".into()));
    let closed = xml.replace("<veeh:owner></veeh:owner>", "<veeh:owner/>");
    assert_eq!(ownership(&rewrite_for(&closed, &to, "b1").unwrap()).unwrap().owner, "b1");
}

#[test]
fn every_string_is_escaped_the_name_too() {
    // Found by fuzz/domain_xml: the VHI checks that a VEE ID is a UUID,
    // and the XML does not rely on it.
    let xml = generate(&DomainSpec {
        vee_id: "x</name><devices/><name>".into(),
        ..spec()
    });
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let name = doc.descendants().find(|n| n.has_tag_name("name")).unwrap();
    assert_eq!(name.text(), Some("vee-x</name><devices/><name>"));
    // Whitespace a parser would normalise reads back as it was given.
    let xml = generate(&DomainSpec {
        cmdline: "a\r\nb".into(),
        console: "/x\ty".into(),
        ..spec()
    });
    let doc = roxmltree::Document::parse(&xml).unwrap();
    assert_eq!(
        doc.descendants().find(|n| n.has_tag_name("cmdline")).unwrap().text(),
        Some("a\r\nb")
    );
    let serial = doc.descendants().find(|n| n.has_tag_name("serial")).unwrap();
    assert_eq!(serial.first_element_child().unwrap().attribute("file"), Some("/x\ty"));
}

#[test]
fn rewrite_points_every_path_bridge_and_the_owner_at_the_destination() {
    let xml = generate(&DomainSpec {
        seed: Some("/s/a/seed.iso".into()),
        ..two_nics()
    });
    assert_eq!(
        bridges(&xml).unwrap(),
        [
            ("02:00:00:64:00:02".into(), "vb100".into()),
            ("02:00:00:65:00:02".into(), "vb101".into())
        ]
    );
    let to = PathMap {
        disk: Some("/b/x/overlay.qcow2".into()),
        kernel: Some("/b/cache/k".into()),
        initrd: Some("/b/cache/i".into()),
        console: Some("/b/x/console.log".into()),
        seed: Some("/b/x/seed.iso".into()),
        // A network stretched to the destination's site: its bridge there.
        bridges: vec![("02:00:00:65:00:02".into(), "vs4790-65".into())],
    };
    let out = rewrite_for(&xml, &to, "host-b1").unwrap();
    assert_eq!(
        bridges(&out).unwrap(),
        [
            ("02:00:00:64:00:02".into(), "vb100".into()),
            ("02:00:00:65:00:02".into(), "vs4790-65".into())
        ]
    );
    for old in [
        "/s/a/overlay.qcow2",
        "/c/blobs/k",
        "/c/blobs/i",
        "/s/a/console.log",
        "/s/a/seed.iso",
    ] {
        assert!(!out.contains(old), "{old} still in {out}");
    }
    assert!(out.contains(r#"<source file="/b/x/overlay.qcow2"/>"#), "{out}");
    assert!(out.contains(r#"<source file="/b/x/seed.iso"/>"#), "{out}");
    assert!(out.contains("<kernel>/b/cache/k</kernel>"));
    assert_eq!(ownership(&out).unwrap().owner, "host-b1");
}

#[test]
fn rewrite_moves_the_console_mirror_of_live_xml_too() {
    // libvirt's live XML repeats the serial port as <console>.
    let xml = generate(&spec()).replace(
        "</devices>",
        "<console type='pty'><source path='/dev/pts/3'/><log file='/s/a/console.log' append='on'/><target type='serial' port='0'/></console></devices>",
    );
    let to = PathMap {
        console: Some("/b/x/console.log".into()),
        ..Default::default()
    };
    let out = rewrite_for(&xml, &to, "host-b1").unwrap();
    assert!(!out.contains("/s/a/console.log"), "{out}");
    assert_eq!(out.matches("/b/x/console.log").count(), 2);
}

#[test]
fn rewrite_moves_the_console_file_of_a_checkpoint_of_before_the_pty() {
    // A checkpoint's XML from when the serial port wrote a file.
    let xml = generate(&spec())
        .replace("<serial type=\"pty\">", "<serial type=\"file\">")
        .replace(
            "<log file=\"/s/a/console.log\" append=\"on\"/>",
            "<source path=\"/s/a/console.log\" append=\"on\"/>",
        );
    assert!(xml.contains("<serial type=\"file\">"), "{xml}");
    let to = PathMap {
        console: Some("/b/x/console.log".into()),
        ..Default::default()
    };
    let out = rewrite_for(&xml, &to, "host-b1").unwrap();
    assert!(out.contains("<source path=\"/b/x/console.log\" append=\"on\"/>"), "{out}");
}

#[test]
fn rewrite_refuses_xml_without_our_metadata() {
    let xml = "<domain><os><kernel>/k</kernel></os></domain>";
    let err = rewrite_for(xml, &PathMap::default(), "h").unwrap_err().to_string();
    assert!(err.contains("owner"), "{err}");
}

#[test]
fn foreign_domains_have_no_ownership() {
    assert_eq!(ownership("<domain type='qemu'><name>other</name></domain>"), None);
}

#[test]
fn a_resizable_vee_has_its_maximum_a_balloon_and_vcpus_to_hot_plug() {
    let fixed = generate(&spec());
    assert!(
        fixed.contains("<memory unit=\"MiB\">128</memory>") && fixed.contains("<vcpu>1</vcpu>"),
        "{fixed}"
    );
    assert!(
        fixed.contains("<memballoon model=\"none\"/>") && !fixed.contains("currentMemory"),
        "{fixed}"
    );
    let xml = generate(&DomainSpec {
        max_vcpus: 4,
        max_memory_mib: 512,
        ..spec()
    });
    assert!(xml.contains("<memory unit=\"MiB\">512</memory>"), "{xml}");
    assert!(xml.contains("<currentMemory unit=\"MiB\">128</currentMemory>"), "{xml}");
    assert!(xml.contains("<vcpu current=\"1\">4</vcpu>"), "{xml}");
    assert!(xml.contains("<memballoon model=\"virtio\">"), "{xml}");
}
