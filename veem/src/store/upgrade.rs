//! The database's format 5 -> 6: each checkpoint record given its
//! replication (`crate::domain::ReplicationRec`) as its situation implies.
//! Before format 6 a VEEM replicated a checkpoint it took for a peer before
//! recording it, and a primary site recorded a peer's checkpoint only once
//! its answer said so: such a record is `replicated`; any other
//! (a VEE of this site) is `not-needed`. None is left unsettled, so the
//! `replications` tree starts empty.

use anyhow::Result;

use super::{Store, Tree, Writes};
use crate::domain::{Replication, ReplicationRec};

impl Store {
    /// 5 -> 6: every checkpoint record without a replication gets one (see
    /// the module doc); a record that is not JSON is left as it is.
    pub(super) fn fill_checkpoint_replication(&self, w: &mut Writes) -> Result<()> {
        // The VEEs that run for a peer (their primary) or at a peer.
        let mut elsewhere = std::collections::HashMap::new();
        self.scan(Tree::Vees, |key, raw| {
            let vee = serde_json::from_slice::<serde_json::Value>(raw).unwrap_or_default();
            let abroad = (vee["location"]["kind"] == "site")
                .then(|| vee["location"]["at"].as_str())
                .flatten();
            let site = vee["for_peer"].as_str().or(abroad).map(str::to_string);
            if let Some(site) = site {
                elsewhere.insert(key.to_string(), site);
            }
            Ok(())
        })?;
        Ok(self.scan(Tree::Checkpoints, |key, raw| {
            let Ok(mut rec) = serde_json::from_slice::<serde_json::Value>(raw) else {
                return Ok(());
            };
            if !rec["replication"].is_null() {
                return Ok(());
            }
            let taken = rec["taken_ms"].as_i64().unwrap_or_default();
            let replication = match rec["vee_id"].as_str().and_then(|v| elsewhere.get(v)) {
                Some(site) => ReplicationRec::new(Replication::Replicated, site, taken),
                None => ReplicationRec::new(Replication::NotNeeded, "", taken),
            };
            rec["replication"] = serde_json::to_value(replication)?;
            w.put(Tree::Checkpoints, key, &rec)
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MemoryEngine, FORMAT_KEY, FORMAT_VERSION};
    use super::*;
    use crate::model::CheckpointRec;

    #[test]
    fn format_5_checkpoints_are_replicated_or_not_needed_as_their_vees_imply() {
        let engine = std::sync::Arc::new(MemoryEngine::default());
        {
            let s = Store::on(engine.clone(), "memory").unwrap();
            s.put(Tree::Meta, FORMAT_KEY, &5u32).unwrap();
            s.put(Tree::Vees, "for-peer", &serde_json::json!({"id": "for-peer", "for_peer": "site-a"}))
                .unwrap();
            s.put(
                Tree::Vees,
                "abroad",
                &serde_json::json!({"id": "abroad", "location": {"kind": "site", "at": "site-b"}}),
            )
            .unwrap();
            s.put(
                Tree::Vees,
                "home",
                &serde_json::json!({"id": "home", "location": {"kind": "host", "at": "h1"}}),
            )
            .unwrap();
            for (cp, vee) in [("c1", "for-peer"), ("c2", "abroad"), ("c3", "home")] {
                let old = serde_json::json!({"id": cp, "vee_id": vee, "taken_ms": 7, "valid": true, "record_hex": ""});
                s.put(Tree::Checkpoints, cp, &old).unwrap();
            }
        }
        let s = Store::on(engine, "memory").unwrap();
        assert_eq!(s.get::<u32>(Tree::Meta, FORMAT_KEY).unwrap(), Some(FORMAT_VERSION));
        let state = |id: &str| {
            let c: CheckpointRec = s.get(Tree::Checkpoints, id).unwrap().unwrap();
            (c.replication.state, c.replication.site, c.replication.retry_at_ms)
        };
        assert_eq!(state("c1"), (Replication::Replicated, "site-a".into(), None));
        assert_eq!(state("c2"), (Replication::Replicated, "site-b".into(), None));
        assert_eq!(state("c3"), (Replication::NotNeeded, String::new(), None));
        assert!(s.list::<String>(Tree::Replications).unwrap().is_empty());
    }
}
