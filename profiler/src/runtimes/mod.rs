//! Language runtimes' own frames, in place of the native frames of their interpreters and JIT
//! code, read from outside the process: Python's, whose frames live outside the native stack,
//! read at sample time by the eBPF program and merged after unwinding; Java's (HotSpot), on the
//! native stack, stepped and named during unwinding.
//!
//! Each runtime is a folder behind one interface, [`Runtime`], in the manner of the OpenTelemetry
//! eBPF profiler's interpreters: it recognises an image of its own (once per module), attaches
//! to a process that maps one (or refuses, and says why), tells the kernel what its walker needs
//! (when it walks in the kernel), steps the native frames it owns, names frames at a depth or
//! merges the frames read at sample time, and reports its counters. [`Runtimes`] owns the
//! rest, the same for every runtime: the life of a runtime in each process (when to look again,
//! starting, refused, running), the kernel's table of processes, the function table its frames
//! name, each sample's allowance of reads of target memory, and the summary's lines. Adding a
//! runtime is a folder here (and one in `profiler-ebpf/src/runtimes/` when it walks in the
//! kernel) and one line in [`Runtimes::new`].
pub mod functions;
pub mod hotspot;
mod kernel_table;
pub mod memory;
pub mod python;
mod ranges;
mod slot;
pub mod v8;

use std::sync::Arc;

use profiler_common::runtimes::{RuntimeKind, RuntimeProcess};

use self::{
    functions::Functions,
    kernel_table::KernelTable,
    memory::Allowance,
    slot::{Loaded, Slot},
};
use crate::{
    address_space::{Mapping, ModuleId, ProcessView},
    decode::{RuntimeFrames, UserRegs},
    frame::Frame,
    model::Tgid,
    unwind::RuntimeCode,
};

/// A language runtime whose frames are read from outside its processes. `Image` is what it
/// reads of one of its files (once per module, shared by every process that maps it);
/// `Instance` what it keeps of one process running it.
pub trait Runtime: Send + 'static {
    type Image: Send + Sync + 'static;
    type Instance: Send + 'static;

    /// The summary's label for it ("python", "java").
    const LABEL: &'static str;
    /// What it is called in `profiler check` ("CPython", "HotSpot JVM").
    const NAME: &'static str;
    /// Whose frame records its kernel walker writes ([`RuntimeKind::None`]: it walks none).
    const KIND: RuntimeKind = RuntimeKind::None;
    /// How often a process that maps none of its images is looked at again.
    const RECHECK_NS: u64;

    /// Whether `mapping` may be one of its images (by what its file is called, and where): the
    /// only mappings of a process looked at.
    fn may_be_image(&self, mapping: &Mapping) -> bool;
    /// What it needs of `module` (the file of such a mapping): `None` when it is not one of its
    /// images, an error when it is one it does not read (what it is, for the summary).
    fn recognise(&mut self, view: &ProcessView<'_>, module: ModuleId) -> anyhow::Result<Option<Self::Image>>;
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
    /// registers `regs`: `None` when it owns none.
    fn stepper<'a>(
        &'a mut self,
        _instance: &'a mut Self::Instance,
        _time_ns: u64,
        _regs: &UserRegs,
    ) -> Option<&'a mut dyn RuntimeCode> {
        None
    }
    /// Pushes its frames for the native frame at `depth` of the stack last stepped; false when
    /// it has none there (the native frame stays).
    fn push_frames(
        &mut self,
        _instance: &mut Self::Instance,
        _depth: usize,
        _functions: &mut Functions,
        _frames: &mut Vec<Frame>,
    ) -> bool {
        false
    }
    /// Puts the frames its kernel walker read (`sample`) in place of native ones in `frames`.
    fn merge(
        &mut self,
        _instance: &mut Self::Instance,
        _sample: RuntimeFrames<'_>,
        _frames: &mut Vec<Frame>,
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

/// Why a runtime does not attach to a process.
pub enum Refusal {
    /// Not ready yet (a runtime still starting): looked at again for a while.
    NotYet(anyhow::Error),
    /// Not for as long as the process runs this image: native frames only.
    Never(anyhow::Error),
}

/// Every runtime, and what they share.
pub struct Runtimes {
    slots: Vec<Box<dyn Slot>>,
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

impl Runtimes {
    /// Every runtime, for a session that follows the whole system (`system_wide`: users share
    /// the kernel's table) or some processes.
    pub fn new(system_wide: bool) -> Self {
        let slots: Vec<Box<dyn Slot>> = vec![
            // One line per runtime.
            Loaded::boxed(python::Python::default()),
            Loaded::boxed(hotspot::HotSpot::default()),
            Loaded::boxed(v8::V8::default()),
        ];
        let shared = Shared {
            allowance: Arc::new(Allowance::default()),
            table: KernelTable::new(system_wide),
            kernel_updates: Vec::new(),
            young_until_ns: 0,
        };
        Self { slots, stepping: None, shared, functions: Functions::default() }
    }

    /// A new sample of the process of `view`, at `time_ns`: its allowance starts, and its
    /// runtimes are looked for if it is time to.
    pub fn observe(&mut self, view: &mut ProcessView<'_>, time_ns: u64) {
        self.shared.allowance.begin(view.file_pages());
        for slot in &mut self.slots {
            slot.observe(view, time_ns, &mut self.shared);
        }
    }

    /// A file the process of `view` is about to map (its program or a library, before it
    /// runs): recognised now by the runtime it may be an image of, so that the process's first
    /// look, at its first samples, has only to find where it is loaded.
    pub fn expect(&mut self, view: &mut ProcessView<'_>, file: &Mapping) {
        for slot in &mut self.slots {
            slot.expect(view, file);
        }
    }

    /// Sampling starts at `now_ns`: every process is new to the session, and its runtimes are
    /// looked for as soon as its first samples come. Counted from here, not from when this was
    /// made: loading the kernel side in between takes longer than a process is young.
    pub fn sampling_starts(&mut self, now_ns: u64) {
        self.shared.young_until_ns = now_ns.saturating_add(slot::YOUNG_NS);
    }

    /// Whether a process looked at is still young at `now_ns`, with a runtime not (yet) found
    /// in it: the sooner the next look, the fewer of its samples are native only.
    pub fn may_be_starting(&self, now_ns: u64) -> bool {
        now_ns < self.shared.young_until_ns
    }

    /// The runtime of `tgid` that steps native frames, ready for a new stack.
    pub fn stepper(&mut self, tgid: Tgid, time_ns: u64, regs: &UserRegs) -> Option<&mut dyn RuntimeCode> {
        self.stepping = None;
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if let Some(stepper) = slot.stepper(tgid, time_ns, regs) {
                self.stepping = Some(index);
                return Some(stepper);
            }
        }
        None
    }

    /// Pushes the stepping runtime's frames for the native frame at `depth` of the stack last
    /// stepped; false when it has none there (or no runtime stepped it: another runtime of the
    /// process keeps what it stepped of an older stack).
    pub fn push_frames(&mut self, tgid: Tgid, depth: usize, frames: &mut Vec<Frame>) -> bool {
        let Some(slot) = self.stepping.and_then(|index| self.slots.get_mut(index)) else { return false };
        slot.push_frames(tgid, depth, &mut self.functions, frames)
    }

    /// Puts the frames the kernel read of a runtime (`sample`) in place of native ones.
    pub fn merge(&mut self, tgid: Tgid, sample: RuntimeFrames<'_>, frames: &mut Vec<Frame>) {
        if sample.kind == RuntimeKind::None {
            return;
        }
        if let Some(slot) = self.slots.iter_mut().find(|slot| slot.kind() == sample.kind) {
            slot.merge(tgid, sample, frames, &mut self.functions);
        }
    }

    /// Forgets a process gone, or that ran exec.
    pub fn forget(&mut self, tgid: Tgid) {
        for slot in &mut self.slots {
            slot.forget(tgid, &mut self.shared);
        }
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

    /// Whether `module` must stay: a running runtime's frames are recognised by it.
    pub fn pins(&self, module: ModuleId) -> bool {
        self.slots.iter().any(|slot| slot.pins(module))
    }

    /// Forgets what was recognised of `modules` (evicted, none of them pinned).
    pub fn forget_modules(&mut self, modules: &[ModuleId]) {
        for slot in &mut self.slots {
            slot.forget_modules(modules);
        }
    }

    /// Once an epoch of the budget of what targets describe: functions nothing holds go, and
    /// runtimes' caches give room back if it was short.
    pub fn end_epoch(&mut self) {
        self.functions.prune();
        for slot in &mut self.slots {
            slot.relieve();
        }
    }

    /// What `profiler check` says of the runtimes of the process of `view`: each runtime found,
    /// by name, and what was read of it or why it is not read. Nothing is left attached.
    pub fn inspect(&mut self, view: &mut ProcessView<'_>) -> Vec<(&'static str, Result<String, String>)> {
        self.shared.allowance.begin(view.file_pages());
        let found: Vec<_> =
            self.slots.iter_mut().filter_map(|slot| slot.inspect(view, &mut self.shared)).collect();
        self.forget(view.tgid());
        found
    }

    /// The functions runtimes' frames name.
    pub fn functions(&self) -> &Functions {
        &self.functions
    }

    /// The summary's rows: a label and lines for each runtime met, and the kernel table's.
    pub fn describe(&self) -> Vec<(&'static str, Vec<String>)> {
        let mut rows: Vec<_> = self.slots.iter().map(|slot| slot.describe()).collect();
        rows.push(("runtimes", self.shared.table.describe()));
        rows.retain(|(_, lines)| !lines.is_empty());
        rows
    }
}

/// Processes whose runtime is not read that the summary names, per runtime.
const MAX_REFUSED_NAMED: usize = 16;
