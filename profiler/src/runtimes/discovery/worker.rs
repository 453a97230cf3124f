//! The thread that examines files for discovery, away from the thread that drains samples:
//! opening a file may wait on its file system, and recognising an image reads much of it.
//!
//! Files wait in a queue per user (a user namespace counting as its outermost owner), taken
//! in turn, one user's file after another's: a user mapping thousands of files delays another
//! user's by at most one of its own at a time. Each user has at most [`MAX_QUEUED`] files
//! waiting; past that its processes are looked at again later. The thread works at most
//! [`BUSY_PER_SECOND`] of each second, however many files wait. A file examined for longer than
//! [`DEADLINE`] is given up on (taken as no runtime's image) and the thread left to it, a new
//! one taking the queue; after [`MAX_ABANDONED`] such threads, nothing more is examined.
use std::{
    collections::{BTreeMap, VecDeque},
    panic::AssertUnwindSafe,
    sync::{
        Arc, Condvar, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use super::{
    FileKey,
    examine::{Examined, Recogniser, examine},
};
use crate::{
    address_space::{Identity, Mapping},
    clock,
    model::Tgid,
};

/// Files of one user waiting to be examined, at most.
pub const MAX_QUEUED: usize = 1024;
/// How long one file may take to examine.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// Threads left to a file that took too long, at most: then nothing more is examined.
pub const MAX_ABANDONED: u32 = 4;
/// The share of each second the thread may work: files the targets chose cost the profiler a
/// quarter of a CPU at most.
const BUSY_PER_SECOND: Duration = Duration::from_millis(250);

/// A file to examine, through the process that maps it.
pub struct Job {
    pub key: FileKey,
    pub tgid: Tgid,
    pub identity: Identity,
    pub mapping: Mapping,
}

/// What a file was found to be: `None` when it could not be read through its process.
pub struct Answer {
    pub key: FileKey,
    pub examined: Option<Examined>,
}

/// The worker thread, its queue and its answers.
pub struct Worker {
    recognisers: Arc<[Box<dyn Recogniser>]>,
    queue: Arc<Queue>,
    thread: Option<Thread>,
    /// Threads left to a file that took too long.
    pub abandoned: u32,
}

/// One worker thread: where its answers come, and what it is examining.
struct Thread {
    answers: mpsc::Receiver<Answer>,
    busy: Arc<Busy>,
}

/// What a worker thread is examining: since when (CLOCK_MONOTONIC; 0: nothing), and which file.
#[derive(Default)]
struct Busy {
    since_ns: AtomicU64,
    key: Mutex<Option<FileKey>>,
}

#[derive(Default)]
struct Queue {
    waiting: Mutex<Waiting>,
    ready: Condvar,
}

#[derive(Default)]
struct Waiting {
    by_user: BTreeMap<Option<u32>, VecDeque<Job>>,
    /// The user whose file was taken last.
    last: Option<Option<u32>>,
    closed: bool,
}

impl Worker {
    pub fn new(recognisers: Arc<[Box<dyn Recogniser>]>) -> Self {
        let mut worker = Self { recognisers, queue: Arc::default(), thread: None, abandoned: 0 };
        worker.thread = worker.spawn();
        worker
    }

    /// Queues `job` for `user`; false when that user has [`MAX_QUEUED`] files waiting, or
    /// nothing is examined any more.
    pub fn push(&self, user: Option<u32>, job: Job) -> bool {
        if self.thread.is_none() {
            return false;
        }
        let pushed = self.queue.lock().push(user, job);
        if pushed {
            self.queue.ready.notify_one();
        }
        pushed
    }

    /// The answers come by `now_ns`; the file under way for longer than [`DEADLINE`] is given
    /// up on, answered as no runtime's image, and its thread left to it.
    pub fn answers(&mut self, now_ns: u64) -> Vec<Answer> {
        let Some(thread) = &self.thread else { return Vec::new() };
        let mut answers: Vec<Answer> = thread.answers.try_iter().collect();
        let since_ns = thread.busy.since_ns.load(Ordering::Acquire);
        let overdue = since_ns != 0 && now_ns.saturating_sub(since_ns) > DEADLINE.as_nanos() as u64;
        let key = *thread.busy.key.lock().unwrap_or_else(PoisonError::into_inner);
        if overdue && let Some(key) = key {
            answers.push(Answer { key, examined: Some(Examined { given_up: true, ..Examined::default() }) });
            self.abandoned += 1;
            self.thread = if self.abandoned < MAX_ABANDONED { self.spawn() } else { None };
        }
        answers
    }

    /// Whether files are still examined.
    pub fn examining(&self) -> bool {
        self.thread.is_some()
    }

    fn spawn(&self) -> Option<Thread> {
        let (send, answers) = mpsc::channel();
        let busy = Arc::new(Busy::default());
        let (queue, recognisers, working) = (self.queue.clone(), self.recognisers.clone(), busy.clone());
        std::thread::Builder::new()
            .name("discovery".into())
            .spawn(move || work(&queue, &recognisers, &working, &send))
            .ok()?;
        Some(Thread { answers, busy })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Not joined: a thread held by a file system must not hold up the session's end.
        self.queue.lock().closed = true;
        self.queue.ready.notify_all();
    }
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next job, the next user's in turn; `None` once closed.
    fn next(&self) -> Option<Job> {
        let mut waiting = self.lock();
        loop {
            if waiting.closed {
                return None;
            }
            if let Some(job) = waiting.take() {
                return Some(job);
            }
            waiting = self.ready.wait(waiting).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Waiting {
    fn push(&mut self, user: Option<u32>, job: Job) -> bool {
        let queued = self.by_user.entry(user).or_default();
        if queued.len() >= MAX_QUEUED {
            return false;
        }
        queued.push_back(job);
        true
    }

    fn take(&mut self) -> Option<Job> {
        use std::ops::Bound::{Excluded, Unbounded};
        let after = match self.last {
            Some(last) => self.by_user.range((Excluded(last), Unbounded)).next().map(|(user, _)| *user),
            None => None,
        };
        let user = after.or_else(|| self.by_user.keys().next().copied())?;
        let queued = self.by_user.get_mut(&user)?;
        let job = queued.pop_front();
        if queued.is_empty() {
            self.by_user.remove(&user);
        }
        self.last = Some(user);
        job
    }
}

/// The worker thread: examines what the queue hands it until the queue closes or nobody takes
/// its answers (it was left to a file that took too long).
fn work(queue: &Queue, recognisers: &[Box<dyn Recogniser>], busy: &Busy, answers: &mpsc::Sender<Answer>) {
    let mut second = Instant::now();
    let mut worked = Duration::ZERO;
    while let Some(job) = queue.next() {
        if second.elapsed() >= Duration::from_secs(1) {
            (second, worked) = (Instant::now(), Duration::ZERO);
        } else if worked >= BUSY_PER_SECOND {
            std::thread::sleep(Duration::from_secs(1).saturating_sub(second.elapsed()));
            (second, worked) = (Instant::now(), Duration::ZERO);
        }
        let started = Instant::now();
        *busy.key.lock().unwrap_or_else(PoisonError::into_inner) = Some(job.key);
        busy.since_ns.store(clock::monotonic_ns(), Ordering::Release);
        // A panic in a parser on a hostile file costs that file.
        let examined = std::panic::catch_unwind(AssertUnwindSafe(|| {
            examine(recognisers, job.tgid, &job.identity, &job.mapping)
        }))
        .unwrap_or_else(|_| Some(Examined::default()));
        busy.since_ns.store(0, Ordering::Release);
        worked += started.elapsed();
        if answers.send(Answer { key: job.key, examined }).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(key: u64) -> Job {
        Job {
            key: FileKey { dev: 0, inode: key, path: 0 },
            tgid: Tgid::own(),
            identity: Identity::own(),
            mapping: Mapping::pseudo("[anon]", 0, 0x1000),
        }
    }

    #[test]
    fn users_take_turns_and_each_waits_within_its_bound() {
        let mut waiting = Waiting::default();
        for (user, key) in [(Some(1000), 1), (Some(1000), 2), (Some(1000), 3), (Some(0), 10), (None, 20)] {
            assert!(waiting.push(user, job(key)));
        }
        let order: Vec<u64> = std::iter::from_fn(|| waiting.take()).map(|job| job.key.inode).collect();
        assert_eq!(order, [20, 10, 1, 2, 3], "one file of each user in turn, then the rest");
        for key in 0..MAX_QUEUED as u64 {
            assert!(waiting.push(Some(1000), job(key)));
        }
        assert!(!waiting.push(Some(1000), job(0)), "a user's queue is full");
        assert!(waiting.push(Some(0), job(0)), "another's is not");
        assert_eq!(waiting.take().unwrap().key.inode, 0, "and its file comes next");
        let worker = Worker { recognisers: Arc::new([]), queue: Arc::default(), thread: None, abandoned: 0 };
        assert!(!worker.push(Some(1), job(1)), "nothing examined without a thread");
    }
}
