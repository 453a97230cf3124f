//! Registry of the modules (executables, libraries, vdso) seen in samples.
//!
//! A module is identified by its file (device, inode), so every process that maps the same
//! library shares one entry and the symbolizer parses it once. The file is opened while the
//! target still maps it and the handle is kept, so a module still symbolizes after the process
//! exited, the library was dlclose'd or the file was deleted.
use std::{
    fs::File,
    os::{fd::AsRawFd, unix::fs::MetadataExt},
    path::{Path, PathBuf},
};

use rustc_hash::FxHashMap;

use crate::maps::{Backing, Mapping};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleId(u32);

impl ModuleId {
    pub fn index(self) -> u32 {
        self.0
    }

    /// A module id by its index (fixtures and benchmarks; the registry hands out the real ones).
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
    pub fn build_id(&self) -> Option<Vec<u8>> {
        use object::Object as _;
        let file = File::open(self.readable_path()?).ok()?;
        // SAFETY: read-only private mapping of a file we hold open.
        let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let elf = object::File::parse(&*data).ok()?;
        Some(elf.build_id().ok()??.to_vec())
    }

    /// A path through which this process can read the module's file, whatever happened to it in
    /// the target since.
    pub fn readable_path(&self) -> Option<PathBuf> {
        self.file.as_ref().map(|file| PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
enum ModuleKey {
    File { dev: u64, inode: u64 },
    Pseudo(String),
}

#[derive(Debug, Default)]
pub struct Modules {
    ids: FxHashMap<ModuleKey, ModuleId>,
    modules: Vec<Module>,
}

impl Modules {
    /// The module behind `mapping` of process `tgid`; `None` for anonymous memory.
    pub fn intern(&mut self, tgid: u32, mapping: &Mapping) -> Option<ModuleId> {
        let key = match &mapping.backing {
            Backing::File { .. } => ModuleKey::File { dev: mapping.dev, inode: mapping.inode },
            Backing::Pseudo(name) => ModuleKey::Pseudo(name.clone()),
            Backing::Anonymous => return None,
        };
        if let Some(&id) = self.ids.get(&key) {
            return Some(id);
        }
        let module = match &mapping.backing {
            Backing::File { path, .. } => {
                Module { path: path.clone(), file: open_mapped_file(tgid, mapping, path) }
            }
            Backing::Pseudo(name) if name == "[vdso]" => Module { path: name.into(), file: own_vdso() },
            Backing::Pseudo(name) => Module { path: name.into(), file: None },
            Backing::Anonymous => unreachable!("returned above"),
        };
        let id = ModuleId(self.modules.len() as u32);
        self.modules.push(module);
        self.ids.insert(key, id);
        Some(id)
    }

    pub fn get(&self, id: ModuleId) -> &Module {
        &self.modules[id.0 as usize]
    }
}

/// Opens the file behind a mapping as the target sees it: `map_files` names the mapped inode
/// itself (deleted or replaced files included); `/proc/PID/root` resolves the path in the target's
/// mount namespace (containers); the path itself serves once the process is gone.
fn open_mapped_file(tgid: u32, mapping: &Mapping, path: &Path) -> Option<File> {
    let map_file = format!("/proc/{tgid}/map_files/{:x}-{:x}", mapping.start, mapping.end);
    if let Ok(file) = File::open(map_file) {
        return Some(file);
    }
    // A process already gone (short-lived ones often are by the time their records are read)
    // still left its files: the same path here names the same inode when we share its mounts.
    let rooted = Path::new(&format!("/proc/{tgid}/root")).join(path.strip_prefix("/").unwrap_or(path));
    [rooted.as_path(), path].into_iter().find_map(|candidate| {
        let file = File::open(candidate).ok()?;
        // A file replaced since it was mapped would give wrong symbols.
        (file.metadata().ok()?.ino() == mapping.inode).then_some(file)
    })
}

/// The vDSO image, copied from this process into an in-memory file. The kernel maps the same
/// image into every 64-bit process, so ours stands for the target's: symbols and CFI included.
fn own_vdso() -> Option<File> {
    // SAFETY: getauxval has no preconditions.
    let start = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    let space = crate::maps::AddressSpace::read(std::process::id()).ok()?;
    let mapping = space.find(start).filter(|m| m.backing == Backing::Pseudo("[vdso]".into()))?;
    // SAFETY: the range is our own vDSO mapping, readable for the life of the process.
    let image = unsafe { std::slice::from_raw_parts(start as *const u8, (mapping.end - start) as usize) };
    // SAFETY: memfd_create with a NUL-terminated name; the descriptor is checked and owned.
    let fd = unsafe { libc::memfd_create(c"vdso".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let mut file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    std::io::Write::write_all(&mut file, image).ok()?;
    Some(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::AddressSpace;

    fn own_mapping() -> Mapping {
        let space = AddressSpace::read(std::process::id()).unwrap();
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

    #[test]
    fn vdso_is_readable_as_an_elf_file() {
        let mut modules = Modules::default();
        let space = AddressSpace::read(std::process::id()).unwrap();
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
