//! The clocks of a recording: CLOCK_MONOTONIC, which the kernel stamps samples and task events
//! with, and the wall clock of its start.
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`, hence of sample times.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// When a recording started, on each clock that needs it.
pub struct Start {
    pub instant: Instant,
    pub unix_ns: u64,
    /// CLOCK_MONOTONIC, the clock of samples and allocations.
    pub monotonic_ns: u64,
}

impl Start {
    pub fn now() -> Self {
        let unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        Self { instant: Instant::now(), unix_ns, monotonic_ns: monotonic_ns() }
    }
}
