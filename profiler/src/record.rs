//! `profiler record`: attach, sample until told to stop, then symbolize and write the outputs.
use std::{
    future::Future,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    check,
    cli::{CallGraph, RecordArgs},
    collect::{Collected, Collector},
    decode::decode,
    output,
    process::{self, Tracking},
    recording::{Meta, Recording, UnwindSummary},
    render::RenderOptions,
    ring::RingReader,
    sampler::{Sampler, SamplerConfig},
    summary::{StatusLine, Summary},
    target::{self, PendingCommand, ProcessHandle, StartedCommand},
    task_events::TaskEventReader,
    unwind::{UnwindEnd, hybrid::StackSource},
};

enum Targets {
    Processes(Vec<ProcessHandle>),
    Command(Option<PendingCommand>),
    SystemWide,
}

impl Targets {
    fn open(args: &RecordArgs) -> Result<Self> {
        Ok(if !args.pids.is_empty() {
            Self::Processes(args.pids.iter().map(|&pid| ProcessHandle::open(pid)).collect::<Result<_>>()?)
        } else if !args.command.is_empty() {
            Self::Command(Some(PendingCommand::spawn(&args.command)?))
        } else {
            Self::SystemWide
        })
    }

    /// The processes to filter on and to follow from the start.
    fn pids(&self) -> Vec<u32> {
        match self {
            Self::Processes(handles) => handles.iter().map(ProcessHandle::pid).collect(),
            Self::Command(pending) => pending.iter().map(PendingCommand::pid).collect(),
            Self::SystemWide => Vec::new(),
        }
    }

    fn describe(&self, args: &RecordArgs) -> String {
        match self {
            Self::Processes(handles) => {
                let pids: Vec<String> = handles.iter().map(|h| h.pid().to_string()).collect();
                format!("PID {}", pids.join(", "))
            }
            Self::Command(_) => {
                args.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
            }
            Self::SystemWide => "whole system".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Duration,
    Signal,
    TargetsExited,
    MaxSamples,
}

pub async fn run(args: RecordArgs) -> Result<()> {
    check::blocking(args.frequency)?;
    let output_specs = args.output.resolve()?;
    let outputs = output::create_all(&output_specs)?;
    let mut targets = Targets::open(&args)?;
    let system_wide = matches!(targets, Targets::SystemWide);
    let stack_copy_kib = if args.call_graph == CallGraph::Fp { 0 } else { args.stack_size };

    let mut sampler = Sampler::load(&SamplerConfig {
        frequency_hz: args.frequency,
        filter_processes: !system_wide,
        follow_forks: !args.no_inherit,
        stack_copy_cap: stack_copy_kib * 1024,
        ring_buffer_bytes: args.ring_buffer << 20,
    })?;
    let tracking = Tracking { all: system_wide, follow_forks: !args.no_inherit };
    let mut intake = Intake::new(
        RingReader::new(sampler.take_ring_buffer()?).context("cannot poll the ring buffer")?,
        TaskEventReader::open()?,
        Collector::new(args.call_graph, tracking, args.max_samples),
    );
    let followed = if system_wide { process::running() } else { targets.pids() };
    for pid in followed {
        if !system_wide {
            sampler.add_process(pid)?;
        }
        intake.collector.track(pid);
    }
    sampler.start()?;
    let start = Start::now();
    let mut command = match &mut targets {
        Targets::Command(pending) => Some(pending.take().expect("spawned by Targets::open").start()?),
        _ => None,
    };

    let mut status = StatusLine::new(args.quiet);
    let stop = stop_condition(args.duration, &targets, command.as_ref())?;
    let reason = sample_until(stop, &mut intake, &mut sampler, &mut status, args.max_samples).await?;
    sampler.pause()?;
    intake.drain();
    status.finish();
    let duration = start.instant.elapsed();
    let counters = sampler.counters()?;
    let run_stats = sampler.run_stats();

    let collected = intake.collector.finish();
    let meta = Meta {
        target: targets.describe(&args),
        frequency_hz: args.frequency,
        start_unix_ns: start.unix_ns,
        duration_ns: duration.as_nanos() as u64,
        call_graph: args.call_graph.name().into(),
        stack_copy_kib,
        lost_samples: counters.lost,
        unwind: unwind_summary(&collected),
    };
    let recording = Recording::from_live(
        &collected.profile,
        &collected.symbols,
        &collected.modules,
        start.monotonic_ns,
        meta,
    );
    output::write_all(outputs, &recording, &RenderOptions { grouping: args.grouping.grouping() })?;
    // Detaching the perf events waits for the kernel: after the outputs, not before.
    drop(sampler);

    if !args.quiet {
        let summary = Summary {
            recording: &recording,
            missing_cfi: missing_cfi(&collected),
            kernel_us_per_run: run_stats.map(|s| s.time.as_secs_f64() * 1e6 / s.runs as f64),
            outputs: &output_specs,
        };
        summary.print();
    }
    warn(&collected);
    if let Some(status) = command.as_mut().and_then(StartedCommand::try_status).filter(|s| !s.success()) {
        eprintln!("profiler: note: the command exited with {status}");
    }
    match reason {
        StopReason::Signal if !args.quiet => eprintln!("profiler: stopped by signal"),
        StopReason::MaxSamples if !args.quiet => eprintln!("profiler: stopped at --max-samples"),
        _ => {}
    }
    Ok(())
}

/// When the recording started, on each clock that needs it.
struct Start {
    instant: Instant,
    unix_ns: u64,
    /// CLOCK_MONOTONIC, the samples' clock.
    monotonic_ns: u64,
}

impl Start {
    fn now() -> Self {
        let unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        Self { instant: Instant::now(), unix_ns, monotonic_ns: process::monotonic_ns() }
    }
}

fn unwind_summary(collected: &Collected) -> UnwindSummary {
    let stats = &collected.unwind_stats;
    UnwindSummary {
        complete: stats.count(StackSource::Dwarf(UnwindEnd::Bottom)),
        completed_with_frame_pointers: stats.count(StackSource::DwarfThenFramePointers),
        truncated: stats.count(StackSource::Dwarf(UnwindEnd::SnapshotEnd)),
        missing_cfi: stats.missing_cfi.values().sum(),
        lost: stats.count(StackSource::Dwarf(UnwindEnd::Lost)),
    }
}

/// Modules where unwinding stopped for lack of CFI, most samples first.
fn missing_cfi(collected: &Collected) -> Vec<(String, u64)> {
    let mut modules: Vec<(String, u64)> = collected
        .unwind_stats
        .missing_cfi
        .iter()
        .map(|(module, &count)| {
            let name =
                module.map_or("[anonymous memory]".into(), |m| collected.modules.get(m).name().to_owned());
            (name, count)
        })
        .collect();
    modules.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    modules
}

fn warn(collected: &Collected) {
    if collected.lost_task_events > 0 {
        eprintln!(
            "profiler: warning: the kernel dropped {} mmap/exec/fork records; some frames may be misattributed",
            collected.lost_task_events
        );
    }
    if collected.malformed > 0 {
        eprintln!("profiler: warning: {} malformed records were skipped", collected.malformed);
    }
    if collected.failed > 0 {
        eprintln!(
            "profiler: warning: {} samples could not be processed (see the internal errors above)",
            collected.failed
        );
    }
}

/// A future that completes when the recording must stop: duration over, SIGINT/SIGTERM/SIGHUP,
/// or every target gone.
fn stop_condition<'a>(
    duration: Option<f64>,
    targets: &'a Targets,
    command: Option<&'a StartedCommand>,
) -> Result<impl Future<Output = StopReason> + 'a> {
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut hangup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    Ok(async move {
        let deadline = async {
            match duration {
                Some(seconds) => tokio::time::sleep(Duration::from_secs_f64(seconds)).await,
                None => std::future::pending().await,
            }
        };
        let targets_gone = async {
            match (targets, command) {
                (Targets::Processes(handles), _) => target::all_exited(handles).await,
                (_, Some(command)) => command.handle().exited().await,
                _ => std::future::pending().await,
            }
        };
        let reason = tokio::select! {
            () = deadline => StopReason::Duration,
            () = targets_gone => StopReason::TargetsExited,
            _ = interrupt.recv() => StopReason::Signal,
            _ = terminate.recv() => StopReason::Signal,
            _ = hangup.recv() => StopReason::Signal,
        };
        // From now on a second Ctrl-C ends the profiler at once, without output.
        // SAFETY: resetting a signal disposition to its default has no preconditions.
        unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
        reason
    })
}

/// Where everything the kernel reports goes.
struct Intake {
    ring: RingReader,
    task_events: TaskEventReader,
    collector: Collector,
    /// Samples taken after the task events were read: their mappings may still be on the way.
    later: Vec<Vec<u8>>,
}

impl Intake {
    fn new(ring: RingReader, task_events: TaskEventReader, collector: Collector) -> Self {
        Self { ring, task_events, collector, later: Vec::new() }
    }

    /// Hands the collector task events and samples in time order: a sample must find the
    /// mappings made before it. Task events are read up to `horizon`; samples taken after it
    /// wait for the next drain, whose task events will cover them.
    fn drain(&mut self) {
        let Self { ring, task_events, collector, later } = self;
        let horizon = process::monotonic_ns();
        task_events.drain(|event| collector.add_task_event(event));
        for record in later.drain(..) {
            collector.add_record(&record);
        }
        ring.drain(|record| match decode(record) {
            Ok(sample) if sample.time_ns() > horizon => later.push(record.to_vec()),
            _ => collector.add_record(record),
        });
        collector.prune(horizon);
    }
}

async fn sample_until(
    stop: impl Future<Output = StopReason>,
    intake: &mut Intake,
    sampler: &mut Sampler,
    status: &mut StatusLine,
    max_samples: Option<u64>,
) -> Result<StopReason> {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            reason = &mut stop => return Ok(reason),
            ready = intake.ring.ready() => {
                ready.context("cannot read the ring buffer")?;
                intake.drain();
                intake.collector.symbolize_new();
                for (tid, end) in intake.collector.take_stack_ends() {
                    sampler.set_stack_end(tid, end)?;
                }
                if max_samples.is_some_and(|max| intake.collector.progress().0 as u64 >= max) {
                    return Ok(StopReason::MaxSamples);
                }
                if status.due() {
                    let (samples, processes) = intake.collector.progress();
                    let lost = sampler.counters().map_or(0, |c| c.lost);
                    status.update(samples, lost, processes);
                }
            }
        }
    }
}
