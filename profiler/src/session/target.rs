//! What to profile: existing processes (`-p`), a command started for the purpose (`-- CMD`),
//! or the whole system; and knowing when the targets have exited.
use std::{
    ffi::OsString,
    fs::File,
    io::{self, Read as _, Write as _},
    os::{
        fd::{AsRawFd as _, BorrowedFd, OwnedFd},
        unix::process::CommandExt as _,
    },
    process::{Child, Command},
    thread::JoinHandle,
};

use anyhow::{Context as _, Result, anyhow, bail};
use rustix::{
    io::Errno,
    pipe::{PipeFlags, pipe_with},
    process::{Pid, PidfdFlags, getpid, pidfd_open},
};
use tokio::io::unix::AsyncFd;

use crate::{model::Tgid, untrusted::read_bounded};

/// What a session profiles, before it starts: running processes, a command forked and held
/// before `exec`, or the whole system.
pub(crate) enum Target {
    Processes(Vec<ProcessHandle>),
    Command(PendingCommand),
    System,
}

impl Target {
    /// `-p PID...`, else `-- CMD`, else the whole system.
    pub(crate) fn open(pids: &[Tgid], command: &[OsString]) -> Result<Self> {
        Ok(if !pids.is_empty() {
            Self::Processes(pids.iter().map(|&Tgid(pid)| ProcessHandle::open(pid)).collect::<Result<_>>()?)
        } else if !command.is_empty() {
            Self::Command(PendingCommand::spawn(command)?)
        } else {
            Self::System
        })
    }

    /// The processes to follow from the start (none: the whole system).
    pub(crate) fn pids(&self) -> Vec<Tgid> {
        match self {
            Self::Processes(handles) => handles.iter().map(|handle| Tgid(handle.pid())).collect(),
            Self::Command(pending) => vec![Tgid(pending.pid())],
            Self::System => Vec::new(),
        }
    }

    /// What is profiled, for titles: `PID 1234`, `./server --port 80`, `the whole system`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Processes(handles) => {
                let pids: Vec<String> = handles.iter().map(|h| h.pid().to_string()).collect();
                format!("PID {}", pids.join(", "))
            }
            Self::Command(pending) => command_line(&pending.argv),
            Self::System => "the whole system".into(),
        }
    }

    /// Lets a held command run.
    pub(crate) fn start(self) -> Result<Running> {
        Ok(match self {
            Self::Processes(handles) => Running::Processes(handles),
            Self::Command(pending) => Running::Command(pending.start()?),
            Self::System => Running::System,
        })
    }
}

/// A target once started.
pub(crate) enum Running {
    Processes(Vec<ProcessHandle>),
    Command(StartedCommand),
    System,
}

impl Running {
    /// Completes when every target process has exited (never, system-wide).
    pub(crate) async fn exited(&self) {
        match self {
            Self::Processes(handles) => {
                for handle in handles {
                    handle.exited().await;
                }
            }
            Self::Command(command) => command.handle.exited().await,
            Self::System => std::future::pending().await,
        }
    }

    /// Says how a command that failed exited.
    pub(crate) fn note_exit_status(&mut self) {
        if let Self::Command(command) = self
            && let Some(status) = command.child.try_wait().ok().flatten().filter(|s| !s.success())
        {
            eprintln!("profiler: note: the command exited with {status}");
        }
    }
}

/// A process, by a pidfd that becomes readable when the process exits.
pub(crate) struct ProcessHandle {
    pid: u32,
    pidfd: AsyncFd<OwnedFd>,
}

impl ProcessHandle {
    /// Opens a handle on an existing process; a thread id stands for its process.
    pub(crate) fn open(pid: u32) -> Result<Self> {
        let tgid = thread_group(pid)?;
        let tgid_id = Pid::from_raw(tgid as i32).ok_or_else(|| anyhow!("no process with PID {pid}"))?;
        let pidfd = pidfd_open(tgid_id, PidfdFlags::empty()).map_err(|err| match err {
            Errno::SRCH => anyhow!("no process with PID {pid}"),
            _ => anyhow!("cannot watch PID {pid}: {err}"),
        })?;
        // SAFETY: the OwnedFd stays open for as long as it is registered.
        let pidfd = unsafe { AsyncFd::register(pidfd) }.context("cannot watch a pidfd")?;
        Ok(Self { pid: tgid, pidfd })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Completes when the process has exited.
    pub(crate) async fn exited(&self) {
        // A pidfd polls readable once the process is gone; an error means the same for us.
        let _ = self.pidfd.readable().await;
    }
}

fn thread_group(pid: u32) -> Result<u32> {
    let status =
        read_bounded(&format!("/proc/{pid}/status")).ok_or_else(|| anyhow!("no process with PID {pid}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))
        .and_then(|tgid| tgid.trim().parse().ok())
        .ok_or_else(|| anyhow!("cannot read the thread group of PID {pid}"))
}

/// A command and its arguments as one line, for titles and messages.
fn command_line(argv: &[OsString]) -> String {
    argv.iter().map(|arg| arg.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

/// A command forked and held just before `exec`, so that the profiler can add it to the filter
/// and start sampling before its first instruction runs.
pub(crate) struct PendingCommand {
    pid: u32,
    go: File,
    spawner: JoinHandle<io::Result<Child>>,
    argv: Vec<OsString>,
}

impl PendingCommand {
    pub(crate) fn spawn(argv: &[OsString]) -> Result<Self> {
        let (program, args) = argv.split_first().ok_or_else(|| anyhow!("no command given after `--`"))?;
        let (mut report_read, report_write) = pipe()?;
        let (go_read, go_write) = pipe()?;
        let (report_fd, go_read_fd, go_write_fd) =
            (report_write.as_raw_fd(), go_read.as_raw_fd(), go_write.as_raw_fd());
        let mut command = Command::new(program);
        command.args(args);
        // SAFETY: between fork and exec the closure only makes async-signal-safe calls (rustix's
        // are bare system calls: getpid, close, write, read) on descriptors it does not own, which
        // stay open in the child until exec.
        unsafe {
            command.pre_exec(move || {
                // Our copy of the write end would keep read() from seeing the profiler exit.
                rustix::io::close(go_write_fd);
                let pid = getpid().as_raw_nonzero().get();
                let _ = rustix::io::write(BorrowedFd::borrow_raw(report_fd), &pid.to_ne_bytes());
                let mut go = [0u8];
                match rustix::io::read(BorrowedFd::borrow_raw(go_read_fd), &mut go[..]) {
                    Ok(1) => Ok(()),
                    _ => Err(io::Error::other("the profiler did not start the command")),
                }
            });
        }
        // std's spawn() returns only once the child has exec'd: run it on a thread while this
        // one learns the pid and, later, says go.
        let spawner = std::thread::spawn(move || {
            let child = command.spawn();
            drop((report_write, go_read));
            child
        });
        let mut pid = [0u8; size_of::<i32>()];
        if report_read.read_exact(&mut pid).is_err() {
            let err = spawner.join().map_err(|_| anyhow!("the command spawner panicked"))?.err();
            bail!(
                "cannot run {}: {}",
                program.to_string_lossy(),
                err.map_or("fork failed".into(), |e| e.to_string())
            );
        }
        Ok(Self {
            pid: i32::from_ne_bytes(pid) as u32,
            go: File::from(go_write),
            spawner,
            argv: argv.to_vec(),
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The program, as given.
    pub(crate) fn program(&self) -> &OsString {
        &self.argv[0]
    }

    /// Lets the command exec.
    fn start(mut self) -> Result<StartedCommand> {
        let name = self.program().to_string_lossy().into_owned();
        self.go.write_all(&[1]).with_context(|| format!("cannot start {name}"))?;
        drop(self.go);
        let child = self
            .spawner
            .join()
            .map_err(|_| anyhow!("the command spawner panicked"))?
            .with_context(|| format!("cannot run {name}"))?;
        let handle = ProcessHandle::open(child.id())?;
        Ok(StartedCommand { child, handle })
    }
}

pub(crate) struct StartedCommand {
    child: Child,
    handle: ProcessHandle,
}

fn pipe() -> Result<(File, OwnedFd)> {
    let (read, write) = pipe_with(PipeFlags::CLOEXEC).context("cannot create a pipe")?;
    Ok((File::from(read), write))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_such_pid() {
        let err = ProcessHandle::open(999_999_999).err().unwrap();
        assert_eq!(err.to_string(), "no process with PID 999999999");
    }

    /// Waits until process `pid` sleeps (`S`) or is gone (`Z`, `X`): that state.
    fn asleep_or_gone(pid: u32) -> char {
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            // The state follows the command name, in parentheses, which may hold anything.
            let state = stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap();
            if matches!(state, 'S' | 'Z' | 'X') {
                return state;
            }
            std::thread::yield_now();
        }
    }

    #[tokio::test]
    async fn command_waits_for_go_then_runs() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let script = format!("echo $$ > {}", marker.display());
        let pending = PendingCommand::spawn(&["sh".into(), "-c".into(), script.into()]).unwrap();
        let pid = pending.pid();
        let program = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        assert_eq!(
            (asleep_or_gone(pid), program),
            ('S', Some(std::env::current_exe().unwrap())),
            "the command waits for start(), before exec"
        );
        assert!(!marker.exists(), "the command must not run before start()");
        let mut started = pending.start().unwrap();
        started.handle.exited().await;
        assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), pid.to_string());
        assert!(started.child.try_wait().unwrap().unwrap().success());
    }

    #[test]
    fn missing_program_is_an_error() {
        let pending = PendingCommand::spawn(&["/nonexistent/program".into()]).unwrap();
        let err = pending.start().err().unwrap();
        assert!(format!("{err:#}").starts_with("cannot run /nonexistent/program"), "{err:#}");
    }

    #[tokio::test]
    async fn watches_a_running_process() {
        let mut child = Command::new("sleep").arg("0.2").spawn().unwrap();
        let handle = ProcessHandle::open(child.id()).unwrap();
        assert_eq!(handle.pid(), child.id());
        let running = Target::Processes(vec![handle]).start().unwrap();
        running.exited().await;
        child.wait().unwrap();
    }
}
