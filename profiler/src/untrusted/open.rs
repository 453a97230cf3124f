//! The one way to open what a target controls: the files it maps, their debug files, its perf
//! map. A target may be hostile, in a container, or both, and the profiler runs as root, so:
//!
//! - paths resolve inside the target's own root (from a descriptor of `/proc/PID/root`, a
//!   component at a time, each directory's and link's file system asked first): an absolute
//!   symlink or `..` cannot lead out of a container or a chroot, and a magic link
//!   (`/proc/*/fd/*`, `/proc/*/root`) is read as the text it is, never followed into what it
//!   points at;
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
    os::{
        fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Path, PathBuf},
    sync::Arc,
};

use rustix::fs::{
    AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags, Stat, StatxFlags, fstat, openat2, statx,
};

use super::{
    copy::{self, Parts, StableFile, Writer},
    descriptors::{self, Slot},
    mounts,
};
use crate::model::Tgid;

/// Largest file copied into memory (a target-writable binary or debug file): beyond it the file
/// is left unread.
const MAX_COPY_BYTES: u64 = 1 << 30;

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
    /// The root of process `tgid` as it is now: `/proc/PID/root`, compared with ours. Another
    /// mount namespace is another root even at the same directory: its paths go through its
    /// own mounts.
    pub fn of(tgid: Tgid) -> io::Result<Self> {
        let path = format!("/proc/{tgid}/root");
        let theirs =
            rustix::fs::open(&path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        // Its cached attributes only: its root may be a FUSE daemon's, which need never answer.
        let own = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let namespace = |pid: &str| rustix::fs::stat(format!("/proc/{pid}/ns/mnt")).map(|st| st.st_ino);
        let same = cached_stat(&theirs)?.0 == cached_stat(&own)?.0
            && cached_stat(&theirs)?.1 == cached_stat(&own)?.1
            && namespace(&tgid.to_string())? == namespace("self")?;
        if same {
            return Ok(Self::Own);
        }
        let slot = descriptors::take().ok_or_else(descriptors::refusal)?;
        Ok(Self::Foreign(Arc::new((theirs, slot))))
    }

    /// Opens `path`, as a process with this root names it, for reading: a regular file only,
    /// resolved inside the root a component at a time (see [`Self::walk`]), every directory
    /// looked into and the file itself on a file system `asked` accepts (asked of its handle).
    pub fn open(&self, path: &Path, asked: &dyn Fn(BorrowedFd<'_>) -> bool) -> io::Result<File> {
        reopen(self.walk(path, asked, true)?)
    }

    /// Opens `path` as [`Self::open`] does, but not through a symbolic link at its last
    /// component: for files the process itself writes (its perf map), where a link is how another
    /// user would point the profiler at a file that is not the process's.
    pub fn open_unlinked(&self, path: &Path, asked: &dyn Fn(BorrowedFd<'_>) -> bool) -> io::Result<File> {
        reopen(self.walk(path, asked, false)?)
    }

    /// An `O_PATH` handle on `path`, resolved as the kernel's `RESOLVE_IN_ROOT` would (`..` stops
    /// at the root, an absolute symbolic link starts again from it, at most [`MAX_LINKS`] links),
    /// but a component at a time: before a name is looked up in a directory, `asked` must
    /// accept the directory's handle (see `mounts`: who answers for its file system), and then
    /// the file's. A FUSE daemon's file system is never looked into: a lookup it has
    /// taken is waited for uninterruptibly, and a link, a mount or a mount namespace can lead a
    /// path there whatever its text says. Magic links are not followed (their text is read and
    /// resolved as a path inside the root).
    fn walk(
        &self,
        path: &Path,
        asked: &dyn Fn(BorrowedFd<'_>) -> bool,
        follow_last: bool,
    ) -> io::Result<OwnedFd> {
        let root = match self {
            Self::Own => {
                rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?
            }
            Self::Foreign(root) => rustix::io::fcntl_dupfd_cloexec(&root.0, 0)?,
            Self::Unknown => {
                return Err(io::Error::new(io::ErrorKind::NotFound, "the process's root is not known"));
            }
        };
        let not_asked = || {
            io::Error::new(io::ErrorKind::PermissionDenied, "a file system the kernel does not answer for")
        };
        let mut left: Vec<Vec<u8>> = components(path.as_os_str().as_bytes());
        let mut dirs: Vec<OwnedFd> = vec![root];
        let mut links = 0;
        while let Some(name) = left.pop() {
            match &name[..] {
                b"" | b"." => continue,
                b".." => {
                    if dirs.len() > 1 {
                        dirs.pop();
                    }
                    continue;
                }
                _ => {}
            }
            let dir = dirs.last().expect("the root stays");
            if !asked(dir.as_fd()) {
                return Err(not_asked());
            }
            let handle = rustix::fs::openat(
                dir,
                &name[..],
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let (_, _, kind) = cached_stat(&handle)?;
            let last = left.is_empty();
            match kind {
                FileType::Symlink if !last || follow_last => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(io::Error::from_raw_os_error(libc::ELOOP));
                    }
                    // A link's own file system answers its readlink: a mount can cover a link
                    // with one of a daemon's.
                    if !asked(handle.as_fd()) {
                        return Err(not_asked());
                    }
                    let target = rustix::fs::readlinkat(&handle, "", Vec::new())?;
                    let target = target.as_bytes();
                    if target.starts_with(b"/") {
                        dirs.truncate(1);
                    }
                    left.extend(components(target));
                }
                FileType::Directory if !last => dirs.push(handle),
                _ if last => {
                    if !asked(handle.as_fd()) {
                        return Err(not_asked());
                    }
                    return Ok(handle);
                }
                _ => return Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
            }
        }
        // A path of directories only (or `/`): the last one reached.
        let handle = dirs.pop().expect("the root stays");
        if !asked(handle.as_fd()) {
            return Err(not_asked());
        }
        Ok(handle)
    }
}

/// Symbolic links followed at most in one path, as the kernel's `MAXSYMLINKS`.
const MAX_LINKS: u32 = 40;

/// The components of a path, last first (the next to resolve at the end).
fn components(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/').rev().map(<[u8]>::to_vec).collect()
}

/// A handle's device (as `/proc/PID/maps` numbers it), inode and type, from its cached
/// attributes (`AT_STATX_DONT_SYNC`: a FUSE daemon is not asked).
fn cached_stat(handle: &impl AsFd) -> io::Result<(u64, u64, FileType)> {
    let flags = AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC;
    let stat = statx(handle, "", flags, StatxFlags::TYPE | StatxFlags::INO)?;
    let dev = (u64::from(stat.stx_dev_major) << 32) | u64::from(stat.stx_dev_minor);
    Ok((dev, stat.stx_ino, FileType::from_raw_mode(u32::from(stat.stx_mode))))
}

/// Opens a file the profiler itself chose by path (a program it will start, its libraries, a
/// recorded fixture): a regular file only, relative paths from the current directory, no magic
/// link followed.
pub(crate) fn own_file(path: &Path) -> io::Result<File> {
    let handle =
        openat2(CWD, path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), ResolveFlags::NO_MAGICLINKS)?;
    reopen(handle)
}

/// Where a file is mapped in a process, as `/proc/PID/maps` says: the range `map_files` names it
/// by, and the device and inode it was mapped from (what a file opened for it must be).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MappedAt {
    pub start: u64,
    pub end: u64,
    pub dev: u64,
    pub inode: u64,
}

/// Opens the file a mapping of process `tgid` (in mount namespace `namespace`) was made from,
/// through `/proc/PID/map_files`: the mapped inode itself, even deleted or replaced since.
/// Refused unless it is the regular file the mapping names (device and inode), on a file system
/// the kernel answers for (see `mounts`).
pub(crate) fn mapped_file(
    tgid: Tgid,
    user: Option<u32>,
    mapping: MappedAt,
    namespace: Option<&mounts::Namespace>,
) -> io::Result<File> {
    let handle = mapped_handle(tgid, user, mapping)?;
    if mounts::answerer(handle.as_fd(), namespace) != Some(mounts::Answerer::Kernel) {
        return Err(super::remote::not_asked());
    }
    reopen(handle)
}

/// An `O_PATH` handle on the file a mapping of process `tgid` was made from (see
/// [`mapped_file`]): nothing is opened, and no file system is asked anything (the link is the
/// kernel's own, to the mapped inode, and its attributes are the ones cached), so that who
/// answers for it can be asked first. Refused unless it is the inode the mapping names.
pub(crate) fn mapped_handle(tgid: Tgid, user: Option<u32>, mapping: MappedAt) -> io::Result<OwnedFd> {
    let handle = mapped_now(tgid, user, mapping)?;
    if !is_mapped_inode(&handle, mapping)? {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not the mapped file"));
    }
    Ok(handle)
}

/// An `O_PATH` handle on the file mapped now at `mapping`'s range of process `tgid` (of `user`),
/// whichever it is: the file its pages fault in from (an overlay's layer's, whose device and
/// inode are not the ones `/proc/PID/maps` names). The map_files link is the kernel's own:
/// following it is what we want; looking it up waits for the process's memory's lock, so a
/// reader does it (see `reader::open_mapped`).
pub(crate) fn mapped_now(tgid: Tgid, user: Option<u32>, mapping: MappedAt) -> io::Result<OwnedFd> {
    super::reader::open_mapped(tgid, user, mapping.start, mapping.end)
}

/// A memfd that holds no ELF image (`/memfd:doublemapper`, as .NET and other JITs map their code
/// twice, writable and executable): JIT code, named as anonymous memory is, from the perf map.
/// An ELF image in a memfd (runc's `/memfd:runc_cloned:...`) is a module like any other file.
pub(crate) fn is_jit_memory(path: &Path, file: &File) -> bool {
    let mut magic = [0; 4];
    path.to_str().is_some_and(|path| path.starts_with("/memfd:"))
        && !std::os::unix::fs::FileExt::read_exact_at(file, &mut magic, 0)
            .is_ok_and(|()| magic == *b"\x7fELF")
}

/// What [`is_jit_memory`] files are refused with by the registry's opener.
pub(crate) fn jit_memory_error() -> io::Error {
    io::Error::other(JitMemory)
}

/// Whether `err` is [`jit_memory_error`]'s.
pub(crate) fn is_jit_memory_error(err: &io::Error) -> bool {
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
pub(crate) fn mapped_path(
    root: &Root,
    path: &Path,
    mapping: MappedAt,
    asked: &dyn Fn(BorrowedFd<'_>) -> bool,
) -> io::Result<File> {
    let file = root.open(path, asked)?;
    if !is_mapped_inode(&file, mapping)? {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "replaced since it was mapped"));
    }
    Ok(file)
}

/// `/proc/PID/map_files/START-END`: the very inode a mapping was made from.
pub(crate) fn map_files_path(tgid: Tgid, start: u64, end: u64) -> PathBuf {
    PathBuf::from(format!("/proc/{tgid}/map_files/{start:x}-{end:x}"))
}

/// Whether `handle` names the inode `mapping` was made from (its cached attributes).
fn is_mapped_inode(handle: &impl AsFd, mapping: MappedAt) -> io::Result<bool> {
    let (dev, inode, _) = cached_stat(handle)?;
    Ok((dev, inode) == (mapping.dev, mapping.inode))
}

/// Opens for reading (never blocking) what an `O_PATH` handle names, if it is a regular file.
pub(crate) fn reopen(handle: OwnedFd) -> io::Result<File> {
    let what = match cached_stat(&handle)?.2 {
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
pub(crate) fn stable(file: File, parts: Parts) -> io::Result<StableFile> {
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
pub(super) fn copied(file: File, parts: Parts) -> io::Result<StableFile> {
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
pub(crate) fn map(file: &File) -> io::Result<memmap2::Mmap> {
    // SAFETY: read-only private mapping of a file no one else can truncate (root-owned and only
    // root-writable, or a sealed copy): the bytes stay valid while the mapping lives.
    unsafe { memmap2::Mmap::map(file) }
}

/// A path through which this process can read an open file, whatever happened to it since.
pub(crate) fn readable_path(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
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
        let any = &|_: BorrowedFd<'_>| true;
        assert!(Root::Own.open(&file, any).is_ok());
        assert!(own_file(Path::new("Cargo.toml")).is_ok(), "the profiler's own: from the current directory");
        assert!(Root::Own.open(dir.path(), any).is_err(), "a directory");
        assert!(Root::Own.open(Path::new("/dev/null"), any).is_err(), "a device");
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        assert!(Root::Own.open(&fifo, any).is_err(), "a FIFO is refused, and opening it did not block");
        assert!(
            Root::Own.open(&file, &|_: BorrowedFd<'_>| false).is_err(),
            "nothing looked up where it is not asked"
        );
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
        let root_dir = root.path().to_owned();
        let _keep = root;
        let root = Root::Foreign(Arc::new((handle, descriptors::take().unwrap())));
        for path in ["/absolute", "/dotdot", "/etc/hostname", "../../etc/hostname"] {
            let mut text = String::new();
            root.open(Path::new(path), &|_: BorrowedFd<'_>| true).unwrap().read_to_string(&mut text).unwrap();
            assert_eq!(text, "inside", "{path} resolves inside the root");
        }
        // A magic link's text is a path like any other, inside the root (which has no /proc).
        symlink("/proc/self/root/etc/hostname", root_dir.join("magic")).unwrap();
        assert!(
            root.open(Path::new("/magic"), &|_: BorrowedFd<'_>| true).is_err(),
            "no way out through /proc"
        );
        // Nothing is looked up in a file system not asked: not even the root's.
        let root_dev =
            cached_stat(&rustix::fs::open(&root_dir, OFlags::PATH, Mode::empty()).unwrap()).unwrap().0;
        assert!(
            root.open(Path::new("/etc/hostname"), &|handle: BorrowedFd<'_>| cached_stat(&handle).unwrap().0
                != root_dev)
                .is_err()
        );
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
