//! Trees the store derives from others in the commit that writes those,
//! so that a reader of a few records does not scan every record to find
//! them, and a crash cannot leave an index that disagrees with its
//! records: [`Tree::ElasticServices`] from [`Tree::Services`].

use super::{Tree, Writes};

/// What [`Tree::ElasticServices`] holds under a service's ID.
pub(super) const MARK: &[u8] = b"true";

/// Whether a service record (raw JSON) is one of this site's own with
/// elasticity rules (its terms' `elasticity` not empty, no `for_peer`):
/// the record is read for those two fields alone, its manifest's text
/// skipped. A value that is not such a record has none.
pub(crate) fn has_elasticity_rules(raw: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Terms {
        #[serde(default)]
        elasticity: Vec<serde::de::IgnoredAny>,
    }
    #[derive(serde::Deserialize)]
    struct Glance {
        #[serde(default)]
        terms: Option<Terms>,
        #[serde(default)]
        for_peer: Option<String>,
    }
    serde_json::from_slice::<Glance>(raw).is_ok_and(|g| g.for_peer.is_none() && g.terms.is_some_and(|t| !t.elasticity.is_empty()))
}

impl Writes {
    /// Adds to these writes the derived trees' writes they imply: for
    /// each service record written, its key in [`Tree::ElasticServices`]
    /// put or removed (a removal of a key that is not there writes
    /// nothing an engine keeps).
    pub(super) fn derive(&mut self) {
        let elastic: Vec<(String, bool)> = self
            .writes
            .iter()
            .filter(|(t, _, _)| *t == Tree::Services)
            .map(|(_, key, value)| (key.clone(), value.as_deref().is_some_and(has_elasticity_rules)))
            .collect();
        for (key, rules) in elastic {
            match rules {
                true => self.put_raw(Tree::ElasticServices, &key, MARK.to_vec()),
                false => self.remove(Tree::ElasticServices, &key),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{Engine, MemoryEngine, Store, FORMAT_KEY, FORMAT_VERSION};
    use super::*;

    fn service(id: &str, rules: usize, for_peer: Option<&str>) -> serde_json::Value {
        let rule = serde_json::json!({"component": "web", "metric": "cpu", "above": 0.8, "add": 1});
        serde_json::json!({
            "id": id,
            "manifest_toml": "[[elasticity]] is skipped, not read",
            "for_peer": for_peer,
            "terms": {"sla": {}, "elasticity": vec![rule; rules]},
        })
    }

    fn elastic(s: &Store) -> Vec<String> {
        let mut keys = Vec::new();
        s.scan(Tree::ElasticServices, |k, _| {
            keys.push(k.to_string());
            Ok(())
        })
        .unwrap();
        keys
    }

    #[test]
    fn the_services_with_rules_are_indexed_by_the_commit_that_writes_them() {
        let s = Store::on(Arc::new(MemoryEngine::default()), "memory").unwrap();
        let mut w = Writes::default();
        w.put(Tree::Services, "a", &service("a", 2, None)).unwrap();
        w.put(Tree::Services, "b", &service("b", 0, None)).unwrap();
        w.put(Tree::Services, "c", &service("c", 1, Some("site-b"))).unwrap();
        w.put(Tree::Vees, "v", &service("v", 1, None)).unwrap();
        s.commit(w).unwrap();
        s.put(Tree::Services, "d", &service("d", 1, None)).unwrap();
        assert_eq!(
            elastic(&s),
            ["a", "d"],
            "own services with rules; not one run for a peer, not another tree"
        );

        s.put(Tree::Services, "a", &service("a", 0, None)).unwrap();
        s.put(Tree::Services, "b", &service("b", 1, None)).unwrap();
        s.put(Tree::Services, "d", &1u32).unwrap();
        assert_eq!(elastic(&s), ["b"], "rules dropped, rules added, a value that is no service");
        s.remove(Tree::Services, "b").unwrap();
        assert!(elastic(&s).is_empty(), "a removed service leaves the index");
    }

    #[test]
    fn a_format_7_database_gets_its_index_when_opened() {
        let engine = Arc::new(MemoryEngine::default());
        let rec = |v: serde_json::Value| {
            (
                Tree::Services,
                v["id"].as_str().unwrap().as_bytes().to_vec(),
                Some(serde_json::to_vec(&v).unwrap()),
            )
        };
        engine
            .commit(
                vec![
                    (Tree::Meta, FORMAT_KEY.as_bytes().to_vec(), Some(b"7".to_vec())),
                    rec(service("x", 1, None)),
                    rec(service("y", 0, None)),
                    rec(service("z", 3, None)),
                ],
                &[],
            )
            .unwrap();
        let s = Store::on(engine, "memory").unwrap();
        assert_eq!(elastic(&s), ["x", "z"]);
        assert_eq!(s.get::<u32>(Tree::Meta, FORMAT_KEY).unwrap(), Some(FORMAT_VERSION));
    }
}
