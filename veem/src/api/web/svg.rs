//! The console's pictures, drawn on the server as SVG: each host's
//! reservations over the planning horizon (a lane per host, a bar per
//! reservation from its first to its last slot, background ones and
//! spares told apart, a failed host's blocked interval hatched; V §4.4),
//! and a service's CPU use over time from its usage records. Text in them
//! is escaped.

use std::fmt::Write;

use crate::api::model::Usage;
use crate::manager::Veem;

/// How far ahead the timeline shows, in slots (at most; it ends earlier
/// when the last reservation does).
const HORIZON_SLOTS: u32 = 7 * 24 * 60;

const WIDTH: f64 = 960.0;
const LABEL: f64 = 140.0;
const LANE: f64 = 28.0;

/// `text` escaped for SVG (XML) text and attributes: askama's HTML
/// escaper, as the pages'.
fn esc(text: &str) -> String {
    askama::filters::escape(text, askama::filters::Html).map_or_else(|_| String::new(), |e| e.to_string())
}

/// Every host's reservations from now (see the module doc).
pub fn timeline(veem: &Veem) -> String {
    let moved = veem.remapping.moved_off();
    let now = veem.core.now_slot();
    let p = veem.core.planner.lock().unwrap();
    let clock = p.clock();
    let hosts: Vec<String> = p.hosts().map(|h| h.name.clone()).collect();
    let lanes: Vec<(String, Vec<crate::planner::Reservation>, Option<crate::planner::capacity::Down>)> = hosts
        .iter()
        .map(|h| {
            let res = p.reservations_on(h, now).unwrap_or_default().into_iter().cloned().collect();
            (h.clone(), res, p.host_down(h))
        })
        .collect();
    drop(p);
    let last = lanes
        .iter()
        .flat_map(|(_, r, _)| r.iter().map(|r| r.range.end))
        .max()
        .unwrap_or(now + 60)
        .min(now + HORIZON_SLOTS)
        .max(now + 60);
    let span = f64::from(last - now);
    let x = |slot: u32| LABEL + (f64::from(slot.saturating_sub(now).min(last - now)) / span) * (WIDTH - LABEL - 10.0);
    let height = 40.0 + LANE * lanes.len() as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" aria-label="reservations per host">"#
    );
    s.push_str(r##"<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#c0392b" opacity="0.5"/></pattern></defs>"##);
    let when = |slot: u32| {
        chrono::DateTime::from_timestamp(clock.start_of(slot), 0)
            .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
            .unwrap_or_default()
    };
    let _ = write!(
        s,
        r#"<text x="{LABEL}" y="14" class="axis">{}</text><text x="{}" y="14" class="axis" text-anchor="end">{}</text>"#,
        esc(&when(now)),
        WIDTH - 10.0,
        esc(&when(last))
    );
    for (i, (host, res, down)) in lanes.iter().enumerate() {
        let y = 24.0 + LANE * i as f64;
        let _ = write!(
            s,
            r#"<g class="lane" data-host="{h}"><text x="4" y="{ty}" class="host">{h}</text><rect x="{LABEL}" y="{y}" width="{w}" height="{lh}" class="lane-bg"/>"#,
            h = esc(host),
            ty = y + 17.0,
            w = WIDTH - LABEL - 10.0,
            lh = LANE - 4.0
        );
        if let Some(d) = down {
            let _ = write!(
                s,
                r#"<rect x="{}" y="{y}" width="{}" height="{}" fill="url(#hatch)" class="blocked"><title>failed at {}; blocked until {}</title></rect>"#,
                x(d.since.max(now)),
                (x(d.blocked_until) - x(d.since.max(now))).max(2.0),
                LANE - 4.0,
                esc(&when(d.since)),
                esc(&when(d.blocked_until))
            );
        }
        for r in res {
            let kind = if r.spare {
                "spare"
            } else if r.background {
                "background"
            } else {
                "vee"
            };
            let (class, from) = match moved.get(&r.vee).filter(|_| !r.spare) {
                Some(failed) => (format!("{kind} remapped"), format!(" (remapped off failed host {})", esc(failed))),
                None => (kind.to_string(), String::new()),
            };
            let (x0, x1) = (x(r.range.start.max(now)), x(r.range.end));
            let _ = write!(
                s,
                r#"<rect x="{x0:.1}" y="{}" width="{:.1}" height="{}" class="{class}" data-vee="{}"><title>{}{from} {} of service {}: {} vCPUs, {} MiB, {} to {}</title></rect>"#,
                y + 3.0,
                (x1 - x0).max(2.0),
                LANE - 10.0,
                esc(&r.vee),
                kind,
                esc(&r.component),
                esc(&r.service),
                r.resources.vcpus,
                r.resources.memory_mib,
                esc(&when(r.range.start)),
                esc(&when(r.range.end))
            );
        }
        s.push_str("</g>");
    }
    s.push_str("</svg>");
    s
}

/// The service's CPU use (vCPU-seconds per second of each usage record)
/// over time, a polyline; a note when there are no records yet.
pub fn usage(u: &Usage) -> String {
    let points: Vec<(i64, f64)> = u
        .records
        .iter()
        .filter_map(|r| {
            let start = chrono::DateTime::parse_from_rfc3339(r.start.as_deref()?).ok()?.timestamp();
            let end = chrono::DateTime::parse_from_rfc3339(r.end.as_deref()?).ok()?.timestamp();
            (end > start).then(|| (end, r.cpu_seconds / (end - start) as f64))
        })
        .collect();
    if points.is_empty() {
        return r#"<p class="note">No usage records yet.</p>"#.into();
    }
    let (t0, t1) = (
        points.iter().map(|p| p.0).min().unwrap_or(0),
        points.iter().map(|p| p.0).max().unwrap_or(1),
    );
    let top = points.iter().map(|p| p.1).fold(0.0f64, f64::max).max(0.01);
    let (w, h) = (WIDTH - 60.0, 160.0);
    let mut sorted = points;
    sorted.sort_by_key(|p| p.0);
    let path: Vec<String> = sorted
        .iter()
        .map(|(t, v)| {
            let x = 50.0 + if t1 > t0 { (t - t0) as f64 / (t1 - t0) as f64 * w } else { w / 2.0 };
            let y = 10.0 + h - v / top * h;
            format!("{x:.1},{y:.1}")
        })
        .collect();
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="usage" viewBox="0 0 {WIDTH} 200" width="{WIDTH}" height="200" role="img" aria-label="CPU use over time"><text x="4" y="16" class="axis">{top:.2} vCPU</text><text x="4" y="{}" class="axis">0</text><polyline points="{}" class="cpu"/></svg>"#,
        10.0 + h,
        path.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        let e = esc(r#"<a href="x">&'"#);
        assert_eq!(e, "&#60;a href=&#34;x&#34;&#62;&#38;&#39;");
    }
}
