//! When a recording ends: after its duration, at SIGINT/SIGTERM/SIGHUP, or when its targets
//! are gone.
use std::{
    future::Future,
    os::fd::{AsFd as _, BorrowedFd},
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopReason {
    Duration,
    Signal,
    TargetsExited,
    MaxSamples,
}

/// A future that completes when the recording must stop: `duration` seconds over, a signal, or
/// `targets_gone` complete.
pub(super) fn stop_condition(
    duration: Option<f64>,
    targets_gone: impl Future<Output = ()>,
) -> Result<impl Future<Output = StopReason>> {
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    exit_at_second_interrupt()?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut hangup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    Ok(async move {
        let deadline = async {
            match duration {
                Some(seconds) => tokio::time::sleep(Duration::from_secs_f64(seconds)).await,
                None => std::future::pending().await,
            }
        };
        let reason = tokio::select! {
            () = deadline => StopReason::Duration,
            () = targets_gone => StopReason::TargetsExited,
            _ = interrupt.recv() => StopReason::Signal,
            _ = terminate.recv() => StopReason::Signal,
            _ = hangup.recv() => {
                terminal_gone();
                StopReason::Signal
            }
        };
        // From now on the next Ctrl-C ends the profiler at once, without output.
        INTERRUPTS.fetch_max(1, Ordering::SeqCst);
        reason
    })
}

/// The terminal hung up (SIGHUP, or the full-screen view saw it): what the profiler says from
/// now on on standard output or error, where they are that terminal, goes to `/dev/null`; a
/// write to a terminal that hung up fails, and a failed message must not cost the outputs.
pub(crate) fn terminal_gone() {
    let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") else { return };
    if is_terminal(std::io::stdout().as_fd()) {
        let _ = rustix::stdio::dup2_stdout(&null);
    }
    if is_terminal(std::io::stderr().as_fd()) {
        let _ = rustix::stdio::dup2_stderr(&null);
    }
}

/// Whether `fd` is a terminal, one that hung up included (whose attributes cannot be read
/// any more: `isatty` says no).
fn is_terminal(fd: BorrowedFd<'_>) -> bool {
    match rustix::termios::tcgetattr(fd) {
        Ok(_) => true,
        Err(err) => err == rustix::io::Errno::IO,
    }
}

/// SIGINTs received. The first stops the recording, once the event loop gets to it (naming a
/// large file can hold it for a while); the second ends the profiler there and then, from the
/// signal handler, whatever is under way.
static INTERRUPTS: AtomicU32 = AtomicU32::new(0);

fn exit_at_second_interrupt() -> Result<()> {
    // SAFETY: the action touches an atomic and calls `_exit`, both async-signal-safe.
    unsafe {
        signal_hook_registry::register(libc::SIGINT, || {
            if INTERRUPTS.fetch_add(1, Ordering::SeqCst) >= 1 {
                libc::_exit(130);
            }
        })
    }
    .context("cannot handle SIGINT")?;
    Ok(())
}
