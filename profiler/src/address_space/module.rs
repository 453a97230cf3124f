//! Registry of the modules (executables, libraries, vdso) seen in samples.
//!
//! A module is what its file is. Files are one module when the profiler can show they are the
//! same: the same file (device and inode), files with one GNU build id that only root can
//! change (the same library in twenty containers' file systems is parsed once), or files of one
//! user with one build id and the same content. A build id is only what a file says of itself:
//! a user's copy of root's library, its names changed and its build id kept, never stands for
//! root's, nor one user's file for another's. Every other file is its own module (device,
//! inode, modification time). The unwinder and the symbolizer parse a module once. The file is opened while the target still maps it and the handle is
//! kept, so a module still symbolizes after the process exited, the library was dlclose'd or the
//! file was deleted.
use std::{
    collections::VecDeque,
    fs::File,
    io,
    os::fd::AsFd as _,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use rustc_hash::{FxHashMap, FxHashSet};

use super::{Backing, Identity, Mapping, vdso};
use crate::{
    model::Tgid,
    untrusted::{ElfFacts, Parts, StableFile, Writer, debug_file, mounts::Answerer, open, remote},
};

/// Opens the file behind a mapping of a process (`tgid`, what it is, the mapping, the path it
/// names); the registry calls it once per file. Live processes are read through
/// [`open_mapped`]; recorded fixtures bring their own. A file of JIT code is refused with
/// [`open::jit_memory_error`]: its mappings are then anonymous memory.
pub(super) type FileOpener = Box<dyn Fn(Tgid, &Identity, &Mapping, &Path) -> io::Result<StableFile>>;

/// Copies of known modules held open at most (see [`Modules`]).
const MAX_COPIES: usize = 1024;
/// Files of JIT code remembered at most (see [`Modules`]).
const MAX_JIT_FILES: usize = 4096;
/// Files let go remembered at most (see [`Modules::place`]); beyond, the memory starts over.
const MAX_LET_GO: usize = 1 << 16;
/// Contents of one user's build id compared with at most: a user making copies of one build
/// id, each different, makes a module of each, compared with the first few only.
const MAX_CONTENTS: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleId(u32);

impl ModuleId {
    pub fn index(self) -> u32 {
        self.0
    }

    /// A module id by its index (tests and fixtures; the registry hands out the real ones).
    #[cfg(any(test, feature = "testing"))]
    pub const fn from_index(index: u32) -> Self {
        Self(index)
    }
}

#[derive(Debug)]
pub struct Module {
    /// Path as the target saw it, or the region name (`[vdso]`).
    path: PathBuf,
    /// Open handle on the file (made [`open::stable`]), when it could be opened.
    file: Option<StableFile>,
    /// What the file says of itself, when it is an ELF file.
    facts: Option<ElfFacts>,
    /// Its separate debug file, when it needs one and one was found.
    debug: Option<DebugFile>,
}

#[derive(Debug)]
pub struct DebugFile {
    pub file: StableFile,
    pub facts: ElfFacts,
}

/// Where a module's names come from: a file, whether its DWARF may be read (it sends the
/// reader to no other file) and what its compressed DWARF sections inflate to, and whether
/// addresses are given to it as virtual addresses (a separate debug file: its file offsets are
/// not the module's) rather than file offsets.
pub struct SymbolFile<'a> {
    pub file: &'a File,
    pub dwarf: bool,
    pub inflated_dwarf: u64,
    pub virtual_addresses: bool,
}

impl Module {
    /// The file name, for display (`libc.so.6`, `[vdso]`).
    pub fn name(&self) -> &str {
        self.path.file_name().and_then(|name| name.to_str()).unwrap_or("[unknown]")
    }

    /// The path the target mapped the module from, or the region name (`[vdso]`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's GNU build id, if it has one.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.facts.as_ref()?.build_id.as_deref()
    }

    /// The module's file, kept open, when it could be opened.
    pub fn file(&self) -> Option<&File> {
        self.file.as_deref()
    }

    /// What the file says of itself, when it is an ELF file.
    pub fn facts(&self) -> Option<&ElfFacts> {
        self.facts.as_ref()
    }

    /// Its separate debug file, when it needs one and one was found.
    pub fn debug_file(&self) -> Option<&DebugFile> {
        self.debug.as_ref()
    }

    /// Whether its files are still held (not evicted, see [`Modules::evict`]).
    fn held(&self) -> bool {
        self.file.is_some() || self.debug.is_some()
    }

    /// What is left of it once evicted: its path and what its file says of itself.
    fn evicted(&self) -> Self {
        Self { path: self.path.clone(), file: None, facts: self.facts.clone(), debug: None }
    }

    /// The module's file, mapped read-only through the handle kept open.
    pub fn image(&self) -> Option<memmap2::Mmap> {
        open::map(self.file.as_deref()?).ok()
    }

    /// Where its names come from: its own DWARF, else its debug file's, else its own symbols.
    pub fn symbol_file(&self) -> Option<SymbolFile<'_>> {
        let file = self.file.as_deref()?;
        let own_dwarf = self.facts.as_ref().is_some_and(ElfFacts::dwarf_readable_alone);
        Some(match &self.debug {
            Some(debug) if !own_dwarf && debug.facts.dwarf_readable_alone() => SymbolFile {
                file: &debug.file,
                dwarf: true,
                inflated_dwarf: debug.facts.inflated_dwarf,
                virtual_addresses: true,
            },
            _ => SymbolFile {
                file,
                dwarf: own_dwarf,
                inflated_dwarf: self.facts.as_ref().map_or(0, |facts| facts.inflated_dwarf),
                virtual_addresses: false,
            },
        })
    }
}

/// What a mapping names: the fast lookup, before any file is opened.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum MappedKey {
    File { dev: u64, inode: u64 },
    Pseudo(String),
}

impl MappedKey {
    /// The key of a mapping, and the path it names; `None` for anonymous memory.
    fn of(mapping: &Mapping) -> Option<(Self, &Path)> {
        match &mapping.backing {
            Backing::File { path, .. } => {
                Some((Self::File { dev: mapping.dev, inode: mapping.inode }, path.as_path()))
            }
            Backing::Pseudo(name) => Some((Self::Pseudo(name.clone()), Path::new(name.as_str()))),
            Backing::Anonymous => None,
        }
    }
}

/// What a module's content is known by.
#[derive(Debug, PartialEq, Eq, Hash)]
enum ContentKey {
    /// A build id in a file only root, or only one user, can change: root's files are one
    /// module per build id, a user's only when their content is the same too.
    BuildId {
        build_id: Vec<u8>,
        writer: Writer,
    },
    /// No build id: the file itself, as it was when opened (`mtime` is `None` when it could not be).
    File {
        dev: u64,
        inode: u64,
        mtime: Option<(i64, i64)>,
    },
    Pseudo(String),
}

/// The modules seen in samples. A module is what its file is (see the module's documentation).
/// Mappings are looked up by (device, inode) first, so a file is opened and read once.
pub struct Modules {
    open: FileOpener,
    by_mapping: FxHashMap<MappedKey, ModuleId>,
    /// Files that could not be opened through a process (gone before it was seen, say), by
    /// process: that says nothing of the file, which is tried again through the next process
    /// that maps it. Forgotten with the process.
    unopened: FxHashMap<(Tgid, MappedKey), ModuleId>,
    /// Modules by content key: one for each, but for a user's build id, one per content.
    by_content: FxHashMap<ContentKey, Vec<ModuleId>>,
    /// Shared with naming, which may still be reading a module the registry let go.
    modules: Vec<Arc<Module>>,
    /// Files found to be another copy of a known module, held open so that their (device,
    /// inode) cannot name a different file while their key is remembered; the oldest are let
    /// go (and their key forgotten) beyond [`MAX_COPIES`]. Only files themselves are held: a
    /// copy made of one pins nothing, and its memory would be spent for nothing.
    copies: VecDeque<(MappedKey, StableFile)>,
    /// Files that could not be opened for want of file descriptors (not remembered: tried
    /// again when next seen), and whether one was since the least recently used modules were
    /// last let go.
    out_of_descriptors: u64,
    short_of_descriptors: bool,
    /// Files that hold JIT code, not an image ([`open::is_jit_memory`]): anonymous memory. At
    /// most [`MAX_JIT_FILES`] are remembered (then forgotten all at once, and looked at again).
    jit_files: FxHashSet<MappedKey>,
    /// Modules let go, by the file that made them: opened again, that file gets its id back.
    let_go: FxHashMap<MappedKey, ModuleId>,
    /// The period in which each module was last looked up (see [`Modules::idle`]), and the
    /// lookup (counted from the start) it was last looked up by.
    last_used: Vec<u64>,
    period: u64,
    last_lookup: Vec<u64>,
    lookups: u64,
}

impl Default for Modules {
    /// The modules of live processes, their files opened through `/proc` ([`open_mapped`]).
    fn default() -> Self {
        Self::with_opener(Box::new(open_mapped))
    }
}

/// Opens the file behind `mapping` (named `path`) of live process `tgid` (what it is:
/// `identity`), safe to map: the file a registry's module is made of, and what runtimes are
/// recognised in. Who answers for its file system is asked of the mapped file itself: those the
/// kernel does not answer for are copied off the pipeline (see `remote`), or not opened at all.
pub(crate) fn open_mapped(
    tgid: Tgid,
    identity: &Identity,
    mapping: &Mapping,
    path: &Path,
) -> io::Result<StableFile> {
    let file = match open::mapped_handle(tgid, identity.user, mapping.at()) {
        Ok(handle) => match identity.answerer(handle.as_fd()) {
            Some(Answerer::Kernel) => open::reopen(handle)?,
            Some(Answerer::Server) => return remote::open(handle, mapping.at()),
            Some(Answerer::Daemon) => return Err(remote::not_asked()),
            None => return Err(remote::not_known_yet()),
        },
        // Gone, or mapped over since: its file may still be reached by path (a path through a
        // file system never asked is refused, and counted as such a file is; so is FUSE's own
        // refusal of root, which does not ask its daemon when mounted without `allow_other`, and
        // which an NFS server's refusal cannot be told from).
        Err(_) => {
            open::mapped_path(&identity.root, path, mapping.at(), &identity.asked()).map_err(|err| {
                if err.kind() == io::ErrorKind::PermissionDenied { remote::not_asked() } else { err }
            })?
        }
    };
    if open::is_jit_memory(path, &file) {
        return Err(open::jit_memory_error());
    }
    open::stable(file, Parts::Module)
}

impl Modules {
    /// A registry that opens files with `open`.
    pub fn with_opener(open: FileOpener) -> Self {
        Self {
            open,
            by_mapping: FxHashMap::default(),
            unopened: FxHashMap::default(),
            by_content: FxHashMap::default(),
            modules: Vec::new(),
            copies: VecDeque::new(),
            out_of_descriptors: 0,
            short_of_descriptors: false,
            jit_files: FxHashSet::default(),
            let_go: FxHashMap::default(),
            last_used: Vec::new(),
            period: 0,
            last_lookup: Vec::new(),
            lookups: 0,
        }
    }

    /// The module behind `mapping` of process `tgid` (what it is: `identity`); `None` for
    /// anonymous memory.
    pub fn intern(&mut self, tgid: Tgid, identity: &Identity, mapping: &Mapping) -> Option<ModuleId> {
        let (key, path) = MappedKey::of(mapping)?;
        if self.jit_files.contains(&key) {
            return None;
        }
        self.lookups += 1;
        if let Some(&id) = self.by_mapping.get(&key).or_else(|| self.unopened.get(&(tgid, key.clone()))) {
            self.last_used[id.0 as usize] = self.period;
            self.last_lookup[id.0 as usize] = self.lookups;
            return Some(id);
        }
        let file = match &key {
            MappedKey::File { .. } => match (self.open)(tgid, identity, mapping, path) {
                Ok(file) => Some(file),
                Err(err) if rustix::io::Errno::from_io_error(&err) == Some(rustix::io::Errno::MFILE) => {
                    self.out_of_descriptors += 1;
                    self.short_of_descriptors = true;
                    return None;
                }
                // Being copied off the pipeline: asked again when next seen.
                Err(err) if remote::is_not_yet(&err) => return None,
                Err(err) if open::is_jit_memory_error(&err) => {
                    if self.jit_files.len() >= MAX_JIT_FILES {
                        self.jit_files.clear();
                    }
                    self.jit_files.insert(key);
                    return None;
                }
                Err(_) => None,
            },
            MappedKey::Pseudo(name) if name == "[vdso]" => vdso::own_vdso().map(StableFile::unchanged),
            MappedKey::Pseudo(_) => None,
        };
        let unopened = matches!(key, MappedKey::File { .. }) && file.is_none();
        let facts = file.as_ref().and_then(|file| ElfFacts::read(&open::map(file).ok()?));
        let build_id = facts.as_ref().and_then(|f| f.build_id.clone());
        let writer = file.as_ref().map(|file| file.writer());
        let content = match (build_id, writer, &key) {
            (Some(build_id), Some(writer @ (Writer::Root | Writer::User(_))), _) => {
                ContentKey::BuildId { build_id, writer }
            }
            (_, _, &MappedKey::File { dev, inode }) => {
                ContentKey::File { dev, inode, mtime: file.as_deref().and_then(mtime) }
            }
            (_, _, MappedKey::Pseudo(name)) => ContentKey::Pseudo(name.clone()),
        };
        let known = self.by_content.get(&content).and_then(|ids| {
            ids.iter().copied().find(|&id| match (&content, file.as_deref()) {
                (ContentKey::BuildId { writer: Writer::User(_), .. }, Some(file)) => {
                    self.modules[id.0 as usize].file().is_some_and(|known| same_content(known, file))
                }
                _ => true,
            })
        });
        let id = match known {
            Some(id) => {
                self.hold_copy(&key, file);
                id
            }
            None => {
                // Every directory on the way asked first: looking into a file system the kernel
                // does not answer for could wait for ever.
                let debug = match (&key, &facts, writer) {
                    (MappedKey::File { .. }, Some(facts), Some(writer))
                        if !facts.has_dwarf || !facts.has_cfi =>
                    {
                        debug_file::find(&identity.root, &identity.asked(), path, facts, writer).and_then(
                            |file| Some(DebugFile { facts: ElfFacts::read(&open::map(&file).ok()?)?, file }),
                        )
                    }
                    _ => None,
                };
                let module = Arc::new(Module { path: path.to_owned(), file, facts, debug });
                let id = self.place(&key, module);
                let ids = self.by_content.entry(content).or_default();
                if ids.len() < MAX_CONTENTS {
                    ids.push(id);
                }
                id
            }
        };
        if unopened {
            self.unopened.insert((tgid, key), id);
        } else {
            self.by_mapping.insert(key, id);
        }
        Some(id)
    }

    /// Starts a new period of use (an agent's window).
    pub fn next_period(&mut self) {
        self.period += 1;
    }

    /// The modules still held that were not looked up in the last `periods` periods.
    pub fn idle(&self, periods: u64) -> Vec<ModuleId> {
        let since = self.period.saturating_sub(periods);
        (0..self.modules.len())
            .filter(|&i| self.last_used[i] < since && self.modules[i].held())
            .map(|i| ModuleId(i as u32))
            .collect()
    }

    /// When a file could not be opened for want of descriptors since the last call: the
    /// least recently looked up quarter of the modules still held, to let go of, so that
    /// what is sampled now gets descriptors (whoever mapped the files holding them).
    pub fn short_of_descriptors(&mut self) -> Vec<ModuleId> {
        if !std::mem::take(&mut self.short_of_descriptors) {
            return Vec::new();
        }
        let mut held: Vec<(u64, ModuleId)> = (0..self.modules.len())
            .filter(|&i| self.modules[i].held())
            .map(|i| (self.last_lookup[i], ModuleId(i as u32)))
            .collect();
        held.sort_unstable();
        held.truncate(held.len().div_ceil(4));
        held.into_iter().map(|(_, id)| id).collect()
    }

    /// The modules still held that none of `mappings` (those of every process known, past ones
    /// included) leads to: no sample can need them any more.
    pub fn unmapped<'a>(&self, mappings: impl Iterator<Item = (Tgid, &'a Mapping)>) -> Vec<ModuleId> {
        let mut mapped = vec![false; self.modules.len()];
        for (tgid, mapping) in mappings {
            let Some((key, _)) = MappedKey::of(mapping) else { continue };
            let id = self.by_mapping.get(&key).or_else(|| self.unopened.get(&(tgid, key)));
            if let Some(id) = id {
                mapped[id.0 as usize] = true;
            }
        }
        (0..self.modules.len())
            .filter(|&i| !mapped[i] && self.modules[i].held())
            .map(|i| ModuleId(i as u32))
            .collect()
    }

    /// Lets go of modules: their files and what was read of them. Their ids stay, with their
    /// paths and what the files say of themselves (for the recording's table of mappings); a
    /// mapping of the same file later opens it again as a new module. The files close once no
    /// [`ModuleSet`] holds them (naming, until it has named what it was handed).
    pub fn evict(&mut self, ids: &[ModuleId]) {
        if ids.is_empty() {
            return;
        }
        for &id in ids {
            let module = &mut self.modules[id.0 as usize];
            *module = Arc::new(module.evicted());
        }
        let evicted: rustc_hash::FxHashSet<ModuleId> = ids.iter().copied().collect();
        if self.let_go.len() > MAX_LET_GO {
            self.let_go.clear();
        }
        let let_go =
            self.by_mapping.iter().filter(|(_, id)| evicted.contains(id)).map(|(key, &id)| (key.clone(), id));
        self.let_go.extend(let_go);
        self.by_mapping.retain(|_, id| !evicted.contains(id));
        self.by_content.retain(|_, ids| {
            ids.retain(|id| !evicted.contains(id));
            !ids.is_empty()
        });
        self.unopened.retain(|_, id| !evicted.contains(id));
        let by_mapping = &self.by_mapping;
        self.copies.retain(|(key, _)| by_mapping.contains_key(key));
    }

    /// The id of a module of the file `key` names: the one it had before it was let go, when
    /// what the file says of itself is the same (its build id), so that a file let go and
    /// opened again and again (as the descriptors kept run short) leaves no module behind each
    /// time; else a new one.
    fn place(&mut self, key: &MappedKey, module: Arc<Module>) -> ModuleId {
        let before =
            self.let_go.remove(key).filter(|&id| self.modules[id.0 as usize].build_id() == module.build_id());
        let id = match before {
            Some(id) => {
                self.modules[id.0 as usize] = module;
                id
            }
            None => {
                self.modules.push(module);
                self.last_used.push(0);
                self.last_lookup.push(0);
                ModuleId(self.modules.len() as u32 - 1)
            }
        };
        self.last_used[id.0 as usize] = self.period;
        self.last_lookup[id.0 as usize] = self.lookups;
        id
    }

    /// Forgets what could not be opened through processes `gone`.
    pub fn forget(&mut self, gone: &[Tgid]) {
        if !gone.is_empty() {
            self.unopened.retain(|(tgid, _), _| !gone.contains(tgid));
        }
    }

    fn hold_copy(&mut self, key: &MappedKey, file: Option<StableFile>) {
        let Some(file) = file.filter(|file| !file.is_copy()) else { return };
        if self.copies.len() == MAX_COPIES
            && let Some((oldest, _)) = self.copies.pop_front()
        {
            self.by_mapping.remove(&oldest);
        }
        self.copies.push_back((key.clone(), file));
    }

    pub fn get(&self, id: ModuleId) -> &Module {
        &self.modules[id.0 as usize]
    }

    /// The modules `ids`, shared: they stay readable whatever the registry does meanwhile.
    pub fn share(&self, ids: impl IntoIterator<Item = ModuleId>) -> ModuleSet {
        ModuleSet(ids.into_iter().map(|id| (id, self.modules[id.0 as usize].clone())).collect())
    }

    /// Files that could not be opened for want of file descriptors.
    pub fn out_of_descriptors(&self) -> u64 {
        self.out_of_descriptors
    }
}

/// Some modules, shared with their registry ([`Modules::share`]), to be read elsewhere (naming
/// runs on its own thread).
#[derive(Debug, Default)]
pub struct ModuleSet(FxHashMap<ModuleId, Arc<Module>>);

impl ModuleSet {
    pub fn get(&self, id: ModuleId) -> Option<&Module> {
        self.0.get(&id).map(|module| &**module)
    }

    pub fn iter(&self) -> impl Iterator<Item = (ModuleId, &Module)> {
        self.0.iter().map(|(&id, module)| (id, &**module))
    }
}

/// Whether two files (copies made the same way, of what the stages read) hold the same bytes.
fn same_content(a: &File, b: &File) -> bool {
    match (open::map(a), open::map(b)) {
        (Ok(a), Ok(b)) => a[..] == b[..],
        _ => false,
    }
}

fn mtime(file: &File) -> Option<(i64, i64)> {
    let metadata = file.metadata().ok()?;
    Some((metadata.mtime(), metadata.mtime_nsec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{address_space::Mappings, untrusted::open::readable_path};

    fn own_mapping() -> Mapping {
        let space = Mappings::read(Tgid::own()).unwrap();
        space.find(own_mapping as *const () as usize as u64).unwrap().clone()
    }

    #[test]
    fn same_file_is_one_module() {
        let mut modules = Modules::default();
        let mapping = own_mapping();
        let a = modules.intern(Tgid::own(), &Identity::own(), &mapping).unwrap();
        let mut moved = mapping.clone();
        moved.start += 0x1000_0000;
        moved.end += 0x1000_0000;
        let b = modules.intern(Tgid::own(), &Identity::own(), &moved).unwrap();
        assert_eq!(a, b);
        let module = modules.get(a);
        let path = readable_path(module.file().expect("own executable opens"));
        assert_eq!(std::fs::metadata(path).unwrap().ino(), mapping.inode);
    }

    #[test]
    fn modules_idle_for_a_while_are_let_go() {
        let mut modules = Modules::default();
        let mapping = own_mapping();
        let id = modules.intern(Tgid::own(), &Identity::own(), &mapping).unwrap();
        for _ in 0..4 {
            modules.next_period();
        }
        assert!(modules.idle(4).is_empty(), "used four periods ago");
        assert_eq!(modules.intern(Tgid::own(), &Identity::own(), &mapping), Some(id));
        for _ in 0..5 {
            modules.next_period();
        }
        assert_eq!(modules.idle(4), [id]);
        modules.evict(&[id]);
        assert!(modules.get(id).file().is_none() && modules.get(id).facts().is_some());
        assert!(modules.idle(4).is_empty(), "nothing left to let go");
        let again = modules.intern(Tgid::own(), &Identity::own(), &mapping).unwrap();
        assert_eq!(again, id, "read anew, under its id: no module is left behind for it");
        assert!(modules.get(again).file().is_some());
    }

    #[test]
    fn modules_no_process_maps_are_found() {
        let mut modules = Modules::default();
        let mapping = own_mapping();
        let id = modules.intern(Tgid::own(), &Identity::own(), &mapping).unwrap();
        assert!(modules.unmapped([(Tgid::own(), &mapping)].into_iter()).is_empty());
        assert_eq!(modules.unmapped(std::iter::empty()), [id]);
        modules.evict(&[id]);
        assert!(modules.unmapped(std::iter::empty()).is_empty(), "let go already");
    }

    /// A mapping of a whole file at `path`, as /proc/PID/maps would show it.
    fn file_mapping(path: &Path) -> Mapping {
        Mapping::of_file(path, 0x1000, 0x2000)
    }

    #[test]
    fn copies_of_one_build_id_are_one_module() {
        // As the profiler runs: as root, which alone opens a process's files through
        // /proc/PID/map_files (and reads what they are).
        if !crate::testing::e2e_enabled() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let own = own_mapping();
        let Backing::File { path: exe, .. } = &own.backing else { panic!("{own:?}") };
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::copy(exe, &a).unwrap();
        std::fs::copy(exe, &b).unwrap();
        let mut modules = Modules::default();
        let id = modules.intern(Tgid::own(), &Identity::own(), &file_mapping(&a)).unwrap();
        assert!(
            modules.get(id).build_id().is_some_and(|id| !id.is_empty()),
            "the test binary has a build id"
        );
        assert_eq!(modules.intern(Tgid::own(), &Identity::own(), &file_mapping(&b)), Some(id));
        assert_eq!(modules.get(id).path(), a);
    }

    /// A build id is what a file says of itself: files of one build id are one module when only
    /// root can change them, or when they are one user's with the same bytes; a user's file
    /// with other bytes, or another user's, is a module of its own.
    #[test]
    fn a_build_id_alone_does_not_make_files_one_module() {
        let dir = tempfile::tempdir().unwrap();
        let own = own_mapping();
        let Backing::File { path: exe, .. } = &own.backing else { panic!("{own:?}") };
        let image = std::fs::read(exe).unwrap();
        let mut renamed = image.clone();
        let at = renamed.len() - 100;
        renamed[at] ^= 0xff;
        let written = [
            ("root", &image, Writer::Root),
            ("root-changed", &renamed, Writer::Root),
            ("user", &image, Writer::User(7)),
            ("user-same", &image, Writer::User(7)),
            ("user-changed", &renamed, Writer::User(7)),
            ("other-user", &image, Writer::User(8)),
            ("anyone", &image, Writer::Anyone),
        ];
        let writers: FxHashMap<PathBuf, Writer> = written
            .iter()
            .map(|&(name, bytes, writer)| {
                std::fs::write(dir.path().join(name), bytes).unwrap();
                (dir.path().join(name), writer)
            })
            .collect();
        let mut modules = Modules::with_opener(Box::new(move |_, _, _, path| {
            Ok(StableFile::unchanged(File::open(path)?).written_by(writers[path]))
        }));
        let mut id = |name: &str| {
            modules.intern(Tgid::own(), &Identity::own(), &file_mapping(&dir.path().join(name))).unwrap()
        };
        let root = id("root");
        assert_eq!(id("root-changed"), root, "root's files of one build id: one module");
        let user = id("user");
        assert_ne!(user, root, "a user's file never stands for root's");
        assert_eq!(id("user-same"), user, "the same user's, the same bytes");
        assert!(![root, user].contains(&id("user-changed")), "other bytes");
        assert!(![root, user].contains(&id("other-user")), "another user's");
        assert!(![root, user].contains(&id("anyone")), "anyone's");
    }

    #[test]
    fn files_without_build_id_are_one_module_each() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"same bytes").unwrap();
        std::fs::write(&b, b"same bytes").unwrap();
        let mut modules = Modules::default();
        let first = modules.intern(Tgid::own(), &Identity::own(), &file_mapping(&a)).unwrap();
        let second = modules.intern(Tgid::own(), &Identity::own(), &file_mapping(&b)).unwrap();
        assert_ne!(first, second);
        assert_eq!(modules.get(first).build_id(), None);
        assert_eq!(modules.intern(Tgid::own(), &Identity::own(), &file_mapping(&a)), Some(first));
    }

    #[test]
    fn a_file_unopened_through_one_process_is_opened_through_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("library");
        std::fs::write(&path, b"bytes").unwrap();
        let (gone, alive) = (Tgid(1), Tgid(2));
        let tries = std::rc::Rc::new(std::cell::Cell::new(0));
        let counted = tries.clone();
        let mut modules = Modules::with_opener(Box::new(move |tgid, _, _, path| {
            counted.set(counted.get() + 1);
            if tgid == gone {
                Err(io::Error::from_raw_os_error(libc::ENOENT))
            } else {
                File::open(path).map(StableFile::unchanged)
            }
        }));
        let mapping = file_mapping(&path);
        let unopened = modules.intern(gone, &Identity::own(), &mapping).unwrap();
        assert!(modules.get(unopened).file().is_none());
        assert_eq!(modules.intern(gone, &Identity::own(), &mapping), Some(unopened));
        assert_eq!(tries.get(), 1, "not tried again through the same process");
        modules.forget(&[gone]);
        modules.intern(gone, &Identity::own(), &mapping);
        assert_eq!(tries.get(), 2, "tried again once the process is forgotten");
        let opened = modules.intern(alive, &Identity::own(), &mapping).unwrap();
        assert!(modules.get(opened).file().is_some(), "opened through another process");
        assert_eq!(
            modules.intern(gone, &Identity::own(), &mapping),
            Some(opened),
            "then known to every process"
        );
    }

    /// Code a JIT maps from a memfd is anonymous memory; an ELF image in a memfd is a module.
    #[test]
    fn memfds_of_jit_code_are_anonymous_memory() {
        // As the profiler runs: as root, which alone opens a process's files through
        // /proc/PID/map_files (and reads what they are).
        if !crate::testing::e2e_enabled() {
            return;
        }
        let image = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let mut modules = Modules::default();
        for (name, bytes, module) in
            [("doublemapper", &b"\x48\xc3 jit code"[..], false), ("an_image", &image[..], true)]
        {
            let memfd = File::from(rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC).unwrap());
            std::os::unix::fs::FileExt::write_all_at(&memfd, bytes, 0).unwrap();
            // SAFETY: a private read-only mapping of our own memfd, unmapped when dropped.
            let map = unsafe { memmap2::Mmap::map(&memfd) }.unwrap();
            let start = map.as_ptr() as u64;
            let mapping = Mappings::read(Tgid::own()).unwrap().find(start).unwrap().clone();
            assert_eq!(
                mapping.backing,
                Backing::File { path: format!("/memfd:{name}").into(), deleted: true }
            );
            let interned = modules.intern(Tgid::own(), &Identity::own(), &mapping);
            assert_eq!(interned.is_some(), module, "{name}");
            assert_eq!(
                modules.intern(Tgid::own(), &Identity::own(), &mapping).is_some(),
                module,
                "{name}, again"
            );
        }
    }

    #[test]
    fn vdso_is_readable_as_an_elf_file() {
        let mut modules = Modules::default();
        let space = Mappings::read(Tgid::own()).unwrap();
        let vdso = space.mappings().find(|m| m.backing == Backing::Pseudo("[vdso]".into())).unwrap();
        let id = modules.intern(Tgid::own(), &Identity::own(), vdso).unwrap();
        let image = std::fs::read(readable_path(modules.get(id).file().unwrap())).unwrap();
        assert_eq!(&image[..4], b"\x7fELF");
        assert_eq!(image.len() as u64, vdso.end - vdso.start);
    }

    #[test]
    fn pseudo_and_anonymous_mappings() {
        let mut modules = Modules::default();
        let heap = Mapping::pseudo("[heap]", 0x1000, 0x3000);
        let id = modules.intern(Tgid(1), &Identity::own(), &heap).unwrap();
        assert_eq!(modules.get(id).name(), "[heap]");
        assert!(modules.get(id).file().is_none());
        let anon = Mapping { backing: Backing::Anonymous, ..heap };
        assert_eq!(modules.intern(Tgid(1), &Identity::own(), &anon), None);
    }
}
