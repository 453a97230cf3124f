//! When a recording ends: after its duration, at SIGINT/SIGTERM/SIGHUP, or when its targets
//! are gone.
use std::{future::Future, time::Duration};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    Signal,
    TargetsExited,
    MaxSamples,
}

/// A future that completes when the recording must stop: `duration` seconds over, a signal, or
/// `targets_gone` complete.
pub fn stop_condition(
    duration: Option<f64>,
    targets_gone: impl Future<Output = ()>,
) -> Result<impl Future<Output = StopReason>> {
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
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
            _ = hangup.recv() => StopReason::Signal,
        };
        // From now on a second Ctrl-C ends the profiler at once, without output.
        // rustix offers sigaction only to runtimes that replace libc's: libc's signal.
        // SAFETY: resetting a signal disposition to its default has no preconditions.
        unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
        reason
    })
}
