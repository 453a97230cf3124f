//! `profiler record`: attach, sample until told to stop, then symbolize and write the output.
use std::{
    future::Future,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    cli::{CallGraph, Format, RecordArgs},
    collect::{Collected, Collector},
    output::OutputFile,
    preflight,
    process::{self, Tracking},
    render::{self, SvgOptions},
    ring::RingReader,
    sampler::{Counters, Sampler, SamplerConfig},
    symbolize::Symbolizer,
    target::{self, PendingCommand, ProcessHandle, StartedCommand},
    task_events::TaskEventReader,
    unwind::{UnwindEnd, hybrid::StackSource},
};

/// Ring buffer: ~960 samples with the default 32 KiB stack copy, about half a second of
/// samples at 999 Hz on two CPUs.
const RING_BUFFER_BYTES: u32 = 32 * 1024 * 1024;

enum Targets {
    Processes(Vec<ProcessHandle>),
    Command(Option<PendingCommand>),
    SystemWide,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Duration,
    Signal,
    TargetsExited,
}

pub async fn run(args: RecordArgs) -> Result<()> {
    preflight::check_privileges()?;
    preflight::check_btf()?;
    preflight::check_frequency(args.frequency)?;
    let format = args.format.or_else(|| Format::from_path(&args.output)).unwrap_or(Format::Svg);
    let output = OutputFile::create(&args.output)?;
    let mut targets = if !args.pids.is_empty() {
        Targets::Processes(args.pids.iter().map(|&pid| ProcessHandle::open(pid)).collect::<Result<_>>()?)
    } else if !args.command.is_empty() {
        Targets::Command(Some(PendingCommand::spawn(&args.command)?))
    } else {
        Targets::SystemWide
    };
    let title = title(&args, &targets);

    let mut sampler = Sampler::load(&SamplerConfig {
        frequency_hz: args.frequency,
        filter_processes: !matches!(targets, Targets::SystemWide),
        follow_forks: !args.no_inherit,
        stack_copy_cap: match args.call_graph {
            CallGraph::Fp => 0,
            CallGraph::Auto | CallGraph::Dwarf => args.stack_size * 1024,
        },
        ring_buffer_bytes: RING_BUFFER_BYTES,
    })?;
    match &targets {
        Targets::Processes(handles) => handles.iter().try_for_each(|h| sampler.add_process(h.pid()))?,
        Targets::Command(Some(pending)) => sampler.add_process(pending.pid())?,
        Targets::Command(None) | Targets::SystemWide => {}
    }
    let ring = RingReader::new(sampler.take_ring_buffer()?).context("cannot poll the ring buffer")?;
    let tracking = Tracking { all: matches!(targets, Targets::SystemWide), follow_forks: !args.no_inherit };
    let mut intake = Intake {
        ring,
        task_events: TaskEventReader::open()?,
        collector: Collector::new(args.call_graph, tracking),
    };
    match &targets {
        Targets::Processes(handles) => handles.iter().for_each(|h| intake.collector.track(h.pid())),
        Targets::Command(Some(pending)) => intake.collector.track(pending.pid()),
        Targets::Command(None) => {}
        Targets::SystemWide => process::running().into_iter().for_each(|pid| intake.collector.track(pid)),
    }
    sampler.start()?;
    let started = Instant::now();
    let mut command = match &mut targets {
        Targets::Command(pending) => Some(pending.take().expect("spawned above").start()?),
        _ => None,
    };

    let stop = stop_condition(args.duration, &targets, command.as_ref())?;
    let reason = sample_until(stop, &mut intake).await?;
    sampler.stop()?;
    intake.drain();
    let elapsed = started.elapsed();
    let counters = sampler.counters()?;
    let run_stats = sampler.run_stats();
    drop(sampler);

    let collected = intake.collector.finish();
    let symbols = Symbolizer::default().symbolize(
        &collected.profile.distinct_frames(),
        &collected.modules,
        &collected.perf_maps,
    );
    let folded = render::collapse(&collected.profile, &symbols);
    let samples = collected.profile.samples().len();
    let labels = SvgOptions {
        title,
        subtitle: Some(format!(
            "{samples} samples at {} Hz over {:.1} s",
            args.frequency,
            elapsed.as_secs_f64()
        )),
    };
    let path = output.path().to_owned();
    output.commit(|out| match format {
        Format::Svg => render::write_svg(&folded, &labels, out),
        Format::Folded => render::write_folded(&folded, out),
    })?;

    let exit_note = command.as_mut().and_then(StartedCommand::try_status).filter(|s| !s.success());
    print_summary(&collected, &counters, &path);
    if let Some(stats) = run_stats {
        let per_run = stats.time.as_secs_f64() * 1e6 / stats.runs as f64;
        eprintln!("profiler: kernel: {per_run:.2} µs per sample program run ({} runs)", stats.runs);
    }
    if args.call_graph != CallGraph::Fp {
        print_unwind_quality(&collected, args.stack_size);
    }
    if let Some(status) = exit_note {
        eprintln!("profiler: note: the command exited with {status}");
    }
    if reason == StopReason::Signal {
        eprintln!("profiler: stopped by signal");
    }
    Ok(())
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
}

impl Intake {
    /// Task events first: a sample must find the mappings made before it.
    fn drain(&mut self) {
        let Self { ring, task_events, collector } = self;
        task_events.drain(|event| collector.add_task_event(event));
        ring.drain(|record| collector.add_record(record));
        collector.prune(process::monotonic_ns());
    }
}

async fn sample_until(stop: impl Future<Output = StopReason>, intake: &mut Intake) -> Result<StopReason> {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            reason = &mut stop => return Ok(reason),
            ready = intake.ring.ready() => {
                ready.context("cannot read the ring buffer")?;
                intake.drain();
            }
        }
    }
}

fn title(args: &RecordArgs, targets: &Targets) -> String {
    match targets {
        Targets::Processes(handles) => {
            let pids: Vec<String> = handles.iter().map(|h| h.pid().to_string()).collect();
            format!("profiler: PID {}", pids.join(", "))
        }
        Targets::Command(_) => {
            let argv: Vec<_> = args.command.iter().map(|a| a.to_string_lossy()).collect();
            format!("profiler: {}", argv.join(" "))
        }
        Targets::SystemWide => "profiler: whole system".into(),
    }
}

fn print_summary(collected: &Collected, counters: &Counters, path: &std::path::Path) {
    let samples = collected.profile.samples().len();
    let processes = collected.profile.process_count();
    let plural = if processes == 1 { "" } else { "es" };
    eprintln!(
        "profiler: {samples} samples ({} lost) from {processes} process{plural}, wrote {}",
        counters.lost,
        path.display()
    );
    if samples == 0 {
        eprintln!("profiler: no samples were recorded (was the target idle?)");
    }
    if collected.lost_task_events > 0 {
        eprintln!(
            "profiler: warning: the kernel dropped {} mmap/exec/fork records; some frames may be misattributed",
            collected.lost_task_events
        );
    }
    if collected.malformed > 0 {
        eprintln!("profiler: warning: {} malformed records were skipped", collected.malformed);
    }
}

/// How complete the user stacks are: one line of shares, then the modules that lacked CFI.
fn print_unwind_quality(collected: &Collected, stack_kib: u32) {
    let stats = &collected.unwind_stats;
    let total = stats.total();
    if total == 0 {
        return;
    }
    let share = |count: u64| 100.0 * count as f64 / total as f64;
    let missing_cfi: u64 = stats.missing_cfi.values().sum();
    eprintln!(
        "profiler: user stacks: {:.1}% reached the bottom, {:.1}% completed with frame pointers, \
         {:.1}% cut by the {stack_kib} KiB stack copy, {:.1}% stopped in code without CFI, {:.1}% lost",
        share(stats.count(StackSource::Dwarf(UnwindEnd::Bottom))),
        share(stats.count(StackSource::DwarfThenFramePointers)),
        share(stats.count(StackSource::Dwarf(UnwindEnd::SnapshotEnd))),
        share(missing_cfi),
        share(stats.count(StackSource::Dwarf(UnwindEnd::Lost))),
    );
    let mut modules: Vec<(u64, String)> = stats
        .missing_cfi
        .iter()
        .map(|(module, &count)| {
            let name =
                module.map_or("[anonymous memory]".into(), |m| collected.modules.get(m).name().to_owned());
            (count, name)
        })
        .collect();
    modules.sort_unstable_by(|a, b| b.cmp(a));
    if !modules.is_empty() {
        let top: Vec<String> = modules.iter().take(5).map(|(n, name)| format!("{name} ({n})")).collect();
        eprintln!("profiler: code without CFI: {}", top.join(", "));
    }
}
