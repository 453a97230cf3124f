//! The pipeline: what becomes of each record drained from the ring. It is decoded, its stack
//! walked and interned into a site, handed to the collector; between drains, the kernel is told what
//! the walk learned (where stacks end, Python processes), the new frames are handed to naming
//! and the processes gone are forgotten.
use std::{
    ops::ControlFlow,
    time::{Duration, Instant},
};

use anyhow::Result;

use super::{
    Collector, Consumer, Progress,
    intake::{Intake, Pause, Sink},
    status::StatusLine,
    stop::StopReason,
    windows::Windows,
};
use crate::{
    address_space::{ModuleId, TaskEvent},
    aggregate::Aggregate,
    kernel::{KernelSource, names::KernelNamer, ring::DRAIN_INTERVAL},
    symbolize::{DebugInfo, NamingReport, NamingThread, NewFrames, Symbols},
    walk::StackWalker,
};

/// Everything between the ring and the recording: each record decoded, its stack walked and
/// interned, handed to the collector; new frames named after each drain.
pub(super) struct Pipeline<C> {
    pub(super) collector: C,
    pub(super) walker: StackWalker,
    pub(super) naming: NamingThread,
    pub(super) aggregate: Aggregate,
    records: u64,
    max_records: Option<u64>,
    /// Records that did not decode (counted, never fatal).
    pub(super) malformed: u64,
    /// Records whose processing failed (a panic in a dependency on corrupt input, contained).
    pub(super) failed: u64,
    /// The end of the last drain: everything taken before it has been handed over.
    drained_ns: u64,
    /// When frames were last named and processes pruned.
    settled_at: Instant,
    /// When modules no process maps were last looked for.
    unmapped_checked_at: Instant,
}

/// How often the ring is drained while a runtime may be starting in a process followed.
const STARTING_DRAIN_INTERVAL: Duration = Duration::from_millis(1);

/// The longest naming and pruning are put off while records wait.
const MAX_UNSETTLED: Duration = Duration::from_secs(1);

/// Least time between two looks for modules no process maps any more (the look goes through
/// every mapping of every process): a host starting programs all day holds those of the last
/// quarter second or so.
const UNMAPPED_CHECK_INTERVAL: Duration = Duration::from_millis(250);

impl<C: Collector> Pipeline<C> {
    pub(super) fn new(
        collector: C,
        walker: StackWalker,
        aggregate: Aggregate,
        max_records: Option<u64>,
        debug_info: DebugInfo,
        kernel_namer: Result<KernelNamer>,
    ) -> Result<Self> {
        Ok(Self {
            collector,
            walker,
            naming: NamingThread::start(debug_info, kernel_namer)?,
            aggregate,
            records: 0,
            max_records,
            malformed: 0,
            failed: 0,
            drained_ns: 0,
            settled_at: Instant::now(),
            unmapped_checked_at: Instant::now(),
        })
    }

    pub(super) fn progress(&self) -> Progress {
        Progress {
            weight: self.aggregate.total_weight(),
            processes: self.walker.address_spaces().sampled_processes(),
        }
    }

    fn full(&self) -> bool {
        self.max_records.is_some_and(|max| self.records >= max)
    }

    /// Drains records as they come until `stop` completes or `--max-samples` is reached,
    /// handing what each drain taught to the kernel and to naming; with `windows`, cuts them as
    /// they close and hands them to `consumer` as they are named.
    pub(super) async fn sample_until(
        &mut self,
        stop: impl Future<Output = StopReason>,
        intake: &mut Intake,
        kernel: &mut C::Kernel,
        consumer: &mut impl Consumer<C::Kernel>,
        status: &mut StatusLine,
        mut windows: Option<&mut Windows>,
    ) -> Result<StopReason> {
        tokio::pin!(stop);
        loop {
            let starting = self.walker.runtime_may_be_starting(self.drained_ns);
            let drain_interval = if starting { STARTING_DRAIN_INTERVAL } else { DRAIN_INTERVAL };
            let closes_at = windows.as_deref().map(|windows| windows.closes_at);
            let window_closes = async {
                match closes_at {
                    Some(closes_at) => tokio::time::sleep_until(closes_at).await,
                    None => std::future::pending().await,
                }
            };
            let window_named = async {
                match windows.as_deref_mut() {
                    Some(windows) => windows.named().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                reason = &mut stop => return Ok(reason),
                symbols = window_named => {
                    if let Some(windows) = windows.as_deref_mut() {
                        windows.hand_over(self, &mut |recording| consumer.window(recording), symbols);
                    }
                }
                () = window_closes => {
                    if let Some(windows) = windows.as_deref_mut() {
                        windows.close(self, kernel, &mut |recording| consumer.window(recording)).await?;
                    }
                }
                ready = intake.ready(drain_interval) => {
                    ready?;
                    intake.drain(self);
                    let updates = self.walker.take_kernel_updates();
                    for &(tid, end) in &updates.stack_ends {
                        kernel.set_stack_end(tid, end)?;
                    }
                    for (tgid, process) in &updates.runtime_processes {
                        // A table the kernel will not fill costs that process its runtime's
                        // frames, never the session.
                        if let Err(err) = kernel.set_runtime_process(*tgid, process.as_ref()) {
                            self.walker.refused_by_kernel(*tgid, &err);
                        }
                    }
                    // Handing frames to naming and pruning wait while records wait, and while
                    // threads are still teaching the kernel where their stacks end (until then
                    // their records are long; naming competes with the drain for the CPUs).
                    let busy = intake.behind() || !updates.stack_ends.is_empty();
                    if !busy || self.settled_at.elapsed() >= MAX_UNSETTLED {
                        self.settle();
                    }
                    if self.full() {
                        return Ok(StopReason::MaxSamples);
                    }
                    if status.due() {
                        status.update(consumer.status(self.collector.status(kernel, &self.progress())));
                    }
                }
            }
        }
    }

    /// Hands the frames seen since the last time to naming, and forgets the processes gone by
    /// the last drain. Done between drains, once the kernel has the stack ends they taught.
    pub(super) fn settle(&mut self) {
        let frames = self.aggregate.new_frames();
        let runtimes = self.walker.runtimes();
        self.naming.name(NewFrames::new(frames, self.walker.address_spaces(), runtimes, self.drained_ns));
        self.walker.end_epoch();
        let gone = self.walker.prune(self.drained_ns);
        self.naming.forget(&gone, self.drained_ns);
        // The modules only processes now forgotten mapped are let go once their frames handed
        // over above are named (a host starting new programs all day would otherwise hold each
        // one for a while).
        if !gone.is_empty() && self.unmapped_checked_at.elapsed() >= UNMAPPED_CHECK_INTERVAL {
            self.unmapped_checked_at = Instant::now();
            let unmapped = self.walker.address_spaces().unmapped_modules();
            self.evict(&unmapped);
        }
        // Files that could not be opened for want of descriptors kept: the least recently used
        // modules make room (once named), whoever mapped them.
        let least_used = self.walker.address_spaces_mut().modules_mut().short_of_descriptors();
        self.evict(&least_used);
        self.settled_at = Instant::now();
    }

    /// Lets go of `modules`, here and, after what it was handed before, in naming.
    pub(super) fn evict(&mut self, modules: &[ModuleId]) {
        let Self { walker, naming, .. } = self;
        walker.evict_modules(modules, |evicted, modules| {
            naming.forget_modules(modules.share(evicted.iter().copied()))
        });
    }

    /// The names of every frame, once naming (on its own thread) is done, and what it has to
    /// say.
    pub(super) async fn stop_naming(&mut self, end_ns: u64) -> Result<(Symbols, NamingReport)> {
        let symbols = self.naming.finish(end_ns).await?;
        Ok((symbols, self.naming.stop()?))
    }

    /// Adds one record, unless `hold` and its look found a runtime the kernel should hear of
    /// first (`Break`). Corrupt input anywhere (a record, a binary, its CFI) costs at most this
    /// record: a panic below is contained and counted.
    fn add(&mut self, bytes: &[u8], hold: bool) -> ControlFlow<()> {
        let Self { collector, walker, aggregate, malformed, records, .. } = self;
        let Ok(record) = C::Kernel::RECORDS.decode(bytes) else {
            *malformed += 1;
            return ControlFlow::Continue(());
        };
        let sample = &record.sample;
        let Some(walked) = walker.walk(sample, hold) else { return ControlFlow::Break(()) };
        let site = aggregate.site(sample.time_ns(), sample.tgid(), sample.tid(), sample.state(), &walked);
        collector.add(site, record.payload, aggregate);
        *records += 1;
        ControlFlow::Continue(())
    }
}

impl<C: Collector> Sink for Pipeline<C> {
    fn task_event(&mut self, event: TaskEvent) {
        self.walker.apply(event);
    }

    fn events_applied(&mut self) -> ControlFlow<()> {
        self.walker.discover();
        if self.walker.runtime_found() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    }

    fn record(&mut self, record: &[u8], pause: Pause) -> ControlFlow<()> {
        if self.full() {
            return ControlFlow::Continue(());
        }
        let hold = pause == Pause::ForTheKernel;
        let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.add(record, hold)));
        added.unwrap_or_else(|_| {
            self.failed += 1;
            ControlFlow::Continue(())
        })
    }

    fn drained(&mut self, now_ns: u64) {
        self.drained_ns = self.drained_ns.max(now_ns);
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::SampleHeader;

    use super::*;
    use crate::{
        address_space::Tracking,
        aggregate::{Detail, Site},
        decode::{Payload, RecordKind},
        frame::Frame,
        model::{Meta, Tgid, Tid, Weight},
        session::Target,
        testing::{encode_sample, no_kernel_namer},
        walk::CallGraph,
    };

    /// A collector that keeps every record as a sample, and panics on a thread id of 13.
    struct Counting;

    /// A kernel side that is never loaded: the pipeline is fed by hand.
    struct Unloaded;

    impl KernelSource for Unloaded {
        const RECORDS: RecordKind = RecordKind::Sample;

        fn ebpf(&mut self) -> &mut aya::Ebpf {
            unreachable!("the pipeline never asks the kernel side")
        }
        fn follow(&mut self, _: Tgid) -> Result<()> {
            Ok(())
        }
        fn start(&mut self) -> Result<()> {
            Ok(())
        }
        fn lost(&self) -> Result<u64> {
            Ok(0)
        }
    }

    impl Collector for Counting {
        type Kernel = Unloaded;

        fn load(&mut self, _: &Target) -> Result<Unloaded> {
            Ok(Unloaded)
        }
        fn add(&mut self, site: Site, _: Payload, aggregate: &mut Aggregate) {
            assert_ne!(site.tid, Tid(13), "a dependency panicking on a corrupt input");
            aggregate.push(site, 1);
        }
        fn weight(&self) -> Weight {
            Weight::Samples
        }
        fn activity(&self, _: &Unloaded, _: &str) -> String {
            String::new()
        }
        fn status(&self, _: &Unloaded, _: &Progress) -> String {
            String::new()
        }
        fn close_window(&mut self, _: &mut Unloaded, _: &mut Aggregate, _: u64) -> Result<()> {
            Ok(())
        }
        fn finish(&mut self, _: &mut Unloaded, _: &mut Aggregate, _: u64, _: &mut Meta) -> Result<()> {
            Ok(())
        }
    }

    fn record(tid: u32) -> Vec<u8> {
        let header = SampleHeader { tgid: std::process::id(), tid, ..Default::default() };
        encode_sample(&header, &[], &[], &[0xffff_ffff_8100_0000])
    }

    /// A pipeline of [`Counting`] records, at most `max_records` of them.
    fn counting_pipeline(max_records: u64) -> Pipeline<Counting> {
        let walker = StackWalker::new(CallGraph::Fp, Tracking { all: false, follow_forks: false }, false);
        let aggregate = Aggregate::new(Detail::ALL);
        Pipeline::new(Counting, walker, aggregate, Some(max_records), DebugInfo::Own, no_kernel_namer())
            .unwrap()
    }

    #[tokio::test]
    async fn garbage_and_panics_cost_one_record_each() {
        let mut pipeline = counting_pipeline(3);
        assert!(pipeline.record(&[1, 2, 3], Pause::ForTheKernel).is_continue());
        assert!(pipeline.record(&record(13), Pause::ForTheKernel).is_continue());
        assert!(pipeline.record(&record(1), Pause::ForTheKernel).is_continue());
        pipeline.drained(0);
        pipeline.settle();
        assert_eq!((pipeline.malformed, pipeline.failed, pipeline.records), (1, 1, 1));
        assert_eq!(pipeline.aggregate.samples().count(), 1);
        assert!(pipeline.aggregate.new_frames().is_empty(), "the new frames were handed to the namer");
        let symbols = pipeline.naming.finish(0).await.unwrap();
        assert_eq!(symbols.of(&Frame::Kernel(0xffff_ffff_8100_0000)).len(), 1);
    }

    #[test]
    fn records_beyond_the_maximum_are_dropped() {
        let mut pipeline = counting_pipeline(2);
        for tid in 1..=5 {
            assert!(pipeline.record(&record(tid), Pause::ForTheKernel).is_continue());
        }
        assert!(pipeline.full());
        assert_eq!(pipeline.aggregate.samples().count(), 2);
    }
}
