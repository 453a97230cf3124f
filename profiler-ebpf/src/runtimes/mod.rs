//! Language runtimes whose frames are read at sample time, because they live outside the native
//! stack in memory that changes as soon as the thread runs again ([`python`]). Userspace
//! registers a process in `RUNTIME_PROCESSES` once it has found its runtime, with what that
//! runtime's walker needs; each sample of it then carries the frames the walker read, after the
//! native stacks, and says whose they are in the header's [`RuntimeTrailer`].
//!
//! The walks are programs of their own, one per hook that records user stacks, each in a
//! one-entry program array the hook tail-calls ([`hand_over`]): inlined in its hook, a walk was
//! verified once for every state the verifier reached it in, and cost more than all the rest;
//! on its own, it is verified once.
mod python;

use aya_ebpf::{
    EbpfContext,
    macros::map,
    maps::{HashMap, ProgramArray},
};
use profiler_common::{
    RuntimeTrailer, SampleHeader,
    runtimes::{RUNTIME_PROCESSES_MAX, RuntimeKind, RuntimeProcess, python::PythonProcess},
};

use crate::stack::Draft;

#[map(name = "RUNTIME_PROCESSES")]
static RUNTIME_PROCESSES: HashMap<u32, RuntimeProcess> = HashMap::with_max_entries(RUNTIME_PROCESSES_MAX, 0);

/// Hands the record in `draft`, its first `len` bytes written, over to the runtime walker of
/// `walkers`, which adds the frames of its process's runtime if it runs one walked here ([`walk`]
/// looks it up, once) and sends the record. Returns only when there is no walker in the array:
/// the caller then sends the record as it is.
pub fn hand_over(ctx: &impl EbpfContext, walkers: &ProgramArray, draft: &Draft, len: usize) {
    draft.set_handed_over_len(len);
    unsafe { walkers.tail_call(ctx, 0) };
}

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
