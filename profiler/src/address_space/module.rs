//! Registry of the modules (executables, libraries, vdso) seen in samples.
//!
//! A module is identified by its content: the GNU build id where the file has one, else the file
//! itself (device, inode, modification time). Every process that maps the same library, even a
//! copy of it in another container's file system, shares one entry, so the unwinder and the
//! symbolizer parse it once. The file is opened while the target still maps it and the handle is
//! kept, so a module still symbolizes after the process exited, the library was dlclose'd or the
//! file was deleted.
use std::{
    fs::File,
    os::{fd::AsRawFd, unix::fs::MetadataExt},
    path::{Path, PathBuf},
};

use rustc_hash::FxHashMap;

use super::{Backing, Mapping, open, vdso};

/// Opens the file behind a mapping of a process (`tgid`, the mapping, the path it names); the
/// registry calls it once per file. Live processes are read through [`open::mapped_file`];
/// recorded fixtures bring their own.
pub type FileOpener = Box<dyn Fn(u32, &Mapping, &Path) -> Option<File>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleId(u32);

impl ModuleId {
    pub fn index(self) -> u32 {
        self.0
    }

    /// A module id by its index (tests; the registry hands out the real ones).
    #[cfg(test)]
    pub const fn from_index(index: u32) -> Self {
        Self(index)
    }
}

#[derive(Debug)]
pub struct Module {
    /// Path as the target saw it, or the region name (`[vdso]`).
    path: PathBuf,
    /// Open handle on the file, when it could be opened.
    file: Option<File>,
    build_id: Option<Vec<u8>>,
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
        self.build_id.as_deref()
    }

    /// The module's file, kept open, when it could be opened.
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// The module's file, mapped read-only through the handle kept open.
    pub fn image(&self) -> Option<memmap2::Mmap> {
        open::map(self.file.as_ref()?).ok()
    }

    /// A path through which this process can read the module's file, whatever happened to it in
    /// the target since.
    pub fn readable_path(&self) -> Option<PathBuf> {
        self.file.as_ref().map(|file| PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())))
    }
}

/// What a mapping names: the fast lookup, before any file is opened.
#[derive(Debug, PartialEq, Eq, Hash)]
enum MappedKey {
    File { dev: u64, inode: u64 },
    Pseudo(String),
}

/// What a module's content is known by.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Identity {
    BuildId(Vec<u8>),
    /// No build id: the file itself, as it was when opened (`mtime` is `None` when it could not be).
    File {
        dev: u64,
        inode: u64,
        mtime: Option<(i64, i64)>,
    },
    Pseudo(String),
}

pub struct Modules {
    open: FileOpener,
    by_mapping: FxHashMap<MappedKey, ModuleId>,
    by_identity: FxHashMap<Identity, ModuleId>,
    modules: Vec<Module>,
    /// Files found to be another copy of a known module: held open so that their (device, inode)
    /// cannot name a different file later in the recording.
    copies: Vec<File>,
}

impl Default for Modules {
    /// The modules of live processes, their files opened through `/proc`.
    fn default() -> Self {
        Self::with_opener(Box::new(open::mapped_file))
    }
}

impl Modules {
    /// A registry that opens files with `open`.
    pub fn with_opener(open: FileOpener) -> Self {
        Self {
            open,
            by_mapping: FxHashMap::default(),
            by_identity: FxHashMap::default(),
            modules: Vec::new(),
            copies: Vec::new(),
        }
    }

    /// The module behind `mapping` of process `tgid`; `None` for anonymous memory.
    pub fn intern(&mut self, tgid: u32, mapping: &Mapping) -> Option<ModuleId> {
        let (key, path) = match &mapping.backing {
            Backing::File { path, .. } => {
                (MappedKey::File { dev: mapping.dev, inode: mapping.inode }, path.as_path())
            }
            Backing::Pseudo(name) => (MappedKey::Pseudo(name.clone()), Path::new(name.as_str())),
            Backing::Anonymous => return None,
        };
        if let Some(&id) = self.by_mapping.get(&key) {
            return Some(id);
        }
        let file = match &key {
            MappedKey::File { .. } => (self.open)(tgid, mapping, path),
            MappedKey::Pseudo(name) if name == "[vdso]" => vdso::own_vdso(),
            MappedKey::Pseudo(_) => None,
        };
        let build_id = file.as_ref().and_then(read_build_id);
        let identity = match (&build_id, &key) {
            (Some(build_id), _) => Identity::BuildId(build_id.clone()),
            (None, &MappedKey::File { dev, inode }) => {
                Identity::File { dev, inode, mtime: file.as_ref().and_then(mtime) }
            }
            (None, MappedKey::Pseudo(name)) => Identity::Pseudo(name.clone()),
        };
        let id = match self.by_identity.get(&identity) {
            Some(&id) => {
                self.copies.extend(file);
                id
            }
            None => {
                let id = ModuleId(self.modules.len() as u32);
                self.modules.push(Module { path: path.to_owned(), file, build_id });
                self.by_identity.insert(identity, id);
                id
            }
        };
        self.by_mapping.insert(key, id);
        Some(id)
    }

    pub fn get(&self, id: ModuleId) -> &Module {
        &self.modules[id.0 as usize]
    }
}

/// The GNU build id note of an ELF file.
fn read_build_id(file: &File) -> Option<Vec<u8>> {
    use object::Object as _;
    let data = open::map(file).ok()?;
    let elf = object::File::parse(&*data).ok()?;
    Some(elf.build_id().ok()??.to_vec())
}

fn mtime(file: &File) -> Option<(i64, i64)> {
    let metadata = file.metadata().ok()?;
    Some((metadata.mtime(), metadata.mtime_nsec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address_space::Mappings;

    fn own_mapping() -> Mapping {
        let space = Mappings::read(std::process::id()).unwrap();
        space.find(own_mapping as *const () as usize as u64).unwrap().clone()
    }

    #[test]
    fn same_file_is_one_module() {
        let mut modules = Modules::default();
        let mapping = own_mapping();
        let a = modules.intern(std::process::id(), &mapping).unwrap();
        let mut moved = mapping.clone();
        moved.start += 0x1000_0000;
        moved.end += 0x1000_0000;
        let b = modules.intern(std::process::id(), &moved).unwrap();
        assert_eq!(a, b);
        let module = modules.get(a);
        let path = module.readable_path().expect("own executable opens");
        assert_eq!(std::fs::metadata(path).unwrap().ino(), mapping.inode);
    }

    /// A mapping of a whole file at `path`, as /proc/PID/maps would show it.
    fn file_mapping(path: &Path) -> Mapping {
        let metadata = std::fs::metadata(path).unwrap();
        Mapping {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            executable: true,
            dev: metadata.dev(),
            inode: metadata.ino(),
            backing: Backing::File { path: path.to_owned(), deleted: false },
        }
    }

    #[test]
    fn copies_of_one_build_id_are_one_module() {
        let dir = tempfile::tempdir().unwrap();
        let own = own_mapping();
        let Backing::File { path: exe, .. } = &own.backing else { panic!("{own:?}") };
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::copy(exe, &a).unwrap();
        std::fs::copy(exe, &b).unwrap();
        let mut modules = Modules::default();
        let id = modules.intern(std::process::id(), &file_mapping(&a)).unwrap();
        assert!(
            modules.get(id).build_id().is_some_and(|id| !id.is_empty()),
            "the test binary has a build id"
        );
        assert_eq!(modules.intern(std::process::id(), &file_mapping(&b)), Some(id));
        assert_eq!(modules.get(id).path(), a);
    }

    #[test]
    fn files_without_build_id_are_one_module_each() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"same bytes").unwrap();
        std::fs::write(&b, b"same bytes").unwrap();
        let mut modules = Modules::default();
        let first = modules.intern(std::process::id(), &file_mapping(&a)).unwrap();
        let second = modules.intern(std::process::id(), &file_mapping(&b)).unwrap();
        assert_ne!(first, second);
        assert_eq!(modules.get(first).build_id(), None);
        assert_eq!(modules.intern(std::process::id(), &file_mapping(&a)), Some(first));
    }

    #[test]
    fn vdso_is_readable_as_an_elf_file() {
        let mut modules = Modules::default();
        let space = Mappings::read(std::process::id()).unwrap();
        let vdso = space.mappings().find(|m| m.backing == Backing::Pseudo("[vdso]".into())).unwrap();
        let id = modules.intern(std::process::id(), vdso).unwrap();
        let image = std::fs::read(modules.get(id).readable_path().unwrap()).unwrap();
        assert_eq!(&image[..4], b"\x7fELF");
        assert_eq!(image.len() as u64, vdso.end - vdso.start);
    }

    #[test]
    fn pseudo_and_anonymous_mappings() {
        let mut modules = Modules::default();
        let heap = Mapping {
            start: 0x1000,
            end: 0x3000,
            offset: 0,
            executable: true,
            dev: 0,
            inode: 0,
            backing: Backing::Pseudo("[heap]".into()),
        };
        let id = modules.intern(1, &heap).unwrap();
        assert_eq!(modules.get(id).name(), "[heap]");
        assert!(modules.get(id).readable_path().is_none());
        let anon = Mapping { backing: Backing::Anonymous, ..heap };
        assert_eq!(modules.intern(1, &anon), None);
    }
}
