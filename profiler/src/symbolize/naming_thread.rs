//! The [`Namer`] on a thread of its own. The first names from a module can take a second
//! (blazesym reads a few hundred MiB of DWARF); meanwhile the session's loop goes on draining
//! records, noticing signals and cutting windows, and only waits for names where it needs them
//! all: when a window's recording is made, and at the end.
//!
//! Jobs are done in the order they are handed over, so a process or module is forgotten only
//! after the frames handed over before it are named.
use std::{
    pin::Pin,
    sync::mpsc,
    task::{Context, Poll},
    thread::{self, JoinHandle},
};

use anyhow::{Context as _, Result, anyhow};
use tokio::sync::oneshot;

use super::{DebugInfo, Namer, NamingReport, NewFrames, Symbols};
use crate::{address_space::ModuleSet, kernel::names::KernelNamer, model::Tgid};

enum Job {
    Name(NewFrames),
    Forget { gone: Vec<Tgid>, now_ns: u64 },
    ForgetModules(ModuleSet),
    Finish { now_ns: u64, symbols: oneshot::Sender<Symbols> },
}

/// What the thread is handed: a job, or the end.
enum Message {
    Job(Job),
    Stop,
}

pub(crate) struct NamingThread {
    jobs: mpsc::Sender<Message>,
    /// Until [`NamingThread::stop`].
    thread: Option<JoinHandle<NamingReport>>,
}

impl NamingThread {
    /// With `kernel` to name kernel frames (see [`super::Symbolizer::new`]).
    pub(crate) fn start(debug_info: DebugInfo, kernel: Result<KernelNamer>) -> Result<Self> {
        let (jobs, queue) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("naming".into())
            .spawn(move || work(&queue, Namer::new(debug_info, kernel)))
            .context("cannot start the naming thread")?;
        Ok(Self { jobs, thread: Some(thread) })
    }

    /// Names `frames`, in the background.
    pub(crate) fn name(&self, frames: NewFrames) {
        if !frames.is_empty() {
            self.send(Job::Name(frames));
        }
    }

    /// Forgets the perf maps of processes gone, at `now_ns`.
    pub(crate) fn forget(&self, gone: &[Tgid], now_ns: u64) {
        if !gone.is_empty() {
            self.send(Job::Forget { gone: gone.to_vec(), now_ns });
        }
    }

    /// Lets go of what was read of `modules` (evicted from the registry).
    pub(crate) fn forget_modules(&self, modules: ModuleSet) {
        self.send(Job::ForgetModules(modules));
    }

    /// The names of every frame handed over so far (see [`Namer::finish`]), once they are
    /// named; the frames handed over next start a new set of names.
    pub(crate) fn finish(&self, now_ns: u64) -> Finished {
        let (symbols, named) = oneshot::channel();
        self.send(Job::Finish { now_ns, symbols });
        Finished(named)
    }

    /// Waits for the jobs handed over, and says what naming has to say. Naming is over after
    /// it.
    pub(crate) fn stop(&mut self) -> Result<NamingReport> {
        // Fails only once the thread is gone, which joining it reports.
        let _ = self.jobs.send(Message::Stop);
        let thread = self.thread.take().ok_or_else(|| anyhow!("naming was stopped already"))?;
        thread.join().map_err(|_| failed())
    }

    fn send(&self, job: Job) {
        // Fails only once the thread is gone, which `finish` and `stop` report.
        let _ = self.jobs.send(Message::Job(job));
    }
}

/// Names on their way ([`NamingThread::finish`]).
pub(crate) struct Finished(oneshot::Receiver<Symbols>);

impl Future for Finished {
    type Output = Result<Symbols>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Result<Symbols>> {
        Pin::new(&mut self.0).poll(context).map(|named| named.map_err(|_| failed()))
    }
}

fn failed() -> anyhow::Error {
    anyhow!("naming failed (an internal error): frames are left unnamed")
}

/// Does the jobs, until told to stop or until nobody can send more (the session ended early).
/// A job that panics (a dependency tripping on a corrupt file outside the places that contain
/// it already) costs its own names, not the thread.
fn work(queue: &mpsc::Receiver<Message>, mut namer: Namer) -> NamingReport {
    for message in queue {
        let Message::Job(job) = message else { break };
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| do_job(&mut namer, job)));
        if done.is_err() {
            namer.failed_jobs += 1;
        }
    }
    namer.report()
}

fn do_job(namer: &mut Namer, job: Job) {
    match job {
        Job::Name(frames) => namer.name(frames),
        Job::Forget { gone, now_ns } => gone.into_iter().for_each(|tgid| namer.forget(tgid, now_ns)),
        Job::ForgetModules(modules) => {
            namer.forget_modules(&modules);
            // The files close here, if the registry let them go.
            drop(modules);
            // blazesym's parsed files are many small allocations, which glibc keeps in its
            // arenas once freed: an agent seeing programs come and go all day would keep
            // the most it ever held.
            // SAFETY: malloc_trim has no preconditions.
            unsafe { libc::malloc_trim(0) };
        }
        Job::Finish { now_ns, symbols } => _ = symbols.send(namer.finish(now_ns)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        address_space::{AddressSpaces, Tracking, Want},
        frame::Frame,
        model::SymbolKind,
        runtimes::Runtimes,
        testing::no_kernel_namer,
    };

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        std::hint::black_box(7)
    }

    /// Frames handed over before a finish are in its names, those after in the next.
    #[tokio::test]
    async fn finish_names_what_was_handed_over_before_it() {
        let pid = Tgid::own();
        let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
        let mut view = spaces.observe(pid, pid.main_thread(), "test", 0);
        let addr = a_function_to_find as *const () as usize as u64 + 1;
        let frame = Frame::user(pid, 0, addr, view.resolve(addr, Want::Any));
        let kernel = Frame::Kernel(0xffff_ffff_8100_0000);
        let mut naming = NamingThread::start(DebugInfo::Own, no_kernel_namer()).unwrap();
        naming.name(NewFrames::new(vec![frame], &spaces, &Runtimes::new(false), 0));
        let first = naming.finish(0).await.unwrap();
        naming.name(NewFrames::new(vec![kernel], &spaces, &Runtimes::new(false), 0));
        let second = naming.finish(0).await.unwrap();
        assert!(first.of(&frame)[0].name.ends_with("a_function_to_find"), "{:?}", first.of(&frame));
        assert_eq!(first.of(&frame)[0].kind, SymbolKind::Function);
        assert!(!first.contains(&kernel) && !second.contains(&frame));
        assert_eq!(second.of(&kernel)[0].kind, SymbolKind::Kernel);
        assert_eq!(naming.stop().unwrap().failed_jobs, 0);
    }
}
