//! Borderless, aligned tables in the style of OpenNebula's `onevm list`:
//! upper-case headers, columns separated by two spaces, numbers right-aligned,
//! no trailing whitespace. Built on `comfy-table` without terminal styling,
//! so the output is the same on a terminal and in a pipe.

use comfy_table::{presets, CellAlignment, ContentArrangement, Table as Inner};

/// An aligned table being built.
pub struct Table {
    inner: Inner,
    columns: usize,
}

impl Table {
    /// A table with these column headers. A header ending in `>` (which is
    /// removed) marks a right-aligned (numeric) column.
    pub fn new(headers: &[&str]) -> Self {
        let mut inner = Inner::new();
        inner.load_preset(presets::NOTHING);
        inner.set_content_arrangement(ContentArrangement::Disabled);
        inner.set_header(headers.iter().map(|h| h.trim_end_matches('>')).collect::<Vec<_>>());
        for (i, h) in headers.iter().enumerate() {
            let col = inner.column_mut(i).expect("header defines the column");
            if h.ends_with('>') {
                col.set_cell_alignment(CellAlignment::Right);
            }
            // The preset leaves one space of padding on each side; drop the
            // leading one of the first column so rows start at column 0.
            if i == 0 {
                col.set_padding((0, 1));
            }
        }
        Self {
            inner,
            columns: headers.len(),
        }
    }

    /// Add a row; empty cells are shown as `-`.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        let cells: Vec<String> = cells
            .into_iter()
            .map(Into::into)
            .map(|c| if c.is_empty() { "-".to_string() } else { c })
            .collect();
        debug_assert_eq!(cells.len(), self.columns, "row width differs from the header");
        self.inner.add_row(cells);
        self
    }

    /// Add a row as given: empty cells stay blank (for totals lines).
    pub fn row_verbatim<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        let cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        debug_assert_eq!(cells.len(), self.columns, "row width differs from the header");
        self.inner.add_row(cells);
        self
    }

    /// The rendered table: one line per row (header first), each ending in a
    /// newline, with no trailing spaces.
    pub fn render(&self) -> String {
        let mut s: String = self.inner.lines().map(|l| l.trim_end().to_string() + "\n").collect::<String>();
        if s.is_empty() {
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte offset (in chars) where each header's column starts.
    fn starts(line: &str, words: &[&str]) -> Vec<usize> {
        let mut from = 0;
        words
            .iter()
            .map(|w| {
                let at = line[from..].find(w).unwrap() + from;
                from = at + w.len();
                line[..at].chars().count()
            })
            .collect()
    }

    #[test]
    fn columns_are_aligned_and_numbers_right_aligned() {
        let mut t = Table::new(&["ID", "NAME", "VCPUS>"]);
        t.row(["a", "webshop-db", "1"]);
        t.row(["abcdef", "x", "12"]);
        let out = t.render();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], "ID      NAME        VCPUS");
        assert_eq!(lines[1], "a       webshop-db      1");
        assert_eq!(lines[2], "abcdef  x              12");
        // Left-aligned columns start at the same offset in every row.
        assert_eq!(starts(lines[0], &["ID", "NAME"]), starts(lines[1], &["a", "webshop-db"]));
        assert_eq!(starts(lines[0], &["ID", "NAME"]), starts(lines[2], &["abcdef", "x"]));
        // Right-aligned column ends at the same offset.
        let ends: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
        assert_eq!(ends, vec![ends[0]; 3]);
    }

    #[test]
    fn empty_cells_show_a_dash_and_no_trailing_spaces() {
        let mut t = Table::new(&["A", "B"]);
        t.row(["x", ""]);
        t.row(["", "yy"]);
        t.row_verbatim(["", "z"]);
        let out = t.render();
        assert_eq!(out, "A  B\nx  -\n-  yy\n   z\n");
        assert!(out.lines().all(|l| !l.ends_with(' ')));
    }

    #[test]
    fn non_ascii_cells_align_by_width() {
        let mut t = Table::new(&["UNIT", "V>"]);
        t.row(["MiB·s", "1"]);
        t.row(["s", "10"]);
        let out = t.render();
        let widths: Vec<usize> = out.lines().map(|l| l.chars().count()).collect();
        assert_eq!(widths, vec![widths[0]; 3], "{out}");
    }

    #[test]
    fn header_only_table() {
        let t = Table::new(&["ID", "STATE"]);
        assert_eq!(t.render(), "ID  STATE\n");
    }
}
