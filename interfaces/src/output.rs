//! What the CLIs share in printing: YAML (`-o yaml`) made from the JSON
//! they print with `-o json`, so that both formats show the same fields,
//! names and `null`s (serde_yaml_ng, the maintained fork of serde_yaml).

use std::io::{self, Write};

/// The YAML of one JSON document `json`, its fields in the same order.
/// Errors: `json` is not one JSON document.
pub fn yaml(json: &[u8]) -> Result<String, serde_json::Error> {
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(json);
    let mut ser = serde_yaml_ng::Serializer::new(&mut out);
    serde_transcode::transcode(&mut de, &mut ser).map_err(|e| serde::ser::Error::custom(e.to_string()))?;
    de.end()?;
    drop(ser);
    Ok(String::from_utf8(out).expect("YAML is UTF-8"))
}

/// The JSON documents of `text` (one, or JSON lines), each as its bytes.
/// Errors: `text` is not JSON documents.
fn documents(text: &[u8]) -> Result<Vec<&[u8]>, serde_json::Error> {
    let mut stream = serde_json::Deserializer::from_slice(text).into_iter::<serde::de::IgnoredAny>();
    let (mut docs, mut start) = (Vec::new(), 0);
    while let Some(doc) = stream.next() {
        doc?;
        let end = stream.byte_offset();
        docs.push(&text[start..end]);
        start = end;
    }
    Ok(docs)
}

/// A writer that takes JSON documents and writes them as YAML documents,
/// `---` between them: what is written since the last flush is converted
/// at the flush (a CLI flushes after each document; JSON lines are several
/// documents). Text that is not JSON passes as it is.
pub struct YamlWriter<W: Write> {
    inner: W,
    pending: Vec<u8>,
    documents: usize,
}

impl<W: Write> YamlWriter<W> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            documents: 0,
        }
    }
}

impl<W: Write> Write for YamlWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let text = std::mem::take(&mut self.pending);
        let converted: Result<Vec<String>, _> = documents(&text).and_then(|docs| docs.into_iter().map(yaml).collect());
        match converted {
            Ok(docs) => {
                for doc in docs {
                    if self.documents > 0 {
                        self.inner.write_all(b"---\n")?;
                    }
                    self.documents += 1;
                    self.inner.write_all(doc.as_bytes())?;
                }
            }
            Err(_) => self.inner.write_all(&text)?,
        }
        self.inner.flush()
    }
}

impl<W: Write> Drop for YamlWriter<W> {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let _ = self.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_documents_become_yaml_documents_with_the_same_fields_and_nulls() {
        let mut out = Vec::new();
        {
            let mut w = YamlWriter::new(&mut out);
            w.write_all(b"{\n  \"items\": [{\"vee_id\": \"v1\", \"latest_checkpoint\": null}]\n}\n")
                .unwrap();
            w.flush().unwrap();
            // JSON lines (events): one document each.
            w.write_all(b"{\"kind\":\"started\"}\n{\"kind\":\"stopped\"}\n").unwrap();
            w.flush().unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "items:\n- vee_id: v1\n  latest_checkpoint: null\n---\nkind: started\n---\nkind: stopped\n"
        );
        let first: serde_yaml_ng::Value = serde_yaml_ng::from_str(text.split("---\n").next().unwrap()).unwrap();
        assert_eq!(first["items"][0]["vee_id"], "v1");
    }

    #[test]
    fn text_that_is_not_json_passes_unchanged() {
        let mut out = Vec::new();
        let mut w = YamlWriter::new(&mut out);
        w.write_all(b"deployed service s1\n").unwrap();
        w.flush().unwrap();
        drop(w);
        assert_eq!(out, b"deployed service s1\n");
    }
}
