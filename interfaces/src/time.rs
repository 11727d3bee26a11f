//! Times and durations on the wire: the VMI and VHI carry protobuf's
//! well-known `Timestamp` and `Duration` (as buf and Google's AIP-142 ask);
//! the daemons keep Unix milliseconds and seconds. These convert one into
//! the other. An absent field reads as 0 (the epoch, or no time at all);
//! a negative duration reads as 0.

pub use prost_types::{Duration, Timestamp};

/// The instant `ms` milliseconds after the Unix epoch.
pub fn timestamp_ms(ms: i64) -> Option<Timestamp> {
    Some(Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    })
}

/// The instant `s` seconds after the Unix epoch.
pub fn timestamp_s(s: i64) -> Option<Timestamp> {
    Some(Timestamp { seconds: s, nanos: 0 })
}

/// Unix milliseconds of `t` (nanoseconds truncated); 0 when absent.
pub fn ms_of(t: &Option<Timestamp>) -> i64 {
    t.as_ref()
        .map_or(0, |t| t.seconds.saturating_mul(1000).saturating_add(i64::from(t.nanos) / 1_000_000))
}

/// Unix seconds of `t` (the start of its second); 0 when absent.
pub fn s_of(t: &Option<Timestamp>) -> i64 {
    t.as_ref().map_or(0, |t| t.seconds)
}

/// A duration of `ms` milliseconds.
pub fn duration_ms(ms: u64) -> Option<Duration> {
    Some(Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    })
}

/// A duration of `s` seconds.
pub fn duration_s(s: u64) -> Option<Duration> {
    Some(Duration {
        seconds: s as i64,
        nanos: 0,
    })
}

/// Milliseconds of `d` (truncated); 0 when absent or negative.
pub fn ms_of_duration(d: &Option<Duration>) -> u64 {
    d.as_ref().map_or(0, |d| {
        let ms = d.seconds.saturating_mul(1000).saturating_add(i64::from(d.nanos) / 1_000_000);
        u64::try_from(ms).unwrap_or(0)
    })
}

/// Whole seconds of `d`; 0 when absent or negative.
pub fn s_of_duration(d: &Option<Duration>) -> u64 {
    d.as_ref().map_or(0, |d| u64::try_from(d.seconds).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_and_seconds_round_trip_through_the_wire_types() {
        for ms in [0, 1, 999, 1000, 1_763_000_123_456, -1, -1001] {
            assert_eq!(ms_of(&timestamp_ms(ms)), ms, "{ms}");
        }
        assert_eq!(
            timestamp_ms(-1).unwrap(),
            Timestamp {
                seconds: -1,
                nanos: 999_000_000
            }
        );
        assert_eq!(s_of(&timestamp_s(1_763_000_123)), 1_763_000_123);
        assert_eq!(s_of(&timestamp_ms(1_763_000_123_999)), 1_763_000_123);
        for ms in [0, 87, 1000, 600_000] {
            assert_eq!(ms_of_duration(&duration_ms(ms)), ms);
        }
        assert_eq!(s_of_duration(&duration_s(3600)), 3600);
    }

    #[test]
    fn an_absent_or_negative_value_reads_as_zero() {
        assert_eq!(ms_of(&None), 0);
        assert_eq!(s_of(&None), 0);
        assert_eq!(ms_of_duration(&None), 0);
        assert_eq!(ms_of_duration(&Some(Duration { seconds: -5, nanos: 0 })), 0);
        assert_eq!(s_of_duration(&Some(Duration { seconds: -5, nanos: 0 })), 0);
    }
}
