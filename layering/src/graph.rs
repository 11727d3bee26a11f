//! The import graph of a crate's modules: each module counted at a depth
//! (`server::auth` in image-repo, `deploy` in veem: a module's own
//! submodules are part of it; each of veem's workflows and steps a node of
//! its own),
//! an edge from a node to every node a path written in it resolves to,
//! the first place it is written kept; its cycles (Tarjan's strongly
//! connected components) and its longest chains.

use std::collections::{BTreeMap, BTreeSet};

use crate::resolve::Resolver;
use crate::tree::{Crate, Location, ModPath};

/// The root module's node (`lib.rs`'s own items).
pub const ROOT: &str = "(root)";

/// How a crate's module paths become nodes.
#[derive(Debug, Clone)]
pub struct Layout {
    /// How many segments of a module path name its node.
    pub depth: usize,
    /// Modules whose submodules are counted one level deeper.
    pub deeper: &'static [&'static str],
}

impl Layout {
    /// The repository's crates: image-repo's server modules one level
    /// deeper (`server::auth`), each of veem's workflows and steps a node.
    pub fn of(krate: &str) -> Layout {
        match krate {
            "image-repo" => Layout { depth: 2, deeper: &[] },
            "veem" => Layout {
                depth: 1,
                deeper: &["workflows", "steps"],
            },
            _ => Layout { depth: 1, deeper: &[] },
        }
    }

    /// The node of module `m`.
    pub fn node(&self, m: &ModPath) -> String {
        if m.is_empty() {
            return ROOT.to_string();
        }
        let depth = if self.deeper.contains(&m[0].as_str()) {
            self.depth + 1
        } else {
            self.depth
        };
        m[..depth.min(m.len())].join("::")
    }
}

/// The nodes and edges of one crate.
#[derive(Debug, Default)]
pub struct Graph {
    /// Every node, [`ROOT`] for the crate root's own items.
    pub nodes: BTreeSet<String>,
    /// (from, to) -> where the first path making it is written.
    pub edges: BTreeMap<(String, String), Location>,
}

impl Graph {
    /// Every module's imports, globs (each to every module it brings names
    /// from) and written paths resolved; the root's `use` items are its
    /// re-exports, resolved through, not edges of its own. A node and its ancestors or descendants are one: no edge.
    pub fn of(krate: &Crate, layout: &Layout) -> Graph {
        let resolver = Resolver::new(krate);
        let mut graph = Graph::default();
        for (path, module) in &krate.modules {
            let from = layout.node(path);
            graph.nodes.insert(from.clone());
            let mut targets: Vec<(ModPath, &Location)> = Vec::new();
            if !path.is_empty() {
                for written in module.imports.values().flatten() {
                    targets.extend(resolver.resolve(path, &written.path).module().map(|t| (t, &written.at)));
                }
                for written in &module.globs {
                    targets.extend(resolver.glob_sources(path, &written.path).into_iter().map(|t| (t, &written.at)));
                }
            }
            for written in &module.paths {
                targets.extend(resolver.resolve(path, &written.path).module().map(|t| (t, &written.at)));
            }
            for (target, at) in targets {
                let to = layout.node(&target);
                if related(&from, &to) {
                    continue;
                }
                graph.nodes.insert(to.clone());
                graph.edges.entry((from.clone(), to)).or_insert_with(|| at.clone());
            }
        }
        graph
    }

    fn adjacency(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut adj: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (a, b) in self.edges.keys() {
            adj.entry(a).or_default().push(b);
        }
        adj
    }

    /// The strongly connected components of more than one node, each
    /// sorted (Tarjan, 1972).
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let adj = self.adjacency();
        let mut t = Tarjan {
            adj: &adj,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on: BTreeSet::new(),
            out: Vec::new(),
        };
        for v in &self.nodes {
            if !t.index.contains_key(v.as_str()) {
                t.visit(v);
            }
        }
        t.out.into_iter().filter(|c| c.len() > 1).collect()
    }

    /// The longest chain of nodes among `members` (edges between them
    /// only), from its first node to its last; empty when they are cyclic.
    pub fn longest_chain(&self, members: &BTreeSet<String>) -> Vec<String> {
        let adj = self.adjacency();
        let mut memo: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        let mut best = Vec::new();
        for v in members {
            let chain = chain_from(v, &adj, members, &mut memo, &mut BTreeSet::new());
            if chain.len() > best.len() {
                best = chain;
            }
        }
        best
    }
}

fn chain_from<'a>(
    v: &'a str,
    adj: &BTreeMap<&'a str, Vec<&'a str>>,
    members: &BTreeSet<String>,
    memo: &mut BTreeMap<&'a str, Vec<String>>,
    path: &mut BTreeSet<&'a str>,
) -> Vec<String> {
    if let Some(c) = memo.get(v) {
        return c.clone();
    }
    if !path.insert(v) {
        return Vec::new();
    }
    let mut longest = Vec::new();
    for w in adj.get(v).into_iter().flatten().filter(|w| members.contains(**w)) {
        let c = chain_from(w, adj, members, memo, path);
        if c.len() > longest.len() {
            longest = c;
        }
    }
    path.remove(v);
    let mut chain = vec![v.to_string()];
    chain.extend(longest);
    memo.insert(v, chain.clone());
    chain
}

/// Whether two nodes are one module and its own (a node, its ancestors and
/// descendants); the root's node is related to none but itself.
fn related(a: &str, b: &str) -> bool {
    a == b || (a != ROOT && b != ROOT && (a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))))
}

struct Tarjan<'a> {
    adj: &'a BTreeMap<&'a str, Vec<&'a str>>,
    index: BTreeMap<&'a str, usize>,
    low: BTreeMap<&'a str, usize>,
    stack: Vec<&'a str>,
    on: BTreeSet<&'a str>,
    out: Vec<Vec<String>>,
}

impl<'a> Tarjan<'a> {
    fn visit(&mut self, v: &'a str) {
        let n = self.index.len();
        self.index.insert(v, n);
        self.low.insert(v, n);
        self.stack.push(v);
        self.on.insert(v);
        for &w in self.adj.get(v).into_iter().flatten() {
            if !self.index.contains_key(w) {
                self.visit(w);
                let low = self.low[v].min(self.low[w]);
                self.low.insert(v, low);
            } else if self.on.contains(w) {
                let low = self.low[v].min(self.index[w]);
                self.low.insert(v, low);
            }
        }
        if self.low[v] == self.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            comp.sort();
            self.out.push(comp);
        }
    }
}
