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
