//! `profiler record`: attach, sample until told to stop, then symbolize and write the outputs.
use std::future::Future;

use anyhow::{Context as _, Result};

use crate::{
    check,
    cli::{CallGraph, RecordArgs},
    collect::{Collected, Collector},
    intake::{Intake, RecordKind},
    output,
    process::{self, Start, Tracking},
    recording::{Meta, UnwindSummary, Weight},
    render::RenderOptions,
    ring::RingReader,
    sampler::{Sampler, SamplerConfig},
    stop::{StopReason, stop_condition},
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
            Self::Command(_) => target::command_line(&args.command),
            Self::SystemWide => "whole system".into(),
        }
    }
}

pub async fn run(args: RecordArgs) -> Result<()> {
    check::blocking(Some(args.frequency))?;
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
        RecordKind::Sample,
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
    let stop = stop_condition(args.duration, targets_gone(&targets, command.as_ref()))?;
    let reason = sample_until(stop, &mut intake, &mut sampler, &mut status, args.max_samples).await?;
    sampler.pause()?;
    intake.drain_all(Collector::add_record);
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
        weight: Weight::Samples,
        unwind: unwind_summary(&collected),
    };
    let recording = collected.recording(start.monotonic_ns, meta);
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
    collected.warn("samples");
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

/// Completes when every target is gone (never, system-wide).
async fn targets_gone(targets: &Targets, command: Option<&StartedCommand>) {
    match (targets, command) {
        (Targets::Processes(handles), _) => target::all_exited(handles).await,
        (_, Some(command)) => command.handle().exited().await,
        _ => std::future::pending().await,
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
            stack_ends = intake.advance(Collector::add_record) => {
                for (tid, end) in stack_ends? {
                    sampler.set_stack_end(tid, end)?;
                }
                if max_samples.is_some_and(|max| intake.collector.progress().0 as u64 >= max) {
                    return Ok(StopReason::MaxSamples);
                }
                if status.due() {
                    let (samples, processes) = intake.collector.progress();
                    let lost = sampler.counters().map_or(0, |c| c.lost);
                    let plural = if processes == 1 { "" } else { "es" };
                    status.update(format!("{samples} samples · {lost} lost · {processes} process{plural}"));
                }
            }
        }
    }
}
