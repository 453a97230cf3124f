//! Which file systems answer for themselves. Most are the kernel's (ext4, xfs, tmpfs, overlay):
//! reading their files waits for a disk at worst. Others are answered by someone else: a FUSE
//! daemon, which a user may run and mount (with `allow_other`, where the administrator allows
//! it) and which need never answer, or a network server. Opening or reading a file of those
//! may block for ever, and a file there says whatever its daemon likes, its owner too. So the
//! profiler opens them only off its pipeline, with a deadline (`remote`), and trusts them as
//! anyone's.
//!
//! A process's mounts are read from its `/proc/PID/mountinfo` (the kernel's text, which asks no
//! daemon), once per mount namespace and again when a file of a device it did not list shows up.
use std::{
    os::unix::fs::MetadataExt as _,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

use super::read_bounded_bytes;
use crate::model::Tgid;

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

/// Bytes of a `/proc/PID/mountinfo` read at most.
const MAX_MOUNTINFO_BYTES: u64 = 4 << 20;
/// Mount namespaces remembered at most; beyond, the memory starts over.
const MAX_NAMESPACES: usize = 256;
/// How often a namespace's mounts may be read again, for a device they did not list.
const REREAD: Duration = Duration::from_secs(1);

/// The mounts of one mount namespace: the devices whose files the kernel answers for, and
/// where each mount is (as the namespace's processes name it).
#[derive(Debug)]
pub struct Mounts {
    kernels: FxHashMap<u64, bool>,
    /// (mount point, answered by the kernel), in the order listed: a later mount over the
    /// same point hides an earlier one.
    points: Vec<(String, bool)>,
    read_at: Instant,
}

impl Mounts {
    /// Parses a `/proc/PID/mountinfo`: `ID PARENT MAJOR:MINOR ROOT POINT OPTIONS... - TYPE ...`.
    fn parse(text: &[u8]) -> Self {
        let mounts: Vec<(u64, String, bool)> = text
            .split(|&b| b == b'\n')
            .filter_map(|line| {
                let line = std::str::from_utf8(line).ok()?;
                let (head, tail) = line.split_once(" - ")?;
                let mut fields = head.split_whitespace();
                let (major, minor) = fields.nth(2)?.split_once(':')?;
                let point = unescape(fields.nth(1)?);
                let dev = (major.parse::<u64>().ok()? << 32) | minor.parse::<u64>().ok()?;
                let fs_type = tail.split_whitespace().next()?;
                Some((dev, point, KERNELS.contains(&fs_type)))
            })
            .collect();
        Self {
            kernels: mounts.iter().map(|&(dev, _, kernel)| (dev, kernel)).collect(),
            points: mounts.into_iter().map(|(_, point, kernel)| (point, kernel)).collect(),
            read_at: Instant::now(),
        }
    }

    /// Whether the kernel answers for the mount `path` (absolute, as the namespace's processes
    /// name it) is under: the last one listed at the longest mount point it is under.
    pub fn kernel_answers_at(&self, path: &str) -> bool {
        let under = |point: &str| {
            point == "/"
                || path.strip_prefix(point).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        self.points
            .iter()
            .rev()
            .filter(|(point, _)| under(point))
            .max_by_key(|(point, _)| point.len())
            .is_some_and(|&(_, kernel)| kernel)
    }

    /// Whether the kernel answers for the files of `dev` (as `/proc/PID/maps` numbers it): its
    /// mount is listed with a type of [`KERNELS`], or it is the kernel's own shared memory
    /// (memfds, shared anonymous memory). `None`: not listed.
    pub fn kernel_answers(&self, dev: u64) -> Option<bool> {
        if Some(dev) == shared_memory_dev() {
            return Some(true);
        }
        self.kernels.get(&dev).copied()
    }
}

/// A mount point as mountinfo writes it: space, tab, line break and backslash as octal escapes.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4).and_then(|digits| u8::from_str_radix(digits, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The device of the kernel's internal shared-memory mount (a memfd's), listed in no mountinfo.
fn shared_memory_dev() -> Option<u64> {
    static DEV: OnceLock<Option<u64>> = OnceLock::new();
    *DEV.get_or_init(|| {
        let memfd = rustix::fs::memfd_create("profiler-dev", rustix::fs::MemfdFlags::CLOEXEC).ok()?;
        let dev = std::fs::File::from(memfd).metadata().ok()?.dev();
        Some((u64::from(rustix::fs::major(dev)) << 32) | u64::from(rustix::fs::minor(dev)))
    })
}

/// The mounts of every namespace seen, by the inode of its `/proc/PID/ns/mnt`.
static NAMESPACES: Mutex<Option<FxHashMap<u64, Arc<Mounts>>>> = Mutex::new(None);

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
            garbage\n";
        let mounts = Mounts::parse(text);
        assert_eq!(mounts.kernel_answers(254 << 32 | 1), Some(true));
        assert_eq!(mounts.kernel_answers(21), Some(true));
        assert_eq!(mounts.kernel_answers(45), Some(false), "a FUSE daemon's");
        assert_eq!(mounts.kernel_answers(46), Some(false), "a server's");
        assert_eq!(mounts.kernel_answers(99), None, "not listed");
        assert!(mounts.kernel_answers_at("/tmp/perf-1.map"));
        assert!(!mounts.kernel_answers_at("/home/u/mnt/lib.so"));
        assert!(mounts.kernel_answers_at("/home/u/mntx/lib.so"), "another directory");
        assert!(!mounts.kernel_answers_at("/mnt/n"));
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape("/a\\040b\\134c\\"), "/a b\\c\\");
    }

    #[test]
    fn own_files_are_the_kernels() {
        let exe = std::fs::metadata(std::env::current_exe().unwrap()).unwrap().dev();
        let dev = (u64::from(rustix::fs::major(exe)) << 32) | u64::from(rustix::fs::minor(exe));
        let mounts = of(Tgid::own()).unwrap();
        assert_eq!(mounts.kernel_answers(dev), Some(true), "this test's own executable");
        assert_eq!(mounts.kernel_answers(shared_memory_dev().unwrap()), Some(true), "memfds");
        assert!(mounts.kernel_answers_at("/proc/self"));
        assert!(of(Tgid(u32::MAX)).is_none(), "no such process");
    }
}
