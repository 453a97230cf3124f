//! Where addresses were: each process's mappings over time ([`process`], from `/proc` and the
//! kernel's [`TaskEvent`]s), and the files behind them ([`module`]). [`ProcessView::resolve`]
//! turns an address of a process at a moment into a module and file offset: the one lookup that
//! pinning frames, the unwinder and the recorded fixtures all use.
mod debug_file;
mod elf;
mod module;
pub mod open;
mod proc_maps;
mod process;
mod task_event;
mod vdso;

pub use self::{
    elf::{ElfFacts, MAX_INFLATED_SECTION},
    module::{Module, ModuleId, Modules, readable_path},
    proc_maps::{Backing, Mapping, Mappings, TimedMapping, backing_named},
    process::Identity,
    process::{Process, Processes, Tracking, read_bounded, running},
    task_event::TaskEvent,
};

/// What a lookup accepts as found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Any mapping: a frame-pointer chain may hold any address; a mapped one still names a file.
    Any,
    /// Executable mappings only: an unwinder's return addresses must be code.
    Code,
}

/// Where an address was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// In a module, at this offset of its file.
    Module { module: ModuleId, file_offset: u64 },
    /// In anonymous memory (JIT code).
    Anonymous,
    /// In no mapping that was wanted.
    Unmapped,
}

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

    /// Follows a process from its current state (targets, and every process under `-a`).
    pub fn track(&mut self, tgid: u32) {
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
    pub fn prune(&mut self, now_ns: u64) -> Vec<u32> {
        let gone = self.processes.prune(now_ns);
        self.modules.forget(&gone);
        gone
    }

    /// What process `tgid` is, while it is followed.
    pub fn identity(&self, tgid: u32) -> Option<&Identity> {
        self.processes.get(tgid).map(Process::identity)
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

    /// Process `tgid` as sampled from thread `tid` (named `thread_comm`) at `time_ns`: loaded
    /// from `/proc` on first sight.
    pub fn observe(&mut self, tgid: u32, tid: u32, thread_comm: &str, time_ns: u64) -> ProcessView<'_> {
        let process = self.processes.observe(tgid, tid, thread_comm, time_ns);
        ProcessView { tgid, time_ns, process, modules: &mut self.modules }
    }
}

/// One process at one moment.
pub struct ProcessView<'a> {
    tgid: u32,
    time_ns: u64,
    process: &'a mut Process,
    modules: &'a mut Modules,
}

impl<'a> ProcessView<'a> {
    pub fn tgid(&self) -> u32 {
        self.tgid
    }

    /// The process's command name, for as long as the view's borrow lasts.
    pub fn into_comm(self) -> &'a str {
        let process: &'a Process = self.process;
        process.comm()
    }

    /// The mapping that held `addr`.
    pub fn mapping(&mut self, addr: u64) -> Option<&Mapping> {
        self.process.mapping(addr, self.time_ns)
    }

    /// Where `addr` was: the module and file offset of the mapping that held it, if it is of
    /// the kind wanted.
    pub fn resolve(&mut self, addr: u64, want: Want) -> Resolved {
        self.process.refresh_for(addr, self.time_ns);
        let process = &*self.process;
        let Some(mapping) = process.lookup(addr, self.time_ns) else { return Resolved::Unmapped };
        if want == Want::Code && !mapping.executable {
            return Resolved::Unmapped;
        }
        match self.modules.intern(self.tgid, &process.identity().root, mapping) {
            Some(module) => Resolved::Module { module, file_offset: mapping.file_offset(addr) },
            None => Resolved::Anonymous,
        }
    }

    pub fn module(&self, id: ModuleId) -> &Module {
        self.modules.get(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_own_code_to_its_file_offset() {
        let pid = std::process::id();
        let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
        let mut view = spaces.observe(pid, pid, "test", 0);
        let here = resolves_own_code_to_its_file_offset as *const () as usize as u64;
        let Resolved::Module { module, file_offset } = view.resolve(here, Want::Code) else {
            panic!("own code is in a module")
        };
        let mapping = view.mapping(here).unwrap().clone();
        assert_eq!(file_offset, here - mapping.start + mapping.offset);
        assert!(view.module(module).file().is_some());
        assert_eq!(view.resolve(0x10, Want::Any), Resolved::Unmapped);
        // The stack is mapped but not code.
        let local = 0u64;
        let stack = std::ptr::addr_of!(local) as u64;
        assert_ne!(view.resolve(stack, Want::Any), Resolved::Unmapped);
        assert_eq!(view.resolve(stack, Want::Code), Resolved::Unmapped);
    }
}
