//! `[[elasticity]]`: rules that add or remove instances of a component
//! (issue 40; E §4.1, §4.4, PII Req. 2 SERVICE_ELASTICITY; after
//! OpenNebula OneFlow's elasticity and scheduled policies). Two kinds:
//!
//! ```toml
//! [[elasticity]]
//! component = "web"
//! min = 1
//! max = 4
//! metric = "cpu_utilization"   # or memory_used, net_rx_bytes_per_s, ..., or a KPI's name
//! scale_out_above = 0.7        # sustained for `for`: one instance more
//! scale_in_below = 0.2         # sustained for `for`: one instance fewer
//! for = "60s"
//! cooldown = "120s"            # after a change, none by this rule for this long
//! [[elasticity]]
//! component = "web"
//! schedule = "0 8 * * 1-5"     # cron (minute hour day month weekday, UTC)
//! instances = 3                # at least 3 from then on (until another schedule's time)
//! ```
//!
//! A third kind resizes each instance instead (vertical elasticity, within
//! the component's `max_vcpus` / `max_memory_mib`):
//!
//! ```toml
//! [[elasticity]]
//! component = "db"
//! resize = "memory"            # or "vcpus"
//! min = 256                    # the smallest size (MiB, or vCPUs) it shrinks an instance to
//! max = 1024                   # the largest it grows one to
//! step = 128                   # by this much each time
//! metric = "memory_used"
//! scale_out_above = 200        # sustained for `for`: every instance one step larger
//! scale_in_below = 64          # sustained for `for`: one step smaller
//! for = "30s"
//! cooldown = "60s"
//! ```
//!
//! A metric is the average over the component's live instances: one the
//! hypervisor measures ([`HYPERVISOR_METRICS`]), or a KPI a guest reports
//! (any other name of `[a-z][a-z0-9_]*`). Every error names the field
//! (`elasticity[1].scale_in_below`) and the reason.

use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{check_range, invalid};
use crate::{Component, Manifest, Result, MAX_INSTANCES};

/// The most `[[elasticity]]` rules a manifest may have.
pub const MAX_RULES: usize = 32;
/// The longest `for` and `cooldown`: a day.
pub const MAX_RULE_PERIOD: Duration = Duration::from_secs(86_400);
/// The longest metric or KPI name, in bytes.
pub const MAX_METRIC_LEN: usize = 63;

/// Metrics the hypervisor measures for every VEE, each averaged over the
/// component's live instances: CPU time over wall time per vCPU (0 to
/// 1), memory used (MiB), and bytes per second received, sent, read and
/// written.
pub const HYPERVISOR_METRICS: &[&str] = &[
    "cpu_utilization",
    "memory_used",
    "net_rx_bytes_per_s",
    "net_tx_bytes_per_s",
    "disk_read_bytes_per_s",
    "disk_write_bytes_per_s",
];

/// One `[[elasticity]]` table as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElasticityRule {
    /// The component it scales.
    pub component: String,
    /// Metric rule: the fewest instances it scales in to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u32>,
    /// Metric rule: the most instances it scales out to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
    /// Metric rule: what it watches ([`HYPERVISOR_METRICS`] or a KPI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// One instance more when the metric stays above this for `for`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_out_above: Option<f64>,
    /// One instance fewer when the metric stays below this for `for`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_in_below: Option<f64>,
    /// How long a threshold must be crossed (default 0: one evaluation).
    #[serde(default, rename = "for", with = "humantime_opt", skip_serializing_if = "Option::is_none")]
    pub sustained: Option<Duration>,
    /// After a change, how long this rule makes none (default 0).
    #[serde(default, with = "humantime_opt", skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<Duration>,
    /// Scheduled rule: a cron pattern (5 fields, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// Scheduled rule: at least this many instances from its time on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<u32>,
    /// Resize rule: what it changes in each instance (its `min`, `max` and
    /// `step` are then MiB or vCPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<Resource>,
    /// Resize rule: by how much each decision changes an instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
}

/// `elasticity[].resize`: what a resize rule changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// Memory, MiB (the virtio balloon).
    Memory,
    /// vCPUs (hot-plug).
    Vcpus,
}

impl Resource {
    /// Its unit in messages: ` MiB` or ` vCPUs`.
    pub fn unit(self) -> &'static str {
        match self {
            Resource::Memory => " MiB",
            Resource::Vcpus => " vCPUs",
        }
    }
}

/// A rule, checked: what the VEEM evaluates.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// Scale on a metric between `min` and `max` instances.
    Metric {
        component: String,
        min: u32,
        max: u32,
        metric: String,
        scale_out_above: Option<f64>,
        scale_in_below: Option<f64>,
        sustained: Duration,
        cooldown: Duration,
    },
    /// At least `instances` from each time of `schedule` on.
    Schedule {
        component: String,
        schedule: Box<croner::Cron>,
        instances: u32,
    },
    /// Resize each instance's `resource` by `step` between `min` and `max`
    /// on a metric.
    Resize {
        component: String,
        resource: Resource,
        min: u32,
        max: u32,
        step: u32,
        metric: String,
        scale_out_above: Option<f64>,
        scale_in_below: Option<f64>,
        sustained: Duration,
        cooldown: Duration,
    },
}

impl Rule {
    /// The component it scales.
    pub fn component(&self) -> &str {
        match self {
            Rule::Metric { component, .. } | Rule::Schedule { component, .. } | Rule::Resize { component, .. } => component,
        }
    }
}

/// The rules `raw` holds (a valid manifest's `elasticity`, as a service
/// keeps them), in order; one that does not check is left out.
pub fn rules(raw: &[ElasticityRule]) -> Vec<Rule> {
    raw.iter().enumerate().filter_map(|(i, r)| check(None, i, r).ok()).collect()
}

/// Whether `name` is a KPI name: `[a-z][a-z0-9_]*`, at most
/// [`MAX_METRIC_LEN`] bytes.
pub fn is_kpi_name(name: &str) -> bool {
    name.len() <= MAX_METRIC_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Checks every rule of `m` (see the module documentation).
pub(crate) fn validate(m: &Manifest) -> Result<()> {
    if m.elasticity.len() > MAX_RULES {
        return Err(invalid("elasticity", format!("{} rules; at most {MAX_RULES}", m.elasticity.len())));
    }
    for (i, r) in m.elasticity.iter().enumerate() {
        let Some(c) = m.component(&r.component) else {
            return Err(invalid(
                format!("elasticity[{i}].component"),
                format!("no component is named {:?}", r.component),
            ));
        };
        check(Some(c), i, r)?;
    }
    Ok(())
}

/// Rule `i`, `r`, checked; against its component `c` (its starting
/// instances) when given.
fn check(c: Option<&Component>, i: usize, r: &ElasticityRule) -> Result<Rule> {
    let field = |name: &str| format!("elasticity[{i}].{name}");
    match (&r.schedule, &r.metric) {
        (Some(_), Some(_)) => Err(invalid(
            field("schedule"),
            "a rule has a `schedule` or a `metric`, not both: write two rules",
        )),
        (None, None) => Err(invalid(
            field("metric"),
            "a rule needs a `metric` (with thresholds) or a `schedule`",
        )),
        (Some(pattern), None) => {
            for (name, set) in [
                ("min", r.min.is_some()),
                ("max", r.max.is_some()),
                ("scale_out_above", r.scale_out_above.is_some()),
                ("scale_in_below", r.scale_in_below.is_some()),
                ("for", r.sustained.is_some()),
                ("cooldown", r.cooldown.is_some()),
                ("resize", r.resize.is_some()),
                ("step", r.step.is_some()),
            ] {
                if set {
                    return Err(invalid(field(name), "belongs to a metric or resize rule, not a scheduled one"));
                }
            }
            let instances = r
                .instances
                .ok_or_else(|| invalid(field("instances"), "a scheduled rule needs `instances`"))?;
            check_range(&field("instances"), instances, 0, MAX_INSTANCES, "")?;
            let schedule = Box::new(cron(pattern).map_err(|why| invalid(field("schedule"), why))?);
            Ok(Rule::Schedule {
                component: r.component.clone(),
                schedule,
                instances,
            })
        }
        (None, Some(_)) if r.resize.is_some() => check_resize(c, i, r),
        (None, Some(metric)) => {
            if r.step.is_some() {
                return Err(invalid(field("step"), "belongs to a resize rule (with `resize`)"));
            }
            if r.instances.is_some() {
                return Err(invalid(
                    field("instances"),
                    "belongs to a scheduled rule; a metric rule has `min` and `max`",
                ));
            }
            check_metric(i, metric)?;
            let min = r.min.ok_or_else(|| invalid(field("min"), "a metric rule needs `min`"))?;
            let max = r.max.ok_or_else(|| invalid(field("max"), "a metric rule needs `max`"))?;
            check_range(&field("max"), max, 1, MAX_INSTANCES, "")?;
            if min > max {
                return Err(invalid(field("min"), format!("{min} is more than `max` ({max})")));
            }
            if let Some(c) = c.filter(|c| !(min..=max).contains(&c.instances)) {
                return Err(invalid(
                    field("min"),
                    format!(
                        "component {:?} starts with {} instances, outside this rule's {min} to {max}",
                        c.name, c.instances
                    ),
                ));
            }
            check_thresholds(i, r)?;
            Ok(Rule::Metric {
                component: r.component.clone(),
                min,
                max,
                metric: metric.clone(),
                scale_out_above: r.scale_out_above,
                scale_in_below: r.scale_in_below,
                sustained: r.sustained.unwrap_or_default(),
                cooldown: r.cooldown.unwrap_or_default(),
            })
        }
    }
}

/// Rule `i`'s `metric` is a hypervisor metric or a KPI name.
fn check_metric(i: usize, metric: &str) -> Result<()> {
    if HYPERVISOR_METRICS.contains(&metric) || is_kpi_name(metric) {
        return Ok(());
    }
    Err(invalid(
        format!("elasticity[{i}].metric"),
        format!(
            "{:?} is neither a hypervisor metric ({}) nor a KPI name ([a-z][a-z0-9_]*, at most {MAX_METRIC_LEN} bytes)",
            crate::excerpt::excerpt(metric, crate::excerpt::QUOTE_CHARS),
            HYPERVISOR_METRICS.join(", ")
        ),
    ))
}

/// Rule `i`'s thresholds (finite, at least one, the lower below the
/// upper) and periods (at most [`MAX_RULE_PERIOD`]).
fn check_thresholds(i: usize, r: &ElasticityRule) -> Result<()> {
    let field = |name: &str| format!("elasticity[{i}].{name}");
    for (name, v) in [("scale_out_above", r.scale_out_above), ("scale_in_below", r.scale_in_below)] {
        if v.is_some_and(|v| !v.is_finite()) {
            return Err(invalid(field(name), "must be a finite number"));
        }
    }
    match (r.scale_out_above, r.scale_in_below) {
        (None, None) => {
            return Err(invalid(
                field("scale_out_above"),
                "a metric rule needs `scale_out_above`, `scale_in_below` or both",
            ))
        }
        (Some(out), Some(inn)) if inn >= out => {
            return Err(invalid(
                field("scale_in_below"),
                format!("{inn} is not below `scale_out_above` ({out}): the count would flap"),
            ))
        }
        _ => {}
    }
    for (name, d) in [("for", r.sustained), ("cooldown", r.cooldown)] {
        if d.is_some_and(|d| d > MAX_RULE_PERIOD) {
            return Err(invalid(
                field(name),
                format!("at most {}", humantime::format_duration(MAX_RULE_PERIOD)),
            ));
        }
    }
    Ok(())
}

/// A resize rule `i`, `r` (with `resize` and a `metric`), checked; its
/// `min` and `max` within what component `c` may be resized to (1 to its
/// `max_vcpus` or `max_memory_mib`, its size between them) when given.
fn check_resize(c: Option<&Component>, i: usize, r: &ElasticityRule) -> Result<Rule> {
    let field = |name: &str| format!("elasticity[{i}].{name}");
    let (Some(resource), Some(metric)) = (r.resize, &r.metric) else {
        return Err(invalid(field("resize"), "a resize rule needs `resize` and a `metric`"));
    };
    if r.instances.is_some() {
        return Err(invalid(field("instances"), "belongs to a scheduled rule, not a resize rule"));
    }
    check_metric(i, metric)?;
    let unit = resource.unit();
    let min = r
        .min
        .ok_or_else(|| invalid(field("min"), format!("a resize rule needs `min` ({})", unit.trim())))?;
    let max = r
        .max
        .ok_or_else(|| invalid(field("max"), format!("a resize rule needs `max` ({})", unit.trim())))?;
    let step = r.step.ok_or_else(|| invalid(field("step"), "a resize rule needs `step`"))?;
    check_range(&field("min"), min, 1, u32::MAX, unit)?;
    check_range(&field("step"), step, 1, u32::MAX, unit)?;
    if min > max {
        return Err(invalid(field("min"), format!("{min}{unit} is more than `max` ({max}{unit})")));
    }
    if let Some(c) = c {
        let (size, limit, limit_field) = match resource {
            Resource::Memory => (c.memory_mib, c.memory_limit_mib(), "max_memory_mib"),
            Resource::Vcpus => (u64::from(c.vcpus), u64::from(c.vcpu_limit()), "max_vcpus"),
        };
        if u64::from(max) > limit {
            return Err(invalid(
                field("max"),
                format!(
                    "{max}{unit} is more than component {:?} may be resized to ({limit}{unit}: its `{limit_field}`)",
                    c.name
                ),
            ));
        }
        if !(u64::from(min)..=u64::from(max)).contains(&size) {
            return Err(invalid(
                field("min"),
                format!("component {:?} starts at {size}{unit}, outside this rule's {min} to {max}", c.name),
            ));
        }
    }
    check_thresholds(i, r)?;
    Ok(Rule::Resize {
        component: r.component.clone(),
        resource,
        min,
        max,
        step,
        metric: metric.clone(),
        scale_out_above: r.scale_out_above,
        scale_in_below: r.scale_in_below,
        sustained: r.sustained.unwrap_or_default(),
        cooldown: r.cooldown.unwrap_or_default(),
    })
}

/// A cron pattern of five fields that comes around within a year.
fn cron(pattern: &str) -> std::result::Result<croner::Cron, String> {
    let quoted = crate::excerpt::excerpt(pattern, crate::excerpt::QUOTE_CHARS);
    if pattern.split_whitespace().count() != 5 {
        return Err(format!("{quoted:?}: a cron pattern has five fields: minute hour day month weekday"));
    }
    let c = croner::Cron::from_str(pattern).map_err(|e| format!("{quoted:?}: {e}"))?;
    // A pattern that never comes (February 31st) would make every
    // evaluation search back to year 1.
    let start = chrono::DateTime::<chrono::Utc>::from_timestamp(0, 0).expect("the epoch");
    match c.find_next_occurrence(&start, false) {
        Ok(t) if t.signed_duration_since(start).num_days() <= 4 * 366 => Ok(c),
        _ => Err(format!("{quoted:?} does not come around within four years")),
    }
}

/// `Option<Duration>` as a humantime string (`"60s"`).
mod humantime_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(s.trim())
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("expected a duration like \"60s\" or \"2m\", got {s:?}: {e}")))
    }
}

#[cfg(test)]
mod tests;
