//! Unit tests of `config`.

use super::*;

const BASE: &str = "site_id = \"site-a\"\nlisten = \"127.0.0.1:7200\"\ndb = \"/tmp/x\"\nimage_repo = \"http://127.0.0.1:7000\"\n";

#[test]
fn parses_tokens_roles_hosts_and_peers() {
    let text = format!(
        "{BASE}[[hosts]]\nname = \"a1\"\nendpoint = \"http://127.0.0.1:7101\"\n[[tokens]]\ntoken = \"sp-acme-token\"\nrole = \"provider\"\nname = \"acme\"\n[[tokens]]\ntoken = \"operator-token\"\nrole = \"operator\"\n[[tokens]]\ntoken = \"peer-b-token\"\nrole = \"peer\"\nname = \"site-b\"\n[[peers]]\nsite_id = \"site-b\"\nendpoint = \"http://127.0.0.1:7300\"\ntoken = \"a-at-b-token\"\n[peers.agreement]\nprice_per_vee_hour = 0.5\n"
    );
    let cfg: VeemConfig = toml::from_str(&text).unwrap();
    cfg.check().unwrap();
    assert_eq!(cfg.role_of("sp-acme-token"), Some(Role::Provider("acme".into())));
    assert_eq!(cfg.role_of("operator-token"), Some(Role::Operator));
    assert_eq!(cfg.role_of("peer-b-token"), Some(Role::Peer("site-b".into())));
    assert_eq!(cfg.role_of("nope"), None);
    assert_eq!(cfg.peers[0].agreement.max_vcpus, u32::MAX);
}

#[test]
fn recovery_policy_reads_humantime_durations_and_has_defaults() {
    let cfg = VeemConfig::parse(BASE).unwrap();
    assert_eq!(cfg.recovery.attempts_per_host, 3);
    assert_eq!(cfg.recovery.budget, Duration::from_secs(120));
    let cfg = VeemConfig::parse(&format!(
        "{BASE}[recovery]\nattempts_per_host = 2\nbackoff = \"250ms\"\nbudget = \"5m\"\n"
    ))
    .unwrap();
    let p = cfg.recovery.per_host();
    assert_eq!(
        (p.attempts, p.backoff(1), p.backoff(2)),
        (2, Duration::from_millis(250), Duration::from_millis(500))
    );
    assert_eq!(cfg.recovery.budget, Duration::from_secs(300));
    let e = VeemConfig::parse(&format!("{BASE}[recovery]\nbudget = \"2 fortnights\"\n")).unwrap_err();
    assert!(format!("{e:#}").contains("field `recovery.budget`"), "{e:#}");
    let e = VeemConfig::parse(&format!("{BASE}[recovery]\nbudget = -5\n")).unwrap_err();
    assert!(format!("{e:#}").contains("-5 is negative"), "{e:#}");
    let e = VeemConfig::parse(&format!("{BASE}[recovery]\nattempts_per_host = 0\n")).unwrap_err();
    assert!(format!("{e:#}").contains("recovery.attempts_per_host"), "{e:#}");
}

#[test]
fn restores_per_host_follow_the_configuration_else_the_hosts_vcpus() {
    let cfg = VeemConfig::parse(BASE).unwrap();
    assert_eq!(cfg.recovery.parallel_per_host, None);
    assert_eq!(cfg.recovery.restores_per_host(Some(8)), 4, "half the vCPUs");
    assert_eq!(cfg.recovery.restores_per_host(Some(1)), 1, "at least one");
    assert_eq!(cfg.recovery.restores_per_host(None), 2, "unknown vCPUs");
    assert_eq!(cfg.recovery.restores_per_host(Some(0)), 2, "a host that reports none");
    let cfg = VeemConfig::parse(&format!("{BASE}[recovery]\nparallel_per_host = 3\n")).unwrap();
    assert_eq!(cfg.recovery.restores_per_host(Some(32)), 3);
    assert_eq!(cfg.recovery.restores_per_host(None), 3);
    let e = VeemConfig::parse(&format!("{BASE}[recovery]\nparallel_per_host = 0\n")).unwrap_err();
    assert!(format!("{e:#}").contains("recovery.parallel_per_host"), "{e:#}");
}

#[test]
fn bad_rank_policy_and_duplicate_hosts_name_the_field() {
    let cfg: VeemConfig = toml::from_str(&format!("{BASE}rank_policy = \"random\"\n")).unwrap();
    assert!(cfg.check().unwrap_err().to_string().contains("rank_policy"));
    let dup = format!("{BASE}[[hosts]]\nname = \"a\"\nendpoint = \"x\"\n[[hosts]]\nname = \"a\"\nendpoint = \"y\"\n");
    let cfg: VeemConfig = toml::from_str(&dup).unwrap();
    assert!(cfg.check().unwrap_err().to_string().contains("hosts[1].name"));
}

#[test]
fn proposals_default_off_and_deny_unknown_fields() {
    let cfg: VeemConfig = toml::from_str(BASE).unwrap();
    assert_eq!(
        (cfg.proposals.interval, cfg.proposals.consolidation),
        (Duration::from_secs(10), false)
    );
    let on: VeemConfig = toml::from_str(&format!(
        "{BASE}[proposals]\nconsolidation = true\ninterval = \"2s\"\nsettle = \"5s\"\n"
    ))
    .unwrap();
    on.check().unwrap();
    let secs = |d: Duration| d.as_secs();
    assert_eq!(
        (
            secs(on.proposals.interval),
            on.proposals.consolidation,
            secs(on.proposals.settle),
            secs(on.proposals.hold)
        ),
        (2, true, 5, 600)
    );
    let e = toml::from_str::<VeemConfig>(&format!("{BASE}[proposals]\nconsolidate = true\n")).unwrap_err();
    assert!(e.to_string().contains("consolidate"), "{e}");
    let zero: VeemConfig = toml::from_str(&format!("{BASE}[proposals]\ninterval = \"0s\"\n")).unwrap();
    assert!(zero.check().unwrap_err().to_string().contains("proposals.interval"));
}

#[test]
fn durations_are_humantime_and_the_deprecated_seconds_keys_still_read() {
    let new = VeemConfig::parse(&format!(
        "{BASE}heartbeat_interval = \"3s\"\nusage_interval = \"1m\"\nslot = \"2m\"\n[proposals]\ninterval = \"20s\"\nsettle = \"1h\"\nhold = \"15m\"\n"
    ))
    .unwrap();
    let old = VeemConfig::parse(&format!(
        "{BASE}heartbeat_interval_s = 3\nusage_interval_s = 60\nslot_s = 120\n[proposals]\ninterval_s = 20\nsettle_s = 3600\nhold_s = 900\n"
    ))
    .unwrap();
    for cfg in [new, old] {
        assert_eq!(
            (cfg.heartbeat_interval, cfg.usage_interval, cfg.slot),
            (Duration::from_secs(3), Duration::from_secs(60), Duration::from_secs(120))
        );
        assert_eq!(
            (cfg.proposals.interval, cfg.proposals.settle, cfg.proposals.hold),
            (Duration::from_secs(20), Duration::from_secs(3600), Duration::from_secs(900))
        );
    }
    let both = VeemConfig::parse(&format!("{BASE}heartbeat_interval = \"3s\"\nheartbeat_interval_s = 3\n")).unwrap_err();
    assert!(format!("{both:#}").contains("heartbeat_interval"), "{both:#}");
    let sub = VeemConfig::parse(&format!("{BASE}heartbeat_interval = \"500ms\"\n")).unwrap_err();
    assert!(
        format!("{sub:#}").contains("field `heartbeat_interval`: must be at least 1 s"),
        "{sub:#}"
    );
    let frac = VeemConfig::parse(&format!("{BASE}slot = \"1500ms\"\n")).unwrap_err();
    assert!(format!("{frac:#}").contains("field `slot`"), "{frac:#}");
}

#[test]
fn usage_limits_parse_into_planner_limits_and_bad_ones_name_the_field() {
    let text = format!(
        "{BASE}slot = \"1m\"\n[usage_limits.acme]\nkind = \"fixed\"\nlimit = {{ vcpus = 2, memory_mib = 256, disk_gib = 2 }}\n\
         [usage_limits.globex]\nkind = \"commitment\"\nepoch_limit = {{ vcpus = 4, memory_mib = 512, disk_gib = 8 }}\nepoch = \"1h 1s\"\n\
         burst_limit = {{ vcpus = 8, memory_mib = 1024, disk_gib = 16 }}\nburst_s = 600\n"
    );
    let cfg: VeemConfig = toml::from_str(&text).unwrap();
    cfg.check().unwrap();
    assert_eq!(
        cfg.usage_limits["acme"].to_planner(cfg.slot.as_secs()),
        UsageLimit::Fixed {
            limit: Resources::new(2, 256, 2)
        }
    );
    assert_eq!(
        cfg.usage_limits["globex"].to_planner(cfg.slot.as_secs()),
        UsageLimit::Commitment {
            epoch_limit: Resources::new(4, 512, 8),
            epoch_slots: 61,
            burst_limit: Resources::new(8, 1024, 16),
            burst_slots: 10,
        }
    );
    let e = VeemConfig::parse(&format!("{BASE}[usage_limits.acme]\nkind = \"hard\"\n")).unwrap_err();
    assert!(
        e.to_string().contains("field `usage_limits.acme.kind`") && e.to_string().contains("hard"),
        "{e}"
    );
    let e = VeemConfig::parse(&format!(
        "{BASE}[usage_limits.acme]\nkind = \"fixed\"\nlimit = {{ vcpus = 2, memory = 256, disk_gib = 2 }}\n"
    ))
    .unwrap_err();
    assert!(
        e.to_string().contains("field `usage_limits.acme`") && e.to_string().contains("unknown field `memory`"),
        "{e}"
    );
    let zero = VeemConfig::parse(&format!(
        "{BASE}[usage_limits.g]\nkind = \"commitment\"\nepoch_limit = {{ vcpus = 1, memory_mib = 1, disk_gib = 1 }}\nepoch_s = 0\n\
         burst_limit = {{ vcpus = 1, memory_mib = 1, disk_gib = 1 }}\nburst_s = 60\n"
    ))
    .unwrap_err();
    assert!(zero.to_string().contains("usage_limits.g"), "{zero}");
}

#[test]
fn the_lab_configurations_are_valid() {
    // The secrets they name, as scripts/demo writes them (mode 0600).
    let demo = tempfile::tempdir().unwrap();
    std::fs::create_dir(demo.path().join("secrets")).unwrap();
    for name in ["site-a-repo", "site-b-repo", "a-to-b", "b-to-a"] {
        let file = demo.path().join(format!("secrets/{name}.token"));
        std::fs::write(&file, format!("demo-{name}-token\n")).unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    }
    for site in ["a", "b"] {
        let path = format!("{}/../configs/lab/veem-site-{site}.toml", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("@DEMO@", demo.path().to_str().unwrap());
        let cfg = VeemConfig::parse(&text).unwrap_or_else(|e| panic!("{path}: {e:#}"));
        assert_eq!(cfg.site_id, format!("site-{site}"));
    }
}

#[test]
fn an_overlay_needs_a_vtep_and_its_own_port_per_peer() {
    let peer = |site: &str, overlay: &str| {
        format!(
            "[[peers]]\nsite_id = \"{site}\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"t-{site}-token\"\n[peers.agreement]\n{overlay}"
        )
    };
    let ok = VeemConfig::parse(&format!(
        "{BASE}{}{}",
        peer("site-b", "[peers.overlay]\nvtep = \"10.77.0.2\"\nport = 4790\n"),
        peer("site-c", "")
    ))
    .unwrap();
    let o = ok.peers[0].overlay.as_ref().unwrap();
    assert_eq!((o.vtep.to_string(), o.port), ("10.77.0.2".into(), 4790));
    assert!(ok.peers[1].overlay.is_none());
    for (overlays, field) in [
        (["vtep = \"10.77.0.2\"\nport = 4789\n", ""], "peers[0].overlay.port"),
        (
            ["vtep = \"10.77.0.2\"\nport = 4790\n", "vtep = \"10.77.0.3\"\nport = 4790\n"],
            "peers[1].overlay.port",
        ),
        (["vtep = \"site-b\"\nport = 4790\n", ""], "peers[0].overlay.vtep"),
    ] {
        let text = format!(
            "{BASE}{}{}",
            peer("site-b", &format!("[peers.overlay]\n{}", overlays[0])),
            peer(
                "site-c",
                &if overlays[1].is_empty() {
                    String::new()
                } else {
                    format!("[peers.overlay]\n{}", overlays[1])
                }
            )
        );
        let e = format!("{:#}", VeemConfig::parse(&text).unwrap_err());
        assert!(e.contains(field), "{field}: {e}");
    }
}

#[test]
fn tokens_are_given_by_their_digest_and_bad_entries_name_the_field() {
    let digest = interfaces::tokens::digest_hex("sp-acme-token");
    assert_eq!(digest.len(), 64);
    let text = format!("{BASE}[[tokens]]\ntoken_sha256 = \"{digest}\"\nrole = \"provider\"\nname = \"acme\"\n");
    let cfg: VeemConfig = toml::from_str(&text).unwrap();
    cfg.check().unwrap();
    assert_eq!(cfg.role_of("sp-acme-token"), Some(Role::Provider("acme".into())));
    assert_eq!(cfg.role_of(&digest), None, "the digest is not the token");
    assert_eq!(cfg.role_of("sp-acme-tokeN"), None);
    for (entry, why) in [
        ("token_sha256 = \"abc\"", "`tokens[0].token_sha256`: must be 64 hex digits"),
        (
            &format!("token = \"sp-acme-token\"\ntoken_sha256 = \"{digest}\"") as &str,
            "give one of",
        ),
        ("", "give one of"),
        ("token = \"short\"", "at least 8"),
    ] {
        let text = format!("{BASE}[[tokens]]\n{entry}\nrole = \"operator\"\n");
        let e = VeemConfig::parse(&text).map(|_| ()).unwrap_err();
        assert!(format!("{e:#}").contains(why), "{entry}: {e:#}");
    }
    let twice = format!(
        "{BASE}[[tokens]]\ntoken_sha256 = \"{digest}\"\nrole = \"operator\"\n[[tokens]]\ntoken = \"sp-acme-token\"\nrole = \"operator\"\n"
    );
    assert!(format!("{:#}", VeemConfig::parse(&twice).map(|_| ()).unwrap_err()).contains("the same token twice"));
}

#[test]
fn auto_approve_names_only_the_planners_reasons() {
    let cfg = VeemConfig::parse(&format!(
        "{BASE}[migration]\nauto_approve = [\"consolidation\", \"failure-risk\"]\n"
    ))
    .unwrap();
    assert_eq!(cfg.migration.auto_approve.len(), 2);
    let e = VeemConfig::parse(&format!("{BASE}[migration]\nauto_approve = [\"failure-risk\", \"maintenance\"]\n")).unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("field `migration.auto_approve[1]`") && e.contains("\"maintenance\""),
        "{e}"
    );
}

/// The packaged configuration's commented `[listener]` block says the
/// defaults: uncommented, it changes nothing; and a bad limit is named.
#[test]
fn the_packaged_listener_block_gives_the_defaults_and_bad_limits_are_named() {
    let packaged = include_str!("../../../packaging/config/veem.toml");
    let start = packaged.find("# [listener]").expect("the packaged [listener] block");
    let block: String = packaged[start..]
        .lines()
        .take_while(|l| l.starts_with("# "))
        .map(|l| format!("{}\n", &l[2..]))
        .collect();
    let cfg = VeemConfig::parse(&format!("{BASE}{block}")).unwrap();
    assert_eq!(cfg.listener, interfaces::connections::ListenerLimits::default());
    let e = VeemConfig::parse(&format!("{BASE}[listener]\nhead_timeout = \"0s\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("listener.head_timeout") && e.contains("longer than 0 s"), "{e}");
}

#[test]
fn the_store_is_sled_at_db_by_default_or_the_sites_etcd_cluster() {
    let cfg = VeemConfig::parse(BASE).unwrap();
    assert_eq!(cfg.store.engine, EngineKind::Sled);
    let head = "site_id = \"site-a\"\nlisten = \"10.0.0.5:7200\"\nimage_repo = \"http://127.0.0.1:7000\"\n";
    let tls = "[store.tls]\nca = \"/etc/vee/etcd-ca.crt\"\ncert = \"/etc/vee/veem.crt\"\nkey = \"/etc/vee/veem.key\"\n";
    let etcd = format!("{head}[store]\nengine = \"etcd\"\nendpoints = [\"https://10.0.0.1:2379\", \"https://10.0.0.2:2379\"]\n{tls}");
    let cfg = VeemConfig::parse(&etcd).expect("no db needed with etcd");
    let o = cfg.store.etcd(&cfg.site_id);
    assert_eq!(
        (o.prefix.as_str(), o.endpoints.len(), o.timeout),
        ("/vee/site-a", 2, Duration::from_secs(5))
    );
    let refused = |text: &str, field: &str, why: &str| {
        let e = format!("{:#}", VeemConfig::parse(text).unwrap_err());
        assert!(e.contains(&format!("field `{field}`")) && e.contains(why), "{field}: {e}");
    };
    refused(head, "db", "is required");
    refused(&format!("{head}[store]\nengine = \"etcd\"\n"), "store.endpoints", "at least one");
    refused(
        &format!("{head}[store]\nengine = \"etcd\"\nendpoints = [\"https://10.0.0.1:2379\"]\n"),
        "store.endpoints[0]",
        "[store.tls] is missing",
    );
    refused(
        &format!("{head}[store]\nengine = \"etcd\"\nendpoints = [\"http://10.0.0.1:2379\"]\n"),
        "store.endpoints[0]",
        "insecure = true",
    );
    refused(
        &format!("{head}[store]\nengine = \"etcd\"\nendpoints = [\"10.0.0.1:2379\"]\n"),
        "store.endpoints[0]",
        "not an http:// or https:// URL",
    );
    refused(
        &format!("{head}[store]\nengine = \"etcd\"\nprefix = \"/vee/a/\"\nendpoints = [\"https://10.0.0.1:2379\"]\n{tls}"),
        "store.prefix",
        "must start with /",
    );
    refused(
        &format!("{BASE}[store]\nendpoints = [\"https://10.0.0.1:2379\"]\n"),
        "store.engine",
        "etcd's",
    );
    refused(&format!("{BASE}[store]\nengine = \"zookeeper\"\n"), "store.engine", "zookeeper");
    refused(
        &etcd.replacen("[store.tls]", "lease_ttl = \"1s\"\n[store.tls]", 1),
        "store.lease_ttl",
        "at least 2 s",
    );
    let ttl = VeemConfig::parse(&etcd.replacen("[store.tls]", "lease_ttl = \"4s\"\n[store.tls]", 1)).unwrap();
    assert_eq!(
        (ttl.store.lease_ttl, ttl.advertised()),
        (Duration::from_secs(4), "http://10.0.0.5:7200".to_string())
    );
}

/// A standby names its leader by the URL the leader advertises: one no
/// client can reach (the packaged `listen = "0.0.0.0:7200"` taken as it
/// is, a loopback address while the site spans machines) is refused at
/// start-up, naming `advertise`.
#[test]
fn a_leader_advertises_an_address_its_sites_clients_can_reach() {
    let tls = "[store.tls]\nca = \"/etc/vee/etcd-ca.crt\"\ncert = \"/etc/vee/veem.crt\"\nkey = \"/etc/vee/veem.key\"\n";
    let on = |listen: &str, advertise: &str, members: &str| {
        format!(
            "site_id = \"site-a\"\nlisten = \"{listen}\"\n{advertise}image_repo = \"http://127.0.0.1:7000\"\n\
             [store]\nengine = \"etcd\"\nendpoints = [\"https://{members}:2379\"]\n{tls}"
        )
    };
    let refused = |text: String, why: &str| {
        let e = format!("{:#}", VeemConfig::parse(&text).unwrap_err());
        assert!(e.contains("field `advertise`") && e.contains(why), "{e}");
    };
    refused(on("0.0.0.0:7200", "", "10.0.0.1"), "unspecified address");
    refused(on("[::]:7200", "", "10.0.0.1"), "the default: the listen address");
    refused(
        on("10.0.0.5:7200", "advertise = \"https://0.0.0.0:7200\"\n", "10.0.0.1"),
        "unspecified",
    );
    refused(on("127.0.0.1:7200", "", "10.0.0.1"), "loopback");
    refused(
        on("0.0.0.0:7200", "advertise = \"https://localhost:7200\"\n", "10.0.0.1"),
        "loopback",
    );
    refused(
        on("0.0.0.0:7200", "advertise = \"veem-a:7200\"\n", "10.0.0.1"),
        "not an http:// or https:// URL",
    );
    let ok = |text: String| VeemConfig::parse(&text).unwrap().advertised();
    assert_eq!(
        ok(on("0.0.0.0:7200", "advertise = \"https://10.0.0.5:7200\"\n", "10.0.0.1")),
        "https://10.0.0.5:7200"
    );
    // A site on one machine: its etcd and peers on loopback too.
    assert_eq!(ok(on("127.0.0.1:7200", "", "127.0.0.1")), "http://127.0.0.1:7200");
    let with_peer = |peer: &str| {
        on("127.0.0.1:7200", "", "127.0.0.1").replacen(
            "[store]",
            &format!(
                "[[peers]]\nsite_id = \"site-b\"\nendpoint = \"https://{peer}:7200\"\ntoken = \"a-at-b-token\"\n[peers.agreement]\n[store]"
            ),
            1,
        )
    };
    assert!(VeemConfig::parse(&with_peer("127.0.0.1")).is_ok());
    refused(with_peer("10.0.0.9"), "loopback");
    // The embedded store has no standby to name it.
    assert!(VeemConfig::parse(BASE).is_ok());
}

#[test]
fn a_registry_as_the_sites_repository_must_be_one_of_the_registries_and_is_not_replicated() {
    let oci = BASE.replace("http://127.0.0.1:7000", "oci://reg.example:5000/site-a");
    let e = VeemConfig::parse(&oci).unwrap_err();
    assert!(
        format!("{e:#}").contains("registry reg.example:5000 is not one of the [[registries]]"),
        "{e:#}"
    );
    let listed = format!("{oci}[[registries]]\nhost = \"reg.example:5000\"\n");
    VeemConfig::parse(&listed).unwrap();
    let e = VeemConfig::parse(&format!("replicate_checkpoints = true\n{listed}")).unwrap_err();
    assert!(format!("{e:#}").contains("replicate_checkpoints"), "{e:#}");
    let e = VeemConfig::parse(&BASE.replace("http://127.0.0.1:7000", "oci://reg.example:5000")).unwrap_err();
    assert!(format!("{e:#}").contains("is not oci://REGISTRY/NAMESPACE"), "{e:#}");
}

/// A peer's token and the repository token are read from files only the
/// VEEM may read: one that every user may read is refused naming the
/// field, and a peer gives exactly one of `token_file` and `token`.
#[test]
fn secrets_are_read_from_files_others_cannot_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("site-b.token");
    std::fs::write(&file, "a-to-b-token\n").unwrap();
    let peer =
        |token: &str| format!("{BASE}[[peers]]\nsite_id = \"site-b\"\nendpoint = \"https://10.0.0.9:7200\"\n{token}[peers.agreement]\n");
    let with_file = peer(&format!("token_file = {:?}\n", file.display()));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = format!("{:#}", VeemConfig::parse(&with_file).unwrap_err());
    assert!(
        e.contains("field `peers[0].token_file`") && e.contains("readable by every user"),
        "{e}"
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(VeemConfig::parse(&with_file).unwrap().peers[0].token, "a-to-b-token");
    let e = format!("{:#}", VeemConfig::parse(&peer("")).unwrap_err());
    assert!(e.contains("field `peers[0]`") && e.contains("exactly one"), "{e}");
    let repo = format!("image_repo_token_file = {:?}\n{BASE}", file.display());
    assert_eq!(VeemConfig::parse(&repo).unwrap().image_repo_token.as_deref(), Some("a-to-b-token"));
    let both = format!("image_repo_token = \"t\"\n{repo}");
    assert!(format!("{:#}", VeemConfig::parse(&both).unwrap_err()).contains("not both"));
}
