//! `check-layers`: the layering check of the repository's crates
//! (ARCHITECTURE.md, "Layering"). Exit status 0 when it passes, 1 when it
//! finds something, 2 when it cannot read what it checks.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

/// Fails when a crate's modules import each other in a circle, when a
/// module uses one on a layer above its own (ARCHITECTURE.md's layer
/// table), when that table or the workflows table and the code disagree,
/// and on an `impl Veem` outside the facade.
#[derive(Parser)]
#[command(name = "check-layers")]
struct Args {
    /// The repository's root.
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// The document stating the layers (default: ROOT/ARCHITECTURE.md when
    /// it exists).
    #[arg(long)]
    architecture: Option<PathBuf>,
    /// Cycles still to be cut, one per line (`crate: module module ...`;
    /// `#` starts a comment): reported but not failed; a listed one that is
    /// gone fails.
    #[arg(long)]
    known: Option<PathBuf>,
    /// veem's files (under veem/src) that may still hold `impl Veem`
    /// blocks, one per line.
    #[arg(long)]
    facade: Option<PathBuf>,
    /// The deepest veem's workflow graph may be, in workflows.
    #[arg(long)]
    max_workflow_depth: Option<usize>,
    /// Print every edge of each crate's graph, with where it is written.
    #[arg(long)]
    print_edges: bool,
    /// Crate directories to check (default: the repository's crates).
    crates: Vec<PathBuf>,
}

fn lines(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = (|| -> Result<vee_layering::Options, String> {
        let known = match &args.known {
            Some(path) => lines(path)?
                .into_iter()
                .map(|line| {
                    let (krate, mods) = line.split_once(':').unwrap_or((&line, ""));
                    let mut mods: Vec<&str> = mods.split_whitespace().collect();
                    mods.sort();
                    format!("{}: {}", krate.trim(), mods.join(" "))
                })
                .collect(),
            None => BTreeSet::new(),
        };
        let facade = match &args.facade {
            Some(path) => Some(lines(path)?.into_iter().collect()),
            None => None,
        };
        let default_doc = args.root.join("ARCHITECTURE.md");
        let architecture = args.architecture.clone().or_else(|| default_doc.is_file().then_some(default_doc));
        Ok(vee_layering::Options {
            root: args.root.clone(),
            crates: args.crates.clone(),
            architecture,
            known,
            facade,
            max_workflow_depth: args.max_workflow_depth,
            print_edges: args.print_edges,
        })
    })();
    let report = match options.map(|o| vee_layering::run(&o).map_err(|e| e.to_string())) {
        Ok(Ok(report)) => report,
        Ok(Err(e)) | Err(e) => {
            eprintln!("check-layers: {e}");
            return ExitCode::from(2);
        }
    };
    for line in &report.lines {
        println!("{line}");
    }
    if report.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
