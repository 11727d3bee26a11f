//! `[[elasticity]]` parsed and refused with the field and the reason.

use crate::elasticity::{rules, Rule};
use crate::Manifest;

fn manifest(rules: &str) -> Result<Manifest, String> {
    Manifest::from_toml(&format!(
        "[service]\nname = \"shop\"\nprovider = \"acme\"\n[sla]\nguarantee = \"standard\"\n\
         [[component]]\nname = \"web\"\ninstances = 2\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\n\
         image = \"sha256:0000000000000000000000000000000000000000000000000000000000000000\"\n{rules}"
    ))
    .map_err(|e| e.to_string())
}

const METRIC: &str = "[[elasticity]]\ncomponent = \"web\"\nmin = 1\nmax = 4\nmetric = \"cpu_utilization\"\n\
scale_out_above = 0.7\nscale_in_below = 0.2\nfor = \"60s\"\ncooldown = \"2m\"\n";
const SCHEDULE: &str = "[[elasticity]]\ncomponent = \"web\"\nschedule = \"0 8 * * 1-5\"\ninstances = 3\n";

#[test]
fn both_kinds_of_rule_read_back() {
    let m = manifest(&format!("{METRIC}{SCHEDULE}")).unwrap();
    let r = rules(&m.elasticity);
    match &r[0] {
        Rule::Metric {
            min,
            max,
            metric,
            sustained,
            cooldown,
            ..
        } => assert_eq!(
            (*min, *max, metric.as_str(), sustained.as_secs(), cooldown.as_secs()),
            (1, 4, "cpu_utilization", 60, 120)
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(&r[1], Rule::Schedule { instances: 3, .. }));
    // A KPI name is a metric too.
    let kpi = METRIC.replace("cpu_utilization", "active_sessions");
    assert!(manifest(&kpi).is_ok());
    // The manifest as TOML again reads the same.
    let again = Manifest::from_toml(&toml::to_string(&m).unwrap()).unwrap();
    assert_eq!(again.elasticity, m.elasticity);
}

#[test]
fn a_bad_rule_is_refused_naming_its_field() {
    for (rule, field, why) in [
        (METRIC.replace("\"web\"", "\"db\""), "elasticity[0].component", "no component"),
        (METRIC.replace("min = 1", "min = 3"), "elasticity[0].min", "starts with 2"),
        (METRIC.replace("max = 4", "max = 0"), "elasticity[0].max", "at least 1"),
        (METRIC.replace("0.2", "0.9"), "elasticity[0].scale_in_below", "flap"),
        (METRIC.replace("cpu_utilization", "CPU!"), "elasticity[0].metric", "neither"),
        (METRIC.replace("\"60s\"", "\"2 days\""), "elasticity[0].for", "at most"),
        (METRIC.replace("\"60s\"", "\"soon\""), "elasticity", "duration"),
        (
            METRIC.replace("scale_out_above = 0.7\nscale_in_below = 0.2\n", ""),
            "elasticity[0].scale_out_above",
            "needs",
        ),
        (format!("{METRIC}schedule = \"* * * * *\"\n"), "elasticity[0].schedule", "not both"),
        (SCHEDULE.replace("0 8 * * 1-5", "0 8 * *"), "elasticity[0].schedule", "five fields"),
        (
            SCHEDULE.replace("0 8 * * 1-5", "0 0 31 2 *"),
            "elasticity[0].schedule",
            "does not come around",
        ),
        (SCHEDULE.replace("0 8 * * 1-5", "61 8 * * *"), "elasticity[0].schedule", "61"),
        (SCHEDULE.replace("instances = 3\n", ""), "elasticity[0].instances", "needs"),
        (format!("{SCHEDULE}min = 1\n"), "elasticity[0].min", "metric rule"),
        (format!("{METRIC}instances = 2\n"), "elasticity[0].instances", "scheduled rule"),
    ] {
        let e = manifest(&rule).unwrap_err();
        assert!(e.contains(field) && e.contains(why), "{field} / {why}: {e}");
    }
    let many = METRIC.repeat(33);
    assert!(manifest(&many).unwrap_err().contains("at most 32"));
}
