//! The check itself: per crate, its import graph without cycles (but those
//! listed as still to cut), every edge in the layer order `ARCHITECTURE.md`
//! states, the document's modules and the code's the same, veem's workflow
//! and step graphs printed (the workflows' with its depth) and equal to the
//! workflows and steps tables, and `impl Veem` in the facade alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::document::Stated;
use crate::graph::{Graph, Layout, ROOT};
use crate::tree::{Crate, Location};
use crate::Error;

/// The crates the check reads when none is named.
pub const CRATES: [&str; 6] = ["manifest", "planner", "interfaces", "veem", "veeh", "image-repo"];

/// What to check.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The repository (paths are printed relative to it).
    pub root: PathBuf,
    /// Crate directories (each with a `src/`); `CRATES` under `root` when
    /// empty.
    pub crates: Vec<PathBuf>,
    /// The document whose tables state the layers and the workflows.
    pub architecture: Option<PathBuf>,
    /// Cycles still to cut, as `crate: a b c` (sorted): reported, not failed.
    pub known: BTreeSet<String>,
    /// veem's files (under `veem/src`) that may still hold `impl Veem`
    /// besides `manager.rs`; `None`: not checked.
    pub facade: Option<BTreeSet<String>>,
    /// The deepest veem's workflow graph may be, in workflows.
    pub max_workflow_depth: Option<usize>,
    /// Print every edge (`from -> to  (file:line)`), not only a cycle's.
    pub print_edges: bool,
}

/// What the check found: its lines, and whether it failed.
#[derive(Debug, Default)]
pub struct Report {
    /// What to print, in order: findings, counts, the workflow graph.
    pub lines: Vec<String>,
    /// Whether a finding fails the check.
    pub failed: bool,
}

impl Report {
    fn fail(&mut self, line: String) {
        self.failed = true;
        self.lines.push(format!("check-layers: {line}"));
    }

    fn say(&mut self, line: String) {
        self.lines.push(format!("check-layers: {line}"));
    }
}

/// Runs the check. Errors: a crate or the document that cannot be read.
pub fn run(options: &Options) -> Result<Report, Error> {
    let stated = match &options.architecture {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::Read(path.clone(), e))?;
            Stated::read(&text).map_err(|reason| Error::Document {
                file: path.clone(),
                reason,
            })?
        }
        None => Stated::default(),
    };
    let crates: Vec<PathBuf> = if options.crates.is_empty() {
        CRATES
            .iter()
            .map(|c| options.root.join(c))
            .filter(|c| c.join("src").is_dir())
            .collect()
    } else {
        options.crates.clone()
    };
    let mut report = Report::default();
    let mut seen_cycles = BTreeSet::new();
    for dir in &crates {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let krate = Crate::read(&dir.join("src"))?;
        let graph = Graph::of(&krate, &Layout::of(&name));
        let at = |l: &Location| format!("{}:{}", relative(&options.root, &l.file), l.line);
        for cycle in graph.cycles() {
            let key = format!("{name}: {}", cycle.join(" "));
            seen_cycles.insert(key.clone());
            if options.known.contains(&key) {
                report.say(format!("known cycle, still to cut: {key}"));
                continue;
            }
            report.fail(format!("{name}: modules in a cycle: {}", cycle.join(", ")));
            let members: BTreeSet<&String> = cycle.iter().collect();
            for ((a, b), l) in &graph.edges {
                if members.contains(a) && members.contains(b) {
                    report.lines.push(format!("    {a} -> {b}  ({})", at(l)));
                }
            }
        }
        if let Some(layers) = stated.layers.get(&name) {
            check_layers(&name, &krate, &graph, layers, &at, &mut report);
        }
        report.say(format!("{name}: {} modules, {} edges", graph.nodes.len(), graph.edges.len()));
        if options.print_edges {
            for ((a, b), l) in &graph.edges {
                report.lines.push(format!("    {a} -> {b}  ({})", at(l)));
            }
        }
        if name == "veem" {
            check_workflows(&graph, &stated, options.max_workflow_depth, &mut report);
            if let Some(facade) = &options.facade {
                check_facade(&krate, dir, facade, &mut report);
            }
        }
    }
    for gone in options.known.difference(&seen_cycles) {
        report.fail(format!("the known cycle `{gone}` is gone: remove it from the list"));
    }
    Ok(report)
}

/// Each edge from a layer to its own or one below; the table's modules and
/// the crate's top-level modules the same.
fn check_layers(
    name: &str,
    krate: &Crate,
    graph: &Graph,
    layers: &BTreeMap<String, (u32, usize)>,
    at: &dyn Fn(&Location) -> String,
    report: &mut Report,
) {
    let top: BTreeSet<&String> = krate
        .modules
        .get(&Vec::new())
        .map(|root| root.children.iter().collect())
        .unwrap_or_default();
    for m in &top {
        if !layers.contains_key(*m) {
            report.fail(format!("{name}: module `{m}` is on no layer of ARCHITECTURE.md's layer table"));
        }
    }
    for (m, (_, line)) in layers {
        if !top.contains(m) {
            report.fail(format!(
                "{name}: ARCHITECTURE.md's layer table (line {line}) names `{m}`, which is no module of the crate"
            ));
        }
    }
    let layer = |node: &str| layers.get(node.split("::").next().unwrap_or(node)).map(|(l, _)| *l);
    for ((a, b), l) in &graph.edges {
        if a == ROOT || b == ROOT {
            continue;
        }
        if let (Some(la), Some(lb)) = (layer(a), layer(b)) {
            if la < lb {
                report.fail(format!("{name}: `{a}` (layer {la}) uses `{b}` (layer {lb}), above it: {}", at(l)));
            }
        }
    }
}

/// veem's workflows (`workflows::*` nodes) and the steps below them
/// (`steps::*`): each graph printed, the workflows' with its depth in
/// workflows (a step is a leaf below them all and not counted: steps may
/// build on steps, never on a workflow, which the layer table keeps), and
/// each one's calls as its row in its table lists them.
fn check_workflows(graph: &Graph, stated: &Stated, max_depth: Option<usize>, report: &mut Report) {
    let of = |prefix: &str| -> BTreeSet<String> { graph.nodes.iter().filter(|n| n.starts_with(prefix)).cloned().collect() };
    let workflows = of("workflows::");
    let steps = of("steps::");
    let short = |n: &str| n.split_once("::").map_or(n, |(_, s)| s).to_string();
    let calls_among = |units: &BTreeSet<String>, callees: &BTreeSet<String>| -> BTreeMap<String, BTreeSet<String>> {
        let mut calls: BTreeMap<String, BTreeSet<String>> = units.iter().map(|m| (short(m), BTreeSet::new())).collect();
        for (a, b) in graph.edges.keys() {
            if units.contains(a) && callees.contains(b) {
                calls.entry(short(a)).or_default().insert(short(b));
            }
        }
        calls
    };
    let step_calls = calls_among(&steps, &steps);
    let workflow_calls = calls_among(&workflows, &workflows.union(&steps).cloned().collect());
    if !steps.is_empty() {
        let chain: Vec<String> = graph.longest_chain(&steps).iter().map(|n| short(n)).collect();
        report.say(format!(
            "veem: {} steps, graph depth {}: {}",
            steps.len(),
            chain.len(),
            chain.join(" -> ")
        ));
        print_calls(&step_calls, report);
    }
    let chain: Vec<String> = graph.longest_chain(&workflows).iter().map(|n| short(n)).collect();
    report.say(format!(
        "veem: {} workflows, graph depth {}: {}",
        workflows.len(),
        chain.len(),
        chain.join(" -> ")
    ));
    print_calls(&workflow_calls, report);
    if let Some(max) = max_depth {
        if chain.len() > max {
            report.fail(format!("veem: the workflow graph is {} deep, more than {max}", chain.len()));
        }
    }
    for both in step_calls.keys().filter(|s| workflow_calls.contains_key(*s)) {
        report.fail(format!("veem: `{both}` is both a step and a workflow"));
    }
    // A document with either table states both.
    if !stated.workflows.is_empty() || !stated.steps.is_empty() {
        check_table("workflow", &workflow_calls, &stated.workflows, &step_calls, report);
        check_table("step", &step_calls, &stated.steps, &BTreeMap::new(), report);
    }
}

/// Each unit with what it calls, indented under the graph's line.
fn print_calls(calls: &BTreeMap<String, BTreeSet<String>>, report: &mut Report) {
    for (w, c) in calls {
        let listed = if c.is_empty() {
            "(leaf)".to_string()
        } else {
            c.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        report.lines.push(format!("    {w}: {listed}"));
    }
}

/// The `kind`s' table (`| workflow | one line |` or `| step | one line |`)
/// against the code: a row per unit, each listing what it calls among its
/// own kind and `below` (the steps, for a workflow), and `core`.
fn check_table(
    kind: &str,
    calls: &BTreeMap<String, BTreeSet<String>>,
    table: &BTreeMap<String, (BTreeSet<String>, usize)>,
    below: &BTreeMap<String, BTreeSet<String>>,
    report: &mut Report,
) {
    let callable = |n: &String| calls.contains_key(n) || below.contains_key(n);
    for (w, code) in calls {
        let Some((row, line)) = table.get(w) else {
            report.fail(format!("veem: {kind} `{w}` has no row in ARCHITECTURE.md's {kind}s table"));
            continue;
        };
        let row: BTreeSet<String> = row.iter().filter(|n| callable(n)).cloned().collect();
        if &row != code {
            let missing: Vec<_> = code.difference(&row).cloned().collect();
            let extra: Vec<_> = row.difference(code).cloned().collect();
            report.fail(format!(
                "veem: ARCHITECTURE.md's {kind}s table (line {line}) lists what `{w}` calls wrongly: it calls {} not listed; listed {} it does not call",
                names(&missing),
                names(&extra)
            ));
        }
    }
    for (w, (row, line)) in table {
        if !calls.contains_key(w) {
            report.fail(format!(
                "veem: ARCHITECTURE.md's {kind}s table (line {line}) has a row for `{w}`, which is no {kind}"
            ));
        }
        for n in row {
            if n != "core" && !callable(n) {
                report.fail(format!(
                    "veem: ARCHITECTURE.md's {kind}s table (line {line}) says `{w}` calls `{n}`, which it cannot call"
                ));
            }
        }
    }
}

fn names(list: &[String]) -> String {
    if list.is_empty() {
        "nothing".into()
    } else {
        list.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
    }
}

/// `impl Veem` outside `manager.rs` only in the files the facade list names.
fn check_facade(krate: &Crate, dir: &Path, facade: &BTreeSet<String>, report: &mut Report) {
    let src = dir.join("src");
    let found: BTreeSet<String> = krate
        .modules
        .values()
        .flat_map(|m| m.impls.iter().filter(|(ty, _)| ty == "Veem").map(|(_, l)| relative(&src, &l.file)))
        .filter(|f| f != "manager.rs")
        .collect();
    for f in found.difference(facade) {
        report.fail(format!(
            "veem/src/{f} has `impl Veem`: a workflow is a value of its own (veem/src/workflows/), the facade is manager.rs"
        ));
    }
    for f in facade.difference(&found) {
        report.fail(format!("veem/src/{f} has no `impl Veem` left: remove it from the facade list"));
    }
    report.say(format!("veem: {} files still extend the facade", found.len()));
}

fn relative(root: &Path, file: &Path) -> String {
    file.strip_prefix(root).unwrap_or(file).to_string_lossy().into_owned()
}
