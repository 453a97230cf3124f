//! The kernel side of CPU and off-CPU profiles: loads the eBPF object, configures it, attaches
//! one cpu-clock perf event per online CPU and, for spans off the CPU, the scheduler hooks; and
//! exposes the pid filter, the counters and the ring buffer.
use anyhow::{Context as _, Result, anyhow};
use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{Array, HashMap as BpfHashMap},
    programs::{
        BtfTracePoint, Iter, PerfEvent, RawTracePoint,
        perf_event::{PerfEventConfig, PerfEventLinkId, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
    util::online_cpus,
};
use profiler_common::{Counter, FramePointers, OffCpuThread, globals, maps, programs};

use crate::{decode::RecordKind, model::Tgid};

use super::{
    KernelSource,
    btf::KernelBtf,
    kallsyms,
    object::{self, EBPF_OBJECT, missing, program, verifier_error},
};

#[derive(Clone, Debug)]
pub(crate) struct SamplerConfig {
    /// Samples per second per CPU.
    pub frequency_hz: u64,
    /// Only sample the processes added with [`Sampler::add_process`]; otherwise everything.
    pub filter_processes: bool,
    /// Processes forked by filtered processes join the filter.
    pub follow_forks: bool,
    /// Bytes of user stack copied per sample (a multiple of 4096, at most 64 KiB).
    pub stack_copy_cap: u32,
    /// When the kernel walks the user frame-pointer chain.
    pub frame_pointers: FramePointers,
    /// Ring buffer size in bytes (a power of two, multiple of the page size).
    pub ring_buffer_bytes: u32,
    /// cpu-clock samples (all but `--off-cpu`).
    pub on_cpu: bool,
    /// Spans off the CPU (`--off-cpu`, `--wall`).
    pub off_cpu: Option<OffCpuConfig>,
}

/// What the scheduler hooks record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OffCpuConfig {
    /// Spans shorter than this are not recorded, in nanoseconds.
    pub min_ns: u64,
    /// Waits for a CPU (runnable, preempted) are recorded too.
    pub runqueue: bool,
}

/// The ring's default size: 1 MiB per CPU (a quarter second of 4 KiB samples at
/// [`DEFAULT_RING_HZ`]: the reader drains it every 20 ms, and sooner when a quarter of it is
/// queued), a power of two, at least 2 MiB; at least 4 MiB `off_cpu` (spans come with context
/// switches, in bursts). Its pages are resident twice over (mapped twice for wrap-around): 2 MiB
/// took 19 KiB stacks of two CPUs at 999 Hz without a loss here.
pub(crate) fn default_ring_bytes(off_cpu: bool) -> Result<u32> {
    let cpus = online_cpus().map_err(|(path, err)| anyhow!("cannot read {path}: {err}"))?.len() as u32;
    let least = if off_cpu { 4 } else { 2 };
    Ok(cpus.max(least).next_power_of_two().min(1024) << 20)
}

/// The sampling rate the default ring is sized for.
pub(crate) const DEFAULT_RING_HZ: u64 = 999;

pub(crate) struct Sampler {
    ebpf: Ebpf,
    links: Vec<PerfEventLinkId>,
    frequency_hz: u64,
    on_cpu: bool,
    off_cpu: bool,
    ring_buffer_bytes: u32,
}

/// Where the programs that follow processes read `task_struct` fields, from the kernel's BTF.
#[derive(Default)]
struct TaskLayout {
    tgid: u32,
    comm: u32,
    start_time: u32,
    state: u32,
    on_cpu: u32,
    signal: u32,
    live: u32,
    real_cred: u32,
    euid: u32,
    cred_user_ns: u32,
    user_ns_level: u32,
    user_ns_parent: u32,
    user_ns_owner: u32,
}

impl TaskLayout {
    fn read(btf: &mut KernelBtf) -> Result<Self> {
        Ok(Self {
            tgid: btf.field_offset("task_struct", "tgid")?,
            comm: btf.field_offset("task_struct", "comm")?,
            start_time: btf.field_offset("task_struct", "start_time")?,
            state: btf.field_offset("task_struct", "__state")?,
            on_cpu: btf.field_offset("task_struct", "on_cpu")?,
            signal: btf.field_offset("task_struct", "signal")?,
            live: btf.field_offset("signal_struct", "live")?,
            real_cred: btf.field_offset("task_struct", "real_cred")?,
            euid: btf.field_offset("cred", "euid")?,
            cred_user_ns: btf.field_offset("cred", "user_ns")?,
            user_ns_level: btf.field_offset("user_namespace", "level")?,
            user_ns_parent: btf.field_offset("user_namespace", "parent")?,
            user_ns_owner: btf.field_offset("user_namespace", "owner")?,
        })
    }
}

/// The address of the kernel's `__schedule`; 0 when it is not listed, and kernel stacks of
/// blocked threads end in the function that waited.
fn schedule_address() -> Result<u64> {
    Ok(kallsyms::address_of("__schedule")?.unwrap_or(0))
}

impl Sampler {
    /// Loads and verifies the programs; nothing is sampled until [`Sampler::start`].
    pub(crate) fn load(config: &SamplerConfig) -> Result<Self> {
        let filter = u32::from(config.filter_processes);
        let follow = u32::from(config.follow_forks);
        let own_tgid = std::process::id();
        let follow_forks = config.filter_processes && config.follow_forks;
        let off_cpu = config.off_cpu.unwrap_or(OffCpuConfig { min_ns: 0, runqueue: false });
        let (off_cpu_on, runqueue) = (u32::from(config.off_cpu.is_some()), u32::from(off_cpu.runqueue));
        let reads_tasks = config.filter_processes || config.off_cpu.is_some();
        let mut kernel_btf = KernelBtf::open()?;
        let layout = if reads_tasks { TaskLayout::read(&mut kernel_btf)? } else { TaskLayout::default() };
        let frame_pointers = config.frame_pointers as u32;
        let scratch = |wanted: bool| {
            if wanted { object::scratch_entries() } else { Ok(object::UNUSED_SCRATCH_ENTRIES) }
        };
        let schedule = if config.off_cpu.is_some() { schedule_address()? } else { 0 };
        let fs_base = object::task_fs_base_offset(&mut kernel_btf)?;
        // Parsed (20 MiB at its peak: more than the rest of a recording's heap) only for the
        // programs that attach by BTF id, off-CPU's. The loader parses it only for relocations,
        // which the programs have none of.
        let btf =
            config.off_cpu.map(|_| Btf::from_sys_fs()).transpose().context("cannot read the kernel's BTF")?;
        let mut ebpf = EbpfLoader::new()
            // Off-CPU's task-local storage, which aya creates but has no userspace type for:
            // only the programs use it.
            .allow_unsupported_maps()
            .override_global(globals::FILTER_BY_TGID, &filter, true)
            .override_global(globals::FOLLOW_FORKS, &follow, true)
            .override_global(globals::PROFILER_TGID, &own_tgid, true)
            .override_global(globals::STACK_COPY_CAP, &config.stack_copy_cap, true)
            .override_global(globals::FRAME_POINTERS, &frame_pointers, true)
            .override_global(globals::TASK_TGID_OFFSET, &layout.tgid, true)
            .override_global(globals::TASK_FSBASE_OFFSET, &fs_base, true)
            .override_global(globals::TASK_SIGNAL_OFFSET, &layout.signal, true)
            .override_global(globals::TASK_COMM_OFFSET, &layout.comm, true)
            .override_global(globals::TASK_START_TIME_OFFSET, &layout.start_time, true)
            .override_global(globals::TASK_STATE_OFFSET, &layout.state, true)
            .override_global(globals::TASK_ON_CPU_OFFSET, &layout.on_cpu, true)
            .override_global(globals::SCHEDULE_ADDR, &schedule, true)
            .override_global(globals::SIGNAL_LIVE_OFFSET, &layout.live, true)
            .override_global(globals::TASK_REAL_CRED_OFFSET, &layout.real_cred, true)
            .override_global(globals::CRED_EUID_OFFSET, &layout.euid, true)
            .override_global(globals::CRED_USER_NS_OFFSET, &layout.cred_user_ns, true)
            .override_global(globals::USER_NS_LEVEL_OFFSET, &layout.user_ns_level, true)
            .override_global(globals::USER_NS_PARENT_OFFSET, &layout.user_ns_parent, true)
            .override_global(globals::USER_NS_OWNER_OFFSET, &layout.user_ns_owner, true)
            .override_global(globals::OFF_CPU, &off_cpu_on, true)
            .override_global(globals::RUNQUEUE, &runqueue, true)
            .override_global(globals::MIN_OFF_CPU_NS, &off_cpu.min_ns, true)
            .map_max_entries(maps::SAMPLES, config.ring_buffer_bytes)
            .map_max_entries(maps::SAMPLE_SCRATCH, scratch(config.on_cpu)?)
            .map_max_entries(maps::OFF_CPU_SCRATCH, scratch(config.off_cpu.is_some())?)
            .map_max_entries(maps::ALLOCATION_SCRATCH, object::UNUSED_SCRATCH_ENTRIES)
            .load(object::embedded(EBPF_OBJECT)?)
            .context("cannot load the eBPF object")?;

        if config.on_cpu {
            let sample: &mut PerfEvent = program(&mut ebpf, programs::SAMPLE)?.try_into()?;
            sample.load().map_err(verifier_error)?;
            object::load_runtime_walkers(&mut ebpf, programs::SAMPLE, maps::SAMPLE_WALKERS)?;
        }
        if let Some(btf) = &btf {
            let switch: &mut BtfTracePoint = program(&mut ebpf, programs::SCHED_SWITCH)?.try_into()?;
            switch.load("sched_switch", btf).map_err(verifier_error)?;
            let exit: &mut RawTracePoint = program(&mut ebpf, programs::SYSCALL_EXIT)?.try_into()?;
            exit.load().map_err(verifier_error)?;
            let stacks: &mut Iter = program(&mut ebpf, programs::OFF_CPU_STACKS)?.try_into()?;
            stacks.load("task", btf).map_err(verifier_error)?;
            object::load_runtime_walkers(&mut ebpf, programs::SYSCALL_EXIT, maps::SYSCALL_EXIT_WALKERS)?;
        }
        let tracepoints = [
            (follow_forks, programs::FOLLOW_FORK, "task_newtask"),
            (config.filter_processes, programs::FORGET_EXIT, "sched_process_exit"),
        ];
        for (_, name, tracepoint) in tracepoints.into_iter().filter(|(wanted, ..)| *wanted) {
            let program: &mut RawTracePoint = program(&mut ebpf, name)?.try_into()?;
            program.load().map_err(verifier_error)?;
            program
                .attach(tracepoint)
                .with_context(|| format!("cannot attach to raw tracepoint {tracepoint}"))?;
        }
        Ok(Self {
            ebpf,
            links: Vec::new(),
            frequency_hz: config.frequency_hz,
            on_cpu: config.on_cpu,
            off_cpu: config.off_cpu.is_some(),
            ring_buffer_bytes: config.ring_buffer_bytes,
        })
    }

    /// Closes the perf events: no sample is taken after this returns.
    pub(crate) fn detach(&mut self) -> Result<()> {
        if !self.links.is_empty() {
            let sample: &mut PerfEvent = program(&mut self.ebpf, programs::SAMPLE)?.try_into()?;
            for link in self.links.drain(..) {
                sample.detach(link)?;
            }
        }
        Ok(())
    }

    /// The spans off the CPU not sent yet: of threads still off the CPU (with the kernel stacks
    /// they wait in, taken now), and of threads back whose system call had not returned. Oldest
    /// first.
    pub(crate) fn unsent_off_cpu(&mut self) -> Result<Vec<(u32, OffCpuThread)>> {
        self.take_waiting_stacks()?;
        let map = self.ebpf.map(maps::OFF_CPU_THREADS).ok_or_else(|| missing(maps::OFF_CPU_THREADS))?;
        let threads: BpfHashMap<_, u32, OffCpuThread> = BpfHashMap::try_from(map)?;
        // An entry removed while we iterate is skipped; one whose thread is on the CPU has no span.
        let mut unsent: Vec<(u32, OffCpuThread)> =
            threads.iter().filter_map(Result::ok).filter(|(_, thread)| thread.since_ns != 0).collect();
        unsent.sort_unstable_by_key(|(tid, thread)| (thread.since_ns, *tid));
        Ok(unsent)
    }

    /// Runs the task iterator that takes the kernel stacks of followed threads still off the
    /// CPU (a switch takes a thread's only as it comes back): reading it runs it.
    fn take_waiting_stacks(&mut self) -> Result<()> {
        let iter: &mut Iter = program(&mut self.ebpf, programs::OFF_CPU_STACKS)?.try_into()?;
        let link = iter.attach().context("cannot attach the task iterator")?;
        let mut run = iter.take_link(link)?.into_file().context("cannot create the task iterator")?;
        std::io::copy(&mut run, &mut std::io::sink()).context("cannot run the task iterator")?;
        Ok(())
    }

    /// Attaches the scheduler hooks (the BTF tracepoint `sched_switch`, the raw tracepoint
    /// `sys_exit`), after telling them when sampling starts.
    fn attach_off_cpu(&mut self) -> Result<()> {
        let started = crate::clock::monotonic_ns();
        let map = self.ebpf.map_mut(maps::STARTED_NS).ok_or_else(|| missing(maps::STARTED_NS))?;
        Array::<_, u64>::try_from(map)?.set(0, &started, 0).context("cannot set the start time")?;
        let switch: &mut BtfTracePoint = program(&mut self.ebpf, programs::SCHED_SWITCH)?.try_into()?;
        switch.attach().context("cannot attach to BTF tracepoint sched_switch")?;
        let exit: &mut RawTracePoint = program(&mut self.ebpf, programs::SYSCALL_EXIT)?.try_into()?;
        exit.attach("sys_exit").context("cannot attach to raw tracepoint sys_exit")?;
        Ok(())
    }

    /// Mean time in the kernel per run of each program that ran (µs), with what a run is, when
    /// the kernel keeps such statistics (`sysctl kernel.bpf_stats_enabled=1`).
    pub(crate) fn run_costs_us(&self) -> Vec<(&'static str, f64)> {
        [
            (programs::SAMPLE, "sample program run"),
            (programs::SCHED_SWITCH, "context switch"),
            (programs::SYSCALL_EXIT, "system call exit"),
        ]
        .into_iter()
        .filter_map(|(name, run)| {
            let info = self.ebpf.program(name)?.info().ok()?;
            let runs = info.run_count();
            (runs > 0).then(|| (run, info.run_time().as_secs_f64() * 1e6 / runs as f64))
        })
        .collect()
    }

    /// Mean size of the records sent through the ring (CPU samples and off-CPU spans); `None`
    /// before the first.
    pub(crate) fn ring_bytes_per_record(&self) -> Option<f64> {
        let count = |counter| self.count(counter).ok();
        let taken = count(Counter::Seen)? + count(Counter::OffCpu)?;
        let sent = taken.saturating_sub(count(Counter::Filtered)? + count(Counter::Lost)?);
        (sent > 0).then(|| count(Counter::RingBytes).map(|bytes| bytes as f64 / sent as f64)).flatten()
    }

    /// What became of the spans off the CPU; `None` when spans are not taken.
    pub(crate) fn off_cpu_blocks(&self) -> Option<OffCpuBlocks> {
        let count = |counter| self.count(counter).ok();
        self.off_cpu
            .then(|| {
                Some(OffCpuBlocks {
                    recorded: count(Counter::OffCpu)?,
                    short: count(Counter::ShortOffCpu)?,
                    unnoted: count(Counter::OffCpuUnnoted)?,
                    over_share: count(Counter::OffCpuOverShare)?,
                    without_kernel_stack: count(Counter::OffCpuNoKernelStack)?,
                })
            })
            .flatten()
    }

    /// A counter of the sample program, summed over CPUs.
    pub(crate) fn count(&self, counter: Counter) -> Result<u64> {
        object::counter_total(&self.ebpf, maps::COUNTERS, counter as u32)
    }
}

/// What became of the spans off the CPU of followed threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OffCpuBlocks {
    /// Sent (or lost in the ring).
    pub recorded: u64,
    /// Shorter than `--min-block`: dropped in the kernel.
    pub short: u64,
    /// Never noted: the kernel's table of threads off the CPU was full, or had no memory.
    pub unnoted: u64,
    /// Never noted: their user held its share of that table (system-wide).
    pub over_share: u64,
    /// Recorded without kernel frames: the kernel would not give the stack.
    pub without_kernel_stack: u64,
}

impl KernelSource for Sampler {
    const RECORDS: RecordKind = RecordKind::Sample;

    fn ebpf(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Adds the process to the filter (system-wide, everything is sampled anyway). Before
    /// `start` only: off-CPU's programs keep on each thread they see whether it is followed.
    fn follow(&mut self, Tgid(tgid): Tgid) -> Result<()> {
        let map = self.ebpf.map_mut(maps::TGID_FILTER).ok_or_else(|| missing(maps::TGID_FILTER))?;
        let mut filter: BpfHashMap<_, u32, u8> = BpfHashMap::try_from(map)?;
        filter.insert(&tgid, &1, 0).with_context(|| format!("cannot add PID {tgid} to the filter"))?;
        Ok(())
    }

    /// Attaches the scheduler hooks when spans off the CPU are wanted, then opens a cpu-clock
    /// event on every online CPU (when CPU samples are) and attaches the program to it.
    /// Frequency mode, no event limits (`PERF_EVENT_IOC_REFRESH` is what froze Linux 6.16/6.17).
    fn start(&mut self) -> Result<()> {
        if self.off_cpu {
            self.attach_off_cpu()?;
        }
        if !self.on_cpu {
            return Ok(());
        }
        let cpus = online_cpus().map_err(|(path, err)| anyhow!("cannot read {path}: {err}"))?;
        let sample: &mut PerfEvent = program(&mut self.ebpf, programs::SAMPLE)?.try_into()?;
        for cpu in cpus {
            let link = sample
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(self.frequency_hz),
                    false,
                )
                .with_context(|| format!("cannot open a cpu-clock perf event on CPU {cpu}"))?;
            self.links.push(link);
        }
        Ok(())
    }

    fn lost(&self) -> Result<u64> {
        self.count(Counter::Lost)
    }

    fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let not_followed = self.count(Counter::FilterFull).unwrap_or(0);
        if not_followed > 0 {
            warnings.push(format!(
                "{not_followed} processes forked by the targets were not followed: the kernel's table of \
                 followed processes was full"
            ));
        }
        let lost = self.lost().unwrap_or(0);
        if lost > 0 {
            warnings.push(format!(
                "{lost} records did not fit in the {} MiB ring buffer (the profiler fell behind): a larger \
                 --ring-buffer keeps them",
                self.ring_buffer_bytes >> 20
            ));
        }
        warnings
    }
}
