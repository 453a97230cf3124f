//! Memory whose size a target decides (copies of its files, sections it compressed, what it
//! describes about itself) is charged to a budget shared by everything of its kind that is
//! alive at once, and given back when it goes. A charge that does not fit is refused, and
//! counted: the caller goes without, or makes room (see `cache`). A budget also keeps the time
//! its holders go by: epochs, which the session advances, and the last one in which it was short.
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct Budget {
    limit: u64,
    held: AtomicU64,
    refused: AtomicU64,
    epoch: AtomicU64,
    /// The last epoch a charge was refused in (0: none yet; epochs start at 1).
    short_in: AtomicU64,
}

impl Budget {
    pub const fn new(limit: u64) -> Self {
        Self {
            limit,
            held: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            epoch: AtomicU64::new(1),
            short_in: AtomicU64::new(0),
        }
    }

    /// Starts a new epoch: what was used before it is older than anything used from now on.
    pub fn next_epoch(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// The last epoch in which a charge was refused (0: never).
    pub fn short_in(&self) -> u64 {
        self.short_in.load(Ordering::Relaxed)
    }

    /// Charges `bytes`, if there is room for them; a refusal is counted.
    pub fn charge(&'static self, bytes: u64) -> Option<Charge> {
        self.take(bytes).then(|| Charge { budget: self, bytes })
    }

    /// Charges refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Bytes held now.
    #[cfg(test)]
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    fn take(&self, bytes: u64) -> bool {
        let taken = self.held.try_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
            held.checked_add(bytes).filter(|&after| after <= self.limit)
        });
        if taken.is_err() {
            self.refused.fetch_add(1, Ordering::Relaxed);
            self.short_in.store(self.epoch(), Ordering::Relaxed);
        }
        taken.is_ok()
    }
}

/// Bytes held of a budget, given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: &'static Budget,
    bytes: u64,
}

impl Charge {
    /// Charges `bytes` more, if there is room for them.
    pub fn grow(&mut self, bytes: u64) -> bool {
        let taken = self.budget.take(bytes);
        if taken {
            self.bytes += bytes;
        }
        taken
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_fit_the_limit_and_are_given_back() {
        let budget: &'static Budget = Box::leak(Box::new(Budget::new(100)));
        let mut first = budget.charge(60).unwrap();
        assert!(budget.charge(50).is_none(), "over the limit");
        assert!(!first.grow(41) && first.grow(40));
        assert_eq!((budget.held(), budget.refused()), (100, 2));
        drop(first);
        assert_eq!(budget.held(), 0);
        assert!(budget.charge(100).is_some());
    }
}
