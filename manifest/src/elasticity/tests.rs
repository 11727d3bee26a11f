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
        (format!("{SCHEDULE}min = 1\n"), "elasticity[0].min", "not a scheduled one"),
        (format!("{METRIC}instances = 2\n"), "elasticity[0].instances", "scheduled rule"),
    ] {
        let e = manifest(&rule).unwrap_err();
        assert!(e.contains(field) && e.contains(why), "{field} / {why}: {e}");
    }
    let many = METRIC.repeat(33);
    assert!(manifest(&many).unwrap_err().contains("at most 32"));
}

const RESIZE: &str = "[[elasticity]]\ncomponent = \"web\"\nresize = \"memory\"\nmin = 128\nmax = 512\nstep = 64\n\
metric = \"memory_used\"\nscale_out_above = 100\nscale_in_below = 40\nfor = \"30s\"\ncooldown = \"1m\"\n";

/// `web` of [`manifest`] resizable to 2 vCPUs and 512 MiB.
fn resizable(rules: &str) -> Result<Manifest, String> {
    Manifest::from_toml(&format!(
        "[service]\nname = \"shop\"\nprovider = \"acme\"\n[sla]\nguarantee = \"standard\"\n\
         [[component]]\nname = \"web\"\ninstances = 2\nvcpus = 1\nmemory_mib = 128\nmax_vcpus = 2\nmax_memory_mib = 512\ndisk_gib = 1\n\
         image = \"sha256:0000000000000000000000000000000000000000000000000000000000000000\"\n{rules}"
    ))
    .map_err(|e| e.to_string())
}

#[test]
fn a_resize_rule_stays_within_what_the_component_may_be_resized_to() {
    let m = resizable(RESIZE).unwrap();
    match &rules(&m.elasticity)[0] {
        Rule::Resize {
            resource, min, max, step, ..
        } => assert_eq!((*resource, *min, *max, *step), (crate::elasticity::Resource::Memory, 128, 512, 64)),
        other => panic!("{other:?}"),
    }
    let vcpus = RESIZE
        .replace("\"memory\"", "\"vcpus\"")
        .replace("min = 128", "min = 1")
        .replace("max = 512", "max = 2")
        .replace("step = 64", "step = 1");
    assert!(resizable(&vcpus).is_ok());
    for (rule, field, why) in [
        (
            RESIZE.replace("max = 512", "max = 1024"),
            "elasticity[0].max",
            "its `max_memory_mib`",
        ),
        (RESIZE.replace("min = 128", "min = 256"), "elasticity[0].min", "starts at 128 MiB"),
        (RESIZE.replace("step = 64\n", ""), "elasticity[0].step", "needs `step`"),
        (RESIZE.replace("step = 64", "step = 0"), "elasticity[0].step", "at least 1"),
        (RESIZE.replace("\"memory\"", "\"disk\""), "elasticity", "unknown variant"),
        (vcpus.replace("max = 2", "max = 3"), "elasticity[0].max", "its `max_vcpus`"),
        (format!("{METRIC}step = 1\n"), "elasticity[0].step", "resize rule"),
        (
            format!("{SCHEDULE}resize = \"vcpus\"\n"),
            "elasticity[0].resize",
            "not a scheduled one",
        ),
    ] {
        let e = resizable(&rule).unwrap_err();
        assert!(e.contains(field) && e.contains(why), "{field} / {why}: {e}");
    }
    // Without headroom in the component, no rule may grow it.
    let e = manifest(RESIZE).unwrap_err();
    assert!(e.contains("elasticity[0].max") && e.contains("128 MiB"), "{e}");
}
