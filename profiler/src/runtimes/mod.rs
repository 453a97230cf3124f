//! Language runtimes' own frames, in place of the native frames of their interpreters and JIT
//! code, read from outside the process: Python's and Ruby's, whose frames live outside the native
//! stack, read at sample time by the eBPF program and merged after unwinding; Java's (HotSpot),
//! on the native stack, stepped and named during unwinding.
//!
//! Each runtime is a folder behind one interface, [`Runtime`], in the manner of the OpenTelemetry
//! eBPF profiler's interpreters: it says what marks its images and recognises one (once per
//! file), attaches to a process that maps one (or refuses, and says why), tells the kernel what
//! its walker needs (when it walks in the kernel), steps the native frames it owns, names frames
//! at a depth or merges the frames read at sample time, and reports its counters. [`Runtimes`]
//! owns the rest, the same for every runtime: finding which runtime a process runs, off the
//! thread that drains samples (`discovery`), the life of a runtime in each process (starting,
//! refused, running), the kernel's table of processes, the function table its frames name, each
//! sample's allowance of reads of target memory, and the summary's lines. Adding a runtime is a
//! folder here (and one in `profiler-ebpf/src/runtimes/` when it walks in the kernel) and one
//! line in [`Runtimes::new`].
mod discovery;
mod elf_code;
pub(crate) mod functions;
pub(crate) mod go;
pub(crate) mod hotspot;
mod kernel_table;
pub(crate) mod memory;
mod merge;
pub(crate) mod perl;
mod php;
pub(crate) mod python;
mod ranges;
pub(crate) mod ruby;
mod slot;
pub(crate) mod v8;

use std::{any::Any, marker::PhantomData, path::PathBuf, sync::Arc, time::Instant};

use profiler_common::runtimes::{RuntimeKind, RuntimeProcess};
use rustc_hash::FxHashSet;

pub(crate) use self::discovery::{ImageFile, Mark};
use self::{
    discovery::{Discovery, Found, Recogniser},
    functions::Functions,
    kernel_table::KernelTable,
    memory::Allowance,
    slot::{Loaded, Slot},
};
use crate::{
    address_space::{AddressSpaces, Backing, Mapping, ModuleId, ProcessView},
    decode::{RuntimeFrames, UserRegs},
    frame::Frame,
    model::{LabelSet, Tgid},
    unwind::RuntimeCode,
};

/// A language runtime whose frames are read from outside its processes. `Image` is what it
/// reads of one of its files (once per module, shared by every process that maps it);
/// `Instance` what it keeps of one process running it.
pub(crate) trait Runtime: Send + 'static {
    type Image: Send + Sync + 'static;
    type Instance: Send + 'static;

    /// The summary's label for it ("python", "java").
    const LABEL: &'static str;
    /// What it is called in `profiler check` ("CPython", "HotSpot JVM").
    const NAME: &'static str;
    /// Whose frame records its kernel walker writes ([`RuntimeKind::None`]: it walks none).
    const KIND: RuntimeKind = RuntimeKind::None;
    /// How often a process whose runtime is still starting (or has no room in the kernel's
    /// table) is looked at again.
    const RECHECK_NS: u64;

    /// Whether a file with `mark` (a symbol it defines for dynamic linking, or a section) may be
    /// one of its images: what every file a process maps executable is checked for, whatever it
    /// is called.
    fn marks(mark: Mark<'_>) -> bool;
    /// What it needs of `file`, which its marks were found in: `None` when it is not one of its
    /// images, an error when it is one it does not read (what it is, for the summary). Runs on
    /// discovery's worker, once per file.
    fn recognise(file: &ImageFile<'_>) -> anyhow::Result<Option<Self::Image>>;
    /// Attaches to the process of `view`, which maps `image` (`module`) at `mapping`; its reads
    /// of the process's memory at sample time within `allowance`.
    fn attach(
        &mut self,
        view: &mut ProcessView<'_>,
        image: &Arc<Self::Image>,
        module: ModuleId,
        mapping: &Mapping,
        allowance: &Arc<Allowance>,
    ) -> Result<Self::Instance, Refusal>;

    /// What its kernel walker needs of the process (for a runtime whose [`Self::KIND`] walks).
    fn kernel_process(&self, _instance: &Self::Instance) -> Option<RuntimeProcess> {
        None
    }
    /// Ready to step the native frames it owns of a new stack, sampled at `time_ns` with the
    /// registers `regs`, of which its kernel walker read `sample`: `None` when it owns none.
    fn stepper<'a>(
        &'a mut self,
        _instance: &'a mut Self::Instance,
        _time_ns: u64,
        _regs: &UserRegs,
        _sample: RuntimeFrames<'_>,
    ) -> Option<&'a mut dyn RuntimeCode> {
        None
    }
    /// Pushes its frames for the native frame at `depth` of the stack last stepped, at `addr`;
    /// false when it has none there (the native frame stays).
    fn push_frames(
        &mut self,
        _instance: &mut Self::Instance,
        _depth: usize,
        _addr: u64,
        _functions: &mut Functions,
        _frames: &mut Vec<Frame>,
    ) -> bool {
        false
    }
    /// Whether the native frame at `depth` of the stack last stepped, at `addr`, is where its
    /// stacks start: a chain of frame pointers goes on from there into what is not a frame.
    fn ends_stack(&mut self, _instance: &mut Self::Instance, _depth: usize, _addr: u64) -> bool {
        false
    }
    /// Puts the frames its kernel walker read (`sample`) in place of native ones in `frames`,
    /// and the labels it read in `labels`.
    fn merge(
        &mut self,
        _instance: &mut Self::Instance,
        _sample: RuntimeFrames<'_>,
        _frames: &mut Vec<Frame>,
        _labels: &mut LabelSet,
        _functions: &mut Functions,
    ) {
    }
    /// A module the process's frames are recognised by, which must not be let go while it runs.
    fn pinned_module(&self, _instance: &Self::Instance) -> Option<ModuleId> {
        None
    }
    /// Once an epoch of the budget of what targets describe: its caches give room back if it
    /// was short.
    fn relieve(&mut self, instance: &mut Self::Instance);
    /// What `profiler check` says of a process it attached to.
    fn inspect(&self, instance: &Self::Instance) -> String;
    /// The process is gone, ran exec, or its runtime is given up on.
    fn detach(&mut self, _instance: Self::Instance) {}
    /// The summary's lines of its counters (`running`: the processes running it now); nothing
    /// when it met no process.
    fn describe(&self, running: &mut dyn Iterator<Item = &Self::Instance>) -> Vec<String>;
}

/// What `profiler check` finds of a runtime in a process.
pub struct Inspected {
    /// The runtime's name (`NAME`).
    pub runtime: &'static str,
    /// The image it was found by (the file a process maps).
    pub image: Option<PathBuf>,
    /// What it read, or why it does not read it.
    pub said: Result<String, String>,
}

/// Why a runtime does not attach to a process.
pub(crate) enum Refusal {
    /// Not ready yet (a runtime still starting): looked at again for a while.
    NotYet(anyhow::Error),
    /// Not for as long as the process runs this image: native frames only.
    Never(anyhow::Error),
}

/// Every runtime, and what they share.
pub struct Runtimes {
    slots: Vec<Box<dyn Slot>>,
    discovery: Discovery,
    /// The slot stepping the stack being walked, which alone has frames to push at its depths.
    stepping: Option<usize>,
    shared: Shared,
    /// The functions runtimes' frames name.
    functions: Functions,
}

/// What every runtime's life in processes shares.
pub(crate) struct Shared {
    /// What a sample's runtime frames may cost in reads of target memory.
    allowance: Arc<Allowance>,
    table: KernelTable,
    /// What the kernel should be told since it was last told.
    kernel_updates: Vec<(Tgid, Option<RuntimeProcess>)>,
    /// Until when a process is young and a runtime may be starting in it (CLOCK_MONOTONIC).
    young_until_ns: u64,
}

/// A runtime's recognition, for discovery's worker (see [`Recogniser`]).
struct RecogniserOf<R>(PhantomData<fn() -> R>);

impl<R: Runtime> Recogniser for RecogniserOf<R> {
    fn marks(&self, mark: Mark<'_>) -> bool {
        R::marks(mark)
    }

    fn recognise(&self, file: &ImageFile<'_>) -> anyhow::Result<Option<Arc<dyn Any + Send + Sync>>> {
        Ok(R::recognise(file)?.map(|image| Arc::new(image) as Arc<dyn Any + Send + Sync>))
    }
}

/// The runtimes' slots and their recognitions, in one order.
#[derive(Default)]
struct Registered {
    slots: Vec<Box<dyn Slot>>,
    recognisers: Vec<Box<dyn Recogniser>>,
}

impl Registered {
    fn add<R: Runtime>(mut self, runtime: R) -> Self {
        self.slots.push(Loaded::boxed(runtime));
        self.recognisers.push(Box::new(RecogniserOf::<R>(PhantomData)));
        self
    }
}

impl Runtimes {
    /// Every runtime, for a session that follows the whole system (`system_wide`: users share
    /// the kernel's table) or some processes.
    pub fn new(system_wide: bool) -> Self {
        let Registered { slots, recognisers } = Registered::default()
            // One line per runtime.
            .add(python::Python::default())
            .add(hotspot::HotSpot::default())
            .add(v8::V8::default())
            .add(go::Go::default())
            .add(ruby::Ruby::default())
            .add(php::Php::default())
            .add(perl::Perl::default());
        let shared = Shared {
            allowance: Arc::new(Allowance::default()),
            table: KernelTable::new(system_wide),
            kernel_updates: Vec::new(),
            young_until_ns: 0,
        };
        let discovery = Discovery::new(recognisers);
        Self { slots, discovery, stepping: None, shared, functions: Functions::default() }
    }

    /// A new sample of the process of `view`, at `time_ns`: its allowance starts; it is looked
    /// at if it is new, and a runtime still starting in it if it is time to.
    pub fn observe(&mut self, view: &mut ProcessView<'_>, time_ns: u64) {
        self.shared.allowance.begin(view.file_pages());
        let found = self.discovery.observe(view, time_ns, &mut self.shared.young_until_ns);
        self.take(view, found, time_ns);
        for slot in &mut self.slots {
            slot.observe(view, time_ns, &mut self.shared);
        }
        self.read_maps_if_stale(view);
    }

    /// Once a drain's task events are in, before its records: the answers discovery's worker
    /// gave, and the processes that mapped new files, looked at (`spaces`, at `now_ns`).
    pub fn discover(&mut self, spaces: &mut AddressSpaces, now_ns: u64) {
        for tgid in self.discovery.due(now_ns) {
            let Some(mut view) = spaces.view(tgid, now_ns) else {
                self.discovery.forget(tgid);
                continue;
            };
            self.shared.allowance.begin(view.file_pages());
            let found = self.discovery.look(&view, now_ns);
            self.take(&mut view, found, now_ns);
            self.read_maps_if_stale(&mut view);
        }
    }

    /// Hands the images found in the process of `view` to their runtimes.
    fn take(&mut self, view: &mut ProcessView<'_>, found: Vec<Found>, time_ns: u64) {
        for Found { slot, mapping, recognised } in found {
            let Some(slot) = self.slots.get_mut(slot) else { continue };
            if !slot.found(view, &mapping, &recognised, time_ns, &mut self.shared) {
                self.discovery.retry(view.tgid(), time_ns);
            }
        }
    }

    /// What runtimes read of the process of `view` since its allowance began may have met a
    /// page of a file it mapped since its maps were read (a JVM's class archive: task events
    /// report only executable mappings): its maps are read again then (within its user's time
    /// for reading maps), else as often as an address in no mapping has them read.
    pub fn read_maps_if_stale(&mut self, view: &mut ProcessView<'_>) {
        let Some(addr) = self.shared.allowance.unknown_file_page() else { return };
        if view.maps_stale() {
            view.read_maps();
        } else {
            view.mapping(addr);
        }
    }

    /// Process `tgid` (of `view`) is about to run a command, which will map `files` (its
    /// program and libraries), or maps them already: each recognised now, until `until`, so
    /// that its first look finds them known; it is looked at as soon as it maps them.
    pub fn expect(&mut self, view: &ProcessView<'_>, files: &[Mapping], now_ns: u64, until: Instant) {
        self.discovery.follow(view.tgid(), now_ns, &mut self.shared.young_until_ns);
        for file in files {
            if Instant::now() >= until {
                return;
            }
            self.discovery.expect(view, file);
        }
    }

    /// Process `pid` mapped a file executable (a task event).
    pub fn mapped(&mut self, pid: Tgid) {
        self.discovery.mapped(pid);
    }

    /// Process `pid` ran exec at `time_ns`: whatever it runs is looked at anew.
    pub fn exec(&mut self, pid: Tgid, time_ns: u64) {
        for slot in &mut self.slots {
            slot.forget(pid, &mut self.shared);
        }
        self.discovery.exec(pid, time_ns, &mut self.shared.young_until_ns);
    }

    /// Process `parent` forked `child`, which runs what its parent runs (a pid used again: what
    /// ran under it before is forgotten).
    pub fn forked(&mut self, parent: Tgid, child: Tgid) {
        self.forget(child);
        self.discovery.forked(parent, child);
    }

    /// Sampling starts at `now_ns`: every process is new to the session, and its runtimes are
    /// looked for as soon as its first samples come. Counted from here, not from when this was
    /// made: loading the kernel side in between takes longer than a process is young.
    pub fn sampling_starts(&mut self, now_ns: u64) {
        self.shared.young_until_ns = now_ns.saturating_add(discovery::YOUNG_NS);
    }

    /// Whether a process looked at is still young at `now_ns`, with a runtime not (yet) found
    /// in it: the sooner the next look, the fewer of its samples are native only.
    pub fn may_be_starting(&self, now_ns: u64) -> bool {
        now_ns < self.shared.young_until_ns
    }

    /// The runtime of `tgid` that steps native frames, ready for a new stack.
    pub fn stepper(
        &mut self,
        tgid: Tgid,
        time_ns: u64,
        regs: &UserRegs,
        sample: RuntimeFrames<'_>,
    ) -> Option<&mut dyn RuntimeCode> {
        self.stepping = None;
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if let Some(stepper) = slot.stepper(tgid, time_ns, regs, sample) {
                self.stepping = Some(index);
                return Some(stepper);
            }
        }
        None
    }

    /// Pushes the stepping runtime's frames for the native frame at `depth` of the stack last
    /// stepped, at `addr`; false when it has none there (or no runtime stepped it: another
    /// runtime of the process keeps what it stepped of an older stack).
    pub fn push_frames(&mut self, tgid: Tgid, depth: usize, addr: u64, frames: &mut Vec<Frame>) -> bool {
        let Some(slot) = self.stepping.and_then(|index| self.slots.get_mut(index)) else { return false };
        slot.push_frames(tgid, depth, addr, &mut self.functions, frames)
    }

    /// Whether the stepping runtime says the native frame at `depth` of the stack last stepped,
    /// at `addr`, is where its stacks start.
    pub fn ends_stack(&mut self, tgid: Tgid, depth: usize, addr: u64) -> bool {
        let Some(slot) = self.stepping.and_then(|index| self.slots.get_mut(index)) else { return false };
        slot.ends_stack(tgid, depth, addr)
    }

    /// Puts the frames the kernel read of a runtime (`sample`) in place of native ones, and the
    /// labels it read in `labels`.
    pub fn merge(
        &mut self,
        tgid: Tgid,
        sample: RuntimeFrames<'_>,
        frames: &mut Vec<Frame>,
        labels: &mut LabelSet,
    ) {
        if sample.kind == RuntimeKind::None {
            return;
        }
        if let Some(slot) = self.slots.iter_mut().find(|slot| slot.kind() == sample.kind) {
            slot.merge(tgid, sample, frames, labels, &mut self.functions);
        }
    }

    /// Forgets a process gone.
    pub fn forget(&mut self, tgid: Tgid) {
        for slot in &mut self.slots {
            slot.forget(tgid, &mut self.shared);
        }
        self.discovery.forget(tgid);
    }

    /// What the kernel should be told since the last call: processes whose runtime's frames it
    /// should walk, and those it should not any more.
    pub fn take_kernel_updates(&mut self) -> Vec<(Tgid, Option<RuntimeProcess>)> {
        std::mem::take(&mut self.shared.kernel_updates)
    }

    /// Whether the kernel is still to be told of a process whose runtime it should walk.
    pub fn runtime_found(&self) -> bool {
        self.shared.kernel_updates.iter().any(|(_, process)| process.is_some())
    }

    /// The kernel would not take what it was told of `tgid` (`why`): its runtime's frames are
    /// not read (for as long as it runs that runtime).
    pub fn refused_by_kernel(&mut self, tgid: Tgid, why: &anyhow::Error) {
        for slot in &mut self.slots {
            slot.refused_by_kernel(tgid, why, &mut self.shared);
        }
    }

    /// The modules that must stay: running runtimes' frames are recognised by them (their
    /// interpreters).
    pub fn pinned_modules(&self) -> FxHashSet<ModuleId> {
        let mut pinned = FxHashSet::default();
        for slot in &self.slots {
            slot.pinned(&mut pinned);
        }
        pinned
    }

    /// Once an epoch of the budget of what targets describe: functions nothing holds go, and
    /// runtimes' caches give room back if it was short.
    pub fn end_epoch(&mut self) {
        self.functions.prune();
        self.discovery.relieve();
        for slot in &mut self.slots {
            slot.relieve();
        }
    }

    /// What `profiler check` says of the runtimes of the process of `view`: each runtime found,
    /// by name, and what was read of it or why it is not read. Nothing is left attached.
    pub fn inspect(&mut self, view: &mut ProcessView<'_>) -> Vec<Inspected> {
        self.shared.allowance.begin(view.file_pages());
        let mut inspected: Vec<usize> = Vec::new();
        let mut said = Vec::new();
        for Found { slot, mapping, recognised } in self.discovery.examine_now(view) {
            if inspected.contains(&slot) {
                continue;
            }
            inspected.push(slot);
            if let Some(runtime) = self.slots.get_mut(slot) {
                let (runtime, said_of_it) = runtime.inspect(view, &mapping, &recognised, &mut self.shared);
                let image = match &mapping.backing {
                    Backing::File { path, .. } => Some(path.clone()),
                    _ => None,
                };
                said.push(Inspected { runtime, image, said: said_of_it });
            }
        }
        said
    }

    /// The functions runtimes' frames name.
    pub fn functions(&self) -> &Functions {
        &self.functions
    }

    /// The summary's rows: a label and lines for each runtime met, and the kernel table's.
    pub fn describe(&self) -> Vec<(&'static str, Vec<String>)> {
        let mut rows: Vec<_> = self.slots.iter().map(|slot| slot.describe()).collect();
        let mut shared = self.shared.table.describe();
        shared.extend(self.discovery.describe());
        rows.push(("runtimes", shared));
        rows.retain(|(_, lines)| !lines.is_empty());
        rows
    }
}

/// Processes whose runtime is not read that the summary names, per runtime.
const MAX_REFUSED_NAMED: usize = 16;
