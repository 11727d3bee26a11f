//! The quota (`max_bytes`) held atomically with the writes (issue 13, R7):
//! an upload reserves its bytes before it writes them, and the sum of what
//! is stored and what uploads under way hold never exceeds the quota, so
//! ten uploads side by side cannot each find the same room.

use std::sync::{Arc, Mutex};

/// Bytes promised to the uploads under way.
#[derive(Debug, Default)]
pub struct Quota {
    reserved: Arc<Mutex<u64>>,
}

/// Bytes an upload holds against the quota; given back when dropped (once
/// the upload is stored, its bytes count as stored, or it failed). Owned,
/// so that an OCI upload session keeps it between its requests.
#[derive(Debug)]
pub struct Reservation {
    reserved: Arc<Mutex<u64>>,
    bytes: u64,
}

impl Quota {
    /// An empty reservation.
    pub fn start(&self) -> Reservation {
        Reservation {
            reserved: self.reserved.clone(),
            bytes: 0,
        }
    }
}

impl Reservation {
    /// Holds `more` bytes in addition, if `stored()` (bytes stored now,
    /// read under the quota's lock) plus every reservation plus `more`
    /// stays within `max`. Errors: the room left, for the 507 message.
    pub fn grow(&mut self, max: u64, more: u64, stored: impl FnOnce() -> u64) -> Result<(), String> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        let stored = stored();
        let held = stored.saturating_add(*reserved);
        if held.saturating_add(more) > max {
            return Err(format!(
                "quota of {max} bytes with {stored} stored and {} held by uploads under way",
                *reserved
            ));
        }
        *reserved += more;
        self.bytes += more;
        Ok(())
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        *reserved -= self.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(n: u64) -> impl FnOnce() -> u64 {
        move || n
    }

    #[test]
    fn uploads_side_by_side_share_the_room_and_give_it_back() {
        let q = Quota::default();
        let mut a = q.start();
        let mut b = q.start();
        a.grow(1000, 400, stored(100)).unwrap();
        // 100 stored + 400 held: b finds 500 left, not 900.
        let err = b.grow(1000, 600, stored(100)).unwrap_err();
        assert!(err.contains("400 held"), "{err}");
        b.grow(1000, 500, stored(100)).unwrap();
        drop(a);
        let mut c = q.start();
        c.grow(1000, 400, stored(100)).unwrap();
        assert_eq!((b.bytes(), c.bytes()), (500, 400));
    }
}
