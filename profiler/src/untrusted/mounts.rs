//! Who answers for a file's file system, asked of the file itself. Most file systems are the
//! kernel's (ext4, xfs, tmpfs, root's overlays): reading their files waits for a disk at worst.
//! A network file system's are its server's: a read may wait long, but a fatal signal ends the
//! wait, so the profiler reads them off its pipeline, with a deadline (`remote`), and its exit is
//! never held up. A FUSE file system's are its daemon's, which a user may run and mount (in a
//! user namespace of their own, which needs no privilege): a request the daemon has taken is
//! waited for uninterruptibly, even by a process being killed, until the daemon answers, which it
//! need never do. The profiler never asks anything of those: no open, no stat, no read, no lookup
//! through them. Nor of an overlay a user mounted: its layers are whatever the user chose,
//! FUSE's included, and a read goes through to them. What any file system but the kernel's says
//! of a file (its owner, its bytes) is its answerer's, so such files are trusted as anyone's.
//!
//! The question is asked of an open handle (an `O_PATH` one, which opens nothing), never of a
//! device number: a user can unmount a file system and mount another that takes its number.
//! The handle's mount, by the id the kernel never gives twice (`statx`'s unique mount id, read
//! from cached attributes: no daemon is asked), is looked up in the mount namespace of the
//! process the file is of, then in the profiler's own (`statmount`, which reads the kernel's
//! tables): its file system's type says who answers, and, for an overlay, whether the namespace
//! is a user's (owned by a user namespace other than the profiler's). A mount found in neither
//! (a detached one, another namespace's) is nobody the profiler knows: never asked. On kernels
//! without those calls (before 6.11), the handle's mount id (reused, but not while the handle
//! holds the mount) is looked up in a mount table read after the handle was taken.
use std::{
    fs::File,
    num::NonZeroUsize,
    os::{
        fd::{AsFd, AsRawFd as _, BorrowedFd},
        unix::fs::MetadataExt as _,
    },
    sync::{Mutex, OnceLock, PoisonError},
    time::{Duration, Instant},
};

use lru::LruCache;
use rustc_hash::FxHashMap;
use rustix::fs::{AtFlags, StatxFlags, statx};

use super::proc_file::read_bounded_bytes;
use crate::model::Tgid;

/// Who answers for a file system's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Answerer {
    /// The kernel, from a disk or from memory.
    Kernel,
    /// A server, over a network: a wait a fatal signal ends.
    Server,
    /// A daemon (FUSE), or a user's overlay, whose layers may be one: a wait nothing ends but
    /// the daemon's answer. Never asked.
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
    /// Who answers for a file system of type `fs_type`, mounted in a namespace a user owns
    /// (`users`) or not. FUSE's, and virtiofs's (FUSE's requests, its host's daemon), are a
    /// daemon's; so is an overlay in a user's namespace, whatever its options: its layers may be
    /// a daemon's, read with the user's rights. Of the other types a user may mount in a
    /// namespace of theirs (tmpfs, ramfs, proc...), the kernel answers: they hold memory, and a
    /// bind mount has its file system's type. Everything else is a server's.
    fn of(fs_type: &str, users: bool) -> Self {
        if fs_type.starts_with("fuse") || fs_type == "virtiofs" || (users && fs_type == "overlay") {
            Self::Daemon
        } else if KERNELS.contains(&fs_type) {
            Self::Kernel
        } else {
            Self::Server
        }
    }
}

/// A process's mount namespace, as far as its files' mounts are looked up in it.
#[derive(Clone, Copy, Debug)]
pub struct Namespace {
    /// The process that showed it (its mount table, on kernels without `statmount`).
    tgid: Tgid,
    /// The inode of its `/proc/PID/ns/mnt`.
    inode: u64,
    /// Its id, as `statmount` takes it (`None` before Linux 6.11).
    id: Option<u64>,
    /// The user who made the user namespace that owns it, when that is not the profiler's: a
    /// user may have made its mounts (`u32::MAX` when the kernel does not say who).
    user: Option<u32>,
}

impl Namespace {
    /// The mount namespace of process `tgid`, as it is now; `None` when the process is gone.
    pub fn of(tgid: Tgid) -> Option<Self> {
        let namespace = File::open(format!("/proc/{tgid}/ns/mnt")).ok()?;
        let inode = namespace.metadata().ok()?.ino();
        let mut id = 0u64;
        // SAFETY: NS_GET_MNTNS_ID writes one u64 to the pointer given.
        let id = (unsafe { libc::ioctl(namespace.as_raw_fd(), libc::NS_GET_MNTNS_ID, &raw mut id) } == 0)
            .then_some(id);
        // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor, or -1.
        let owner = unsafe { libc::ioctl(namespace.as_raw_fd(), libc::NS_GET_USERNS) };
        let owner = (owner >= 0).then(|| {
            // SAFETY: a descriptor the call just made, owned by nothing else.
            File::from(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(owner) })
        });
        let owner_inode =
            owner.as_ref().and_then(|owner| owner.metadata().ok()).map(|metadata| metadata.ino());
        let ours = owner_inode.is_some() && owner_inode == own_user_namespace();
        let user = (!ours).then(|| owner.as_ref().and_then(owner_uid).unwrap_or(u32::MAX));
        Some(Self { tgid, inode, id, user })
    }

    /// Whether it is the profiler's own.
    fn ours(&self) -> bool {
        static OURS: OnceLock<Option<u64>> = OnceLock::new();
        let ours =
            OURS.get_or_init(|| std::fs::metadata("/proc/self/ns/mnt").ok().map(|metadata| metadata.ino()));
        *ours == Some(self.inode)
    }

    /// The profiler's own (tests).
    #[cfg(test)]
    pub fn own() -> Self {
        Self::of(Tgid::own()).expect("our own")
    }
}

/// Who made the user namespace `namespace` (a descriptor of one).
fn owner_uid(namespace: &File) -> Option<u32> {
    let mut uid: libc::uid_t = 0;
    // SAFETY: NS_GET_OWNER_UID writes one uid_t to the pointer given.
    (unsafe { libc::ioctl(namespace.as_raw_fd(), libc::NS_GET_OWNER_UID, &raw mut uid) } == 0).then_some(uid)
}

/// The inode of the profiler's user namespace.
fn own_user_namespace() -> Option<u64> {
    static OWN: OnceLock<Option<u64>> = OnceLock::new();
    *OWN.get_or_init(|| std::fs::metadata("/proc/self/ns/user").ok().map(|metadata| metadata.ino()))
}

/// Who answers for the file `handle` names (an `O_PATH` handle will do), a file process
/// `namespace`'s paths reach (`None`: the namespace is not known). `None` when that cannot be
/// known now: on a kernel without `statmount`, while mount tables are read at their most often
/// (ask again later).
pub(crate) fn answerer(handle: BorrowedFd<'_>, namespace: Option<&Namespace>) -> Option<Answerer> {
    // Ours needs no id: `statmount` looks in the caller's namespace by default.
    let namespace = namespace.filter(|namespace| !namespace.ours());
    let by_unique = statmount_works() && namespace.is_none_or(|namespace| namespace.id.is_some());
    match mount_id(handle, true) {
        Some(id) if by_unique => by_unique_id(id, namespace),
        _ => match mount_id(handle, false) {
            Some(id) => by_listed_id(id, namespace),
            None => Some(Answerer::Daemon),
        },
    }
}

/// Whether `statmount` answers here (Linux 6.8, and not refused by a seccomp filter or a
/// sandbox's kernel): asked once, of the mount of `/`.
fn statmount_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let root = rustix::fs::open(
            "/",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        );
        root.ok().and_then(|root| mount_id(root.as_fd(), true)).and_then(|id| statmount(id, 0)).is_some()
    })
}

/// `statx`'s mask bit for the unique mount id (Linux 6.8).
const STATX_MNT_ID_UNIQUE: u32 = 0x4000;

/// The id of the mount `handle` is on: the unique one (never given twice), or the one
/// `/proc/PID/mountinfo` lists; from cached attributes (no daemon is asked). `None` when the
/// kernel does not say it.
fn mount_id(handle: BorrowedFd<'_>, unique: bool) -> Option<u64> {
    let wanted = if unique { STATX_MNT_ID_UNIQUE } else { StatxFlags::MNT_ID.bits() };
    let flags = AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC;
    let stat = statx(handle, "", flags, StatxFlags::from_bits_retain(wanted)).ok()?;
    (stat.stx_mask & wanted != 0).then_some(stat.stx_mnt_id)
}

/// Mounts remembered, by unique id (never reused: what was found stays true).
const MAX_MOUNTS: usize = 4096;

/// Who answers for the mount of unique id `id` (held by a handle of the caller's), looked up in
/// `namespace`, then in the profiler's own.
fn by_unique_id(id: u64, namespace: Option<&Namespace>) -> Option<Answerer> {
    static KNOWN: Mutex<Option<LruCache<u64, Answerer>>> = Mutex::new(None);
    // Held only to look up and to remember: the threads that ask wait for no system call of
    // another's (the drain waited hundreds of milliseconds for one descheduled in one).
    fn known<T>(with: impl FnOnce(&mut LruCache<u64, Answerer>) -> T) -> T {
        let mut known = KNOWN.lock().unwrap_or_else(PoisonError::into_inner);
        with(known.get_or_insert_with(|| LruCache::new(NonZeroUsize::new(MAX_MOUNTS).expect("not zero"))))
    }
    if let Some(answerer) = known(|known| known.get(&id).copied()) {
        return Some(answerer);
    }
    let found = namespace
        .and_then(|namespace| Some((statmount(id, namespace.id?)?, namespace.user)))
        .or_else(|| Some((statmount(id, 0)?, None)));
    let answerer = match found {
        Some((mount, user)) => mount.answerer(user)?,
        None if is_shared_memory_mount(id, true) => Answerer::Kernel,
        // In no namespace looked in: not remembered, another process's may list it.
        None => return Some(Answerer::Daemon),
    };
    known(|known| known.put(id, answerer));
    Some(answerer)
}

/// A mount, as the kernel's tables say.
#[derive(Debug, PartialEq, Eq)]
struct Mount<'a> {
    fs_type: &'a str,
    /// Its file system's device (as `/proc/PID/maps` numbers them).
    dev: u64,
}

impl Mount<'_> {
    /// Who answers for this mount's files, in a namespace a user owns (`user`, who) or not;
    /// `None` when that needs the profiler's mount table read and that user's namespaces had
    /// their reads of tables this second.
    /// An overlay a user's namespace lists is root's when ours lists its file system too: a
    /// container's, copied into the user namespace its runtime made (a user's mount never shows
    /// in ours). The caller holds the mount (a handle on a file of it), so its device is not
    /// another's.
    fn answerer(&self, user: Option<u32>) -> Option<Answerer> {
        let answerer = Answerer::of(self.fs_type, user.is_some());
        if answerer != Answerer::Daemon || user.is_none() || self.fs_type != "overlay" {
            return Some(answerer);
        }
        if !take_table_read(user) {
            return None;
        }
        let ours = read_bounded_bytes("/proc/self/mountinfo", MAX_MOUNTINFO_BYTES).unwrap_or_default();
        let copied = mountinfo(&ours).any(|(_, mount)| mount == *self);
        Some(if copied { Answerer::of(self.fs_type, false) } else { answerer })
    }
}

/// What `statmount` says of the mount of unique id `id` in mount namespace `namespace` (0: the
/// profiler's): its file system's type and device; `None` when it lists no such mount.
fn statmount(id: u64, namespace: u64) -> Option<Mount<'static>> {
    // struct mnt_id_req: size, spare, mnt_id, param (what to say), mnt_ns_id.
    let mut request = [0u8; 32];
    let size: u32 = if namespace == 0 { 24 } else { 32 };
    request[..4].copy_from_slice(&size.to_ne_bytes());
    request[8..16].copy_from_slice(&id.to_ne_bytes());
    request[16..24].copy_from_slice(&(STATMOUNT_SB_BASIC | STATMOUNT_FS_TYPE).to_ne_bytes());
    request[24..32].copy_from_slice(&namespace.to_ne_bytes());
    let mut answer = vec![0u8; 4096];
    // SAFETY: statmount reads `size` bytes of the request and writes at most `answer.len()`.
    let done =
        unsafe { libc::syscall(SYS_STATMOUNT, request.as_ptr(), answer.as_mut_ptr(), answer.len(), 0u32) };
    let mount = (done == 0).then(|| statmount_mount(&answer)).flatten()?;
    // The few types there are, kept for as long as the profiler runs.
    Some(Mount { fs_type: interned(mount.fs_type), dev: mount.dev })
}

/// `fs_type`, for as long as the profiler runs: file system types are few.
fn interned(fs_type: &str) -> &'static str {
    static TYPES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut types = TYPES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&known) = types.iter().find(|&&known| known == fs_type) {
        return known;
    }
    if types.len() >= MAX_TYPES {
        return "(too many file system types)";
    }
    let leaked: &'static str = Box::leak(fs_type.to_owned().into_boxed_str());
    types.push(leaked);
    leaked
}

/// File system types kept at most (Linux has about a hundred).
const MAX_TYPES: usize = 512;

/// `statmount`'s number on x86-64 (Linux 6.8), and what it is asked to say: the super block's
/// device, the file system's type.
const SYS_STATMOUNT: libc::c_long = 457;
const STATMOUNT_SB_BASIC: u64 = 0x1;
const STATMOUNT_FS_TYPE: u64 = 0x20;
/// Where `struct statmount`'s strings begin.
const STATMOUNT_STRINGS: usize = 512;

/// The mount an answer of `statmount` describes (`struct statmount`: its size, its mask of what
/// it says, its super block's device, the offset of its type among its strings).
fn statmount_mount(answer: &[u8]) -> Option<Mount<'_>> {
    let field = |at: usize, len: usize| answer.get(at..at + len);
    let word = |at: usize| Some(u32::from_ne_bytes(field(at, 4)?.try_into().ok()?));
    let size = word(0)? as usize;
    let mask = u64::from_ne_bytes(field(8, 8)?.try_into().ok()?);
    if mask & (STATMOUNT_SB_BASIC | STATMOUNT_FS_TYPE) != STATMOUNT_SB_BASIC | STATMOUNT_FS_TYPE {
        return None;
    }
    let dev = (u64::from(word(16)?) << 32) | u64::from(word(20)?);
    let offset = word(36)? as usize;
    let strings = answer.get(STATMOUNT_STRINGS..size.min(answer.len()))?;
    let name = strings.get(offset..)?;
    let fs_type = std::str::from_utf8(&name[..name.iter().position(|&b| b == 0)?]).ok()?;
    Some(Mount { fs_type, dev })
}

/// Whether `id` (unique, or as listed) is one of the kernel's internal shared-memory mounts,
/// listed in no namespace: a memfd's and shared anonymous memory's, or a huge-page memfd's (one
/// mount for each size of page; those of sizes this kernel lacks are not made).
fn is_shared_memory_mount(id: u64, unique: bool) -> bool {
    use rustix::fs::MemfdFlags;
    static IDS: OnceLock<Vec<(Option<u64>, Option<u64>)>> = OnceLock::new();
    let ids = IDS.get_or_init(|| {
        let kinds = [
            MemfdFlags::empty(),
            MemfdFlags::HUGETLB | MemfdFlags::HUGE_2MB,
            MemfdFlags::HUGETLB | MemfdFlags::HUGE_1GB,
        ];
        kinds
            .into_iter()
            .filter_map(|kind| rustix::fs::memfd_create("profiler-mount", MemfdFlags::CLOEXEC | kind).ok())
            .map(|memfd| (mount_id(memfd.as_fd(), false), mount_id(memfd.as_fd(), true)))
            .collect()
    });
    ids.iter().any(|&(listed, unique_id)| Some(id) == if unique { unique_id } else { listed })
}

/// Bytes of a `/proc/PID/mountinfo` read at most.
const MAX_MOUNTINFO_BYTES: u64 = 4 << 20;
/// Mount tables read at most a second, in all (on kernels without `statmount`; with it, only
/// the profiler's, to tell a container's overlay from a user's); a quarter of them for the
/// namespaces of one user.
const MAX_TABLE_READS: u32 = 40;

/// Who answers for the mount of id `id` (a handle's) as `/proc/PID/mountinfo` lists it
/// (kernels without `statmount`): the tables are read after the handle was taken, and the handle
/// holds its mount, so the id is not another mount's. `None` when the tables were read as often
/// as they may be this second.
fn by_listed_id(id: u64, namespace: Option<&Namespace>) -> Option<Answerer> {
    // Whose namespace a process is in, and whether a user owns it, asked now, before and after
    // its table is read: it may have entered another since it was seen.
    let theirs = namespace.map(|namespace| namespace.tgid).filter(|&tgid| tgid != Tgid::own());
    for tgid in theirs.into_iter().chain([Tgid::own()]) {
        if !take_table_read(namespace.and_then(|namespace| namespace.user)) {
            return None;
        }
        let Some(before) = Namespace::of(tgid) else { continue };
        let text = read_bounded_bytes(&format!("/proc/{tgid}/mountinfo"), MAX_MOUNTINFO_BYTES);
        let text = text.unwrap_or_default();
        if Namespace::of(tgid).is_none_or(|after| after.inode != before.inode) {
            continue;
        }
        // Listed ids are the system's (one allocator), so the id is this mount in any table.
        if let Some((_, mount)) = mountinfo(&text).find(|&(listed, _)| listed == id) {
            return mount.answerer(before.user);
        }
    }
    Some(if is_shared_memory_mount(id, false) { Answerer::Kernel } else { Answerer::Daemon })
}

/// Takes one of this second's reads of a mount table for a namespace of `user` (`None`: not a
/// user's), if any is left.
fn take_table_read(user: Option<u32>) -> bool {
    static READS: Mutex<Option<TableReads>> = Mutex::new(None);
    let mut reads = READS.lock().unwrap_or_else(PoisonError::into_inner);
    let now = Instant::now();
    reads.get_or_insert_with(|| TableReads::new(now)).take(user, now)
}

/// The reads of mount tables in the current second: [`MAX_TABLE_READS`] in all, a quarter of
/// them for one user's namespaces, so that a user churning through namespaces (each new one's
/// table read) leaves the others' theirs.
struct TableReads {
    since: Instant,
    all: u32,
    /// By user: at most [`MAX_TABLE_READS`] of them a second.
    by_user: FxHashMap<Option<u32>, u32>,
}

impl TableReads {
    fn new(now: Instant) -> Self {
        Self { since: now, all: 0, by_user: FxHashMap::default() }
    }

    fn take(&mut self, user: Option<u32>, now: Instant) -> bool {
        if now.duration_since(self.since) >= Duration::from_secs(1) {
            *self = Self::new(now);
        }
        if self.all >= MAX_TABLE_READS {
            return false;
        }
        let theirs = self.by_user.entry(user).or_default();
        if *theirs >= MAX_TABLE_READS / 4 {
            return false;
        }
        *theirs += 1;
        self.all += 1;
        true
    }
}

/// The mounts a `/proc/PID/mountinfo` lists, by id: `ID PARENT MAJOR:MINOR ROOT POINT
/// OPTIONS... - TYPE SOURCE SUPER_OPTIONS`.
fn mountinfo(text: &[u8]) -> impl Iterator<Item = (u64, Mount<'_>)> {
    text.split(|&b| b == b'\n').filter_map(|line| {
        let mut fields = line.split(|&b| b == b' ');
        let id = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
        let (major, minor) = std::str::from_utf8(fields.nth(1)?).ok()?.split_once(':')?;
        let dev = (major.parse::<u64>().ok()? << 32) | minor.parse::<u64>().ok()?;
        let separator = line.windows(3).position(|window| window == b" - ")?;
        let fs_type = std::str::from_utf8(line[separator + 3..].split(|&b| b == b' ').next()?).ok()?;
        Some((id, Mount { fs_type, dev }))
    })
}

/// A device number (`st_dev`) as `/proc/PID/maps` and the kernel's mmap events write it: the
/// major number in the high half, the minor in the low.
pub(crate) fn listed_dev(dev: u64) -> u64 {
    (u64::from(rustix::fs::major(dev)) << 32) | u64::from(rustix::fs::minor(dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_systems_say_who_answers_for_their_files() {
        assert_eq!(Answerer::of("ext4", false), Answerer::Kernel);
        assert_eq!(
            Answerer::of("ext4", true),
            Answerer::Kernel,
            "root's disk, bound into a user's namespace"
        );
        assert_eq!(Answerer::of("fuse.sshfs", false), Answerer::Daemon, "a FUSE daemon's");
        assert_eq!(Answerer::of("fuse", true), Answerer::Daemon, "a user's FUSE, or a bind mount of it");
        assert_eq!(Answerer::of("nfs4", false), Answerer::Server, "a server's");
        assert_eq!(Answerer::of("overlay", false), Answerer::Kernel, "root's overlay (a container's)");
        assert_eq!(
            Answerer::of("overlay", true),
            Answerer::Daemon,
            "a user's overlay, with or without userxattr"
        );
        assert_eq!(Answerer::of("tmpfs", true), Answerer::Kernel, "a user's tmpfs holds memory");
    }

    /// `statmount`'s answers, as Linux 6.18 gave them (tests/fixtures/mounts, `record.py`): for
    /// `/`, `/dev/shm`, `/proc`, and an overlay a user mounted in a namespace of theirs.
    #[test]
    fn statmount_answers_say_who_answers() {
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mounts");
        let answer = |name: &str| std::fs::read(fixtures.join(format!("{name}.statmount"))).unwrap();
        const USER: Option<u32> = Some(1000);
        for (name, dev, user, expected) in [
            ("ext4", 254 << 32, None, Answerer::Kernel),
            ("ext4", 254 << 32, USER, Answerer::Kernel),
            ("tmpfs", 27, USER, Answerer::Kernel),
            ("proc", 21, None, Answerer::Kernel),
            ("overlay", 39, None, Answerer::Kernel),
        ] {
            let answer = answer(name);
            let mount = statmount_mount(&answer).unwrap();
            assert_eq!(mount, Mount { fs_type: name, dev });
            assert_eq!(mount.answerer(user), Some(expected), "{name}, a user's: {user:?}");
        }
        // Not in the profiler's own mount table (no such device there): a user's.
        let overlay = answer("overlay");
        let mount = Mount { dev: u64::MAX, ..statmount_mount(&overlay).unwrap() };
        assert_eq!(mount.answerer(USER), Some(Answerer::Daemon), "a user's overlay");
        let ext4 = answer("ext4");
        let mut unsaid = ext4.clone();
        unsaid[8] &= !(STATMOUNT_SB_BASIC as u8);
        assert_eq!(statmount_mount(&unsaid), None, "the device not said");
        let mut beyond = ext4.clone();
        beyond[36..40].copy_from_slice(&600u32.to_ne_bytes());
        assert_eq!(statmount_mount(&beyond), None, "an offset past the answer");
        let mut unended = ext4.clone();
        unended.pop();
        unended[..4].copy_from_slice(&517u32.to_ne_bytes());
        assert_eq!(statmount_mount(&unended), None, "a string without its end");
        assert_eq!(statmount_mount(&ext4[..40]), None, "cut short");
    }

    #[test]
    fn mount_tables_list_mounts_by_id() {
        let text = b"22 27 0:21 / /proc rw,relatime - proc proc rw\n\
            27 1 254:1 / / rw,relatime - ext4 /dev/vda rw\n\
            31 27 0:45 / /home/u/mnt rw,nosuid,nodev,relatime - fuse.sshfs host:/ rw,user_id=1000\n\
            33 27 0:47 / /var/lib/c rw shared:4 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n\
            garbage\n";
        let listed: Vec<_> = mountinfo(text).collect();
        assert_eq!(
            listed,
            [
                (22, Mount { fs_type: "proc", dev: 21 }),
                (27, Mount { fs_type: "ext4", dev: 254 << 32 | 1 }),
                (31, Mount { fs_type: "fuse.sshfs", dev: 45 }),
                (33, Mount { fs_type: "overlay", dev: 47 }),
            ],
            "optional fields before the separator; garbage left out"
        );
        assert_eq!(listed[2].1.answerer(None), Some(Answerer::Daemon));
    }

    /// A user churning through namespaces (each new one's table read) takes a quarter of the
    /// reads of a second; another user, and root's containers, still have theirs; a second
    /// later, all start again.
    #[test]
    fn a_users_namespaces_take_a_quarter_of_the_table_reads() {
        let start = Instant::now();
        let mut reads = TableReads::new(start);
        let churner = (0..100).filter(|_| reads.take(Some(1000), start)).count() as u32;
        assert_eq!(churner, MAX_TABLE_READS / 4);
        assert!(reads.take(Some(1001), start), "another user's namespace is read");
        assert!(reads.take(None, start), "root's container is read");
        let others = (2000..2100).filter(|&user| reads.take(Some(user), start)).count() as u32;
        assert_eq!(churner + 2 + others, MAX_TABLE_READS, "no more than that in all");
        let later = start + Duration::from_secs(1);
        assert!(reads.take(Some(1000), later), "the next second");
    }

    #[test]
    fn own_files_are_the_kernels() {
        let own = Namespace::own();
        assert_eq!(own.user, None, "the profiler's namespace is not a user's");
        let executable = File::open(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(
            answerer(executable.as_fd(), Some(&own)),
            Some(Answerer::Kernel),
            "this test's executable"
        );
        let memfd = rustix::fs::memfd_create("test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        assert_eq!(answerer(memfd.as_fd(), Some(&own)), Some(Answerer::Kernel), "a memfd");
        let huge = rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::HUGETLB;
        match rustix::fs::memfd_create("test", huge) {
            Ok(memfd) => {
                assert_eq!(answerer(memfd.as_fd(), Some(&own)), Some(Answerer::Kernel), "a huge-page memfd");
            }
            Err(err) => eprintln!("no huge-page memfd on this kernel ({err}): not asked of"),
        }
        assert!(Namespace::of(Tgid(u32::MAX)).is_none(), "no such process");
    }
}
