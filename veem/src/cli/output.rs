//! Rendering of VMI replies as text (tables and `key: value` lines) or JSON.
//! Every function returns the whole text to print, ending in a newline.

use interfaces::vmi;
use serde::Serialize;

use super::table::Table;
use super::OutputFormat;
use crate::api::model::{Event, Migration, Negotiation, Nic, Rollout, Service, SlaViolation, Usage, Vee};

/// Pretty JSON of one document, with a trailing newline.
pub fn json<T: Serialize + ?Sized>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).expect("CLI models serialize");
    s.push('\n');
    s
}

/// The one JSON shape of every list: `{"items": [...]}` (each item the
/// JSON of that command's single object).
pub fn list_json<T: Serialize>(items: &[T]) -> String {
    #[derive(Serialize)]
    struct List<'a, T> {
        items: &'a [T],
    }
    json(&List { items })
}

/// `usage --group-by`: one row per group; JSON `{"items": [...]}`.
pub fn usage_groups(groups: &[crate::api::model::UsageGroup], format: OutputFormat) -> String {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => return list_json(groups),
        OutputFormat::Ids => return ids(groups.iter().map(|g| g.key.as_str())),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let mut t = Table::new(&["GROUP", "RECORDS>", "INSTANCE h>", "CPU s>", "MiB·s>", "DISK bytes>", "NET bytes>"]);
    for g in groups {
        t.row([
            g.key.clone(),
            g.records.to_string(),
            format!("{:.3}", g.instance_hours),
            format!("{:.1}", g.cpu_seconds),
            format!("{:.1}", g.memory_mib_seconds),
            g.disk_bytes.to_string(),
            g.net_bytes.to_string(),
        ]);
    }
    t.render()
}

/// An amount of money with two decimals; what rounds to zero is `0.00`,
/// never `-0.00`.
fn money(x: f64) -> String {
    let x = if x.abs() < 0.005 { 0.0 } else { x };
    format!("{x:.2}")
}

/// `-q`: the IDs, one per line.
pub fn ids<'a>(ids: impl IntoIterator<Item = &'a str>) -> String {
    ids.into_iter().map(|id| format!("{id}\n")).collect()
}

/// `key: value` lines; an empty value is shown as `-`.
fn key_values(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}: {}\n", if v.is_empty() { "-" } else { v }))
        .collect()
}

fn opt(s: &Option<String>) -> String {
    s.clone().unwrap_or_default()
}

/// Negotiate: verdict, reasons, and for a counter-offer the earliest window.
pub fn negotiation(n: &Negotiation, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => return json(n),
        OutputFormat::Ids => return format!("{}\n", n.verdict),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let mut s = format!("verdict: {}\n", n.verdict);
    if n.earliest_start.is_some() || n.earliest_end.is_some() {
        let start = n.earliest_start.as_deref().unwrap_or("-");
        let end = n.earliest_end.as_deref().unwrap_or("-");
        s += &format!("earliest window: {start} .. {end}\n");
    }
    if !n.reasons.is_empty() {
        s += "reasons:\n";
        for r in &n.reasons {
            s += &format!("  - {r}\n");
        }
    }
    s
}

/// One VEE as `key: value` lines (`state:` and `location:` verbatim).
pub fn vee(v: &Vee, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => return json(v),
        OutputFormat::Ids => return ids([v.vee_id.as_str()]),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    key_values(&[
        ("vee_id", v.vee_id.clone()),
        ("service_id", v.service_id.clone()),
        ("component", v.component.clone()),
        ("instance", v.instance.to_string()),
        ("state", v.state.to_string()),
        ("location", v.location.clone()),
        ("vcpus", format!("{} (at most {})", v.vcpus, v.max_vcpus.max(v.vcpus))),
        (
            "memory_mib",
            format!("{} (at most {})", v.memory_mib, v.max_memory_mib.max(v.memory_mib)),
        ),
        ("image", v.image.clone()),
        ("latest_checkpoint", v.latest_checkpoint.clone()),
        ("latest_checkpoint_replication", opt(&v.latest_checkpoint_replication)),
        ("updated", opt(&v.updated)),
    ]) + &nic_table(&v.nics)
}

/// A rolling update: its state, images and progress.
pub fn rollout(r: &Rollout, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => return json(r),
        OutputFormat::Ids => return ids(r.replaced.iter().map(String::as_str)),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    key_values(&[
        ("service_id", r.service_id.clone()),
        ("component", r.component.clone()),
        ("state", r.state.to_string()),
        ("from_image", r.from_image.clone()),
        ("to_image", r.to_image.clone()),
        ("rollback", r.rollback.to_string()),
        ("replaced", format!("{} of {}", r.replaced.len(), r.instances)),
        ("max_unavailable", r.max_unavailable.to_string()),
        ("started", opt(&r.started)),
        ("ended", opt(&r.ended)),
        ("reason", r.reason.clone()),
    ])
}

/// A VEE's NICs (none: nothing): network, MAC, address and, on external
/// networks, the external address with its ports.
fn nic_table(nics: &[Nic]) -> String {
    if nics.is_empty() {
        return String::new();
    }
    let mut t = Table::new(&["NIC", "NETWORK", "MAC", "ADDRESS", "EXTERNAL"]);
    for (i, n) in nics.iter().enumerate() {
        let ports: Vec<String> = n.ports.iter().map(|p| p.to_string()).collect();
        let external = match &n.external_address {
            Some(a) => format!("{a} tcp/{}", ports.join(",")),
            None => "-".into(),
        };
        t.row([format!("eth{i}"), n.network.clone(), n.mac.clone(), n.address.clone(), external]);
    }
    t.render()
}

/// The VEE table used by `ls`, `service` and `deploy`.
fn vee_table(vees: &[Vee]) -> String {
    let mut t = Table::new(&[
        "VEE",
        "SERVICE",
        "COMPONENT",
        "#>",
        "STATE",
        "LOCATION",
        "VCPUS>",
        "MEM MiB>",
        "CHECKPOINT",
        "UPDATED",
    ]);
    for v in vees {
        t.row([
            v.vee_id.clone(),
            v.service_id.clone(),
            v.component.clone(),
            v.instance.to_string(),
            v.state.to_string(),
            v.location.clone(),
            v.vcpus.to_string(),
            v.memory_mib.to_string(),
            v.latest_checkpoint.clone(),
            opt(&v.updated),
        ]);
    }
    t.render()
}

/// `ls`: a table of VEEs (`wide`: with each VEE's addresses and its last
/// change); JSON `{"items": [...]}`; `-q` their IDs.
pub fn vees(vees: &[Vee], format: OutputFormat) -> String {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => list_json(vees),
        OutputFormat::Ids => ids(vees.iter().map(|v| v.vee_id.as_str())),
        OutputFormat::Wide => vee_table_wide(vees),
        OutputFormat::Table => vee_table(vees),
    }
}

/// [`vee_table`] with each VEE's addresses (and external ones) and when it
/// last changed.
fn vee_table_wide(vees: &[Vee]) -> String {
    let mut t = Table::new(&["VEE", "SERVICE", "COMPONENT", "STATE", "LOCATION", "ADDRESSES", "UPDATED"]);
    for v in vees {
        let addrs: Vec<String> = v
            .nics
            .iter()
            .map(|n| match &n.external_address {
                Some(e) => format!("{}={} ({e})", n.network, n.address),
                None => format!("{}={}", n.network, n.address),
            })
            .collect();
        t.row([
            v.vee_id.clone(),
            v.service_id.clone(),
            format!("{}-{}", v.component, v.instance),
            v.state.to_string(),
            v.location.clone(),
            addrs.join(" "),
            opt(&v.updated),
        ]);
    }
    t.render()
}

/// `service`: the service as `key: value` lines, then its VEEs.
pub fn service(s: &Service, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => return json(s),
        OutputFormat::Ids => return ids([s.service_id.as_str()]),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let mut out = key_values(&[
        ("service_id", s.service_id.clone()),
        ("name", s.name.clone()),
        ("provider", s.provider.clone()),
        ("state", s.state.to_string()),
        ("guarantee", s.guarantee.to_string()),
    ]);
    out.push('\n');
    out += &vee_table(&s.vees);
    out
}

/// `deploy`: the new service ID, then its VEEs.
pub fn deployed(s: &Service, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => return json(s),
        OutputFormat::Ids => return ids([s.service_id.as_str()]),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let mut out = format!("service: {}\nstate: {}\n\n", s.service_id, s.state);
    out += &vee_table(&s.vees);
    out
}

/// `services`: one row per service; JSON mirrors ListServicesResponse.
pub fn services(services: &[Service], format: OutputFormat) -> String {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => return list_json(services),
        OutputFormat::Ids => return ids(services.iter().map(|s| s.service_id.as_str())),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let mut t = Table::new(&["SERVICE", "NAME", "PROVIDER", "STATE", "GUARANTEE", "VEES>"]);
    for s in services {
        t.row([
            s.service_id.clone(),
            s.name.clone(),
            s.provider.clone(),
            s.state.to_string(),
            s.guarantee.to_string(),
            s.vees.len().to_string(),
        ]);
    }
    t.render()
}

/// One migration as `key: value` lines.
pub fn migration(m: &Migration, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => return json(m),
        OutputFormat::Ids => return ids([m.migration_id.as_str()]),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    key_values(&[
        ("migration_id", m.migration_id.clone()),
        ("vee_id", m.vee_id.clone()),
        ("from", m.from.clone()),
        ("to", m.to.clone()),
        ("reason", m.reason.clone()),
        ("state", m.state.to_string()),
        ("decided_by", m.decided_by.clone()),
        ("detail", m.detail.clone()),
        ("total_ms", m.total_ms.to_string()),
        ("downtime_ms", m.downtime_ms.to_string()),
        ("created", opt(&m.created)),
    ])
}

/// `migrations` and `drain`: one row per migration; JSON mirrors ListMigrationsResponse.
pub fn migrations(migrations: &[Migration], format: OutputFormat) -> String {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => return list_json(migrations),
        OutputFormat::Ids => return ids(migrations.iter().map(|m| m.migration_id.as_str())),
        OutputFormat::Table | OutputFormat::Wide => {}
    }
    let mut t = Table::new(&[
        "MIGRATION",
        "VEE",
        "FROM",
        "TO",
        "STATE",
        "DECIDED BY",
        "TOTAL ms>",
        "DOWNTIME ms>",
        "CREATED",
        "REASON",
        "DETAIL",
    ]);
    for m in migrations {
        t.row([
            m.migration_id.clone(),
            m.vee_id.clone(),
            m.from.clone(),
            m.to.clone(),
            m.state.to_string(),
            m.decided_by.clone(),
            m.total_ms.to_string(),
            m.downtime_ms.to_string(),
            opt(&m.created),
            m.reason.clone(),
            m.detail.clone(),
        ]);
    }
    t.render()
}

/// One event as one line: RFC3339 time, service, VEE, kind, detail
/// (JSON: one compact document per line).
pub fn event(e: &Event, format: OutputFormat) -> String {
    if format == OutputFormat::Json {
        let mut s = serde_json::to_string(e).expect("CLI models serialize");
        s.push('\n');
        return s;
    }
    let dash = |s: &str| if s.is_empty() { "-".to_string() } else { s.to_string() };
    let mut line = format!(
        "{} {} {} {}",
        e.at.as_deref().unwrap_or("-"),
        dash(&e.service_id),
        dash(&e.vee_id),
        dash(&e.kind)
    );
    if !e.detail.is_empty() {
        line += " ";
        line += &e.detail;
    }
    line.push('\n');
    line
}

/// `usage`: usage records with a totals line, then SLA violations with their
/// penalties and total.
pub fn usage(u: &Usage, format: OutputFormat) -> String {
    if format == OutputFormat::Json {
        return json(u);
    }
    let mut t = Table::new(&[
        "RECORD",
        "VEE",
        "SITES",
        "START",
        "END",
        "CPU s>",
        "MiB·s>",
        "DISK bytes>",
        "NET bytes>",
    ]);
    for r in &u.records {
        t.row([
            r.record_id.clone(),
            r.vee_id.clone(),
            r.site_chain.join(","),
            opt(&r.start),
            opt(&r.end),
            format!("{:.1}", r.cpu_seconds),
            format!("{:.1}", r.memory_mib_seconds),
            r.disk_bytes.to_string(),
            r.net_bytes.to_string(),
        ]);
    }
    // The totals line is a row of the same table so its numbers line up.
    t.row_verbatim([
        "total".to_string(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        format!("{:.1}", u.totals.cpu_seconds),
        format!("{:.1}", u.totals.memory_mib_seconds),
        u.totals.disk_bytes.to_string(),
        u.totals.net_bytes.to_string(),
    ]);
    let mut out = format!("service: {}\n\nusage records: {}\n", u.service_id, u.records.len());
    out += &t.render();
    out += &format!("\nSLA violations: {}\n", u.violations.len());
    if !u.violations.is_empty() {
        out += &violation_table(u.violations.iter().map(|v| (None, v)));
    }
    out += &format!("total penalty: {}\n", money(u.totals.penalty));
    out
}

/// Violations as a table; with a SERVICE column when `service` is given.
fn violation_table<'a>(rows: impl Iterator<Item = (Option<&'a str>, &'a SlaViolation)>) -> String {
    let rows: Vec<_> = rows.collect();
    let with_service = rows.iter().any(|(s, _)| s.is_some());
    let mut headers = vec!["VEE", "TERM", "START", "END", "PENALTY>"];
    if with_service {
        headers.insert(0, "SERVICE");
    }
    let mut t = Table::new(&headers);
    for (service, x) in rows {
        let mut cells = vec![x.vee_id.clone(), x.term.clone(), opt(&x.start), opt(&x.end), money(x.penalty)];
        if with_service {
            cells.insert(0, service.unwrap_or_default().to_string());
        }
        t.row(cells);
    }
    t.render()
}

/// `violations`: `(service ID, violation)` pairs and the total penalty.
pub fn violations(all: &[(String, SlaViolation)], format: OutputFormat) -> String {
    #[derive(Serialize)]
    struct Row<'a> {
        service_id: &'a str,
        #[serde(flatten)]
        violation: &'a SlaViolation,
    }
    if format == OutputFormat::Json {
        return list_json(
            &all.iter()
                .map(|(s, v)| Row {
                    service_id: s,
                    violation: v,
                })
                .collect::<Vec<_>>(),
        );
    }
    let total: f64 = all.iter().map(|(_, v)| v.penalty).sum();
    let mut out = format!("SLA violations: {}\n", all.len());
    if !all.is_empty() {
        out += &violation_table(all.iter().map(|(s, v)| (Some(s.as_str()), v)));
    }
    out + &format!("total penalty: {}\n", money(total))
}

/// `hosts`: one row per host: health, capacity and what is reserved now
/// (vCPUs, MiB, GiB), VEEs placed, accelerator.
pub fn hosts(hosts: &[vmi::HostStatus], format: OutputFormat) -> String {
    #[derive(Serialize)]
    struct Host<'a> {
        name: &'a str,
        health: vmi::HostHealth,
        missed_heartbeats: u32,
        vcpus: u32,
        memory_mib: u64,
        disk_gib: u64,
        used_vcpus: u32,
        used_memory_mib: u64,
        used_disk_gib: u64,
        vees: u32,
        accel: &'a str,
        /// `null` when it answered.
        last_error: Option<&'a str>,
    }
    if format == OutputFormat::Json {
        let list: Vec<Host> = hosts
            .iter()
            .map(|h| Host {
                name: &h.name,
                health: h.health(),
                missed_heartbeats: h.missed_heartbeats,
                vcpus: h.vcpus,
                memory_mib: h.memory_mib,
                disk_gib: h.disk_gib,
                used_vcpus: h.used_vcpus,
                used_memory_mib: h.used_memory_mib,
                used_disk_gib: h.used_disk_gib,
                vees: h.vees,
                accel: &h.accel,
                last_error: (!h.last_error.is_empty()).then_some(h.last_error.as_str()),
            })
            .collect();
        return list_json(&list);
    }
    let mut t = Table::new(&["HOST", "HEALTH", "vCPUs>", "MiB>", "GiB>", "VEES>", "ACCEL"]);
    for h in hosts {
        t.row([
            h.name.clone(),
            health_text(h),
            format!("{}/{}", h.used_vcpus, h.vcpus),
            format!("{}/{}", h.used_memory_mib, h.memory_mib),
            format!("{}/{}", h.used_disk_gib, h.disk_gib),
            h.vees.to_string(),
            h.accel.clone(),
        ]);
    }
    t.render()
}

/// `unknown`, `up`, `missing N heartbeats` or `failed`; when its last
/// heartbeat got no answer, why (`failed: host h1: transport error: …`).
fn health_text(h: &vmi::HostStatus) -> String {
    let health = match h.health() {
        vmi::HostHealth::Missing => format!("missing {} heartbeats", h.missed_heartbeats),
        other => other.to_string(),
    };
    match h.last_error.as_str() {
        "" => health,
        why => format!("{health}: {why}"),
    }
}

/// `limits`: one row per consumer: kind, limit (for commitment: epoch and
/// burst limits with their windows), held now and, for commitment, the
/// metered averages; amounts as `vCPUs/MiB/GiB`.
pub fn usage_limits(limits: &[vmi::UsageLimitInfo], format: OutputFormat) -> String {
    #[derive(Serialize)]
    struct Amount {
        vcpus: u32,
        memory_mib: u64,
        disk_gib: u64,
    }
    #[derive(Serialize)]
    struct Limit<'a> {
        consumer: &'a str,
        kind: vmi::UsageLimitKind,
        limit: Option<Amount>,
        burst_limit: Option<Amount>,
        epoch_s: u64,
        burst_s: u64,
        held: Option<Amount>,
        epoch_avg: Option<Amount>,
        burst_avg: Option<Amount>,
    }
    let plain = |a: &Option<vmi::Amount>| {
        a.as_ref().map(|a| Amount {
            vcpus: a.vcpus,
            memory_mib: a.memory_mib,
            disk_gib: a.disk_gib,
        })
    };
    if format == OutputFormat::Json {
        let list: Vec<Limit> = limits
            .iter()
            .map(|l| Limit {
                consumer: &l.consumer,
                kind: l.kind(),
                limit: plain(&l.limit),
                burst_limit: plain(&l.burst_limit),
                epoch_s: interfaces::time::s_of_duration(&l.epoch),
                burst_s: interfaces::time::s_of_duration(&l.burst),
                held: plain(&l.held),
                epoch_avg: plain(&l.epoch_avg),
                burst_avg: plain(&l.burst_avg),
            })
            .collect();
        return list_json(&list);
    }
    let text = |a: &Option<vmi::Amount>| {
        a.as_ref()
            .map_or_else(|| "-".to_string(), |a| format!("{}/{}/{}", a.vcpus, a.memory_mib, a.disk_gib))
    };
    let mut t = Table::new(&["CONSUMER", "KIND", "LIMIT (vCPUs/MiB/GiB)", "HELD NOW", "MEASURED"]);
    for l in limits {
        let (limit, measured) = if l.kind() == vmi::UsageLimitKind::Commitment {
            (
                format!(
                    "epoch {} over {} s, burst {} over {} s",
                    text(&l.limit),
                    interfaces::time::s_of_duration(&l.epoch),
                    text(&l.burst_limit),
                    interfaces::time::s_of_duration(&l.burst)
                ),
                format!("epoch {}, burst {}", text(&l.epoch_avg), text(&l.burst_avg)),
            )
        } else {
            (text(&l.limit), "-".to_string())
        };
        t.row([l.consumer.clone(), l.kind().to_string(), limit, text(&l.held), measured]);
    }
    t.render()
}

#[cfg(test)]
mod tests;
