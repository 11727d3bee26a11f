//! Text renderings of blob metadata for `ls` and `show`.

use std::fmt::Write;

use indicatif::HumanBytes;
use interfaces::repo_client::BlobMeta;

/// A table with one row per blob: ID, NAME, KIND, FORMAT, SIZE, CREATED,
/// OWNER (`+public` when public), PINS.
pub fn table(blobs: &[BlobMeta]) -> String {
    let header = ["ID", "NAME", "KIND", "FORMAT", "SIZE", "CREATED", "OWNER", "PINS"];
    let rows: Vec<[String; 8]> = blobs
        .iter()
        .map(|m| {
            [
                m.id.to_string(),
                m.name.clone(),
                m.kind.to_string(),
                m.format.clone().unwrap_or_else(|| "-".into()),
                HumanBytes(m.size).to_string(),
                m.created.format("%Y-%m-%d %H:%M:%S").to_string(),
                format!("{}{}", m.owner, if m.public { "+public" } else { "" }),
                if m.pins.is_empty() { "-".into() } else { m.pins.join(",") },
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        line(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

/// `key: value` lines describing one blob.
pub fn details(m: &BlobMeta) -> String {
    let labels: Vec<String> = m.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let none = |v: &[String]| if v.is_empty() { "-".to_string() } else { v.join(", ") };
    format!(
        "id:      {}\nname:    {}\nkind:    {}\nformat:  {}\nsize:    {} ({})\ncreated: {}\nlabels:  {}\npins:    {}\nowner:   {}\npublic:  {}\nreaders: {}\n",
        m.id,
        m.name,
        m.kind,
        m.format.as_deref().unwrap_or("-"),
        m.size,
        HumanBytes(m.size),
        m.created.to_rfc3339(),
        none(&labels),
        none(&m.pins),
        m.owner,
        if m.public { "yes" } else { "no" },
        none(&m.readers),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use interfaces::repo_client::BlobKind;
    use interfaces::BlobId;

    #[test]
    fn table_aligns_columns_and_marks_empty_cells() {
        let m = BlobMeta {
            id: BlobId::of(b"k"),
            name: "vmlinuz".into(),
            kind: BlobKind::Kernel,
            format: None,
            size: 2048,
            created: "2026-01-02T03:04:05Z".parse().unwrap(),
            labels: [("arch".to_string(), "x86_64".to_string())].into(),
            pins: vec![],
            owner: "acme".into(),
            public: true,
            readers: vec![],
        };
        let t = table(std::slice::from_ref(&m));
        let lines: Vec<_> = t.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].find("NAME"), lines[1].find("vmlinuz"));
        assert!(lines[1].contains("2.00 KiB") && lines[1].contains("kernel") && lines[1].ends_with('-'));
        assert_eq!(lines[0].find("OWNER"), lines[1].find("acme+public"));
        let d = details(&m);
        assert!(d.contains("labels:  arch=x86_64") && d.contains("format:  -"), "{d}");
    }
}
