//! Address to (module, file offset): the stage between decoding a sample and unwinding it.
//! [`ProcessView::resolve`] is the one lookup that pinning frames, the unwinder and the recorded
//! fixtures all use: an address of a process at a moment, to the module and file offset of the
//! mapping that held it.
use std::{
    fs::File,
    io,
    os::fd::AsFd as _,
    path::Path,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use rustc_hash::FxHashMap;

use super::{Backing, Mapping, Mappings, Module, ModuleId, Modules, Process};
use crate::{
    model::Tgid,
    untrusted::{
        mounts::{self, Answerer, Namespace},
        open::{self, MappedAt},
    },
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

/// A process's file mappings at one moment, and who answers for their files: which pages of its
/// memory are pages of a file the kernel answers for.
#[derive(Clone, Debug)]
pub struct FileMappings {
    tgid: Tgid,
    space: Arc<Mappings>,
    namespace: Option<Namespace>,
    /// Its user (see `Identity::user`).
    user: Option<u32>,
    /// Whether each mapping asked of in this sample is of a file of the kernel's file systems.
    answers: Arc<Mutex<FxHashMap<MappedAt, bool>>>,
    /// A page of a file found where no mapping is known (0: none yet), shared by the copies.
    unknown: Arc<AtomicU64>,
}

impl FileMappings {
    /// Whether `addr` of process `tgid` is in a mapping of a file the kernel answers for:
    /// `None` when no mapping known holds it (one the process made since its maps were read,
    /// not executable: task events report only those), which is noted, for
    /// [`Self::take_unknown`].
    pub fn kernels_file(&self, tgid: Tgid, addr: u64) -> Option<bool> {
        if tgid != self.tgid {
            return Some(false);
        }
        let Some(mapping) = self.space.find(addr) else {
            let _ = self.unknown.compare_exchange(0, addr, Ordering::Relaxed, Ordering::Relaxed);
            return None;
        };
        if !matches!(mapping.backing, Backing::File { .. }) {
            return Some(false);
        }
        let at = mapping.at();
        let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&kernels) = answers.get(&at) {
            return Some(kernels);
        }
        // Asked of the file mapped at that range now, once a sample: the one its pages fault in
        // from (an overlay's layer's), and not one the mappings known lag behind.
        let answerer = open::mapped_now(self.tgid, self.user, at).map_or(Some(Answerer::Daemon), |handle| {
            mounts::answerer(handle.as_fd(), self.namespace.as_ref())
        });
        // Not known yet: the read is refused this time, not remembered as unreadable.
        let kernels = answerer? == Answerer::Kernel;
        answers.insert(at, kernels);
        Some(kernels)
    }

    /// A page of a file found in no mapping known since the last call: the process's maps are
    /// worth reading again (see [`ProcessView::mapping`]).
    pub fn take_unknown(&self) -> Option<u64> {
        let addr = self.unknown.swap(0, Ordering::Relaxed);
        (addr != 0).then_some(addr)
    }
}

/// One process at one moment.
pub struct ProcessView<'a> {
    tgid: Tgid,
    time_ns: u64,
    process: &'a mut Process,
    modules: &'a mut Modules,
    /// The mapping the last [`Self::resolve`] found: a stack's frames sit in few modules, and
    /// a deep one's hundreds of lookups mostly hit it.
    last: Option<Resolution>,
}

/// A mapping found at the view's moment, and the module behind it.
#[derive(Clone, Copy)]
struct Resolution {
    start: u64,
    end: u64,
    /// The file offset of `start`.
    start_offset: u64,
    executable: bool,
    module: Option<ModuleId>,
}

impl Resolution {
    fn resolve(&self, addr: u64, want: Want) -> Resolved {
        if want == Want::Code && !self.executable {
            return Resolved::Unmapped;
        }
        match self.module {
            Some(module) => Resolved::Module { module, file_offset: self.start_offset + (addr - self.start) },
            None => Resolved::Anonymous,
        }
    }
}

impl<'a> ProcessView<'a> {
    pub(super) fn new(tgid: Tgid, time_ns: u64, process: &'a mut Process, modules: &'a mut Modules) -> Self {
        Self { tgid, time_ns, process, modules, last: None }
    }

    pub fn tgid(&self) -> Tgid {
        self.tgid
    }

    /// The process's command name, for as long as the view's borrow lasts.
    pub fn into_comm(self) -> &'a str {
        let process: &'a Process = self.process;
        process.comm()
    }

    /// The mapping that held `addr`.
    pub fn mapping(&mut self, addr: u64) -> Option<&Mapping> {
        // Reading the maps again may change the mapping remembered.
        self.last = None;
        self.process.mapping(addr, self.time_ns)
    }

    /// Where `addr` was: the module and file offset of the mapping that held it, if it is of
    /// the kind wanted.
    pub fn resolve(&mut self, addr: u64, want: Want) -> Resolved {
        if let Some(last) = self.last.filter(|last| (last.start..last.end).contains(&addr)) {
            return last.resolve(addr, want);
        }
        self.last = None;
        self.process.refresh_for(addr, self.time_ns);
        let process = &*self.process;
        let Some(mapping) = process.lookup(addr, self.time_ns) else { return Resolved::Unmapped };
        // Not interned: a module is opened for code, or for what a frame-pointer chain led to.
        if want == Want::Code && !mapping.executable {
            return Resolved::Unmapped;
        }
        let found = Resolution {
            start: mapping.start,
            end: mapping.end,
            start_offset: mapping.file_offset(mapping.start),
            executable: mapping.executable,
            module: self.modules.intern(self.tgid, process.identity(), mapping),
        };
        self.last = Some(found);
        found.resolve(addr, want)
    }

    /// How the process will list a file it is about to map (a command held before exec): `path`
    /// [opened](Self::open) and named as the kernel names a mapping (every link resolved), from
    /// address 0.
    pub fn file_to_map(&self, path: &Path) -> Option<Mapping> {
        // The opened file's path is as the profiler sees it: the process's only in its root.
        if !matches!(self.process.identity().root, open::Root::Own) {
            return None;
        }
        let file = self.open(path).ok()?;
        let name = std::fs::read_link(open::readable_path(&file)).ok()?;
        Some(Mapping::whole_file(&name, &file.metadata().ok()?))
    }

    /// Opens `path` (absolute, or from the profiler's directory) in the process's root, as the
    /// registry opens files by path: never on a file system the kernel does not answer for.
    pub fn open(&self, path: &Path) -> io::Result<File> {
        let identity = self.process.identity();
        identity.root.open(&std::path::absolute(path)?, &identity.asked())
    }

    /// What the process is, for reading what it controls: its root, its user.
    pub fn identity(&self) -> &super::Identity {
        self.process.identity()
    }

    pub fn module(&self, id: ModuleId) -> &Module {
        self.modules.get(id)
    }

    /// Which of the process's file pages its memory may be read in (see
    /// [`crate::runtimes::memory::ProcessMemory`]): its mappings now, and its mount namespace.
    pub fn file_pages(&self) -> FileMappings {
        let identity = self.process.identity();
        FileMappings {
            tgid: self.tgid,
            space: self.process.space(),
            namespace: identity.namespace,
            user: identity.user,
            answers: Arc::default(),
            unknown: Arc::default(),
        }
    }

    /// The process's mappings now.
    pub fn mappings(&self) -> impl Iterator<Item = &Mapping> {
        self.process.mappings()
    }

    /// Whether the process mapped something since its maps were read (see
    /// [`Process::maps_stale`]).
    pub fn maps_stale(&self) -> bool {
        self.process.maps_stale()
    }

    /// Reads the process's maps again.
    pub fn read_maps(&mut self) {
        self.last = None;
        self.process.read_maps();
    }

    /// Which table of mappings the process has now (see [`Mappings::id`]).
    pub fn table(&self) -> u64 {
        self.process.space().id()
    }

    /// Each file the process maps executable now, once (see [`Mappings::executable_files`]).
    pub fn executable_files(&self) -> Arc<[Mapping]> {
        self.process.space().executable_files()
    }

    /// The module behind one of the process's mappings (`None`: anonymous memory).
    pub fn intern(&mut self, mapping: &Mapping) -> Option<ModuleId> {
        self.modules.intern(self.tgid, self.process.identity(), mapping)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address_space::{AddressSpaces, Tracking};

    /// A command's program named through a link (`python3`, a virtualenv's `bin/python`), or from
    /// the working directory, is named as the kernel will list its mapping: what the registry
    /// and the runtimes' recognisers find it by.
    #[test]
    fn a_file_to_map_is_named_as_the_kernel_will_list_it() {
        let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
        spaces.track(Tgid::own());
        let view = spaces.view(Tgid::own(), 0).unwrap();
        let exe = std::env::current_exe().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("python3");
        std::os::unix::fs::symlink(&exe, &link).unwrap();
        let to_map = view.file_to_map(&link).unwrap();
        let mapped = view
            .mappings()
            .find(|mapping| matches!(&mapping.backing, Backing::File { path, .. } if *path == exe));
        let mapped = mapped.expect("this test's executable is mapped");
        assert_eq!(to_map.backing, mapped.backing);
        assert_eq!((to_map.dev, to_map.inode), (mapped.dev, mapped.inode));
        let relative = view.file_to_map(Path::new("Cargo.toml")).unwrap();
        let absolute = std::fs::canonicalize("Cargo.toml").unwrap();
        assert!(matches!(relative.backing, Backing::File { path, .. } if path == absolute));
    }

    #[test]
    fn resolves_own_code_to_its_file_offset() {
        let pid = Tgid::own();
        let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
        let mut view = spaces.observe(pid, pid.main_thread(), "test", 0);
        let here = resolves_own_code_to_its_file_offset as *const () as usize as u64;
        let Resolved::Module { module, file_offset } = view.resolve(here, Want::Code) else {
            panic!("own code is in a module")
        };
        let mapping = view.mapping(here).unwrap().clone();
        assert_eq!(file_offset, here - mapping.start + mapping.offset);
        // Found again in the mapping remembered, at its own offset.
        view.resolve(here, Want::Code);
        let next = view.resolve(here + 1, Want::Code);
        assert_eq!(next, Resolved::Module { module, file_offset: file_offset + 1 });
        assert!(view.module(module).file().is_some());
        assert_eq!(view.resolve(0x10, Want::Any), Resolved::Unmapped);
        // The stack is mapped but not code.
        let local = 0u64;
        let stack = std::ptr::addr_of!(local) as u64;
        assert_ne!(view.resolve(stack, Want::Any), Resolved::Unmapped);
        assert_eq!(view.resolve(stack, Want::Code), Resolved::Unmapped);
    }
}
