use super::*;
use crate::model::EventRec;

#[test]
fn a_scan_after_a_key_reads_on_from_the_next_one_and_stops_when_told() {
    let s = Store::on(Arc::new(MemoryEngine::default()), "memory").unwrap();
    let keys: Vec<String> = (0..300).map(|i| format!("k{i:03}")).collect();
    for k in &keys {
        s.put(Tree::Services, k, &1u32).unwrap();
    }
    let read = |after: Option<&str>, n: usize| {
        let mut seen = Vec::new();
        s.scan_after(Tree::Services, after, |k, _| {
            seen.push(k.to_string());
            Ok(seen.len() < n)
        })
        .unwrap();
        seen
    };
    assert_eq!(read(None, 1000), keys, "every key, across chunks");
    assert_eq!(read(Some("k127"), 3), ["k128", "k129", "k130"]);
    assert_eq!(read(Some("k12"), 2), ["k120", "k121"], "a key that is not there");
    assert_eq!(read(Some("k299"), 5), Vec::<String>::new());
}

#[test]
fn a_commit_writes_and_removes_across_trees_at_once() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::open(&t.path().join("db")).unwrap();
    s.put(Tree::Services, "old", &1u32).unwrap();
    let mut w = Writes::default();
    w.put(Tree::Vees, "v1", &"vee").unwrap();
    w.put(Tree::Services, "s1", &2u32).unwrap();
    w.remove(Tree::Services, "old");
    w.put_raw(Tree::Planner, "p", b"3".to_vec());
    s.commit(w).unwrap();
    assert_eq!(s.get::<String>(Tree::Vees, "v1").unwrap().as_deref(), Some("vee"));
    assert_eq!(s.get::<u32>(Tree::Services, "s1").unwrap(), Some(2));
    assert_eq!(s.get::<u32>(Tree::Services, "old").unwrap(), None);
    assert_eq!(s.get::<u32>(Tree::Planner, "p").unwrap(), Some(3));
}

#[test]
fn a_database_of_the_previous_format_is_read_and_marked_current() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("db");
    // Format 0, as the previous version wrote it: no version key, JSON
    // records straight in their trees.
    {
        let db = interfaces::database::open_database(&path, 8).unwrap();
        let rec = serde_json::json!({"vee_id": "v1", "service_id": "s1", "kind": "state", "detail": "admitted -> running", "at_ms": 5});
        db.open_tree("events")
            .unwrap()
            .insert(1u64.to_be_bytes(), serde_json::to_vec(&rec).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    let s = Store::open(&path).unwrap();
    let events = s.events().unwrap();
    assert_eq!((events.len(), events[0].detail.as_str()), (1, "admitted -> running"));
    assert_eq!(s.get::<u32>(Tree::Meta, FORMAT_KEY).unwrap(), Some(FORMAT_VERSION));
}

#[test]
fn a_usage_record_a_peer_broke_with_nan_is_repaired_and_the_tree_reads_again() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("db");
    // Format 1 stored a NaN from a peer as null.
    {
        let s = Store::open(&path).unwrap();
        s.put(Tree::Meta, FORMAT_KEY, &1u32).unwrap();
        let rec = serde_json::json!({"record_id": "r1", "abc_id": "s1", "vee_id": "v1", "site_chain": ["site-b", "site-a"],
            "start_unix": 10, "end_unix": 13, "cpu_seconds": f64::NAN, "memory_mib_seconds": -5.0, "disk_bytes": 0, "net_bytes": 0, "sent": true});
        s.put(Tree::Usage, "r1", &rec).unwrap();
        assert!(s.list::<crate::model::UsageRec>(Tree::Usage).is_err(), "the broken read");
    }
    let s = Store::open(&path).unwrap();
    let usage = s.list::<crate::model::UsageRec>(Tree::Usage).unwrap();
    assert_eq!((usage[0].cpu_seconds, usage[0].memory_mib_seconds), (0.0, 0.0));
    assert_eq!(s.get::<u32>(Tree::Meta, FORMAT_KEY).unwrap(), Some(FORMAT_VERSION));
}

#[test]
fn a_format_2_database_gets_its_unsent_usage_records_of_peers_vees_in_the_outbox() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("db");
    {
        let s = Store::open(&path).unwrap();
        s.put(Tree::Meta, FORMAT_KEY, &2u32).unwrap();
        // Only what the migration reads of a VEE record.
        let vee = |id: &str, for_peer: Option<&str>| serde_json::json!({"id": id, "for_peer": for_peer});
        s.put(Tree::Vees, "v-peer", &vee("v-peer", Some("site-b"))).unwrap();
        s.put(Tree::Vees, "v-own", &vee("v-own", None)).unwrap();
        for (id, vee_id, sent) in [
            ("r1", "v-peer", false),
            ("r2", "v-peer", true),
            ("r3", "v-own", true),
            ("r4", "gone", false),
        ] {
            let rec = serde_json::json!({"record_id": id, "abc_id": "s", "vee_id": vee_id, "site_chain": ["site-a"],
                "start_unix": 10, "end_unix": 13, "cpu_seconds": 1.0, "memory_mib_seconds": 5.0, "disk_bytes": 0, "net_bytes": 0, "sent": sent});
            s.put(Tree::Usage, id, &rec).unwrap();
        }
    }
    let s = Store::open(&path).unwrap();
    let mut outbox = Vec::new();
    s.scan(Tree::UsageOutbox, |k, v| {
        outbox.push((k.to_string(), serde_json::from_slice::<String>(v)?));
        Ok(())
    })
    .unwrap();
    assert_eq!(outbox, [("r1".to_string(), "site-b".to_string())]);
    assert_eq!(s.get::<u32>(Tree::Meta, FORMAT_KEY).unwrap(), Some(FORMAT_VERSION));
}

#[test]
fn a_format_3_database_gets_each_services_terms_from_its_stored_manifest() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("db");
    let toml = crate::sim::STANDARD.replace("penalty_per_hour", "max_outages = 3\npenalty_per_hour");
    {
        let s = Store::open(&path).unwrap();
        s.put(Tree::Meta, FORMAT_KEY, &3u32).unwrap();
        for (id, manifest) in [("s1", toml.as_str()), ("for-peer", "")] {
            let rec = serde_json::json!({"id": id, "name": "shop", "provider": "acme", "manifest_toml": manifest,
                "guarantee": "standard", "penalty_per_hour": 36.0, "created_ms": 0, "vees": []});
            s.put(Tree::Services, id, &rec).unwrap();
        }
    }
    let s = Store::open(&path).unwrap();
    let terms = s
        .get::<crate::model::ServiceRec>(Tree::Services, "s1")
        .unwrap()
        .unwrap()
        .terms
        .unwrap();
    assert_eq!((terms.sla.max_outages, terms.sla.penalty_per_hour), (3, 36.0));
    assert_eq!(
        s.get::<crate::model::ServiceRec>(Tree::Services, "for-peer")
            .unwrap()
            .unwrap()
            .terms,
        None
    );
}

#[test]
fn a_database_of_a_newer_format_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("db");
    Store::open(&path)
        .unwrap()
        .put(Tree::Meta, FORMAT_KEY, &(FORMAT_VERSION + 1))
        .unwrap();
    let e = Store::open(&path).err().expect("refused");
    let msg = format!("{e:#}");
    assert!(
        msg.contains(&format!(
            "has format version {}, newer than this version reads (up to {FORMAT_VERSION})",
            FORMAT_VERSION + 1
        )),
        "{msg}"
    );
    assert!(matches!(e, crate::store::StoreError::Failed(f) if f.is::<interfaces::Error>()));
}

#[test]
fn the_store_reads_and_writes_its_records_the_same_in_another_engine() {
    let s = Store::on(Arc::new(MemoryEngine::default()), "memory").unwrap();
    assert_eq!(
        s.get::<u32>(Tree::Meta, FORMAT_KEY).unwrap(),
        Some(FORMAT_VERSION),
        "a new database is current"
    );
    let mut w = Writes::default();
    w.put(Tree::Vees, "v2", &2u32).unwrap();
    w.put(Tree::Vees, "v1", &1u32).unwrap();
    s.commit(w).unwrap();
    assert_eq!(s.list::<u32>(Tree::Vees).unwrap(), [1, 2]);
    assert!(!s.is_empty(Tree::Vees).unwrap() && s.is_empty(Tree::Services).unwrap());
    s.remove(Tree::Vees, "v1").unwrap();
    assert!(s.put_new(Tree::Vees, "v1", &3u32).unwrap());
    assert!(!s.put_new(Tree::Vees, "v1", &4u32).unwrap());
    assert_eq!(s.get::<u32>(Tree::Vees, "v1").unwrap(), Some(3));
    for at_ms in [2, 1] {
        let e = EventRec {
            vee_id: "v".into(),
            service_id: "s".into(),
            kind: "k".into(),
            detail: String::new(),
            at_ms,
            seq: 0,
        };
        s.append_event(&e).unwrap();
    }
    let order: Vec<i64> = s.events().unwrap().iter().map(|e| e.at_ms).collect();
    assert_eq!(order, [2, 1], "events in the order they were appended");
}

#[test]
fn records_survive_reopen() {
    let t = tempfile::tempdir().unwrap();
    {
        let s = Store::open(t.path()).unwrap();
        s.put(Tree::Meta, "k", &42u32).unwrap();
        assert!(s.put_new(Tree::Meta, "n", &1u32).unwrap());
        assert!(!s.put_new(Tree::Meta, "n", &2u32).unwrap());
        s.append_event(&EventRec {
            vee_id: "v".into(),
            service_id: "s".into(),
            kind: "k".into(),
            detail: "".into(),
            at_ms: 1,
            seq: 0,
        })
        .unwrap();
    }
    let s = Store::open(t.path()).unwrap();
    assert_eq!(s.get::<u32>(Tree::Meta, "k").unwrap(), Some(42));
    assert_eq!(s.get::<u32>(Tree::Meta, "n").unwrap(), Some(1));
    assert_eq!(s.events().unwrap().len(), 1);
}
