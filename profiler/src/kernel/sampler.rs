//! The kernel side of CPU profiles: loads the eBPF object, configures it, attaches one cpu-clock
//! perf event per online CPU, and exposes the pid filter, the counters and the ring buffer.
use anyhow::{Context as _, Result, anyhow};
use aya::{
    Ebpf, EbpfLoader,
    maps::HashMap as BpfHashMap,
    programs::{
        PerfEvent, RawTracePoint,
        perf_event::{PerfEventConfig, PerfEventLinkId, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
    util::online_cpus,
};
use profiler_common::{Counter, FramePointers, globals, maps, programs};

use crate::decode::RecordKind;

use super::{
    KernelSource, btf,
    object::{self, EBPF_OBJECT, missing, program, verifier_error},
};

#[derive(Clone, Debug)]
pub struct SamplerConfig {
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
}

/// The ring's default size: 1 MiB per CPU (a quarter second of 4 KiB samples at 999 Hz: the
/// reader drains it every 20 ms), at least 4 MiB, a power of two.
pub fn default_ring_bytes() -> Result<u32> {
    let cpus = online_cpus().map_err(|(path, err)| anyhow!("cannot read {path}: {err}"))?.len() as u32;
    Ok(cpus.max(4).next_power_of_two().min(1024) << 20)
}

pub struct Sampler {
    ebpf: Ebpf,
    links: Vec<PerfEventLinkId>,
    frequency_hz: u64,
}

/// Where the programs that follow processes read `task_struct` fields, from the kernel's BTF.
#[derive(Default)]
struct TaskLayout {
    tgid: u32,
    signal: u32,
    live: u32,
}

impl TaskLayout {
    fn read() -> Result<Self> {
        Ok(Self {
            tgid: btf::field_offset("task_struct", "tgid")?,
            signal: btf::field_offset("task_struct", "signal")?,
            live: btf::field_offset("signal_struct", "live")?,
        })
    }
}

/// In-kernel run statistics of the sample program.
#[derive(Clone, Copy, Debug)]
pub struct RunStats {
    pub runs: u64,
    pub time: std::time::Duration,
}

impl Sampler {
    /// Loads and verifies the programs; nothing is sampled until [`Sampler::start`].
    pub fn load(config: &SamplerConfig) -> Result<Self> {
        let filter = u32::from(config.filter_processes);
        let follow = u32::from(config.follow_forks);
        let own_tgid = std::process::id();
        let follow_forks = config.filter_processes && config.follow_forks;
        let layout = if config.filter_processes { TaskLayout::read()? } else { TaskLayout::default() };
        let frame_pointers = config.frame_pointers as u32;
        let mut ebpf = EbpfLoader::new()
            .override_global(globals::FILTER_BY_TGID, &filter, true)
            .override_global(globals::FOLLOW_FORKS, &follow, true)
            .override_global(globals::PROFILER_TGID, &own_tgid, true)
            .override_global(globals::STACK_COPY_CAP, &config.stack_copy_cap, true)
            .override_global(globals::FRAME_POINTERS, &frame_pointers, true)
            .override_global(globals::TASK_TGID_OFFSET, &layout.tgid, true)
            .override_global(globals::TASK_SIGNAL_OFFSET, &layout.signal, true)
            .override_global(globals::SIGNAL_LIVE_OFFSET, &layout.live, true)
            .map_max_entries(maps::SAMPLES, config.ring_buffer_bytes)
            .map_max_entries(maps::SAMPLE_SCRATCH, object::scratch_entries()?)
            .map_max_entries(maps::ALLOCATION_SCRATCH, object::UNUSED_SCRATCH_ENTRIES)
            .load(EBPF_OBJECT)
            .context("cannot load the eBPF object")?;

        let sample: &mut PerfEvent = program(&mut ebpf, programs::SAMPLE)?.try_into()?;
        sample.load().map_err(verifier_error)?;
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
        Ok(Self { ebpf, links: Vec::new(), frequency_hz: config.frequency_hz })
    }

    /// Closes the perf events: no sample is taken after this returns.
    pub fn detach(&mut self) -> Result<()> {
        let sample: &mut PerfEvent = program(&mut self.ebpf, programs::SAMPLE)?.try_into()?;
        for link in self.links.drain(..) {
            sample.detach(link)?;
        }
        Ok(())
    }

    /// Time the sample program spent in the kernel and how often it ran, when the kernel keeps
    /// such statistics (`sysctl kernel.bpf_stats_enabled=1`); `None` otherwise.
    pub fn run_stats(&self) -> Option<RunStats> {
        let info = self.ebpf.program(programs::SAMPLE)?.info().ok()?;
        (info.run_count() > 0).then(|| RunStats { runs: info.run_count(), time: info.run_time() })
    }

    /// Mean size of the sample records sent through the ring; `None` before the first.
    pub fn ring_bytes_per_sample(&self) -> Option<f64> {
        let count = |counter| self.count(counter).ok();
        let sent = count(Counter::Seen)?.saturating_sub(count(Counter::Filtered)? + count(Counter::Lost)?);
        (sent > 0).then(|| count(Counter::RingBytes).map(|bytes| bytes as f64 / sent as f64)).flatten()
    }

    /// A counter of the sample program, summed over CPUs.
    pub fn count(&self, counter: Counter) -> Result<u64> {
        object::counter_total(&self.ebpf, maps::COUNTERS, counter as u32)
    }
}

impl KernelSource for Sampler {
    const RECORDS: RecordKind = RecordKind::Sample;

    fn ebpf(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Adds the process to the filter (system-wide, everything is sampled anyway).
    fn follow(&mut self, tgid: u32) -> Result<()> {
        let map = self.ebpf.map_mut(maps::TGID_FILTER).ok_or_else(|| missing(maps::TGID_FILTER))?;
        let mut filter: BpfHashMap<_, u32, u8> = BpfHashMap::try_from(map)?;
        filter.insert(tgid, 1, 0).with_context(|| format!("cannot add PID {tgid} to the filter"))?;
        Ok(())
    }

    /// Opens a cpu-clock event on every online CPU and attaches the program to it. Frequency
    /// mode, no event limits (`PERF_EVENT_IOC_REFRESH` is what froze Linux 6.16/6.17).
    fn start(&mut self) -> Result<()> {
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
        let not_followed = self.count(Counter::FilterFull).unwrap_or(0);
        let warning = format!(
            "{not_followed} processes forked by the targets were not followed: the kernel's table of followed \
             processes was full"
        );
        (not_followed > 0).then_some(warning).into_iter().collect()
    }
}
