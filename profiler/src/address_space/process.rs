//! What the profiler knows of each process: its command name and its address space over time.
//!
//! A process is seeded from `/proc/PID/maps`, then follows the task events (mmap, exec, fork,
//! exit) the kernel reports. Mappings that were replaced, and whole address spaces left at exec,
//! stay in a history for a while, so that a sample resolves with the mappings valid when it was
//! taken even when it is read after a dlclose, a new dlopen at the same address, or the
//! process's exit.
//!
//! A forked child shares its parent's table of mappings until either maps something: a process
//! with tens of thousands of mappings that starts children all day (`posix_spawn`, `vfork`:
//! children that run exec at once) costs one table, not one per child.
use std::{
    collections::HashMap,
    os::fd::BorrowedFd,
    sync::{Arc, Mutex},
    time::Duration,
};

use rustc_hash::FxHashMap;

use super::{Backing, MAX_MAPS_READ_TIME, Mapping, Mappings, TaskEvent, TimedMapping};
use crate::{
    clock::monotonic_ns,
    model::{Tgid, Tid},
    untrusted::{
        mounts::{self, Answerer, Namespace},
        open::Root,
        read_bounded, reader,
    },
};

/// How long replaced mappings and exited processes are kept past the time up to which records
/// were handed over (a drain that falls behind holds that time back): long enough for records
/// other CPUs took just before it, short enough that a host starting programs all day holds
/// few that are gone.
const KEEP_NS: u64 = 250_000_000;

/// Least time between two reads of a process's `/proc/PID/maps`, and the most it grows to while
/// the reads find nothing new (addresses in no mapping at all keep coming: garbage from a
/// frame-pointer walk through JIT code without frame pointers).
const REREAD_INTERVAL_NS: u64 = 100_000_000;
const MAX_REREAD_INTERVAL_NS: u64 = 16 * REREAD_INTERVAL_NS;

/// The time one user's processes' `/proc/PID/maps` may take to read at once, and again each
/// second, and the least a reading is begun with (see [`MAPS_READS`]).
const MAPS_BURST_NS: i64 = 500_000_000;
const MAPS_NS_PER_SECOND: i64 = 100_000_000;
const MAPS_LEAST_NS: i64 = 50_000_000;

/// The time spent reading processes' `/proc/PID/maps`, per user. A process may map tens of
/// thousands of files, under names of thousands of bytes, and hold its memory's lock while it
/// forks: its maps take the kernel a quarter of a second to write out, read on the thread that
/// drains samples whenever a process is seen or found wanting. Each user's processes are read
/// within [`MAPS_BURST_NS`], refilled by [`MAPS_NS_PER_SECOND`]: a user starting such processes
/// all day has few of them read (their samples find no mapping meanwhile), and others'
/// processes are read as they come.
static MAPS_READS: Mutex<Option<FxHashMap<Option<u32>, MapsBucket>>> = Mutex::new(None);

/// A user's time left to read (below zero after a read longer than what was left), as of when.
#[derive(Clone, Copy, Debug)]
struct MapsBucket {
    left_ns: i64,
    at_ns: u64,
}

impl MapsBucket {
    fn full(now_ns: u64) -> Self {
        Self { left_ns: MAPS_BURST_NS, at_ns: now_ns }
    }

    /// How long a reading may take at `now_ns`: `None` while less than [`MAPS_LEAST_NS`] is left.
    fn allows(&mut self, now_ns: u64) -> Option<Duration> {
        let elapsed_us = i64::try_from(now_ns.saturating_sub(self.at_ns) / 1_000).unwrap_or(i64::MAX);
        let refill = elapsed_us.saturating_mul(MAPS_NS_PER_SECOND / 1_000_000);
        *self = Self { left_ns: self.left_ns.saturating_add(refill).min(MAPS_BURST_NS), at_ns: now_ns };
        (self.left_ns >= MAPS_LEAST_NS)
            .then(|| MAX_MAPS_READ_TIME.min(Duration::from_nanos(self.left_ns.unsigned_abs())))
    }

    /// A reading took `spent_ns`.
    fn spend(&mut self, spent_ns: u64) {
        self.left_ns = self.left_ns.saturating_sub(i64::try_from(spent_ns).unwrap_or(i64::MAX));
    }
}

/// The maps of `tgid`, of `user`, read by a reader within the time `user` has left (`None` when
/// none is, or the reader got no answer: not read for now).
fn read_maps(tgid: Tgid, user: Option<u32>) -> Option<std::io::Result<Mappings>> {
    let bucket = |now_ns| {
        let mut reads = MAPS_READS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *reads.get_or_insert_with(FxHashMap::default).entry(user).or_insert(MapsBucket::full(now_ns))
    };
    let set = |bucket| {
        let mut reads = MAPS_READS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        reads.get_or_insert_with(FxHashMap::default).insert(user, bucket);
    };
    let started_ns = monotonic_ns();
    let mut left = bucket(started_ns);
    let allowed = left.allows(started_ns);
    let read = allowed.map(|time| Mappings::read_from(reader::maps(tgid, user), time));
    if read.is_some() {
        left.spend(monotonic_ns().saturating_sub(started_ns));
    }
    set(left);
    read.filter(|read| !read.as_ref().is_err_and(|err| err.kind() == std::io::ErrorKind::WouldBlock))
}

/// A mapping that was valid from `since_ns` to `until_ns`.
#[derive(Clone, Debug)]
struct PastMapping {
    entry: TimedMapping,
    until_ns: u64,
}

/// A whole address space left at `until_ns` (at exec, or replaced by a new reading of `/proc`).
#[derive(Clone, Debug)]
struct PastSpace {
    space: Arc<Mappings>,
    until_ns: u64,
}

#[derive(Clone, Debug)]
pub struct Process {
    tgid: Tgid,
    comm: String,
    /// When `comm` was learned: a record taken before (an off-CPU span sent late, with the name
    /// its thread had then) does not undo a newer name.
    comm_since_ns: u64,
    /// Where its paths resolve, who runs it, its pid in its own pid namespace: what opening its
    /// files and its perf map needs. Read at first sight and again at exec.
    identity: Identity,
    /// Shared with the processes forked from it, or that it was forked from, until one maps
    /// something.
    space: Arc<Mappings>,
    history: Vec<PastMapping>,
    past_spaces: Vec<PastSpace>,
    /// When `/proc/PID/maps` was last read, and how long until it may be read again.
    read_at_ns: u64,
    /// When it last mapped something (a task event).
    mapped_ns: u64,
    reread_interval_ns: u64,
    /// `/proc/PID` is gone: no more reads.
    gone: bool,
    exited_at_ns: Option<u64>,
    /// A sample came from it.
    sampled: bool,
}

/// What a process is, beyond its address space, for reading what it controls.
#[derive(Clone, Debug)]
pub struct Identity {
    /// Where its paths resolve.
    pub root: Root,
    /// Its effective user id (`None`: unknown).
    pub uid: Option<u32>,
    /// The user it counts as where users share (see [`user_of`]; `None`: unknown).
    pub user: Option<u32>,
    /// Its pid in its own pid namespace (a container names its perf map after it).
    pub ns_pid: u32,
    /// Its jitdump (`jit-NSPID.dump`), which a JIT writing one maps for tools to find, as it
    /// was mapped when last looked at (see `AddressSpaces::identity`).
    pub jitdump: Option<Mapping>,
    /// Its mount namespace, as it was when it was seen (see `mounts`): where the mounts of its
    /// files are looked up, also once it is gone.
    pub namespace: Option<Namespace>,
}

impl Identity {
    fn read(tgid: Tgid) -> Self {
        let status = read_bounded(&format!("/proc/{tgid}/status")).unwrap_or_default();
        let field =
            |name: &str| status.lines().find_map(|line| line.strip_prefix(name)).map(str::split_whitespace);
        let uid = field("Uid:").and_then(|mut ids| ids.nth(1)?.parse().ok());
        Self {
            root: Root::of(tgid).unwrap_or(Root::Unknown),
            // Uid: real, effective, saved, filesystem.
            uid,
            user: user_of(tgid).or(uid),
            ns_pid: field("NSpid:").and_then(|ids| ids.last()?.parse().ok()).unwrap_or(tgid.0),
            jitdump: None,
            namespace: Namespace::of(tgid),
        }
    }

    /// Who answers for the file `handle` names, one of this process's (see [`mounts::answerer`]):
    /// `None` while that cannot be known (ask again later).
    pub fn answerer(&self, handle: BorrowedFd<'_>) -> Option<Answerer> {
        mounts::answerer(handle, self.namespace.as_ref())
    }

    /// Whether the file or directory `handle` names may be looked into or read, for this
    /// process: only when the kernel answers for its file system (see `mounts`).
    pub fn asked(&self) -> impl Fn(BorrowedFd<'_>) -> bool + '_ {
        move |handle| self.answerer(handle) == Some(Answerer::Kernel)
    }

    /// The identity of this very process (tests).
    #[cfg(test)]
    pub fn own() -> Self {
        Self::read(Tgid::own())
    }

    #[cfg(any(test, feature = "testing"))]
    fn unknown(tgid: Tgid) -> Self {
        Self { root: Root::Unknown, uid: None, user: None, ns_pid: tgid.0, jitdump: None, namespace: None }
    }
}

/// For a process in a user namespace, the user who made the outermost one below ours: however
/// many uids of its own (subordinate ones) a user's namespaces map, they are one user where
/// users share (the kernel's tables). `None` for a process in our user namespace, or gone.
fn user_of(tgid: Tgid) -> Option<u32> {
    use std::os::{fd::AsRawFd as _, unix::fs::MetadataExt as _};
    const NS_GET_PARENT: libc::c_ulong = 0xb702;
    const NS_GET_OWNER_UID: libc::c_ulong = 0xb704;
    let ours = rustix::fs::stat("/proc/self/ns/user").ok()?.st_ino;
    let mut namespace = std::fs::File::open(format!("/proc/{tgid}/ns/user")).ok()?;
    // The kernel nests at most 32 user namespaces.
    for _ in 0..33 {
        if namespace.metadata().ok()?.ino() == ours {
            return None;
        }
        // SAFETY: an ioctl on a namespace descriptor we own; it returns a new descriptor or -1.
        let parent = unsafe { libc::ioctl(namespace.as_raw_fd(), NS_GET_PARENT) };
        if parent < 0 {
            return None;
        }
        // SAFETY: the descriptor the kernel just returned is ours alone.
        let parent = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(parent) };
        if parent.metadata().ok()?.ino() == ours {
            let mut owner: libc::uid_t = 0;
            // SAFETY: NS_GET_OWNER_UID writes one uid_t where it is pointed.
            let done = unsafe { libc::ioctl(namespace.as_raw_fd(), NS_GET_OWNER_UID, &mut owner) };
            return (done == 0).then_some(owner);
        }
        namespace = parent;
    }
    None
}

impl Process {
    fn load(tgid: Tgid, fallback_comm: &str) -> Self {
        let comm = read_bounded(&format!("/proc/{tgid}/comm"))
            .map(|comm| comm.trim_end_matches('\n').to_owned())
            .unwrap_or_else(|| fallback_comm.to_owned());
        let identity = Identity::read(tgid);
        let now_ns = monotonic_ns();
        let space = read_maps(tgid, identity.user);
        Self {
            tgid,
            comm,
            comm_since_ns: now_ns,
            identity,
            gone: matches!(space, Some(Err(_))),
            // Not read, for want of its user's time: read when found wanting, as if long ago.
            read_at_ns: if space.is_some() { now_ns } else { 0 },
            space: Arc::new(space.and_then(Result::ok).unwrap_or_default()),
            history: Vec::new(),
            past_spaces: Vec::new(),
            mapped_ns: 0,
            reread_interval_ns: REREAD_INTERVAL_NS,
            exited_at_ns: None,
            sampled: false,
        }
    }

    /// A process known only from `mappings`, never read from `/proc` (recorded fixtures).
    #[cfg(any(test, feature = "testing"))]
    pub fn from_mappings(tgid: Tgid, comm: &str, mappings: Mappings) -> Self {
        Self {
            tgid,
            comm: comm.to_owned(),
            comm_since_ns: 0,
            identity: Identity::unknown(tgid),
            space: Arc::new(mappings),
            history: Vec::new(),
            past_spaces: Vec::new(),
            read_at_ns: 0,
            mapped_ns: 0,
            reread_interval_ns: REREAD_INTERVAL_NS,
            gone: true,
            exited_at_ns: None,
            sampled: false,
        }
    }

    /// The process's command name (its main thread's).
    pub fn comm(&self) -> &str {
        &self.comm
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The mapping of its jitdump, if it maps one now.
    pub fn jitdump(&self) -> Option<&Mapping> {
        let name = format!("jit-{}.dump", self.identity.ns_pid);
        self.mappings().find(|m| matches!(&m.backing, Backing::File { path, .. } if path.file_name().is_some_and(|n| *n == *name)))
    }

    /// Its mappings now, shared.
    pub fn space(&self) -> Arc<Mappings> {
        Arc::clone(&self.space)
    }

    pub fn mappings(&self) -> impl Iterator<Item = &Mapping> {
        self.space.mappings()
    }

    /// The mapping that contained `addr` at `time_ns`, read again from `/proc` if needed.
    pub fn mapping(&mut self, addr: u64, time_ns: u64) -> Option<&Mapping> {
        self.refresh_for(addr, time_ns);
        self.lookup(addr, time_ns)
    }

    /// When no known mapping contained `addr` at `time_ns`, and the sample is newer than our last
    /// read of `/proc/PID/maps` by the interval (from [`REREAD_INTERVAL_NS`]), reads the maps
    /// again: task events can be lost, and some mappings make none (code made executable with
    /// mprotect). The interval bounds the cost of addresses in no mapping at all (garbage from a
    /// frame-pointer walk through code without frame pointers) to a read every so often, not one
    /// per sample, and doubles, up to [`MAX_REREAD_INTERVAL_NS`], while reads find the mappings
    /// unchanged. An address past where a reading cut at its bound stopped is not read again for.
    pub fn refresh_for(&mut self, addr: u64, time_ns: u64) {
        let stale = time_ns > self.read_at_ns.saturating_add(self.reread_interval_ns);
        if stale && !self.gone && self.lookup(addr, time_ns).is_none() && !self.space.beyond_reading(addr) {
            self.reread();
        }
    }

    /// Whether it mapped something since `/proc/PID/maps` was read: that came from a task
    /// event, and the mappings it made with it that are not executable (a library's data, an
    /// archive it maps to read) from none.
    pub fn maps_stale(&self) -> bool {
        self.mapped_ns > self.read_at_ns && !self.gone
    }

    /// Reads `/proc/PID/maps` again.
    pub fn read_maps(&mut self) {
        if !self.gone {
            self.reread();
        }
    }

    /// The mapping known to have contained `addr` at `time_ns`.
    pub fn lookup(&self, addr: u64, time_ns: u64) -> Option<&Mapping> {
        if let Some(current) = self.space.find_timed(addr).filter(|e| e.since_ns <= time_ns) {
            return Some(&current.mapping);
        }
        let replaced = self.history.iter().rev().find(|past| {
            past.entry.mapping.contains(addr) && past.entry.since_ns <= time_ns && time_ns < past.until_ns
        });
        if let Some(past) = replaced {
            return Some(&past.entry.mapping);
        }
        self.past_spaces
            .iter()
            .rev()
            .filter(|past| time_ns < past.until_ns)
            .find_map(|past| past.space.find_timed(addr).filter(|entry| entry.since_ns <= time_ns))
            .map(|entry| &entry.mapping)
    }

    fn rename(&mut self, comm: String, time_ns: u64) {
        self.comm = comm;
        self.comm_since_ns = self.comm_since_ns.max(time_ns);
    }

    fn map(&mut self, mapping: Mapping, time_ns: u64) {
        self.mapped_ns = self.mapped_ns.max(time_ns);
        let displaced = Arc::make_mut(&mut self.space).insert(mapping, time_ns);
        self.retire(displaced, time_ns);
    }

    fn exec(&mut self, comm: String, time_ns: u64) {
        self.rename(comm, time_ns);
        // An exec may run a set-uid program, or one a chroot or a new mount namespace holds.
        if !self.gone {
            self.identity = Identity::read(self.tgid);
        }
        self.replace_space(Mappings::default(), time_ns);
    }

    fn retire(&mut self, entries: Vec<TimedMapping>, until_ns: u64) {
        self.history.extend(entries.into_iter().map(|entry| PastMapping { entry, until_ns }));
    }

    /// Leaves its address space for `space` at `until_ns`: the old one goes to the history
    /// whole, still shared with whoever shares it.
    fn replace_space(&mut self, space: Mappings, until_ns: u64) {
        let old = std::mem::replace(&mut self.space, Arc::new(space));
        if old.mappings().next().is_some() {
            self.past_spaces.push(PastSpace { space: old, until_ns });
        }
    }

    /// Reads `/proc/PID/maps` again, if its user has time left to read them (see [`MAPS_READS`]).
    fn reread(&mut self) {
        let Some(read) = read_maps(self.tgid, self.identity.user) else { return };
        self.read_at_ns = monotonic_ns();
        match read {
            // A reading that ran out of time does not replace a whole one: read again later.
            Ok(space) if space.out_of_time() && !self.space.out_of_time() => {}
            Ok(space) if space.mappings().eq(self.space.mappings()) => {
                self.reread_interval_ns = (2 * self.reread_interval_ns).min(MAX_REREAD_INTERVAL_NS);
            }
            // Unknown since when: the new reading is trusted for any time, as seeding is.
            Ok(space) => {
                self.replace_space(space, self.read_at_ns);
                self.reread_interval_ns = REREAD_INTERVAL_NS;
            }
            Err(_) => self.gone = true,
        }
    }

    /// The child `tgid` forks from this process: the same mappings (shared), but none of the history,
    /// which only samples taken before the fork could need (a parent that maps and unmaps
    /// libraries all day would otherwise hand its whole past to every child).
    fn forked(&self, tgid: Tgid) -> Self {
        Self {
            tgid,
            comm: self.comm.clone(),
            comm_since_ns: self.comm_since_ns,
            identity: self.identity.clone(),
            space: Arc::clone(&self.space),
            history: Vec::new(),
            past_spaces: Vec::new(),
            read_at_ns: self.read_at_ns,
            mapped_ns: self.mapped_ns,
            // As its parent's: a child found wanting reads no sooner than its parent would.
            reread_interval_ns: self.reread_interval_ns,
            gone: self.gone,
            exited_at_ns: None,
            sampled: false,
        }
    }

    fn forget_before(&mut self, time_ns: u64) {
        self.history.retain(|past| past.until_ns >= time_ns);
        self.past_spaces.retain(|past| past.until_ns >= time_ns);
    }
}

/// Which processes to follow through task events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tracking {
    /// Every process on the system (`-a`); otherwise the ones seeded with [`Processes::track`]
    /// and, if `follow_forks`, their descendants.
    pub all: bool,
    pub follow_forks: bool,
}

#[derive(Debug)]
pub(crate) struct Processes {
    tracking: Tracking,
    by_tgid: HashMap<Tgid, Process>,
    lost_events: u64,
    /// Processes samples came from, counted once each (a pid used again is another process).
    sampled: u64,
}

impl Processes {
    pub(crate) fn new(tracking: Tracking) -> Self {
        Self { tracking, by_tgid: HashMap::new(), lost_events: 0, sampled: 0 }
    }

    /// Starts following a process, from its current `/proc` state.
    pub(crate) fn track(&mut self, tgid: Tgid) {
        self.by_tgid.entry(tgid).or_insert_with(|| Process::load(tgid, ""));
    }

    /// Adds a process known from elsewhere (recorded fixtures).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn insert(&mut self, process: Process) {
        self.by_tgid.insert(process.tgid, process);
    }

    /// The process a sample came from, loading it from /proc on first sight.
    /// Process `tgid`, as a record of thread `tid`, named `thread_comm`, taken at `time_ns`
    /// shows it.
    pub(crate) fn observe(&mut self, tgid: Tgid, tid: Tid, thread_comm: &str, time_ns: u64) -> &mut Process {
        let process = self.by_tgid.entry(tgid).or_insert_with(|| Process::load(tgid, thread_comm));
        if !process.sampled {
            process.sampled = true;
            self.sampled += 1;
        }
        // The main thread's name is the process's.
        if tid == tgid.main_thread() && process.comm != thread_comm && time_ns >= process.comm_since_ns {
            process.rename(thread_comm.to_owned(), time_ns);
        }
        process
    }

    pub(crate) fn apply(&mut self, event: TaskEvent) {
        match event {
            TaskEvent::Map { pid, time_ns, mapping } => match self.by_tgid.get_mut(&pid) {
                Some(process) => process.map(mapping, time_ns),
                // Seeding reads /proc after the event: the mapping is in it.
                None if self.tracking.all => self.track(pid),
                None => {}
            },
            TaskEvent::Exec { pid, time_ns, comm } => match self.by_tgid.get_mut(&pid) {
                Some(process) => process.exec(comm, time_ns),
                None if self.tracking.all => self.track(pid),
                None => {}
            },
            TaskEvent::Rename { pid, time_ns, comm } => {
                if let Some(process) = self.by_tgid.get_mut(&pid) {
                    process.rename(comm, time_ns);
                }
            }
            TaskEvent::Fork { parent, child, .. } => {
                let follow = self.tracking.all || self.tracking.follow_forks;
                // A process known by the child's pid that exited is a former owner of the pid
                // (its exit reported, or not): the child replaces it. One still running was
                // read from `/proc` after the fork, and is the child already.
                let known = self.by_tgid.get(&child).is_some_and(|known| known.exited_at_ns.is_none());
                if follow
                    && !known
                    && let Some(parent) = self.by_tgid.get(&parent)
                {
                    self.by_tgid.insert(child, parent.forked(child));
                }
            }
            TaskEvent::Exit { pid, time_ns } => {
                if let Some(process) = self.by_tgid.get_mut(&pid) {
                    process.exited_at_ns = Some(time_ns);
                }
            }
            TaskEvent::Lost { count, .. } => self.lost_events += count,
        }
    }

    /// Forgets what no sample can need any more: processes and mappings gone for a while before
    /// `now_ns`. Returns the processes forgotten.
    pub(crate) fn prune(&mut self, now_ns: u64) -> Vec<Tgid> {
        let horizon = now_ns.saturating_sub(KEEP_NS);
        let mut forgotten = Vec::new();
        self.by_tgid.retain(|&tgid, p| {
            let keep = p.exited_at_ns.is_none_or(|exited| exited >= horizon);
            if !keep {
                forgotten.push(tgid);
            }
            keep
        });
        for process in self.by_tgid.values_mut() {
            process.forget_before(horizon);
        }
        forgotten
    }

    /// Every mapping of every process known, current or past, with its process.
    pub(crate) fn all_mappings(&self) -> impl Iterator<Item = (Tgid, &Mapping)> {
        self.by_tgid.iter().flat_map(|(&tgid, process)| {
            let current = process.space.mappings();
            let replaced = process.history.iter().map(|past| &past.entry.mapping);
            let left = process.past_spaces.iter().flat_map(|past| past.space.mappings());
            current.chain(replaced).chain(left).map(move |mapping| (tgid, mapping))
        })
    }

    /// Marks as exited at `now_ns` the processes whose `/proc` entry is gone.
    pub(crate) fn notice_exits(&mut self, now_ns: u64) {
        for (tgid, process) in &mut self.by_tgid {
            if process.exited_at_ns.is_none() && !std::path::Path::new(&format!("/proc/{tgid}")).exists() {
                process.exited_at_ns = Some(now_ns);
            }
        }
    }

    /// How many processes samples came from.
    pub(crate) fn sampled(&self) -> u64 {
        self.sampled
    }

    /// A process followed now.
    pub(crate) fn get(&self, tgid: Tgid) -> Option<&Process> {
        self.by_tgid.get(&tgid)
    }

    pub(crate) fn get_mut(&mut self, tgid: Tgid) -> Option<&mut Process> {
        self.by_tgid.get_mut(&tgid)
    }

    /// Task events the kernel dropped (the profiler then falls back to reading /proc).
    pub(crate) fn lost_events(&self) -> u64 {
        self.lost_events
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;

    use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous, munmap};

    use super::*;

    const TRACK_ALL: Tracking = Tracking { all: true, follow_forks: true };

    fn library(start: u64, inode: u64) -> Mapping {
        Mapping {
            start,
            end: start + 0x1000,
            offset: 0,
            executable: true,
            dev: 1,
            inode,
            backing: Backing::File { path: format!("/lib/{inode}.so").into(), deleted: false },
        }
    }

    /// A process that does not exist, so that /proc never answers for it.
    const GHOST: Tgid = Tgid(999_999_999);
    /// Its child, in the fork tests.
    const CHILD: Tgid = Tgid(999_999_998);

    fn ghost(processes: &mut Processes) -> &mut Process {
        processes.observe(GHOST, Tid(GHOST.0 + 1), "ghost", 0)
    }

    #[test]
    fn a_users_maps_are_read_within_its_time() {
        let mut bucket = MapsBucket::full(0);
        assert_eq!(bucket.allows(0), Some(MAX_MAPS_READ_TIME), "a reading takes its longest at most");
        bucket.spend(MAPS_BURST_NS as u64 - 60_000_000);
        assert_eq!(bucket.allows(0), Some(Duration::from_millis(60)), "or what is left");
        bucket.spend(20_000_000);
        assert_eq!(bucket.allows(0), None, "too little left to begin one");
        bucket.spend(50_000_000);
        assert_eq!(
            bucket.allows(100_000_000),
            None,
            "overdrawn: a tenth of a second refills a tenth of that"
        );
        assert!(bucket.allows(1_000_000_000).is_some(), "a second later, a reading again");
        let full = bucket.allows(60_000_000_000).map(|_| bucket.left_ns);
        assert_eq!(full, Some(MAPS_BURST_NS), "no more than full");
    }

    #[test]
    fn loads_a_live_process() {
        let pid = Tgid::own();
        let mut processes = Processes::new(TRACK_ALL);
        let process = processes.observe(pid, Tid(pid.0 + 1), "thread-name", 0);
        let expected = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(process.comm(), expected.trim_end());
        let here = loads_a_live_process as *const () as usize as u64;
        assert!(process.mapping(here, 0).is_some());
    }

    #[test]
    fn addresses_in_no_mapping_read_the_maps_less_often_while_nothing_changes() {
        // A process whose mappings stay as they are (this one's change as other tests run).
        let mut sleeper = std::process::Command::new("sleep").arg("10").spawn().unwrap();
        let pid = Tgid(sleeper.id());
        // Its mappings stay as they are once it sleeps (50 ms was not always enough on a loaded
        // machine).
        crate::testing::wait_until_asleep(pid.0, "sleep");
        let mut processes = Processes::new(TRACK_ALL);
        let process = processes.observe(pid, Tid(pid.0), "test", 0);
        let garbage = 0x10;
        let mut reads = 0;
        for _ in 0..100 {
            // A sample every 20 ms, for two seconds.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let before = process.read_at_ns;
            process.refresh_for(garbage, monotonic_ns());
            reads += u32::from(process.read_at_ns != before);
        }
        let past_spaces = process.past_spaces.len();
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(reads <= 6, "{reads} reads of unchanged maps in 2 s (every 0.1 s would be 20)");
        assert_eq!(past_spaces, 0, "an unchanged reading replaces nothing");
    }

    #[test]
    fn main_thread_comm_wins() {
        let pid = Tgid::own();
        let mut processes = Processes::new(TRACK_ALL);
        // Records taken after the process was first read from /proc.
        let now = monotonic_ns() + 1_000_000_000;
        processes.observe(pid, pid.main_thread(), "renamed", now + 10);
        assert_eq!(processes.observe(pid, Tid(pid.0 + 1), "other", now + 20).comm(), "renamed");
        // A record taken before that name was learned (sent late) does not undo it.
        assert_eq!(processes.observe(pid, pid.main_thread(), "older", now + 5).comm(), "renamed");
        assert_eq!(processes.observe(pid, pid.main_thread(), "newer", now + 30).comm(), "newer");
    }

    #[test]
    fn dlclose_then_dlopen_at_the_same_address() {
        let mut processes = Processes::new(TRACK_ALL);
        ghost(&mut processes);
        processes.apply(TaskEvent::Map { pid: GHOST, time_ns: 100, mapping: library(0x7000, 1) });
        processes.apply(TaskEvent::Map { pid: GHOST, time_ns: 200, mapping: library(0x7000, 2) });
        let process = ghost(&mut processes);
        assert_eq!(process.mapping(0x7010, 50), None, "before any mapping");
        assert_eq!(process.mapping(0x7010, 150).unwrap().inode, 1, "the first library, read late");
        assert_eq!(process.mapping(0x7010, 250).unwrap().inode, 2);
    }

    #[test]
    fn exec_forgets_the_old_image_but_not_for_old_samples() {
        let mut processes = Processes::new(TRACK_ALL);
        ghost(&mut processes);
        processes.apply(TaskEvent::Map { pid: GHOST, time_ns: 100, mapping: library(0x7000, 1) });
        processes.apply(TaskEvent::Exec { pid: GHOST, time_ns: 200, comm: "new".into() });
        let process = ghost(&mut processes);
        assert_eq!(process.comm(), "new");
        assert_eq!(process.mapping(0x7010, 150).unwrap().inode, 1);
        assert_eq!(process.mapping(0x7010, 250), None);
    }

    #[test]
    fn fork_copies_the_address_space() {
        let mut processes = Processes::new(Tracking { all: false, follow_forks: true });
        ghost(&mut processes);
        processes.apply(TaskEvent::Map { pid: GHOST, time_ns: 100, mapping: library(0x7000, 1) });
        processes.apply(TaskEvent::Fork { parent: GHOST, child: CHILD, time_ns: 150 });
        processes.apply(TaskEvent::Map { pid: Tgid(424_242), time_ns: 100, mapping: library(0x7000, 5) });
        let child = processes.observe(CHILD, CHILD.main_thread(), "child", 0);
        assert_eq!(child.mapping(0x7010, 200).unwrap().inode, 1);
        assert!(!processes.by_tgid.contains_key(&Tgid(424_242)), "untracked processes are ignored");
    }

    #[test]
    fn children_share_the_table_until_one_maps() {
        let mut processes = Processes::new(Tracking { all: false, follow_forks: true });
        ghost(&mut processes);
        processes.apply(TaskEvent::Map { pid: GHOST, time_ns: 100, mapping: library(0x7000, 1) });
        processes.apply(TaskEvent::Fork { parent: GHOST, child: CHILD, time_ns: 150 });
        let shared = |processes: &Processes| {
            Arc::ptr_eq(&processes.by_tgid[&GHOST].space, &processes.by_tgid[&CHILD].space)
        };
        assert!(shared(&processes), "forked without a copy");
        // The child runs exec: what it ran before still resolves, the parent keeps its own.
        processes.apply(TaskEvent::Exec { pid: CHILD, time_ns: 200, comm: "new".into() });
        processes.apply(TaskEvent::Map { pid: CHILD, time_ns: 210, mapping: library(0x7000, 2) });
        let child = processes.observe(CHILD, CHILD.main_thread(), "new", 0);
        assert_eq!(child.mapping(0x7010, 190).unwrap().inode, 1, "before its exec");
        assert_eq!(child.mapping(0x7010, 220).unwrap().inode, 2, "after");
        assert_eq!(
            processes.observe(GHOST, GHOST.main_thread(), "ghost", 0).mapping(0x7010, 220).unwrap().inode,
            1
        );
        // A second child maps something of its own: its table is its own from then on.
        processes.apply(TaskEvent::Fork { parent: GHOST, child: Tgid(CHILD.0 - 1), time_ns: 300 });
        processes.apply(TaskEvent::Map { pid: Tgid(CHILD.0 - 1), time_ns: 310, mapping: library(0x9000, 3) });
        assert!(processes.by_tgid[&GHOST].lookup(0x9010, 320).is_none());
        assert_eq!(processes.by_tgid[&Tgid(CHILD.0 - 1)].lookup(0x7010, 320).unwrap().inode, 1);
    }

    #[test]
    fn processes_gone_unreported_are_noticed_and_their_pid_reused() {
        let mut processes = Processes::new(TRACK_ALL);
        ghost(&mut processes);
        processes.observe(Tgid::own(), Tgid::own().main_thread(), "me", 0);
        processes.notice_exits(1_000);
        assert_eq!(processes.by_tgid[&GHOST].exited_at_ns, Some(1_000), "no /proc entry");
        assert_eq!(processes.by_tgid[&Tgid::own()].exited_at_ns, None);
        // Its pid is given to a child of ours: the fork replaces what was known of the pid.
        processes.apply(TaskEvent::Fork { parent: Tgid::own(), child: GHOST, time_ns: 1_100 });
        assert_eq!(processes.by_tgid[&GHOST].exited_at_ns, None);
        assert_eq!(processes.by_tgid[&GHOST].comm(), processes.by_tgid[&Tgid::own()].comm());
    }

    #[test]
    fn exited_processes_are_pruned_later() {
        let mut processes = Processes::new(TRACK_ALL);
        ghost(&mut processes);
        processes.apply(TaskEvent::Exit { pid: GHOST, time_ns: 1_000 });
        processes.prune(1_000 + KEEP_NS);
        assert!(processes.by_tgid.contains_key(&GHOST));
        processes.prune(1_001 + KEEP_NS);
        assert!(!processes.by_tgid.contains_key(&GHOST));
    }

    #[test]
    fn a_child_that_exits_on_another_cpu_is_forgotten() {
        // CPU 0's buffer, read first, holds the child's exit; CPU 1's holds its fork, earlier,
        // and a mapping made after the drain's horizon.
        let mut order = crate::kernel::task_events::TimeOrder::default();
        order.extend([TaskEvent::Exit { pid: CHILD, time_ns: 20 }]);
        order.extend([
            TaskEvent::Fork { parent: GHOST, child: CHILD, time_ns: 10 },
            TaskEvent::Map { pid: GHOST, time_ns: 40, mapping: library(0x7000, 1) },
        ]);
        let mut processes = Processes::new(Tracking { all: false, follow_forks: true });
        ghost(&mut processes);
        for event in order.take_until(30) {
            processes.apply(event);
        }
        assert!(processes.by_tgid[&(CHILD)].exited_at_ns.is_some(), "the fork came first, then the exit");
        assert_eq!(order.take_until(u64::MAX).len(), 1, "the later mapping waits for the next drain");
        let forgotten = processes.prune(21 + KEEP_NS);
        assert_eq!(forgotten, [CHILD]);
        assert!(!processes.by_tgid.contains_key(&(CHILD)), "no clone left for the pid's next owner");
    }

    #[test]
    fn newer_samples_reread_proc() {
        let pid = Tgid::own();
        let mut processes = Processes::new(TRACK_ALL);
        let process = processes.observe(pid, pid.main_thread(), "test", 0);
        // A mapping made after the process was first read, with no event for it; at an address
        // of its own, so that no other test's mapping was ever there.
        let len = 4096;
        let hint = 0x5f00_0000_0000usize + (std::process::id() as usize % 1024) * 0x10_0000;
        // SAFETY: a fresh anonymous mapping at an address nothing else uses, unmapped below.
        let addr = unsafe {
            mmap_anonymous(
                hint as *mut c_void,
                len,
                ProtFlags::READ | ProtFlags::EXEC,
                MapFlags::PRIVATE | MapFlags::FIXED_NOREPLACE,
            )
        }
        .unwrap() as u64;
        assert_eq!(addr, hint as u64, "mmap at the hint");
        assert!(process.mapping(addr, 0).is_none(), "an older sample does not trigger a read");
        assert!(process.mapping(addr, monotonic_ns() + REREAD_INTERVAL_NS).is_some(), "a newer one does");
        // SAFETY: the mapping made above.
        unsafe { munmap(addr as *mut c_void, len) }.unwrap();
    }
}
