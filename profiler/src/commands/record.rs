//! `profiler record`: CPU samples from a cpu-clock event on every CPU, each weighing one period;
//! with `--off-cpu`, spans off the CPU, each weighing its length; with `--wall`, both.
use std::collections::HashMap;

use anyhow::Result;
use profiler_common::Counter;

use crate::{
    aggregate::{Aggregate, LabelsId, Site},
    cli::{RECORD_DEFAULT_HZ, RecordArgs, SamplingArgs},
    decode::Payload,
    frame::{Frame, Marker},
    kernel::sampler::{self, OffCpuConfig, Sampler, SamplerConfig},
    model::{Meta, Tgid, ThreadState, Tid, Weight},
    session::{
        self, Collector, End, Progress, ReportAtTheEnd, Settings, Target,
        summary::{KernelFigures, Summary},
    },
    untrusted::read_bounded,
};

pub(super) async fn run(args: RecordArgs) -> Result<()> {
    let weight = weight(args.off_cpu, args.wall);
    let plan = SamplingPlan {
        default_hz: RECORD_DEFAULT_HZ,
        weight,
        // The wall clock's time includes waits for a CPU.
        runqueue: weight == Weight::WallNs,
        filter_processes: !args.system_wide,
        follow_forks: !args.no_inherit,
        ring_buffer_bytes: match args.ring_buffer {
            Some(mib) => mib << 20,
            None => sampler::default_ring_bytes(weight != Weight::Samples)?,
        },
    };
    let (profile, settings) = sampling(&args.sampling, plan);
    let settings = Settings {
        pids: args.pids.into_iter().map(Tgid).collect(),
        command: args.command,
        max_records: args.max_samples,
        outputs: args.output.resolve()?,
        render: args.grouping.render_options(),
        ..settings
    };
    session::run(profile, ReportAtTheEnd(print_summary), settings).await
}

/// What `record` and `agent` decide themselves about sampling; the rest comes from their
/// shared [`SamplingArgs`].
pub(super) struct SamplingPlan {
    pub(super) default_hz: u64,
    pub(super) weight: Weight,
    /// With spans off the CPU: waits for a CPU are spans too.
    pub(super) runqueue: bool,
    /// Only the processes given (and those they fork, with `follow_forks`); else all.
    pub(super) filter_processes: bool,
    pub(super) follow_forks: bool,
    pub(super) ring_buffer_bytes: u32,
}

/// The CPU profile to run and the session settings that follow from the sampling options: the
/// one place they become the sampler's configuration.
pub(super) fn sampling(args: &SamplingArgs, plan: SamplingPlan) -> (CpuProfile, Settings) {
    let frequency_hz = args.frequency.unwrap_or(plan.default_hz);
    let stack_copy_kib = args.stack_copy_kib();
    let weight = plan.weight;
    let config = SamplerConfig {
        frequency_hz,
        filter_processes: plan.filter_processes,
        follow_forks: plan.follow_forks,
        stack_copy_cap: stack_copy_kib * 1024,
        frame_pointers: args.call_graph.frame_pointers(),
        ring_buffer_bytes: plan.ring_buffer_bytes,
        on_cpu: weight != Weight::OffCpuNs,
        off_cpu: weight
            .is_time()
            .then_some(OffCpuConfig { min_ns: args.min_block.saturating_mul(1000), runqueue: plan.runqueue }),
    };
    let settings = Settings {
        frequency_hz: config.on_cpu.then_some(frequency_hz),
        duration: args.session.duration,
        call_graph: args.call_graph,
        native_only: args.native_only,
        debug_info: args.session.debug_info,
        kernel_addresses: args.kernel_addresses,
        stack_copy_kib,
        follow_forks: plan.follow_forks,
        quiet: args.session.quiet,
        ..Settings::default()
    };
    (CpuProfile { config, weight, carried: HashMap::new(), last_cut_ns: 0 }, settings)
}

/// What `record`, `top` and `agent` collect: a CPU profile (or thread time off the CPU, or both).
pub(super) struct CpuProfile {
    config: SamplerConfig,
    weight: Weight,
    /// Spans off the CPU still open when a window closed, by thread: their time up to then went
    /// to the windows it passed through, and only the rest goes to the one where they end.
    carried: HashMap<u32, Carried>,
    /// When the last window closed.
    last_cut_ns: u64,
}

/// The part of a thread's open span already counted.
#[derive(Clone, Copy, Debug)]
struct Carried {
    since_ns: u64,
    until_ns: u64,
}

impl CpuProfile {
    /// Counts each span still open at `end_ns` from where it was counted up to last (its start,
    /// or a window's end) to `end_ns`, under the kernel stack its thread waits in; at the
    /// `last` end, the spans back but unsent too (up to their return), as their records never
    /// come.
    fn count_open_spans(
        &mut self,
        sampler: &mut Sampler,
        aggregate: &mut Aggregate,
        end_ns: u64,
        last: bool,
    ) -> Result<()> {
        let Some(off_cpu) = self.config.off_cpu else { return Ok(()) };
        for (tid, thread) in sampler.unsent_off_cpu()? {
            if thread.resumed_ns != 0 && !last {
                continue;
            }
            let state = ThreadState::off_cpu(thread.state);
            let until = if thread.resumed_ns == 0 { end_ns } else { thread.resumed_ns };
            if (state == ThreadState::Runnable && !off_cpu.runqueue)
                || until.saturating_sub(thread.since_ns) < off_cpu.min_ns
            {
                continue;
            }
            let from = match self.carried.get(&tid) {
                Some(carried) if carried.since_ns == thread.since_ns => carried.until_ns,
                _ => thread.since_ns,
            };
            if from >= until {
                continue;
            }
            let frames: Vec<Frame> = match state {
                ThreadState::Runnable => vec![Frame::Marker(Marker::Runqueue)],
                _ if thread.kernel_stack_len == 0 => vec![Frame::Marker(Marker::OffCpuAtEnd)],
                _ => {
                    let (len, skip) = (thread.kernel_stack_len as usize, thread.kernel_stack_skip as usize);
                    let kernel =
                        thread.kernel_stack.get(skip..len.min(thread.kernel_stack.len())).unwrap_or(&[]);
                    kernel.iter().enumerate().map(|(depth, &addr)| Frame::kernel(depth, addr)).collect()
                }
            };
            let (stack, comm) =
                (aggregate.intern_stack(&frames), aggregate.intern_comm(&process_comm(thread.tgid)));
            // Counted from the kernel's table, with its kernel stack alone: no runtime read it.
            let labels = LabelsId::default();
            let site =
                Site { time_ns: from, tgid: Tgid(thread.tgid), tid: Tid(tid), comm, stack, state, labels };
            aggregate.push(site, until - from);
            if thread.resumed_ns == 0 {
                self.carried.insert(tid, Carried { since_ns: thread.since_ns, until_ns: until });
            }
        }
        Ok(())
    }

    /// What a cpu-clock sample weighs: one sample, or one sampling period in nanoseconds.
    fn sample_weight(&self) -> u64 {
        match self.weight {
            Weight::WallNs => 1_000_000_000 / self.config.frequency_hz.max(1),
            _ => 1,
        }
    }
}

impl Collector for CpuProfile {
    type Kernel = Sampler;

    fn load(&mut self, _: &Target) -> Result<Sampler> {
        Sampler::load(&self.config)
    }

    fn add(&mut self, site: Site, payload: Payload, aggregate: &mut Aggregate) {
        let weight = match payload {
            Payload::OffCpu { ns } => match self.carried.remove(&site.tid.0) {
                // Counted up to a window's end already: the rest.
                Some(carried) if carried.since_ns == site.time_ns => {
                    site.time_ns.saturating_add(ns).saturating_sub(carried.until_ns)
                }
                _ => ns,
            },
            _ => self.sample_weight(),
        };
        if weight > 0 {
            aggregate.push(site, weight);
        }
    }

    fn weight(&self) -> Weight {
        self.weight
    }

    fn activity(&self, _: &Sampler, target: &str) -> String {
        let hz = self.config.frequency_hz;
        match self.weight {
            Weight::OffCpuNs => format!("recording {target} off the CPU"),
            Weight::WallNs => format!("recording {target} on and off the CPU at {hz} Hz"),
            _ => format!("recording {target} at {hz} Hz"),
        }
    }

    fn status(&self, sampler: &Sampler, progress: &Progress) -> String {
        let lost = sampler.count(Counter::Lost).unwrap_or(0);
        let processes = progress.processes;
        let plural = if processes == 1 { "" } else { "es" };
        let weight = match self.weight {
            Weight::Samples => format!("{} samples", progress.weight),
            _ => format!("{:.1} s of thread time", progress.weight as f64 / 1e9),
        };
        format!("{weight} · {lost} lost · {processes} process{plural}")
    }

    /// Spans not sent when sampling stopped weigh up to the end (or to when their thread came
    /// back), under the kernel stack their thread waits (or waited) in: the user stack is taken
    /// only when a thread returns from its system call.
    fn finish(
        &mut self,
        sampler: &mut Sampler,
        aggregate: &mut Aggregate,
        end_ns: u64,
        _: &mut Meta,
    ) -> Result<()> {
        self.count_open_spans(sampler, aggregate, end_ns, true)
    }

    /// A window closes at `end_ns`: the spans still open count up to there in it.
    fn close_window(&mut self, sampler: &mut Sampler, aggregate: &mut Aggregate, end_ns: u64) -> Result<()> {
        self.count_open_spans(sampler, aggregate, end_ns, false)?;
        // A thread whose span was carried through the window before and is no longer open
        // without a record to come (it exited while blocked) is forgotten.
        let last_cut = std::mem::replace(&mut self.last_cut_ns, end_ns);
        self.carried.retain(|_, carried| carried.until_ns >= last_cut);
        Ok(())
    }
}

/// `record`'s report at the end: the summary, on the terminal.
fn print_summary(end: &End<'_, Sampler>) {
    let summary = Summary {
        recording: end.recording,
        missing_cfi: &end.missing_cfi,
        processes: end.progress.processes,
        kernel: KernelFigures {
            cost_us: end.kernel.run_costs_us(),
            ring_bytes_per_record: end.kernel.ring_bytes_per_record(),
            blocks: end.kernel.off_cpu_blocks(),
        },
        runtimes: &end.runtimes,
        outputs: end.outputs,
    };
    summary.print();
}

/// What a sample weighs with `--off-cpu` or `--wall` asked, or neither.
pub(super) fn weight(off_cpu: bool, wall: bool) -> Weight {
    match (off_cpu, wall) {
        (true, _) => Weight::OffCpuNs,
        (_, true) => Weight::WallNs,
        _ => Weight::Samples,
    }
}

/// A process's command name, for threads seen only in the kernel's table.
fn process_comm(tgid: u32) -> String {
    read_bounded(&format!("/proc/{tgid}/comm"))
        .map(|comm| comm.trim_end().to_owned())
        .unwrap_or_else(|| "[exited]".into())
}
