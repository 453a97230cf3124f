//! Which outstanding block was allocated where. The kernel keeps the blocks not freed (exact,
//! whatever userspace keeps up with); the ring brought each followed block's stack. A block and
//! its stack meet by (process, address, time of allocation): an address reused since carries a
//! newer time.
use rustc_hash::FxHashMap;

use crate::collect::AllocationSite;

#[derive(Debug, Default)]
pub struct Ledger {
    /// The latest allocation seen at each (process, address). Memory grows with the addresses
    /// the heap ever handed out, not with the allocations: allocators reuse addresses.
    sites: FxHashMap<(u32, u64), AllocationSite>,
}

/// A block still outstanding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub tgid: u32,
    pub addr: u64,
    pub size: u64,
    pub time_ns: u64,
}

impl Ledger {
    pub fn insert(&mut self, site: AllocationSite) {
        let slot = self.sites.entry((site.tgid, site.addr)).or_insert(site);
        if site.time_ns >= slot.time_ns {
            *slot = site;
        }
    }

    /// Where `block` was allocated, if its stack arrived.
    pub fn site(&self, block: &Block) -> Option<&AllocationSite> {
        self.sites.get(&(block.tgid, block.addr)).filter(|site| site.time_ns == block.time_ns)
    }
}

/// The blocks allocated at or before `cutoff_ns` (all of them without a cutoff), oldest first.
pub fn older_than(mut blocks: Vec<Block>, cutoff_ns: Option<u64>) -> Vec<Block> {
    if let Some(cutoff) = cutoff_ns {
        blocks.retain(|block| block.time_ns <= cutoff);
    }
    blocks.sort_unstable_by_key(|block| (block.time_ns, block.tgid, block.addr));
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{CommId, Profile, StackId};

    fn site(addr: u64, time_ns: u64, stack: StackId, comm: CommId) -> AllocationSite {
        AllocationSite { addr, size: 16, time_ns, tgid: 7, tid: 8, comm, stack }
    }

    fn block(addr: u64, time_ns: u64) -> Block {
        Block { tgid: 7, addr, size: 16, time_ns }
    }

    #[test]
    fn a_block_meets_the_stack_of_its_own_allocation() {
        let mut profile = Profile::default();
        let (old, new) = (profile.intern_stack(&[]), profile.intern_stack(&[crate::frame::Frame::Kernel(1)]));
        let comm = profile.intern_comm("a");
        let mut ledger = Ledger::default();
        ledger.insert(site(0x1000, 10, old, comm));
        // The address freed and handed out again: the newer stack wins, in whatever order the
        // records come.
        ledger.insert(site(0x1000, 20, new, comm));
        ledger.insert(site(0x1000, 15, old, comm));
        assert_eq!(ledger.site(&block(0x1000, 20)).map(|s| s.stack), Some(new));
        // The block the kernel holds is older than any stack that came: its record was lost.
        assert_eq!(ledger.site(&block(0x1000, 10)), None);
        assert_eq!(ledger.site(&block(0x2000, 20)), None);
        // Another process at the same address is another block.
        assert_eq!(ledger.site(&Block { tgid: 9, ..block(0x1000, 20) }), None);
    }

    #[test]
    fn min_age_keeps_old_blocks_oldest_first() {
        let blocks = vec![block(1, 30), block(2, 10), block(3, 20)];
        let kept: Vec<u64> = older_than(blocks.clone(), Some(20)).iter().map(|b| b.addr).collect();
        assert_eq!(kept, [2, 3]);
        assert_eq!(older_than(blocks, None).len(), 3);
    }
}
