//! The clocks of a recording: CLOCK_MONOTONIC, which the kernel stamps samples and task events
//! with, and the wall clock of its start.
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`, hence of sample times.
pub(crate) fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// When a recording started, on each clock that needs it.
pub(crate) struct Start {
    pub instant: Instant,
    pub unix_ns: u64,
    /// CLOCK_MONOTONIC, the clock of samples and allocations.
    pub monotonic_ns: u64,
}

impl Start {
    pub(crate) fn now() -> Self {
        let unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        Self { instant: Instant::now(), unix_ns, monotonic_ns: monotonic_ns() }
    }
}
