//! Which outstanding block was allocated where. The kernel keeps the blocks not freed (exact,
//! whatever userspace keeps up with); the ring brought each followed block's stack. A block and
//! its stack meet by (process, address, time of allocation): an address reused since carries a
//! newer time.
use rustc_hash::FxHashMap;

use crate::{
    aggregate::{Aggregate, LabelsId, Site},
    kernel::tracer::Block,
    model::{Tgid, ThreadState},
};

#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// The latest allocation seen at each (process, address). Memory grows with the addresses
    /// the heap ever handed out, not with the allocations: allocators reuse addresses.
    sites: FxHashMap<(Tgid, u64), Site>,
}

impl Ledger {
    /// Notes that the block at `addr` was allocated at `site`.
    pub(super) fn insert(&mut self, addr: u64, site: Site) {
        let slot = self.sites.entry((site.tgid, addr)).or_insert(site);
        if site.time_ns >= slot.time_ns {
            *slot = site;
        }
    }

    /// Where `block` was allocated, if its stack arrived.
    pub(super) fn site(&self, block: &Block) -> Option<&Site> {
        self.sites.get(&(block.tgid, block.addr)).filter(|site| site.time_ns == block.time_ns)
    }

    /// One sample per block, weighing its bytes (scaled by `sample_every` when sampling), at the
    /// site that allocated it: `[stack lost]` when its record never came.
    pub(super) fn push_blocks(&self, blocks: &[Block], aggregate: &mut Aggregate, sample_every: u32) {
        let lost = (aggregate.intern_comm("[stack lost]"), aggregate.intern_stack(&[]));
        for block in blocks {
            let site = self.site(block).copied().unwrap_or(Site {
                time_ns: block.time_ns,
                tgid: block.tgid,
                // Allocations are followed per process: a block's thread is not known.
                tid: block.tgid.main_thread(),
                comm: lost.0,
                stack: lost.1,
                state: ThreadState::OnCpu,
                labels: LabelsId::default(),
            });
            aggregate.push(Site { time_ns: block.time_ns, ..site }, block.size * u64::from(sample_every));
        }
    }
}

/// The blocks allocated at or before `cutoff_ns` (all of them without a cutoff), oldest first.
pub(super) fn older_than(mut blocks: Vec<Block>, cutoff_ns: Option<u64>) -> Vec<Block> {
    if let Some(cutoff) = cutoff_ns {
        blocks.retain(|block| block.time_ns <= cutoff);
    }
    blocks.sort_unstable_by_key(|block| (block.time_ns, block.tgid, block.addr));
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        aggregate::{CommId, StackId},
        model::Tid,
    };

    fn site(time_ns: u64, stack: StackId, comm: CommId) -> Site {
        Site {
            time_ns,
            tgid: Tgid(7),
            tid: Tid(8),
            comm,
            stack,
            state: ThreadState::OnCpu,
            labels: LabelsId::default(),
        }
    }

    fn block(addr: u64, time_ns: u64) -> Block {
        Block { tgid: Tgid(7), addr, size: 16, time_ns }
    }

    #[test]
    fn a_block_meets_the_stack_of_its_own_allocation() {
        let mut aggregate = Aggregate::default();
        let (old, new) =
            (aggregate.intern_stack(&[]), aggregate.intern_stack(&[crate::frame::Frame::Kernel(1)]));
        let comm = aggregate.intern_comm("a");
        let mut ledger = Ledger::default();
        ledger.insert(0x1000, site(10, old, comm));
        // The address freed and handed out again: the newer stack wins, in whatever order the
        // records come.
        ledger.insert(0x1000, site(20, new, comm));
        ledger.insert(0x1000, site(15, old, comm));
        assert_eq!(ledger.site(&block(0x1000, 20)).map(|s| s.stack), Some(new));
        // The block the kernel holds is older than any stack that came: its record was lost.
        assert_eq!(ledger.site(&block(0x1000, 10)), None);
        assert_eq!(ledger.site(&block(0x2000, 20)), None);
        // Another process at the same address is another block.
        assert_eq!(ledger.site(&Block { tgid: Tgid(9), ..block(0x1000, 20) }), None);
    }

    #[test]
    fn min_age_keeps_old_blocks_oldest_first() {
        let blocks = vec![block(1, 30), block(2, 10), block(3, 20)];
        let kept: Vec<u64> = older_than(blocks.clone(), Some(20)).iter().map(|b| b.addr).collect();
        assert_eq!(kept, [2, 3]);
        assert_eq!(older_than(blocks, None).len(), 3);
    }

    #[test]
    fn blocks_weigh_their_bytes_at_their_site_or_under_stack_lost() {
        let mut aggregate = Aggregate::default();
        let stack = aggregate.intern_stack(&[crate::frame::Frame::Kernel(1)]);
        let comm = aggregate.intern_comm("app");
        let mut ledger = Ledger::default();
        ledger.insert(0x1000, site(10, stack, comm));
        ledger.push_blocks(&[block(0x1000, 10), block(0x2000, 30)], &mut aggregate, 4);
        let samples: Vec<_> = aggregate.samples().collect();
        assert_eq!((samples[0].site, samples[0].weight), (site(10, stack, comm), 64));
        let lost = samples[1].site;
        assert_eq!(aggregate.comm(lost.comm), "[stack lost]");
        assert_eq!(aggregate.stack(lost.stack).len(), 0);
        assert_eq!((lost.time_ns, lost.tid, samples[1].weight), (30, Tid(7), 64));
    }
}
