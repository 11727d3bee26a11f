use super::*;
use interfaces::vmi;

fn vee_info(location: &str) -> vmi::VeeInfo {
    vmi::VeeInfo {
        vee_id: "svc1-db-0".into(),
        service_id: "svc1".into(),
        component: "db".into(),
        instance: 0,
        state: vmi::VeeState::Running as i32,
        location: location.into(),
        vcpus: 1,
        memory_mib: 256,
        latest_checkpoint: String::new(),
        latest_checkpoint_replication: 0,
        update_time: interfaces::time::timestamp_ms(1_795_852_800_123),
        checkpoint_record: None,
        nics: vec![],
        image: "sha256:5555".into(),
        max_vcpus: 2,
        max_memory_mib: 512,
    }
}

#[test]
fn show_lists_each_nic_with_its_network_mac_address_and_external_side() {
    let mut info = vee_info("local");
    let nic = |network: &str, mac: &str, address: &str, external: &str, ports: Vec<u32>| interfaces::vhi::Nic {
        network: network.into(),
        mac: mac.into(),
        address: address.into(),
        gateway: "10.240.0.1".into(),
        external_address: external.into(),
        ports,
        ..Default::default()
    };
    info.nics = vec![
        nic("backend", "02:00:00:64:00:02", "10.240.0.2/24", "", vec![]),
        nic("public", "02:00:00:65:00:02", "10.240.1.2/24", "192.0.2.1", vec![80, 7000]),
    ];
    let out = vee(&Vee::from(&info), OutputFormat::Table);
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert!(
        rows.contains(&vec!["eth0", "backend", "02:00:00:64:00:02", "10.240.0.2/24", "-"]),
        "{out}"
    );
    assert!(
        rows.contains(&vec![
            "eth1",
            "public",
            "02:00:00:65:00:02",
            "10.240.1.2/24",
            "192.0.2.1",
            "tcp/80,7000"
        ]),
        "{out}"
    );
    let v: serde_json::Value = serde_json::from_str(&vee(&Vee::from(&info), OutputFormat::Json)).unwrap();
    assert_eq!(v["nics"][1]["external_address"], "192.0.2.1");
    assert_eq!(v["nics"][0]["external_address"], serde_json::Value::Null);
    assert_eq!(v["nics"][1]["ports"], serde_json::json!([80, 7000]));
}

#[test]
fn show_prints_state_and_location_verbatim() {
    let out = vee(&Vee::from(&vee_info("remote (site-b)")), OutputFormat::Table);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.contains(&"location: remote (site-b)"), "{out}");
    assert!(lines.contains(&"state: running"), "{out}");
    assert!(lines.contains(&"latest_checkpoint: -"), "{out}");
    assert!(lines.contains(&"updated: 2026-11-28T08:00:00.123Z"), "{out}");
    let out = vee(&Vee::from(&vee_info("local (host-1)")), OutputFormat::Table);
    assert!(out.lines().any(|l| l == "location: local (host-1)"));
}

#[test]
fn vee_json_shape() {
    let out = vee(&Vee::from(&vee_info("local")), OutputFormat::Json);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["vee_id"], "svc1-db-0");
    assert_eq!(v["location"], "local");
    assert_eq!(v["memory_mib"], 256);
    assert_eq!(v["updated"], "2026-11-28T08:00:00.123Z");
    assert!(v.get("updated_unix_ms").is_none());
}

#[test]
fn every_list_has_one_json_shape_and_absent_values_are_null() {
    let vs = vec![Vee::from(&vee_info("local"))];
    let v: serde_json::Value = serde_json::from_str(&vees(&vs, OutputFormat::Json)).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        v["items"][0]["latest_checkpoint"],
        serde_json::Value::Null,
        "no checkpoint yet: null, not \"\""
    );
    for empty in [
        migrations(&[], OutputFormat::Json),
        services(&[], OutputFormat::Json),
        hosts(&[], OutputFormat::Json),
        violations(&[], OutputFormat::Json),
    ] {
        let v: serde_json::Value = serde_json::from_str(&empty).unwrap();
        assert_eq!(v, serde_json::json!({"items": []}));
    }
}

#[test]
fn quiet_prints_ids_and_wide_prints_addresses() {
    let vs = vec![Vee::from(&vee_info("local"))];
    assert_eq!(vees(&vs, OutputFormat::Ids), "svc1-db-0\n");
    let wide = vees(&vs, OutputFormat::Wide);
    assert!(wide.lines().next().unwrap().contains("ADDRESSES"), "{wide}");
    assert!(!vees(&vs, OutputFormat::Table).contains("ADDRESSES"));
}

#[test]
fn negotiation_counter_offer_text_and_json() {
    let n = Negotiation::from(&vmi::NegotiateResponse {
        verdict: vmi::Verdict::CounterOffer as i32,
        reasons: vec!["not enough memory before 10:00".into()],
        earliest_start: interfaces::time::timestamp_s(1_795_852_800),
        earliest_end: interfaces::time::timestamp_s(1_795_896_000),
    });
    let out = negotiation(&n, OutputFormat::Table);
    assert_eq!(
        out,
        "verdict: counter-offer\n\
         earliest window: 2026-11-28T08:00:00Z .. 2026-11-28T20:00:00Z\n\
         reasons:\n  - not enough memory before 10:00\n"
    );
    let v: serde_json::Value = serde_json::from_str(&negotiation(&n, OutputFormat::Json)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "verdict": "counter-offer",
            "reasons": ["not enough memory before 10:00"],
            "earliest_start": "2026-11-28T08:00:00Z",
            "earliest_end": "2026-11-28T20:00:00Z",
        })
    );
    let accept = Negotiation::from(&vmi::NegotiateResponse {
        verdict: vmi::Verdict::Accept as i32,
        ..Default::default()
    });
    assert_eq!(negotiation(&accept, OutputFormat::Table), "verdict: accept\n");
    let v: serde_json::Value = serde_json::from_str(&negotiation(&accept, OutputFormat::Json)).unwrap();
    assert!(v["earliest_start"].is_null());
}

fn report() -> vmi::UsageReport {
    vmi::UsageReport {
        service_id: "svc1".into(),
        records: vec![
            vmi::UsageRecord {
                record_id: "r1".into(),
                abc_id: "svc1".into(),
                vee_id: "svc1-db-0".into(),
                site_chain: vec!["site-b".into(), "site-a".into()],
                start_time: interfaces::time::timestamp_s(1_795_852_800),
                end_time: interfaces::time::timestamp_s(1_795_852_860),
                cpu_seconds: 30.5,
                memory_mib_seconds: 15360.0,
                disk_bytes: 1000,
                net_bytes: 20,
                kpis: Default::default(),
                component: Default::default(),
            },
            vmi::UsageRecord {
                record_id: "r2".into(),
                abc_id: "svc1".into(),
                vee_id: "svc1-db-1".into(),
                site_chain: vec!["site-a".into()],
                start_time: interfaces::time::timestamp_s(1_795_852_800),
                end_time: interfaces::time::timestamp_s(1_795_852_860),
                cpu_seconds: 1.0,
                memory_mib_seconds: 100.0,
                disk_bytes: 5,
                net_bytes: 7,
                kpis: Default::default(),
                component: Default::default(),
            },
        ],
        violations: vec![
            vmi::SlaViolation {
                vee_id: "svc1-db-0".into(),
                term: "max_downtime_ms".into(),
                start_time: interfaces::time::timestamp_s(1_795_852_800),
                end_time: interfaces::time::timestamp_s(1_795_852_801),
                penalty: 1.5,
            },
            vmi::SlaViolation {
                vee_id: "svc1-db-1".into(),
                term: "availability".into(),
                start_time: interfaces::time::timestamp_s(1_795_852_800),
                end_time: interfaces::time::timestamp_s(1_795_856_400),
                penalty: 12.0,
            },
        ],
    }
}

#[test]
fn usage_table_totals_and_penalties() {
    let out = usage(&Usage::from(&report()), OutputFormat::Table);
    let lines: Vec<&str> = out.lines().collect();
    let rec = lines.iter().find(|l| l.starts_with("r1 ")).unwrap();
    assert!(rec.contains(" site-b,site-a "), "{out}");
    assert!(rec.contains(" 2026-11-28T08:00:00Z "), "{out}");
    let total = lines.iter().find(|l| l.starts_with("total ")).unwrap();
    assert!(total.contains(" 31.5 ") && total.contains(" 15460.0 "), "{out}");
    assert!(total.contains(" 1005 ") && total.ends_with(" 27"), "{out}");
    assert!(!total.contains(" - "), "{out}");
    // Totals share the record columns: same right edge as the header.
    let header = lines.iter().find(|l| l.starts_with("RECORD")).unwrap();
    assert_eq!(header.chars().count(), total.chars().count(), "{out}");
    assert!(lines.contains(&"SLA violations: 2"), "{out}");
    assert!(lines.iter().any(|l| l.starts_with("svc1-db-1") && l.ends_with("12.00")), "{out}");
    assert_eq!(lines.last(), Some(&"total penalty: 13.50"));
}

#[test]
fn usage_json_shape() {
    let v: serde_json::Value = serde_json::from_str(&usage(&Usage::from(&report()), OutputFormat::Json)).unwrap();
    assert_eq!(v["service_id"], "svc1");
    assert_eq!(v["records"][0]["site_chain"], serde_json::json!(["site-b", "site-a"]));
    assert_eq!(v["records"][0]["start"], "2026-11-28T08:00:00Z");
    assert_eq!(v["violations"][1]["penalty"], 12.0);
    assert_eq!(v["totals"]["penalty"], 13.5);
    assert_eq!(v["totals"]["disk_bytes"], 1005);
}

#[test]
fn event_line_has_rfc3339_time() {
    let e = Event::from(&vmi::Event {
        vee_id: "svc1-db-0".into(),
        service_id: "svc1".into(),
        kind: "state".into(),
        detail: "running -> migrating".into(),
        time: interfaces::time::timestamp_ms(1_795_852_800_005),
        seq: 42,
    });
    assert_eq!(
        event(&e, OutputFormat::Table),
        "2026-11-28T08:00:00.005Z svc1 svc1-db-0 state running -> migrating\n"
    );
    let json_line = event(&e, OutputFormat::Json);
    assert_eq!(json_line.lines().count(), 1);
    let v: serde_json::Value = serde_json::from_str(&json_line).unwrap();
    assert_eq!(v["at"], "2026-11-28T08:00:00.005Z");
    assert_eq!(v["seq"], 42, "where `veem events --after` goes on from");
}

#[test]
fn migrations_table_rows_align() {
    let m = |id: &str, state: &str| {
        Migration::from(&vmi::MigrationInfo {
            migration_id: id.into(),
            vee_id: "v".into(),
            source: "local (h1)".into(),
            destination: "remote (site-b)".into(),
            state: state.parse::<vmi::MigrationState>().unwrap() as i32,
            total: interfaces::time::duration_ms(1234),
            ..Default::default()
        })
    };
    let out = migrations(&[m("m-1", "proposed"), m("m-22", "running")], OutputFormat::Table);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3);
    let col = |l: &str, w: &str| l.find(w).unwrap();
    assert_eq!(col(lines[0], "STATE"), col(lines[1], "proposed"));
    assert_eq!(col(lines[0], "STATE"), col(lines[2], "running"));
    assert!(lines[1].contains("remote (site-b)"));
}

#[test]
fn service_and_deploy_text() {
    let s = Service::from(&vmi::ServiceInfo {
        service_id: "svc1".into(),
        name: "webshop".into(),
        provider: "acme".into(),
        state: vmi::ServiceState::Running as i32,
        vees: vec![vee_info("local")],
        guarantee: vmi::GuaranteeLevel::Standard as i32,
    });
    let out = deployed(&s, OutputFormat::Table);
    assert!(out.starts_with("service: svc1\n"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("VEE ") && l.contains("LOCATION")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("svc1-db-0 ")), "{out}");
    let out = service(&s, OutputFormat::Table);
    assert!(out.lines().any(|l| l == "guarantee: standard"));
    let out = services(&[s], OutputFormat::Table);
    assert!(out.lines().nth(1).unwrap().trim_end().ends_with(" 1"), "{out}");
}

#[test]
fn a_penalty_that_rounds_to_zero_is_never_negative() {
    assert_eq!(super::money(-0.0), "0.00");
    assert_eq!(super::money(-0.004), "0.00");
    assert_eq!(super::money(12.345), "12.35");
    assert!(violations(&[], OutputFormat::Table).ends_with("total penalty: 0.00\n"));
}
