//! The stage that turns a sample into frames: the kernel stack, then the user stack, unwound
//! from the copied stack bytes (DWARF, completed with the frame-pointer chain) or taken from the
//! frame-pointer chain alone, every address pinned to (module, file offset) with the mappings of
//! the moment the sample was taken.
use rustc_hash::FxHashMap;

use crate::{
    address_space::{AddressSpaces, ProcessView, Tracking, Want},
    decode::SampleRecord,
    frame::Frame,
    named::Named,
    unwind::{
        StackSnapshot, UnwindStats, Unwinder,
        hybrid::{self, StackSource},
    },
};

/// How user stacks are walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallGraph {
    /// DWARF CFI on the stack copy, completed with the frame-pointer chain where it stops early.
    #[default]
    Auto,
    /// DWARF CFI only.
    Dwarf,
    /// The kernel's frame-pointer chain only (no stack copy).
    Fp,
}

impl Named for CallGraph {
    const NAMES: &'static [(&'static str, Self)] =
        &[("auto", Self::Auto), ("dwarf", Self::Dwarf), ("fp", Self::Fp)];
}

/// A sample's stack, innermost frame first, and its process's command name.
pub struct Walked<'a> {
    pub comm: &'a str,
    pub frames: &'a [Frame],
}

pub struct StackWalker {
    call_graph: CallGraph,
    spaces: AddressSpaces,
    unwinder: Unwinder,
    stats: UnwindStats,
    stack_ends: StackEnds,
    /// Scratch space for one stack, reused across samples.
    frames: Vec<Frame>,
}

impl StackWalker {
    pub fn new(call_graph: CallGraph, tracking: Tracking) -> Self {
        Self {
            call_graph,
            spaces: AddressSpaces::new(tracking),
            unwinder: Unwinder::default(),
            stats: UnwindStats::default(),
            stack_ends: StackEnds::default(),
            frames: Vec::new(),
        }
    }

    /// The processes followed and the modules they map.
    pub fn address_spaces(&self) -> &AddressSpaces {
        &self.spaces
    }

    /// The same, to follow processes and apply what they do.
    pub fn address_spaces_mut(&mut self) -> &mut AddressSpaces {
        &mut self.spaces
    }

    pub fn stats(&self) -> &UnwindStats {
        &self.stats
    }

    /// Stack ends learned since the last call, for the kernel's `STACK_ENDS` map.
    pub fn take_stack_ends(&mut self) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.stack_ends.new)
    }

    /// The stack of a sample, walked and pinned to modules.
    pub fn walk(&mut self, sample: &SampleRecord<'_>) -> Walked<'_> {
        let Self { call_graph, spaces, unwinder, stats, stack_ends, frames } = self;
        let tid = sample.tid();
        let mut process = spaces.observe(sample.tgid(), tid, &sample.comm(), sample.time_ns());
        frames.clear();
        frames.extend(
            sample.kernel_stack().iter().enumerate().map(|(depth, &addr)| Frame::kernel(depth, addr)),
        );
        // The frame-pointer chain, from this depth on, still to be resolved.
        let (fp_addrs, first_depth) = match (*call_graph, sample.user_regs()) {
            (CallGraph::Fp, _) | (_, None) => (sample.user_stack(), 0),
            (call_graph, Some(regs)) => {
                if let Some(stack) = process.mapping(regs.sp) {
                    stack_ends.learn(tid, stack.end);
                }
                let snapshot = StackSnapshot {
                    sp: regs.sp,
                    bytes: sample.stack_copy(),
                    truncated: sample.stack_truncated(),
                };
                let unwound = unwinder.unwind(regs, &snapshot, &mut process);
                let (tail, source) = match call_graph {
                    CallGraph::Auto => hybrid::complete(&unwound, sample.user_stack()),
                    _ => (&[][..], StackSource::Dwarf(unwound.end)),
                };
                stats.record(source);
                let tgid = process.tgid();
                let located = unwound.frames.iter().zip(&unwound.locations).enumerate();
                frames.extend(located.map(|(depth, (&addr, &at))| Frame::user(tgid, depth, addr, at)));
                (tail, unwound.frames.len())
            }
        };
        push_resolved(&mut process, fp_addrs, first_depth, frames);
        Walked { comm: process.into_comm(), frames }
    }
}

/// Appends the frames of `addrs`, the first at depth `first_depth`, each resolved in `process`.
fn push_resolved(process: &mut ProcessView<'_>, addrs: &[u64], first_depth: usize, frames: &mut Vec<Frame>) {
    let tgid = process.tgid();
    for (depth, &addr) in addrs.iter().enumerate().map(|(i, addr)| (i + first_depth, addr)) {
        frames.push(Frame::user(tgid, depth, addr, process.resolve(addr, Want::Any)));
    }
}

/// Threads whose stack end is remembered; beyond this the memory starts over (the kernel's map
/// is an LRU of its own).
const MAX_STACK_ENDS: usize = 65536;

/// Where each thread's stack mapping ends, as last told to the kernel, and what is new since.
#[derive(Default)]
struct StackEnds {
    known: FxHashMap<u32, u64>,
    new: Vec<(u32, u64)>,
}

impl StackEnds {
    fn learn(&mut self, tid: u32, end: u64) {
        if self.known.get(&tid) == Some(&end) {
            return;
        }
        if self.known.len() >= MAX_STACK_ENDS {
            self.known.clear();
        }
        self.known.insert(tid, end);
        self.new.push((tid, end));
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::{SampleHeader, sample_flags};

    use super::*;
    use crate::{decode::RecordKind, testing::encode_sample};

    const TRACKING: Tracking = Tracking { all: false, follow_forks: true };

    fn own_header() -> SampleHeader {
        let pid = std::process::id();
        let mut header = SampleHeader::zeroed();
        (header.tgid, header.tid) = (pid, pid);
        header.comm[..4].copy_from_slice(b"self");
        header
    }

    #[test]
    fn frame_pointer_mode_takes_kernel_and_chain_frames() {
        let mut header = own_header();
        header.kernel_stack[..2].copy_from_slice(&[0xffff_ffff_8100_0000, 0xffff_ffff_8100_0100]);
        header.kernel_stack_len = 2;
        header.user_stack[0] = frame_pointer_mode_takes_kernel_and_chain_frames as *const () as usize as u64;
        header.user_stack[1] = 0x10;
        header.user_stack_len = 2;
        let record = encode_sample(&header, &[]);
        let sample = RecordKind::Sample.decode(&record).unwrap().sample;
        let mut walker = StackWalker::new(CallGraph::Fp, TRACKING);
        let walked = walker.walk(&sample);
        assert_eq!(walked.comm, "self", "the main thread's name is the process's");
        let frames = walked.frames;
        assert_eq!(frames[..2], [Frame::Kernel(0xffff_ffff_8100_0000), Frame::Kernel(0xffff_ffff_8100_00ff)]);
        assert!(matches!(frames[2], Frame::Module { .. }), "{frames:?}");
        assert_eq!(
            frames[3],
            Frame::Anonymous { tgid: std::process::id(), addr: 0xf },
            "a caller steps back"
        );
        assert_eq!(walker.stats().summary().total(), 0, "fp mode does not unwind");
    }

    #[test]
    fn dwarf_mode_unwinds_and_counts() {
        // A sample of this very thread: its registers and the top of its stack.
        let stack = [0u8; 64];
        let mut header = own_header();
        header.flags = sample_flags::USER_REGS;
        header.user_ip = dwarf_mode_unwinds_and_counts as *const () as usize as u64 + 4;
        header.user_sp = stack.as_ptr() as u64;
        header.stack_copy_len = stack.len() as u32;
        let record = encode_sample(&header, &stack);
        let sample = RecordKind::Sample.decode(&record).unwrap().sample;
        let mut walker = StackWalker::new(CallGraph::Dwarf, TRACKING);
        let frames = walker.walk(&sample).frames.to_vec();
        assert_eq!(walker.stats().summary().total(), 1);
        assert!(matches!(frames[0], Frame::Module { .. }), "the ip resolves: {frames:?}");
        let (tid, end) = walker.take_stack_ends()[0];
        assert_eq!(tid, std::process::id());
        assert!(end > header.user_sp, "the stack's mapping ends above its pointer");
        assert!(walker.take_stack_ends().is_empty(), "told once");
    }
}
