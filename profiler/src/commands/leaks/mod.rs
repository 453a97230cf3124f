//! `profiler leaks`: allocations a process has not freed, tracked from outside it with uprobes
//! on its allocator, grouped by the stack that made them.
//!
//! The kernel side keeps the outstanding blocks in a map keyed by (process, address), so frees
//! are matched exactly, in the order the threads make them. Each followed allocation's stack
//! comes through a ring buffer and is unwound and pinned to modules here, as `record` does for
//! CPU samples; at the end the blocks still outstanding meet their stacks in the [`ledger`].
pub mod allocator;
pub mod ledger;
pub mod report;
pub mod tracer;

use std::{
    future::Future,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use self::{
    allocator::Allocator,
    ledger::{Block, Ledger},
    report::Totals,
    tracer::{Tracer, TracerConfig},
};
use crate::{
    check,
    cli::{CallGraph, LeaksArgs},
    collect::Collector,
    intake::{Intake, RecordKind},
    output::OutputFile,
    process::{self, Start, Tracking},
    profile::ProfileSample,
    recording::{Meta, Recording, Weight},
    render::{self, Format, RenderOptions},
    ring::RingReader,
    stop::{StopReason, stop_condition},
    summary::StatusLine,
    target::{self, PendingCommand, ProcessHandle, StartedCommand},
    task_events::TaskEventReader,
};

/// An output of `leaks`: the text report, or a rendering of the outstanding blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaksFormat {
    Report,
    Render(Format),
}

impl LeaksFormat {
    pub fn from_path(path: &Path) -> Self {
        if path.extension().is_some_and(|e| e == "txt") {
            Self::Report
        } else {
            Self::Render(Format::from_path(path).unwrap_or(Format::Svg))
        }
    }
}

/// The target before tracking starts: a running process, or a command held before `exec` so
/// that it is probed before it runs.
enum PendingTarget {
    Process(ProcessHandle),
    Command(PendingCommand),
}

impl PendingTarget {
    fn open(args: &LeaksArgs) -> Result<Self> {
        Ok(match args.pid {
            Some(pid) => Self::Process(ProcessHandle::open(pid)?),
            None => Self::Command(PendingCommand::spawn(&args.command)?),
        })
    }

    fn pid(&self) -> u32 {
        match self {
            Self::Process(handle) => handle.pid(),
            Self::Command(pending) => pending.pid(),
        }
    }

    fn allocator(&self, args: &LeaksArgs) -> Result<Allocator> {
        match self {
            Self::Process(handle) => allocator::of_process(handle.pid()),
            Self::Command(_) => allocator::of_command(&args.command[0]),
        }
    }

    fn describe(&self, args: &LeaksArgs) -> String {
        match self {
            Self::Process(handle) => format!("PID {}", handle.pid()),
            Self::Command(_) => target::command_line(&args.command),
        }
    }

    fn start(self) -> Result<Target> {
        Ok(match self {
            Self::Process(handle) => Target::Process(handle),
            Self::Command(pending) => Target::Command(pending.start()?),
        })
    }
}

enum Target {
    Process(ProcessHandle),
    Command(StartedCommand),
}

impl Target {
    async fn exited(&self) {
        match self {
            Self::Process(handle) => handle.exited().await,
            Self::Command(command) => command.handle().exited().await,
        }
    }
}

pub async fn run(args: LeaksArgs) -> Result<()> {
    check::blocking(None)?;
    let formats: Vec<(PathBuf, LeaksFormat)> =
        args.outputs.iter().map(|path| (path.clone(), LeaksFormat::from_path(path))).collect();
    let outputs: Vec<(OutputFile, LeaksFormat)> = formats
        .iter()
        .map(|(path, format)| Ok((OutputFile::create(path)?, *format)))
        .collect::<Result<_>>()?;

    let pending = PendingTarget::open(&args)?;
    let (pid, allocator) = (pending.pid(), pending.allocator(&args)?);
    let description = pending.describe(&args);
    let config = TracerConfig {
        stack_copy_cap: args.stack_size * 1024,
        ring_buffer_bytes: args.ring_buffer << 20,
        max_outstanding: args.max_outstanding,
        sample_every: args.sample_every,
    };
    let mut tracer = Tracer::load(&config)?;
    tracer.attach(&allocator, pid)?;
    let mut intake = Intake::new(
        RingReader::new(tracer.take_ring_buffer()?).context("cannot poll the ring buffer")?,
        TaskEventReader::open()?,
        Collector::new(CallGraph::Auto, Tracking { all: false, follow_forks: false }, None),
        RecordKind::Allocation,
    );
    intake.collector.track(pid);
    let start = Start::now();
    let target = pending.start()?;
    if !args.quiet {
        eprintln!("profiler: tracking the allocations of PID {pid} in {allocator}");
    }

    let mut ledger = Ledger::default();
    let mut status = StatusLine::new(args.quiet);
    let stop = stop_condition(args.duration, target.exited())?;
    let reason = track_until(stop, &mut intake, &mut tracer, &mut ledger, &mut status).await?;
    // Stop following before reading what is outstanding, so that the two agree.
    tracer.stop()?;
    intake.drain_all(|collector, record| add_allocation(collector, &mut ledger, record));
    status.finish();
    let end_ns = process::monotonic_ns();
    let duration = start.instant.elapsed();
    let totals = Totals {
        counters: tracer.counters()?,
        heap: tracer.heap()?,
        sample_every: args.sample_every,
        min_age_s: args.min_age,
    };
    let blocks: Vec<Block> = tracer
        .outstanding()?
        .into_iter()
        .filter(|(key, _)| key.tgid == pid)
        .map(|(key, block)| Block {
            tgid: key.tgid,
            addr: key.addr,
            size: block.size,
            time_ns: block.time_ns,
        })
        .collect();
    let cutoff = args.min_age.map(|seconds| end_ns.saturating_sub((seconds * 1e9) as u64));
    let blocks = ledger::older_than(blocks, cutoff);

    let mut collector = intake.collector;
    push_blocks(&mut collector, &ledger, &blocks, pid, args.sample_every);
    let collected = collector.finish();
    let meta = Meta {
        target: description,
        start_unix_ns: start.unix_ns,
        duration_ns: duration.as_nanos() as u64,
        call_graph: CallGraph::Auto.name().into(),
        stack_copy_kib: args.stack_size,
        lost_samples: totals.counters.stacks_lost,
        weight: Weight::Bytes,
        ..Meta::default()
    };
    let recording = collected.recording(start.monotonic_ns, meta);
    write_outputs(outputs, &recording, &totals, args.top)?;

    if !args.quiet {
        let mut stdout = std::io::stdout().lock();
        report::write(&recording, &totals, args.top, &mut stdout).context("cannot write the report")?;
        for (path, _) in &formats {
            eprintln!("profiler: wrote {}", path.display());
        }
        if reason == StopReason::Signal {
            eprintln!("profiler: stopped by signal");
        }
    }
    collected.warn("allocation stacks");
    // Removing the probes takes the kernel a while: done last, once everything is written.
    drop(tracer);
    if let Target::Command(mut command) = target
        && let Some(status) = command.try_status().filter(|s| !s.success())
    {
        eprintln!("profiler: note: the command exited with {status}");
    }
    Ok(())
}

fn add_allocation(collector: &mut Collector, ledger: &mut Ledger, record: &[u8]) {
    if let Some(site) = collector.add_allocation(record) {
        ledger.insert(site);
    }
}

async fn track_until(
    stop: impl Future<Output = StopReason>,
    intake: &mut Intake,
    tracer: &mut Tracer,
    ledger: &mut Ledger,
    status: &mut StatusLine,
) -> Result<StopReason> {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            reason = &mut stop => return Ok(reason),
            stack_ends = intake.advance(|collector, record| add_allocation(collector, ledger, record)) => {
                for (tid, end) in stack_ends? {
                    tracer.set_stack_end(tid, end)?;
                }
                if status.due() {
                    let counters = tracer.counters()?;
                    let outstanding = tracer.heap()?.outstanding;
                    status.update(format!(
                        "{} allocations · {} frees · {} bytes outstanding",
                        report::thousands(counters.alloc_calls),
                        report::thousands(counters.free_calls),
                        report::thousands(outstanding)
                    ));
                }
            }
        }
    }
}

/// One sample per outstanding block, weighing its bytes (scaled when sampling), on the stack
/// that allocated it: `[stack lost]` when its record never came.
fn push_blocks(collector: &mut Collector, ledger: &Ledger, blocks: &[Block], pid: u32, sample_every: u32) {
    let lost = collector.stack_lost();
    for block in blocks {
        let ((comm, stack), tid) = match ledger.site(block) {
            Some(site) => ((site.comm, site.stack), site.tid),
            None => (lost, pid),
        };
        let weight = block.size * u64::from(sample_every);
        collector.push_sample(ProfileSample {
            time_ns: block.time_ns,
            tgid: block.tgid,
            tid,
            comm,
            stack,
            weight,
        });
    }
}

fn write_outputs(
    outputs: Vec<(OutputFile, LeaksFormat)>,
    recording: &Recording,
    totals: &Totals,
    top: usize,
) -> Result<()> {
    let options = RenderOptions::default();
    for (file, format) in outputs {
        file.commit(|out| match format {
            LeaksFormat::Report => report::write(recording, totals, top, out),
            LeaksFormat::Render(format) => render::render(format, recording, &options, out),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txt_is_the_report() {
        let format = |path: &str| LeaksFormat::from_path(Path::new(path));
        assert_eq!(format("leaks.txt"), LeaksFormat::Report);
        assert_eq!(format("leaks.svg"), LeaksFormat::Render(Format::Svg));
        assert_eq!(format("leaks.folded"), LeaksFormat::Render(Format::Folded));
        assert_eq!(format("leaks.pb.gz"), LeaksFormat::Render(Format::Pprof));
        assert_eq!(format("leaks"), LeaksFormat::Render(Format::Svg));
    }
}
