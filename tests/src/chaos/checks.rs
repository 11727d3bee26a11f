//! The checks of a chaos round, once the site settled (see the parent
//! module's doc): the operator's view of VEEs and migrations, one leader,
//! no VEE lost, doubled or stuck, usage records without a gap.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use interfaces::vmi::{MigrationState, VeeInfo, VeeState};

use super::{Lab, Round, METERED, SETTLE};

/// How long a VEE or a migration may stay transitional before it counts
/// as stuck: a migration of the tiny guest takes seconds.
const STUCK: Duration = Duration::from_secs(60);
use crate::ha::list;
use crate::site::{host_of, OPERATOR};

impl Lab {
    /// The operator's view of the VEEs, from whichever VEEM leads.
    pub(super) async fn vees(&self) -> Option<Vec<VeeInfo>> {
        for (v, ..) in &self.veems {
            if let Ok(l) = list(v).await {
                return Some(l);
            }
        }
        None
    }

    /// The open migrations (approved or running) the leader records.
    async fn open_migrations(&self) -> Option<Vec<String>> {
        let l = self.leader().await?;
        let mut op = crate::ha::client(&self.veems[l].0.endpoint, OPERATOR).await.ok()?;
        let all = op
            .list_migrations(interfaces::vmi::ListMigrationsRequest::default())
            .await
            .ok()?
            .into_inner()
            .migrations;
        Some(
            all.into_iter()
                .filter(|m| matches!(m.state(), MigrationState::Approved | MigrationState::Running))
                .map(|m| format!("migration {} of VEE {} {}", m.migration_id, m.vee_id, m.state().as_str_name()))
                .collect(),
        )
    }

    /// Once the site settled ([`SETTLE`] at most): the round's checks
    /// (see the module doc) into `round`.
    pub(super) async fn check(&self, round: &mut Round, since: Instant) {
        let transitional = |i: &VeeInfo| {
            matches!(
                i.state(),
                VeeState::Checkpointing | VeeState::Migrating | VeeState::Deploying | VeeState::Recovering
            )
        };
        // Since when each transitional VEE or open migration has been so
        // (a scheduled checkpoint is one for a second or so).
        let mut streaks: HashMap<String, Instant> = HashMap::new();
        let vees = loop {
            let vees = self.vees().await;
            let open = self.open_migrations().await;
            let mut now: Vec<String> = vees
                .iter()
                .flatten()
                .filter(|i| transitional(i))
                .map(|i| format!("VEE {} {}", i.vee_id, i.state().as_str_name()))
                .collect();
            now.extend(open.clone().unwrap_or_default());
            let at_b = self.b.stuck().await;
            now.extend(at_b.clone().unwrap_or_else(|| vec!["site B does not answer".into()]));
            streaks.retain(|k, _| now.contains(k));
            for k in now {
                streaks.entry(k).or_insert_with(Instant::now);
            }
            if vees.is_some() && open.is_some() && at_b.is_some() && streaks.is_empty() || since.elapsed() > SETTLE {
                break vees.unwrap_or_default();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let mut stuck: Vec<String> = streaks
            .into_iter()
            .filter(|(_, from)| from.elapsed() >= STUCK)
            .map(|(k, from)| format!("{k} for {:.0} s", from.elapsed().as_secs_f64()))
            .collect();
        stuck.sort();
        round.stuck = stuck;
        round.leaders = self.leaders().await;
        // Where each VEE's domain runs; what the records say.
        let mut runs: HashMap<String, Vec<String>> = HashMap::new();
        for h in self.hosts.iter().chain([&self.b.host]) {
            for d in h.domains().await {
                runs.entry(d.vee_id).or_default().push(h.host.clone());
            }
        }
        for (vee, on) in &runs {
            if on.len() > 1 {
                round.doubled.push(format!("VEE {vee} runs on {on:?}"));
            }
        }
        for i in vees.iter().filter(|i| i.state() == VeeState::Running) {
            let Some(host) = host_of(i) else { continue };
            if !runs.get(&i.vee_id).is_some_and(|on| on.contains(&host)) {
                round.lost.push(format!(
                    "VEE {} recorded running on {host}, its domain on {:?}",
                    i.vee_id,
                    runs.get(&i.vee_id)
                ));
            }
        }
        let a_hosts: Vec<String> = self.hosts.iter().map(|h| h.host.clone()).collect();
        let on = runs.get(&self.b.vee).cloned().unwrap_or_default();
        round.lost.extend(self.b.lost(&on, &a_hosts).await);
    }

    /// The gaps in the usage records of each VEE that ran on one host
    /// from `before` (the VEEs when the round began, at `from_unix`) to
    /// now and was not in `migrated`: from when the round began (or its
    /// first record) to [`METERED`] ago, the records must leave no second
    /// unrecorded. Also how many VEEs' records it checked.
    pub(super) async fn usage_gaps(&self, before: &[VeeInfo], migrated: &HashSet<String>, from_unix: i64) -> (Vec<String>, usize) {
        let Some(l) = self.leader().await else {
            return (vec!["no leader to ask for usage".into()], 0);
        };
        let Some(after) = self.vees().await else {
            return (vec!["no leader to ask for usage".into()], 0);
        };
        let was: HashMap<&str, &VeeInfo> = before.iter().map(|i| (i.vee_id.as_str(), i)).collect();
        let steady: Vec<&VeeInfo> = after
            .iter()
            .filter(|i| i.state() == VeeState::Running && !migrated.contains(&i.vee_id))
            .filter(|i| {
                was.get(i.vee_id.as_str())
                    .is_some_and(|b| b.state() == VeeState::Running && b.location == i.location)
            })
            .collect();
        let until = chrono::Utc::now().timestamp() - METERED.as_secs() as i64;
        let (mut gaps, mut checked) = (Vec::new(), 0);
        let Ok(mut op) = crate::ha::client(&self.veems[l].0.endpoint, OPERATOR).await else {
            return (vec!["the leader does not answer GetUsage".into()], 0);
        };
        let services: HashSet<&str> = steady.iter().map(|i| i.service_id.as_str()).collect();
        for service in services {
            let records = match op
                .get_usage(interfaces::vmi::GetUsageRequest {
                    service_id: service.to_string(),
                })
                .await
            {
                Ok(u) => u.into_inner().records,
                Err(e) => {
                    gaps.push(format!("usage of service {service}: {}", e.message()));
                    continue;
                }
            };
            for vee in steady.iter().filter(|i| i.service_id == service) {
                let spans: Vec<(i64, i64)> = records
                    .iter()
                    .filter(|r| r.vee_id == vee.vee_id)
                    .map(|r| {
                        let s = |t: &Option<interfaces::time::Timestamp>| t.as_ref().map_or(0, |t| t.seconds);
                        (s(&r.start_time), s(&r.end_time))
                    })
                    .collect();
                checked += usize::from(!spans.is_empty());
                for (from, to) in unrecorded(spans, from_unix, until) {
                    gaps.push(format!("VEE {}: no usage record from {from} to {to} (Unix s)", vee.vee_id));
                }
            }
        }
        (gaps, checked)
    }
}

/// The stretches of `[from, until]` (Unix s) that no span of `spans`
/// (usage records' `[start, end]`) covers, from the first span's start
/// on when it is later than `from` (a VEE metered for the first time).
fn unrecorded(mut spans: Vec<(i64, i64)>, from: i64, until: i64) -> Vec<(i64, i64)> {
    spans.sort();
    let Some(first) = spans.first() else {
        return vec![];
    };
    let mut covered = from.max(first.0);
    let mut gaps = Vec::new();
    for (start, end) in spans {
        if end <= covered {
            continue;
        }
        if start > covered {
            gaps.push((covered, start));
        }
        covered = end;
    }
    if covered < until {
        gaps.push((covered, until));
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::unrecorded;

    #[test]
    fn a_stretch_no_usage_record_covers_is_a_gap() {
        let chained = vec![(97, 100), (100, 103), (103, 106), (106, 109)];
        assert_eq!(unrecorded(chained.clone(), 100, 108), vec![]);
        // The next leader's first round recorded nothing (issue 52).
        let takeover = vec![(97, 100), (100, 103), (105, 108), (108, 111)];
        assert_eq!(unrecorded(takeover, 100, 110), vec![(103, 105)]);
        // Metering stopped.
        assert_eq!(unrecorded(chained.clone(), 100, 115), vec![(109, 115)]);
        // Metered for the first time within the round: from its first record.
        assert_eq!(unrecorded(vec![(104, 107), (107, 110)], 100, 109), vec![]);
        assert_eq!(unrecorded(vec![], 100, 109), vec![]);
    }
}
