//! The thread that examines files for discovery, away from the thread that drains samples:
//! opening a file may wait on its file system, and recognising an image reads much of it.
//!
//! Files wait in a queue per user (a user namespace counting as its outermost owner), taken
//! in turn, one user's file after another's: a user mapping thousands of files delays another
//! user's by at most one of its own at a time. Each user has at most [`MAX_QUEUED`] files
//! waiting; past that its processes are looked at again later. The thread works at most
//! [`BUSY_PER_SECOND`] of each second, however many files wait. A file examined for longer than
//! [`DEADLINE`] is given up on (taken as no runtime's image) and the thread left to it, a new
//! one taking the queue; a user whose files made [`MAX_ABANDONED_PER_USER`] threads be left has
//! no more files examined, and after [`MAX_ABANDONED`] threads left in all, nothing more is.
use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc},
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

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
pub(super) const MAX_QUEUED: usize = 1024;
/// How long one file may take to examine.
pub(super) const DEADLINE: Duration = Duration::from_secs(2);
/// Threads left to a file that took too long, at most for one user's files, and in all.
pub(super) const MAX_ABANDONED_PER_USER: u32 = 2;
pub(super) const MAX_ABANDONED: u32 = 16;
/// The share of each second the thread may work: files the targets chose cost the profiler a
/// quarter of a CPU at most.
const BUSY_PER_SECOND: Duration = Duration::from_millis(250);

/// A file to examine, through the process that maps it, for its user.
pub(super) struct Job {
    pub key: FileKey,
    pub user: Option<u32>,
    pub tgid: Tgid,
    pub identity: Identity,
    pub mapping: Mapping,
}

/// What a file was found to be, for the user it was examined for: `None` when it could not be
/// read through its process.
pub(super) struct Answer {
    pub key: FileKey,
    pub user: Option<u32>,
    pub examined: Option<Examined>,
}

/// The worker thread, its queue and its answers.
pub(super) struct Worker {
    recognisers: Arc<[Box<dyn Recogniser>]>,
    queue: Arc<Queue>,
    thread: Option<Thread>,
    /// Threads left to a file that took too long, by the user it was examined for.
    abandoned: FxHashMap<Option<u32>, u32>,
}

/// One worker thread: where its answers come, and what it is examining.
struct Thread {
    answers: mpsc::Receiver<Answer>,
    busy: Arc<Mutex<Option<Examining>>>,
}

/// The file a worker thread is examining, for whom, and since when (CLOCK_MONOTONIC).
#[derive(Clone, Copy)]
struct Examining {
    key: FileKey,
    user: Option<u32>,
    since_ns: u64,
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
    pub(super) fn new(recognisers: Arc<[Box<dyn Recogniser>]>) -> Self {
        let mut worker =
            Self { recognisers, queue: Arc::default(), thread: None, abandoned: FxHashMap::default() };
        worker.thread = worker.spawn();
        worker
    }

    /// Queues `job`; false when its user has [`MAX_QUEUED`] files waiting, or no more of its
    /// files, or nobody's, are examined.
    pub(super) fn push(&self, job: Job) -> bool {
        if !self.examines(job.user) {
            return false;
        }
        let pushed = self.queue.lock().push(job);
        if pushed {
            self.queue.ready.notify_one();
        }
        pushed
    }

    /// The answers come by `now_ns`; the file under way for longer than [`DEADLINE`] is given
    /// up on, answered as no runtime's image, and its thread left to it.
    pub(super) fn answers(&mut self, now_ns: u64) -> Vec<Answer> {
        let Some(thread) = &self.thread else { return Vec::new() };
        let mut answers: Vec<Answer> = thread.answers.try_iter().collect();
        let examining = *thread.busy.lock().unwrap_or_else(PoisonError::into_inner);
        let overdue = examining.filter(|at| now_ns.saturating_sub(at.since_ns) > DEADLINE.as_nanos() as u64);
        if let Some(Examining { key, user, .. }) = overdue {
            let given_up = Examined { given_up: true, ..Examined::default() };
            answers.push(Answer { key, user, examined: Some(given_up) });
            *self.abandoned.entry(user).or_default() += 1;
            let abandoned: u32 = self.abandoned.values().sum();
            self.thread = if abandoned < MAX_ABANDONED { self.spawn() } else { None };
        }
        answers
    }

    /// Whether `user`'s files are examined (any user's: `None`... is a user too, as not known).
    pub(super) fn examines(&self, user: Option<u32>) -> bool {
        self.thread.is_some() && self.abandoned.get(&user).is_none_or(|&left| left < MAX_ABANDONED_PER_USER)
    }

    /// Whether files are still examined at all.
    pub(super) fn examining(&self) -> bool {
        self.thread.is_some()
    }

    /// Threads left to files that took too long, in all.
    pub(super) fn abandoned(&self) -> u32 {
        self.abandoned.values().sum()
    }

    fn spawn(&self) -> Option<Thread> {
        let (send, answers) = mpsc::channel();
        let busy = Arc::new(Mutex::new(None));
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
    fn push(&mut self, job: Job) -> bool {
        let queued = self.by_user.entry(job.user).or_default();
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

/// The time the thread may still work: [`BUSY_PER_SECOND`] more each second, up to that much,
/// each file examined taking its time (a file that took longer leaves it owed).
struct WorkTime {
    left_ns: i64,
    at: Instant,
}

impl WorkTime {
    fn new(now: Instant) -> Self {
        Self { left_ns: BUSY_PER_SECOND.as_nanos() as i64, at: now }
    }

    /// How long to rest at `now` before the next file: none while time is left, else until
    /// what is owed is earned back.
    fn rest(&mut self, now: Instant) -> Duration {
        let share = BUSY_PER_SECOND.as_secs_f64();
        let earned = (now.saturating_duration_since(self.at).as_nanos() as f64 * share) as i64;
        self.left_ns = self.left_ns.saturating_add(earned).min(BUSY_PER_SECOND.as_nanos() as i64);
        self.at = now;
        match self.left_ns {
            left if left >= 0 => Duration::ZERO,
            owed => Duration::from_nanos(owed.unsigned_abs()).div_f64(share),
        }
    }

    /// A file took `took`.
    fn spend(&mut self, took: Duration) {
        self.left_ns = self.left_ns.saturating_sub(i64::try_from(took.as_nanos()).unwrap_or(i64::MAX));
    }
}

/// The worker thread: examines what the queue hands it until the queue closes or nobody takes
/// its answers (it was left to a file that took too long).
fn work(
    queue: &Queue,
    recognisers: &[Box<dyn Recogniser>],
    busy: &Mutex<Option<Examining>>,
    answers: &mpsc::Sender<Answer>,
) {
    let mut time = WorkTime::new(Instant::now());
    while let Some(job) = queue.next() {
        std::thread::sleep(time.rest(Instant::now()));
        let started = Instant::now();
        let examining = Examining { key: job.key, user: job.user, since_ns: clock::monotonic_ns() };
        *busy.lock().unwrap_or_else(PoisonError::into_inner) = Some(examining);
        let examined = examine(recognisers, job.tgid, &job.identity, &job.mapping);
        *busy.lock().unwrap_or_else(PoisonError::into_inner) = None;
        time.spend(started.elapsed());
        if answers.send(Answer { key: job.key, user: job.user, examined }).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{address_space::Mappings, runtimes::Mark};

    fn job(user: Option<u32>, key: u64) -> Job {
        Job {
            key: FileKey { dev: 0, inode: key },
            user,
            tgid: Tgid::own(),
            identity: Identity::own(),
            mapping: Mapping::pseudo("[anon]", 0, 0x1000),
        }
    }

    #[test]
    fn users_take_turns_and_each_waits_within_its_bound() {
        let mut waiting = Waiting::default();
        for (user, key) in [(Some(1000), 1), (Some(1000), 2), (Some(1000), 3), (Some(0), 10), (None, 20)] {
            assert!(waiting.push(job(user, key)));
        }
        let order: Vec<u64> = std::iter::from_fn(|| waiting.take()).map(|job| job.key.inode).collect();
        assert_eq!(order, [20, 10, 1, 2, 3], "one file of each user in turn, then the rest");
        for key in 0..MAX_QUEUED as u64 {
            assert!(waiting.push(job(Some(1000), key)));
        }
        assert!(!waiting.push(job(Some(1000), 0)), "a user's queue is full");
        assert!(waiting.push(job(Some(0), 0)), "another's is not");
        assert_eq!(waiting.take().unwrap().key.inode, 0, "and its file comes next");
    }

    #[test]
    fn the_thread_works_a_quarter_of_the_time_at_most() {
        let start = Instant::now();
        let mut time = WorkTime::new(start);
        assert_eq!(time.rest(start), Duration::ZERO, "a quarter of a second to work at first");
        time.spend(Duration::from_millis(200));
        assert_eq!(time.rest(start), Duration::ZERO, "some time left");
        time.spend(Duration::from_secs(1));
        let owed = time.rest(start);
        assert!(
            owed >= Duration::from_millis(3799),
            "a second past what was left is rested off four times: {owed:?}"
        );
        let later = start + owed;
        assert_eq!(time.rest(later), Duration::ZERO, "then work again");
    }

    /// Takes long over any file it recognises.
    struct Slow;

    impl Recogniser for Slow {
        fn marks(&self, mark: Mark<'_>) -> bool {
            mark == Mark::Symbol(b"malloc")
        }

        fn recognise(
            &self,
            _: &super::super::ImageFile<'_>,
        ) -> anyhow::Result<Option<Arc<dyn std::any::Any + Send + Sync>>> {
            std::thread::sleep(Duration::from_millis(300));
            Ok(None)
        }
    }

    /// A file examined past the deadline is answered as given up on, and its thread left: a new
    /// one takes the queue.
    #[test]
    fn a_file_examined_too_long_is_given_up_on_and_its_thread_left() {
        let mut worker = Worker::new(Arc::new([Box::new(Slow) as Box<dyn Recogniser>]));
        let own = Mappings::read(Tgid::own()).unwrap();
        let libc = own
            .executable_files()
            .iter()
            .find(|mapping| format!("{:?}", mapping.backing).contains("libc.so"))
            .cloned()
            .expect("this process maps a C library");
        let key = FileKey { dev: libc.dev, inode: libc.inode };
        let job = Job { key, user: Some(7), tgid: Tgid::own(), identity: Identity::own(), mapping: libc };
        assert!(worker.push(job));
        let examining = |worker: &Worker| worker.thread.as_ref().unwrap().busy.lock().unwrap().is_some();
        let waited = Instant::now();
        while !examining(&worker) {
            assert!(waited.elapsed() < Duration::from_secs(20), "the worker took the file");
            std::thread::sleep(Duration::from_millis(1));
        }
        let later = clock::monotonic_ns() + DEADLINE.as_nanos() as u64 + 1;
        let answers = worker.answers(later);
        assert!(matches!(
            answers[..],
            [Answer { user: Some(7), examined: Some(Examined { given_up: true, .. }), .. }]
        ));
        assert_eq!(worker.abandoned(), 1);
        assert!(
            worker.examining() && worker.examines(Some(7)),
            "a new thread, the user's files examined still"
        );
    }

    #[test]
    fn a_user_whose_files_hold_threads_has_none_examined_any_more() {
        let mut worker = Worker::new(Arc::new([]));
        assert!(worker.examines(Some(7)));
        worker.abandoned.insert(Some(7), MAX_ABANDONED_PER_USER);
        assert!(!worker.examines(Some(7)) && !worker.push(job(Some(7), 1)), "that user's files");
        assert!(worker.examines(Some(8)) && worker.push(job(Some(8), 1)), "another user's");
    }
}
