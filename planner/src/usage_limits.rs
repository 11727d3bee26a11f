//! Usage SLAs per consumer as an admission filter (D §3.3: fixed,
//! extensible and commitment limits).
//!
//! D states the limits as fractions of a site; here they are absolute
//! [`Resources`] (a fraction is `site capacity × share`). A request of J
//! resources (all its VEEs together) from a consumer that holds C_i in the
//! window is admitted:
//! - fixed limit R_i: iff C_i + J <= R_i;
//! - extensible limit R_i: iff C_i + J <= R_i, or J fits in the site's free
//!   capacity (the limit holds only under contention);
//! - commitment limit (R_epoch over T_epoch, R_burst over T_burst), D's
//!   `commitment-AP`: reject if the epoch average EA_i > R_epoch; admit if
//!   the site is not fully allocated (Σ_k BA_k + J < TOTAL) and
//!   BA_i + J < R_burst; admit if the site is fully allocated and
//!   BA_i + J < R_epoch; else reject. The averages come from accounting
//!   ([`Planner::record_consumer_usage`]).

use serde::{Deserialize, Serialize};

use super::capacity::Resources;
use super::request::ServiceRequest;
use super::slots::SlotRange;
use super::Planner;

/// A consumer's usage SLA (D §3.3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum UsageLimit {
    /// No limit.
    #[default]
    NoLimit,
    /// Hard upper limit on what the consumer holds at once.
    Fixed {
        /// R_i.
        limit: Resources,
    },
    /// Upper limit enforced only under contention.
    Extensible {
        /// R_i.
        limit: Resources,
    },
    /// Epoch (long-term) and burst (short-term) limits with their windows.
    Commitment {
        /// R_epoch: average allowed over `epoch_slots`.
        epoch_limit: Resources,
        /// T_epoch in slots (the accounting window of `epoch_avg`).
        epoch_slots: u32,
        /// R_burst: average allowed over `burst_slots`.
        burst_limit: Resources,
        /// T_burst in slots (the accounting window of `burst_avg`).
        burst_slots: u32,
    },
}

/// Measured usage of one consumer, fed by accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerUsage {
    /// EA_i: average usage over the preceding epoch window.
    pub epoch_avg: Resources,
    /// BA_i: average usage over the preceding burst window.
    pub burst_avg: Resources,
}

/// What a limit is checked against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageSnapshot {
    /// C_i: what the consumer already holds at the busiest slot of the window.
    pub held: Resources,
    /// The consumer's measured averages.
    pub measured: ConsumerUsage,
    /// Σ_k BA_k: burst averages of all consumers.
    pub all_burst: Resources,
    /// TOTAL: site capacity.
    pub site_total: Resources,
    /// Free site capacity at the busiest slot of the window.
    pub site_free: Resources,
}

/// `a < b` in every component `a` uses (a component `a` does not use
/// never blocks).
fn below(a: &Resources, b: &Resources) -> bool {
    (a.vcpus == 0 || a.vcpus < b.vcpus)
        && (a.memory_mib == 0 || a.memory_mib < b.memory_mib)
        && (a.disk_gib == 0 || a.disk_gib < b.disk_gib)
}

impl UsageLimit {
    /// Whether a request of `demand` may be admitted; `Err` says why not.
    pub fn check(&self, s: &UsageSnapshot, demand: &Resources) -> Result<(), String> {
        match self {
            UsageLimit::NoLimit => Ok(()),
            UsageLimit::Fixed { limit } => {
                let after = s.held + *demand;
                if after.fits_in(limit) {
                    Ok(())
                } else {
                    Err(format!("fixed limit {limit} exceeded: holds {}, asks {demand}", s.held))
                }
            }
            UsageLimit::Extensible { limit } => {
                if (s.held + *demand).fits_in(limit) || demand.fits_in(&s.site_free) {
                    Ok(())
                } else {
                    Err(format!(
                        "extensible limit {limit} exceeded (holds {}, asks {demand}) and the site has only {} free",
                        s.held, s.site_free
                    ))
                }
            }
            UsageLimit::Commitment {
                epoch_limit, burst_limit, ..
            } => {
                let ea = s.measured.epoch_avg;
                let ba = s.measured.burst_avg;
                if !ea.fits_in(epoch_limit) {
                    return Err(format!("epoch average {ea} is over the epoch limit {epoch_limit}"));
                }
                // Case 2: sub-allocated site, within the burst limit.
                let room = below(&(s.all_burst + *demand), &s.site_total);
                if room && below(&(ba + *demand), burst_limit) {
                    return Ok(());
                }
                // Case 3: over-allocated site, within the epoch limit.
                if !room && below(&(ba + *demand), epoch_limit) {
                    return Ok(());
                }
                Err(format!(
                    "commitment limits: burst average {ba} + {demand} not below the burst limit {burst_limit} \
                     (or, the site being full, the epoch limit {epoch_limit})"
                ))
            }
        }
    }
}

impl Planner {
    /// Sets the usage SLA of `consumer` ([`UsageLimit::NoLimit`] removes it).
    pub fn set_usage_limit(&mut self, consumer: &str, limit: UsageLimit) {
        if limit == UsageLimit::NoLimit {
            self.p.usage_limits.remove(consumer);
        } else {
            self.p.usage_limits.insert(consumer.to_string(), limit);
        }
        self.d.revision += 1;
        self.d.header_revision += 1;
    }

    /// Replaces every usage SLA by `limits` (the site's configuration is
    /// the authority: a consumer it no longer names has no limit).
    pub fn replace_usage_limits(&mut self, limits: impl IntoIterator<Item = (String, UsageLimit)>) {
        self.p.usage_limits = limits.into_iter().filter(|(_, l)| *l != UsageLimit::NoLimit).collect();
        self.d.revision += 1;
        self.d.header_revision += 1;
    }

    /// Records measured averages of `consumer` (from accounting).
    pub fn record_consumer_usage(&mut self, consumer: &str, usage: ConsumerUsage) {
        if self.p.consumer_usage.insert(consumer.to_string(), usage) != Some(usage) {
            self.d.header_revision += 1;
        }
    }

    /// What `consumer` holds (VEEs that are not background) at the busiest
    /// slot of `range`.
    pub fn consumer_held(&self, consumer: &str, range: SlotRange) -> Resources {
        self.d.consumer_firm.get(consumer).map_or(Resources::ZERO, |m| m.max_in(range))
    }

    /// The snapshot a limit of `consumer` is checked against over `range`.
    pub fn usage_snapshot(&self, consumer: &str, range: SlotRange) -> UsageSnapshot {
        let total = self.total_capacity();
        UsageSnapshot {
            held: self.consumer_held(consumer, range),
            measured: self.p.consumer_usage.get(consumer).copied().unwrap_or_default(),
            all_burst: self.p.consumer_usage.values().fold(Resources::ZERO, |a, u| a + u.burst_avg),
            site_total: total,
            site_free: total.saturating_sub(&self.d.site_firm.max_in(range)),
        }
    }

    /// Checks the consumer's usage SLA for `req` over `range`.
    pub(crate) fn check_usage_limit(&self, req: &ServiceRequest, range: SlotRange) -> Result<(), String> {
        self.check_usage_limit_of(&req.consumer, range, &req.total_resources())
    }

    /// Whether `consumer` may hold `demand` more over `range` under its
    /// usage SLA; the reason if not.
    pub(crate) fn check_usage_limit_of(&self, consumer: &str, range: SlotRange, demand: &Resources) -> Result<(), String> {
        let Some(limit) = self.p.usage_limits.get(consumer) else {
            return Ok(());
        };
        let snapshot = self.usage_snapshot(consumer, range);
        limit
            .check(&snapshot, demand)
            .map_err(|e| format!("usage SLA of consumer {consumer:?} (D §3.3): {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(mib: u64) -> Resources {
        Resources::new(0, mib, 0)
    }

    fn snap(held: u64, free: u64) -> UsageSnapshot {
        UsageSnapshot {
            held: m(held),
            site_free: m(free),
            site_total: m(1000),
            ..UsageSnapshot::default()
        }
    }

    #[test]
    fn fixed_limit() {
        let l = UsageLimit::Fixed { limit: m(500) };
        assert!(l.check(&snap(200, 800), &m(300)).is_ok());
        let e = l.check(&snap(201, 800), &m(300)).unwrap_err();
        assert!(e.contains("fixed limit"), "{e}");
    }

    #[test]
    fn extensible_limit_only_under_contention() {
        let l = UsageLimit::Extensible { limit: m(500) };
        assert!(l.check(&snap(400, 800), &m(300)).is_ok(), "site has room");
        assert!(l.check(&snap(400, 200), &m(300)).is_err(), "contention");
        assert!(l.check(&snap(100, 0), &m(300)).is_ok(), "within limit");
    }

    #[test]
    fn commitment_limit_follows_commitment_ap() {
        let l = UsageLimit::Commitment {
            epoch_limit: m(400),
            epoch_slots: 1440,
            burst_limit: m(600),
            burst_slots: 60,
        };
        let mut s = snap(0, 1000);
        // Case 1: over-used over the epoch.
        s.measured.epoch_avg = m(401);
        assert!(l.check(&s, &m(1)).unwrap_err().contains("epoch average"));
        // Case 2: site not full, under the burst limit.
        s.measured.epoch_avg = m(300);
        s.measured.burst_avg = m(300);
        s.all_burst = m(500);
        assert!(l.check(&s, &m(200)).is_ok());
        assert!(l.check(&s, &m(300)).is_err(), "burst limit reached");
        // Case 3: site full: only below the epoch limit.
        s.all_burst = m(1000);
        assert!(l.check(&s, &m(50)).is_ok());
        assert!(l.check(&s, &m(100)).is_err());
    }
}
