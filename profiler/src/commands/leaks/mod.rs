//! `profiler leaks`: allocations a process has not freed, tracked from outside it with uprobes
//! on its [`allocator`], grouped by the stack that made them.
//!
//! The kernel keeps the outstanding blocks in a map keyed by (process, address), so frees are
//! matched exactly, in the order the threads make them. Each followed allocation's stack comes
//! through the ring and is walked as `record` walks CPU samples; at the end the blocks still
//! outstanding meet their stacks in the [`ledger`], one sample per block weighing its bytes.
mod allocator;
mod ledger;

use anyhow::{Context as _, Result};

use self::ledger::Ledger;
use crate::{
    aggregate::{Aggregate, Detail, Site},
    cli::LeaksArgs,
    decode::Payload,
    kernel::tracer::{Tracer, TracerConfig},
    model::{AllocationTotals, Meta, Tgid, Weight},
    output::Outputs,
    render::{Format, RenderOptions, leak_report},
    session::{self, Collector, End, Progress, ReportAtTheEnd, Settings, Target},
    walk::CallGraph,
};

pub(super) async fn run(args: LeaksArgs) -> Result<()> {
    // Allocations are many: a smaller copy than a CPU sample's by default.
    let stack_copy_kib = args.session.stack_size.unwrap_or(8);
    let config = TracerConfig {
        stack_copy_cap: stack_copy_kib * 1024,
        frame_pointers: CallGraph::default().frame_pointers(),
        ring_buffer_bytes: args.ring_buffer << 20,
        max_outstanding: args.max_outstanding,
        sample_every: args.sample_every,
    };
    // The target's children are not followed: the probes are installed in it alone.
    let settings = Settings {
        pids: args.pid.into_iter().map(Tgid).collect(),
        command: args.command,
        duration: args.session.duration,
        stack_copy_kib,
        quiet: args.session.quiet,
        debug_info: args.session.debug_info,
        detail: Some(Detail::ALL),
        outputs: Outputs::resolve(&args.outputs, None, Format::LeakReport)?,
        render: RenderOptions { top: args.top, ..RenderOptions::default() },
        ..Settings::default()
    };
    let min_age_ns = args.min_age.map(|seconds| (seconds * 1e9) as u64);
    let leaks = Leaks { config, min_age_ns, pid: Tgid(0), ledger: Ledger::default() };
    session::run(leaks, ReportAtTheEnd(print_report), settings).await
}

struct Leaks {
    config: TracerConfig,
    min_age_ns: Option<u64>,
    /// The process tracked.
    pid: Tgid,
    ledger: Ledger,
}

impl Collector for Leaks {
    type Kernel = Tracer;

    fn load(&mut self, target: &Target) -> Result<Tracer> {
        let tracer = Tracer::load(&self.config, allocator::of_target(target)?)?;
        self.pid = target.pids()[0];
        Ok(tracer)
    }

    fn weight(&self) -> Weight {
        Weight::Bytes
    }

    fn activity(&self, tracer: &Tracer, target: &str) -> String {
        format!("tracking the allocations of {target} in {}", tracer.allocator())
    }

    fn add(&mut self, site: Site, payload: Payload, _: &mut Aggregate) {
        if let Payload::Allocation(block) = payload {
            self.ledger.insert(block.addr, site);
        }
    }

    fn status(&self, tracer: &Tracer, _: &Progress) -> String {
        let (totals, n) = (tracer.totals().unwrap_or_default(), leak_report::thousands);
        let outstanding = tracer.heap().map_or(0, |heap| heap.outstanding);
        format!(
            "{} allocations · {} frees · {} bytes outstanding",
            n(totals.calls),
            n(totals.frees),
            n(outstanding)
        )
    }

    /// `leaks` asks for no windows.
    fn close_window(&mut self, _: &mut Tracer, _: &mut Aggregate, _: u64) -> Result<()> {
        Ok(())
    }

    /// One sample per block still outstanding (at least `--min-age` old), on its stack.
    fn finish(
        &mut self,
        tracer: &mut Tracer,
        aggregate: &mut Aggregate,
        end_ns: u64,
        meta: &mut Meta,
    ) -> Result<()> {
        let cutoff = self.min_age_ns.map(|age| end_ns.saturating_sub(age));
        let blocks = ledger::older_than(tracer.outstanding(self.pid)?, cutoff);
        self.ledger.push_blocks(&blocks, aggregate, self.config.sample_every);
        meta.allocations = Some(AllocationTotals { min_age_ns: self.min_age_ns, ..tracer.totals()? });
        Ok(())
    }
}

/// `leaks`' report at the end: the blocks outstanding, on standard output.
fn print_report(end: &End<'_, Tracer>) {
    let written = leak_report::write(end.recording, end.options.top, &mut std::io::stdout().lock());
    if let Err(err) = written.context("cannot write the report") {
        eprintln!("profiler: error: {err:#}");
    }
    for (path, _) in end.outputs {
        eprintln!("profiler: wrote {}", path.display());
    }
}
