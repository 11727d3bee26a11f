//! Per-key async locks (one per VEE) kept in a map that does not grow
//! without bound: the VEEM and the VEEH serialise the operations on one VEE
//! with them.

use std::collections::HashMap;
use std::sync::Arc;

/// A map of per-key locks.
pub type LockMap = HashMap<String, Arc<tokio::sync::Mutex<()>>>;

/// The lock of `key` in `map` (created when missing). Before the map grows
/// past a power of two, the locks that nobody holds or waits for are pruned,
/// so the map stays within twice the number of keys in use.
pub fn entry(map: &mut LockMap, key: &str) -> Arc<tokio::sync::Mutex<()>> {
    if let Some(m) = map.get(key) {
        return m.clone();
    }
    if map.len() >= 64 && map.len().is_power_of_two() {
        // Only the map holds these: no guard, no waiter.
        map.retain(|_, m| Arc::strong_count(m) > 1);
    }
    map.entry(key.to_string()).or_default().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unused_locks_are_pruned_and_held_ones_kept() {
        let mut map = LockMap::new();
        let held = entry(&mut map, "held").lock_owned().await;
        for i in 0..10_000 {
            drop(entry(&mut map, &format!("k{i}")));
        }
        assert!(map.len() <= 128, "{} locks kept", map.len());
        assert!(map.contains_key("held"), "a held lock is never pruned");
        // The same key gives the same lock while it is in use.
        let a = entry(&mut map, "held");
        assert!(a.try_lock().is_err(), "still held");
        drop(held);
        assert!(a.try_lock().is_ok());
    }
}
