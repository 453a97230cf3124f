//! Language runtimes whose frames are read at sample time, because they live outside the native
//! stack in memory that changes as soon as the thread runs again ([`python`], [`ruby`]), or state
//! that does ([`go`]'s goroutine labels). Userspace registers a process in `RUNTIME_PROCESSES`
//! once it has found its runtime, with what that runtime's walker needs; each sample of it then
//! carries the frames the walker read, after the native stacks, and says whose they are in the
//! header's [`RuntimeTrailer`].
//!
//! Each runtime's walker is a program of its own for each hook that records user stacks, which
//! the hook tail-calls through its program array, at the index of the process's
//! [`RuntimeKind`] ([`hand_over`]). Inlined in its hook, a walk was verified once for every state
//! the verifier reached it in, and cost more than all the rest; on its own, each is verified once,
//! and a runtime added costs the others nothing. [`walkers!`] makes the programs: adding a runtime
//! is a module here with a `walk` function and a line there.
mod fields;
mod go;
mod perl;
mod php;
mod python;
mod ruby;
mod thread;

use aya_ebpf::{
    EbpfContext,
    macros::{map, perf_event, raw_tracepoint, uretprobe},
    maps::{HashMap, ProgramArray},
    programs::{PerfEventContext, RawTracePointContext, RetProbeContext},
};
use profiler_common::{
    RuntimeTrailer, SampleHeader,
    runtimes::{RUNTIME_PROCESSES_MAX, RuntimeKind, RuntimeProcess, RuntimeWalk},
};

use crate::stack::Draft;

#[map(name = "RUNTIME_PROCESSES")]
static RUNTIME_PROCESSES: HashMap<u32, RuntimeProcess> = HashMap::with_max_entries(RUNTIME_PROCESSES_MAX, 0);

/// Each runtime walked here, by the name of its module and its [`RuntimeKind`]: its walker's
/// programs for the three hooks that record user stacks, named after the hook's program and the
/// module (`sample_python`), as userspace looks them up. Each resumes the record its hook handed
/// over, adds the frames its module's `walk` reads and sends it.
macro_rules! walkers {
    ($($module:ident: $kind:ident),* $(,)?) => {$(
        #[perf_event]
        pub fn ${concat(sample_, $module)}(_ctx: PerfEventContext) -> u32 {
            crate::sample::resume(RuntimeKind::$kind, $module::walk);
            0
        }

        #[raw_tracepoint(tracepoint = "sys_exit")]
        pub fn ${concat(syscall_exit_, $module)}(_ctx: RawTracePointContext) -> i32 {
            crate::off_cpu::resume(RuntimeKind::$kind, $module::walk);
            0
        }

        #[uretprobe]
        pub fn ${concat(alloc_return_, $module)}(_ctx: RetProbeContext) -> u32 {
            crate::leaks::resume(RuntimeKind::$kind, $module::walk);
            0
        }
    )*};
}

walkers! { python: Python, go: Go, ruby: Ruby, php: Php, perl: Perl }

/// Hands the record in `draft`, its first `len` bytes written, over to the walker in `walkers`
/// of its process's runtime, when the process is registered, which adds the runtime's frames and
/// sends the record. Returns only when there is none: the caller then sends the record as it is.
pub fn hand_over(ctx: &impl EbpfContext, walkers: &ProgramArray, draft: &Draft, len: usize) {
    let tgid = unsafe { (*draft.bytes().cast::<SampleHeader>()).tgid };
    let Some(process) = (unsafe { RUNTIME_PROCESSES.get(tgid) }) else { return };
    draft.set_handed_over_len(len);
    unsafe { walkers.tail_call(ctx, u32::from(process.kind)) };
}

/// Walks the frames of the current thread, whose record's header is `h`, into `frames` (room for
/// [`profiler_common::MAX_RUNTIME_FRAMES_BYTES`]) with `walk`, when its process is still registered
/// as running `kind`; notes whose they are, the outcome and their length in `h`.
pub fn walk(
    h: &mut SampleHeader,
    frames: *mut u8,
    kind: RuntimeKind,
    walk: impl FnOnce(&RuntimeProcess, u32, *mut u8) -> (RuntimeWalk, u32),
) {
    let Some(process) = (unsafe { RUNTIME_PROCESSES.get(h.tgid) }) else { return };
    if process.kind != kind as u16 {
        return;
    }
    let (walk, frames_bytes) = walk(process, h.tid, frames);
    h.runtime = RuntimeTrailer {
        kind: process.kind,
        walk: walk as u16,
        frames_bytes,
        registers: h.runtime.registers,
    };
}
