//! The kernel side of `leaks`, from userspace: loads the allocation programs, attaches them to
//! the target's allocator, and reads the outstanding blocks and the counters.
use std::{fmt, fs::File, num::NonZeroU32, path::PathBuf};

use anyhow::{Context as _, Result, anyhow};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap as BpfHashMap, PerCpuArray},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
    },
};
use profiler_common::{
    AllocFunction, Allocation, AllocationKey, FramePointers, LeakCounter, globals, maps, programs,
};

use crate::{
    decode::RecordKind,
    model::{AllocationTotals, Tgid, printable},
    untrusted::open::readable_path,
};

use super::{
    KernelSource,
    btf::KernelBtf,
    object::{self, EBPF_OBJECT, missing, program, verifier_error},
};

#[derive(Clone, Debug)]
pub(crate) struct TracerConfig {
    /// Bytes of user stack copied per allocation (a multiple of 4096, at most 64 KiB).
    pub stack_copy_cap: u32,
    /// When the kernel walks the user frame-pointer chain.
    pub frame_pointers: FramePointers,
    /// Ring buffer size in bytes (a power of two, multiple of the page size).
    pub ring_buffer_bytes: u32,
    /// Most blocks followed at once.
    pub max_outstanding: u32,
    /// Follow one allocation in this many (1: all).
    pub sample_every: u32,
}

pub(crate) struct Tracer {
    ebpf: Ebpf,
    allocator: Allocator,
    sample_every: u32,
}

/// A block followed and not freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub tgid: Tgid,
    pub addr: u64,
    pub size: u64,
    /// When it was allocated: the time of its allocation record.
    pub time_ns: u64,
}

/// The allocator to probe: its file and its entry points.
#[derive(Debug)]
pub(crate) struct Allocator {
    /// The file as the target names it, for messages.
    pub path: PathBuf,
    /// The file itself, opened as the target maps it: probes are attached to its inode.
    pub file: File,
    pub entry_points: EntryPoints,
}

impl fmt::Display for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A path the target chose: shown escaped.
        write!(f, "{}", printable(&self.path.to_string_lossy()))
    }
}

/// The functions of an allocator that the tracker probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EntryPoints {
    /// Those that hand out blocks, with the C function whose arguments each takes; one per
    /// address (aliases are one function).
    pub allocations: Vec<(AllocFunction, EntryPoint)>,
    /// Those that take blocks back, `free` first; one per address.
    pub releases: Vec<EntryPoint>,
}

/// A function of the allocator, where uprobes take it: by file offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryPoint {
    pub symbol: &'static str,
    pub offset: u64,
}

/// Outstanding bytes now and at their peak, of the blocks followed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeapBytes {
    pub outstanding: u64,
    pub peak: u64,
}

impl Tracer {
    /// Loads and verifies the programs for `allocator`; nothing is traced until a process is
    /// followed.
    pub(crate) fn load(config: &TracerConfig, allocator: Allocator) -> Result<Self> {
        let frame_pointers = config.frame_pointers as u32;
        let fs_base = object::task_fs_base_offset(&mut KernelBtf::open()?)?;
        let mut ebpf = EbpfLoader::new()
            // Off-CPU's task-local storage, which aya creates but has no userspace type for:
            // only the programs use it.
            .allow_unsupported_maps()
            .override_global(globals::STACK_COPY_CAP, &config.stack_copy_cap, true)
            .override_global(globals::FRAME_POINTERS, &frame_pointers, true)
            .override_global(globals::SAMPLE_EVERY, &config.sample_every, true)
            .override_global(globals::TASK_FSBASE_OFFSET, &fs_base, true)
            .map_max_entries(maps::ALLOCATIONS, config.ring_buffer_bytes)
            .map_max_entries(maps::SAMPLES, object::UNUSED_RING_BYTES)
            .map_max_entries(maps::ALLOCATION_SCRATCH, object::scratch_entries()?)
            .map_max_entries(maps::SAMPLE_SCRATCH, object::UNUSED_SCRATCH_ENTRIES)
            .map_max_entries(maps::OUTSTANDING, config.max_outstanding)
            .load(object::embedded(EBPF_OBJECT)?)
            .context("cannot load the eBPF object")?;
        for name in [programs::ALLOC_ENTER, programs::ALLOC_RETURN, programs::FREE_ENTER] {
            let probe: &mut UProbe = program(&mut ebpf, name)?.try_into()?;
            probe.load().map_err(verifier_error)?;
        }
        object::load_runtime_walkers(&mut ebpf, programs::ALLOC_RETURN, maps::ALLOC_RETURN_WALKERS)?;
        Ok(Self { ebpf, allocator, sample_every: config.sample_every })
    }

    /// The allocator probed.
    pub(crate) fn allocator(&self) -> &Allocator {
        &self.allocator
    }

    /// The blocks of process `tgid` followed and not freed.
    pub(crate) fn outstanding(&self, tgid: Tgid) -> Result<Vec<Block>> {
        let map = self.ebpf.map(maps::OUTSTANDING).ok_or_else(|| missing(maps::OUTSTANDING))?;
        let blocks: BpfHashMap<_, AllocationKey, Allocation> = BpfHashMap::try_from(map)?;
        // A block freed while we iterate disappears under us: skip it.
        Ok(blocks
            .iter()
            .filter_map(Result::ok)
            .filter(|(key, _)| key.tgid == tgid.0)
            .map(|(key, block)| Block { tgid, addr: key.addr, size: block.size, time_ns: block.time_ns })
            .collect())
    }

    /// What the probes counted so far.
    pub(crate) fn totals(&self) -> Result<AllocationTotals> {
        Ok(AllocationTotals {
            calls: self.count(LeakCounter::AllocCalls)?,
            frees: self.count(LeakCounter::FreeCalls)?,
            failed: self.count(LeakCounter::Failed)?,
            peak_bytes: self.heap()?.peak,
            not_followed: self.count(LeakCounter::TableFull)?,
            sample_every: self.sample_every,
            min_age_ns: None,
        })
    }

    /// A counter of the allocation probes, summed over CPUs.
    fn count(&self, counter: LeakCounter) -> Result<u64> {
        object::counter_total(&self.ebpf, maps::LEAK_COUNTERS, counter as u32)
    }

    pub(crate) fn heap(&self) -> Result<HeapBytes> {
        let map = self.ebpf.map(maps::HEAP_BYTES).ok_or_else(|| missing(maps::HEAP_BYTES))?;
        let outstanding = Array::<_, u64>::try_from(map)?.get(&0, 0)?;
        let map = self.ebpf.map(maps::PEAK_HEAP_BYTES).ok_or_else(|| missing(maps::PEAK_HEAP_BYTES))?;
        let peaks = PerCpuArray::<_, u64>::try_from(map)?.get(&0, 0)?;
        // A CPU's peak was read after its own add: never below what it saw outstanding.
        let peak = peaks.iter().copied().max().unwrap_or(0).max(outstanding);
        Ok(HeapBytes { outstanding, peak })
    }
}

impl KernelSource for Tracer {
    const RECORDS: RecordKind = RecordKind::Allocation;

    fn ebpf(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Probes the allocator in process `pid`, and only there: the kernel installs the
    /// breakpoints in that process alone. Returns are probed before entries, so that no call is
    /// seen entering without being seen returning.
    fn follow(&mut self, Tgid(pid): Tgid) -> Result<()> {
        let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).ok_or_else(|| anyhow!("PID 0"))?);
        let Self { ebpf, allocator, .. } = self;
        let mut attach = |name: &str, entry: &EntryPoint, function: Option<AllocFunction>| -> Result<()> {
            let probe: &mut UProbe = program(ebpf, name)?.try_into()?;
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(entry.offset),
                cookie: function.map(|f| f as u64),
            };
            probe
                .attach([point], readable_path(&allocator.file), scope)
                .with_context(|| format!("cannot probe {} in {allocator}", entry.symbol))?;
            Ok(())
        };
        for (function, entry) in &allocator.entry_points.allocations {
            attach(programs::ALLOC_RETURN, entry, Some(*function))?;
        }
        for entry in &allocator.entry_points.releases {
            attach(programs::FREE_ENTER, entry, None)?;
        }
        for (function, entry) in &allocator.entry_points.allocations {
            attach(programs::ALLOC_ENTER, entry, Some(*function))?;
        }
        Ok(())
    }

    /// The probes run from the moment they are attached.
    fn start(&mut self) -> Result<()> {
        Ok(())
    }

    fn lost(&self) -> Result<u64> {
        self.count(LeakCounter::StacksLost)
    }
}
