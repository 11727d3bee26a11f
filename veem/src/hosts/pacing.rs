//! Heartbeat pacing (Nomad's `max_heartbeats_per_second`): the VEEM
//! bounds how many heartbeats it sends a second, all hosts together, by
//! asking only some of the hosts each round, in turn; a small site keeps a
//! heartbeat per host every round, a large one stretches each host's
//! period instead of growing the VEEM's load with its host count.

use std::time::Duration;

/// How the heartbeats of a site are spread over the rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    /// Hosts asked per round (every `heartbeat_interval`), at least 1.
    pub per_round: usize,
    /// Time between two heartbeats to one host: the interval times the
    /// rounds a turn through every host takes.
    pub host_period: Duration,
}

impl Pacing {
    /// The pacing of `hosts` hosts heartbeated every `interval` at most
    /// `max_per_second` a second: per round, `max_per_second` × the
    /// interval's seconds (at least 1) or every host if fewer; each host's
    /// period max(`interval`, `hosts` / `max_per_second`), rounded up to
    /// whole intervals.
    pub fn new(hosts: usize, interval: Duration, max_per_second: u32) -> Pacing {
        let budget = (f64::from(max_per_second) * interval.as_secs_f64()).floor().max(1.0) as usize;
        let per_round = hosts.clamp(1, budget);
        let rounds = hosts.div_ceil(per_round).max(1);
        Pacing {
            per_round,
            host_period: interval.saturating_mul(u32::try_from(rounds).unwrap_or(u32::MAX)),
        }
    }

    /// Whether each host is asked less often than every round.
    pub fn paced(&self, interval: Duration) -> bool {
        self.host_period > interval
    }
}

/// The next `per_round` of `names` from `cursor` on, wrapping round (each
/// name once at most); `cursor` moves past them.
pub fn turn(names: &[String], cursor: &mut usize, per_round: usize) -> Vec<String> {
    if names.is_empty() {
        return Vec::new();
    }
    let start = *cursor % names.len();
    let n = per_round.min(names.len());
    *cursor = (start + n) % names.len();
    names.iter().cycle().skip(start).take(n).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_S: Duration = Duration::from_secs(2);

    #[test]
    fn a_small_site_keeps_a_heartbeat_per_host_every_interval() {
        let p = Pacing::new(2, TWO_S, 50);
        assert_eq!(
            p,
            Pacing {
                per_round: 2,
                host_period: TWO_S
            }
        );
        assert!(!p.paced(TWO_S));
        // 100 hosts are 50 a second at 2 s: not paced yet.
        assert_eq!(Pacing::new(100, TWO_S, 50).host_period, TWO_S);
    }

    #[test]
    fn a_large_site_stretches_each_hosts_period_to_hosts_over_the_rate() {
        // Nomad's TTL: 2,000 hosts / 50 a second = 40 s.
        let p = Pacing::new(2000, TWO_S, 50);
        assert_eq!(
            p,
            Pacing {
                per_round: 100,
                host_period: Duration::from_secs(40)
            }
        );
        assert!(p.paced(TWO_S));
        // Not a whole number of rounds: rounded up (101 hosts, 50 a round).
        assert_eq!(Pacing::new(101, Duration::from_secs(1), 50).host_period, Duration::from_secs(3));
        // A rate below one a round still asks one host a round.
        assert_eq!(Pacing::new(3, Duration::from_secs(1), 0).per_round, 1);
        assert_eq!(Pacing::new(0, TWO_S, 50).host_period, TWO_S);
    }

    #[test]
    fn turns_go_round_every_host_once_per_period() {
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let mut cursor = 0;
        assert_eq!(turn(&names, &mut cursor, 2), ["a", "b"]);
        assert_eq!(turn(&names, &mut cursor, 2), ["c", "a"]);
        assert_eq!(turn(&names, &mut cursor, 2), ["b", "c"]);
        assert_eq!(turn(&names, &mut cursor, 5), ["a", "b", "c"]);
        assert!(turn(&[], &mut cursor, 2).is_empty());
    }
}
