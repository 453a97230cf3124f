//! `profiler record`: the perf_event program run by a cpu-clock event on every CPU.
//!
//! Per sample it filters by process, then sends one ring-buffer record as long as what it
//! took: ids, comm, the user registers, a page-wise copy of the top of the user stack, and the
//! frame-pointer user stack and kernel stack where they are wanted.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{map, perf_event, raw_tracepoint},
    maps::{Array, HashMap, PerCpuArray, ProgramArray, RingBuf},
    programs::{PerfEventContext, RawTracePointContext},
};
use profiler_common::{
    Counter, SampleHeader,
    runtimes::{RuntimeKind, RuntimeProcess, RuntimeWalk},
    sample_flags,
};

use crate::{
    runtimes, setting,
    stack::{self, CopyOutcome, Draft, Dropped, Scratch, USER_MODE_RPL},
    stopped,
};

/// Ring buffer of sample records. Userspace sets the real size at load time.
#[map(name = "SAMPLES")]
pub(crate) static SAMPLES: RingBuf = RingBuf::with_byte_size(16 * 1024 * 1024, 0);

/// Where each CPU builds its sample record. Userspace sets one entry per CPU.
#[map(name = "SAMPLE_SCRATCH")]
static SAMPLE_SCRATCH: Array<Scratch> = Array::with_max_entries(1, 0);

/// The runtime walkers of [`sample`], by [`RuntimeKind`] (`runtimes::walkers!`), once loaded.
#[map(name = "SAMPLE_WALKERS")]
static SAMPLE_WALKERS: ProgramArray = ProgramArray::with_max_entries(RuntimeKind::COUNT, 0);

#[map(name = "TGID_FILTER")]
static TGID_FILTER: HashMap<u32, u8> = HashMap::with_max_entries(8192, 0);

#[map(name = "COUNTERS")]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

// Load-time settings (see `profiler_common::globals`). They live in `.rodata`, which the loader
// freezes, so the verifier treats them as constants.
#[unsafe(no_mangle)]
pub(crate) static FILTER_BY_TGID: u32 = 0;
#[unsafe(no_mangle)]
static FOLLOW_FORKS: u32 = 0;
#[unsafe(no_mangle)]
static PROFILER_TGID: u32 = 0;
#[unsafe(no_mangle)]
static TASK_TGID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_SIGNAL_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static SIGNAL_LIVE_OFFSET: u32 = 0;

const CLONE_THREAD: u64 = 0x0001_0000;

pub(crate) fn count(counter: Counter, n: u64) {
    if let Some(value) = COUNTERS.get_ptr_mut(counter as u32) {
        // Per-CPU slot and the program does not nest on a CPU: a plain add is enough.
        unsafe { *value += n };
    }
}

#[perf_event]
pub fn sample(ctx: PerfEventContext) -> u32 {
    if stopped() {
        return 0;
    }
    count(Counter::Seen, 1);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if !wanted(tgid) {
        count(Counter::Filtered, 1);
        return 0;
    }
    let Some(draft) = Draft::claim(&SAMPLE_SCRATCH) else {
        count(Counter::Lost, 1);
        return 0;
    };
    let header = unsafe { &mut *draft.bytes().cast::<SampleHeader>() };
    stack::fill_ids(header, pid_tgid, unsafe { bpf_ktime_get_ns() });
    let in_kernel = fill_regs(&ctx, header);
    send(&ctx, draft, in_kernel);
    0
}

/// Takes the stacks of the sample in `draft` (its ids and registers filled in), the kernel's
/// too when `kernel`, and sends it through `SAMPLES`, by way of its runtime's walker.
fn send(ctx: &PerfEventContext, draft: Draft, kernel: bool) {
    let (len, outcome) = stack::take_native_stacks(ctx, draft.bytes(), kernel);
    match outcome {
        CopyOutcome::Truncated => count(Counter::StackTruncated, 1),
        CopyOutcome::Unreadable => count(Counter::StackUnreadable, 1),
        CopyOutcome::Complete | CopyOutcome::NotCopied => {}
    }
    runtimes::hand_over(ctx, &SAMPLE_WALKERS, &draft, len);
    send_draft(draft, len);
}

/// The walker of runtime `kind`, tail-called by [`sample`]: adds the frames `walk` reads to the
/// sample and sends it.
pub(crate) fn resume(
    kind: RuntimeKind,
    walk: impl FnOnce(&RuntimeProcess, u32, *mut u8) -> (RuntimeWalk, u32),
) {
    if let Some((draft, len)) = Draft::resume(&SAMPLE_SCRATCH) {
        let len = stack::append_runtime_frames(draft.bytes(), len, kind, walk);
        send_draft(draft, len);
    }
}

/// Sends the first `len` bytes of `draft` through `SAMPLES`.
pub(crate) fn send_draft(draft: Draft, len: usize) {
    match draft.send(&SAMPLES, len) {
        Ok(()) => count(Counter::RingBytes, len as u64),
        Err(Dropped::RingFull | Dropped::Overwritten) => count(Counter::Lost, 1),
    }
}

/// Whether a process is sampled: not idle, not the profiler, in the filter when there is one.
pub(crate) fn wanted(tgid: u32) -> bool {
    if tgid == 0 || tgid == setting(&PROFILER_TGID) {
        return false;
    }
    setting(&FILTER_BY_TGID) == 0 || unsafe { TGID_FILTER.get(tgid) }.is_some()
}

/// The user registers; returns whether the sample interrupted the kernel (whose stack is then
/// wanted too).
fn fill_regs(ctx: &PerfEventContext, h: &mut SampleHeader) -> bool {
    let regs = unsafe { &(*ctx.ctx).regs };
    if regs.cs & 3 == USER_MODE_RPL {
        h.flags = sample_flags::USER_REGS;
        stack::take_user_regs(h, regs);
        return false;
    }
    // Kernel mode: the user registers are the ones saved when the thread entered the kernel.
    h.flags = sample_flags::IN_KERNEL;
    stack::fill_saved_user_regs(h);
    true
}

/// Raw tracepoint `task_newtask(struct task_struct *task, u64 clone_flags)`, run in the parent
/// for every new task. A new process (not a thread) forked by a filtered process joins the
/// filter, so `-- CMD` and `-p` follow children. A raw tracepoint rather than a classic one:
/// detaching a classic (perf) tracepoint waits for RCU grace periods, ~85 ms at every exit.
#[raw_tracepoint(tracepoint = "task_newtask")]
pub fn follow_fork(ctx: RawTracePointContext) -> i32 {
    if setting(&FILTER_BY_TGID) == 0 || setting(&FOLLOW_FORKS) == 0 {
        return 0;
    }
    let clone_flags: u64 = ctx.arg(1);
    if clone_flags & CLONE_THREAD != 0 {
        return 0;
    }
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    if unsafe { TGID_FILTER.get(parent) }.is_none() {
        return 0;
    }
    let task: *const u8 = ctx.arg(0);
    if let Ok(child) = unsafe { task_tgid(task) }
        && TGID_FILTER.insert(child, 1, 0).is_err()
    {
        count(Counter::FilterFull, 1);
    }
    0
}

/// Raw tracepoint `sched_process_exit(struct task_struct *task, ...)`, run by every exiting
/// thread. When the last thread of a followed process exits (its group's count of live threads,
/// decremented before this tracepoint, is zero), the process leaves the filter: a filter that
/// only grew would fill up with the dead, and a pid used again by an unrelated process would be
/// sampled. The thread group leader exiting first (`pthread_exit` in `main`) is not the end.
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn forget_exit(ctx: RawTracePointContext) -> i32 {
    if setting(&FILTER_BY_TGID) == 0 {
        return 0;
    }
    let task: *const u8 = ctx.arg(0);
    let (Ok(tgid), Ok(live)) = (unsafe { task_tgid(task) }, unsafe { group_live_threads(task) }) else {
        return 0;
    };
    if live == 0 {
        let _ = TGID_FILTER.remove(tgid);
    }
    0
}

/// The tgid of a `task_struct`.
pub(crate) unsafe fn task_tgid(task: *const u8) -> Result<u32, i32> {
    let tgid = unsafe { task.add(setting(&TASK_TGID_OFFSET) as usize) }.cast::<i32>();
    unsafe { bpf_probe_read_kernel(tgid) }.map(|tgid| tgid as u32)
}

/// The thread id (the kernel's pid: the `pid_t` right before `tgid`) and tgid of a
/// `task_struct`, in one read.
pub(crate) unsafe fn task_ids(task: *const u8) -> Result<(u32, u32), i32> {
    let ids = unsafe { task.add(setting(&TASK_TGID_OFFSET) as usize - 4) }.cast::<[u32; 2]>();
    unsafe { bpf_probe_read_kernel(ids) }.map(|[pid, tgid]| (pid, tgid))
}

/// The live threads of a task's thread group (`task->signal->live`).
unsafe fn group_live_threads(task: *const u8) -> Result<i32, i32> {
    let signal = unsafe { task.add(setting(&TASK_SIGNAL_OFFSET) as usize) }.cast::<*const u8>();
    let signal = unsafe { bpf_probe_read_kernel(signal) }?;
    let live = unsafe { signal.add(setting(&SIGNAL_LIVE_OFFSET) as usize) }.cast::<i32>();
    unsafe { bpf_probe_read_kernel(live) }
}
