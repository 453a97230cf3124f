//! Where addresses were: each process's mappings over time ([`process`], from `/proc` and the
//! kernel's [`TaskEvent`]s), and the files behind them ([`module`]). The stage of the data flow
//! that turns an address into a module and file offset is [`resolve`]. The files themselves are
//! opened, copied and read through `untrusted`, as everything a target controls is.
mod module;
mod proc_maps;
mod process;
pub(crate) mod program;
mod resolve;
mod task_event;
mod vdso;

// What the stages' facade (`lib.rs`) names, and what only this crate does.
pub(crate) use self::{
    module::{Module, ModuleId, ModuleSet, Modules, open_mapped},
    proc_maps::{MAX_MAPS_BYTES, MAX_MAPS_READ_TIME, Mapping, TimedMapping, backing_named, cut_readings},
    process::{Identity, Process, Processes},
    resolve::FileMappings,
};
pub use self::{
    proc_maps::{Backing, Mappings},
    process::Tracking,
    resolve::{ProcessView, Resolved, Want},
    task_event::TaskEvent,
};
use crate::model::{Tgid, Tid};

/// The address spaces of the processes a recording follows, and the modules they map.
pub struct AddressSpaces {
    processes: Processes,
    modules: Modules,
}

impl AddressSpaces {
    /// Live processes, followed as `tracking` says.
    pub fn new(tracking: Tracking) -> Self {
        Self::with_modules(tracking, Modules::default())
    }

    /// Processes whose files `modules` opens its own way (recorded fixtures).
    pub fn with_modules(tracking: Tracking, modules: Modules) -> Self {
        Self { processes: Processes::new(tracking), modules }
    }

    /// Follows a process from its current state (the targets named; under `-a` each process is
    /// followed from its first sample).
    pub fn track(&mut self, tgid: Tgid) {
        self.processes.track(tgid);
    }

    /// Adds a process known from elsewhere (recorded fixtures).
    #[cfg(any(test, feature = "testing"))]
    pub fn insert(&mut self, process: Process) {
        self.processes.insert(process);
    }

    /// Applies what a process did to its address space; events must come before the samples
    /// taken after them.
    pub fn apply(&mut self, event: TaskEvent) {
        self.processes.apply(event);
    }

    /// Forgets processes and mappings no sample taken after `now_ns` can need. Returns the
    /// processes forgotten.
    pub fn prune(&mut self, now_ns: u64) -> Vec<Tgid> {
        let gone = self.processes.prune(now_ns);
        self.modules.forget(&gone);
        gone
    }

    /// The modules held that no process known maps any more (they all exited, or unmapped
    /// them long enough ago): nothing can need them.
    pub fn unmapped_modules(&self) -> Vec<ModuleId> {
        self.modules.unmapped(self.processes.all_mappings())
    }

    /// Marks as exited at `now_ns` the processes that are gone without the kernel saying so
    /// (their exit was lost), so that they are forgotten in time.
    pub fn notice_exits(&mut self, now_ns: u64) {
        self.processes.notice_exits(now_ns);
    }

    /// What process `tgid` is, while it is followed, with the jitdump it maps now.
    pub fn identity(&self, tgid: Tgid) -> Option<Identity> {
        let process = self.processes.get(tgid)?;
        let jitdump = process.jitdump().cloned();
        Some(Identity { jitdump, ..process.identity().clone() })
    }

    /// How many processes samples came from.
    pub fn sampled_processes(&self) -> u64 {
        self.processes.sampled()
    }

    /// Task events the kernel dropped (lookups then fall back to reading `/proc`).
    pub fn lost_events(&self) -> u64 {
        self.processes.lost_events()
    }

    pub fn modules(&self) -> &Modules {
        &self.modules
    }

    pub fn modules_mut(&mut self) -> &mut Modules {
        &mut self.modules
    }

    /// Process `tgid` as sampled from thread `tid` (named `thread_comm`) at `time_ns`: loaded
    /// from `/proc` on first sight.
    pub fn observe(&mut self, tgid: Tgid, tid: Tid, thread_comm: &str, time_ns: u64) -> ProcessView<'_> {
        let process = self.processes.observe(tgid, tid, thread_comm, time_ns);
        ProcessView::new(tgid, time_ns, process, &mut self.modules)
    }

    /// Process `tgid`, followed, as it is at `time_ns`: for what is read of it ahead of its
    /// samples (it is not counted as sampled).
    pub fn view(&mut self, tgid: Tgid, time_ns: u64) -> Option<ProcessView<'_>> {
        let process = self.processes.get_mut(tgid)?;
        Some(ProcessView::new(tgid, time_ns, process, &mut self.modules))
    }
}
