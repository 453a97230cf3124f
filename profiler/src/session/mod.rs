//! One recording session: the lifecycle every command that takes samples shares. Set up (checks,
//! the outputs created up front, the target, the kernel side loaded and pointed at it), sampled
//! (records drained and walked until a stop condition, the last drain), finished (the recording
//! named and written) and reported (what the terminal is told).
//!
//! A mode brings what differs, in two parts: a [`Collector`] (its kernel side, a [`KernelSource`],
//! what it keeps of each record, its weight, and what only a window's end or the session's knows)
//! and a [`Consumer`] of what it collects (its lines on the terminal, each window, the report at
//! the end). Everything
//! between the ring and the recording is the same [`pipeline`] for every mode; a continuous
//! session cuts it into [`windows`], merged into its [`whole`] when it writes outputs;
//! [`warnings`] say what was dropped on the way and which limits were reached; `record`'s report
//! is the [`summary`].
pub(crate) mod checks;
mod intake;
mod limits;
mod pipeline;
mod status;
mod stop;
pub(crate) mod summary;
mod target;
mod warnings;
mod whole;
mod windows;

use std::{io::IsTerminal as _, path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};

use self::{
    intake::{Intake, Monotonic},
    pipeline::Pipeline,
    status::StatusLine,
    stop::{StopReason, stop_condition},
    target::Running,
    whole::Whole,
    windows::Windows,
};
pub(crate) use self::{stop::terminal_gone, target::Target};
use crate::{
    address_space::Tracking,
    aggregate::{Aggregate, Detail, Site},
    clock::{self, Start},
    decode::Payload,
    kernel::{
        KernelSource,
        functions::{KernelFunctions, KernelStarts},
        names::KernelNamer,
        ring::RingReader,
        task_events::TaskEventReader,
    },
    model::{Meta, Recording, Tgid, Weight, printable_owned},
    named::Named as _,
    output::{self, OutputFile, Outputs},
    render::{Format, RenderOptions},
    symbolize::{DebugInfo, NamingReport, Symbols},
    untrusted::descriptors,
    walk::{CallGraph, StackWalker},
};

/// What a session collects: its kernel side, what it keeps of each record, what it adds as a
/// window closes and at the end. `record`, `top` and `agent` collect a CPU profile, `leaks` the
/// blocks outstanding.
pub(crate) trait Collector {
    type Kernel: KernelSource;

    /// Loads the kernel side for `target`, which has not started yet.
    fn load(&mut self, target: &Target) -> Result<Self::Kernel>;
    /// Keeps a record whose stack was walked and interned as `site`.
    fn add(&mut self, site: Site, payload: Payload, aggregate: &mut Aggregate);
    /// What its samples weigh: each one sample, nanoseconds of thread time, bytes.
    fn weight(&self) -> Weight;
    /// What the readiness line says is under way, once records flow: `recording PID 1234 at
    /// 999 Hz`, of `target` as [`Target::describe`] puts it.
    fn activity(&self, kernel: &Self::Kernel, target: &str) -> String;
    /// The live status line's figures.
    fn status(&self, kernel: &Self::Kernel, progress: &Progress) -> String;
    /// With [`Settings::window`]: a window closes at `end_ns` (not the last one, which
    /// [`Self::finish`] ends): adds to `aggregate` what it holds that no record brought yet.
    fn close_window(
        &mut self,
        kernel: &mut Self::Kernel,
        aggregate: &mut Aggregate,
        end_ns: u64,
    ) -> Result<()>;
    /// After the last drain, at `end_ns`: adds to `aggregate` what only the end knows, and fills
    /// in the collector's part of `meta` (the weight is the session's, from the start).
    fn finish(
        &mut self,
        kernel: &mut Self::Kernel,
        aggregate: &mut Aggregate,
        end_ns: u64,
        meta: &mut Meta,
    ) -> Result<()>;
}

/// What a session does with what it collects (with a kernel side `K`): `record`'s summary,
/// `top`'s view, `agent`'s exporter, `leaks`' report. A mode is a collector and a consumer.
pub(crate) trait Consumer<K> {
    /// The readiness line, from what the collector says is under way (`collecting`) in
    /// `target`; said unless the session is quiet.
    fn ready(&mut self, target: &str, collecting: String) -> String;
    /// The live status line, from the collector's figures.
    fn status(&self, collecting: String) -> String;
    /// With [`Settings::window`]: the recording of one window, named, handed over as it closes
    /// (the last one when the session ends).
    fn window(&mut self, recording: Recording);
    /// Sampling ended; the collector's end, the last window and the report are to come.
    fn sampling_ended(&mut self);
    /// What the terminal shows once the outputs are written (unless `-q`).
    fn report(&self, end: &End<'_, K>);
}

/// The consumer of a session without windows whose only say is its report at the end (`record`'s
/// summary, `leaks`' report): the collector's lines as they are.
pub(crate) struct ReportAtTheEnd<K>(pub fn(&End<'_, K>));

impl<K> Consumer<K> for ReportAtTheEnd<K> {
    fn ready(&mut self, _: &str, collecting: String) -> String {
        collecting
    }

    fn status(&self, collecting: String) -> String {
        collecting
    }

    /// Its sessions ask for no windows.
    fn window(&mut self, _: Recording) {}

    fn sampling_ended(&mut self) {}

    fn report(&self, end: &End<'_, K>) {
        (self.0)(end);
    }
}

/// What a session was asked to do, beside its mode.
#[derive(Default)]
pub(crate) struct Settings {
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
    /// Whose DWARF names native frames.
    pub debug_info: DebugInfo,
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
    /// Cut the samples into windows this long, each handed to [`Consumer::window`] and then
    /// forgotten (continuous profiling), but merged into what the `outputs` get when there are
    /// any; `None`: one recording for the whole session.
    pub window: Option<Duration>,
}

/// How far a session got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// The samples' weights, summed.
    pub weight: u64,
    /// Processes samples came from.
    pub processes: u64,
}

/// The end of a session, for its consumer's report.
pub(crate) struct End<'a, K> {
    pub recording: &'a Recording,
    pub kernel: &'a K,
    /// Files where unwinding stopped for lack of CFI, with sample counts.
    pub missing_cfi: Vec<(String, u64)>,
    pub outputs: &'a [(PathBuf, crate::render::Format)],
    pub options: &'a RenderOptions,
    pub progress: Progress,
    /// What each runtime met has to say: a label and lines.
    pub runtimes: Vec<(&'static str, Vec<String>)>,
}

/// Runs a session to its end: what `collector` collects, handed to `consumer`.
pub(crate) async fn run<C: Collector, U: Consumer<C::Kernel>>(
    collector: C,
    consumer: U,
    settings: Settings,
) -> Result<()> {
    let mut session = Session::set_up(collector, consumer, &settings)?;
    let reason = session.sample(&settings).await?;
    let written = session.finish(&settings).await;
    session.report(&settings, reason, written)
}

/// A session under way: what setting it up made, for the steps after. Its fields come in the
/// reverse of the order they are made in, the order they are dropped in when a step fails (at
/// the end, [`Session::report`] drops the kernel side first).
struct Session<C: Collector, U> {
    /// The windows of a continuous session, from when sampling starts.
    windows: Option<Windows>,
    /// What the recording (and every window's) says of the session.
    base: Meta,
    running: Running,
    start: Start,
    intake: Intake,
    kernel: C::Kernel,
    pipeline: Pipeline<C>,
    consumer: U,
    /// The outputs, created up front, until the recording is written to them.
    files: Vec<(OutputFile, Format)>,
    /// Errors once sampling started (see [`Session::sample`]), returned after the outputs are
    /// written.
    late: Vec<anyhow::Error>,
}

/// The recording as written, and what naming had to say.
struct Written {
    recording: Recording,
    naming: NamingReport,
    /// The outputs' first failure.
    written: Result<()>,
}

impl<C: Collector, U: Consumer<C::Kernel>> Session<C, U> {
    /// The blocking checks, the outputs created, the target opened, the kernel side loaded,
    /// pointed at it and started, and the target let run.
    fn set_up(collector: C, mut consumer: U, settings: &Settings) -> Result<Self> {
        checks::blocking(settings.frequency_hz)?;
        if let Some(warning) = limits::raise_open_files() {
            eprintln!("profiler: warning: {warning}");
        }
        descriptors::set_cap(limits::open_files());
        let files = settings.outputs.create()?;
        let target = Target::open(&settings.pids, &settings.command)?;
        let description = printable_owned(target.describe());
        let mut pipeline = Pipeline::new(
            collector,
            walker(settings, &target),
            aggregate(settings),
            settings.max_records,
            settings.debug_info,
            KernelNamer::load(),
        )?;
        let mut kernel = pipeline.collector.load(&target)?;
        let ring = RingReader::new(kernel.take_ring()?).context("cannot poll the ring buffer")?;
        let intake = Intake::new(ring, TaskEventReader::open()?, Monotonic, C::Kernel::RECORDS);
        follow(&target, &mut kernel, &mut pipeline.walker)?;
        match &target {
            Target::Command(command) => {
                pipeline.walker.expect_program(Tgid(command.pid()), command.program())
            }
            Target::Processes(_) => pipeline.walker.expect_running(&target.pids()),
            Target::System => {}
        }
        // This thread drains the ring, and reads targets' memory as it does.
        crate::untrusted::reader::start_for_this_thread();
        kernel.start()?;
        let start = Start::now();
        pipeline.walker.sampling_starts(start.monotonic_ns);
        let running = target.start()?;
        let readiness = consumer.ready(&description, pipeline.collector.activity(&kernel, &description));
        if !settings.quiet {
            ready(&readiness, settings.duration);
        }
        let base = Meta { weight: pipeline.collector.weight(), ..base(settings, description) };
        let late = Vec::new();
        Ok(Self { windows: None, base, running, start, intake, kernel, pipeline, consumer, files, late })
    }

    /// Samples until a stop condition, then pauses the kernel side and drains what is left.
    /// Returns why sampling stopped, `None` for an error.
    ///
    /// From here on an error costs what it touches, not the recording: the outputs are written
    /// with what was collected, and the first error is returned after. One that stops sampling
    /// (the ring unreadable, a kernel map refusing an update) is such an error too.
    async fn sample(&mut self, settings: &Settings) -> Result<Option<StopReason>> {
        let mut status = StatusLine::new(!settings.quiet && std::io::stderr().is_terminal());
        let stop = stop_condition(settings.duration, self.running.exited())?;
        self.windows =
            settings.window.map(|every| Windows::new(every, self.base.clone(), self.whole(settings)));
        let reason = self
            .pipeline
            .sample_until(
                stop,
                &mut self.intake,
                &mut self.kernel,
                &mut self.consumer,
                &mut status,
                self.windows.as_mut(),
            )
            .await
            .map_err(|err| self.late.push(err.context("sampling stopped early")))
            .ok();
        self.late.extend(self.kernel.pause().err());
        self.intake.drain_all(&mut self.pipeline);
        status.finish();
        self.consumer.sampling_ended();
        Ok(reason)
    }

    /// With outputs to write, the whole a continuous session keeps of its windows for them.
    fn whole(&self, settings: &Settings) -> Option<Whole> {
        let detail = settings.outputs.detail(settings.render.grouping);
        (!settings.outputs.paths().is_empty()).then(|| Whole::new(detail, self.start.monotonic_ns))
    }

    /// The recording: what only the end knows added by the collector, the last window handed over,
    /// every frame named, written to the outputs.
    async fn finish(&mut self, settings: &Settings) -> Written {
        let end_ns = clock::monotonic_ns();
        let lost = self.kernel.lost().unwrap_or_else(|err| {
            self.late.push(err);
            0
        });
        let pipeline = &mut self.pipeline;
        let mut meta = Meta {
            start_unix_ns: self.start.unix_ns,
            duration_ns: self.start.instant.elapsed().as_nanos() as u64,
            lost_samples: lost + self.intake.discarded(),
            unwind: pipeline.walker.stats().summary(),
            ..std::mem::take(&mut self.base)
        };
        let finished =
            pipeline.collector.finish(&mut self.kernel, &mut pipeline.aggregate, end_ns, &mut meta);
        self.late.extend(finished.err());
        // What the last drains and the collector's end brought is named now.
        pipeline.settle();
        let mut whole = None;
        if let Some(windows) = &mut self.windows {
            // The last window, partial; the aggregate is empty after it: what the outputs below
            // get is the windows merged, or else only the session's summary.
            windows.close_last(pipeline, &mut |recording| self.consumer.window(recording)).await;
            whole = windows.take_whole();
        }
        let (symbols, naming) = pipeline.stop_naming(end_ns).await.unwrap_or_else(|err| {
            self.late.push(err);
            (Symbols::default(), NamingReport::default())
        });
        let modules = pipeline.walker.address_spaces().modules();
        let recording = match whole {
            Some(whole) => whole.recording(meta),
            None => pipeline.aggregate.recording(&symbols, modules, self.start.monotonic_ns, meta),
        };
        let written = output::write_all(std::mem::take(&mut self.files), &recording, &settings.render);
        Written { recording, naming, written }
    }

    /// The consumer's report and why sampling stopped (unless `-q`), the warnings, the kernel side
    /// dropped, how a command that failed exited; returns the first error.
    fn report(self, settings: &Settings, reason: Option<StopReason>, written: Written) -> Result<()> {
        let Self { pipeline: session, consumer, kernel, mut running, late, .. } = self;
        let Written { recording, naming, written } = written;
        if !settings.quiet {
            let modules = session.walker.address_spaces().modules();
            let missing_cfi = session.walker.stats().missing_cfi(modules);
            let outputs = settings.outputs.paths();
            let options = &settings.render;
            let progress = session.progress();
            consumer.report(&End {
                recording: &recording,
                kernel: &kernel,
                missing_cfi,
                outputs,
                options,
                progress,
                runtimes: session.walker.runtimes_report(),
            });
            warnings::stopped(reason);
        }
        warnings::warn(&session, &kernel, &naming);
        // Detaching from the kernel waits for it: done last, once everything is written.
        drop(kernel);
        running.note_exit_status();
        first_error(written, late)
    }
}

/// The stage that walks stacks, for `target`.
fn walker(settings: &Settings, target: &Target) -> StackWalker {
    let tracking = Tracking { all: matches!(target, Target::System), follow_forks: settings.follow_forks };
    StackWalker::new(settings.call_graph, tracking, settings.native_only)
}

/// The aggregate, keeping of each sample what the outputs need (or the mode asks for).
/// Kernel frames are interned as their function's start unless their addresses are kept.
fn aggregate(settings: &Settings) -> Aggregate {
    let detail = settings.detail.unwrap_or_else(|| settings.outputs.detail(settings.render.grouping));
    let aggregate = Aggregate::new(detail).with_kernel_addresses(settings.kernel_addresses);
    if settings.kernel_addresses {
        return aggregate;
    }
    aggregate.with_kernel_functions(KernelFunctions::new(Box::<KernelStarts>::default()))
}

/// Points the kernel side and the walker at the processes of `target`. System-wide, each
/// process is read as it is first seen (a sample, a task event): read all at the start (a
/// host's thousands, one of tens of thousands of mappings waiting on its memory's lock while it
/// forks), they held the start up for seconds.
fn follow<K: KernelSource>(target: &Target, kernel: &mut K, walker: &mut StackWalker) -> Result<()> {
    for pid in target.pids() {
        kernel.follow(pid)?;
        walker.address_spaces_mut().track(pid);
    }
    Ok(())
}

/// What every recording of the session says of it from the start: its `target` and settings.
fn base(settings: &Settings, target: String) -> Meta {
    Meta {
        target,
        frequency_hz: settings.frequency_hz.unwrap_or(0),
        call_graph: settings.call_graph.name().into(),
        stack_copy_kib: settings.stack_copy_kib,
        ..Meta::default()
    }
}

/// The readiness line: one line on stderr once the kernel side samples and the targets run,
/// which scripts and tests wait for.
fn ready(activity: &str, duration: Option<f64>) {
    let until = duration.map(|seconds| format!(" for {seconds} s")).unwrap_or_default();
    eprintln!("profiler: {activity}{until} (Ctrl-C to stop)");
}

/// The first of the outputs' failure and the `late` errors, returned; the others said on
/// stderr.
fn first_error(written: Result<()>, late: Vec<anyhow::Error>) -> Result<()> {
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
