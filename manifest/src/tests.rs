use std::time::Duration;

use super::*;

const EXAMPLE: &str = include_str!("../../configs/manifests/example.toml");
pub(crate) const MINIMAL: &str = include_str!("../../configs/manifests/minimal.toml");
const ID: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// A valid manifest with two components and one constraint; `edit`
/// replaces text to make it invalid.
fn base() -> String {
    format!(
        r#"
[service]
name = "webshop"
provider = "acme"
[sla]
guarantee = "standard"
checkpoint_interval = "auto"
max_outages = 2
migration = "federation"
max_downtime_ms = 500
penalty_per_hour = 12.0
window = {{ start = "2026-11-22T08:00:00Z", end = "2026-11-22T20:00:00Z" }}
[[component]]
name = "db"
instances = 2
vcpus = 1
memory_mib = 256
disk_gib = 1
image = "{ID}"
[[component]]
name = "web"
instances = 1
vcpus = 2
memory_mib = 512
disk_gib = 2
image = "{ID}"
[[constraint]]
kind = "anti-affinity"
level = "host"
scope = "instance"
components = ["db"]
"#
    )
}

fn edit(from: &str, to: &str) -> String {
    let b = base();
    assert!(b.contains(from), "base manifest lacks {from:?}");
    b.replacen(from, to, 1)
}

/// Parses `text`, expects an [`Error::InvalidManifest`] naming `field`
/// whose reason contains `reason`.
#[track_caller]
fn rejects(text: &str, field: &str, reason: &str) {
    match Manifest::from_toml(text) {
        Err(Error::InvalidManifest { field: f, reason: r }) => {
            assert_eq!(f, field, "wrong field; reason was {r:?}");
            assert!(r.contains(reason), "reason {r:?} lacks {reason:?}");
            let shown = Error::InvalidManifest { field: f, reason: r }.to_string();
            assert!(shown.contains(field), "{shown}");
        }
        other => panic!("expected InvalidManifest({field}), got {other:?}"),
    }
}

#[test]
fn example_file_is_valid() {
    let m = Manifest::from_toml(EXAMPLE).unwrap();
    assert_eq!(m.service.name, "webshop");
    assert_eq!(m.service.provider, "acme");
    assert_eq!(m.sla.guarantee, GuaranteeLevel::Standard);
    assert_eq!(m.sla.checkpoint_interval, CheckpointInterval::Auto);
    assert_eq!(m.sla.max_outages, 2);
    assert_eq!(m.sla.migration, MigrationPolicy::Federation);
    assert_eq!(m.sla.max_downtime_ms, Some(500));
    assert_eq!(m.sla.penalty_per_hour, 12.0);
    let w = m.sla.window.unwrap();
    assert_eq!(w.duration(), Duration::from_secs(12 * 3600));
    assert_eq!(m.components.len(), 2);
    let db = m.component("db").unwrap();
    assert_eq!((db.instances, db.vcpus, db.memory_mib, db.disk_gib), (2, 1, 256, 1));
    assert!(db.kernel.is_some() && db.initrd.is_some());
    assert_eq!(db.cmdline.as_deref(), Some("console=ttyS0 root=/dev/vda rw"));
    assert_eq!(m.total_instances(), 5);
    assert_eq!(m.constraints.len(), 2);
    assert_eq!(m.constraints[0].kind, ConstraintKind::AntiAffinity);
    assert_eq!(m.constraints[0].level, ConstraintLevel::Host);
    assert_eq!(m.constraints[0].scope, ConstraintScope::Instance);
    assert_eq!(m.constraints[1].kind, ConstraintKind::Affinity);
    assert_eq!(m.constraints[1].level, ConstraintLevel::Region);
}

#[test]
fn minimal_file_gets_defaults() {
    let m = Manifest::from_toml(MINIMAL).unwrap();
    assert_eq!(m.sla.guarantee, GuaranteeLevel::Legacy);
    assert_eq!(m.sla.checkpoint_interval, CheckpointInterval::Auto);
    assert_eq!(m.sla.max_outages, 1);
    assert_eq!(m.sla.migration, MigrationPolicy::Site);
    assert_eq!(m.sla.max_downtime_ms, None);
    assert_eq!(m.sla.window, None);
    assert_eq!(m.components[0].instances, 1);
    assert!(m.constraints.is_empty());
}

#[test]
fn valid_base_and_round_trip() {
    let m = Manifest::from_toml(&base()).unwrap();
    let again = Manifest::from_toml(&m.to_toml().unwrap()).unwrap();
    assert_eq!(m, again);
    let ex = Manifest::from_toml(EXAMPLE).unwrap();
    assert_eq!(Manifest::from_toml(&ex.to_toml().unwrap()).unwrap(), ex);
}

#[test]
fn checkpoint_interval_durations() {
    let m = Manifest::from_toml(&edit("checkpoint_interval = \"auto\"", "checkpoint_interval = \"5m\"")).unwrap();
    assert_eq!(m.sla.checkpoint_interval, CheckpointInterval::Every(Duration::from_secs(300)));
    let m = Manifest::from_toml(&edit("checkpoint_interval = \"auto\"", "checkpoint_interval = \"90s\"")).unwrap();
    assert_eq!(m.sla.checkpoint_interval, CheckpointInterval::Every(Duration::from_secs(90)));
    assert_eq!(m.sla.checkpoint_interval.to_string(), "1m 30s");
    rejects(
        &edit("checkpoint_interval = \"auto\"", "checkpoint_interval = \"often\""),
        "sla.checkpoint_interval",
        "expected \"auto\" or a duration",
    );
    rejects(
        &edit("checkpoint_interval = \"auto\"", "checkpoint_interval = \"10ms\""),
        "sla.checkpoint_interval",
        "shorter than the minimum",
    );
}

#[test]
fn toml_datetimes_are_accepted_too() {
    let m = Manifest::from_toml(&edit(
        r#"window = { start = "2026-11-22T08:00:00Z", end = "2026-11-22T20:00:00Z" }"#,
        "window = { start = 2026-11-22T08:00:00Z, end = 2026-11-22T10:00:00+01:00 }",
    ))
    .unwrap();
    assert_eq!(m.sla.window.unwrap().duration(), Duration::from_secs(3600));
}

// The four rejections the issue names.

#[test]
fn rejects_missing_field() {
    rejects(
        &edit("memory_mib = 512\n", ""),
        "component[1].memory_mib",
        "missing field `memory_mib`",
    );
    rejects(&edit("provider = \"acme\"\n", ""), "service.provider", "missing field");
    rejects(&edit("guarantee = \"standard\"\n", ""), "sla.guarantee", "missing field");
    rejects(&edit("components = [\"db\"]\n", ""), "constraint[0].components", "missing field");
    // A whole section.
    let no_sla = base().replace("[sla]\n", "[sla_typo]\n");
    assert!(Manifest::from_toml(&no_sla).unwrap_err().to_string().contains("sla"));
}

#[test]
fn rejects_zero_memory() {
    rejects(
        &edit("memory_mib = 512", "memory_mib = 0"),
        "component[1].memory_mib",
        "must be at least 1 MiB",
    );
}

#[test]
fn rejects_duplicate_component_name() {
    rejects(
        &edit("name = \"web\"", "name = \"db\""),
        "component[1].name",
        "duplicate component name \"db\"",
    );
}

#[test]
fn rejects_window_ending_before_start() {
    rejects(
        &edit("end = \"2026-11-22T20:00:00Z\"", "end = \"2026-11-22T07:00:00Z\""),
        "sla.window.end",
        "not after",
    );
    rejects(
        &edit("end = \"2026-11-22T20:00:00Z\"", "end = \"2026-11-22T08:00:00Z\""),
        "sla.window.end",
        "not after",
    );
}

// Further rejections.

#[test]
fn rejects_zero_vcpus_and_instances() {
    rejects(&edit("vcpus = 2", "vcpus = 0"), "component[1].vcpus", "at least 1 vCPUs");
    rejects(&edit("instances = 2", "instances = 0"), "component[0].instances", "at least 1");
    rejects(&edit("disk_gib = 2", "disk_gib = 0"), "component[1].disk_gib", "at least 1 GiB");
}

#[test]
fn rejects_absurd_sizes() {
    rejects(
        &edit("memory_mib = 512", "memory_mib = 1048577"),
        "component[1].memory_mib",
        "more than the limit",
    );
    rejects(&edit("vcpus = 2", "vcpus = 100000"), "component[1].vcpus", "more than the limit");
    rejects(
        &edit("disk_gib = 2", "disk_gib = 99999999"),
        "component[1].disk_gib",
        "more than the limit",
    );
    rejects(
        &edit("max_outages = 2", "max_outages = 5000"),
        "sla.max_outages",
        "more than the limit",
    );
    // Negative numbers do not fit the unsigned fields.
    rejects(&edit("memory_mib = 512", "memory_mib = -1"), "component[1].memory_mib", "");
}

#[test]
fn rejects_malformed_blob_ids() {
    rejects(
        &edit(
            &format!("image = \"{ID}\"\n[[constraint]]"),
            "image = \"sha256:abc\"\n[[constraint]]",
        ),
        "component[1].image",
        "64 hex",
    );
    let with_kernel = |k: &str| edit("name = \"web\"", &format!("name = \"web\"\nkernel = \"{k}\""));
    rejects(&with_kernel("md5:1234"), "component[1].kernel", "sha256:");
    let with_initrd = edit("name = \"web\"", &format!("name = \"web\"\nkernel = \"{ID}\"\ninitrd = \"nope\""));
    rejects(&with_initrd, "component[1].initrd", "invalid blob ID");
}

#[test]
fn first_boot_data_is_read_and_checked() {
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBf0a7bYk5Yd0n9y5fQz1c6b3kKp alice@laptop";
    let with = |keys: &str| {
        edit(
            "name = \"web\"",
            &format!("name = \"web\"\nuser_data = \"\"\"\n#cloud-config\nruncmd: [date]\n\"\"\"\nssh_authorized_keys = [{keys}]"),
        )
    };
    let m = Manifest::from_toml(&with(&format!("\"{key}\""))).unwrap();
    let web = &m.components[1];
    assert_eq!(web.user_data.as_deref(), Some("#cloud-config\nruncmd: [date]\n"));
    assert_eq!(web.ssh_authorized_keys, [key]);
    rejects(
        &with(&format!("\"{key}\", \"AAAAB3NzaC1yc2E bob\"")),
        "component[1].ssh_authorized_keys[1]",
        "key type \"AAAAB3NzaC1yc2E\" is not one of",
    );
}

#[test]
fn rejects_initrd_or_cmdline_without_kernel() {
    rejects(
        &edit("name = \"web\"", &format!("name = \"web\"\ninitrd = \"{ID}\"")),
        "component[1].initrd",
        "needs a kernel",
    );
    rejects(
        &edit("name = \"web\"", "name = \"web\"\ncmdline = \"quiet\""),
        "component[1].cmdline",
        "needs a kernel",
    );
    let ok = edit(
        "name = \"web\"",
        &format!("name = \"web\"\nkernel = \"{ID}\"\ninitrd = \"{ID}\"\ncmdline = \"quiet\""),
    );
    Manifest::from_toml(&ok).unwrap();
}

#[test]
fn a_registry_image_may_carry_the_kernel_and_a_bad_reference_names_the_field() {
    let web_id = format!("image = \"sha256:{}\"", "4".repeat(64));
    let web = |image: &str| {
        let text = EXAMPLE.replacen(&web_id, &format!("image = \"{image}\"\ncmdline = \"quiet\""), 1);
        Manifest::from_toml(&text).map(|m| m.components[1].image.clone())
    };
    let image = web("registry.example.com:5000/acme/web:v1").unwrap();
    assert!(image.blob().is_none(), "{image}");
    let e = web("acme/web:v1").unwrap_err().to_string();
    assert!(e.contains("component[1].image") && e.contains("names no registry"), "{e}");
    let e = web(&format!("sha256:{}", "4".repeat(64))).unwrap_err().to_string();
    assert!(e.contains("component[1].cmdline"), "{e}");
}

#[test]
fn rejects_constraint_on_unknown_component() {
    rejects(
        &edit("components = [\"db\"]", "components = [\"db\", \"cache\"]"),
        "constraint[0].components[1]",
        "unknown component \"cache\"",
    );
    rejects(
        &edit("components = [\"db\"]", "components = []"),
        "constraint[0].components",
        "at least one",
    );
    rejects(
        &edit("components = [\"db\"]", "components = [\"db\", \"db\"]"),
        "constraint[0].components[1]",
        "listed twice",
    );
}

#[test]
fn rejects_unknown_enum_values() {
    rejects(
        &edit("guarantee = \"standard\"", "guarantee = \"gold\""),
        "sla.guarantee",
        "unknown variant `gold`",
    );
    rejects(
        &edit("migration = \"federation\"", "migration = \"anywhere\""),
        "sla.migration",
        "unknown variant",
    );
    rejects(
        &edit("kind = \"anti-affinity\"", "kind = \"antiaffinity\""),
        "constraint[0].kind",
        "unknown variant",
    );
    rejects(
        &edit("level = \"host\"", "level = \"rack\""),
        "constraint[0].level",
        "unknown variant",
    );
    rejects(
        &edit("scope = \"instance\"", "scope = \"all\""),
        "constraint[0].scope",
        "unknown variant",
    );
}

#[test]
fn rejects_unknown_fields() {
    rejects(
        &edit("memory_mib = 512", "memory_mb = 512"),
        "component[1].memory_mb",
        "unknown field",
    );
    rejects(&edit("max_outages = 2", "max_outage = 2"), "sla.max_outage", "unknown field");
    rejects(&edit("[service]\n", "[service]\nowner = \"x\"\n"), "service.owner", "unknown field");
}

#[test]
fn rejects_bad_names() {
    rejects(&edit("name = \"webshop\"", "name = \"\""), "service.name", "must not be empty");
    rejects(
        &edit("name = \"web\"", "name = \"web server\""),
        "component[1].name",
        "contains ' '",
    );
    rejects(&edit("name = \"web\"", "name = \"../etc\""), "component[1].name", "contains '.'");
    rejects(
        &edit("provider = \"acme\"", "provider = \"ac/me\""),
        "service.provider",
        "contains '/'",
    );
    let long = "x".repeat(64);
    rejects(
        &edit("name = \"web\"", &format!("name = \"{long}\"")),
        "component[1].name",
        "at most 63",
    );
}

#[test]
fn rejects_wrong_types_and_syntax() {
    rejects(&edit("vcpus = 2", "vcpus = \"two\""), "component[1].vcpus", "invalid type");
    rejects(
        &edit("penalty_per_hour = 12.0", "penalty_per_hour = -1.0"),
        "sla.penalty_per_hour",
        ">= 0",
    );
    rejects(
        &edit("start = \"2026-11-22T08:00:00Z\"", "start = \"tomorrow\""),
        "sla.window.start",
        "RFC 3339",
    );
    match Manifest::from_toml("[service\nname = ") {
        Err(Error::ManifestSyntax(msg)) => assert!(msg.contains("line 1"), "{msg}"),
        other => panic!("expected ManifestSyntax, got {other:?}"),
    }
}

/// A manifest's errors quote it by excerpts (issue 36): a malformed 1 MiB
/// line, a 1 MiB string of the wrong type or a 1 MiB unknown key comes
/// back as a few hundred characters naming the line, column and field.
#[test]
fn errors_quote_a_huge_manifest_by_excerpts_with_line_column_and_field() {
    let huge = "x".repeat(1 << 20);
    let cases = [
        (format!("[service]\nname = {huge}\n"), "line 2, column"),
        (edit("vcpus = 2", &format!("vcpus = \"{huge}\"")), "component[1].vcpus"),
        (edit("vcpus = 2", &format!("{huge} = 2\nvcpus = 2")), "unknown field"),
    ];
    for (text, names) in cases {
        let e = Manifest::from_toml(&text).unwrap_err().to_string();
        assert!(e.len() < 1200, "{} bytes: {}", e.len(), &e[..2000.min(e.len())]);
        assert!(e.contains(names), "{e}");
        assert!(e.contains("xxxx") && e.contains("characters cut]") || e.contains('…'), "{e}");
    }
}

#[test]
fn rejects_missing_components_and_sla_inconsistency() {
    let text = base();
    let only_head = &text[..text.find("[[component]]").unwrap()];
    rejects(only_head, "component", "at least one");
    rejects(
        &edit("guarantee = \"standard\"", "guarantee = \"full\"").replace("\"federation\"", "\"site\""),
        "sla.migration",
        "federation",
    );
    Manifest::from_toml(&edit("guarantee = \"standard\"", "guarantee = \"full\"")).unwrap();
}

#[test]
fn rejects_type_scope_with_one_component_and_contradictions() {
    rejects(
        &edit("scope = \"instance\"", "scope = \"type\""),
        "constraint[0].scope",
        "at least two components",
    );
    let both = format!(
        "{}\n[[constraint]]\nkind = \"affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"db\", \"web\"]\n",
        base()
    );
    rejects(&both, "constraint[0]", "contradicts the affinity of constraint[1]");
    // Affinity per site and anti-affinity per host go together.
    let fine = both.replace(
        "level = \"host\"\nscope = \"instance\"\ncomponents = [\"db\", \"web\"]",
        "level = \"site\"\nscope = \"instance\"\ncomponents = [\"db\", \"web\"]",
    );
    Manifest::from_toml(&fine).unwrap();
}

#[test]
fn guarantee_levels_are_ordered_and_parse() {
    assert!(GuaranteeLevel::Background < GuaranteeLevel::Legacy);
    assert!(GuaranteeLevel::Enhanced < GuaranteeLevel::Full);
    for g in GuaranteeLevel::ALL {
        assert_eq!(g.as_str().parse::<GuaranteeLevel>().unwrap(), g);
    }
    assert!("gold".parse::<GuaranteeLevel>().is_err());
    assert!(GuaranteeLevel::Background.is_preemptible());
    assert!(!GuaranteeLevel::Legacy.checkpoints_by_default());
    assert!(GuaranteeLevel::Standard.checkpoints_by_default());
}

/// The base manifest with `[[network]]` tables `nets` and component `web`
/// (1 instance) and `db` (2 instances) attached to `web_nets` and `db_nets`.
fn networked(nets: &str, web_nets: &str, db_nets: &str) -> String {
    let b = base()
        .replacen("disk_gib = 2\n", &format!("disk_gib = 2\nnetworks = {web_nets}\n"), 1)
        .replacen("disk_gib = 1\n", &format!("disk_gib = 1\nnetworks = {db_nets}\n"), 1);
    format!("{b}{nets}")
}

const NETS: &str = "[[network]]\nname = \"backend\"\nkind = \"internal\"\n\
    [[network]]\nname = \"public\"\nkind = \"external\"\nports = [80, 7000]\n";

#[test]
fn networks_parse_with_auto_cidrs_and_nic_order() {
    let m = Manifest::from_toml(&networked(NETS, r#"["backend", "public"]"#, r#"["backend"]"#)).unwrap();
    assert_eq!(m.networks.len(), 2);
    assert_eq!((m.networks[0].kind, m.networks[0].cidr), (NetworkKind::Internal, Cidr::Auto));
    assert_eq!(m.networks[1].ports, [80, 7000]);
    assert_eq!(m.component("web").unwrap().networks, ["backend", "public"]);
    let explicit = NETS.replace("kind = \"internal\"\n", "kind = \"internal\"\ncidr = \"10.9.0.0/24\"\n");
    let m = Manifest::from_toml(&networked(&explicit, "[]", r#"["backend"]"#)).unwrap();
    assert_eq!(m.networks[0].cidr, Cidr::Net("10.9.0.0/24".parse().unwrap()));
    let again = Manifest::from_toml(&toml::to_string(&m).unwrap()).unwrap();
    assert_eq!(again, m, "round trip");
}

#[test]
fn rejects_bad_networks_naming_the_field() {
    let on = |nets: &str, web: &str| networked(nets, web, "[]");
    rejects(&on(NETS, r#"["front"]"#), "component[1].networks[0]", "unknown network \"front\"");
    rejects(&on(NETS, r#"["backend", "backend"]"#), "component[1].networks[1]", "listed twice");
    let twice = format!("{NETS}[[network]]\nname = \"backend\"\nkind = \"internal\"\n");
    rejects(&on(&twice, "[]"), "network[2].name", "duplicate network name");
    let bad = NETS.replace("kind = \"internal\"\n", "kind = \"internal\"\ncidr = \"10.9.0.0/33\"\n");
    rejects(&on(&bad, "[]"), "network[0].cidr", "neither \"auto\" nor an IPv4 network");
    let wide = NETS.replace("kind = \"internal\"\n", "kind = \"internal\"\ncidr = \"10.0.0.0/8\"\n");
    rejects(&on(&wide, "[]"), "network[0].cidr", "the prefix must be /16 to /29");
    let hosty = NETS.replace("kind = \"internal\"\n", "kind = \"internal\"\ncidr = \"10.9.0.5/24\"\n");
    rejects(&on(&hosty, "[]"), "network[0].cidr", "host bits set; the network is 10.9.0.0/24");
    // A /30 holds no VEE after network, broadcast and gateway... a /29 holds 5.
    let small = NETS.replace("kind = \"internal\"\n", "kind = \"internal\"\ncidr = \"10.9.0.0/29\"\n");
    assert!(Manifest::from_toml(&networked(&small, r#"["backend"]"#, r#"["backend"]"#)).is_ok());
    let many = networked(&small, r#"["backend"]"#, r#"["backend"]"#).replacen("instances = 2", "instances = 5", 1);
    rejects(&many, "network[0].cidr", "has room for 5 VEEs but 6 instances are attached");
    let no_ports = NETS.replace("ports = [80, 7000]\n", "");
    rejects(&on(&no_ports, "[]"), "network[1].ports", "must open at least one TCP port");
    let internal_ports = NETS.replace("kind = \"internal\"\n", "kind = \"internal\"\nports = [22]\n");
    rejects(
        &on(&internal_ports, "[]"),
        "network[0].ports",
        "only an external network opens ports",
    );
    rejects(
        &on(&NETS.replace("[80, 7000]", "[80, 80]"), "[]"),
        "network[1].ports[1]",
        "port 80 listed twice",
    );
    let overlap = NETS
        .replace("kind = \"internal\"\n", "kind = \"internal\"\ncidr = \"10.9.0.0/16\"\n")
        .replace("kind = \"external\"\n", "kind = \"external\"\ncidr = \"10.9.4.0/24\"\n");
    rejects(
        &on(&overlap, "[]"),
        "network[1].cidr",
        "10.9.4.0/24 overlaps network[0] (10.9.0.0/16)",
    );
    // Its VEEs are named in DNS: names must be DNS labels.
    let snake = on(NETS, r#"["backend"]"#).replacen("name = \"web\"", "name = \"web_front\"", 1);
    rejects(&snake, "component[1].name", "\"web_front\" is not a DNS label");
    let without = base().replacen("name = \"web\"", "name = \"web_front\"", 1);
    assert!(Manifest::from_toml(&without).is_ok(), "fine without networks");
}

#[test]
fn resize_limits_are_at_least_the_size_and_within_the_limits() {
    let m = Manifest::from_toml(&edit(
        "memory_mib = 512\n",
        "memory_mib = 512\nmax_vcpus = 4\nmax_memory_mib = 2048\n",
    ))
    .unwrap();
    let web = m.component("web").unwrap();
    assert_eq!((web.vcpu_limit(), web.memory_limit_mib()), (4, 2048));
    let db = m.component("db").unwrap();
    assert_eq!((db.vcpu_limit(), db.memory_limit_mib()), (1, 256), "no headroom unless asked");
    rejects(
        &edit("memory_mib = 512\n", "memory_mib = 512\nmax_vcpus = 1\n"),
        "component[1].max_vcpus",
        "less than `vcpus` (2)",
    );
    rejects(
        &edit("memory_mib = 512\n", "memory_mib = 512\nmax_memory_mib = 256\n"),
        "component[1].max_memory_mib",
        "less than `memory_mib` (512 MiB)",
    );
    rejects(
        &edit("memory_mib = 512\n", "memory_mib = 512\nmax_vcpus = 100000\n"),
        "component[1].max_vcpus",
        "more than the limit",
    );
}
