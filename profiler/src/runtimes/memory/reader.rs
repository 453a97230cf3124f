//! Readers: processes of their own that read targets' memory for the profiler's threads, so
//! that no read can hold up a thread of the profiler for longer than [`DEADLINE`].
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
//! A reader runs on the CPU of the thread it serves, which hands over to it without waking
//! another CPU: about 6 µs a read here, against 20-50 µs to a reader woken on another.
use std::{
    cell::RefCell,
    fs::File,
    io,
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
    process::{Child, Command, Stdio},
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use memmap2::MmapRaw;
use rustix::{
    process::Pid,
    thread::{
        CpuSet,
        futex::{self, Flags, Timespec},
    },
};

use super::pages::{Outcome, PAGE, Processes};
use crate::model::Tgid;

/// What makes the `profiler` executable a reader, serving the channel it is given as
/// [`CHANNEL_FD`] (see `main`).
pub const READER_ARG: &str = "--serve-memory-reads";
/// How long a read may take before its reader is abandoned. A read takes microseconds; this
/// leaves room for a loaded machine not running the reader for a while.
pub const DEADLINE: Duration = Duration::from_millis(250);
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
}

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

/// Why a read got no answer.
struct Stuck;

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

    /// Fills `buf` from `addr` of `tgid` in reads of at most [`DATA`] bytes; `files` says
    /// whether a page of a file at an address may be read.
    fn read(
        &mut self,
        tgid: Tgid,
        addr: u64,
        buf: &mut [u8],
        files: &mut dyn FnMut(u64) -> bool,
    ) -> Result<bool, Stuck> {
        for (index, chunk) in buf.chunks_mut(DATA).enumerate() {
            let Some(at) = addr.checked_add((index * DATA) as u64) else { return Ok(false) };
            if !self.read_chunk(tgid, at, chunk, files)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn read_chunk(
        &mut self,
        tgid: Tgid,
        addr: u64,
        buf: &mut [u8],
        files: &mut dyn FnMut(u64) -> bool,
    ) -> Result<bool, Stuck> {
        for files_allowed in [false, true] {
            match self.ask(tgid, addr, buf.len(), files_allowed)? {
                Outcome::Read => {
                    // SAFETY: the data lies within the mapping, and the reader wrote it before it
                    // answered (its `Release` store, our `Acquire` load) and writes no more.
                    let data =
                        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(DATA_AT), buf.len()) };
                    buf.copy_from_slice(data);
                    return Ok(true);
                }
                Outcome::Refused => return Ok(false),
                Outcome::FilePages(count) => {
                    // SAFETY: as the data's, for the list of pages.
                    let pages = unsafe {
                        std::slice::from_raw_parts(self.map.as_ptr().add(PAGES_AT).cast::<u64>(), count)
                    };
                    if !pages.iter().all(|&page| files(page)) {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Asks for a read and waits for its answer, at most [`DEADLINE`].
    fn ask(&mut self, tgid: Tgid, addr: u64, len: usize, files_allowed: bool) -> Result<Outcome, Stuck> {
        self.follow_this_cpu();
        let channel = Channel::of(&self.map);
        channel.pid.store(tgid.0, Ordering::Relaxed);
        channel.addr.store(addr, Ordering::Relaxed);
        channel.len.store(len as u64, Ordering::Relaxed);
        channel.files_allowed.store(u32::from(files_allowed), Ordering::Relaxed);
        let asked = channel.asked.load(Ordering::Relaxed).wrapping_add(1);
        channel.asked.store(asked, Ordering::Release);
        let _ = futex::wake(&channel.asked, Flags::empty(), 1);
        let started = Instant::now();
        loop {
            let answered = channel.answered.load(Ordering::Acquire);
            if answered == asked {
                return Ok(channel.decode());
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
const TEST_ENTRY: &str = "runtimes::memory::reader::tests::serve_as_reader";

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

/// Fills `buf` from `addr` of process `tgid`, whose user (as `Identity::user` says) is `user`,
/// in this thread's reader: false if that memory cannot be read or a page of it is not present,
/// if `files` refuses a page of a file it spans (given the page's address), or if no answer
/// came in time (see the module's comment).
pub fn read(
    tgid: Tgid,
    user: Option<u32>,
    addr: u64,
    buf: &mut [u8],
    files: &mut dyn FnMut(u64) -> bool,
) -> bool {
    if barred(user) {
        return false;
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
        let ThreadReader::Running(running) = reader else { return false };
        match running.read(tgid, addr, buf, files) {
            Ok(read) => read,
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
                false
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
pub fn summary() -> Vec<String> {
    let mut lines = Vec::new();
    let stuck = STUCK.load(Ordering::Relaxed);
    if stuck > 0 {
        let barred = BARRED_USERS.lock().unwrap_or_else(PoisonError::into_inner);
        let users: Vec<String> = barred
            .iter()
            .map(|user| user.map_or_else(|| "unknown".to_owned(), |uid| uid.to_string()))
            .collect();
        lines.push(format!(
            "{stuck} reads of target memory got no answer within {} ms (memory mapped from a file whose FUSE \
             daemon does not answer?): their readers were abandoned, and the processes of users {} not read \
             while those waited (and for {} s after)",
            DEADLINE.as_millis(),
            users.join(", "),
            BARRED_FOR.as_secs()
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
        channel.answered.store(asked, Ordering::Release);
        let _ = futex::wake(&channel.answered, Flags::empty(), 1);
    }
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
        let mut reader = Reader::start().unwrap();
        let mut files = |_| false;
        assert!(matches!(reader.read(Tgid::own(), at, &mut buf, &mut files), Ok(true)));
        assert_eq!(u64::from_le_bytes(buf), word);
        let code = a_reader_reads_this_process_as_the_profiler_reads_targets as *const () as u64;
        let mut asked = Vec::new();
        let mut refuse = |page| {
            asked.push(page);
            false
        };
        assert!(matches!(reader.read(Tgid::own(), code, &mut buf, &mut refuse), Ok(false)), "a file refused");
        assert_eq!(asked, [code / PAGE * PAGE]);
        assert!(
            matches!(reader.read(Tgid::own(), code, &mut buf, &mut |_| true), Ok(true)),
            "a file allowed"
        );
        let large = vec![7u8; DATA + 5000];
        let mut copy = vec![0u8; large.len()];
        assert!(matches!(reader.read(Tgid::own(), large.as_ptr() as u64, &mut copy, &mut files), Ok(true)));
        assert!(copy == large, "a read larger than the channel, in two");
    }
}
