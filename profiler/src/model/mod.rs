//! The data model: a recording as everything downstream of symbolization sees it, every sample
//! with its time, process, thread and command name, and its stack of named locations.
//!
//! Built once at the end of a live run (by the aggregation stage) or read back from a raw
//! recording file ([`raw`]); every output format renders from it, so `profiler report` of a raw
//! recording gives what the live run gave. The model imports none of the stages around it.
pub(crate) mod filter;
mod ids;
pub mod raw;
mod symbol;

use std::{borrow::Borrow, collections::HashMap, hash::Hash};

use indexmap::IndexSet;

pub use self::ids::{Tgid, Tid};
pub use self::symbol::{SourceLine, Symbol, SymbolKind, printable};
pub(crate) use self::symbol::{folded_frame, printable_owned};

/// What the recording was, for titles and reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// What was profiled: `PID 1234`, `./server --port 80`, `whole system`.
    pub target: String,
    pub frequency_hz: u64,
    /// Wall-clock time of the start, in nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    pub duration_ns: u64,
    /// `auto`, `dwarf` or `fp`.
    pub call_graph: String,
    /// KiB of user stack copied per sample (0 with frame pointers only).
    pub stack_copy_kib: u32,
    /// Samples the kernel could not hand over (ring buffer full).
    pub lost_samples: u64,
    pub unwind: UnwindSummary,
    /// What the samples' weights count.
    pub weight: Weight,
    /// The allocator calls of a leak recording.
    pub allocations: Option<AllocationTotals>,
}

impl Meta {
    /// Nanoseconds between two samples of one CPU (the sampling period).
    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / self.frequency_hz.max(1)
    }
}

/// What the leak tracker counted of a process's allocator calls, beside the outstanding blocks
/// (those are the samples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocationTotals {
    /// Calls that allocate (nested calls inside the allocator not counted).
    pub calls: u64,
    /// Calls that free a non-null pointer.
    pub frees: u64,
    /// Allocation calls that returned no memory.
    pub failed: u64,
    /// The most bytes outstanding at once, of the blocks followed.
    pub peak_bytes: u64,
    /// Allocations not followed because the kernel's table of blocks was full.
    pub not_followed: u64,
    /// One allocation in this many was followed (1: all); bytes and blocks are scaled by it.
    pub sample_every: u32,
    /// Only blocks allocated at least this long before the end were kept.
    pub min_age_ns: Option<u64>,
}

/// What a sample's weight counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Weight {
    /// CPU samples: each weighs 1, one sampling period.
    #[default]
    Samples,
    /// Bytes of allocated blocks not freed: a sample per block, weighing its size (`leaks`).
    Bytes,
    /// Nanoseconds threads spent off the CPU (`record --off-cpu`): a sample per span.
    OffCpuNs,
    /// Nanoseconds of threads' time (`record --wall`): CPU samples weigh a sampling period,
    /// spans off the CPU their length.
    WallNs,
}

impl Weight {
    /// Whether weights are times, in nanoseconds.
    pub fn is_time(self) -> bool {
        matches!(self, Self::OffCpuNs | Self::WallNs)
    }
}

/// What a thread was doing in a sample: on the CPU, or off it and why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThreadState {
    #[default]
    OnCpu,
    /// Blocked, interruptibly (`S`).
    Sleeping,
    /// Blocked, uninterruptibly (`D`).
    Uninterruptible,
    /// Runnable, waiting for a CPU (`R`).
    Runnable,
}

impl ThreadState {
    pub const OFF_CPU: [Self; 3] = [Self::Sleeping, Self::Uninterruptible, Self::Runnable];

    /// A state off the CPU from its kernel code (`profiler_common::OffCpuState`: 1 sleeping,
    /// 2 uninterruptible, 3 runnable); anything else counts as sleeping.
    pub fn off_cpu(code: u32) -> Self {
        match code {
            2 => Self::Uninterruptible,
            3 => Self::Runnable,
            _ => Self::Sleeping,
        }
    }

    /// The letter `ps` shows (`-` on the CPU).
    pub fn letter(self) -> char {
        match self {
            Self::OnCpu => '-',
            Self::Sleeping => 'S',
            Self::Uninterruptible => 'D',
            Self::Runnable => 'R',
        }
    }

    pub fn from_letter(letter: char) -> Option<Self> {
        [Self::OnCpu, Self::Sleeping, Self::Uninterruptible, Self::Runnable]
            .into_iter()
            .find(|state| state.letter() == letter)
    }

    /// What it means, in messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::OnCpu => "on the CPU",
            Self::Sleeping => "sleeping (S)",
            Self::Uninterruptible => "uninterruptible (D)",
            Self::Runnable => "waiting for a CPU (R)",
        }
    }
}

impl Weight {
    /// What a weight counts, in the unit's plural.
    pub fn unit(self) -> &'static str {
        match self {
            Self::Samples => "samples",
            Self::Bytes => "bytes",
            Self::OffCpuNs | Self::WallNs => "nanoseconds",
        }
    }
}

/// How the user stacks were obtained, in samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindSummary {
    /// Reached the outermost frame.
    pub complete: u64,
    pub completed_with_frame_pointers: u64,
    /// Cut by the end of the stack copy.
    pub truncated: u64,
    pub missing_cfi: u64,
    pub lost: u64,
}

impl UnwindSummary {
    pub fn total(&self) -> u64 {
        self.complete + self.completed_with_frame_pointers + self.truncated + self.missing_cfi + self.lost
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModuleInfo {
    /// The path the target mapped it from (or `[vdso]`).
    pub path: String,
    /// GNU build id, empty when the file has none.
    pub build_id: Vec<u8>,
}

impl ModuleInfo {
    /// The file name, for display.
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// A place code ran: a module and an offset in its file, a kernel address, or an address in
/// anonymous memory; with its names, outermost first (several when functions were inlined).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// Index into [`Recording::modules`].
    pub module: Option<u32>,
    /// File offset in the module; else the address.
    pub address: u64,
    pub symbols: Vec<Symbol>,
}

impl Location {
    pub fn is_kernel(&self) -> bool {
        self.symbols.first().is_some_and(|s| s.kind == SymbolKind::Kernel)
    }
}

/// Labels a sample carries (a goroutine's pprof labels), sorted by key.
pub(crate) type LabelSet = Vec<(String, String)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    pub pid: Tgid,
    pub tid: Tid,
    /// Index into [`Recording::comms`]: the process's command name.
    pub comm: u32,
    /// Index into [`Recording::stacks`].
    pub stack: u32,
    /// 1 for a CPU sample; the bytes of an outstanding block; nanoseconds (see [`Meta::weight`]).
    pub weight: u64,
    /// On the CPU, or off it (then `time_ns` is when it left, `weight` how long).
    pub state: ThreadState,
    /// 0 when it has no labels; else its labels are [`Recording::label_sets`]`[labels - 1]`.
    pub labels: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recording {
    pub meta: Meta,
    pub modules: Vec<ModuleInfo>,
    pub locations: Vec<Location>,
    /// Location indexes, innermost first.
    pub stacks: Vec<Vec<u32>>,
    pub comms: Vec<String>,
    /// The sets of labels samples carry.
    pub label_sets: Vec<LabelSet>,
    /// In time order.
    pub samples: Vec<Sample>,
}

impl Recording {
    /// The innermost frame of each sample, weighed: self time (or bytes) by function (named as
    /// in folded stacks, `_[k]` for the kernel).
    pub fn self_time(&self) -> Vec<(String, u64)> {
        let mut by_stack: HashMap<u32, u64> = HashMap::new();
        for sample in &self.samples {
            *by_stack.entry(sample.stack).or_default() += sample.weight;
        }
        let mut by_name: HashMap<String, u64> = HashMap::new();
        for (stack, n) in by_stack {
            let leaf = self.stacks[stack as usize]
                .first()
                .and_then(|&l| self.locations[l as usize].symbols.last())
                .map_or_else(|| "[no stack]".to_owned(), Symbol::display_name);
            *by_name.entry(leaf).or_default() += n;
        }
        let mut counts: Vec<(String, u64)> = by_name.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        counts
    }

    /// The labels of `sample` (none for most).
    pub fn labels(&self, sample: &Sample) -> &[(String, String)] {
        self.label_set(sample.labels)
    }

    /// The labels of [`Sample::labels`] `set` (none for 0).
    pub fn label_set(&self, set: u32) -> &[(String, String)] {
        let set = set.checked_sub(1).and_then(|set| self.label_sets.get(set as usize));
        set.map_or(&[], Vec::as_slice)
    }

    /// The samples' weights, summed: samples, or bytes.
    pub fn total_weight(&self) -> u64 {
        self.samples.iter().map(|s| s.weight).sum()
    }

    /// The recording with its scripts' frames' lines dropped: a frame per function.
    pub fn without_script_lines(&self) -> Self {
        let mut recording = self.clone();
        for symbol in recording.locations.iter_mut().flat_map(|location| &mut location.symbols) {
            if let (SymbolKind::Script, Some(source)) = (symbol.kind, &mut symbol.source) {
                source.line = 0;
                source.column = 0;
            }
        }
        recording
    }

    /// How many samples were taken: CPU samples (a sample of the model may count several), or
    /// outstanding blocks, or spans off the CPU and CPU samples.
    pub fn sample_count(&self) -> u64 {
        match self.meta.weight {
            Weight::Samples => self.total_weight(),
            Weight::Bytes | Weight::OffCpuNs => self.samples.len() as u64,
            Weight::WallNs => self
                .samples
                .iter()
                .map(|s| if s.state == ThreadState::OnCpu { s.weight / self.meta.period_ns() } else { 1 })
                .sum(),
        }
    }

    /// Number of distinct processes sampled.
    pub fn process_count(&self) -> usize {
        let mut pids: Vec<Tgid> = self.samples.iter().map(|s| s.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        pids.len()
    }
}

/// The index of `value` in `set`, added at the end if it is new: how names, strings and stacks
/// are stored once and referred to by number, in the model and in the formats written from it.
pub(crate) fn intern<T, Q>(set: &mut IndexSet<T, impl std::hash::BuildHasher>, value: &Q) -> usize
where
    T: Borrow<Q> + Hash + Eq + From<Q::Owned>,
    Q: ToOwned + Hash + Eq + ?Sized,
{
    match set.get_index_of(value) {
        Some(index) => index,
        None => set.insert_full(value.to_owned().into()).0,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small recording: two processes, user and kernel frames, an inlined function, a runtime's
    /// function, a sample with labels.
    pub(crate) fn fixture() -> Recording {
        let location =
            |name: &str, kind| Location { module: None, address: 0, symbols: vec![Symbol::new(name, kind)] };
        let inlined = Location {
            module: Some(0),
            address: 0x1234,
            symbols: vec![
                Symbol::new("work", SymbolKind::Function).at(Some(SourceLine {
                    file: "/src/app/work.cpp".into(),
                    line: 42,
                    column: 0,
                })),
                Symbol::new("push_back", SymbolKind::Inlined).at(Some(SourceLine {
                    file: "/usr/include/c++/12/bits/stl_vector.h".into(),
                    line: 1287,
                    column: 9,
                })),
            ],
        };
        Recording {
            meta: Meta {
                target: "PID 10".into(),
                frequency_hz: 99,
                duration_ns: 1_000_000_000,
                ..Default::default()
            },
            modules: vec![ModuleInfo { path: "/usr/bin/app".into(), build_id: vec![0xab, 0xcd] }],
            locations: vec![
                location("main", SymbolKind::Function),
                inlined,
                // A runtime's function, which says its language.
                Location {
                    symbols: vec![Symbol::new("hot", SymbolKind::Function).in_language("Go")],
                    ..location("hot", SymbolKind::Function)
                },
                location("sys_read", SymbolKind::Kernel),
            ],
            stacks: vec![vec![2, 0], vec![1, 0], vec![3, 2, 0]],
            comms: vec!["app".into(), "other".into()],
            label_sets: vec![vec![("endpoint".into(), "/api".into()), ("worker".into(), "2".into())]],
            samples: vec![
                Sample {
                    time_ns: 0,
                    pid: Tgid(10),
                    tid: Tid(10),
                    comm: 0,
                    stack: 0,
                    weight: 1,
                    state: ThreadState::OnCpu,
                    labels: 0,
                },
                Sample {
                    time_ns: 10,
                    pid: Tgid(10),
                    tid: Tid(11),
                    comm: 0,
                    stack: 1,
                    weight: 1,
                    state: ThreadState::OnCpu,
                    labels: 1,
                },
                Sample {
                    time_ns: 20,
                    pid: Tgid(10),
                    tid: Tid(11),
                    comm: 0,
                    stack: 0,
                    weight: 1,
                    state: ThreadState::OnCpu,
                    labels: 0,
                },
                Sample {
                    time_ns: 30,
                    pid: Tgid(20),
                    tid: Tid(20),
                    comm: 1,
                    stack: 2,
                    weight: 1,
                    state: ThreadState::OnCpu,
                    labels: 0,
                },
            ],
        }
    }

    #[test]
    fn self_time_by_innermost_symbol() {
        let recording = fixture();
        assert_eq!(
            recording.self_time(),
            [("hot".to_owned(), 2), ("push_back_[i]".to_owned(), 1), ("sys_read_[k]".to_owned(), 1)]
        );
        assert_eq!(recording.process_count(), 2);
    }

    #[test]
    fn interning_keeps_first_indexes() {
        let mut set: IndexSet<String> = IndexSet::new();
        assert_eq!((intern(&mut set, "a"), intern(&mut set, "b"), intern(&mut set, "a")), (0, 1, 0));
        assert_eq!(set.len(), 2);
    }
}
