//! Aggregation: the samples of a recording with their stacks and command names interned, and,
//! once the frames are named, the [`Recording`] every output renders from.
use std::collections::HashMap;

use indexmap::IndexSet;
use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::{
    address_space::{ModuleId, Modules},
    frame::Frame,
    kernel::functions::KernelFunctions,
    model::{
        LabelSet, Location, Meta, ModuleInfo, Recording, Sample, Tgid, ThreadState, Tid, intern, printable,
        printable_owned,
    },
    symbolize::Symbols,
    walk::Walked,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommId(u32);

/// A set of labels; 0: none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelsId(u32);

/// Where and when a record was taken: its process, thread, command name and stack, whether the
/// thread was on the CPU, and the labels its runtime gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub time_ns: u64,
    pub tgid: Tgid,
    pub tid: Tid,
    /// The process's command name at the time.
    pub comm: CommId,
    pub stack: StackId,
    pub state: ThreadState,
    pub labels: LabelsId,
}

/// A sample: a site, and what it weighs (1 for a CPU sample; its bytes for an outstanding
/// block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weighted {
    pub site: Site,
    pub weight: u64,
}

/// What the outputs need of each sample, beyond its stack and command name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Detail {
    /// Its time (and so each sample on its own).
    pub time: bool,
    pub process: bool,
    pub thread: bool,
}

impl Detail {
    pub const ALL: Self = Self { time: true, process: true, thread: true };

    /// What either needs.
    pub fn union(self, other: Self) -> Self {
        Self {
            time: self.time || other.time,
            process: self.process || other.process,
            thread: self.thread || other.thread,
        }
    }
}

// The size the documentation above quotes.
const _: () = assert!(std::mem::size_of::<crate::model::Sample>() == 40);

/// The samples of a recording. Identical frames, stacks and names are stored once, a stack as
/// its frames' indices (4 bytes a frame, not 16: a busy host's recording of minutes holds
/// hundreds of thousands, most of them of stacks that differ by their innermost frame alone).
/// When no output needs each sample's time, samples are counted by what the outputs need (stack
/// and command, and the process or thread when they need those), so memory grows with what
/// differs, not with the length of the recording or the processes and threads that came and
/// went; otherwise each is kept (40 bytes).
#[derive(Debug, Default)]
pub struct Aggregate {
    /// FxHash for both: every frame of every sample (up to 1024) is looked up in `frames`, and
    /// its stack, as their indices, in `stacks`.
    frames: IndexSet<Frame, FxBuildHasher>,
    stacks: IndexSet<Box<[u32]>, FxBuildHasher>,
    /// The indices of the stack being interned (kept for its allocation).
    indices: Vec<u32>,
    comms: IndexSet<String, FxBuildHasher>,
    label_sets: IndexSet<LabelSet, FxBuildHasher>,
    samples: Samples,
    detail: Detail,
    /// Kernel frames keep their addresses in the recording (`--kernel-addresses`); else they
    /// have none, so that no output tells where the kernel is loaded (KASLR).
    kernel_addresses: bool,
    /// Where kernel frames' functions start, to intern each as that (without their addresses).
    kernel_functions: Option<KernelFunctions>,
    total_weight: u64,
    /// Frames [`Self::new_frames`] has handed out (frames are numbered in order).
    frames_handed_out: usize,
}

/// Stack, command, process, thread, state, labels.
type CountedKey = (StackId, CommId, Tgid, Tid, ThreadState, LabelsId);

#[derive(Debug)]
enum Samples {
    /// Each sample, in the order they came.
    Each(Vec<Weighted>),
    /// Summed weights by what outputs tell apart, with the time of the first.
    Counted(FxHashMap<CountedKey, (u64, u64)>),
}

impl Default for Samples {
    fn default() -> Self {
        Self::Each(Vec::new())
    }
}

impl Aggregate {
    /// An aggregate that keeps what `detail` says of each sample.
    pub fn new(detail: Detail) -> Self {
        let samples =
            if detail.time { Samples::Each(Vec::new()) } else { Samples::Counted(FxHashMap::default()) };
        Self { samples, detail, ..Self::default() }
    }

    /// The same, keeping the addresses of kernel frames in the recordings it builds.
    pub fn with_kernel_addresses(self, keep: bool) -> Self {
        Self { kernel_addresses: keep, ..self }
    }

    /// The same, interning each kernel frame as its function's start (see [`KernelFunctions`]).
    pub fn with_kernel_functions(self, kernel_functions: KernelFunctions) -> Self {
        Self { kernel_functions: Some(kernel_functions), ..self }
    }

    /// The site of a record of thread `tid` of process `tgid` at `time_ns`, in `state`, its
    /// stack walked.
    pub fn site(
        &mut self,
        time_ns: u64,
        tgid: Tgid,
        tid: Tid,
        state: ThreadState,
        walked: &Walked<'_>,
    ) -> Site {
        let (comm, stack) = (self.intern_comm(walked.comm), self.intern_stack(walked.frames));
        Site { time_ns, tgid, tid, comm, stack, state, labels: self.intern_labels(walked.labels) }
    }

    /// Adds a sample.
    pub fn push(&mut self, site: Site, weight: u64) {
        self.total_weight += weight;
        match &mut self.samples {
            Samples::Each(samples) => samples.push(Weighted { site, weight }),
            Samples::Counted(counts) => {
                let tgid = if self.detail.process { site.tgid } else { Tgid(0) };
                let tid = if self.detail.thread { site.tid } else { Tid(0) };
                let key = (site.stack, site.comm, tgid, tid, site.state, site.labels);
                let count = counts.entry(key).or_insert((site.time_ns, 0));
                count.1 += weight;
            }
        }
    }

    /// The samples so far, leaving an empty aggregate that keeps the same detail. Where kernel
    /// functions start is asked anew too: the kernel's modules and BPF programs come and go.
    pub fn take(&mut self) -> Aggregate {
        let kernel_functions = self.kernel_functions.take().map(KernelFunctions::afresh);
        let empty = Aggregate::new(self.detail).with_kernel_addresses(self.kernel_addresses);
        std::mem::replace(self, Aggregate { kernel_functions, ..empty })
    }

    /// The samples' weights, summed.
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// The id of a stack (innermost frame first), stored once however often it recurs.
    pub fn intern_stack(&mut self, frames: &[Frame]) -> StackId {
        let mut indices = std::mem::take(&mut self.indices);
        indices.clear();
        // A loop for each case: asking per frame whether to place it costs a tenth of a sample.
        match &mut self.kernel_functions {
            Some(kernel_functions) => {
                kernel_functions.learn(frames);
                let placed = frames.iter().map(|&frame| kernel_functions.placed(frame));
                indices.extend(placed.map(|frame| intern(&mut self.frames, &frame) as u32));
            }
            None => indices.extend(frames.iter().map(|frame| intern(&mut self.frames, frame) as u32)),
        }
        let stack = StackId(intern(&mut self.stacks, &indices[..]) as u32);
        self.indices = indices;
        stack
    }

    pub fn intern_comm(&mut self, comm: &str) -> CommId {
        CommId(intern(&mut self.comms, &*printable(comm)) as u32)
    }

    fn intern_labels(&mut self, labels: &[(String, String)]) -> LabelsId {
        match labels.is_empty() {
            true => LabelsId(0),
            false => LabelsId(intern(&mut self.label_sets, labels) as u32 + 1),
        }
    }

    /// The samples: each one, or one per distinct (stack, command, process, thread) with their
    /// weights summed.
    pub fn samples(&self) -> impl Iterator<Item = Weighted> + '_ {
        let (each, counted) = match &self.samples {
            Samples::Each(samples) => (Some(samples.iter().copied()), None),
            Samples::Counted(counts) => (None, Some(counts.iter())),
        };
        let counted = counted.into_iter().flatten().map(
            |(&(stack, comm, tgid, tid, state, labels), &(time_ns, weight))| Weighted {
                site: Site { time_ns, tgid, tid, comm, stack, state, labels },
                weight,
            },
        );
        each.into_iter().flatten().chain(counted)
    }

    /// The frames of a stack, innermost first.
    pub fn stack(&self, id: StackId) -> impl ExactSizeIterator<Item = Frame> + '_ {
        self.stacks[id.0 as usize].iter().map(|&index| self.frames[index as usize])
    }

    pub fn comm(&self, id: CommId) -> &str {
        &self.comms[id.0 as usize]
    }

    /// The frames first seen since the last call, each once, in order: the frames to name next.
    pub fn new_frames(&mut self) -> Vec<Frame> {
        let mut frames: Vec<Frame> = self.frames.iter().skip(self.frames_handed_out).copied().collect();
        self.frames_handed_out = self.frames.len();
        frames.sort_unstable();
        frames
    }

    /// The recording: the samples, in time order and timed from `start_monotonic_ns`, with their
    /// frames named by `symbols`.
    pub fn recording(
        &self,
        symbols: &Symbols,
        modules: &Modules,
        start_monotonic_ns: u64,
        meta: Meta,
    ) -> Recording {
        let mut builder = Builder {
            recording: Recording { meta, ..Default::default() },
            kernel_addresses: self.kernel_addresses,
            ..Default::default()
        };
        for Weighted { site, weight } in self.samples() {
            let stack = match builder.stack_ids.get(&site.stack) {
                Some(&index) => index,
                None => builder.add_stack(site.stack, self.stack(site.stack), symbols, modules),
            };
            let comm = *builder.comm_ids.entry(site.comm).or_insert_with(|| {
                builder.recording.comms.push(self.comm(site.comm).to_owned());
                builder.recording.comms.len() as u32 - 1
            });
            let labels = match site.labels {
                LabelsId(0) => 0,
                LabelsId(id) => *builder.label_ids.entry(id).or_insert_with(|| {
                    builder.recording.label_sets.push(self.label_sets[id as usize - 1].clone());
                    builder.recording.label_sets.len() as u32
                }),
            };
            builder.recording.samples.push(Sample {
                time_ns: site.time_ns.saturating_sub(start_monotonic_ns),
                pid: site.tgid,
                tid: site.tid,
                comm,
                stack,
                weight,
                state: site.state,
                labels,
            });
        }
        builder.recording.samples.sort_by_key(|s| s.time_ns);
        builder.recording
    }
}

/// A recording being built: what was added to it so far, by the ids of the aggregate.
#[derive(Default)]
struct Builder {
    recording: Recording,
    location_ids: HashMap<Frame, u32>,
    module_ids: HashMap<ModuleId, u32>,
    stack_ids: HashMap<StackId, u32>,
    comm_ids: HashMap<CommId, u32>,
    /// By the aggregate's [`LabelsId`], the recording's [`Sample::labels`].
    label_ids: HashMap<u32, u32>,
    kernel_addresses: bool,
}

impl Builder {
    fn add_stack(
        &mut self,
        id: StackId,
        frames: impl Iterator<Item = Frame>,
        symbols: &Symbols,
        modules: &Modules,
    ) -> u32 {
        let locations = frames.map(|frame| self.location(&frame, symbols, modules)).collect();
        self.recording.stacks.push(locations);
        let index = self.recording.stacks.len() as u32 - 1;
        self.stack_ids.insert(id, index);
        index
    }

    fn location(&mut self, frame: &Frame, symbols: &Symbols, modules: &Modules) -> u32 {
        if let Some(&index) = self.location_ids.get(frame) {
            return index;
        }
        let symbols = symbols.of(frame).to_vec();
        let location = match *frame {
            Frame::Kernel(address) => {
                Location { module: None, address: if self.kernel_addresses { address } else { 0 }, symbols }
            }
            Frame::Anonymous { addr: address, .. } => Location { module: None, address, symbols },
            Frame::Marker(_) => Location { module: None, address: 0, symbols },
            Frame::Runtime { line, .. } => Location { module: None, address: line.into(), symbols },
            Frame::Module { module, offset } => {
                Location { module: Some(self.module(module, modules)), address: offset, symbols }
            }
        };
        self.recording.locations.push(location);
        let index = self.recording.locations.len() as u32 - 1;
        self.location_ids.insert(*frame, index);
        index
    }

    fn module(&mut self, id: ModuleId, modules: &Modules) -> u32 {
        *self.module_ids.entry(id).or_insert_with(|| {
            let module = modules.get(id);
            self.recording.modules.push(ModuleInfo {
                path: printable_owned(module.path().to_string_lossy().into_owned()),
                build_id: module.build_id().map(<[u8]>::to_vec).unwrap_or_default(),
            });
            self.recording.modules.len() as u32 - 1
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Symbol, SymbolKind};

    fn add(aggregate: &mut Aggregate, time_ns: u64, tgid: u32, tid: u32, comm: &str, frames: &[Frame]) {
        let site = aggregate.site(
            time_ns,
            Tgid(tgid),
            Tid(tid),
            ThreadState::OnCpu,
            &Walked { comm, frames, labels: &[] },
        );
        aggregate.push(site, 1);
    }

    #[test]
    fn interns_stacks_and_comms() {
        let mut aggregate = Aggregate::default();
        let a = [Frame::Kernel(1), Frame::Anonymous { tgid: Tgid(7), addr: 2 }];
        let b = [Frame::Anonymous { tgid: Tgid(7), addr: 3 }];
        add(&mut aggregate, 10, 7, 7, "app", &a);
        add(&mut aggregate, 20, 7, 8, "app", &a);
        assert_eq!(aggregate.new_frames().len(), 2);
        add(&mut aggregate, 30, 7, 8, "app", &b);
        add(&mut aggregate, 40, 9, 9, "other", &a);
        assert_eq!(aggregate.samples().count(), 4);
        let described: Vec<(&str, Vec<Frame>)> = aggregate
            .samples()
            .map(|s| (aggregate.comm(s.site.comm), aggregate.stack(s.site.stack).collect()))
            .collect();
        let (a, b) = (a.to_vec(), b.to_vec());
        assert_eq!(described, [("app", a.clone()), ("app", a.clone()), ("app", b), ("other", a)]);
        assert_eq!(
            aggregate.new_frames(),
            [Frame::Anonymous { tgid: Tgid(7), addr: 3 }],
            "only the new stack's"
        );
        assert!(aggregate.new_frames().is_empty());
        // A new stack of frames seen before hands out nothing: its frames are named already.
        let c = [Frame::Kernel(1), Frame::Anonymous { tgid: Tgid(7), addr: 3 }];
        add(&mut aggregate, 50, 7, 8, "app", &c);
        assert!(aggregate.new_frames().is_empty());
        assert_eq!(aggregate.stack(StackId(2)).collect::<Vec<_>>(), c);
        assert_eq!(
            aggregate.samples().nth(2).unwrap(),
            Weighted {
                site: Site {
                    time_ns: 30,
                    tgid: Tgid(7),
                    tid: Tid(8),
                    comm: CommId(0),
                    stack: StackId(1),
                    state: ThreadState::OnCpu,
                    labels: LabelsId(0)
                },
                weight: 1
            }
        );
    }

    #[test]
    fn stacks_interned_without_samples() {
        let mut aggregate = Aggregate::default();
        let frames = [Frame::Kernel(1)];
        let stack = aggregate.intern_stack(&frames);
        assert_eq!(aggregate.intern_stack(&frames), stack);
        assert_eq!(aggregate.intern_stack(&[]), StackId(1), "an empty stack is a stack");
        assert_eq!(aggregate.samples().count(), 0);
        let comm = aggregate.intern_comm("app");
        aggregate.push(
            Site {
                time_ns: 5,
                tgid: Tgid(3),
                tid: Tid(3),
                comm,
                stack,
                state: ThreadState::OnCpu,
                labels: LabelsId(0),
            },
            4096,
        );
        assert_eq!(aggregate.samples().next().unwrap().weight, 4096);
    }

    #[test]
    fn recording_names_frames_in_time_order() {
        let main = Frame::Anonymous { tgid: Tgid(1), addr: 0x10 };
        let leaf = Frame::Kernel(0xffff_0000);
        let mut symbols = Symbols::default();
        symbols.insert(main, vec![Symbol::new("main", SymbolKind::Function)]);
        symbols.insert(leaf, vec![Symbol::new("schedule", SymbolKind::Kernel)]);
        let mut aggregate = Aggregate::default();
        add(&mut aggregate, 1_500, 1, 1, "app", &[leaf, main]);
        add(&mut aggregate, 1_000, 1, 2, "app", &[main]);
        let recording = aggregate.recording(&symbols, &Modules::default(), 1_000, Meta::default());
        assert_eq!(recording.samples.len(), 2);
        assert_eq!(
            recording.samples[0],
            Sample {
                time_ns: 0,
                pid: Tgid(1),
                tid: Tid(2),
                comm: 0,
                stack: 1,
                weight: 1,
                state: ThreadState::OnCpu,
                labels: 0
            },
            "sorted by time"
        );
        assert_eq!(recording.stacks, [vec![0, 1], vec![1]]);
        assert!(recording.locations[0].is_kernel());
        assert_eq!(recording.locations[1].symbols[0].name, "main");
    }

    #[test]
    fn kernel_frames_are_located_nowhere_unless_asked() {
        let (kernel, user) =
            (Frame::Kernel(0xffff_ffff_8100_0010), Frame::Anonymous { tgid: Tgid(1), addr: 0x10 });
        for keep in [false, true] {
            let mut aggregate = Aggregate::new(Detail::default()).with_kernel_addresses(keep);
            add(&mut aggregate, 1, 1, 1, "app", &[kernel, user]);
            let window = aggregate.take();
            assert_eq!(aggregate.kernel_addresses, keep, "a new window keeps the choice");
            let recording = window.recording(&Symbols::default(), &Modules::default(), 0, Meta::default());
            let addresses: Vec<u64> = recording.locations.iter().map(|l| l.address).collect();
            let expected = if keep { 0xffff_ffff_8100_0010 } else { 0 };
            assert_eq!(addresses, [expected, 0x10], "user addresses stay");
        }
    }

    #[test]
    fn kernel_frames_are_interned_at_their_functions_start_asked_afresh_each_window() {
        /// Kernel functions 4 KiB long, each at its page; counts the addresses asked.
        struct Paged(std::sync::Arc<std::sync::atomic::AtomicUsize>);
        impl crate::kernel::functions::FunctionStarts for Paged {
            fn starts(&mut self, addresses: &[u64]) -> anyhow::Result<Vec<Option<u64>>> {
                self.0.fetch_add(addresses.len(), std::sync::atomic::Ordering::Relaxed);
                Ok(addresses.iter().map(|&address| Some(address & !0xfff)).collect())
            }
        }
        let asked = std::sync::Arc::default();
        let functions = KernelFunctions::new(Box::new(Paged(std::sync::Arc::clone(&asked))));
        let mut aggregate = Aggregate::new(Detail::default()).with_kernel_functions(functions);
        let user = Frame::Anonymous { tgid: Tgid(1), addr: 0x10 };
        let (a, b) = (Frame::Kernel(0xffff_ffff_8100_0010), Frame::Kernel(0xffff_ffff_8100_0f00));
        let first = aggregate.intern_stack(&[a, user]);
        assert_eq!(aggregate.intern_stack(&[b, user]), first, "one function, one stack");
        assert_eq!(aggregate.stack(first).collect::<Vec<_>>(), [Frame::Kernel(0xffff_ffff_8100_0000), user]);
        assert_eq!(aggregate.new_frames().len(), 2, "named once");
        let _window = aggregate.take();
        aggregate.intern_stack(&[a]);
        let asked = asked.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(asked, 3, "each address once a window: modules and BPF programs come and go");
    }

    #[test]
    fn details_unite() {
        let (time, thread) =
            (Detail { time: true, ..Detail::default() }, Detail { thread: true, ..Detail::default() });
        assert_eq!(time.union(thread), Detail { time: true, process: false, thread: true });
        assert_eq!(Detail::ALL.union(Detail::default()), Detail::ALL);
    }

    #[test]
    fn counted_samples_sum_their_weights() {
        let mut aggregate = Aggregate::new(Detail { thread: true, ..Detail::default() });
        let (a, b) = ([Frame::Kernel(1)], [Frame::Kernel(2)]);
        for (time_ns, tid, frames) in [(10, 1, &a), (20, 1, &a), (30, 2, &a), (40, 1, &b), (50, 1, &a)] {
            add(&mut aggregate, time_ns, 7, tid, "app", frames);
        }
        let mut samples: Vec<(u64, u32, u64)> =
            aggregate.samples().map(|s| (s.site.time_ns, s.site.tid.0, s.weight)).collect();
        samples.sort_unstable();
        assert_eq!(samples, [(10, 1, 3), (30, 2, 1), (40, 1, 1)], "by stack and thread, from the first time");
        assert!(aggregate.samples().all(|s| s.site.tgid == Tgid(0)), "no process: no output needs it");
        assert_eq!(aggregate.total_weight(), 5);
        let recording = aggregate.recording(&Symbols::default(), &Modules::default(), 0, Meta::default());
        assert_eq!(recording.total_weight(), 5);
        assert_eq!(recording.samples.len(), 3);
    }
}
