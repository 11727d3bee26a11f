//! The average booking profile b̄ of VRM (V §4.6): "the booking profile
//! b_tx(t) of a time slot tx denotes the normalized number of booked nodes
//! per future time slot tx + t of all incoming reservations during this
//! time slot. The average computed over all previous booking profiles is
//! denoted by the average booking profile b̄(t)." It is the load expected
//! to arrive, per slot, for each slot ahead; the remapping interval adds
//! it to the current load ([`Planner::remapping_interval`]).
//!
//! [`Planner::remapping_interval`]: super::Planner::remapping_interval

use super::slots::{Slot, SlotRange};

/// Sums of the booking profiles seen since `first`, for 1..=`len` slots
/// ahead.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BookingProfile {
    /// The slot the first observation was made in.
    first: Option<Slot>,
    /// `sums[t - 1]`: the shares booked for t slots ahead, summed over every
    /// slot observed.
    sums: Vec<f64>,
}

impl BookingProfile {
    /// A profile looking `lookahead` slots ahead.
    pub fn new(lookahead: u32) -> Self {
        BookingProfile {
            first: None,
            sums: vec![0.0; lookahead as usize],
        }
    }

    /// Starts observing at slot `now` (slots without bookings count as
    /// observed from then on).
    pub fn observe_from(&mut self, now: Slot) {
        self.first.get_or_insert(now);
    }

    /// A reservation over `window` arriving in slot `now`, of `share` of the
    /// site's capacity (normalised as the remapping interval normalises
    /// load: the larger of its vCPU and memory fractions).
    pub fn record(&mut self, now: Slot, window: SlotRange, share: f64) {
        self.observe_from(now);
        if !share.is_finite() || share <= 0.0 {
            return;
        }
        for slot in window.start.max(now.saturating_add(1))..window.end {
            let ahead = (slot - now) as usize;
            match self.sums.get_mut(ahead - 1) {
                Some(s) => *s += share,
                None => break,
            }
        }
    }

    /// b̄(t) for t = 1..=lookahead at slot `now`: each sum over the number of
    /// slots observed (empty before the first observation).
    pub fn average(&self, now: Slot) -> Vec<f64> {
        let Some(first) = self.first else { return Vec::new() };
        let observed = f64::from(now.saturating_sub(first) + 1);
        self.sums.iter().map(|s| s / observed).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_is_per_observed_slot_and_per_slot_ahead() {
        let mut b = BookingProfile::new(5);
        assert!(b.average(0).is_empty());
        // Slot 10: half the site booked for slots 12..14 (2 and 3 ahead).
        b.record(10, SlotRange::new(12, 14), 0.5);
        // Slot 11: a quarter for slots 11..20 (this slot is not ahead; 1..=5
        // ahead within the lookahead).
        b.record(11, SlotRange::new(11, 20), 0.25);
        // Observed slots 10 and 11: averages over 2.
        assert_eq!(b.average(11), vec![0.125, 0.375, 0.375, 0.125, 0.125]);
        // Four quiet slots later: over 6.
        let later = b.average(15);
        assert!((later[1] - 0.75 / 6.0).abs() < 1e-12, "{later:?}");
    }
}
