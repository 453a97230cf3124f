//! A recording as everything downstream of symbolization sees it: every sample with its time,
//! process, thread and command name, and its stack of named locations.
//!
//! Built once from a live run ([`Recording::from_live`]) or read back from a raw recording file
//! ([`raw`]); every output format renders from it, so `profiler report` of a raw recording gives
//! what the live run gave.
pub mod filter;
pub mod raw;

use std::collections::HashMap;

use crate::{
    frame::Frame,
    module::{ModuleId, Modules},
    profile::Profile,
    symbolize::{Symbol, SymbolKind, Symbols},
};

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
}

/// What a sample's weight counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Weight {
    /// CPU samples: each weighs 1, one sampling period.
    #[default]
    Samples,
    /// Bytes of allocated blocks not freed: a sample per block, weighing its size (`leaks`).
    Bytes,
}

impl Weight {
    /// What a weight counts, in the unit's plural.
    pub fn unit(self) -> &'static str {
        match self {
            Self::Samples => "samples",
            Self::Bytes => "bytes",
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

#[derive(Clone, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug, PartialEq, Eq)]
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    /// Index into [`Recording::comms`]: the process's command name.
    pub comm: u32,
    /// Index into [`Recording::stacks`].
    pub stack: u32,
    /// 1 for a CPU sample; the bytes of an outstanding block (see [`Meta::weight`]).
    pub weight: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recording {
    pub meta: Meta,
    pub modules: Vec<ModuleInfo>,
    pub locations: Vec<Location>,
    /// Location indexes, innermost first.
    pub stacks: Vec<Vec<u32>>,
    pub comms: Vec<String>,
    /// In time order.
    pub samples: Vec<Sample>,
}

impl Recording {
    /// The recording of a live run: its samples (times made relative to `start_monotonic_ns`)
    /// with their frames named by `symbols`.
    pub fn from_live(
        profile: &Profile,
        symbols: &Symbols,
        modules: &Modules,
        start_monotonic_ns: u64,
        meta: Meta,
    ) -> Self {
        let mut recording = Recording { meta, ..Default::default() };
        let mut location_ids: HashMap<Frame, u32> = HashMap::new();
        let mut module_ids: HashMap<ModuleId, u32> = HashMap::new();
        let mut stack_ids: HashMap<crate::profile::StackId, u32> = HashMap::new();
        let mut comm_ids: HashMap<crate::profile::CommId, u32> = HashMap::new();
        for sample in profile.samples() {
            let stack = *stack_ids.entry(sample.stack).or_insert_with(|| {
                let locations = profile
                    .stack(sample.stack)
                    .iter()
                    .map(|frame| {
                        *location_ids.entry(*frame).or_insert_with(|| {
                            let location =
                                location(frame, symbols, modules, &mut module_ids, &mut recording.modules);
                            recording.locations.push(location);
                            recording.locations.len() as u32 - 1
                        })
                    })
                    .collect();
                recording.stacks.push(locations);
                recording.stacks.len() as u32 - 1
            });
            let comm = *comm_ids.entry(sample.comm).or_insert_with(|| {
                recording.comms.push(profile.comm(sample.comm).to_owned());
                recording.comms.len() as u32 - 1
            });
            recording.samples.push(Sample {
                time_ns: sample.time_ns.saturating_sub(start_monotonic_ns),
                pid: sample.tgid,
                tid: sample.tid,
                comm,
                stack,
                weight: sample.weight,
            });
        }
        recording.samples.sort_by_key(|s| s.time_ns);
        recording
    }

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
                .map_or_else(|| "[no stack]".to_owned(), crate::render::folded::frame_name);
            *by_name.entry(leaf).or_default() += n;
        }
        let mut counts: Vec<(String, u64)> = by_name.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        counts
    }

    /// The samples' weights, summed: samples, or bytes.
    pub fn total_weight(&self) -> u64 {
        self.samples.iter().map(|s| s.weight).sum()
    }

    /// Number of distinct processes sampled.
    pub fn process_count(&self) -> usize {
        let mut pids: Vec<u32> = self.samples.iter().map(|s| s.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        pids.len()
    }
}

fn location(
    frame: &Frame,
    symbols: &Symbols,
    modules: &Modules,
    module_ids: &mut HashMap<ModuleId, u32>,
    infos: &mut Vec<ModuleInfo>,
) -> Location {
    let symbols = symbols.of(frame).to_vec();
    match *frame {
        Frame::Kernel(addr) => Location { module: None, address: addr, symbols },
        Frame::Anonymous { addr, .. } => Location { module: None, address: addr, symbols },
        Frame::Module { module, offset } => {
            let index = *module_ids.entry(module).or_insert_with(|| {
                let module = modules.get(module);
                infos.push(ModuleInfo {
                    path: module.path().to_string_lossy().into_owned(),
                    build_id: module.build_id().map(<[u8]>::to_vec).unwrap_or_default(),
                });
                infos.len() as u32 - 1
            });
            Location { module: Some(index), address: offset, symbols }
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    fn symbol(name: &str, kind: SymbolKind) -> Symbol {
        Symbol { name: name.into(), kind }
    }

    /// A small recording: two processes, user and kernel frames, an inlined function.
    pub fn fixture() -> Recording {
        let location =
            |name: &str, kind| Location { module: None, address: 0, symbols: vec![symbol(name, kind)] };
        let inlined = Location {
            module: Some(0),
            address: 0x1234,
            symbols: vec![symbol("work", SymbolKind::Function), symbol("push_back", SymbolKind::Inlined)],
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
                location("hot", SymbolKind::Function),
                location("sys_read", SymbolKind::Kernel),
            ],
            stacks: vec![vec![2, 0], vec![1, 0], vec![3, 2, 0]],
            comms: vec!["app".into(), "other".into()],
            samples: vec![
                Sample { time_ns: 0, pid: 10, tid: 10, comm: 0, stack: 0, weight: 1 },
                Sample { time_ns: 10, pid: 10, tid: 11, comm: 0, stack: 1, weight: 1 },
                Sample { time_ns: 20, pid: 10, tid: 11, comm: 0, stack: 0, weight: 1 },
                Sample { time_ns: 30, pid: 20, tid: 20, comm: 1, stack: 2, weight: 1 },
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
    fn from_a_live_profile() {
        let main = Frame::Anonymous { tgid: 1, addr: 0x10 };
        let leaf = Frame::Kernel(0xffff_0000);
        let mut symbols = Symbols::default();
        symbols.insert(main, vec![symbol("main", SymbolKind::Function)]);
        symbols.insert(leaf, vec![symbol("schedule", SymbolKind::Kernel)]);
        let mut profile = Profile::default();
        profile.add(1_500, 1, 1, "app", &[leaf, main]);
        profile.add(1_000, 1, 2, "app", &[main]);
        let recording = Recording::from_live(&profile, &symbols, &Modules::default(), 1_000, Meta::default());
        assert_eq!(recording.samples.len(), 2);
        assert_eq!(
            recording.samples[0],
            Sample { time_ns: 0, pid: 1, tid: 2, comm: 0, stack: 1, weight: 1 },
            "sorted by time"
        );
        assert_eq!(recording.stacks, [vec![0, 1], vec![1]]);
        assert!(recording.locations[0].is_kernel());
        assert_eq!(recording.locations[1].symbols[0].name, "main");
    }
}
