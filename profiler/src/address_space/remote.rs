//! Files of network file systems (a server answers for them: see `mounts`) are opened and copied
//! on threads of their own, never on the pipeline: a server that does not answer holds up one of
//! those threads, not the draining of samples, nor the stop at `-d` or Ctrl-C (such a wait ends
//! with the process). Until its copy is ready a file is "not yet" (its frames are named by
//! address meanwhile); a copy not ready after [`DEADLINE`] is given up on, and once
//! [`MAX_STUCK`] threads never came back no such file is opened any more. What such a file says
//! of its owner is its server's: it is copied into memory and trusted as anyone's. A FUSE
//! daemon's files are not asked for at all ([`not_asked`]).
use std::{
    io,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

use super::{Mapping, Parts, StableFile, open};
use crate::model::Tgid;

/// How long a file may take to open and copy.
pub const DEADLINE: Duration = Duration::from_secs(5);
/// Files opened at once at most.
const MAX_RUNNING: usize = 4;
/// Threads that never came back, after which no such file is opened.
pub const MAX_STUCK: u64 = 4;

static JOBS: Mutex<Option<FxHashMap<(u64, u64), Job>>> = Mutex::new(None);
static STUCK: AtomicU64 = AtomicU64::new(0);
static GIVEN_UP: AtomicU64 = AtomicU64::new(0);

struct Job {
    started: Instant,
    done: mpsc::Receiver<io::Result<StableFile>>,
}

/// The file `mapping` of process `tgid` was made from, copied: `WouldBlock` while its copy is
/// under way (ask again), `TimedOut` when it was not ready in time.
pub fn open(tgid: Tgid, mapping: &Mapping) -> io::Result<StableFile> {
    let mut jobs = JOBS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let jobs = jobs.get_or_insert_with(FxHashMap::default);
    let key = (mapping.dev, mapping.inode);
    if let Some(job) = jobs.get(&key) {
        return match job.done.try_recv() {
            Ok(result) => {
                jobs.remove(&key);
                result
            }
            Err(mpsc::TryRecvError::Empty) if job.started.elapsed() < DEADLINE => Err(not_yet()),
            Err(_) => {
                jobs.remove(&key);
                STUCK.fetch_add(1, Ordering::Relaxed);
                GIVEN_UP.fetch_add(1, Ordering::Relaxed);
                Err(io::Error::new(io::ErrorKind::TimedOut, "its file system did not answer in time"))
            }
        };
    }
    if STUCK.load(Ordering::Relaxed) >= MAX_STUCK {
        GIVEN_UP.fetch_add(1, Ordering::Relaxed);
        return Err(io::Error::other("files of file systems that do not answer are no longer opened"));
    }
    if jobs.len() >= MAX_RUNNING {
        return Err(not_yet());
    }
    let (sender, done) = mpsc::sync_channel(1);
    let mapping = mapping.clone();
    let started = std::thread::Builder::new().name("profiler-remote".into()).spawn(move || {
        let copied = open::mapped_file(tgid, &mapping).and_then(|file| open::copied(file, Parts::Module));
        let _ = sender.send(copied);
    });
    started?;
    jobs.insert(key, Job { started: Instant::now(), done });
    Err(not_yet())
}

/// Files of a daemon's file system not read (see `mounts`), for the summary.
static NOT_ASKED: AtomicU64 = AtomicU64::new(0);

/// What a file of a daemon's file system (FUSE) is refused with: nothing is asked of its daemon,
/// which need never answer, and whose wait nothing ends. Counted.
pub fn not_asked() -> io::Error {
    NOT_ASKED.fetch_add(1, Ordering::Relaxed);
    io::Error::new(io::ErrorKind::PermissionDenied, "a FUSE daemon answers for it: not asked")
}

/// Files of daemons' file systems not read, for the summary.
pub fn not_asked_count() -> u64 {
    NOT_ASKED.load(Ordering::Relaxed)
}

/// What a file whose copy is under way is refused with, for now.
fn not_yet() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "its copy is under way")
}

/// Whether `err` is [`open`]'s "not yet".
pub fn is_not_yet(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::WouldBlock
}

/// Files given up on (not ready in time, or no longer opened), for the summary.
pub fn given_up() -> u64 {
    GIVEN_UP.load(Ordering::Relaxed)
}
