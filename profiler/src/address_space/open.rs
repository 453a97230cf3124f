//! The one way to open what a target controls: the files it maps, their debug files, its perf
//! map. A target may be hostile, in a container, or both, and the profiler runs as root, so:
//!
//! - paths resolve inside the target's own root (`openat2` with `RESOLVE_IN_ROOT` from a
//!   descriptor of `/proc/PID/root`): an absolute symlink or `..` cannot lead out of a container
//!   or a chroot, and magic links (`/proc/*/fd/*`, `/proc/*/root`) are refused;
//! - a file is first opened with `O_PATH`, which opens nothing, and reopened for reading only
//!   when it is a regular file: a FIFO, a socket or a device is never opened (it could block,
//!   or have effects), and reads never block (`O_NONBLOCK`);
//! - a file the target could rewrite (not owned by root, or writable by group or others) is
//!   copied into a sealed memory file before anything maps it: truncating a mapped file would
//!   kill the profiler with SIGBUS, which no panic handler contains;
//! - sizes are bounded.
use std::{
    fs::File,
    io,
    os::fd::{AsFd, OwnedFd},
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context as _, Result};
use rustix::fs::{
    AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags, Stat, StatxFlags, fstat, openat2, statx,
};

use super::{
    Mapping,
    copy::{self, Parts, StableFile, Writer},
    descriptors::{self, Slot},
};
use crate::model::Tgid;

/// Largest file copied into memory (a target-writable binary or debug file): beyond it the file
/// is left unread.
pub const MAX_COPY_BYTES: u64 = 1 << 30;

/// Where a process's paths resolve.
#[derive(Clone, Debug)]
pub enum Root {
    /// The same root as the profiler's: same mount namespace, no chroot.
    Own,
    /// Another root (a container's, a chroot's), held open so that its files can be reached
    /// after the process that showed it to us is gone.
    Foreign(Arc<(OwnedFd, Slot)>),
    /// Not known (the process was gone when first seen, or no descriptor could be kept for
    /// it): nothing is opened by path.
    Unknown,
}

impl Root {
    /// The root of process `tgid` as it is now: `/proc/PID/root`, compared with ours.
    pub fn of(tgid: Tgid) -> io::Result<Self> {
        let path = format!("/proc/{tgid}/root");
        let theirs =
            rustix::fs::open(&path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let ours = rustix::fs::stat("/")?;
        // Its cached attributes only: its root may be a FUSE daemon's, which need never answer.
        let flags = AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC;
        let theirs_stat = statx(&theirs, "", flags, StatxFlags::INO)?;
        let dev = rustix::fs::makedev(theirs_stat.stx_dev_major, theirs_stat.stx_dev_minor);
        let same = (dev, theirs_stat.stx_ino) == (ours.st_dev, ours.st_ino);
        if same {
            return Ok(Self::Own);
        }
        let slot = descriptors::take().ok_or_else(descriptors::refusal)?;
        Ok(Self::Foreign(Arc::new((theirs, slot))))
    }

    /// Opens `path`, as a process with this root names it, for reading: a regular file only,
    /// resolved without leaving the root.
    pub fn open(&self, path: &Path) -> io::Result<File> {
        self.open_with(path, OFlags::empty())
    }

    /// Opens `path` as [`Self::open`] does, but not through a symbolic link at its last
    /// component: for files the process itself writes (its perf map), where a link is how another
    /// user would point the profiler at a file that is not the process's.
    pub fn open_unlinked(&self, path: &Path) -> io::Result<File> {
        self.open_with(path, OFlags::NOFOLLOW)
    }

    fn open_with(&self, path: &Path, extra: OFlags) -> io::Result<File> {
        let how = OFlags::PATH | OFlags::CLOEXEC | extra;
        let resolve = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
        let handle = match self {
            // Our own root is `/`: nothing to stay inside, and a relative path is the user's,
            // from the current directory.
            Self::Own => openat2(CWD, path, how, Mode::empty(), ResolveFlags::NO_MAGICLINKS)?,
            Self::Foreign(root) => openat2(root.0.as_fd(), path, how, Mode::empty(), resolve)?,
            Self::Unknown => {
                return Err(io::Error::new(io::ErrorKind::NotFound, "the process's root is not known"));
            }
        };
        reopen(handle)
    }
}

/// Opens the file a mapping of process `tgid` was made from, through `/proc/PID/map_files`: the
/// mapped inode itself, even deleted or replaced since. Refused unless it is the regular file
/// the mapping names (device and inode).
pub fn mapped_file(tgid: Tgid, mapping: &Mapping) -> io::Result<File> {
    // The map_files link is the kernel's own: following it is what we want.
    let handle =
        rustix::fs::open(map_files_path(tgid, mapping), OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
    let stat = fstat(&handle)?;
    if !is_mapped_inode(&stat, mapping) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not the mapped file"));
    }
    reopen(handle)
}

/// A memfd that holds no ELF image (`/memfd:doublemapper`, as .NET and other JITs map their code
/// twice, writable and executable): JIT code, named as anonymous memory is, from the perf map.
/// An ELF image in a memfd (runc's `/memfd:runc_cloned:...`) is a module like any other file.
pub fn is_jit_memory(path: &Path, file: &File) -> bool {
    let mut magic = [0; 4];
    path.to_str().is_some_and(|path| path.starts_with("/memfd:"))
        && !std::os::unix::fs::FileExt::read_exact_at(file, &mut magic, 0)
            .is_ok_and(|()| magic == *b"\x7fELF")
}

/// What [`is_jit_memory`] files are refused with by the registry's opener.
pub fn jit_memory_error() -> io::Error {
    io::Error::other(JitMemory)
}

/// Whether `err` is [`jit_memory_error`]'s.
pub fn is_jit_memory_error(err: &io::Error) -> bool {
    err.get_ref().is_some_and(|inner| inner.is::<JitMemory>())
}

#[derive(Debug)]
struct JitMemory;

impl std::fmt::Display for JitMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JIT memory, not an image of code")
    }
}

impl std::error::Error for JitMemory {}

/// Opens the file at `path` in `root` if it is the inode a mapping was made from (a process gone
/// before its mapping was read: its files may still be reached by path).
pub fn mapped_path(root: &Root, path: &Path, mapping: &Mapping) -> io::Result<File> {
    let file = root.open(path)?;
    let stat = fstat(&file)?;
    if !is_mapped_inode(&stat, mapping) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "replaced since it was mapped"));
    }
    Ok(file)
}

/// `/proc/PID/map_files/START-END`: the very inode a mapping was made from.
pub fn map_files_path(tgid: Tgid, mapping: &Mapping) -> PathBuf {
    PathBuf::from(format!("/proc/{tgid}/map_files/{:x}-{:x}", mapping.start, mapping.end))
}

fn is_mapped_inode(stat: &Stat, mapping: &Mapping) -> bool {
    let dev = (u64::from(rustix::fs::major(stat.st_dev)) << 32) | u64::from(rustix::fs::minor(stat.st_dev));
    (dev, stat.st_ino) == (mapping.dev, mapping.inode)
}

/// Opens for reading (never blocking) what an `O_PATH` handle names, if it is a regular file.
fn reopen(handle: OwnedFd) -> io::Result<File> {
    let what = match FileType::from_raw_mode(fstat(&handle)?.st_mode) {
        FileType::RegularFile => None,
        // `O_PATH | O_NOFOLLOW` opens a link itself.
        FileType::Symlink => Some("a symbolic link"),
        FileType::Directory => Some("a directory"),
        FileType::Fifo => Some("a FIFO"),
        _ => Some("a device or socket"),
    };
    if let Some(what) = what {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{what}, not a regular file")));
    }
    let own = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&handle));
    let file = rustix::fs::open(own, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())?;
    Ok(File::from(file))
}

/// The file, safe to map: as it is when root owns it and only root can write it; otherwise a
/// sealed copy in memory of its `parts`, which nobody can truncate or change. Either is a
/// descriptor kept: refused (as `EMFILE`) when the cap on those has no room.
pub fn stable(file: File, parts: Parts) -> io::Result<StableFile> {
    let stat = fstat(&file)?;
    let writer = Writer::of(stat.st_uid, stat.st_mode);
    if writer == Writer::Root {
        let slot = descriptors::take().ok_or_else(descriptors::refusal)?;
        return Ok(StableFile::unchanged(file).in_slot(slot));
    }
    copy_of(&file, &stat, parts, writer)
}

/// A sealed copy of `file`'s `parts`, whoever it says owns it: for a file of a file system the
/// kernel does not answer for (see `mounts`), whose owner is what its daemon says, and whose
/// bytes must not be read by mapping it (a page fault could wait for ever). Trusted as anyone's.
pub fn copied(file: File, parts: Parts) -> io::Result<StableFile> {
    copy_of(&file, &fstat(&file)?, parts, Writer::Anyone)
}

fn copy_of(file: &File, stat: &Stat, parts: Parts, writer: Writer) -> io::Result<StableFile> {
    let slot = descriptors::take().ok_or_else(descriptors::refusal)?;
    let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
    if size > MAX_COPY_BYTES {
        return Err(io::Error::new(io::ErrorKind::FileTooLarge, "too large to copy"));
    }
    // At most the size seen is read: a file growing under us is cut there.
    Ok(copy::sealed_copy(file, size, parts)?.written_by(writer).in_slot(slot))
}

/// A file's bytes, mapped read-only. Only files made [`stable`] (or our own) are mapped.
pub fn map(file: &File) -> io::Result<memmap2::Mmap> {
    // SAFETY: read-only private mapping of a file no one else can truncate (root-owned and only
    // root-writable, or a sealed copy): the bytes stay valid while the mapping lives.
    unsafe { memmap2::Mmap::map(file) }
}

/// The bytes of a file the profiler itself chose by path (a program it will start, its
/// libraries), opened in its own root and mapped.
pub fn map_path(path: &Path) -> Result<memmap2::Mmap> {
    let file = Root::Own
        .open(path)
        .and_then(|file| stable(file, Parts::Whole))
        .with_context(|| format!("cannot open {}", path.display()))?;
    map(&file).with_context(|| format!("cannot map {}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::{
        io::Read as _,
        os::unix::fs::{MetadataExt as _, PermissionsExt as _, symlink},
    };

    use rustix::fs::CWD;

    use super::*;

    #[test]
    fn own_root_opens_regular_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(Root::Own.open(&file).is_ok());
        assert!(Root::Own.open(Path::new("Cargo.toml")).is_ok(), "relative to the current directory");
        assert!(Root::Own.open(dir.path()).is_err(), "a directory");
        assert!(Root::Own.open(Path::new("/dev/null")).is_err(), "a device");
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        assert!(Root::Own.open(&fifo).is_err(), "a FIFO is refused, and opening it did not block");
        symlink("/proc/self/exe", dir.path().join("magic")).unwrap();
        assert!(Root::Own.open(&dir.path().join("magic")).is_err(), "a magic link");
    }

    #[test]
    fn foreign_root_keeps_paths_inside() {
        // A tree with an absolute symlink and a `..` escape, as a container could hold.
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/hostname"), b"inside").unwrap();
        symlink("/etc/hostname", root.path().join("absolute")).unwrap();
        symlink("../../../../etc/hostname", root.path().join("dotdot")).unwrap();
        let handle = rustix::fs::open(root.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let root = Root::Foreign(Arc::new((handle, descriptors::take().unwrap())));
        for path in ["/absolute", "/dotdot", "/etc/hostname", "../../etc/hostname"] {
            let mut text = String::new();
            root.open(Path::new(path)).unwrap().read_to_string(&mut text).unwrap();
            assert_eq!(text, "inside", "{path} resolves inside the root");
        }
    }

    #[test]
    fn writable_files_are_copied_and_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.so");
        std::fs::write(&path, b"ELF bytes").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let copy = stable(File::open(&path).unwrap(), Parts::Whole).unwrap();
        std::fs::write(&path, b"").unwrap();
        assert_eq!(&map(&copy).unwrap()[..], b"ELF bytes", "the copy outlives a truncation");
        assert!(copy.set_len(0).is_err(), "sealed");
        let system = File::open("/bin/sh").unwrap();
        let ino = system.metadata().unwrap().ino();
        assert_eq!(
            stable(system, Parts::Whole).unwrap().metadata().unwrap().ino(),
            ino,
            "root's own files stay as they are"
        );
    }
}
