//! Language runtimes whose frames are read at sample time, because they live outside the native
//! stack in memory that changes as soon as the thread runs again ([`python`]). Userspace
//! registers a process in `RUNTIME_PROCESSES` once it has found its runtime, with what that
//! runtime's walker needs; each sample of it then carries the frames the walker read, after the
//! native stacks, and says whose they are in the header's [`RuntimeTrailer`].
mod python;

use aya_ebpf::{macros::map, maps::HashMap};
use profiler_common::{
    RuntimeTrailer, SampleHeader,
    runtimes::{RUNTIME_PROCESSES_MAX, RuntimeKind, RuntimeProcess, python::PythonProcess},
};

#[map(name = "RUNTIME_PROCESSES")]
static RUNTIME_PROCESSES: HashMap<u32, RuntimeProcess> = HashMap::with_max_entries(RUNTIME_PROCESSES_MAX, 0);

/// Walks the runtime frames of the current thread into `frames` (room for
/// [`profiler_common::MAX_RUNTIME_FRAMES_BYTES`]) when its process is registered; notes whose
/// they are, the outcome and their length in `h`.
pub fn walk(h: &mut SampleHeader, frames: *mut u8) {
    let Some(process) = (unsafe { RUNTIME_PROCESSES.get(h.tgid) }) else { return };
    let (walk, frames_bytes) = match RuntimeKind::from_u16(process.kind) {
        Some(RuntimeKind::Python) => match PythonProcess::of_runtime(process) {
            Some(python) => python::walk(python, h.tid, frames),
            None => return,
        },
        Some(RuntimeKind::None) | None => return,
    };
    h.runtime = RuntimeTrailer { kind: process.kind, walk: walk as u16, frames_bytes, r13: h.runtime.r13 };
}
