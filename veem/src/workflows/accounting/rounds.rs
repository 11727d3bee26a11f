//! What one host's metering round writes (issue 55, item 7): the usage
//! records of the VEEs it runs for this site in one value of the `usage`
//! tree ([`HostRound`], key [`round_key`]), and the counters they end at in
//! one value of the `meters` tree ([`HostMeters`], key [`meters_key`]),
//! rather than one value per VEE of each: at 100,000 VEEs a round wrote
//! 200,000 values. Records of VEEs run for a peer stay one value each
//! (each goes to its primary from the outbox by its ID).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::metrics::Counters;
use crate::model::UsageRec;

/// The format of [`HostRound`] and [`HostMeters`] values this version
/// writes (`format` field); a newer one is refused, never misread.
pub const ROUND_FORMAT: u32 = 1;

/// The prefix of a [`HostRound`]'s key in the usage tree (record IDs are
/// UUIDs: no record's key starts with it).
pub const ROUND_PREFIX: &str = "round/";
/// The prefix of a [`HostMeters`]' key in the meters tree (the other keys
/// are VEE IDs, the per-VEE meters of VEEMs before it, read on).
pub const METERS_PREFIX: &str = "host/";

/// A new usage tree key for host `host`'s round at `at_ms` (Unix ms): in
/// the host's rounds' order, with a random suffix, so that two rounds in
/// the same millisecond (a clock that stands still, two VEEMs across a
/// takeover) are two values.
pub fn round_key(host: &str, at_ms: i64) -> String {
    format!("{ROUND_PREFIX}{host}/{at_ms:016}-{}", uuid::Uuid::new_v4().simple())
}

/// The meters tree's key of host `host`'s latest counters.
pub fn meters_key(host: &str) -> String {
    format!("{METERS_PREFIX}{host}")
}

/// One VEE's usage over one interval, as a [`HostRound`] holds it (its
/// site is the round's, its record ID the round's key and its VEE ID).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundEntry {
    pub vee_id: String,
    /// The service's ID (ABC ID).
    pub abc_id: String,
    /// The interval, Unix s.
    pub start_unix: i64,
    pub end_unix: i64,
    /// CPU seconds used over the interval.
    pub cpu_seconds: f64,
    /// MiB in use times seconds.
    pub memory_mib_seconds: f64,
    /// Bytes read and written, received and sent.
    pub disk_bytes: u64,
    pub net_bytes: u64,
}

/// The usage records one host's metering round wrote for this site's own
/// VEEs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostRound {
    /// [`ROUND_FORMAT`].
    pub format: u32,
    /// The site that metered them (each record's site chain).
    pub site_id: String,
    pub records: Vec<RoundEntry>,
}

impl RoundEntry {
    /// The entry of usage record `r` (its IDs moved, not copied).
    pub fn of(r: UsageRec) -> Self {
        Self {
            vee_id: r.vee_id,
            abc_id: r.abc_id,
            start_unix: r.start_unix,
            end_unix: r.end_unix,
            cpu_seconds: r.cpu_seconds,
            memory_mib_seconds: r.memory_mib_seconds,
            disk_bytes: r.disk_bytes,
            net_bytes: r.net_bytes,
        }
    }
}

impl HostRound {
    /// The usage records of the round stored under `key`, as one value
    /// each would be: record ID `<key>/<VEE ID>`, sent (nothing to push).
    pub fn records(self, key: &str) -> impl Iterator<Item = UsageRec> + '_ {
        let site = self.site_id;
        self.records.into_iter().map(move |e| UsageRec {
            record_id: format!("{key}/{}", e.vee_id),
            abc_id: e.abc_id,
            vee_id: e.vee_id,
            site_chain: vec![site.clone()],
            start_unix: e.start_unix,
            end_unix: e.end_unix,
            cpu_seconds: e.cpu_seconds,
            memory_mib_seconds: e.memory_mib_seconds,
            disk_bytes: e.disk_bytes,
            net_bytes: e.net_bytes,
            sent: true,
            kpis: Default::default(),
        })
    }
}

/// A stored usage round, usage record or host's meters that does not
/// read: not its JSON, or of a newer format than this VEEM's.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{what}: {source}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Format(#[from] interfaces::Error),
}

impl DecodeError {
    fn json(what: String) -> impl FnOnce(serde_json::Error) -> DecodeError {
        move |source| DecodeError::Json { what, source }
    }
}

impl From<DecodeError> for crate::store::StoreError {
    fn from(e: DecodeError) -> Self {
        crate::store::StoreError::Failed(e.into())
    }
}

/// Every usage record a value of the usage tree holds: a [`HostRound`]'s
/// (key with [`ROUND_PREFIX`]) or one record. Errors: a value that does
/// not decode, a round of a newer format.
pub fn decode_usage(key: &str, raw: &[u8], out: &mut Vec<UsageRec>) -> Result<(), DecodeError> {
    if key.starts_with(ROUND_PREFIX) {
        let round: HostRound = serde_json::from_slice(raw).map_err(DecodeError::json(format!("usage round {key}")))?;
        interfaces::Error::check_format(format!("usage round {key}"), round.format, ROUND_FORMAT)?;
        out.extend(round.records(key));
    } else {
        out.push(serde_json::from_slice(raw).map_err(DecodeError::json(format!("usage record {key}")))?);
    }
    Ok(())
}

/// Counters by VEE ID.
pub type Vees = BTreeMap<String, Counters>;

/// The counters of a host's VEEs at its latest metering round: what the
/// next round's records start from (also at a VEEM that takes over).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostMeters {
    /// [`ROUND_FORMAT`].
    pub format: u32,
    /// By VEE ID.
    pub vees: Vees,
}

impl HostMeters {
    /// The meters of host `host` stored as `raw`. Errors: a value that
    /// does not decode, a newer format.
    pub fn decode(host: &str, raw: &[u8]) -> Result<Self, DecodeError> {
        let m: HostMeters = serde_json::from_slice(raw).map_err(DecodeError::json(format!("meters of host {host}")))?;
        interfaces::Error::check_format(format!("meters of host {host}"), m.format, ROUND_FORMAT)?;
        Ok(m)
    }

    /// VEE `vee`'s counters, if it has a meter here.
    pub fn counters(&self, vee: &str) -> Option<Counters> {
        self.vees.get(vee).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(vee: &str) -> RoundEntry {
        RoundEntry {
            vee_id: vee.into(),
            abc_id: "svc".into(),
            start_unix: 100,
            end_unix: 110,
            cpu_seconds: 1.5,
            memory_mib_seconds: 5120.0,
            disk_bytes: 7,
            net_bytes: 9,
        }
    }

    #[test]
    fn a_rounds_records_read_as_one_value_each_would() {
        let key = round_key("h1", 110_000);
        let round = HostRound {
            format: ROUND_FORMAT,
            site_id: "site-a".into(),
            records: vec![entry("v1"), entry("v2")],
        };
        let single = UsageRec {
            record_id: "r0".into(),
            site_chain: vec!["site-b".into(), "site-a".into()],
            ..round.clone().records(&key).next().unwrap()
        };
        let mut out = Vec::new();
        decode_usage(&key, &serde_json::to_vec(&round).unwrap(), &mut out).unwrap();
        decode_usage("r0", &serde_json::to_vec(&single).unwrap(), &mut out).unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].record_id, format!("{key}/v1"));
        assert_eq!(out[1].vee_id, "v2");
        assert_eq!((out[0].site_chain.clone(), out[0].sent), (vec!["site-a".to_string()], true));
        assert_eq!(RoundEntry::of(out[0].clone()), entry("v1"));
        assert_eq!(out[2], single);
    }

    #[test]
    fn a_newer_round_or_meters_value_is_refused() {
        let key = round_key("h1", 1);
        let round = HostRound {
            format: ROUND_FORMAT + 1,
            site_id: "site-a".into(),
            records: vec![],
        };
        let err = decode_usage(&key, &serde_json::to_vec(&round).unwrap(), &mut Vec::new()).unwrap_err();
        assert!(format!("{err:#}").contains("newer"), "{err:#}");
        let meters = HostMeters {
            format: ROUND_FORMAT + 1,
            ..Default::default()
        };
        assert!(HostMeters::decode("h1", &serde_json::to_vec(&meters).unwrap()).is_err());
    }
}
