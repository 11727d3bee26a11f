//! Usage records (E PII §V, Req. 1): the executing site meters each VEE
//! through its VEEH's Stats every `usage_interval` and writes usage
//! records (CPU s, MiB·s, disk and network bytes over the interval). Records
//! of VEEs run for a peer go back to the primary site, stamped with this
//! site's ID; the primary appends its own ID and drops duplicates by record
//! ID. Records survive restarts.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;

use interfaces::vhi;

use crate::config::UsageLimitEntry;
use crate::core::Core;
use crate::domain::peer::UsageReceipt;
use crate::model::{ServiceRec, UsageRec, ViolationRec};
use crate::planner::{ConsumerUsage, Resources, SlotRange};
use crate::store::{StoreError, Tree};

mod metering;
pub mod metrics;
mod push;
pub(crate) mod rounds;

pub use push::PushError;

/// The previous metering round of one VEE (its counters and host).
pub(crate) type Last = metrics::Meter;

/// Each VEE's previous counters, by host and VEE ID, kept by the metering
/// loop between rounds: a host's turn replaces that host's meters as a
/// whole (what it wrote), so a turn touches its own hosts' meters only,
/// not those of every VEE. foldhash rather than SipHash (the keys are this
/// site's host names and VEE IDs).
#[derive(Default)]
pub(crate) struct LastMeters(foldhash::HashMap<String, rounds::Vees>);

impl LastMeters {
    /// VEE `vee`'s counters at its last round on host `host`.
    fn get(&self, host: &str, vee: &str) -> Option<metrics::Counters> {
        self.0.get(host)?.get(vee).copied()
    }

    /// How many VEEs have a meter.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.values().map(|v| v.len()).sum()
    }

    /// Whether VEE `vee` has a meter, on any host.
    pub(crate) fn has(&self, vee: &str) -> bool {
        self.0.values().any(|v| v.contains_key(vee))
    }
}

/// How far a peer's usage record may reach outside the VEE's stay there
/// (s): the two sites' clocks and the hand-over of the VEE between them.
pub const USAGE_SLACK_S: i64 = 60;

/// Average use over the `window_s` seconds before `now_unix` from usage
/// records: vCPUs = CPU seconds / window, MiB = MiB·s / window, each rounded
/// to the nearest unit; a record that overlaps the window only in part
/// counts in proportion. Disk is not metered as a rate here (0 GiB).
pub fn average_use(records: &[UsageRec], now_unix: i64, window_s: u64) -> Resources {
    let window = window_s.max(1) as f64;
    let from = now_unix - window_s as i64;
    let (mut cpu, mut mib) = (0.0, 0.0);
    for u in records {
        let overlap = (u.end_unix.min(now_unix) - u.start_unix.max(from)) as f64;
        let length = (u.end_unix - u.start_unix) as f64;
        let share = if length <= 0.0 {
            f64::from(u8::from(u.end_unix > from && u.end_unix <= now_unix))
        } else {
            (overlap / length).clamp(0.0, 1.0)
        };
        cpu += u.cpu_seconds * share;
        mib += u.memory_mib_seconds * share;
    }
    Resources::new((cpu / window).round() as u32, (mib / window).round() as u64, 0)
}

/// A consumer's usage SLA as configured (`[usage_limits]`), with what it
/// holds in the current slot and, for a commitment, the metered averages
/// (H §3.4-3.6): what ListUsageLimits shows.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageLimitView {
    /// The service provider's name or the peer site's ID.
    pub consumer: String,
    pub limit: UsageLimitEntry,
    /// Reserved for the consumer in the current slot.
    pub held: Resources,
    /// A commitment's metered averages over its epoch and its burst
    /// window (EA_i, BA_i); zero for the other kinds.
    pub epoch_avg: Resources,
    pub burst_avg: Resources,
}

/// A service's usage and its SLA violations (the VMI's GetUsage).
#[derive(Clone, Debug, Default)]
pub struct UsageReport {
    /// Metered here and received from peers, by start then VEE.
    pub records: Vec<UsageRec>,
    pub violations: Vec<ViolationRec>,
}

/// The accounting workflow (see the module doc): usage records metered
/// here, pushed to primary sites, received from peers, and the consumers'
/// averages for their usage SLAs. Calls only the core.
pub struct Accounting {
    core: Arc<Core>,
    /// Each VEE's latest metrics (elasticity rules watch them).
    pub samples: metrics::Samples,
}

impl Deref for Accounting {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Accounting {
    pub fn new(core: Arc<Core>) -> Self {
        Self {
            core,
            samples: Default::default(),
        }
    }

    /// One accounting round (see the module doc): meter, update the
    /// consumers' averages, push usage records to their primary sites.
    /// `last` holds each VEE's previous counters between rounds. Every
    /// host is metered (tests; the loop paces them: [`Accounting::paced_round`]).
    #[cfg(test)]
    pub(crate) async fn round(&self, last: &mut LastMeters) {
        self.round_of(last, None, true).await
    }

    /// [`Accounting::round`] metering only the next hosts in turn from
    /// `cursor` on, as many as `max_heartbeats_per_second` allows a round
    /// ([`crate::hosts::pacing`]): a large site meters each host every
    /// max(`usage_interval`, hosts / that rate) rather than calling every
    /// host every `usage_interval`.
    pub(crate) async fn paced_round(&self, last: &mut LastMeters, cursor: &mut usize) {
        let names = self.hosts.names();
        let every = self.cfg.usage_interval.max(std::time::Duration::from_secs(1));
        let per_round = crate::hosts::pacing::Pacing::new(names.len(), every, self.cfg.max_heartbeats_per_second).per_round;
        let turn = crate::hosts::pacing::turn(&names, cursor, per_round);
        // The turn that starts a cycle over the hosts sweeps the meters.
        let sweep = names.first().is_some_and(|first| turn.contains(first));
        self.round_of(last, Some(turn.into_iter().collect()), sweep).await
    }

    /// A round metering the hosts `only` (all configured ones: `None`),
    /// sweeping the meters of VEEs metered nowhere when `sweep`.
    async fn round_of(&self, last: &mut LastMeters, only: Option<foldhash::HashSet<String>>, sweep: bool) {
        if let Err(e) = self.meter_round(last, only.as_ref(), sweep).await {
            tracing::warn!(error = %format!("{e:#}"), "metering round failed");
        }
        if let Err(e) = self.update_consumer_usage() {
            tracing::warn!(error = %format!("{e:#}"), "consumer usage averages not updated");
        }
        if let Err(e) = self.push_usage().await {
            tracing::warn!(error = %format!("{e:#}"), "usage push failed; will retry");
        }
    }

    /// Feeds the planner the metered averages (EA_i over T_epoch, BA_i over
    /// T_burst) of every consumer with a commitment usage SLA (D §3.3),
    /// from the usage records of what ran at this site. Consumers without
    /// such a limit cost nothing here.
    pub fn update_consumer_usage(&self) -> std::result::Result<(), StoreError> {
        let windows: Vec<(&String, u64, u64)> = self
            .cfg
            .usage_limits
            .iter()
            .filter_map(|(name, l)| l.windows_s().map(|(e, b)| (name, e, b)))
            .collect();
        if windows.is_empty() {
            return Ok(());
        }
        let providers: HashMap<String, String> = self
            .store
            .list::<ServiceRec>(Tree::Services)?
            .into_iter()
            .map(|s| (s.id, s.provider))
            .collect();
        let consumer_of = |u: &UsageRec| -> Option<String> {
            match self.vee(&u.vee_id) {
                Ok(v) => v.for_peer.or_else(|| providers.get(&v.service_id).cloned()),
                Err(_) => providers.get(&u.abc_id).cloned(),
            }
        };
        let mut by_consumer: HashMap<String, Vec<UsageRec>> = HashMap::new();
        for u in self.usage_records()? {
            if u.site_chain.first() != Some(&self.cfg.site_id) {
                continue; // used at another site: not this site's capacity
            }
            if let Some(c) = consumer_of(&u) {
                by_consumer.entry(c).or_default().push(u);
            }
        }
        let now = self.clock.now();
        let mut p = self.planner.lock().unwrap();
        for (name, epoch_s, burst_s) in windows {
            let recs = by_consumer.get(name).map_or(&[][..], Vec::as_slice);
            p.record_consumer_usage(
                name,
                ConsumerUsage {
                    epoch_avg: average_use(recs, now, epoch_s),
                    burst_avg: average_use(recs, now, burst_s),
                },
            );
        }
        Ok(())
    }

    /// The configured usage SLAs of the consumers `visible` admits, in name
    /// order, with what each holds in the current slot and, for commitment
    /// limits, the latest metered averages.
    pub fn usage_limits(&self, visible: impl Fn(&str) -> bool) -> Vec<UsageLimitView> {
        let now = self.now_slot();
        let p = self.planner.lock().unwrap();
        self.cfg
            .usage_limits
            .iter()
            .filter(|(name, _)| visible(name))
            .map(|(name, l)| {
                let snapshot = p.usage_snapshot(name, SlotRange::new(now, now + 1));
                let commitment = matches!(l, UsageLimitEntry::Commitment { .. });
                UsageLimitView {
                    consumer: name.clone(),
                    limit: l.clone(),
                    held: snapshot.held,
                    epoch_avg: if commitment {
                        snapshot.measured.epoch_avg
                    } else {
                        Resources::default()
                    },
                    burst_avg: if commitment {
                        snapshot.measured.burst_avg
                    } else {
                        Resources::default()
                    },
                }
            })
            .collect()
    }

    /// Primary side of PushUsage: stores the records from peer `from` that
    /// pass [`Accounting::usage_refusal`](Accounting::usage_refusal), appending this site's ID to each
    /// chain; a record ID seen before is dropped. `records` are as the
    /// peer sent them, or (record ID, why) for one the wire could not
    /// read, refused with that reason. Returns the receipt: accepted,
    /// duplicates, refused with a reason each.
    pub fn receive_usage(
        &self,
        from: &str,
        records: Vec<std::result::Result<UsageRec, (String, String)>>,
    ) -> std::result::Result<UsageReceipt, StoreError> {
        let mut reply = UsageReceipt::default();
        let now = self.clock.now();
        for r in records {
            let checked = r.and_then(|rec| match self.usage_refusal(from, &rec, now) {
                Some(why) => Err((rec.record_id.clone(), why)),
                None => Ok(rec),
            });
            let mut rec = match checked {
                Ok(rec) => rec,
                Err((id, why)) => {
                    tracing::warn!(site = %from, record = %id, reason = %why, "usage record refused");
                    reply.refused += 1;
                    reply.reasons.push(format!("usage record {id:?}: {why}"));
                    continue;
                }
            };
            rec.site_chain.push(self.cfg.site_id.clone());
            // Stored here at its primary: nothing to push on.
            rec.sent = true;
            // Only the KPIs that check (a NaN has no JSON to be stored as).
            rec.kpis.retain(|name, (value, _)| metrics::kpi_ok(name, *value));
            if self.store.put_new(Tree::Usage, &rec.record_id, &rec)? {
                self.peer_metrics(from, &rec);
                reply.accepted += 1;
            } else {
                reply.duplicates += 1;
            }
        }
        Ok(reply)
    }

    /// The metrics of a VEE running at peer `from`, from its usage record
    /// `rec` (accepted): its CPU utilization and memory over the interval,
    /// and the KPIs its guest reported there (checked as a VEEH's are), as
    /// its latest sample when newer than the one kept (at most one a
    /// second: a peer's burst does not churn them). Logs how long ago the
    /// guest's reports were read there.
    fn peer_metrics(&self, from: &str, rec: &UsageRec) {
        let at_ms = rec.end_unix * 1000;
        if self.samples.latest(&rec.vee_id).is_some_and(|s| at_ms < s.at_ms + 1000) {
            return;
        }
        let Ok(v) = self.vee(&rec.vee_id) else { return };
        let secs = (rec.end_unix - rec.start_unix).max(1) as f64;
        let mut values: metrics::Values = vec![
            (
                "cpu_utilization".into(),
                (rec.cpu_seconds / secs / f64::from(v.vcpus.max(1))).clamp(0.0, 1.0),
            ),
            ("memory_used".into(), rec.memory_mib_seconds / secs),
        ];
        let kpis: Vec<vhi::Kpi> = rec
            .kpis
            .iter()
            .map(|(name, (value, read_ms))| vhi::Kpi {
                name: name.clone(),
                value: *value,
                time: interfaces::time::timestamp_ms(*read_ms),
            })
            .collect();
        metrics::add_kpis(&mut values, &kpis);
        if let Some(oldest) = rec.kpis.values().map(|(_, read_ms)| *read_ms).min() {
            let delay_ms = self.clock.now_ms() - oldest;
            tracing::info!(vee = %rec.vee_id, site = %from, kpis = rec.kpis.len(), delay_ms, "KPIs from a peer site");
        }
        self.samples.record(&rec.vee_id, at_ms, values);
    }

    /// Why usage record `r` from peer `from` is refused at `now` (Unix
    /// seconds), or `None`: a peer's word is checked, never trusted. The
    /// record must name a VEE of this site's, of the service it names,
    /// that ran at `from` over the record's interval (one of its stays
    /// there, give or take [`USAGE_SLACK_S`]); its chain starts at `from`;
    /// its values are finite, non-negative, and no more than the VEE's
    /// vCPUs and memory give over the interval (plus 2 s for the rounding
    /// of its ends to whole seconds).
    pub fn usage_refusal(&self, from: &str, r: &UsageRec, now: i64) -> Option<String> {
        if r.record_id.is_empty() || r.record_id.len() > 128 {
            return Some("field `record_id`: must be 1 to 128 characters".into());
        }
        if r.site_chain.first().map(String::as_str) != Some(from) || r.site_chain.len() > 16 {
            return Some(format!(
                "field `site_chain`: must start with the sending site {from} (at most 16 sites)"
            ));
        }
        if r.kpis.len() > metrics::MAX_KPIS {
            return Some(format!("field `kpis`: {} KPIs; at most {}", r.kpis.len(), metrics::MAX_KPIS));
        }
        for (field, x) in [("cpu_seconds", r.cpu_seconds), ("memory_mib_seconds", r.memory_mib_seconds)] {
            if !x.is_finite() || x < 0.0 {
                return Some(format!("field `{field}`: {x} is not a finite, non-negative number"));
            }
        }
        let (start, end) = (r.start_unix, r.end_unix);
        if end < start || end > now + USAGE_SLACK_S {
            return Some(format!(
                "fields `start_time`, `end_time`: {start}..{end} is not an interval up to now"
            ));
        }
        let Some(v) = self
            .vee(&r.vee_id)
            .ok()
            .filter(|v| v.for_peer.is_none() && v.service_id == r.abc_id)
        else {
            return Some(format!(
                "fields `vee_id`, `abc_id`: no VEE {} of service {} here",
                r.vee_id, r.abc_id
            ));
        };
        let ran_there = v
            .stays
            .iter()
            .any(|s| s.site == from && s.from_unix - USAGE_SLACK_S <= start && end <= s.until_unix.unwrap_or(now) + USAGE_SLACK_S);
        if !ran_there {
            return Some(format!("VEE {} did not run at {from} from {start} to {end}", r.vee_id));
        }
        let seconds = (end - start + 2) as f64;
        if r.cpu_seconds > f64::from(v.vcpus) * seconds {
            return Some(format!(
                "field `cpu_seconds`: {} is more than {} vCPUs give in {seconds} s",
                r.cpu_seconds, v.vcpus
            ));
        }
        if r.memory_mib_seconds > v.memory_mib as f64 * seconds {
            return Some(format!(
                "field `memory_mib_seconds`: {} is more than {} MiB over {seconds} s",
                r.memory_mib_seconds, v.memory_mib
            ));
        }
        None
    }

    /// Every usage record of the usage tree, a host round's
    /// ([`rounds::HostRound`]) one by one, in key order.
    pub fn usage_records(&self) -> std::result::Result<Vec<UsageRec>, StoreError> {
        let mut all = Vec::new();
        self.store
            .scan(Tree::Usage, |key, raw| Ok(rounds::decode_usage(key, raw, &mut all)?))?;
        Ok(all)
    }

    /// Local and remote usage of a service, and its SLA violations.
    pub fn usage_report(&self, service_id: &str) -> std::result::Result<UsageReport, StoreError> {
        let mut records: Vec<UsageRec> = self.usage_records()?.into_iter().filter(|u| u.abc_id == service_id).collect();
        records.sort_by_key(|u| (u.start_unix, u.vee_id.clone()));
        let violations: Vec<ViolationRec> = self
            .store
            .list::<ViolationRec>(Tree::Violations)?
            .into_iter()
            .filter(|v| v.service_id == service_id)
            .collect();
        Ok(UsageReport { records, violations })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(start: i64, end: i64, cpu: f64, mib_s: f64) -> UsageRec {
        UsageRec {
            record_id: format!("{start}"),
            abc_id: "svc".into(),
            vee_id: "v".into(),
            site_chain: vec!["site-a".into()],
            start_unix: start,
            end_unix: end,
            cpu_seconds: cpu,
            memory_mib_seconds: mib_s,
            disk_bytes: 0,
            net_bytes: 0,
            sent: true,
            kpis: Default::default(),
        }
    }

    /// A VEEM that takes over meters on from the previous leader's last
    /// round: its first usage record starts where the previous leader's
    /// last one ended, so no interval goes unrecorded (issue 52); a VEE
    /// that stops leaves no meter behind.
    #[tokio::test]
    async fn usage_records_stay_continuous_across_a_takeover() {
        let site = crate::sim::FakeSite::start(&["h1"], "").await;
        let vee = site.running_service(crate::sim::STANDARD).remove(0);
        let records = |veem: &crate::manager::Veem| {
            let mut r: Vec<UsageRec> = veem.accounting.usage_records().unwrap();
            r.retain(|r| r.vee_id == vee);
            r.sort_by_key(|r| r.start_unix);
            r
        };
        let pause = || tokio::time::sleep(std::time::Duration::from_millis(1100));
        let mut leader = LastMeters::default();
        site.veem.accounting.round(&mut leader).await;
        pause().await;
        site.veem.accounting.round(&mut leader).await;
        let before = records(&site.veem);
        assert_eq!(before.len(), 1, "{before:?}");
        // The standby takes over with nothing in memory.
        let next = site.another_veem();
        pause().await;
        next.accounting.round(&mut LastMeters::default()).await;
        let after = records(&next);
        assert_eq!(after.len(), 2, "the first round of the next leader records: {after:?}");
        assert_eq!(after[1].start_unix, after[0].end_unix, "no gap: {after:?}");
        assert!(after[1].end_unix > after[1].start_unix, "{after:?}");
        // Stopped: its meter goes, and a start is not charged for the stop.
        next.stop.stop_here(&vee).await.unwrap();
        next.accounting.round(&mut LastMeters::default()).await;
        assert_eq!(next.core.store.get::<Last>(Tree::Meters, &vee).unwrap(), None);
        assert_eq!(next.core.store.get_raw(Tree::Meters, &rounds::meters_key("h1")).unwrap(), None);
    }

    /// A VEEM of format 5 kept a meter per VEE: the first round after the
    /// upgrade meters on from it, and the VEE's meter then lives in its
    /// host's.
    #[tokio::test]
    async fn a_per_vee_meter_of_before_is_metered_on_from() {
        let site = crate::sim::FakeSite::start(&["h1"], "").await;
        let vee = site.running_service(crate::sim::STANDARD).remove(0);
        let at_ms = chrono::Utc::now().timestamp_millis() - 10_000;
        let old = Last {
            host: "h1".into(),
            counters: metrics::Counters {
                at_ms,
                ..Default::default()
            },
        };
        site.veem.core.store.put(Tree::Meters, &vee, &old).unwrap();
        site.veem.accounting.round(&mut LastMeters::default()).await;
        let recs: Vec<UsageRec> = site.veem.accounting.usage_records().unwrap();
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!((recs[0].vee_id.as_str(), recs[0].start_unix), (vee.as_str(), at_ms / 1000));
        assert_eq!(
            site.veem.core.store.get::<Last>(Tree::Meters, &vee).unwrap(),
            None,
            "moved into its host's"
        );
        let raw = site
            .veem
            .core
            .store
            .get_raw(Tree::Meters, &rounds::meters_key("h1"))
            .unwrap()
            .unwrap();
        assert!(rounds::HostMeters::decode("h1", &raw).unwrap().vees.contains_key(&vee));
    }

    #[test]
    fn average_use_counts_what_falls_in_the_window() {
        // Two vCPUs busy and 512 MiB held for the last 100 s of a 200 s window.
        let recs: Vec<UsageRec> = (0..10).map(|i| rec(900 + i * 10, 910 + i * 10, 20.0, 5120.0)).collect();
        assert_eq!(average_use(&recs, 1000, 100), Resources::new(2, 512, 0));
        assert_eq!(average_use(&recs, 1000, 200), Resources::new(1, 256, 0));
        // Half of the oldest record falls in a 95 s window.
        assert_eq!(average_use(&recs[..1], 1000, 95), Resources::new(0, 27, 0));
        // Records after `now` or before the window do not count.
        assert_eq!(average_use(&recs, 900, 100), Resources::ZERO);
        assert_eq!(average_use(&[], 1000, 100), Resources::ZERO);
    }

    #[test]
    fn a_commitment_limit_is_fed_with_the_averages_of_what_ran_here() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::VeemConfig::parse(&format!(
            "site_id = \"site-a\"\nlisten = \"127.0.0.1:1\"\ndb = \"{}\"\nimage_repo = \"http://127.0.0.1:1\"\n\
             [usage_limits.acme]\nkind = \"commitment\"\nepoch_limit = {{ vcpus = 4, memory_mib = 4096, disk_gib = 40 }}\nepoch = \"400s\"\n\
             burst_limit = {{ vcpus = 8, memory_mib = 8192, disk_gib = 80 }}\nburst = \"100s\"\n",
            dir.path().join("db").display()
        ))
        .unwrap();
        let veem = crate::manager::Veem::open(cfg).unwrap();
        let service = ServiceRec {
            id: "svc".into(),
            name: "shop".into(),
            provider: "acme".into(),
            manifest_toml: String::new(),
            terms: None,
            guarantee: interfaces::manifest::GuaranteeLevel::Standard,
            penalty_per_hour: 0.0,
            created_ms: 0,
            vees: vec![],
            for_peer: None,
            networks: vec![],
            anchor: None,
        };
        veem.core.store.put(Tree::Services, "svc", &service).unwrap();
        let now = chrono::Utc::now().timestamp();
        // The last 100 s: 2 vCPUs busy, 512 MiB held, metered here.
        for i in 0..10 {
            let r = rec(now - 100 + i * 10, now - 90 + i * 10, 20.0, 5120.0);
            veem.core.store.put(Tree::Usage, &r.record_id, &r).unwrap();
        }
        // Used at site B: not this site's capacity.
        let mut remote = rec(now - 50, now - 40, 1000.0, 1e6);
        remote.record_id = "remote".into();
        remote.site_chain = vec!["site-b".into(), "site-a".into()];
        veem.core.store.put(Tree::Usage, "remote", &remote).unwrap();

        veem.accounting.update_consumer_usage().unwrap();
        let p = veem.core.planner.lock().unwrap();
        let measured = p.usage_snapshot("acme", crate::planner::SlotRange::new(0, 1)).measured;
        assert_eq!(measured.burst_avg, Resources::new(2, 512, 0));
        assert_eq!(measured.epoch_avg, Resources::new(1, 128, 0), "the same use spread over 400 s");
        assert_eq!(
            p.usage_snapshot("globex", crate::planner::SlotRange::new(0, 1)).measured,
            ConsumerUsage::default()
        );
    }
}
