//! Who answers for a file system's files. Most file systems are the kernel's (ext4, xfs, tmpfs,
//! overlay): reading their files waits for a disk at worst. A network file system's are its
//! server's: a read may wait long, but a fatal signal ends the wait, so the profiler reads them
//! off its pipeline, with a deadline (`remote`), and its exit is never held up. A FUSE file
//! system's are its daemon's, which a user may run and mount (with `allow_other`, where the
//! administrator allows it): a request the daemon has taken is waited for uninterruptibly, even
//! by a process being killed, until the daemon answers, which it need never do. The profiler
//! never asks anything of those: no open, no stat, no read, no lookup through them. What any
//! file system but the kernel's says of a file (its owner, its bytes) is its answerer's, so
//! such files are trusted as anyone's.
//!
//! A process's mounts are read from its `/proc/PID/mountinfo` (the kernel's text, which asks no
//! daemon), once per mount namespace and again when a file of a device it did not list shows up.
use std::{
    os::unix::fs::MetadataExt as _,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

use super::proc_file::read_bounded_bytes;
use crate::model::Tgid;

/// Who answers for a file system's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Answerer {
    /// The kernel, from a disk or from memory.
    Kernel,
    /// A server, over a network: a wait a fatal signal ends.
    Server,
    /// A daemon (FUSE): a wait nothing ends but its answer. Never asked.
    Daemon,
}

/// File system types the kernel answers for itself.
const KERNELS: &[&str] = &[
    "ext2",
    "ext3",
    "ext4",
    "xfs",
    "btrfs",
    "f2fs",
    "jfs",
    "reiserfs",
    "nilfs2",
    "bcachefs",
    "zfs",
    "tmpfs",
    "ramfs",
    "overlay",
    "squashfs",
    "erofs",
    "cramfs",
    "romfs",
    "iso9660",
    "udf",
    "vfat",
    "msdos",
    "exfat",
    "ntfs3",
    "hfsplus",
    "minix",
    "hugetlbfs",
    "devtmpfs",
    "devpts",
    "proc",
    "sysfs",
    "mqueue",
    "bpf",
    "cgroup",
    "cgroup2",
    "tracefs",
    "debugfs",
    "securityfs",
    "configfs",
    "efivarfs",
    "pstore",
    "binfmt_misc",
    "nsfs",
];

impl Answerer {
    /// Who answers for a file system of type `fs_type` with `options` (mountinfo's): FUSE's,
    /// and virtiofs's (FUSE's requests, its host's daemon), are a daemon's, and so is an overlay
    /// a user mounted (`userxattr`, which unprivileged overlays need), whose layers may be a
    /// FUSE daemon's read with the user's rights; the kernel's own types its own; anything else
    /// a server's.
    fn of(fs_type: &str, options: &[u8]) -> Self {
        let users_overlay =
            fs_type == "overlay" && options.split(|&b| b == b',').any(|option| option == b"userxattr");
        if fs_type.starts_with("fuse") || fs_type == "virtiofs" || users_overlay {
            Self::Daemon
        } else if KERNELS.contains(&fs_type) {
            Self::Kernel
        } else {
            Self::Server
        }
    }
}

/// Bytes of a `/proc/PID/mountinfo` read at most.
const MAX_MOUNTINFO_BYTES: u64 = 4 << 20;
/// Mount namespaces remembered at most; beyond, the memory starts over.
const MAX_NAMESPACES: usize = 256;
/// How often a namespace's mounts may be read again, for a device they did not list.
const REREAD: Duration = Duration::from_secs(1);

/// The mounts of one mount namespace: who answers for each device's files.
#[derive(Debug)]
pub struct Mounts {
    by_dev: FxHashMap<u64, Answerer>,
    read_at: Instant,
}

impl Mounts {
    /// Parses a `/proc/PID/mountinfo`: `ID PARENT MAJOR:MINOR ROOT POINT OPTIONS... - TYPE
    /// SOURCE SUPER_OPTIONS`.
    fn parse(text: &[u8]) -> Self {
        let by_dev = text
            .split(|&b| b == b'\n')
            .filter_map(|line| {
                let separator = line.windows(3).position(|window| window == b" - ")?;
                let (head, tail) = (&line[..separator], &line[separator + 3..]);
                let device = std::str::from_utf8(head.split(|&b| b == b' ').nth(2)?).ok()?;
                let (major, minor) = device.split_once(':')?;
                let dev = (major.parse::<u64>().ok()? << 32) | minor.parse::<u64>().ok()?;
                let mut tail = tail.split(|&b| b == b' ');
                let fs_type = std::str::from_utf8(tail.next()?).ok()?;
                let options = tail.nth(1).unwrap_or_default();
                Some((dev, Answerer::of(fs_type, options)))
            })
            .collect();
        Self { by_dev, read_at: Instant::now() }
    }

    /// Who answers for the files of `dev` (as `/proc/PID/maps` numbers it): its mount's
    /// answerer, or the kernel's for its own shared memory (memfds, shared anonymous memory).
    /// `None`: not listed.
    pub fn answerer(&self, dev: u64) -> Option<Answerer> {
        if Some(dev) == shared_memory_dev() {
            return Some(Answerer::Kernel);
        }
        self.by_dev.get(&dev).copied()
    }
}

/// The device of the kernel's internal shared-memory mount (a memfd's), listed in no mountinfo.
fn shared_memory_dev() -> Option<u64> {
    static DEV: OnceLock<Option<u64>> = OnceLock::new();
    *DEV.get_or_init(|| {
        let memfd = rustix::fs::memfd_create("profiler-dev", rustix::fs::MemfdFlags::CLOEXEC).ok()?;
        let dev = std::fs::File::from(memfd).metadata().ok()?.dev();
        Some(listed_dev(dev))
    })
}

/// The mounts of every namespace seen, by the inode of its `/proc/PID/ns/mnt`.
static NAMESPACES: Mutex<Option<FxHashMap<u64, Arc<Mounts>>>> = Mutex::new(None);

/// A device number (`st_dev`) as `/proc/PID/maps` and the kernel's mmap events write it: the
/// major number in the high half, the minor in the low.
pub fn listed_dev(dev: u64) -> u64 {
    (u64::from(rustix::fs::major(dev)) << 32) | u64::from(rustix::fs::minor(dev))
}

/// Who answers for the files of `dev`, as process `tgid` maps them: as its namespace's mounts
/// (`known`, as read when it was seen) say, read again while it lives if they do not list the
/// device (mounted since), else as the profiler's own mounts say (a chroot lists no mount
/// outside its root). A daemon (never asked) when nothing is known of it.
pub fn answerer(tgid: Tgid, known: Option<&Mounts>, dev: u64) -> Answerer {
    let found = known.and_then(|mounts| mounts.answerer(dev));
    let found = found.or_else(|| of(tgid)?.answerer(dev));
    found.or_else(|| own()?.answerer(dev)).unwrap_or(Answerer::Daemon)
}

/// The mounts of the profiler's own namespace, as read at most a second ago: a device's answerer
/// is the same in every namespace (it is its superblock's), and a process whose root is inside
/// a mount (a chroot) does not list the mounts outside it.
fn own() -> Option<Arc<Mounts>> {
    of(Tgid::own())
}

/// The mounts of process `tgid`'s namespace, as read at most a second ago; `None` when the
/// process is gone.
pub fn of(tgid: Tgid) -> Option<Arc<Mounts>> {
    let namespace = std::fs::metadata(format!("/proc/{tgid}/ns/mnt")).ok()?.ino();
    let mut namespaces = NAMESPACES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let namespaces = namespaces.get_or_insert_with(FxHashMap::default);
    if let Some(mounts) = namespaces.get(&namespace).filter(|mounts| mounts.read_at.elapsed() < REREAD) {
        return Some(mounts.clone());
    }
    let text = read_bounded_bytes(&format!("/proc/{tgid}/mountinfo"), MAX_MOUNTINFO_BYTES)?;
    let mounts = Arc::new(Mounts::parse(&text));
    if namespaces.len() >= MAX_NAMESPACES {
        namespaces.clear();
    }
    namespaces.insert(namespace, mounts.clone());
    Some(mounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_say_who_answers_for_their_files() {
        let text = b"22 27 0:21 / /proc rw,relatime - proc proc rw\n\
            27 1 254:1 / / rw,relatime - ext4 /dev/vda rw\n\
            31 27 0:45 / /home/u/mnt rw,nosuid,nodev,relatime - fuse.sshfs host:/ rw,user_id=1000\n\
            32 27 0:46 / /mnt/n rw - nfs4 server:/export rw\n\
            33 27 0:47 / /var/lib/c rw - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n\
            34 27 0:48 / /home/u/o rw - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w,userxattr\n\
            garbage\n";
        let mounts = Mounts::parse(text);
        assert_eq!(mounts.answerer(254 << 32 | 1), Some(Answerer::Kernel));
        assert_eq!(mounts.answerer(21), Some(Answerer::Kernel));
        assert_eq!(mounts.answerer(45), Some(Answerer::Daemon), "a FUSE daemon's");
        assert_eq!(mounts.answerer(46), Some(Answerer::Server), "a server's");
        assert_eq!(mounts.answerer(47), Some(Answerer::Kernel), "root's overlay");
        assert_eq!(mounts.answerer(48), Some(Answerer::Daemon), "a user's overlay, whose layers may be FUSE");
        assert_eq!(mounts.answerer(99), None, "not listed");
    }

    #[test]
    fn own_files_are_the_kernels() {
        let dev = listed_dev(std::fs::metadata(std::env::current_exe().unwrap()).unwrap().dev());
        let mounts = of(Tgid::own()).unwrap();
        assert_eq!(mounts.answerer(dev), Some(Answerer::Kernel), "this test's own executable");
        assert_eq!(mounts.answerer(shared_memory_dev().unwrap()), Some(Answerer::Kernel), "memfds");
        assert!(of(Tgid(u32::MAX)).is_none(), "no such process");
    }
}
