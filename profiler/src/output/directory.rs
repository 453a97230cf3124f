//! The directories the profiler writes in, and how a file gets there.
//!
//! The profiler runs as root, and the places it writes to may be shared with other users: `/tmp`,
//! a world-writable project directory, the current directory. Whatever another user planted on
//! the way must not redirect a write, so:
//!
//! - the directory is resolved once, component by component, into a descriptor; every later step
//!   is relative to it. A symbolic link on the way is followed only as the kernel's
//!   `fs.protected_symlinks` would allow it (not one that another user planted in a sticky
//!   world-writable directory), whatever that sysctl says;
//! - a file is written to a new temporary file, created `O_CREAT | O_EXCL | O_NOFOLLOW` under a
//!   random name with mode 0600, and renamed over the final name within the directory: a link
//!   at the final name would be replaced, never followed;
//! - the final name is checked first (and again right before the rename): a symbolic link, a
//!   FIFO, a device, a socket or a directory there is refused, and so is a regular file of
//!   another user in a sticky shared directory (`fs.protected_regular`).
use std::{
    ffi::{OsStr, OsString},
    fs::File,
    os::{fd::OwnedFd, unix::ffi::OsStrExt as _},
    path::{Component, Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context as _, Result, bail};
use rustix::{
    fs::{
        AtFlags, CWD, FileType, Mode, OFlags, Stat, fchown, fstat, mkdirat, openat, readlinkat, renameat,
        statat,
    },
    io::Errno,
    process::{Gid, Uid, geteuid},
};

/// Symbolic links followed at most while resolving one directory (the kernel's own limit).
const MAX_LINKS: u32 = 40;

/// A directory opened once: files are created, replaced, listed and removed relative to it.
#[derive(Clone, Debug)]
pub(crate) struct OutputDir {
    fd: Arc<OwnedFd>,
    /// The path as given, for messages.
    path: PathBuf,
}

impl OutputDir {
    /// The directory `path` names.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        Self::resolve(path, false)
    }

    /// The directory `path` names, created (mode 0700, as the directories on the way that are
    /// missing) if it does not exist.
    pub(crate) fn create(path: &Path) -> Result<Self> {
        Self::resolve(path, true)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's owner and mode.
    pub(crate) fn stat(&self) -> Result<Stat> {
        fstat(&*self.fd).with_context(|| format!("cannot read {}", self.path.display()))
    }

    fn resolve(path: &Path, create: bool) -> Result<Self> {
        let fd =
            walk(path, create).with_context(|| format!("cannot open the directory {}", path.display()))?;
        // Reopened for reading: an `O_PATH` descriptor can neither be listed nor synced.
        let fd = openat(&fd, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .with_context(|| format!("cannot open the directory {}", path.display()))?;
        Ok(Self { fd: Arc::new(fd), path: path.to_owned() })
    }

    /// Fails, saying why, unless `name` may be replaced: nothing there yet, or a regular file that
    /// is not another user's in a sticky shared directory.
    pub(crate) fn check_replaceable(&self, name: &OsStr) -> Result<()> {
        let existing = match statat(&*self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => return Ok(()),
            other => other.with_context(|| format!("cannot read {}", self.shown(name)))?,
        };
        let what = match FileType::from_raw_mode(existing.st_mode) {
            FileType::RegularFile => {
                let dir = self.stat()?;
                let foreign = existing.st_uid != geteuid().as_raw() && existing.st_uid != dir.st_uid;
                if foreign && is_sticky_shared(&dir, 0o022) {
                    bail!(
                        "{} belongs to uid {} in a shared sticky directory: not replaced (remove it, or write elsewhere)",
                        self.shown(name),
                        existing.st_uid
                    );
                }
                return Ok(());
            }
            FileType::Symlink => {
                "a symbolic link: outputs are never written through links (remove it, or name its target)"
            }
            FileType::Directory => "a directory",
            FileType::Fifo => "a FIFO",
            FileType::Socket => "a socket",
            _ => "a device",
        };
        bail!("{} is {what}; outputs are regular files (standard output is `-o -`)", self.shown(name))
    }

    /// A new, empty temporary file (mode 0600, a random name), removed again unless committed.
    pub(crate) fn create_temp(&self) -> Result<PendingFile> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        // Another user may have taken the name (they cannot guess it, but may try many): retry.
        let mut last = Errno::EXIST;
        for _ in 0..16 {
            let name = OsString::from(format!(".profiler-{:016x}", random_u64()));
            match openat(&*self.fd, &name, flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => {
                    return Ok(PendingFile { dir: self.clone(), name, file: File::from(fd), placed: false });
                }
                Err(Errno::EXIST) => last = Errno::EXIST,
                Err(err) => {
                    last = err;
                    break;
                }
            }
        }
        Err(last).with_context(|| format!("cannot create a file in {}", self.path.display()))
    }

    /// The names of the regular files in the directory that the profiler's user owns (a link, or
    /// another user's file, is never one of ours), with their modification time and size.
    pub(crate) fn own_files(&self) -> Result<Vec<(OsString, i64, u64)>> {
        let context = || format!("cannot list {}", self.path.display());
        let dir = openat(&*self.fd, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .with_context(context)?;
        let mut files = Vec::new();
        for entry in rustix::fs::Dir::read_from(&dir).with_context(context)? {
            let entry = entry.with_context(context)?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
            let Ok(stat) = statat(&*self.fd, &name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
            if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
                && stat.st_uid == geteuid().as_raw()
            {
                files.push((name, stat.st_mtime, u64::try_from(stat.st_size).unwrap_or(0)));
            }
        }
        Ok(files)
    }

    /// Removes `name`, a regular file of ours (see [`Self::own_files`]); anything else is left.
    pub(crate) fn remove_own(&self, name: &OsStr) -> Result<()> {
        let stat = statat(&*self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .with_context(|| format!("cannot read {}", self.shown(name)))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_uid != geteuid().as_raw()
        {
            bail!("{} is not a file of ours: left in place", self.shown(name));
        }
        rustix::fs::unlinkat(&*self.fd, name, AtFlags::empty())
            .with_context(|| format!("cannot remove {}", self.shown(name)))
    }

    fn shown(&self, name: &OsStr) -> String {
        self.path.join(name).display().to_string()
    }
}

/// A temporary file in an [`OutputDir`], being written.
#[derive(Debug)]
pub(crate) struct PendingFile {
    dir: OutputDir,
    name: OsString,
    file: File,
    placed: bool,
}

impl PendingFile {
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Puts the file in place as `name` in its directory, handed to `owner` if given.
    pub(crate) fn commit(mut self, name: &OsStr, owner: Option<(u32, u32)>) -> Result<()> {
        let shown = self.dir.shown(name);
        if let Some((uid, gid)) = owner {
            // Through our own descriptor of the file we created; best effort: a filesystem
            // without ownership (vfat, say) keeps root's.
            let _ = fchown(&self.file, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
        }
        self.file.sync_all().with_context(|| format!("cannot write {shown}"))?;
        // Checked again: the name may have changed since the file was created.
        self.dir.check_replaceable(name)?;
        renameat(&*self.dir.fd, &self.name, &*self.dir.fd, name)
            .with_context(|| format!("cannot write {shown}"))?;
        self.placed = true;
        // The rename itself made durable; failing that loses nothing already written.
        let _ = rustix::fs::fsync(&*self.dir.fd);
        Ok(())
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.placed {
            let _ = rustix::fs::unlinkat(&*self.dir.fd, &self.name, AtFlags::empty());
        }
    }
}

/// What is left to resolve of a path: a step to the root, or a name to look up.
enum Step {
    Root,
    Name(OsString),
}

/// The steps of `path`, last first (a stack).
fn steps(path: &Path) -> Vec<Step> {
    let mut steps: Vec<Step> = path
        .components()
        .filter_map(|component| match component {
            Component::RootDir => Some(Step::Root),
            Component::CurDir | Component::Prefix(_) => None,
            Component::ParentDir => Some(Step::Name("..".into())),
            Component::Normal(name) => Some(Step::Name(name.to_owned())),
        })
        .collect();
    steps.reverse();
    steps
}

/// Resolves the directory `path`, one component at a time, into an `O_PATH` descriptor.
fn walk(path: &Path, create: bool) -> Result<OwnedFd> {
    let open_path = OFlags::PATH | OFlags::CLOEXEC;
    let root = || rustix::fs::open("/", open_path | OFlags::DIRECTORY, Mode::empty());
    let mut dir = openat(CWD, ".", open_path | OFlags::DIRECTORY, Mode::empty())?;
    let mut pending = steps(path);
    let mut links = 0;
    while let Some(step) = pending.pop() {
        let name = match step {
            Step::Root => {
                dir = root()?;
                continue;
            }
            Step::Name(name) => name,
        };
        let entry = match openat(&dir, &name, open_path | OFlags::NOFOLLOW, Mode::empty()) {
            Err(Errno::NOENT) if create => {
                match mkdirat(&dir, &name, Mode::from_raw_mode(0o700)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(err) => return Err(err).with_context(|| format!("cannot create {}", name.display())),
                }
                openat(&dir, &name, open_path | OFlags::NOFOLLOW, Mode::empty())?
            }
            other => other.with_context(|| format!("{}", name.display()))?,
        };
        let stat = fstat(&entry)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => dir = entry,
            FileType::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    bail!("too many levels of symbolic links");
                }
                let parent = fstat(&dir)?;
                if !may_follow(&parent, &stat) {
                    bail!(
                        "{} is a symbolic link of uid {} in a shared sticky directory: not followed",
                        name.display(),
                        stat.st_uid
                    );
                }
                let target = readlinkat(&entry, "", Vec::new())?;
                pending.extend(steps(Path::new(OsStr::from_bytes(target.as_bytes()))));
            }
            _ => bail!("{} is not a directory", name.display()),
        }
    }
    Ok(dir)
}

/// The rule of the kernel's `fs.protected_symlinks`: in a sticky world-writable directory, a
/// link is followed only when it is ours or the directory owner's.
fn may_follow(parent: &Stat, link: &Stat) -> bool {
    !is_sticky_shared(parent, 0o002) || link.st_uid == geteuid().as_raw() || link.st_uid == parent.st_uid
}

/// A sticky directory that the users `others` stands for (0o002: everyone; 0o022: a group too)
/// may write in.
fn is_sticky_shared(dir: &Stat, others: u32) -> bool {
    dir.st_mode & 0o1000 != 0 && dir.st_mode & others != 0
}

fn random_u64() -> u64 {
    let mut bytes = [0; 8];
    // A failure leaves zeros: the name is then taken on the second try and another one drawn.
    let _ = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    u64::from_ne_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use std::{
        io::Write as _,
        os::unix::fs::{MetadataExt as _, symlink},
    };

    use super::*;

    fn write(dir: &OutputDir, name: &str, text: &str) -> Result<()> {
        let pending = dir.create_temp()?;
        pending.file().write_all(text.as_bytes())?;
        pending.commit(OsStr::new(name), None)
    }

    #[test]
    fn files_replace_atomically_with_mode_0600() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("out"), "old").unwrap();
        let dir = OutputDir::open(tmp.path()).unwrap();
        let pending = dir.create_temp().unwrap();
        pending.file().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(tmp.path().join("out")).unwrap(), "old", "untouched until commit");
        pending.commit(OsStr::new("out"), None).unwrap();
        assert_eq!(std::fs::read_to_string(tmp.path().join("out")).unwrap(), "new");
        assert_eq!(std::fs::metadata(tmp.path().join("out")).unwrap().mode() & 0o7777, 0o600);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1, "no temporary file left");
    }

    #[test]
    fn an_abandoned_file_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        drop(OutputDir::open(tmp.path()).unwrap().create_temp().unwrap());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn nothing_is_written_through_what_stands_at_the_name() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        std::fs::write(&target, "precious").unwrap();
        symlink(&target, tmp.path().join("link")).unwrap();
        std::fs::create_dir(tmp.path().join("subdir")).unwrap();
        let dir = OutputDir::open(tmp.path()).unwrap();
        let err = write(&dir, "link", "profile").unwrap_err();
        assert!(format!("{err:#}").contains("is a symbolic link"), "{err:#}");
        assert!(format!("{:#}", write(&dir, "subdir", "x").unwrap_err()).contains("is a directory"));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(tmp.path().join("link")).unwrap().is_symlink());
        let null = OutputDir::open(Path::new("/dev")).unwrap().check_replaceable(OsStr::new("null"));
        assert!(format!("{:#}", null.unwrap_err()).contains("/dev/null is a device"));
    }

    #[test]
    fn paths_resolve_through_links_like_the_kernel() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("real/sub")).unwrap();
        symlink("real", tmp.path().join("relative")).unwrap();
        symlink(tmp.path().join("real/sub"), tmp.path().join("absolute")).unwrap();
        for (path, name) in
            [("relative/sub/../a", "real/a"), ("absolute/b", "real/sub/b"), ("real/./c", "real/c")]
        {
            let full = tmp.path().join(path);
            let dir = OutputDir::open(full.parent().unwrap()).unwrap();
            write(&dir, full.file_name().unwrap().to_str().unwrap(), path).unwrap();
            assert_eq!(std::fs::read_to_string(tmp.path().join(name)).unwrap(), path);
        }
        symlink("loop", tmp.path().join("loop")).unwrap();
        let err = OutputDir::open(&tmp.path().join("loop")).unwrap_err();
        assert!(format!("{err:#}").contains("too many levels"), "{err:#}");
    }

    #[test]
    fn created_directories_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = OutputDir::create(&tmp.path().join("a/b")).unwrap();
        write(&dir, "x", "y").unwrap();
        assert_eq!(std::fs::metadata(tmp.path().join("a/b")).unwrap().mode() & 0o777, 0o700);
        assert_eq!(std::fs::read_to_string(tmp.path().join("a/b/x")).unwrap(), "y");
    }

    #[test]
    fn only_our_regular_files_are_listed_and_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = OutputDir::open(tmp.path()).unwrap();
        write(&dir, "ours", "x").unwrap();
        std::fs::create_dir(tmp.path().join("a-dir")).unwrap();
        symlink(tmp.path().join("ours"), tmp.path().join("a-link")).unwrap();
        let names: Vec<OsString> = dir.own_files().unwrap().into_iter().map(|(name, ..)| name).collect();
        assert_eq!(names, [OsString::from("ours")]);
        assert!(dir.remove_own(OsStr::new("a-link")).is_err());
        assert!(tmp.path().join("a-link").is_symlink());
        dir.remove_own(OsStr::new("ours")).unwrap();
        assert!(!tmp.path().join("ours").exists());
    }

    #[test]
    fn sticky_shared_directories_follow_the_kernels_protections() {
        let owned = |mode, uid| {
            let mut stat = rustix::fs::stat("/").unwrap();
            (stat.st_mode, stat.st_uid) = (mode, uid);
            stat
        };
        let mode = |mode| owned(mode, 0);
        let another_user = rustix::process::geteuid().as_raw().wrapping_add(1).max(1);
        let (tmp, link, other) = (mode(0o41777), mode(0o120777), owned(0o120777, another_user));
        assert!(!may_follow(&tmp, &other), "another user's link in /tmp");
        assert!(may_follow(&tmp, &link), "root's link in root's /tmp");
        assert!(may_follow(&mode(0o40777), &other), "not sticky: the kernel follows it");
        assert!(is_sticky_shared(&mode(0o41770), 0o022), "group-writable counts for regular files");
    }
}
