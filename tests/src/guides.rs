//! The guides as a test reads them: the files a user reads, and their
//! fenced code blocks with the mark before each shell block
//! (`<!-- run: TEST -->` or `<!-- not run: REASON -->`).

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files a user reads: `docs/*.md`, the READMEs, `ARCHITECTURE.md`,
/// and the TOML under `packaging/` and `configs/`.
pub fn read_by_users() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![
        root.join("README.md"),
        root.join("ARCHITECTURE.md"),
        root.join("image-repo/README.md"),
    ];
    let mut dirs = vec![root.join("docs"), root.join("packaging"), root.join("configs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md" || x == "toml") {
                files.push(p);
            }
        }
    }
    files.retain(|f| f.exists());
    files
}

/// What the line before a shell block says of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mark {
    /// `<!-- run: TEST -->`: TEST runs it.
    Run(String),
    /// `<!-- not run: REASON -->`.
    NotRun(String),
    /// Nothing: a shell block must say one or the other.
    Unmarked,
}

/// A fenced code block of a Markdown file.
#[derive(Clone, Debug)]
pub struct Block {
    /// Its language (`sh`, `toml`, ...; empty for none).
    pub lang: String,
    /// The line of its opening fence (1-based).
    pub line: usize,
    pub text: String,
    pub mark: Mark,
}

impl Block {
    /// Whether a reader would paste it into a shell.
    pub fn is_shell(&self) -> bool {
        matches!(self.lang.as_str(), "sh" | "bash" | "shell" | "console")
    }
}

/// The fenced code blocks of Markdown `text`, in order.
pub fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    let mut before = "";
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        match &mut open {
            None if t.starts_with("```") => {
                let mark = match before
                    .trim()
                    .strip_prefix("<!--")
                    .and_then(|m| m.strip_suffix("-->"))
                    .map(str::trim)
                {
                    Some(m) if m.starts_with("run:") => Mark::Run(m["run:".len()..].trim().into()),
                    Some(m) if m.starts_with("not run:") => Mark::NotRun(m["not run:".len()..].trim().into()),
                    _ => Mark::Unmarked,
                };
                let lang = t.trim_start_matches('`').split_whitespace().next().unwrap_or("").to_string();
                open = Some(Block {
                    lang,
                    line: i + 1,
                    text: String::new(),
                    mark,
                });
            }
            Some(_) if t.starts_with("```") => out.extend(open.take()),
            Some(b) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            None => {}
        }
        before = line;
    }
    out
}

/// The blocks of `file` (under the root) marked `<!-- run: tests/tests/TEST.rs -->`.
pub fn run_by(file: &str, test: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    blocks(&text)
        .into_iter()
        .filter(|b| b.mark == Mark::Run(format!("tests/tests/{test}.rs")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_carry_their_language_line_and_mark() {
        let md =
            "x\n<!-- run: tests/tests/guides.rs -->\n```sh\necho a\n```\n\n```toml\na = 1\n```\n<!-- not run: why -->\n```bash\nb\n```\n";
        let b = blocks(md);
        assert_eq!(b.len(), 3);
        assert_eq!((b[0].lang.as_str(), b[0].line, b[0].text.as_str()), ("sh", 3, "echo a\n"));
        assert_eq!(b[0].mark, Mark::Run("tests/tests/guides.rs".into()));
        assert_eq!((b[1].lang.as_str(), &b[1].mark), ("toml", &Mark::Unmarked));
        assert_eq!(b[2].mark, Mark::NotRun("why".into()));
        assert!(b[2].is_shell() && !b[1].is_shell());
    }
}
