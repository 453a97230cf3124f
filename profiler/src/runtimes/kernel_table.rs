//! The kernel's table of processes whose runtime's frames it walks, as filled from here: at
//! most [`RUNTIME_PROCESSES_MAX`], and, when the whole system is followed, at most
//! [`RUNTIME_USER_SHARE`] of one user's, so that no user's processes take every place.
use profiler_common::runtimes::{RUNTIME_PROCESSES_MAX, RUNTIME_USER_SHARE};
use rustc_hash::FxHashMap;

pub(super) struct KernelTable {
    /// Users share it (the whole system is followed).
    shared: bool,
    held: u32,
    by_user: FxHashMap<u32, u32>,
    /// Looks at a process that found no place: the table was full, or its user held its share.
    no_room: u64,
    over_share: u64,
}

impl KernelTable {
    pub(super) fn new(shared: bool) -> Self {
        Self { shared, held: 0, by_user: FxHashMap::default(), no_room: 0, over_share: 0 }
    }

    /// Takes a place for a process of `uid` (`None`: not known, which counts as root's); false
    /// (counted) when there is none.
    pub(super) fn take(&mut self, uid: Option<u32>) -> bool {
        if self.held >= RUNTIME_PROCESSES_MAX {
            self.no_room += 1;
            return false;
        }
        let held = self.by_user.entry(uid.unwrap_or(0)).or_default();
        if self.shared && *held >= RUNTIME_USER_SHARE {
            self.over_share += 1;
            return false;
        }
        *held += 1;
        self.held += 1;
        true
    }

    pub(super) fn give_back(&mut self, uid: Option<u32>) {
        let uid = uid.unwrap_or(0);
        if let Some(held) = self.by_user.get_mut(&uid) {
            *held -= 1;
            self.held -= 1;
            if *held == 0 {
                self.by_user.remove(&uid);
            }
        }
    }

    /// The summary's line: nothing when no process was turned away.
    pub(super) fn describe(&self) -> Vec<String> {
        if self.no_room + self.over_share == 0 {
            return Vec::new();
        }
        vec![format!(
            "processes turned away {} times by the kernel's table of runtimes it walks ({RUNTIME_PROCESSES_MAX} \
             processes) being full, {} times by their user holding its share ({RUNTIME_USER_SHARE}, system-wide): \
             native frames only until there is room",
            self.no_room, self.over_share
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_takes_at_most_its_share_when_users_share() {
        let mut table = KernelTable::new(true);
        for _ in 0..RUNTIME_USER_SHARE {
            assert!(table.take(Some(1000)));
        }
        assert!(!table.take(Some(1000)), "over its share");
        assert!(table.take(Some(1001)), "another user has room");
        table.give_back(Some(1000));
        assert!(table.take(Some(1000)), "a place given back");
        assert_eq!((table.no_room, table.over_share), (0, 1));
        let mut alone = KernelTable::new(false);
        assert!((0..=RUNTIME_USER_SHARE).all(|_| alone.take(Some(1000))), "no share when not shared");
    }
}
