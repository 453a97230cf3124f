//! Readers: processes of their own that read targets' memory for the profiler's threads, and
//! open the links to their mapped files, so that no such read can hold up a thread of the
//! profiler for longer than [`DEADLINE`].
//!
//! A read of another process's memory waits on whatever backs it. Only pages found present are
//! read (see `pages`), but a target may map a FUSE daemon's file over such a page between that
//! look and the read, and the read then waits for the daemon, which need never answer: no
//! signal ends that wait, not even SIGKILL. So the profiler makes no such read itself. Each of
//! its threads that reads target memory has a reader (the profiler's own executable, started
//! with [`READER_ARG`]), asks it through a shared mapping, and waits at most [`DEADLINE`]. A
//! reader that does not answer in time is abandoned: killed (it goes when its wait ends), never
//! waited for, and counted, and the thread starts another at its next read. The user whose
//! process it was reading is read no more (their runtimes' frames are left unnamed) while that
//! reader lives, and for [`BARRED_FOR`] at least: a user's daemon costs the profiler one
//! [`DEADLINE`] at a time. (The target it read waits as long: the read holds its memory's lock.)
//! While [`MAX_STUCK`] abandoned readers live, no target memory is read.
//!
//! Looking up a process's links in `/proc/PID/map_files` waits for its memory's lock, which a
//! process holds as long as one of its own reads of its memory waits for a daemon (while
//! another of its threads waits to map memory, nobody else gets the lock): readers do that too
//! ([`open_mapped`]), and hand the descriptor over (`pidfd_getfd`). So does reading its
//! `/proc/PID/maps` on kernels before 6.17 (later ones read it under each mapping's own lock):
//! readers read that too ([`maps`]).
//!
//! A reader runs on the CPU of the thread it serves, at the lowest real-time priority: woken, it
//! takes that CPU at once, reads, and gives it back. On a CPU kept busy by any user's
//! processes, a reader of normal priority, even at nice -20, waited for the scheduler's tick
//! and often longer (up to a third of a second a read, seconds in all over 8 s here), and the
//! thread it serves with it. (A reader only ever waits or reads: its priority cannot be used to
//! hold a CPU.)
use std::{
    cell::RefCell,
    fs::File,
    io,
    os::{
        fd::{AsRawFd as _, OwnedFd},
        unix::process::CommandExt as _,
    },
    process::{Child, Command, Stdio},
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use memmap2::MmapRaw;
use rustix::{
    fs::{Mode, OFlags},
    process::Pid,
    thread::{
        CpuSet,
        futex::{self, Flags, Timespec},
    },
};

mod pages;

pub(crate) use self::pages::PAGE;
use self::pages::{Outcome, Processes};
use crate::model::Tgid;

/// What makes the `profiler` executable a reader, serving the channel it is given as
/// [`CHANNEL_FD`] (see `main`).
pub const READER_ARG: &str = "--serve-memory-reads";
/// How long a read may take before its reader is abandoned. A read takes microseconds; this
/// leaves room for a loaded machine not running the reader for a while.
pub(crate) const DEADLINE: Duration = Duration::from_millis(250);
/// How long a reader may take to start.
const START_DEADLINE: Duration = Duration::from_secs(5);
/// How long a user is read no more, at least, after a read of one of their processes got no
/// answer.
const BARRED_FOR: Duration = Duration::from_secs(60);
/// Abandoned readers alive at most while target memory is read.
const MAX_STUCK: usize = 8;
/// The descriptor a reader finds its channel at.
const CHANNEL_FD: i32 = 3;
/// Bytes read at once at most: a larger read takes several.
const DATA: usize = 1 << 20;
/// Where, in the channel, the pages of files a read found are listed, and its data begins.
const PAGES_AT: usize = PAGE as usize;
const MAX_FILE_PAGES: usize = PAGE as usize / 8;
const DATA_AT: usize = 2 * PAGE as usize;

/// The head of the mapping a thread shares with its reader.
#[repr(C)]
struct Channel {
    /// 1 once the reader serves.
    ready: AtomicU32,
    /// What is asked: [`READ`] `len` bytes at `addr` of `pid`, or [`OPEN_MAPPED`] the link to the
    /// file `pid` maps from `addr` to `len`.
    kind: AtomicU32,
    /// The number of the latest request: the reader waits for it to change.
    asked: AtomicU32,
    /// The number of the latest request answered: the thread waits for it to become `asked`.
    answered: AtomicU32,
    pid: AtomicU32,
    addr: AtomicU64,
    len: AtomicU64,
    /// 1 when pages of files may be read: their files were found to be the kernel's.
    files_allowed: AtomicU32,
    /// The answer: [`Outcome`], as [`Channel::encode`] writes it.
    outcome: AtomicU32,
    file_pages: AtomicU32,
    /// The answer to [`OPEN_MAPPED`]: the reader's descriptor, or the error's negated number;
    /// to [`READ_MAPS`]: 0, or the error's negated number.
    opened: AtomicI32,
    /// The answer to [`READ_MAPS`]: the bytes of text put in the data (0: the text's end).
    filled: AtomicU64,
}

const READ: u32 = 0;
const OPEN_MAPPED: u32 = 1;
/// The next at most `len` bytes of the text of `/proc/PID/maps` of `pid`, from its start if
/// `addr` is [`MAPS_FROM_START`] (the file is kept open between requests: one text).
const READ_MAPS: u32 = 2;
const MAPS_FROM_START: u64 = 1;

impl Channel {
    /// The channel at the head of `map`.
    fn of(map: &MmapRaw) -> &Self {
        // SAFETY: the mapping is `DATA_AT + DATA` bytes long and page-aligned, and a `Channel`
        // is atomics only, for which any bytes are valid; the other process only ever writes
        // them as atomics too.
        unsafe { &*map.as_ptr().cast::<Self>() }
    }

    fn encode(&self, outcome: &Outcome) {
        let (code, pages) = match outcome {
            Outcome::Read => (0, 0),
            Outcome::Refused => (1, 0),
            Outcome::FilePages(pages) => (2, *pages),
        };
        self.file_pages.store(pages as u32, Ordering::Relaxed);
        self.outcome.store(code, Ordering::Relaxed);
    }

    fn decode(&self) -> Outcome {
        match self.outcome.load(Ordering::Relaxed) {
            0 => Outcome::Read,
            2 => Outcome::FilePages((self.file_pages.load(Ordering::Relaxed) as usize).min(MAX_FILE_PAGES)),
            _ => Outcome::Refused,
        }
    }
}

/// A thread's reader.
struct Reader {
    /// `None` once abandoned.
    child: Option<Child>,
    map: MmapRaw,
    /// The CPU it was last put on.
    cpu: Option<usize>,
}

/// Why a request got no answer.
struct Stuck;

/// What a read came to, in the thread.
enum Read {
    Done,
    Refused,
    /// The pages of files it spans, which the profiler must allow first.
    FilePages(Vec<u64>),
}

impl Reader {
    fn start() -> Result<Self> {
        let memfd = rustix::fs::memfd_create("profiler-reader", rustix::fs::MemfdFlags::CLOEXEC)?;
        rustix::fs::ftruncate(&memfd, (DATA_AT + DATA) as u64)?;
        let map = MmapRaw::map_raw(&File::from(memfd.try_clone()?))?;
        let fd = memfd.as_raw_fd();
        let mut command = reader_command();
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        // SAFETY: between fork and exec, only async-signal-safe calls: the channel put where the
        // reader looks for it (kept across exec), every other descriptor closed at exec (the
        // profiler's are, but not all those it was given), and the reader killed when the
        // thread that started it ends, the profiler with it.
        unsafe {
            command.pre_exec(move || {
                let moved = if fd == CHANNEL_FD {
                    libc::fcntl(fd, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, CHANNEL_FD)
                };
                let others =
                    libc::close_range(CHANNEL_FD as u32 + 1, u32::MAX, libc::CLOSE_RANGE_CLOEXEC as i32);
                if moved < 0 || others < 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().context("cannot start it")?;
        run_at_once(&child);
        let reader = Self { child: Some(child), map, cpu: None };
        let started = Instant::now();
        let channel = Channel::of(&reader.map);
        while channel.ready.load(Ordering::Acquire) == 0 {
            let Some(left) = START_DEADLINE.checked_sub(started.elapsed()) else {
                drop(reader.abandon());
                anyhow::bail!("it did not start within {} s", START_DEADLINE.as_secs());
            };
            let _ = futex::wait(&channel.ready, Flags::empty(), 0, Some(&timespec(left)));
        }
        Ok(reader)
    }

    /// Fills `buf` (at most [`DATA`] bytes) from `addr` of `tgid`, pages of files only if
    /// `files_allowed`, else [`Read::FilePages`], waiting at most [`DEADLINE`].
    fn read(&mut self, tgid: Tgid, addr: u64, buf: &mut [u8], files_allowed: bool) -> Result<Read, Stuck> {
        let channel = Channel::of(&self.map);
        channel.files_allowed.store(u32::from(files_allowed), Ordering::Relaxed);
        self.call(READ, tgid, addr, buf.len() as u64)?;
        Ok(match Channel::of(&self.map).decode() {
            Outcome::Read => {
                // SAFETY: the data lies within the mapping, and the reader wrote it before it
                // answered (its `Release` store, our `Acquire` load) and writes no more.
                let data = unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(DATA_AT), buf.len()) };
                buf.copy_from_slice(data);
                Read::Done
            }
            Outcome::Refused => Read::Refused,
            Outcome::FilePages(count) => {
                // SAFETY: as the data's, for the list of pages.
                let pages = unsafe {
                    std::slice::from_raw_parts(self.map.as_ptr().add(PAGES_AT).cast::<u64>(), count)
                };
                Read::FilePages(pages.to_vec())
            }
        })
    }

    /// An `O_PATH` handle on the link in `/proc/PID/map_files` to the file `tgid` maps at
    /// `start..end`, opened by the reader (the lookup waits for the process's memory's lock).
    fn open_mapped(&mut self, tgid: Tgid, start: u64, end: u64) -> Result<io::Result<OwnedFd>, Stuck> {
        self.call(OPEN_MAPPED, tgid, start, end)?;
        let opened = Channel::of(&self.map).opened.load(Ordering::Relaxed);
        if opened < 0 {
            return Ok(Err(io::Error::from_raw_os_error(-opened)));
        }
        // A pidfd only for this, which is rare: a reader holds no descriptor of the profiler's.
        let Some(pid) = self.child.as_ref().map(Pid::from_child) else { return Err(Stuck) };
        let taken =
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).and_then(|pidfd| {
                rustix::process::pidfd_getfd(&pidfd, opened, rustix::process::PidfdGetfdFlags::empty())
            });
        Ok(taken.map_err(io::Error::from))
    }

    /// The next bytes of the text of `/proc/PID/maps` of `tgid` (from its start if
    /// `from_start`) into `buf`: how many (0 at its end).
    fn read_maps(
        &mut self,
        tgid: Tgid,
        from_start: bool,
        buf: &mut [u8],
    ) -> Result<io::Result<usize>, Stuck> {
        let len = buf.len().min(DATA);
        self.call(READ_MAPS, tgid, if from_start { MAPS_FROM_START } else { 0 }, len as u64)?;
        let channel = Channel::of(&self.map);
        let answer = channel.opened.load(Ordering::Relaxed);
        if answer < 0 {
            return Ok(Err(io::Error::from_raw_os_error(-answer)));
        }
        let filled = (channel.filled.load(Ordering::Relaxed) as usize).min(len);
        // SAFETY: as a read's data: within the mapping, written before the answer.
        let data = unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(DATA_AT), filled) };
        buf[..filled].copy_from_slice(data);
        Ok(Ok(filled))
    }

    /// Asks the reader and waits for its answer, at most [`DEADLINE`].
    fn call(&mut self, kind: u32, tgid: Tgid, addr: u64, len: u64) -> Result<(), Stuck> {
        self.follow_this_cpu();
        let channel = Channel::of(&self.map);
        channel.kind.store(kind, Ordering::Relaxed);
        channel.pid.store(tgid.0, Ordering::Relaxed);
        channel.addr.store(addr, Ordering::Relaxed);
        channel.len.store(len, Ordering::Relaxed);
        let asked = channel.asked.load(Ordering::Relaxed).wrapping_add(1);
        channel.asked.store(asked, Ordering::Release);
        let _ = futex::wake(&channel.asked, Flags::empty(), 1);
        let started = Instant::now();
        loop {
            let answered = channel.answered.load(Ordering::Acquire);
            if answered == asked {
                return Ok(());
            }
            let left = DEADLINE.checked_sub(started.elapsed()).ok_or(Stuck)?;
            let _ = futex::wait(&channel.answered, Flags::empty(), answered, Some(&timespec(left)));
        }
    }

    /// Puts the reader on the CPU this thread runs on.
    fn follow_this_cpu(&mut self) {
        let cpu = rustix::thread::sched_getcpu();
        if self.cpu != Some(cpu) {
            let mut set = CpuSet::new();
            set.set(cpu);
            // (Never `None`, which would be this thread.)
            if let Some(pid) = self.child.as_ref().and_then(|child| Pid::from_raw(child.id() as i32)) {
                let _ = rustix::thread::sched_setaffinity(Some(pid), &set);
            }
            self.cpu = Some(cpu);
        }
    }

    /// Kills the reader, and lets it go: a reader waiting for a daemon dies only once its wait
    /// ends, which may be never. (What it may still write goes to its own mapping of the
    /// channel.)
    fn abandon(mut self) -> Option<Child> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        Some(child)
    }
}

impl Drop for Reader {
    /// Ends a reader that answers (one that does not was abandoned).
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Gives `reader` the lowest real-time priority (see the module's comment), or says in the
/// summary why it could not have it (a container or cgroup without real-time time): it then
/// waits for a CPU as other processes do.
fn run_at_once(reader: &Child) {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: a plain system call on our child, with a valid parameter.
    let set = unsafe {
        libc::sched_setscheduler(reader.id() as i32, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
    };
    if set < 0 {
        let err = io::Error::last_os_error();
        NOT_REAL_TIME.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(err.to_string());
    }
}

/// How `profiler` is started as a reader: the executable running now, given [`READER_ARG`]. A
/// test binary is asked to run its one test that serves as a reader.
fn reader_command() -> Command {
    let mut command = Command::new("/proc/self/exe");
    if cfg!(test) {
        command
            .args(["--exact", TEST_ENTRY, "--ignored", "--test-threads=1", "--nocapture"])
            .env(TEST_ENTRY, "1");
    } else {
        command.arg(READER_ARG);
    }
    command
}

/// The name of the test that serves as a reader in the library's test binary.
const TEST_ENTRY: &str = "untrusted::reader::tests::serve_as_reader";

fn timespec(duration: Duration) -> Timespec {
    Timespec { tv_sec: duration.as_secs() as i64, tv_nsec: i64::from(duration.subsec_nanos()) }
}

/// Each thread's reader: none yet, running, or one that could not start (not tried again).
enum ThreadReader {
    None,
    Running(Reader),
    Failed,
}

thread_local! {
    static READER: RefCell<ThreadReader> = const { RefCell::new(ThreadReader::None) };
}

/// A reader abandoned: whose process it was reading, when, and the reader until it is gone.
struct Abandoned {
    user: Option<u32>,
    at: Instant,
    reader: Option<Child>,
}

static ABANDONED: Mutex<Vec<Abandoned>> = Mutex::new(Vec::new());
/// Readers abandoned, and the users whose processes they read, for the summary.
static STUCK: AtomicU64 = AtomicU64::new(0);
static BARRED_USERS: Mutex<Vec<Option<u32>>> = Mutex::new(Vec::new());
/// Why a reader could not start, the first time one could not.
static NOT_STARTED: Mutex<Option<String>> = Mutex::new(None);
/// Why a reader could not have its real-time priority, the first time one could not.
static NOT_REAL_TIME: Mutex<Option<String>> = Mutex::new(None);

/// Fills `buf` from `addr` of process `tgid`, whose user (as `Identity::user` says) is `user`,
/// in this thread's reader: false if that memory cannot be read or a page of it is not present,
/// if `files` refuses a page of a file it spans (given the page's address), or if no answer
/// came in time (see the module's comment).
pub(crate) fn read(
    tgid: Tgid,
    user: Option<u32>,
    addr: u64,
    buf: &mut [u8],
    files: &mut dyn FnMut(u64) -> bool,
) -> bool {
    for (index, chunk) in buf.chunks_mut(DATA).enumerate() {
        let Some(at) = addr.checked_add((index * DATA) as u64) else { return false };
        // Asked of `files` between the reader's answers: it may ask the reader itself.
        let mut files_allowed = false;
        loop {
            match with_reader(user, |reader| reader.read(tgid, at, chunk, files_allowed)) {
                Some(Read::Done) => break,
                Some(Read::FilePages(pages)) if !files_allowed && pages.iter().all(|&page| files(page)) => {
                    files_allowed = true;
                }
                _ => return false,
            }
        }
    }
    true
}

/// An `O_PATH` handle on the file process `tgid` (of `user`) maps at `start..end`, through its
/// link in `/proc/PID/map_files`, opened in this thread's reader: looking it up waits for the
/// process's memory's lock, which the process can hold as long as a daemon keeps one of its own
/// reads waiting. `WouldBlock` while the user's processes are not read.
pub(crate) fn open_mapped(tgid: Tgid, user: Option<u32>, start: u64, end: u64) -> io::Result<OwnedFd> {
    with_reader(user, |reader| reader.open_mapped(tgid, start, end)).unwrap_or_else(|| Err(not_read_now()))
}

/// Starts this thread's reader now, if it has none: a thread whose reads must not wait calls
/// this before its work starts. (Starting a reader waits for a new process to get a CPU, which
/// took most of a second here on CPUs kept busy by others.)
pub(crate) fn start_for_this_thread() {
    with_reader(None, |_| Ok(()));
}

/// The text of `/proc/PID/maps` of process `tgid` (of `user`), read by this thread's reader a
/// chunk at a time. Once a chunk got no answer (or the user's processes are not read now),
/// reading fails with `WouldBlock`: the process's maps are not known for now.
pub(crate) fn maps(tgid: Tgid, user: Option<u32>) -> MapsText {
    MapsText { tgid, user, started: false, failed: false }
}

/// See [`maps`].
pub(crate) struct MapsText {
    tgid: Tgid,
    user: Option<u32>,
    started: bool,
    failed: bool,
}

impl io::Read for MapsText {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let from_start = !std::mem::replace(&mut self.started, true);
        let read = (!self.failed)
            .then(|| with_reader(self.user, |reader| reader.read_maps(self.tgid, from_start, buf)))
            .flatten();
        read.unwrap_or_else(|| {
            self.failed = true;
            Err(not_read_now())
        })
    }
}

/// What is refused while a user's processes are not read.
fn not_read_now() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "its process's memory is not read for now")
}

/// What `ask` does with this thread's reader (started first if need be); `None` if the user's
/// processes are not read now, no reader could start, or it did not answer in time (abandoned).
fn with_reader<T>(user: Option<u32>, ask: impl FnOnce(&mut Reader) -> Result<T, Stuck>) -> Option<T> {
    if barred(user) {
        return None;
    }
    READER.with_borrow_mut(|reader| {
        if matches!(reader, ThreadReader::None) {
            *reader = match Reader::start() {
                Ok(started) => ThreadReader::Running(started),
                Err(err) => {
                    NOT_STARTED
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get_or_insert(format!("{err:#}"));
                    ThreadReader::Failed
                }
            };
        }
        let ThreadReader::Running(running) = reader else { return None };
        match ask(running) {
            Ok(answer) => Some(answer),
            Err(Stuck) => {
                if let ThreadReader::Running(stuck) = std::mem::replace(reader, ThreadReader::None) {
                    let reader = stuck.abandon();
                    ABANDONED.lock().unwrap_or_else(PoisonError::into_inner).push(Abandoned {
                        user,
                        at: Instant::now(),
                        reader,
                    });
                }
                STUCK.fetch_add(1, Ordering::Relaxed);
                let mut barred = BARRED_USERS.lock().unwrap_or_else(PoisonError::into_inner);
                if !barred.contains(&user) {
                    barred.push(user);
                }
                None
            }
        }
    })
}

/// Whether `user`'s processes are not read now, or none are (see the module's comment).
fn barred(user: Option<u32>) -> bool {
    let mut abandoned = ABANDONED.lock().unwrap_or_else(PoisonError::into_inner);
    if abandoned.is_empty() {
        return false;
    }
    for one in abandoned.iter_mut() {
        if one.reader.as_mut().is_some_and(|reader| !matches!(reader.try_wait(), Ok(None))) {
            one.reader = None;
        }
    }
    abandoned.retain(|one| one.reader.is_some() || one.at.elapsed() < BARRED_FOR);
    abandoned.iter().filter(|one| one.reader.is_some()).count() >= MAX_STUCK
        || abandoned.iter().any(|one| one.user == user)
}

/// The summary's lines about readers: those abandoned and the users barred, and why one could
/// not start.
pub(crate) fn summary() -> Vec<String> {
    let mut lines = Vec::new();
    let stuck = STUCK.load(Ordering::Relaxed);
    if stuck > 0 {
        let barred = BARRED_USERS.lock().unwrap_or_else(PoisonError::into_inner);
        let users: Vec<String> = barred
            .iter()
            .map(|user| user.map_or_else(|| "unknown".to_owned(), |uid| uid.to_string()))
            .collect();
        lines.push(format!(
            "{stuck} reads of targets' memory (or of the links to their mapped files) got no answer within {} \
             ms (memory mapped from a file whose FUSE daemon does not answer, or held by a read of the \
             target's own that waits for one?): their readers were abandoned, and the processes of users \
             {} not read while those waited (and for {} s after)",
            DEADLINE.as_millis(),
            users.join(", "),
            BARRED_FOR.as_secs()
        ));
    }
    if let Some(err) = NOT_REAL_TIME.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
        lines.push(format!(
            "readers of target memory could not run at real-time priority ({err}): on busy CPUs each \
             read waits for the scheduler, and samples may be lost"
        ));
    }
    if let Some(err) = NOT_STARTED.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
        lines.push(format!(
            "a reader of target memory could not start ({err}): runtimes' frames were not named"
        ));
    }
    lines
}

/// Serves the channel at [`CHANNEL_FD`] until the profiler ends: what `profiler` does when
/// started with [`READER_ARG`].
pub fn serve() -> Result<()> {
    // SAFETY: the descriptor the profiler put there for us, ours alone.
    let memfd = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(CHANNEL_FD) };
    let map = MmapRaw::map_raw(&memfd).context("cannot map its channel")?;
    anyhow::ensure!(map.len() == DATA_AT + DATA, "its channel is not a reader's");
    let _ = rustix::thread::set_name(c"profiler-reader");
    let channel = Channel::of(&map);
    let mut processes = Processes::default();
    let mut maps = None;
    // The descriptor last opened, until the profiler has taken its copy.
    let mut _opened: Option<OwnedFd> = None;
    let mut seen = channel.asked.load(Ordering::Acquire);
    channel.ready.store(1, Ordering::Release);
    let _ = futex::wake(&channel.ready, Flags::empty(), 1);
    loop {
        let asked = channel.asked.load(Ordering::Acquire);
        if asked == seen {
            let _ = futex::wait(&channel.asked, Flags::empty(), seen, None);
            continue;
        }
        seen = asked;
        // The profiler has taken its copy of what was opened for the request before.
        _opened = None;
        if channel.kind.load(Ordering::Relaxed) == OPEN_MAPPED {
            let answer = match open_mapped_here(channel) {
                Ok(fd) => {
                    let raw = fd.as_raw_fd();
                    _opened = Some(fd);
                    raw
                }
                Err(err) => -err.raw_os_error(),
            };
            channel.opened.store(answer, Ordering::Relaxed);
        } else if channel.kind.load(Ordering::Relaxed) == READ_MAPS {
            let answer = serve_maps(channel, &map, &mut maps).map_or_else(|err| -err.raw_os_error(), |()| 0);
            channel.opened.store(answer, Ordering::Relaxed);
        } else {
            serve_read(channel, &map, &mut processes);
        }
        channel.answered.store(asked, Ordering::Release);
        let _ = futex::wake(&channel.answered, Flags::empty(), 1);
    }
}

/// [`OPEN_MAPPED`], in the reader.
fn open_mapped_here(channel: &Channel) -> rustix::io::Result<OwnedFd> {
    let (pid, start, end) = (
        channel.pid.load(Ordering::Relaxed),
        channel.addr.load(Ordering::Relaxed),
        channel.len.load(Ordering::Relaxed),
    );
    rustix::fs::open(
        super::open::map_files_path(Tgid(pid), start, end),
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// [`READ_MAPS`], in the reader: `maps` is the text being read, and whose.
fn serve_maps(channel: &Channel, map: &MmapRaw, maps: &mut Option<(u32, File)>) -> rustix::io::Result<()> {
    let (pid, len) =
        (channel.pid.load(Ordering::Relaxed), (channel.len.load(Ordering::Relaxed) as usize).min(DATA));
    channel.filled.store(0, Ordering::Relaxed);
    if channel.addr.load(Ordering::Relaxed) == MAPS_FROM_START {
        *maps = None;
        let file =
            rustix::fs::open(format!("/proc/{pid}/maps"), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
        *maps = Some((pid, File::from(file)));
    }
    let Some((_, file)) = maps.as_mut().filter(|(of, _)| *of == pid) else {
        return Err(rustix::io::Errno::INVAL);
    };
    // SAFETY: the data lies within the mapping, and the thread asking touches it only once we
    // answer.
    let data = unsafe { std::slice::from_raw_parts_mut(map.as_mut_ptr().add(DATA_AT), len) };
    let mut filled = 0;
    while filled < len {
        match rustix::io::read(&*file, &mut data[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(rustix::io::Errno::INTR) => {}
            Err(err) => return Err(err),
        }
    }
    channel.filled.store(filled as u64, Ordering::Relaxed);
    Ok(())
}

/// [`READ`], in the reader.
fn serve_read(channel: &Channel, map: &MmapRaw, processes: &mut Processes) {
    let len = (channel.len.load(Ordering::Relaxed) as usize).min(DATA);
    // SAFETY: the data and the list of pages lie within the mapping, and the thread asking
    // touches neither until we answer.
    let (data, pages) = unsafe {
        (
            std::slice::from_raw_parts_mut(map.as_mut_ptr().add(DATA_AT), len),
            std::slice::from_raw_parts_mut(map.as_mut_ptr().add(PAGES_AT).cast::<u64>(), MAX_FILE_PAGES),
        )
    };
    let outcome = processes.read(
        channel.pid.load(Ordering::Relaxed),
        channel.addr.load(Ordering::Relaxed),
        data,
        channel.files_allowed.load(Ordering::Relaxed) == 1,
        pages,
    );
    channel.encode(&outcome);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The way into this test binary as a reader, which [`reader_command`] takes.
    #[test]
    #[ignore = "run by the tests that read target memory, as their reader, with its channel"]
    fn serve_as_reader() {
        assert!(std::env::var_os(TEST_ENTRY).is_some(), "started by a reader's start only");
        if let Err(err) = serve() {
            panic!("{err:#}");
        }
    }

    #[test]
    fn a_reader_reads_this_process_as_the_profiler_reads_targets() {
        let word = 0x1234_5678_9abc_def0u64;
        let at = &word as *const u64 as u64;
        let mut buf = [0u8; 8];
        let mut files = |_| false;
        assert!(read(Tgid::own(), None, at, &mut buf, &mut files));
        assert_eq!(u64::from_le_bytes(buf), word);
        let code = a_reader_reads_this_process_as_the_profiler_reads_targets as *const () as u64;
        let mut asked = Vec::new();
        let mut refuse = |page| {
            asked.push(page);
            false
        };
        assert!(!read(Tgid::own(), None, code, &mut buf, &mut refuse), "a file refused");
        assert_eq!(asked, [code / PAGE * PAGE]);
        // Allowed as the profiler allows one: asking the reader for the file's link.
        let mut allow = |page| {
            let handle = open_mapped(Tgid::own(), None, page, page + PAGE);
            handle.is_err_and(|err| err.kind() == io::ErrorKind::NotFound)
        };
        assert!(read(Tgid::own(), None, code, &mut buf, &mut allow), "a file allowed");
        let large = vec![7u8; DATA + 5000];
        let mut copy = vec![0u8; large.len()];
        assert!(read(Tgid::own(), None, large.as_ptr() as u64, &mut copy, &mut files));
        assert!(copy == large, "a read larger than the channel, in two");
    }

    #[test]
    fn a_reader_opens_the_links_to_mapped_files() {
        use std::os::unix::fs::MetadataExt as _;
        // As the profiler runs: as root, which alone opens /proc/PID/map_files.
        if !crate::testing::e2e_enabled() {
            return;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let line = maps.lines().find(|line| line.ends_with(exe.to_str().unwrap())).unwrap();
        let (start, end) = line.split_whitespace().next().unwrap().split_once('-').unwrap();
        let (start, end) = (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap());
        let handle = open_mapped(Tgid::own(), None, start, end).unwrap();
        let (ours, theirs) = (std::fs::metadata(&exe).unwrap(), rustix::fs::fstat(&handle).unwrap());
        assert_eq!((theirs.st_dev, theirs.st_ino), (ours.dev(), ours.ino()), "the mapped file itself");
        let gone = open_mapped(Tgid::own(), None, start, end + 1).unwrap_err();
        assert_eq!(gone.kind(), io::ErrorKind::NotFound, "no such mapping");
    }
}
