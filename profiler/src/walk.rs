//! The streaming stage: each ring-buffer record (a CPU sample, or an allocation) is decoded, its
//! user stack unwound, and its addresses pinned to (module, file offset) with the mappings of
//! the moment, while the process still exists. New frames are named after each drain.
use std::{collections::HashMap, path::PathBuf};

use crate::{
    cli::CallGraph,
    decode::{Sample, decode, decode_allocation},
    frame::{self, Frame, UserStack},
    module::{ModuleId, Modules},
    perf_map::PerfMaps,
    process::{Process, Processes, Tracking},
    profile::{CommId, Profile, ProfileSample, StackId},
    recording::{Meta, Recording},
    symbolize::{Symbolizer, Symbols},
    task_events::TaskEvent,
    unwind::{
        AddressSpaceView, Location, StackSnapshot, UnwindEnd, Unwinder,
        hybrid::{self, StackSource},
    },
};

pub struct Collector {
    call_graph: CallGraph,
    processes: Processes,
    modules: Modules,
    perf_maps: PerfMaps,
    unwinder: Unwinder,
    profile: Profile,
    symbolizer: Symbolizer,
    symbols: Symbols,
    /// Stacks of the profile whose frames have been named (stacks are numbered in order).
    symbolized_stacks: usize,
    unwind_stats: UnwindStats,
    /// Records that did not decode (counted, never fatal).
    malformed: u64,
    /// Samples whose processing failed (a panic in a dependency on corrupt input, contained).
    failed: u64,
    /// Samples beyond this are dropped (`--max-samples`).
    max_samples: Option<u64>,
    /// Where each thread's stack mapping ends, as last told to the kernel.
    stack_ends: HashMap<u32, u64>,
    /// Stack ends learned since the last [`Collector::take_stack_ends`].
    new_stack_ends: Vec<(u32, u64)>,
    /// Scratch space for one stack, reused across samples.
    frames: Vec<Frame>,
}

/// Threads whose stack end is remembered; beyond this the memory starts over (the kernel's map
/// is an LRU of its own).
const MAX_STACK_ENDS: usize = 65536;

/// How the user stacks of a recording were obtained (samples with user registers only).
#[derive(Debug, Default)]
pub struct UnwindStats {
    pub by_source: HashMap<StackSource, u64>,
    /// Samples whose DWARF unwinding stopped in code without CFI, by module (`None`: anonymous
    /// memory).
    pub missing_cfi: HashMap<Option<ModuleId>, u64>,
}

impl UnwindStats {
    fn record(&mut self, source: StackSource) {
        *self.by_source.entry(source).or_default() += 1;
        if let StackSource::Dwarf(UnwindEnd::MissingCfi(module)) = source {
            *self.missing_cfi.entry(module).or_default() += 1;
        }
    }

    pub fn total(&self) -> u64 {
        self.by_source.values().sum()
    }

    pub fn count(&self, source: StackSource) -> u64 {
        self.by_source.get(&source).copied().unwrap_or(0)
    }
}

/// A block, and where and when it was allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocationSite {
    pub addr: u64,
    pub size: u64,
    pub time_ns: u64,
    pub tgid: u32,
    pub tid: u32,
    pub comm: CommId,
    pub stack: StackId,
}

/// What the collector gathered.
pub struct Collected {
    pub profile: Profile,
    pub symbols: Symbols,
    pub modules: Modules,
    pub unwind_stats: UnwindStats,
    pub malformed: u64,
    pub failed: u64,
    pub lost_task_events: u64,
}

impl Collected {
    /// The symbolized recording, with times counted from `start_monotonic_ns`.
    pub fn recording(&self, start_monotonic_ns: u64, meta: Meta) -> Recording {
        Recording::from_live(&self.profile, &self.symbols, &self.modules, start_monotonic_ns, meta)
    }

    /// Warns, on stderr, about what was dropped on the way: task events the kernel lost, and
    /// `records` (samples, allocation stacks) that did not decode or could not be processed.
    pub fn warn(&self, records: &str) {
        if self.lost_task_events > 0 {
            eprintln!(
                "profiler: warning: the kernel dropped {} mmap/exec/fork records; some frames may be misattributed",
                self.lost_task_events
            );
        }
        if self.malformed > 0 {
            eprintln!("profiler: warning: {} malformed records were skipped", self.malformed);
        }
        if self.failed > 0 {
            eprintln!(
                "profiler: warning: {} {records} could not be processed (see the internal errors above)",
                self.failed
            );
        }
    }
}

impl Collector {
    pub fn new(call_graph: CallGraph, tracking: Tracking, max_samples: Option<u64>) -> Self {
        Self {
            call_graph,
            processes: Processes::new(tracking),
            modules: Modules::default(),
            perf_maps: PerfMaps::default(),
            unwinder: Unwinder::default(),
            profile: Profile::default(),
            symbolizer: Symbolizer::default(),
            symbols: Symbols::default(),
            symbolized_stacks: 0,
            unwind_stats: UnwindStats::default(),
            malformed: 0,
            failed: 0,
            max_samples,
            stack_ends: HashMap::new(),
            new_stack_ends: Vec::new(),
            frames: Vec::new(),
        }
    }

    /// Adds one ring-buffer record. Corrupt input anywhere (a record, a binary, its CFI) costs at
    /// most this sample: a panic below is contained and counted.
    pub fn add_record(&mut self, record: &[u8]) {
        if self.max_samples.is_some_and(|max| self.profile.samples().len() as u64 >= max) {
            return;
        }
        self.contained(|collector| {
            let Ok(sample) = decode(record) else {
                collector.malformed += 1;
                return;
            };
            let (comm, stack) = collector.walk(&sample);
            let (time_ns, tgid, tid) = (sample.time_ns(), sample.tgid(), sample.tid());
            collector.profile.push(ProfileSample { time_ns, tgid, tid, comm, stack, weight: 1 });
        });
    }

    /// Adds an allocation record: its stack is walked and kept, and the block returned with
    /// where it was allocated. Corrupt input costs this record only, as in [`Self::add_record`].
    pub fn add_allocation(&mut self, record: &[u8]) -> Option<AllocationSite> {
        self.contained(|collector| {
            let Ok((block, sample)) = decode_allocation(record) else {
                collector.malformed += 1;
                return None;
            };
            let (comm, stack) = collector.walk(&sample);
            Some(AllocationSite {
                addr: block.addr,
                size: block.size,
                time_ns: sample.time_ns(),
                tgid: sample.tgid(),
                tid: sample.tid(),
                comm,
                stack,
            })
        })
        .flatten()
    }

    /// Runs `add`, counting a panic in it as a failed record.
    fn contained<T>(&mut self, add: impl FnOnce(&mut Self) -> T) -> Option<T> {
        let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| add(self)));
        if added.is_err() {
            self.failed += 1;
        }
        added.ok()
    }

    /// The command name and (empty) stack that stand for an allocation whose record was lost.
    pub fn stack_lost(&mut self) -> (CommId, StackId) {
        (self.profile.intern_comm("[stack lost]"), self.profile.intern_stack(&[]))
    }

    /// Adds a sample built from what [`Self::add_allocation`] returned.
    pub fn push_sample(&mut self, sample: ProfileSample) {
        self.profile.push(sample);
    }

    /// The stack of a sample, walked, pinned to modules and interned; and its command name.
    fn walk(&mut self, sample: &Sample) -> (CommId, StackId) {
        let (tgid, tid) = (sample.tgid(), sample.tid());
        let process = self.processes.observe(tgid, tid, &sample.comm());
        self.frames.clear();
        frame::push_kernel(sample.kernel_stack(), &mut self.frames);
        // The frame-pointer chain, from this depth on, still to be located.
        let (fp_addrs, first_depth) = match (self.call_graph, sample.user_regs()) {
            (CallGraph::Fp, _) | (_, None) => (sample.user_stack(), 0),
            (call_graph, Some(regs)) => {
                if let Some(stack) = process.mapping(regs.sp, sample.time_ns()) {
                    learn_stack_end(&mut self.stack_ends, &mut self.new_stack_ends, tid, stack.end);
                }
                let snapshot = StackSnapshot {
                    sp: regs.sp,
                    bytes: sample.stack_copy(),
                    truncated: sample.stack_truncated(),
                };
                let mut view = ProcessView {
                    tgid,
                    time_ns: sample.time_ns(),
                    process: &mut *process,
                    modules: &mut self.modules,
                };
                let unwound = self.unwinder.unwind(regs, &snapshot, &mut view);
                let (tail, source) = match call_graph {
                    CallGraph::Auto => hybrid::complete(&unwound, sample.user_stack()),
                    _ => (&[][..], StackSource::Dwarf(unwound.end)),
                };
                self.unwind_stats.record(source);
                frame::push_located(tgid, &unwound.frames, &unwound.locations, &mut self.frames);
                (tail, unwound.frames.len())
            }
        };
        let stack = UserStack { tgid, time_ns: sample.time_ns(), addrs: fp_addrs, first_depth };
        frame::push_user(&stack, process, &mut self.modules, &mut self.frames);
        for frame in &self.frames {
            if let Frame::Anonymous { tgid, addr } = *frame {
                self.perf_maps.observe(tgid, addr, sample.time_ns());
            }
        }
        let comm = self.profile.intern_comm(process.comm());
        (comm, self.profile.intern_stack(&self.frames))
    }

    /// Samples and processes so far.
    pub fn progress(&self) -> (usize, usize) {
        (self.profile.samples().len(), self.profile.process_count())
    }

    /// Stack ends learned since the last call, for the kernel's `STACK_ENDS` map.
    pub fn take_stack_ends(&mut self) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.new_stack_ends)
    }

    /// Follows a process from its current state (targets, and every process under `-a`).
    pub fn track(&mut self, tgid: u32) {
        self.processes.track(tgid);
    }

    /// Applies what a process did to its address space; events must come before the samples
    /// taken after them.
    pub fn add_task_event(&mut self, event: TaskEvent) {
        self.processes.apply(event);
    }

    /// Forgets processes and mappings no sample taken after `now_ns` can need.
    pub fn prune(&mut self, now_ns: u64) {
        self.processes.prune(now_ns);
    }

    /// Names the frames of the stacks seen since the last call. Done as the recording goes, so
    /// that little is left when it stops: the end of a recording is when its user waits.
    pub fn symbolize_new(&mut self) {
        let frames: Vec<Frame> = self
            .profile
            .distinct_frames_since(self.symbolized_stacks)
            .into_iter()
            .filter(|frame| !self.symbols.contains(frame))
            .collect();
        self.symbolized_stacks = self.profile.stack_count();
        if !frames.is_empty() {
            self.symbols.extend(self.symbolizer.symbolize(&frames, &self.modules, &self.perf_maps));
        }
    }

    pub fn finish(mut self) -> Collected {
        self.symbolize_new();
        // A JIT may have described its code in its perf map since its first sample there.
        let unnamed = self.symbols.unnamed_anonymous();
        self.symbols.extend(self.symbolizer.symbolize(&unnamed, &self.modules, &self.perf_maps));
        Collected {
            profile: self.profile,
            symbols: self.symbols,
            modules: self.modules,
            unwind_stats: self.unwind_stats,
            malformed: self.malformed,
            failed: self.failed,
            lost_task_events: self.processes.lost_events(),
        }
    }
}

fn learn_stack_end(known: &mut HashMap<u32, u64>, new: &mut Vec<(u32, u64)>, tid: u32, end: u64) {
    if known.get(&tid) == Some(&end) {
        return;
    }
    if known.len() >= MAX_STACK_ENDS {
        known.clear();
    }
    known.insert(tid, end);
    new.push((tid, end));
}

/// One process's address space, as the unwinder sees it.
struct ProcessView<'a> {
    tgid: u32,
    time_ns: u64,
    process: &'a mut Process,
    modules: &'a mut Modules,
}

impl AddressSpaceView for ProcessView<'_> {
    fn locate(&mut self, addr: u64) -> Location {
        let Some(mapping) = self.process.mapping(addr, self.time_ns).filter(|m| m.executable) else {
            return Location::NotCode;
        };
        match self.modules.intern(self.tgid, mapping) {
            Some(module) => Location::Module { module, file_offset: mapping.file_offset(addr) },
            None => Location::Anonymous,
        }
    }

    fn module_paths(&self, module: ModuleId) -> Option<(PathBuf, PathBuf)> {
        let module = self.modules.get(module);
        Some((module.readable_path()?, module.path().to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::encode;
    use profiler_common::SampleHeader;

    const TRACKING: Tracking = Tracking { all: false, follow_forks: true };

    #[test]
    fn collects_a_record_and_counts_garbage() {
        let pid = std::process::id();
        let mut header = SampleHeader::zeroed();
        (header.tgid, header.tid) = (pid, pid);
        header.comm[..4].copy_from_slice(b"self");
        header.kernel_stack[0] = 0xffff_ffff_8100_0000;
        header.kernel_stack_len = 1;
        header.user_stack[0] = collects_a_record_and_counts_garbage as *const () as usize as u64;
        header.user_stack_len = 1;
        let mut collector = Collector::new(CallGraph::Fp, TRACKING, None);
        collector.add_record(&encode(&header, &[]));
        collector.add_record(&[1, 2, 3]);
        let collected = collector.finish();
        assert_eq!(collected.profile.samples().len(), 1);
        assert_eq!(collected.malformed, 1);
        let sample = collected.profile.samples()[0];
        assert_eq!(collected.profile.comm(sample.comm), "self");
        let stack = collected.profile.stack(sample.stack);
        assert_eq!(stack[0], Frame::Kernel(0xffff_ffff_8100_0000));
        assert!(matches!(stack[1], Frame::Module { .. }), "{stack:?}");
        assert_eq!(collected.unwind_stats.total(), 0, "fp mode does not unwind");
    }

    #[test]
    fn dwarf_mode_unwinds_and_counts() {
        // A sample of this very thread: its registers and the top of its stack.
        let pid = std::process::id();
        let stack = [0u8; 64];
        let mut header = SampleHeader::zeroed();
        (header.tgid, header.tid) = (pid, pid);
        header.flags = profiler_common::sample_flags::USER_REGS;
        header.user_ip = dwarf_mode_unwinds_and_counts as *const () as usize as u64 + 4;
        header.user_sp = stack.as_ptr() as u64;
        header.stack_copy_len = stack.len() as u32;
        let mut collector = Collector::new(CallGraph::Dwarf, TRACKING, None);
        collector.add_record(&encode(&header, &stack));
        let collected = collector.finish();
        assert_eq!(collected.unwind_stats.total(), 1);
        let stack = collected.profile.stack(collected.profile.samples()[0].stack);
        assert!(matches!(stack[0], Frame::Module { .. }), "the ip resolves: {stack:?}");
    }
}
