//! The connection slots of a listener: at most `max` connections at once
//! and at most `per_peer` from one address, so that one client cannot take
//! every slot; when the listener is full, the connection of the peer that
//! holds the most, idle the longest, gives its slot to the newcomer (an
//! idle connection is one with no request in flight: a keep-alive or
//! HTTP/2 connection between calls, a TLS handshake, a request head not
//! yet complete). A newcomer is refused only when every slot it could take
//! is busy with a request.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its address holds `per_peer` connections, each with a request in
    /// flight.
    PeerFull,
    /// The listener holds `max` connections, none of them idle.
    Full,
}

/// The slots: see the module doc.
pub struct Slots {
    max: usize,
    per_peer: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Slot IDs grow with time: the first entry is the oldest.
    next: u64,
    held: BTreeMap<u64, Held>,
    per_peer: HashMap<IpAddr, usize>,
}

struct Held {
    peer: IpAddr,
    in_flight: watch::Receiver<usize>,
    evict: CancellationToken,
}

/// A connection's slot: freed when dropped.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    /// Requests in flight on the connection (the connection counts them;
    /// 0: idle).
    pub in_flight: watch::Sender<usize>,
    /// Cancelled when another connection takes this slot: the connection
    /// then closes (gracefully: it is idle).
    pub evict: CancellationToken,
}

impl Slots {
    /// At most `max` connections, `per_peer` from one address (both at
    /// least 1).
    pub fn new(max: usize, per_peer: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            per_peer: per_peer.max(1),
            inner: Mutex::default(),
        })
    }

    /// Connections held now.
    pub fn held(&self) -> usize {
        self.inner.lock().unwrap().held.len()
    }

    /// A slot for a connection from `peer`, evicting an idle connection
    /// when `peer` or the listener is full. Errors: [`Refused`].
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Refused> {
        let mut inner = self.inner.lock().unwrap();
        let mine = inner.per_peer.get(&peer).copied().unwrap_or(0);
        let victim = if mine >= self.per_peer {
            Some(inner.idle_of(|p| p == peer).ok_or(Refused::PeerFull)?)
        } else if inner.held.len() >= self.max {
            Some(inner.idle_of_largest().ok_or(Refused::Full)?)
        } else {
            None
        };
        if let Some(id) = victim {
            if let Some(h) = inner.release(id) {
                h.evict.cancel();
            }
        }
        let id = inner.next;
        inner.next += 1;
        let (in_flight, rx) = watch::channel(0);
        let evict = CancellationToken::new();
        inner.held.insert(
            id,
            Held {
                peer,
                in_flight: rx,
                evict: evict.clone(),
            },
        );
        *inner.per_peer.entry(peer).or_default() += 1;
        Ok(Slot {
            slots: self.clone(),
            id,
            in_flight,
            evict,
        })
    }
}

impl Inner {
    /// The oldest idle connection of an address `of` accepts.
    fn idle_of(&self, of: impl Fn(IpAddr) -> bool) -> Option<u64> {
        self.held
            .iter()
            .find(|(_, h)| of(h.peer) && *h.in_flight.borrow() == 0)
            .map(|(id, _)| *id)
    }

    /// The oldest idle connection of the address that holds the most
    /// connections among those with one idle.
    fn idle_of_largest(&self) -> Option<u64> {
        let mut best: Option<(usize, u64)> = None;
        for (id, h) in &self.held {
            if *h.in_flight.borrow() != 0 {
                continue;
            }
            let n = self.per_peer.get(&h.peer).copied().unwrap_or(0);
            if best.is_none_or(|(m, _)| n > m) {
                best = Some((n, *id));
            }
        }
        best.map(|(_, id)| id)
    }

    fn release(&mut self, id: u64) -> Option<Held> {
        let h = self.held.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&h.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&h.peer);
            }
        }
        Some(h)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.inner.lock().unwrap().release(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_full_peer_gives_its_own_oldest_idle_slot_and_is_refused_when_all_are_busy() {
        let slots = Slots::new(10, 2);
        let a1 = slots.admit(ip(1)).unwrap();
        let a2 = slots.admit(ip(1)).unwrap();
        let b = slots.admit(ip(2)).unwrap();
        a2.in_flight.send_replace(1);
        let a3 = slots.admit(ip(1)).unwrap();
        assert!(a1.evict.is_cancelled(), "the oldest idle one of that peer");
        assert!(!a2.evict.is_cancelled() && !b.evict.is_cancelled());
        a3.in_flight.send_replace(1);
        assert_eq!(slots.admit(ip(1)).err(), Some(Refused::PeerFull));
        assert_eq!(slots.held(), 3);
        drop(a1);
        assert_eq!(slots.held(), 3, "an evicted slot was already freed");
        drop((a2, a3));
        assert!(slots.admit(ip(1)).is_ok());
    }

    #[test]
    fn a_full_listener_takes_from_the_peer_holding_the_most_and_never_a_busy_slot() {
        let slots = Slots::new(4, 4);
        let a: Vec<_> = (0..3).map(|_| slots.admit(ip(1)).unwrap()).collect();
        let b = slots.admit(ip(2)).unwrap();
        let c = slots.admit(ip(3)).unwrap();
        assert!(a[0].evict.is_cancelled() && !b.evict.is_cancelled());
        for s in [&a[1], &a[2], &b, &c] {
            s.in_flight.send_replace(1);
        }
        assert_eq!(slots.admit(ip(4)).err(), Some(Refused::Full));
        b.in_flight.send_replace(0);
        let _d = slots.admit(ip(4)).unwrap();
        assert!(b.evict.is_cancelled(), "the only idle one");
    }
}
