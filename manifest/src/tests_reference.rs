//! The manifest reference (`docs/manifest-reference.md`) names every
//! field of the manifest types.

use std::time::Duration;

use super::*;

const ID: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// Every key a manifest can have (every field of every table, as serde
/// names it) is documented in `docs/manifest-reference.md`: as `key =` in
/// its TOML, or as a table header. Each struct is written out field by
/// field, so that a new field does not compile here until it is added,
/// and then fails until it is documented.
#[test]
fn every_manifest_field_is_in_the_manifest_reference() {
    use crate::elasticity::{ElasticityRule, Resource};
    let reference = include_str!("../../docs/manifest-reference.md");
    let id: BlobId = ID.parse().unwrap();
    let m = Manifest {
        service: ServiceSection {
            name: "shop".into(),
            provider: "acme".into(),
        },
        sla: Sla {
            guarantee: GuaranteeLevel::Standard,
            checkpoint_interval: CheckpointInterval::Auto,
            max_outages: 1,
            migration: MigrationPolicy::Federation,
            max_downtime_ms: Some(500),
            penalty_per_hour: 1.0,
            window: Some(Window {
                start: chrono::DateTime::from_timestamp(0, 0).unwrap(),
                end: chrono::DateTime::from_timestamp(3600, 0).unwrap(),
            }),
        },
        components: vec![Component {
            name: "web".into(),
            instances: 1,
            vcpus: 1,
            memory_mib: 128,
            max_vcpus: Some(2),
            max_memory_mib: Some(256),
            disk_gib: 1,
            image: ImageRef::Repository(id.clone()),
            kernel: Some(id.clone()),
            initrd: Some(id),
            cmdline: Some("console=ttyS0".into()),
            networks: vec!["public".into()],
            user_data: Some("#cloud-config\n".into()),
            ssh_authorized_keys: vec!["ssh-ed25519 AAAA a@b".into()],
        }],
        constraints: vec![Constraint {
            kind: ConstraintKind::AntiAffinity,
            level: ConstraintLevel::Host,
            scope: ConstraintScope::Instance,
            components: vec!["web".into()],
        }],
        networks: vec![Network {
            name: "public".into(),
            kind: NetworkKind::External,
            cidr: Cidr::Auto,
            ports: vec![80],
        }],
        elasticity: vec![ElasticityRule {
            component: "web".into(),
            min: Some(1),
            max: Some(2),
            metric: Some("cpu_utilization".into()),
            scale_out_above: Some(0.7),
            scale_in_below: Some(0.2),
            sustained: Some(Duration::from_secs(60)),
            cooldown: Some(Duration::from_secs(60)),
            schedule: Some("0 8 * * *".into()),
            instances: Some(2),
            resize: Some(Resource::Memory),
            step: Some(64),
        }],
    };
    fn keys(v: &toml::Value, path: &str, out: &mut Vec<(String, bool)>) {
        let (table, is_table) = match v {
            toml::Value::Table(t) => (Some(t), true),
            toml::Value::Array(a) => (a.first().and_then(|f| f.as_table()), true),
            _ => (None, false),
        };
        let Some(t) = table else { return };
        for (k, child) in t {
            let nested =
                matches!(child, toml::Value::Table(_)) || child.as_array().is_some_and(|a| a.first().is_some_and(toml::Value::is_table));
            out.push((format!("{path}{k}"), nested && is_table));
            keys(child, &format!("{path}{k}."), out);
        }
    }
    let mut all = Vec::new();
    keys(&toml::Value::try_from(&m).unwrap(), "", &mut all);
    assert!(all.len() > 40, "{all:?}");
    let documented = |path: &str, table: bool| {
        let key = path.rsplit('.').next().unwrap();
        reference.lines().any(|line| {
            let l = line.trim_start();
            l.starts_with(&format!("{key} ="))
                || l.contains(&format!("{{ {key} ="))
                || l.contains(&format!(", {key} ="))
                || (table && (l.starts_with(&format!("[{key}]")) || l.starts_with(&format!("[[{key}]]"))))
        })
    };
    let missing: Vec<&String> = all.iter().filter(|(p, t)| !documented(p, *t)).map(|(p, _)| p).collect();
    assert!(missing.is_empty(), "manifest fields not in docs/manifest-reference.md: {missing:?}");
}

/// The cells of the row of `key` in the reference's table of defaults and
/// limits: (default, limits).
fn defaults_and_limits(reference: &str, key: &str) -> (String, String) {
    let row = reference
        .lines()
        .find(|l| l.starts_with(&format!("| `{key}` |")) || l.starts_with(&format!("| `{key}`, ")))
        .unwrap_or_else(|| panic!("docs/manifest-reference.md: no row for `{key}` under \"Defaults and limits\""));
    let cells: Vec<&str> = row.split(" | ").collect();
    (cells[1].to_string(), cells[2].trim_end_matches(" |").to_string())
}

/// The reference's table of defaults and limits says what the code does:
/// each default is the value a manifest that leaves the key out gets, each
/// limit the constant validation checks against.
#[test]
fn the_manifest_reference_states_the_defaults_and_limits_of_the_code() {
    use crate::cloud_init::{MAX_SSH_KEYS, MAX_SSH_KEY_BYTES, MAX_USER_DATA_BYTES};
    use crate::elasticity::{MAX_METRIC_LEN, MAX_RULES, MAX_RULE_PERIOD};
    use crate::image_ref::MAX_IMAGE_REF_BYTES;
    let reference = include_str!("../../docs/manifest-reference.md");
    let m = Manifest::from_toml(&format!(
        "{}\n[[elasticity]]\ncomponent = \"vm\"\nmin = 1\nmax = 2\nmetric = \"cpu_utilization\"\nscale_out_above = 0.7\n",
        crate::tests::MINIMAL
    ))
    .unwrap();
    let c = &m.components[0];
    assert_eq!(m.sla.checkpoint_interval, CheckpointInterval::Auto);
    let (rule_for, cooldown) = (
        m.elasticity[0].sustained.unwrap_or_default(),
        m.elasticity[0].cooldown.unwrap_or_default(),
    );
    let period = format!("at most {} h", MAX_RULE_PERIOD.as_secs() / 3600);
    let prefixes = format!("/{} to /{}", NETWORK_PREFIXES.start(), NETWORK_PREFIXES.end());
    let expected: Vec<(&str, String, String)> = vec![
        ("service.name", "required".into(), format!("1 to {MAX_NAME_LEN} bytes")),
        (
            "sla.checkpoint_interval",
            "`\"auto\"`".into(),
            format!("at least {}", humantime::format_duration(MIN_CHECKPOINT_INTERVAL)),
        ),
        (
            "sla.max_outages",
            m.sla.max_outages.to_string(),
            format!("at most {MAX_OUTAGES} outages"),
        ),
        (
            "sla.migration",
            format!("`{}`", m.sla.migration.as_str()),
            "`none`, `site` or `federation`".into(),
        ),
        ("sla.penalty_per_hour", m.sla.penalty_per_hour.to_string(), "at least 0".into()),
        ("component", "required".into(), format!("1 to {MAX_COMPONENTS} components")),
        (
            "component[].instances",
            c.instances.to_string(),
            format!("1 to {MAX_INSTANCES} VEEs"),
        ),
        ("component[].vcpus", "required".into(), format!("1 to {MAX_VCPUS} vCPUs")),
        ("component[].memory_mib", "required".into(), format!("1 to {MAX_MEMORY_MIB} MiB")),
        ("component[].max_vcpus", "`vcpus`".into(), format!("`vcpus` to {MAX_VCPUS} vCPUs")),
        (
            "component[].max_memory_mib",
            "`memory_mib`".into(),
            format!("`memory_mib` to {MAX_MEMORY_MIB} MiB"),
        ),
        ("component[].disk_gib", "required".into(), format!("1 to {MAX_DISK_GIB} GiB")),
        (
            "component[].image",
            "required".into(),
            format!("at most {MAX_IMAGE_REF_BYTES} bytes"),
        ),
        ("component[].cmdline", "none".into(), format!("at most {MAX_CMDLINE_BYTES} bytes")),
        ("component[].networks", "none".into(), format!("at most {MAX_NETWORKS} networks")),
        (
            "component[].user_data",
            "none".into(),
            format!("at most {MAX_USER_DATA_BYTES} bytes"),
        ),
        (
            "component[].ssh_authorized_keys",
            "none".into(),
            format!("at most {MAX_SSH_KEYS} keys of at most {MAX_SSH_KEY_BYTES} bytes"),
        ),
        ("network", "none".into(), format!("at most {MAX_NETWORKS} networks")),
        ("network[].cidr", "`\"auto\"`".into(), format!("prefix {prefixes}")),
        ("network[].ports", "none".into(), "required on an external network".into()),
        ("network[].ports", "none".into(), "refused on an internal one".into()),
        ("elasticity", "none".into(), format!("at most {MAX_RULES} rules")),
        ("elasticity[].for", rule_for.as_secs().to_string(), period.clone()),
        ("elasticity[].cooldown", cooldown.as_secs().to_string(), period),
        ("elasticity[].metric", "required".into(), format!("at most {MAX_METRIC_LEN} bytes")),
    ];
    for (key, default, limit) in expected {
        let (d, l) = defaults_and_limits(reference, key);
        assert!(
            d.starts_with(&default),
            "docs/manifest-reference.md: `{key}` defaults to {default} in the code; the reference says {d:?}"
        );
        assert!(
            l.contains(&limit),
            "docs/manifest-reference.md: `{key}`: the code's limit is {limit:?}; the reference says {l:?}"
        );
    }
}

/// What the reference says of ports: required on an external network,
/// refused on an internal one.
#[test]
fn ports_are_required_on_external_networks_and_refused_on_internal_ones() {
    let with = |kind: &str, ports: &str| {
        Manifest::from_toml(&format!(
            "{}\n[[network]]\nname = \"n\"\nkind = \"{kind}\"\n{ports}\n",
            crate::tests::MINIMAL
        ))
    };
    assert!(with("external", "ports = [80]").is_ok());
    assert!(with("internal", "").is_ok());
    let e = with("external", "").unwrap_err().to_string();
    assert!(e.contains("network[0].ports"), "{e}");
    let e = with("internal", "ports = [80]").unwrap_err().to_string();
    assert!(e.contains("only an external network opens ports"), "{e}");
}
