//! What `ARCHITECTURE.md` states about the code, read from its tables:
//!
//! - the layer table (header `| layer | crate | modules |`): per crate, each
//!   top-level module (in backticks) on a numbered layer; a module may use
//!   its own layer's modules and those below, never one above;
//! - the workflows table (header `| workflow | one line |`): each workflow's
//!   row ends with the workflows it calls in parentheses (`(leaf: core,
//!   networks)`, `(boot, deploy: the image checked)`: a name before its
//!   colon, `core` and `leaf:` not workflows, spaces for underscores);
//! - the steps table (header `| step | one line |`): each step's row ends
//!   with the steps it builds on, the same way.

use std::collections::{BTreeMap, BTreeSet};

/// The tables read, with the line each row is on.
#[derive(Debug, Default)]
pub struct Stated {
    /// crate -> module -> (layer, line).
    pub layers: BTreeMap<String, BTreeMap<String, (u32, usize)>>,
    /// workflow -> (the names its row lists, line).
    pub workflows: BTreeMap<String, (BTreeSet<String>, usize)>,
    /// step -> (the names its row lists, line).
    pub steps: BTreeMap<String, (BTreeSet<String>, usize)>,
}

impl Stated {
    /// Reads `text` (markdown). Rows that do not parse (a layer that is
    /// not a number) are returned as errors naming their line.
    pub fn read(text: &str) -> Result<Stated, String> {
        let mut stated = Stated::default();
        let mut header: Option<Vec<String>> = None;
        for (n, line) in text.lines().enumerate() {
            let n = n + 1;
            let line = line.trim();
            if !line.starts_with('|') {
                header = None;
                continue;
            }
            let cells: Vec<String> = line.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect();
            let Some(head) = &header else {
                header = Some(cells);
                continue;
            };
            if cells.iter().all(|c| c.chars().all(|ch| ch == '-' || ch == ':')) {
                continue;
            }
            match head.first().map(String::as_str) {
                Some("layer") if head.get(1).is_some_and(|h| h == "crate") => {
                    let layer: u32 = cells[0]
                        .parse()
                        .map_err(|_| format!("line {n}: layer `{}` is not a number", cells[0]))?;
                    let krate = cells.get(1).map(|c| c.trim_matches('`').to_string()).unwrap_or_default();
                    let modules = stated.layers.entry(krate).or_default();
                    for m in backticked(cells.get(2).map_or("", String::as_str)) {
                        if let Some((earlier, at)) = modules.insert(m.clone(), (layer, n)) {
                            return Err(format!("line {n}: `{m}` is on layer {earlier} already (line {at})"));
                        }
                    }
                }
                Some(kind @ ("workflow" | "step")) if head.get(1).is_some_and(|h| h == "one line") => {
                    let name = cells[0].trim_matches('`').trim_end_matches('/').to_string();
                    let calls = calls_listed(line)
                        .ok_or_else(|| format!("line {n}: the `{name}` row does not end with what it calls in parentheses"))?;
                    let table = if kind == "step" { &mut stated.steps } else { &mut stated.workflows };
                    table.insert(name, (calls, n));
                }
                _ => {}
            }
        }
        Ok(stated)
    }
}

/// The names in backticks of a cell.
fn backticked(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The names in a row's last parentheses: `(leaf: core, networks)` is
/// `{core, networks}`; `(deploy: the image checked, site constraints)` is
/// `{deploy, site_constraints}`.
fn calls_listed(row: &str) -> Option<BTreeSet<String>> {
    let row = row.trim_end_matches('|').trim_end();
    let inner = row.strip_suffix(')')?;
    let mut depth = 0;
    let mut open = None;
    for (i, ch) in inner.char_indices().rev() {
        match ch {
            ')' => depth += 1,
            '(' if depth == 0 => {
                open = Some(i);
                break;
            }
            '(' => depth -= 1,
            _ => {}
        }
    }
    let inner = &inner[open? + 1..];
    Some(
        inner
            .split(", ")
            .map(|piece| {
                let piece = piece.trim().trim_start_matches("leaf:").trim();
                piece.split(':').next().unwrap_or("").trim().replace(' ', "_")
            })
            .filter(|name| !name.is_empty())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rows_calls_are_the_names_before_their_colons() {
        let calls =
            calls_listed("| `rollout` | rolling (VMI UpdateComponent) (boot, leaf: core, deploy: the image checked, site constraints) |")
                .unwrap();
        let want: BTreeSet<String> = ["boot", "core", "deploy", "site_constraints"].map(String::from).into();
        assert_eq!(calls, want);
        assert_eq!(calls_listed("| `x` | no list |"), None);
    }

    #[test]
    fn the_layer_table_puts_each_module_on_one_layer() {
        let text = "| layer | crate | modules |\n|---|---|---|\n| 0 | `veem` | `domain`, `error` |\n| 1 | `veem` | `core` |\n";
        let stated = Stated::read(text).unwrap();
        assert_eq!(stated.layers["veem"]["core"], (1, 4));
        let twice = format!("{text}| 2 | `veem` | `domain` |\n");
        assert!(Stated::read(&twice).unwrap_err().contains("`domain` is on layer 0 already"));
        assert!(Stated::read("| layer | crate | modules |\n|---|---|---|\n| top | veem | `a` |\n")
            .unwrap_err()
            .contains("line 3"));
    }
}
