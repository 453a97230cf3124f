//! One recording session: the lifecycle every command that takes samples shares. Checks, the
//! outputs created up front, the target, the kernel side loaded and pointed at it, records
//! drained and walked until a stop condition, the last drain, the recording named and written,
//! and what the terminal is told.
//!
//! A mode ([`Mode`]) brings what differs: its kernel side (a [`KernelSource`]), what it keeps of
//! each record (its weight), what only the end knows, and its end-of-run report. Everything
//! between the ring and the recording is the same pipeline for every mode.
pub mod checks;
mod intake;
mod limits;
mod status;
mod stop;
pub mod summary;
mod target;

use std::{
    collections::VecDeque,
    io::IsTerminal as _,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

pub use self::target::Target;
use self::{
    intake::{Intake, Monotonic, Sink},
    status::StatusLine,
    stop::{StopReason, stop_condition},
};
use crate::{
    address_space::{
        COPY_BUDGET, DESCRIBED_BUDGET, INFLATED, INFLATED_BUDGET, MAX_MAPS_BYTES, ModuleId, TaskEvent,
        Tracking, cut_readings, descriptors, refused_copies, remote, running, unkept,
    },
    aggregate::{Aggregate, Detail, Site},
    clock::{self, Start},
    decode::Payload,
    kernel::{KernelSource, ring::RingReader, task_events::TaskEventReader},
    model::{Meta, Recording, Tgid, printable, printable_owned},
    named::Named as _,
    output::{self, Outputs},
    render::RenderOptions,
    symbolize::{Finished, NamingReport, NamingThread, NewFrames, Symbols},
    walk::{CallGraph, StackWalker},
};

/// What a mode keeps of records and says at the end; see the module's documentation.
pub trait Mode {
    type Kernel: KernelSource;

    /// Loads the kernel side for `target`, which has not started yet.
    fn load(&mut self, target: &Target) -> Result<Self::Kernel>;
    /// Keeps a record whose stack was walked and interned as `site`.
    fn add(&mut self, site: Site, payload: Payload, aggregate: &mut Aggregate);
    /// What the readiness line says is under way, once records flow: `recording PID 1234 at
    /// 999 Hz`, of `target` as [`Target::describe`] puts it.
    fn activity(&self, kernel: &Self::Kernel, target: &str) -> String;
    /// The live status line's figures.
    fn status(&self, kernel: &Self::Kernel, progress: &Progress) -> String;
    /// After the last drain, at `end_ns`: adds to `aggregate` what only the end knows, and fills
    /// in the mode's part of `meta`.
    fn finish(
        &mut self,
        kernel: &mut Self::Kernel,
        aggregate: &mut Aggregate,
        end_ns: u64,
        meta: &mut Meta,
    ) -> Result<()>;
    /// What the terminal shows once the outputs are written (unless `-q`).
    fn report(&self, end: &End<'_, Self::Kernel>);
    /// With [`Settings::window`]: a window closes at `end_ns` (not the last one, which
    /// [`Self::finish`] ends): adds to `aggregate` what it holds that no record brought yet.
    fn close_window(
        &mut self,
        _kernel: &mut Self::Kernel,
        _aggregate: &mut Aggregate,
        _end_ns: u64,
    ) -> Result<()> {
        Ok(())
    }
    /// With [`Settings::window`]: the recording of one window, named, handed over as it closes
    /// (the last one when the session ends).
    fn window(&mut self, _recording: Recording) {}
}

/// What a session was asked to do, beside its mode.
#[derive(Default)]
pub struct Settings {
    /// Processes to profile (`-p`); with `command` empty too, the whole system.
    pub pids: Vec<Tgid>,
    /// Command to start and profile (`-- CMD`).
    pub command: Vec<std::ffi::OsString>,
    /// Samples per second per CPU, checked against the kernel's limit; `None` for a mode that
    /// does not sample on a clock.
    pub frequency_hz: Option<u64>,
    /// Stop after this many seconds (otherwise at a signal, or when the targets exit).
    pub duration: Option<f64>,
    pub call_graph: CallGraph,
    /// Runtimes' frames (Python, Java) are not read: native frames only.
    pub native_only: bool,
    /// Kernel frames keep their addresses in the outputs.
    pub kernel_addresses: bool,
    /// KiB of user stack the kernel side copies per record (0: none).
    pub stack_copy_kib: u32,
    /// Processes forked by the targets are followed.
    pub follow_forks: bool,
    /// Stop after this many records.
    pub max_records: Option<u64>,
    /// No status line and no report on the terminal.
    pub quiet: bool,
    /// What each sample keeps whatever the outputs need (`leaks` counts blocks, `agent` splits
    /// windows by process); `None`: what the outputs need.
    pub detail: Option<Detail>,
    pub outputs: Outputs,
    pub render: RenderOptions,
    /// Cut the samples into windows this long, each handed to [`Mode::window`] and then
    /// forgotten (continuous profiling); `None`: one recording for the whole session.
    pub window: Option<Duration>,
}

/// How far a session got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The samples' weights, summed.
    pub weight: u64,
    /// Processes samples came from.
    pub processes: u64,
}

/// The end of a session, for its mode's report.
pub struct End<'a, K> {
    pub recording: &'a Recording,
    pub kernel: &'a K,
    /// Files where unwinding stopped for lack of CFI, with sample counts.
    pub missing_cfi: Vec<(String, u64)>,
    pub outputs: &'a [(PathBuf, crate::render::Format)],
    pub options: &'a RenderOptions,
    pub progress: Progress,
    /// What the Python stage has to say, a line each.
    pub python: Vec<String>,
    /// What the HotSpot stage has to say, likewise.
    pub java: Vec<String>,
}

/// Runs a session of `mode` to its end.
pub async fn run<M: Mode>(mode: M, settings: Settings) -> Result<()> {
    checks::blocking(settings.frequency_hz)?;
    if let Some(warning) = limits::raise_open_files() {
        eprintln!("profiler: warning: {warning}");
    }
    descriptors::set_cap(limits::open_files());
    let files = settings.outputs.create()?;
    let target = Target::open(&settings.pids, &settings.command)?;
    let description = printable_owned(target.describe());
    let tracking = Tracking { all: matches!(target, Target::System), follow_forks: settings.follow_forks };
    let walker = StackWalker::new(settings.call_graph, tracking, settings.native_only);
    let detail = settings.detail.unwrap_or_else(|| settings.outputs.detail(settings.render.grouping));
    let aggregate = Aggregate::new(detail).with_kernel_addresses(settings.kernel_addresses);
    let mut session = Pipeline::new(mode, walker, aggregate, settings.max_records)?;
    let mut kernel = session.mode.load(&target)?;
    let ring = RingReader::new(kernel.take_ring()?).context("cannot poll the ring buffer")?;
    let mut intake = Intake::new(ring, TaskEventReader::open()?, Monotonic, M::Kernel::RECORDS);
    match target.pids() {
        pids if pids.is_empty() => {
            running().into_iter().for_each(|pid| session.walker.address_spaces_mut().track(pid))
        }
        pids => {
            for pid in pids {
                kernel.follow(pid)?;
                session.walker.address_spaces_mut().track(pid);
            }
        }
    }
    kernel.start()?;
    let start = Start::now();
    let mut running = target.start()?;
    if !settings.quiet {
        ready(&session.mode.activity(&kernel, &description), settings.duration);
    }

    let mut status = StatusLine::new(!settings.quiet && std::io::stderr().is_terminal());
    let stop = stop_condition(settings.duration, running.exited())?;
    let base = Meta {
        target: description,
        frequency_hz: settings.frequency_hz.unwrap_or(0),
        call_graph: settings.call_graph.name().into(),
        stack_copy_kib: settings.stack_copy_kib,
        ..Meta::default()
    };
    let mut windows = settings.window.map(|every| Windows::new(every, base.clone()));
    // From here on an error costs what it touches, not the recording: the outputs are written
    // with what was collected, and the first error is returned after. One that stops sampling
    // (the ring unreadable, a kernel map refusing an update) is such an error too.
    let mut late = Vec::new();
    let reason = session
        .sample_until(stop, &mut intake, &mut kernel, &mut status, windows.as_mut())
        .await
        .map_err(|err| late.push(err.context("sampling stopped early")))
        .ok();
    late.extend(kernel.pause().err());
    intake.drain_all(&mut session);
    status.finish();

    let end_ns = clock::monotonic_ns();
    let lost = kernel.lost().unwrap_or_else(|err| {
        late.push(err);
        0
    });
    let mut meta = Meta {
        start_unix_ns: start.unix_ns,
        duration_ns: start.instant.elapsed().as_nanos() as u64,
        lost_samples: lost + intake.discarded(),
        unwind: session.walker.stats().summary(),
        ..base
    };
    late.extend(session.mode.finish(&mut kernel, &mut session.aggregate, end_ns, &mut meta).err());
    // What the last drains and the mode's end brought is named now.
    session.settle();
    if let Some(windows) = &mut windows {
        // The last window, partial: what the outputs below get is only the session's summary.
        windows.base.weight = meta.weight;
        session.cut(windows, Start::now()).await;
        while !session.unnamed_windows.is_empty() {
            session.hand_over_window().await;
        }
    }
    let (symbols, naming) = session.stop_naming(end_ns).await.unwrap_or_else(|err| {
        late.push(err);
        (Symbols::default(), NamingReport::default())
    });
    let modules = session.walker.address_spaces().modules();
    let recording = session.aggregate.recording(&symbols, modules, start.monotonic_ns, meta);
    let written = output::write_all(files, &recording, &settings.render);

    if !settings.quiet {
        let missing_cfi = session.walker.stats().missing_cfi(modules);
        let outputs = settings.outputs.paths();
        let options = &settings.render;
        let progress = session.progress();
        session.mode.report(&End {
            recording: &recording,
            kernel: &kernel,
            missing_cfi,
            outputs,
            options,
            progress,
            python: session.walker.python().stats().describe(),
            java: session.walker.hotspot().stats().describe(),
        });
        match reason {
            Some(StopReason::Signal) => eprintln!("profiler: stopped by signal"),
            Some(StopReason::MaxSamples) => eprintln!("profiler: stopped at --max-samples"),
            Some(StopReason::Duration | StopReason::TargetsExited) => {}
            None => {
                eprintln!("profiler: stopped by an error (below): what was recorded until then is written")
            }
        }
    }
    session.warn(M::Kernel::RECORDS.noun(), &naming);
    for warning in kernel.warnings() {
        eprintln!("profiler: warning: {warning}");
    }
    // Detaching from the kernel waits for it: done last, once everything is written.
    drop(kernel);
    running.note_exit_status();
    let mut errors = written.err().into_iter().chain(late);
    match errors.next() {
        Some(first) => {
            for later in errors {
                eprintln!("profiler: error: {later:#}");
            }
            Err(first)
        }
        None => Ok(()),
    }
}

/// The readiness line: one line on stderr once the kernel side samples and the targets run,
/// which scripts and tests wait for.
fn ready(activity: &str, duration: Option<f64>) {
    let until = duration.map(|seconds| format!(" for {seconds} s")).unwrap_or_default();
    eprintln!("profiler: {activity}{until} (Ctrl-C to stop)");
}

/// The windows of a continuous session: when the current one opened and when it closes.
struct Windows {
    every: Duration,
    opened: Start,
    closes_at: tokio::time::Instant,
    /// What every window's recording says of the session.
    base: Meta,
}

impl Windows {
    fn new(every: Duration, base: Meta) -> Self {
        Self { every, opened: Start::now(), closes_at: tokio::time::Instant::now() + every, base }
    }
}

/// Everything between the ring and the recording: each record decoded, its stack walked and
/// interned, handed to the mode; new frames named after each drain.
struct Pipeline<M> {
    mode: M,
    walker: StackWalker,
    naming: NamingThread,
    aggregate: Aggregate,
    /// The windows cut, oldest first, while their frames are named.
    unnamed_windows: VecDeque<UnnamedWindow>,
    records: u64,
    max_records: Option<u64>,
    /// Records that did not decode (counted, never fatal).
    malformed: u64,
    /// Records whose processing failed (a panic in a dependency on corrupt input, contained).
    failed: u64,
    /// The end of the last drain: everything taken before it has been handed over.
    drained_ns: u64,
    /// When frames were last named and processes pruned.
    settled_at: Instant,
    /// When modules no process maps were last looked for.
    unmapped_checked_at: Instant,
}

/// The longest naming and pruning are put off while records wait.
const MAX_UNSETTLED: Duration = Duration::from_secs(1);

impl<M: Mode> Pipeline<M> {
    fn new(mode: M, walker: StackWalker, aggregate: Aggregate, max_records: Option<u64>) -> Result<Self> {
        Ok(Self {
            mode,
            walker,
            naming: NamingThread::start()?,
            aggregate,
            unnamed_windows: VecDeque::new(),
            records: 0,
            max_records,
            malformed: 0,
            failed: 0,
            drained_ns: 0,
            settled_at: Instant::now(),
            unmapped_checked_at: Instant::now(),
        })
    }

    fn progress(&self) -> Progress {
        Progress {
            weight: self.aggregate.total_weight(),
            processes: self.walker.address_spaces().sampled_processes(),
        }
    }

    fn full(&self) -> bool {
        self.max_records.is_some_and(|max| self.records >= max)
    }

    async fn sample_until(
        &mut self,
        stop: impl Future<Output = StopReason>,
        intake: &mut Intake,
        kernel: &mut M::Kernel,
        status: &mut StatusLine,
        mut windows: Option<&mut Windows>,
    ) -> Result<StopReason> {
        tokio::pin!(stop);
        loop {
            let window_closes = async {
                match windows.as_deref() {
                    Some(windows) => tokio::time::sleep_until(windows.closes_at).await,
                    None => std::future::pending().await,
                }
            };
            let window_named = async {
                match self.unnamed_windows.front_mut() {
                    Some(window) => (&mut window.symbols).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                reason = &mut stop => return Ok(reason),
                symbols = window_named => self.hand_over(symbols),
                () = window_closes => {
                    if let Some(windows) = windows.as_deref_mut() {
                        let end = Start::now();
                        self.mode.close_window(kernel, &mut self.aggregate, end.monotonic_ns)?;
                        self.settle();
                        self.cut(windows, end).await;
                    }
                }
                ready = intake.ready() => {
                    ready?;
                    intake.drain(self);
                    let stack_ends = self.walker.take_stack_ends();
                    for &(tid, end) in &stack_ends {
                        kernel.set_stack_end(tid, end)?;
                    }
                    for (tgid, python) in self.walker.python_mut().take_registrations() {
                        // A table the kernel will not fill costs that process its Python
                        // frames, never the session.
                        if let Err(err) = kernel.set_python_process(tgid, python.as_ref()) {
                            self.walker.python_mut().refused_by_kernel(tgid, &err);
                        }
                    }
                    // Handing frames to naming and pruning wait while records wait, and while
                    // threads are still teaching the kernel where their stacks end (until then
                    // their records are long; naming competes with the drain for the CPUs).
                    let busy = intake.behind() || !stack_ends.is_empty();
                    if !busy || self.settled_at.elapsed() >= MAX_UNSETTLED {
                        self.settle();
                    }
                    if self.full() {
                        return Ok(StopReason::MaxSamples);
                    }
                    if status.due() {
                        status.update(self.mode.status(kernel, &self.progress()));
                    }
                }
            }
        }
    }

    /// Hands the frames seen since the last time to naming, and forgets the processes gone by
    /// the last drain. Done between drains, once the kernel has the stack ends they taught.
    fn settle(&mut self) {
        let frames = self.aggregate.new_frames();
        let functions = self.walker.functions();
        self.naming.name(NewFrames::new(frames, self.walker.address_spaces(), functions, self.drained_ns));
        self.walker.end_epoch();
        let gone = self.walker.address_spaces_mut().prune(self.drained_ns);
        self.naming.forget(&gone, self.drained_ns);
        for &tgid in &gone {
            self.walker.python_mut().forget(tgid);
            self.walker.hotspot_mut().forget(tgid);
        }
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
    fn evict(&mut self, modules: &[ModuleId]) {
        let Self { walker, naming, .. } = self;
        walker.evict_modules(modules, |evicted, modules| {
            naming.forget_modules(modules.share(evicted.iter().copied()))
        });
    }

    /// Closes the current window: the aggregate and the names start afresh (so memory follows
    /// one window, not the session), and its samples go to the mode as a recording once named
    /// ([`Self::hand_over`]), meanwhile records are drained. Only when naming is
    /// [`MAX_UNNAMED_WINDOWS`] windows behind does the cut wait for the oldest.
    async fn cut(&mut self, windows: &mut Windows, end: Start) {
        if self.unnamed_windows.len() >= MAX_UNNAMED_WINDOWS {
            self.hand_over_window().await;
        }
        let meta = Meta {
            start_unix_ns: windows.opened.unix_ns,
            duration_ns: end.monotonic_ns.saturating_sub(windows.opened.monotonic_ns),
            unwind: self.walker.stats().summary(),
            ..windows.base.clone()
        };
        self.unnamed_windows.push_back(UnnamedWindow {
            aggregate: self.aggregate.take(),
            meta,
            opened_ns: windows.opened.monotonic_ns,
            symbols: self.naming.finish(end.monotonic_ns),
        });
        windows.opened = end;
        windows.closes_at += windows.every;
        // What runs for weeks lets go of what it no longer sees: modules idle for a few windows
        // (the recordings of windows cut need only their paths and build ids), and processes
        // whose exit the kernel never reported.
        let idle = self.walker.address_spaces().modules().idle(IDLE_WINDOWS);
        self.evict(&idle);
        let spaces = self.walker.address_spaces_mut();
        spaces.modules_mut().next_period();
        spaces.notice_exits(windows.opened.monotonic_ns);
    }

    /// Waits for the names of the oldest window cut, if any, and hands it over.
    async fn hand_over_window(&mut self) {
        if let Some(window) = self.unnamed_windows.front_mut() {
            let symbols = (&mut window.symbols).await;
            self.hand_over(symbols);
        }
    }

    /// Hands the oldest window cut over to the mode, named by `symbols`; without them (naming
    /// failed), its frames keep placeholder names.
    fn hand_over(&mut self, symbols: Result<Symbols>) {
        let Some(UnnamedWindow { aggregate, meta, opened_ns, .. }) = self.unnamed_windows.pop_front() else {
            return;
        };
        let symbols = symbols.unwrap_or_else(|err| {
            eprintln!("profiler: warning: {err:#}");
            Symbols::default()
        });
        let modules = self.walker.address_spaces().modules();
        self.mode.window(aggregate.recording(&symbols, modules, opened_ns, meta));
    }

    /// The names of every frame, once naming (on its own thread) is done, and what it has to
    /// say.
    async fn stop_naming(&mut self, end_ns: u64) -> Result<(Symbols, NamingReport)> {
        let symbols = self.naming.finish(end_ns).await?;
        Ok((symbols, self.naming.stop()?))
    }

    /// Adds one record. Corrupt input anywhere (a record, a binary, its CFI) costs at most this
    /// record: a panic below is contained and counted.
    fn add(&mut self, bytes: &[u8]) {
        let Self { mode, walker, aggregate, malformed, records, .. } = self;
        let Ok(record) = M::Kernel::RECORDS.decode(bytes) else {
            *malformed += 1;
            return;
        };
        let sample = &record.sample;
        let walked = walker.walk(sample);
        let site = aggregate.site(sample.time_ns(), sample.tgid(), sample.tid(), sample.state(), &walked);
        mode.add(site, record.payload, aggregate);
        *records += 1;
    }

    /// Warns, on stderr, about what was dropped on the way: task events the kernel lost, records
    /// that did not decode or could not be processed, and what `naming` refused.
    fn warn(&self, records: &str, naming: &NamingReport) {
        let lost_task_events = self.walker.address_spaces().lost_events();
        if lost_task_events > 0 {
            eprintln!(
                "profiler: warning: the kernel dropped {lost_task_events} mmap/exec/fork records; some frames may be misattributed"
            );
        }
        if self.malformed > 0 {
            eprintln!("profiler: warning: {} malformed records were skipped", self.malformed);
        }
        if self.failed > 0 {
            eprintln!(
                "profiler: warning: {} {records} could not be processed (see the internal errors above)",
                self.failed
            );
        }
        if naming.failed_jobs > 0 {
            eprintln!(
                "profiler: warning: naming failed {} times (see the internal errors above): some frames are unnamed",
                naming.failed_jobs
            );
        }
        for refused in &naming.refused {
            for line in refused.kept() {
                eprintln!("profiler: warning: {}", printable(line));
            }
            if refused.count() > refused.kept().len() {
                eprintln!(
                    "profiler: warning: and {} more like these",
                    refused.count() - refused.kept().len()
                );
            }
        }
        let out_of_descriptors = self.walker.address_spaces().modules().out_of_descriptors();
        if out_of_descriptors > 0 {
            eprintln!(
                "profiler: warning: {out_of_descriptors} times a mapped file could not be opened: the {} descriptors \
                 kept for targets' files ({}) were in use; the least recently used modules were let go, and the \
                 frames of files not opened are named by address",
                descriptors::cap(),
                limits::describe_open_files()
            );
        }
        let (values, functions) = (unkept(), self.walker.functions().unkept());
        if values + functions > 0 {
            eprintln!(
                "profiler: warning: the {} MiB for what targets describe about themselves (runtimes' code objects \
                 and methods, the functions they name, perf maps) was spent: {values} things read were not kept \
                 (read again when needed), {functions} frames' functions were left unnamed",
                DESCRIBED_BUDGET >> 20
            );
        }
        let given_up = remote::given_up();
        if given_up > 0 {
            eprintln!(
                "profiler: warning: {given_up} files of network file systems were given up on: not copied \
                 within {} s; their frames are named by address",
                remote::DEADLINE.as_secs(),
            );
        }
        let not_asked = remote::not_asked_count();
        if not_asked > 0 {
            eprintln!(
                "profiler: warning: {not_asked} files of FUSE file systems were not read: their daemons answer \
                 root when they like, and a read that waits for one cannot be stopped; their frames are named \
                 by address"
            );
        }
        let cut = cut_readings();
        if cut > 0 {
            eprintln!(
                "profiler: warning: {cut} readings of a process's /proc/PID/maps stopped at {} MiB (more mappings, \
                 or longer names, than any program has): its mappings past there are unknown",
                MAX_MAPS_BYTES >> 20
            );
        }
        let inflations = INFLATED.refused();
        if inflations > 0 {
            eprintln!(
                "profiler: warning: {inflations} times compressed sections were left compressed: the {} MiB for \
                 inflated sections was spent (modules unwound or named without them)",
                INFLATED_BUDGET >> 20
            );
        }
        let refused = refused_copies();
        if let Some(first) = refused.first {
            eprintln!(
                "profiler: warning: the {} MiB for copies of files their owners can change was spent \
                 (the first turned away: {} MiB): {} left unread (their frames are named by address), {} read \
                 without their DWARF (no lines or inlined frames)",
                COPY_BUDGET >> 20,
                first.div_ceil(1 << 20),
                refused.unread,
                refused.without_dwarf
            );
        }
    }
}

/// A window cut, waiting for its names.
struct UnnamedWindow {
    aggregate: Aggregate,
    meta: Meta,
    opened_ns: u64,
    symbols: Finished,
}

/// Windows cut whose names may be awaited at once (naming a host's first window can take longer
/// than a window).
const MAX_UNNAMED_WINDOWS: usize = 4;

/// Windows a module may go unsampled before it is let go (a minute at the agent's default).
const IDLE_WINDOWS: u64 = 4;

/// Least time between two looks for modules no process maps any more (the look goes through
/// every mapping of every process): a host starting programs all day holds those of the last
/// quarter second or so.
const UNMAPPED_CHECK_INTERVAL: Duration = Duration::from_millis(250);

impl<M: Mode> Sink for Pipeline<M> {
    fn task_event(&mut self, event: TaskEvent) {
        self.walker.apply(event);
    }

    fn record(&mut self, record: &[u8]) {
        if self.full() {
            return;
        }
        let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.add(record)));
        if added.is_err() {
            self.failed += 1;
        }
    }

    fn drained(&mut self, now_ns: u64) {
        self.drained_ns = self.drained_ns.max(now_ns);
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::SampleHeader;

    use super::*;
    use crate::model::Tid;
    use crate::{decode::RecordKind, frame::Frame, testing::encode_sample};

    /// A mode that keeps every record as a sample, and panics on a thread id of 13.
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

    impl Mode for Counting {
        type Kernel = Unloaded;

        fn load(&mut self, _: &Target) -> Result<Unloaded> {
            Ok(Unloaded)
        }
        fn add(&mut self, site: Site, _: Payload, aggregate: &mut Aggregate) {
            assert_ne!(site.tid, Tid(13), "a dependency panicking on a corrupt input");
            aggregate.push(site, 1);
        }
        fn activity(&self, _: &Unloaded, _: &str) -> String {
            String::new()
        }
        fn status(&self, _: &Unloaded, _: &Progress) -> String {
            String::new()
        }
        fn finish(&mut self, _: &mut Unloaded, _: &mut Aggregate, _: u64, _: &mut Meta) -> Result<()> {
            Ok(())
        }
        fn report(&self, _: &End<'_, Unloaded>) {}
    }

    fn record(tid: u32) -> Vec<u8> {
        let header = SampleHeader { tgid: std::process::id(), tid, ..Default::default() };
        encode_sample(&header, &[], &[], &[0xffff_ffff_8100_0000])
    }

    #[tokio::test]
    async fn garbage_and_panics_cost_one_record_each() {
        let walker = StackWalker::new(CallGraph::Fp, Tracking { all: false, follow_forks: false }, false);
        let mut pipeline = Pipeline::new(Counting, walker, Aggregate::new(Detail::ALL), Some(3)).unwrap();
        pipeline.record(&[1, 2, 3]);
        pipeline.record(&record(13));
        pipeline.record(&record(1));
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
        let walker = StackWalker::new(CallGraph::Fp, Tracking { all: false, follow_forks: false }, false);
        let mut pipeline = Pipeline::new(Counting, walker, Aggregate::new(Detail::ALL), Some(2)).unwrap();
        for tid in 1..=5 {
            pipeline.record(&record(tid));
        }
        assert!(pipeline.full());
        assert_eq!(pipeline.aggregate.samples().count(), 2);
    }
}
