//! The metrics tables of docs/operator-guide.md against what a daemon
//! registers: every metric family of a scrape (OpenMetrics text, as
//! [`super::Exporter::scrape`] gives it) has a row, with its type and, when
//! the scrape has series of it, its labels; every row is a family of the
//! scrape.
//!
//! A row's first cell names one or more metrics as a query writes them
//! (`` `veem_admissions_total` ``: a counter's samples end in `_total`);
//! its second is the type; its fourth the labels, each in backticks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A metric family as documented or as scraped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Family {
    /// `counter`, `gauge`, `histogram`, ...
    pub ty: String,
    /// Label names (without a histogram's `le`).
    pub labels: BTreeSet<String>,
    /// Whether the scrape had a sample of it (its labels are known).
    pub sampled: bool,
}

/// The families of an exposition, by the name a query uses (a counter's
/// with `_total`).
pub fn scraped(exposition: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap_or((rest, ""));
            families.insert(
                name.to_string(),
                Family {
                    ty: ty.to_string(),
                    ..Default::default()
                },
            );
        }
    }
    for line in exposition.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (sample, labels) = match line.split_once('{') {
            Some((name, rest)) => (name, rest.split_once('}').map_or("", |(l, _)| l)),
            None => (line.split(' ').next().unwrap_or(""), ""),
        };
        let family = ["", "_total", "_count", "_sum", "_bucket", "_created", "_info"]
            .iter()
            .filter_map(|suffix| sample.strip_suffix(suffix))
            .find(|f| families.contains_key(*f))
            .map(str::to_string);
        if let Some(f) = family.and_then(|f| families.get_mut(&f)) {
            f.sampled = true;
            for pair in labels.split(',').filter(|p| !p.is_empty()) {
                let key = pair.split('=').next().unwrap_or("").trim();
                if key != "le" && key != "quantile" {
                    f.labels.insert(key.to_string());
                }
            }
        }
    }
    families
        .into_iter()
        .map(|(name, f)| {
            if f.ty == "counter" {
                (format!("{name}_total"), f)
            } else {
                (name, f)
            }
        })
        .collect()
}

/// The names of the backticked words of a table cell.
fn code_words(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The rows of the table under `heading` in `doc` (up to the next
/// heading), by metric name.
pub fn documented(doc: &str, heading: &str) -> BTreeMap<String, Family> {
    let mut out = BTreeMap::new();
    let mut lines = doc.lines().skip_while(|l| *l != heading);
    assert!(lines.next().is_some(), "no heading {heading:?}");
    for line in lines.take_while(|l| !l.starts_with('#')) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 4 || cells[0].starts_with("---") || cells[0] == "metric" {
            continue;
        }
        let family = Family {
            ty: cells[1].to_string(),
            labels: code_words(cells[3]).into_iter().collect(),
            sampled: true,
        };
        for name in code_words(cells[0]) {
            out.insert(name, family.clone());
        }
    }
    out
}

/// Checks the table under `heading` of the document at `doc` against
/// `exposition`, a scrape of the families that table covers; panics naming
/// each difference.
pub fn check(doc: &Path, heading: &str, exposition: &str) {
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let problems = differences(&documented(&text, heading), &scraped(exposition));
    assert!(
        problems.is_empty(),
        "{} under {heading:?} differs from the metrics the daemon registers:\n{}",
        doc.display(),
        problems.join("\n")
    );
}

/// What differs between the documented families and the scraped ones.
pub fn differences(documented: &BTreeMap<String, Family>, scraped: &BTreeMap<String, Family>) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, s) in scraped {
        match documented.get(name) {
            None => problems.push(format!("`{name}` ({}) is registered and not documented", s.ty)),
            Some(d) if d.ty != s.ty => problems.push(format!("`{name}` is a {}, documented as a {}", s.ty, d.ty)),
            Some(d) if s.sampled && d.labels != s.labels => {
                problems.push(format!("`{name}` has the labels {:?}, documented as {:?}", s.labels, d.labels))
            }
            Some(_) => {}
        }
    }
    for name in documented.keys().filter(|n| !scraped.contains_key(*n)) {
        problems.push(format!("`{name}` is documented and not registered"));
    }
    problems
}
