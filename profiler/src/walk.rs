//! The stage that turns a sample into frames: the kernel stack, then the user stack, unwound
//! from the copied stack bytes (DWARF, completed with the frame-pointer chain) or taken from the
//! frame-pointer chain alone, every address pinned to (module, file offset) with the mappings of
//! the moment the sample was taken.
use std::{
    ffi::OsStr,
    time::{Duration, Instant},
};

use profiler_common::{FramePointers, runtimes::RuntimeProcess};
use rustc_hash::FxHashMap;

use crate::{
    address_space::{
        AddressSpaces, Mapping, ModuleId, Modules, ProcessView, TaskEvent, Tracking, Want, program,
    },
    clock,
    decode::SampleRecord,
    frame::{Frame, Marker},
    model::{LabelSet, Tgid, ThreadState, Tid},
    named::Named,
    runtimes::Runtimes,
    untrusted::DESCRIBED,
    unwind::{
        NoRuntime, RuntimeCode, StackSnapshot, UnwindEnd, UnwindStats, Unwinder, Unwound,
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

impl CallGraph {
    /// When the kernel should walk the frame-pointer chain for this call graph.
    pub fn frame_pointers(self) -> FramePointers {
        match self {
            Self::Auto => FramePointers::WhenCopyShort,
            Self::Dwarf => FramePointers::Never,
            Self::Fp => FramePointers::Always,
        }
    }
}

impl Named for CallGraph {
    const NAMES: &'static [(&'static str, Self)] =
        &[("auto", Self::Auto), ("dwarf", Self::Dwarf), ("fp", Self::Fp)];
}

/// A sample's stack, innermost frame first, and its process's command name.
pub struct Walked<'a> {
    pub comm: &'a str,
    pub frames: &'a [Frame],
    /// What its runtime labelled the sample with (a goroutine's labels).
    pub labels: &'a [(String, String)],
}

pub struct StackWalker {
    call_graph: CallGraph,
    /// Runtimes' frames are not read.
    native_only: bool,
    spaces: AddressSpaces,
    unwinder: Unwinder,
    stats: UnwindStats,
    stack_ends: StackEnds,
    /// Language runtimes' frames, in place of native ones.
    runtimes: Runtimes,
    /// When the budget of what targets describe started its epoch.
    epoch_started: Instant,
    /// Scratch space for one stack, reused across samples.
    frames: Vec<Frame>,
    /// The sample's frame-pointer chain, likewise.
    chain: Vec<u64>,
    /// The sample's labels, likewise.
    labels: LabelSet,
}

impl StackWalker {
    pub fn new(call_graph: CallGraph, tracking: Tracking, native_only: bool) -> Self {
        Self {
            call_graph,
            native_only,
            spaces: AddressSpaces::new(tracking),
            unwinder: Unwinder::default(),
            stats: UnwindStats::default(),
            stack_ends: StackEnds::default(),
            runtimes: Runtimes::new(tracking.all),
            epoch_started: Instant::now(),
            frames: Vec::new(),
            chain: Vec::new(),
            labels: LabelSet::new(),
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

    /// Lets go of `modules` here (the unwinder, the registry) and hands them to `also` first
    /// (naming, which forgets them after what it was handed before); not of a module a running
    /// runtime's frames are recognised by.
    pub fn evict_modules(&mut self, modules: &[ModuleId], also: impl FnOnce(&[ModuleId], &Modules)) {
        let pinned = self.runtimes.pinned_modules();
        let modules: Vec<ModuleId> =
            modules.iter().copied().filter(|module| !pinned.contains(module)).collect();
        if modules.is_empty() {
            return;
        }
        let modules = &modules[..];
        also(modules, self.spaces.modules());
        self.unwinder.forget(modules);
        self.spaces.modules_mut().evict(modules);
        // What framehop parsed is given back to the system by naming's trim, once it has let
        // go of its part (`NamingThread::forget_modules`).
    }

    /// Applies what a process did to its address space, and has the runtimes look at what it
    /// maps now (after an exec, whatever it runs is looked at anew: a runtime found before is
    /// gone).
    pub fn apply(&mut self, event: TaskEvent) {
        let runtimes = &mut self.runtimes;
        match event {
            TaskEvent::Map { pid, .. } => runtimes.mapped(pid),
            TaskEvent::Exec { pid, time_ns, .. } => runtimes.exec(pid, time_ns),
            TaskEvent::Fork { parent, child, .. } => runtimes.forked(parent, child),
            TaskEvent::Rename { .. } | TaskEvent::Exit { .. } | TaskEvent::Lost { .. } => {}
        }
        self.spaces.apply(event);
    }

    /// Once a drain's task events are applied, before its records: what runtimes' discovery
    /// found since, taken (see [`Runtimes::discover`]).
    pub fn discover(&mut self) {
        if !self.native_only {
            self.runtimes.discover(&mut self.spaces, clock::monotonic_ns());
        }
    }

    /// Forgets the processes gone by `now_ns` (their runtimes too), and returns them.
    pub fn prune(&mut self, now_ns: u64) -> Vec<Tgid> {
        let gone = self.spaces.prune(now_ns);
        for &tgid in &gone {
            self.runtimes.forget(tgid);
        }
        gone
    }

    /// Process `tgid` is about to run `program` (a command held before exec): the runtimes'
    /// images among the files it will map (see [`program::load_order`]) are recognised now, so
    /// that they are found known as soon as it maps them. A program whose files cannot be
    /// listed (a script) has them recognised once it maps them, as any process.
    pub fn expect_program(&mut self, tgid: Tgid, program: &OsStr) {
        if self.native_only {
            return;
        }
        let now_ns = clock::monotonic_ns();
        let Some(process) = self.spaces.view(tgid, now_ns) else { return };
        let files: Vec<_> = match program::load_order(program, &|path| process.open(path)) {
            Ok(order) => order.files().filter_map(|path| process.file_to_map(path)).collect(),
            Err(_) => Vec::new(),
        };
        self.runtimes.expect(&process, &files, now_ns, Instant::now() + EXPECTED_WITHIN);
    }

    /// Processes that run already (`-p`): the runtimes' images among the files each maps now
    /// are recognised before sampling starts, as a command's are, so that their first samples
    /// are walked (found off the drain's thread, a busy host kept the first half second of a
    /// recording native). Within [`EXPECTED_WITHIN`] in all: the files left are found as any
    /// process's are.
    pub fn expect_running(&mut self, pids: &[Tgid]) {
        if self.native_only {
            return;
        }
        let until = Instant::now() + EXPECTED_WITHIN;
        let now_ns = clock::monotonic_ns();
        for &tgid in pids {
            let Some(process) = self.spaces.view(tgid, now_ns) else { continue };
            // Highest address first: an interpreter loaded at the start before the hundreds of
            // extension modules it loads later.
            let files: Vec<Mapping> = process.executable_files().iter().rev().cloned().collect();
            self.runtimes.expect(&process, &files, now_ns, until);
        }
    }

    /// Sampling starts at `now_ns` (see [`Runtimes::sampling_starts`]).
    pub fn sampling_starts(&mut self, now_ns: u64) {
        self.runtimes.sampling_starts(now_ns);
    }

    /// Whether a runtime may be starting in a process followed at `now_ns`: then the ring is
    /// drained sooner, so that it is found before much of it runs unread.
    pub fn runtime_may_be_starting(&self, now_ns: u64) -> bool {
        !self.native_only && self.runtimes.may_be_starting(now_ns)
    }

    /// Whether the kernel is still to be told of a process whose runtime it should walk.
    pub fn runtime_found(&self) -> bool {
        self.runtimes.runtime_found()
    }

    /// The runtimes read: the functions their frames name, the modules they read them through.
    pub fn runtimes(&self) -> &Runtimes {
        &self.runtimes
    }

    /// The summary's rows of the runtimes met: a label and lines each.
    pub fn runtimes_report(&self) -> Vec<(&'static str, Vec<String>)> {
        self.runtimes.describe()
    }

    /// Once the frames walked so far are handed to naming, and an epoch (a second) has passed:
    /// what targets describe about themselves that nothing needs now is let go (functions no
    /// cache holds and no frame named since, cache entries idle for long, or for an epoch when
    /// the budget was short), and a new epoch of the budget starts.
    pub fn end_epoch(&mut self) {
        if self.epoch_started.elapsed() < EPOCH {
            return;
        }
        self.epoch_started = Instant::now();
        self.runtimes.end_epoch();
        DESCRIBED.next_epoch();
    }

    /// What the kernel should be told since the last call: where threads' stacks end, and the
    /// processes whose runtime frames it should walk (or not any more).
    pub fn take_kernel_updates(&mut self) -> KernelUpdates {
        KernelUpdates {
            stack_ends: std::mem::take(&mut self.stack_ends.new),
            runtime_processes: self.runtimes.take_kernel_updates(),
        }
    }

    /// The kernel would not take what it was told of `tgid`'s runtime (`why`): its runtime
    /// frames are not read.
    pub fn refused_by_kernel(&mut self, tgid: Tgid, why: &anyhow::Error) {
        self.runtimes.refused_by_kernel(tgid, why);
    }

    /// The stack of a sample, walked and pinned to modules; `None` if `hold` and, once its
    /// process is looked at, a runtime found is still to be told to the kernel (the sample is
    /// handed again once it is: the kernel reads the runtime's frames from then on, and walking
    /// the sample can take a while).
    pub fn walk(&mut self, sample: &SampleRecord<'_>, hold: bool) -> Option<Walked<'_>> {
        let Self {
            call_graph,
            native_only,
            spaces,
            unwinder,
            stats,
            stack_ends,
            runtimes,
            frames,
            chain,
            labels,
            ..
        } = self;
        let tid = sample.tid();
        let mut process = spaces.observe(sample.tgid(), tid, &sample.comm(), sample.time_ns());
        if !*native_only {
            runtimes.observe(&mut process, sample.time_ns());
            if hold && runtimes.runtime_found() {
                return None;
            }
        }
        frames.clear();
        if sample.state() == ThreadState::Runnable {
            // The scheduler's frames say nothing of a wait for a CPU: one marker instead.
            frames.push(Frame::Marker(Marker::Runqueue));
        } else {
            let kernel = sample.kernel_stack().iter().enumerate();
            frames.extend(kernel.map(|(depth, addr)| Frame::kernel(depth, addr)));
        }
        chain.clear();
        chain.extend(sample.user_stack().iter());
        // The frame-pointer chain, from this depth on, still to be resolved; whether a runtime is
        // ready for the stack (and may name what is left).
        let (fp_addrs, first_depth, stepped) = match (*call_graph, sample.user_regs()) {
            // No runtime steps a chain of frame pointers; one that names code by its address
            // (Go's) still names it.
            (CallGraph::Fp, Some(regs)) => {
                let kernel = sample.runtime_frames();
                (&chain[..], 0, runtimes.stepper(process.tgid(), sample.time_ns(), &regs, kernel).is_some())
            }
            (CallGraph::Fp, None) | (_, None) => (&chain[..], 0, false),
            (call_graph, Some(regs)) => {
                let snapshot = StackSnapshot::new(regs.sp, sample.stack_copy(), sample.stack_truncated());
                let tgid = process.tgid();
                let kernel = sample.runtime_frames();
                let runtime: &mut dyn RuntimeCode =
                    match runtimes.stepper(tgid, sample.time_ns(), &regs, kernel) {
                        Some(stepper) => stepper,
                        None => &mut NoRuntime,
                    };
                let unwound = unwinder.unwind(regs, &snapshot, &mut process, runtime);
                let mapping_end = process.mapping(regs.sp).map(|stack| stack.end);
                stack_ends.learn(tid, mapping_end, Needed::of(&unwound, &snapshot));
                let (tail, source) = match call_graph {
                    CallGraph::Auto => hybrid::complete(&unwound, chain),
                    _ => (&[][..], StackSource::Dwarf(unwound.end)),
                };
                stats.record(source);
                let located = unwound.frames.iter().zip(&unwound.locations).enumerate();
                for (depth, (&addr, &at)) in located {
                    if !runtimes.push_frames(tgid, depth, addr, frames) {
                        frames.push(Frame::user(tgid, depth, addr, at));
                    }
                }
                (tail, unwound.frames.len(), true)
            }
        };
        push_resolved(&mut process, stepped.then_some(&mut *runtimes), fp_addrs, first_depth, frames);
        labels.clear();
        runtimes.merge(process.tgid(), sample.runtime_frames(), frames, labels);
        runtimes.read_maps_if_stale(&mut process);
        Some(Walked { comm: process.into_comm(), frames, labels })
    }
}

/// Appends the frames of `addrs`, the first at depth `first_depth`, each named by the runtime
/// that stepped the stack, if one did (where it names code by its address: Go's), or resolved in
/// `process`.
fn push_resolved(
    process: &mut ProcessView<'_>,
    mut runtimes: Option<&mut Runtimes>,
    addrs: &[u64],
    first_depth: usize,
    frames: &mut Vec<Frame>,
) {
    let tgid = process.tgid();
    for (depth, &addr) in addrs.iter().enumerate().map(|(i, addr)| (i + first_depth, addr)) {
        if !runtimes.as_mut().is_some_and(|runtimes| runtimes.push_frames(tgid, depth, addr, frames)) {
            frames.push(Frame::user(tgid, depth, addr, process.resolve(addr, Want::Any)));
        }
        // Past a runtime's outermost frame, a chain of frame pointers leads into what is no frame.
        if runtimes.as_mut().is_some_and(|runtimes| runtimes.ends_stack(tgid, depth, addr)) {
            break;
        }
    }
}

/// What the kernel should be told, as one walk of samples learned it.
pub struct KernelUpdates {
    /// Where threads' stack copies should end.
    pub stack_ends: Vec<(Tid, u64)>,
    /// Processes whose runtime frames the kernel should walk (`None`: not any more).
    pub runtime_processes: Vec<(Tgid, Option<RuntimeProcess>)>,
}

/// How long an epoch of the budget of what targets describe lasts, at least.
const EPOCH: Duration = Duration::from_secs(1);
/// How long the files of the processes to follow are examined for runtimes, at most, before
/// sampling starts (see [`StackWalker::expect_running`]).
const EXPECTED_WITHIN: Duration = Duration::from_millis(500);

/// Threads whose stack end is remembered; beyond this the memory starts over (the kernel's map
/// is an LRU of its own).
const MAX_STACK_ENDS: usize = 65536;

/// How much of a thread's stack its samples need copied, as one unwind tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Needed {
    /// The unwind reached the thread's first frame having read nothing above this address:
    /// the rest of the stack mapping (the thread's descriptor and TLS, the main thread's
    /// arguments and environment) never helps.
    UpTo(u64),
    /// The unwind wanted bytes past a copy that stopped where the kernel was told the stack
    /// ends: copy up to the end of the mapping from now on.
    All,
    /// Nothing learned.
    Unknown,
}

impl Needed {
    fn of(unwound: &Unwound, snapshot: &StackSnapshot<'_>) -> Self {
        match unwound.end {
            UnwindEnd::Bottom => Self::UpTo(snapshot.reach()),
            UnwindEnd::Lost if !snapshot.truncated && snapshot.reach() > snapshot.end() => Self::All,
            _ => Self::Unknown,
        }
    }
}

/// Where each thread's stack copy should end, as last told to the kernel, and what is new since.
/// A copy ends at the end of the thread's stack mapping until an unwind reaches the thread's
/// first frame; from then on, at the highest address an unwind of the thread read (the first
/// frame sits at the same place for the thread's whole life). That leaves out the thread's
/// descriptor and TLS, the main thread's environment: most of the bytes of a shallow stack.
#[derive(Default)]
struct StackEnds {
    known: FxHashMap<Tid, StackEnd>,
    new: Vec<(Tid, u64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StackEnd {
    /// The end of the mapping the thread's stack pointer is in, when known (a new thread's
    /// stack is anonymous memory, which no task event reports).
    mapping_end: Option<u64>,
    /// How far samples need it copied, when known.
    needed: Option<u64>,
}

impl StackEnd {
    /// What the kernel is told: `None` for nothing (it copies up to the cap).
    fn copy_end(self) -> Option<u64> {
        match (self.needed, self.mapping_end) {
            (Some(needed), Some(end)) => Some(needed.min(end)),
            (needed, end) => needed.or(end),
        }
    }

    /// Whether a sample whose stack pointer is in a mapping ending at `mapping_end` is on the
    /// same stack (a thread id used again, or a thread on another stack, is not).
    fn same_stack(self, mapping_end: Option<u64>) -> bool {
        self.mapping_end.is_none() || mapping_end.is_none() || self.mapping_end == mapping_end
    }
}

impl StackEnds {
    fn learn(&mut self, tid: Tid, mapping_end: Option<u64>, needed: Needed) {
        let old = self.known.get(&tid).copied().filter(|old| old.same_stack(mapping_end));
        let mut end = old.unwrap_or(StackEnd { mapping_end, needed: None });
        end.mapping_end = end.mapping_end.or(mapping_end);
        end.needed = match needed {
            Needed::UpTo(reach) => Some(end.needed.map_or(reach, |needed| needed.max(reach))),
            Needed::All => Some(end.mapping_end.unwrap_or(u64::MAX)),
            Needed::Unknown => end.needed,
        };
        let told = self.known.get(&tid).and_then(|known| known.copy_end());
        if self.known.len() >= MAX_STACK_ENDS && old.is_none() {
            self.known.clear();
        }
        self.known.insert(tid, end);
        if let Some(copy_end) = end.copy_end().filter(|&copy_end| Some(copy_end) != told) {
            self.new.push((tid, copy_end));
        }
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::{SampleHeader, sample_flags};

    use super::*;
    use crate::{decode::RecordKind, testing::encode_sample};

    const TRACKING: Tracking = Tracking { all: false, follow_forks: true };

    fn own_header() -> SampleHeader {
        let pid = Tgid::own();
        // Taken after the process's first read: its name is the one the record carries.
        let time_ns = crate::clock::monotonic_ns() + 1_000_000_000;
        let mut header = SampleHeader { tgid: pid.0, tid: pid.0, time_ns, ..Default::default() };
        header.comm[..4].copy_from_slice(b"self");
        header
    }

    #[test]
    fn frame_pointer_mode_takes_kernel_and_chain_frames() {
        let ip = frame_pointer_mode_takes_kernel_and_chain_frames as *const () as usize as u64;
        let kernel = [0xffff_ffff_8100_0000, 0xffff_ffff_8100_0100];
        let record = encode_sample(&own_header(), &[], &[ip, 0x10], &kernel);
        let sample = RecordKind::Sample.decode(&record).unwrap().sample;
        let mut walker = StackWalker::new(CallGraph::Fp, TRACKING, false);
        let walked = walker.walk(&sample, false).unwrap();
        assert_eq!(walked.comm, "self", "the main thread's name is the process's");
        let frames = walked.frames;
        assert_eq!(frames[..2], [Frame::Kernel(0xffff_ffff_8100_0000), Frame::Kernel(0xffff_ffff_8100_00ff)]);
        assert!(matches!(frames[2], Frame::Module { .. }), "{frames:?}");
        assert_eq!(frames[3], Frame::Anonymous { tgid: Tgid::own(), addr: 0xf }, "a caller steps back");
        assert_eq!(walker.stats().summary().total(), 0, "fp mode does not unwind");
    }

    #[test]
    fn processes_are_young_from_when_sampling_starts() {
        let mut walker = StackWalker::new(CallGraph::Dwarf, TRACKING, false);
        // Loading the kernel side took a second: processes are young from the end of that.
        let start_ns = crate::clock::monotonic_ns() + 1_000_000_000;
        assert!(!walker.runtime_may_be_starting(start_ns), "nothing sampled yet");
        walker.sampling_starts(start_ns);
        assert!(walker.runtime_may_be_starting(start_ns + 10_000_000), "the ring drained sooner at first");
        assert!(!walker.runtime_may_be_starting(start_ns + 1_000_000_000), "then not, unless one is young");
        let mut native_only = StackWalker::new(CallGraph::Dwarf, TRACKING, true);
        native_only.sampling_starts(start_ns);
        assert!(!native_only.runtime_may_be_starting(start_ns), "no runtime is looked for");
    }

    #[test]
    fn dwarf_mode_unwinds_and_counts() {
        // A sample of this very thread: its registers and the top of its stack.
        let stack = [0u8; 64];
        let mut header = own_header();
        header.flags = sample_flags::USER_REGS;
        header.user_ip = dwarf_mode_unwinds_and_counts as *const () as usize as u64 + 4;
        header.user_sp = stack.as_ptr() as u64;
        let record = encode_sample(&header, &stack, &[], &[]);
        let sample = RecordKind::Sample.decode(&record).unwrap().sample;
        let mut walker = StackWalker::new(CallGraph::Dwarf, TRACKING, false);
        let frames = walker.walk(&sample, false).unwrap().frames.to_vec();
        assert_eq!(walker.stats().summary().total(), 1);
        assert!(matches!(frames[0], Frame::Module { .. }), "the ip resolves: {frames:?}");
        let (tid, end) = walker.take_kernel_updates().stack_ends[0];
        assert_eq!(tid, Tgid::own().main_thread());
        assert!(end > header.user_sp, "the stack's mapping ends above its pointer");
        assert!(walker.take_kernel_updates().stack_ends.is_empty(), "told once");
    }

    #[test]
    fn stack_ends_follow_what_unwinding_needs() {
        let mut ends = StackEnds::default();
        let mut told = |tid: u32, mapping_end, needed| {
            ends.learn(Tid(tid), mapping_end, needed);
            std::mem::take(&mut ends.new).into_iter().map(|(Tid(tid), end)| (tid, end)).collect::<Vec<_>>()
        };
        const END: u64 = 0x7000_0000;
        // First the mapping's end; once an unwind reached the bottom, what it read.
        assert_eq!(told(7, Some(END), Needed::Unknown), [(7, END)]);
        assert_eq!(told(7, Some(END), Needed::UpTo(END - 0x1800)), [(7, END - 0x1800)]);
        // A shallower read changes nothing (the first frame does not move); a deeper one grows it.
        assert_eq!(told(7, Some(END), Needed::UpTo(END - 0x1900)), []);
        assert_eq!(told(7, Some(END), Needed::UpTo(END - 0x1000)), [(7, END - 0x1000)]);
        assert_eq!(told(7, None, Needed::Unknown), [], "the same stack, its mapping not known here");
        // An unwind that wanted more than the copy: the whole mapping again, for good.
        assert_eq!(told(7, Some(END), Needed::All), [(7, END)]);
        assert_eq!(told(7, Some(END), Needed::UpTo(END - 0x1800)), []);
        // The thread id on another stack (used again by a new thread): starts over.
        assert_eq!(told(7, Some(0x5000_0000), Needed::Unknown), [(7, 0x5000_0000)]);
        // A new thread's stack, anonymous memory that no task event reported: its unwinds alone.
        assert_eq!(told(8, None, Needed::Unknown), []);
        assert_eq!(told(8, None, Needed::UpTo(0x6000_1000)), [(8, 0x6000_1000)]);
        assert_eq!(told(8, Some(0x6000_2000), Needed::Unknown), [], "the mapping known later");
    }

    #[test]
    fn what_an_unwind_says_is_needed() {
        let unwound = |end| Unwound { frames: vec![1], locations: vec![], end };
        let stack = [0u8; 64];
        let snapshot = StackSnapshot::new(0x1000, &stack, false);
        snapshot.read_u64(0x1020);
        assert_eq!(Needed::of(&unwound(UnwindEnd::Bottom), &snapshot), Needed::UpTo(0x1028));
        // A goroutine's first frame: the thread runs others, elsewhere.
        assert_eq!(Needed::of(&unwound(UnwindEnd::RuntimeBottom), &snapshot), Needed::Unknown);
        assert_eq!(Needed::of(&unwound(UnwindEnd::Lost), &snapshot), Needed::Unknown, "read within the copy");
        snapshot.read_u64(0x1040);
        assert_eq!(Needed::of(&unwound(UnwindEnd::Lost), &snapshot), Needed::All, "read past the copy");
        let truncated = StackSnapshot::new(0x1000, &stack, true);
        truncated.read_u64(0x1040);
        assert_eq!(
            Needed::of(&unwound(UnwindEnd::SnapshotEnd), &truncated),
            Needed::Unknown,
            "the cap's doing"
        );
    }
}
