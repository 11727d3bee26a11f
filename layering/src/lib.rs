//! The layering check (`scripts/check-layers`, a phase of `scripts/test`):
//! each crate's modules read as the compiler reads them (`tree`: syn, test
//! code left out), the paths they write resolved through re-exports and
//! globs to the module that defines what they name (`resolve`), the import
//! graph of those modules (`graph`) without cycles and in the layer order
//! `ARCHITECTURE.md` states in its tables (`document`), which the code and
//! the document must agree on (`check`).

pub mod check;
pub mod document;
pub mod graph;
pub mod resolve;
pub mod tree;

use std::path::PathBuf;

pub use check::{run, Options, Report};
use tree::Location;

/// Why the check could not run (not a finding: those are the report's).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: no lib.rs or main.rs")]
    NoRoot(PathBuf),
    #[error("{0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("{}:{line}: not Rust syn can read: {reason}", file.display())]
    Parse { file: PathBuf, line: usize, reason: String },
    #[error("{}:{}: module `{module}` is declared, its file is missing", at.file.display(), at.line)]
    MissingModule { module: String, at: Location },
    #[error("{}: {reason}", file.display())]
    Document { file: PathBuf, reason: String },
}
