//! What targets describe about themselves (their runtimes' code objects, methods and debug
//! information, the functions their frames name, their perf maps and jitdumps) is kept under
//! one budget, [`DESCRIBED`], across every process and every kind: a target may describe as
//! much as it likes, at the cost of its own memory, and many processes, hard links and shared
//! objects must not multiply what the profiler keeps of it.
//!
//! Each kind of thing is kept in a [`Cache`], least recently used first out. Time is counted
//! in the budget's epochs, which the session advances about every second, as it hands frames
//! to naming. A cache that finds no room lets go of its own entries not used in this epoch; if
//! that is not enough, the value is used once and not kept, and every cache, the next time it
//! is relieved ([`Cache::relieve`]), lets go of its entries not used in the last epoch. So the
//! budget goes to what samples need now, whoever holds it, and one process's flood of new
//! code costs the others at most their cold entries. Entries unused for [`IDLE_EPOCHS`] go in
//! any case: a host that makes up new code all day (the agent runs for weeks) holds what its
//! recent samples needed, not all it ever saw.
use std::{
    hash::Hash,
    sync::atomic::{AtomicU64, Ordering},
};

use lru::LruCache;

use super::budget::{Budget, Charge};

/// Bytes of what targets describe about themselves kept at once, in all.
pub(crate) const DESCRIBED_BUDGET: u64 = 64 << 20;

/// Epochs (about a minute) an entry may go unused before it is let go, room or not.
pub(super) const IDLE_EPOCHS: u64 = 60;

/// The budget of what targets describe about themselves.
pub(crate) static DESCRIBED: Budget = Budget::new(DESCRIBED_BUDGET);

/// Values a cache had to go without keeping, in all caches: used once, read again when needed.
static UNKEPT: AtomicU64 = AtomicU64::new(0);

/// How many values found no room in [`DESCRIBED`] so far.
pub(crate) fn unkept() -> u64 {
    UNKEPT.load(Ordering::Relaxed)
}

/// Counts a value that found no room, charged other than through a [`Cache`].
pub(crate) fn unkept_once() {
    UNKEPT.fetch_add(1, Ordering::Relaxed);
}

/// Values by key, each charged to a budget ([`DESCRIBED`]) while kept, least recently used
/// first out.
pub(crate) struct Cache<K: Hash + Eq, V> {
    budget: &'static Budget,
    entries: LruCache<K, Entry<V>>,
    /// The last epoch in which this cache was relieved.
    relieved: u64,
}

struct Entry<V> {
    value: V,
    /// The epoch it was last used in.
    used: u64,
    _charge: Charge,
}

impl<K: Hash + Eq, V> Default for Cache<K, V> {
    /// A cache of what targets describe about themselves.
    fn default() -> Self {
        Self::new(&DESCRIBED)
    }
}

impl<K: Hash + Eq, V> Cache<K, V> {
    /// A cache charged to `budget`.
    pub(crate) fn new(budget: &'static Budget) -> Self {
        Self { budget, entries: LruCache::unbounded(), relieved: budget.epoch() }
    }

    /// The value of `key`, if kept; now the most recently used.
    pub(crate) fn get(&mut self, key: &K) -> Option<&V> {
        let entry = self.entries.get_mut(key)?;
        entry.used = self.budget.epoch();
        Some(&entry.value)
    }

    /// Keeps `value`, which holds about `bytes`, if there is room for it, after letting go of
    /// this cache's entries not used in this epoch if need be; false when it is not kept.
    pub(crate) fn insert(&mut self, key: K, value: V, bytes: u64) -> bool {
        self.entries.pop(&key);
        let now = self.budget.epoch();
        let charge = loop {
            if let Some(charge) = self.budget.charge(bytes) {
                break charge;
            }
            match self.entries.peek_lru() {
                Some((_, oldest)) if oldest.used < now => drop(self.entries.pop_lru()),
                _ => {
                    unkept_once();
                    return false;
                }
            }
        };
        self.entries.put(key, Entry { value, used: now, _charge: charge });
        true
    }

    /// Forgets the value of `key`.
    pub(crate) fn remove(&mut self, key: &K) {
        self.entries.pop(key);
    }

    /// Once per epoch: lets go of the entries unused for [`IDLE_EPOCHS`], and, if a charge
    /// found no room since this cache was last relieved, of those not used in the last epoch,
    /// so that another cache may have their room.
    pub(crate) fn relieve(&mut self) {
        let now = self.budget.epoch();
        if self.relieved == now {
            return;
        }
        let short = self.budget.short_in() >= self.relieved;
        self.relieved = now;
        let idle = if short { 1 } else { IDLE_EPOCHS };
        while self.entries.peek_lru().is_some_and(|(_, oldest)| oldest.used + idle < now) {
            self.entries.pop_lru();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_goes_first_across_caches() {
        let budget: &'static Budget = Box::leak(Box::new(Budget::new(400)));
        let quarter = 100;
        let (mut cold, mut hot) = (Cache::new(budget), Cache::new(budget));
        for key in 0..3 {
            assert!(cold.insert(key, (), quarter));
        }
        budget.next_epoch();
        assert!(hot.insert(0, (), quarter), "the last quarter");
        assert!(!hot.insert(1, (), quarter), "no room, and nothing of its own to let go of");
        assert_eq!(hot.get(&1), None);
        assert!(cold.get(&2).is_some(), "used again: stays");
        budget.next_epoch();
        cold.relieve();
        assert_eq!(cold.entries.len(), 1, "idle for an epoch: let go");
        assert!(cold.get(&2).is_some());
        assert!(hot.insert(1, (), quarter) && hot.insert(2, (), quarter), "room made by the other cache");
        budget.next_epoch();
        assert!(hot.insert(3, (), quarter), "its own entries not used in this epoch go first");
        assert_eq!(hot.entries.len(), 3);
        for _ in 0..IDLE_EPOCHS {
            budget.next_epoch();
        }
        hot.get(&3);
        budget.next_epoch();
        hot.relieve();
        assert_eq!(hot.entries.len(), 1, "idle for a minute: let go, room or not");
        drop((cold, hot));
        assert_eq!(budget.held(), 0, "everything given back");
    }
}
