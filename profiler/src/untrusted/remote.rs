//! Files of network file systems (a server answers for them: see `mounts`) are opened and copied
//! on threads of their own, never on the pipeline: a server that does not answer holds up one of
//! those threads, not the draining of samples, nor the stop at `-d` or Ctrl-C (such a wait ends
//! with the process). Until its copy is ready a file is "not yet" (its frames are named by
//! address meanwhile); a copy not ready after [`DEADLINE`] is given up on (its thread's result,
//! should it come, is let go). At most [`MAX_RUNNING`] copies are under way: while that many
//! wait for their servers, other such files wait too. What such a file says of its owner is its
//! server's: it is copied into memory and trusted as anyone's. A FUSE daemon's files are not
//! asked for at all ([`not_asked`]).
use std::{
    io,
    os::fd::OwnedFd,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

use super::{
    Parts, StableFile,
    open::{self, MappedAt},
};

/// How long a file may take to open and copy.
pub(crate) const DEADLINE: Duration = Duration::from_secs(5);
/// Files opened at once at most.
const MAX_RUNNING: usize = 4;

static JOBS: Mutex<Option<FxHashMap<(u64, u64), Job>>> = Mutex::new(None);
static GIVEN_UP: AtomicU64 = AtomicU64::new(0);

/// A copy under way on its thread, or done and not asked for yet.
struct Job {
    started: Instant,
    done: mpsc::Receiver<io::Result<StableFile>>,
    result: Option<io::Result<StableFile>>,
    given_up: bool,
}

impl Job {
    fn running(&self) -> bool {
        self.result.is_none()
    }
}

/// The file `handle` names (an `O_PATH` one, on the file `mapping` was made from), copied:
/// `WouldBlock` while its copy is under way or waits for room (ask again), `TimedOut` when it
/// was not ready in time. The handle itself is opened: the file whose file system was asked.
pub(crate) fn open(handle: OwnedFd, mapping: MappedAt) -> io::Result<StableFile> {
    let mut jobs = JOBS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let jobs = jobs.get_or_insert_with(FxHashMap::default);
    // Results come in; those given up on, or nobody asked for in time, are let go (and with
    // them their descriptors and copies).
    jobs.retain(|_, job| {
        if job.running()
            && let Ok(result) = job.done.try_recv()
        {
            job.result = Some(result);
        }
        job.running() || (!job.given_up && job.started.elapsed() < 2 * DEADLINE)
    });
    let key = (mapping.dev, mapping.inode);
    if let Some(job) = jobs.get_mut(&key) {
        if let Some(result) = job.result.take() {
            jobs.remove(&key);
            return result;
        }
        if job.given_up || job.started.elapsed() < DEADLINE {
            return Err(not_yet());
        }
        job.given_up = true;
        GIVEN_UP.fetch_add(1, Ordering::Relaxed);
        return Err(io::Error::new(io::ErrorKind::TimedOut, "its file system did not answer in time"));
    }
    if jobs.values().filter(|job| job.running()).count() >= MAX_RUNNING {
        return Err(not_yet());
    }
    let (sender, done) = mpsc::sync_channel(1);
    std::thread::Builder::new().name("profiler-remote".into()).spawn(move || {
        let copied = open::reopen(handle).and_then(|file| open::copied(file, Parts::Module));
        let _ = sender.send(copied);
    })?;
    jobs.insert(key, Job { started: Instant::now(), done, result: None, given_up: false });
    Err(not_yet())
}

/// Files of a daemon's file system not read (see `mounts`), for the summary.
static NOT_ASKED: AtomicU64 = AtomicU64::new(0);

/// What a file of a daemon's file system (FUSE) is refused with: nothing is asked of its daemon,
/// which need never answer, and whose wait nothing ends. Counted.
pub(crate) fn not_asked() -> io::Error {
    NOT_ASKED.fetch_add(1, Ordering::Relaxed);
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "a FUSE daemon, or a user's overlay, answers for it: not asked",
    )
}

/// Files of daemons' file systems not read, for the summary.
pub(crate) fn not_asked_count() -> u64 {
    NOT_ASKED.load(Ordering::Relaxed)
}

/// What a file whose copy is under way is refused with, for now.
fn not_yet() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "its copy is under way")
}

/// What a file is refused with while who answers for it cannot be known (see `mounts`), for now.
pub(crate) fn not_known_yet() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "who answers for its file system is not known yet")
}

/// Whether `err` is [`open`]'s "not yet", or [`not_known_yet`].
pub(crate) fn is_not_yet(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::WouldBlock
}

/// Files given up on (not ready in time), for the summary.
pub(crate) fn given_up() -> u64 {
    GIVEN_UP.load(Ordering::Relaxed)
}
