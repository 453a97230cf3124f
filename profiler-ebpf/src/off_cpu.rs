//! `record --off-cpu` and `--wall`: spans of followed threads off the CPU.
//!
//! Everything happens at two tracepoints, which every kernel with eBPF has:
//!
//! - `sched_switch`, in the context of the thread leaving the CPU (`prev`): when a followed
//!   thread leaves, notes when, why (blocked, or runnable and preempted), whether inside a
//!   system call, and its kernel stack (`schedule` under the function that waits). The same call
//!   sees the thread coming in (`next`): if it was away shorter than the threshold, its note is
//!   dropped (two map operations, the whole cost of a short span); otherwise it is marked back.
//! - `sys_exit`, in the context of a thread returning from a system call: a span marked back is
//!   sent there, with the user registers and stack copy of the call, which are as the thread
//!   left them. The kernel stack comes from the note.
//!
//! A span that does not end in a system call's return (a wait for a CPU, a page fault, a kernel
//! thread) is sent at once from `sched_switch` without a user stack: a wait for a CPU shows as
//! `[runqueue]`. A span marked back whose thread leaves the CPU again before the call returns is
//! sent then, from its own context.
use aya_ebpf::{
    EbpfContext as _,
    bindings::pt_regs,
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_buf,
        generated::{bpf_get_current_task_btf, bpf_get_stack, bpf_task_pt_regs},
    },
    macros::{map, raw_tracepoint},
    maps::{Array, HashMap, PerCpuArray},
    programs::RawTracePointContext,
};
use profiler_common::{
    Counter, MAX_STACK_DEPTH, OffCpuState, OffCpuThread, SAMPLE_HEADER_SIZE, SampleHeader, TASK_COMM_LEN,
    frames_offset, sample_flags,
};

use crate::{
    sample::{self, count, task_pid, task_tgid, wanted},
    setting,
    stack::{self, Draft, Scratch},
    stopped,
};

/// Followed threads off the CPU, and those back whose span is not sent yet. Entries are made
/// as threads leave (no preallocation: ~1 KiB each, one per thread off the CPU).
#[map(name = "OFF_CPU_THREADS")]
static OFF_CPU_THREADS: HashMap<u32, OffCpuThread> =
    HashMap::with_max_entries(16384, aya_ebpf::bindings::BPF_F_NO_PREALLOC);

/// Where each CPU builds the note of a thread leaving (too big for the BPF stack).
#[map(name = "OFF_CPU_NOTE")]
static OFF_CPU_NOTE: PerCpuArray<OffCpuThread> = PerCpuArray::with_max_entries(1, 0);

/// Where each CPU builds its off-CPU record. Userspace sets one entry per CPU.
#[map(name = "OFF_CPU_SCRATCH")]
static OFF_CPU_SCRATCH: Array<Scratch> = Array::with_max_entries(1, 0);

/// Index 0: when sampling started, set by userspace.
#[map(name = "STARTED_NS")]
static STARTED_NS: Array<u64> = Array::with_max_entries(1, 0);

#[unsafe(no_mangle)]
static OFF_CPU: u32 = 0;
#[unsafe(no_mangle)]
static RUNQUEUE: u32 = 0;
#[unsafe(no_mangle)]
static MIN_OFF_CPU_NS: u64 = 0;
#[unsafe(no_mangle)]
static TASK_COMM_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_START_TIME_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static SCHEDULE_START: u64 = 0;
#[unsafe(no_mangle)]
static SCHEDULE_END: u64 = 0;

/// `TASK_DEAD` in a task's state: it leaves the CPU for good.
const TASK_DEAD: u64 = 0x80;

const KERNEL_STACK_BYTES: u32 = (MAX_STACK_DEPTH * 8) as u32;
/// How deep the tracepoint's own calls (`__traceiter_sched_switch`, `bpf_trace_run4`, this
/// program) can put `__schedule` in a kernel stack taken at `sched_switch`.
const MAX_TRACEPOINT_FRAMES: usize = 8;
/// `execve` and `execveat`: a thread returns from them into a new program, whose stack says
/// nothing of where it waited.
const EXEC_SYSCALLS: [u64; 2] = [59, 322];

/// Raw tracepoint `sched_switch(bool preempt, struct task_struct *prev, struct task_struct
/// *next, unsigned int prev_state)`, run by `prev`.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch(ctx: RawTracePointContext) -> i32 {
    if stopped() || setting(&OFF_CPU) == 0 {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    let next: *const u8 = ctx.arg(2);
    came_back(next, now);
    let pid_tgid = bpf_get_current_pid_tgid();
    if !wanted((pid_tgid >> 32) as u32) {
        return 0;
    }
    let preempt: u64 = ctx.arg(0);
    let prev_state = ctx.arg::<u64>(3) & 0xffff_ffff;
    if prev_state & TASK_DEAD != 0 {
        // An exiting thread: gone, not waiting.
        let _ = OFF_CPU_THREADS.remove(pid_tgid as u32);
        return 0;
    }
    left(&ctx, pid_tgid, OffCpuState::at_switch(preempt & 1 != 0, prev_state), now);
    0
}

/// The current thread leaves the CPU: a span of it still unsent goes now (it is in its own
/// context), then the new one is noted.
fn left(ctx: &RawTracePointContext, pid_tgid: u64, state: OffCpuState, now: u64) {
    let tid = pid_tgid as u32;
    if let Some(unsent) = OFF_CPU_THREADS.get_ptr_mut(tid)
        && unsafe { (*unsent).resumed_ns } != 0
    {
        // Without Python frames: the verifier checks the Python walk once per program that makes
        // it, and this one would double sched_switch's load time; these are the spans of threads
        // that came back outside a system call (preempted, or woken from a page fault).
        send(ctx, pid_tgid, unsafe { &*unsent }, UserStack::Native);
    }
    let Some(note) = OFF_CPU_NOTE.get_ptr_mut(0) else { return };
    let note = unsafe { &mut *note };
    note.since_ns = now;
    note.resumed_ns = 0;
    note.tgid = (pid_tgid >> 32) as u32;
    note.state = state as u32;
    note.in_syscall = u32::from(in_syscall());
    // A wait for a CPU shows as `[runqueue]`: the scheduler's frames are not walked for it.
    (note.kernel_stack_len, note.kernel_stack_skip) = (0, 0);
    if state != OffCpuState::Runnable {
        let stack = note.kernel_stack.as_mut_ptr().cast();
        let bytes = unsafe { bpf_get_stack(ctx.as_ptr(), stack, KERNEL_STACK_BYTES, 0) };
        note.kernel_stack_len = if bytes > 0 { (bytes as u32 / 8).min(MAX_STACK_DEPTH as u32) } else { 0 };
        note.kernel_stack_skip = tracepoint_frames(&note.kernel_stack);
    }
    insert(tid, note);
}

/// The frames above `__schedule` (those of the tracepoint's own calls): how many depends on how
/// many programs the tracepoint runs. None when `__schedule` is not found near the top.
fn tracepoint_frames(stack: &[u64; MAX_STACK_DEPTH]) -> u32 {
    let (start, end) = (setting(&SCHEDULE_START), setting(&SCHEDULE_END));
    for (i, &addr) in stack.iter().take(MAX_TRACEPOINT_FRAMES).enumerate() {
        if start <= addr && addr < end {
            return i as u32;
        }
    }
    0
}

/// Notes `thread` for `tid`, from the note buffer.
#[allow(clippy::needless_borrows_for_generic_args)] // by value would copy 1 KiB onto the 512-byte BPF stack
fn insert(tid: u32, thread: &OffCpuThread) {
    if OFF_CPU_THREADS.insert(tid, thread, 0).is_err() {
        count(Counter::OffCpuUnnoted, 1);
    }
}

/// Whether the current thread is inside a system call (its saved `orig_ax` is a call number).
fn in_syscall() -> bool {
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const pt_regs;
    !regs.is_null() && unsafe { bpf_probe_read_kernel(&(*regs).orig_rax) }.is_ok_and(|nr| (nr as i64) >= 0)
}

/// `next` comes back onto the CPU (still in `prev`'s context).
fn came_back(next: *const u8, now: u64) {
    let Ok(tid) = (unsafe { task_pid(next) }) else { return };
    let Some(thread) = OFF_CPU_THREADS.get_ptr_mut(tid) else {
        return came_back_unseen(next, tid, now);
    };
    let thread = unsafe { &mut *thread };
    let away = now.saturating_sub(thread.since_ns);
    let runnable = thread.state == OffCpuState::Runnable as u32;
    if away < setting(&MIN_OFF_CPU_NS) || (runnable && setting(&RUNQUEUE) == 0) {
        if away < setting(&MIN_OFF_CPU_NS) {
            count(Counter::ShortOffCpu, 1);
        }
        let _ = OFF_CPU_THREADS.remove(tid);
        return;
    }
    thread.resumed_ns = now;
    if thread.in_syscall == 0 || runnable {
        // No system call to return from, or nothing to learn from the stack of a wait for a
        // CPU: sent now, without a user stack.
        let pid_tgid = (u64::from(thread.tgid) << 32) | u64::from(tid);
        send_without_user_stack(next, pid_tgid, thread);
        let _ = OFF_CPU_THREADS.remove(tid);
    }
}

/// A followed thread coming back that was not seen leaving: one that left before sampling
/// started (not one created since, running for the first time). Its span counts from the
/// start, sent when its call returns (its kernel stack is lost).
fn came_back_unseen(next: *const u8, tid: u32, now: u64) {
    let Ok(tgid) = (unsafe { task_tgid(next) }) else { return };
    let started = match STARTED_NS.get(0) {
        Some(&started) if started != 0 && started < now => started,
        _ => return,
    };
    if !wanted(tgid) || now - started < setting(&MIN_OFF_CPU_NS) {
        return;
    }
    let start_time = unsafe { next.add(setting(&TASK_START_TIME_OFFSET) as usize) }.cast::<u64>();
    if unsafe { bpf_probe_read_kernel(start_time) }.is_ok_and(|born| born >= started) {
        return;
    }
    let Some(note) = OFF_CPU_NOTE.get_ptr_mut(0) else { return };
    let note = unsafe { &mut *note };
    note.since_ns = started;
    note.resumed_ns = now;
    note.tgid = tgid;
    note.state = OffCpuState::Sleeping as u32;
    note.in_syscall = 1;
    (note.kernel_stack_len, note.kernel_stack_skip) = (0, 0);
    insert(tid, note);
}

/// Raw tracepoint `sys_exit(struct pt_regs *regs, long ret)`, run by the returning thread.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn syscall_exit(ctx: RawTracePointContext) -> i32 {
    if stopped() || setting(&OFF_CPU) == 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(thread) = OFF_CPU_THREADS.get_ptr_mut(tid) else { return 0 };
    if unsafe { (*thread).resumed_ns } != 0 {
        let regs: *const pt_regs = ctx.arg(0);
        let exec =
            unsafe { bpf_probe_read_kernel(&(*regs).orig_rax) }.is_ok_and(|nr| EXEC_SYSCALLS.contains(&nr));
        let user_stack = if exec { UserStack::None } else { UserStack::WithPython };
        send(&ctx, pid_tgid, unsafe { &*thread }, user_stack);
    }
    let _ = OFF_CPU_THREADS.remove(tid);
    0
}

/// What a span sent in its thread's context carries of its user side.
#[derive(Clone, Copy, PartialEq, Eq)]
enum UserStack {
    /// Nothing (the thread just ran exec: its old stack is gone).
    None,
    /// Its registers and stack copy.
    Native,
    /// Those, and its Python frames.
    WithPython,
}

/// Sends the span of `thread`, in its own context: its user registers (those of the system
/// call), stack copy and Python frames as `user_stack` says, and the kernel stack it left with.
fn send(ctx: &RawTracePointContext, pid_tgid: u64, thread: &OffCpuThread, user_stack: UserStack) {
    let Some(draft) = begin_span(pid_tgid, thread) else { return };
    let record = draft.bytes();
    if user_stack != UserStack::None {
        stack::fill_saved_user_regs(unsafe { &mut *record.cast::<SampleHeader>() });
    }
    let (len, _) = stack::take_native_stacks(ctx, record, false);
    let len = unsafe { append_kernel_stack(record, len, thread) };
    // The Python frames come after the kernel stack, as in every record.
    let len =
        if user_stack == UserStack::WithPython { stack::append_python_frames(record, len) } else { len };
    sample::send_draft(draft, len);
}

/// Sends the span of `thread` (not the current one) with its kernel stack alone.
fn send_without_user_stack(task: *const u8, pid_tgid: u64, thread: &OffCpuThread) {
    let Some(draft) = begin_span(pid_tgid, thread) else { return };
    let record = draft.bytes();
    let header = unsafe { &mut *record.cast::<SampleHeader>() };
    // The ids took the current thread's name: this is another one's.
    let comm = unsafe { task.add(setting(&TASK_COMM_OFFSET) as usize) };
    let _ = unsafe { bpf_probe_read_kernel_buf(comm, &mut header.comm[..TASK_COMM_LEN]) };
    let len = if thread.state == OffCpuState::Runnable as u32 {
        frames_offset(0)
    } else {
        unsafe { append_kernel_stack(record, frames_offset(0), thread) }
    };
    sample::send_draft(draft, len);
}

/// The record of `thread`'s span, begun in this CPU's scratch buffer: counted, with its ids,
/// state and length; `None`, counted as lost, without a buffer.
fn begin_span(pid_tgid: u64, thread: &OffCpuThread) -> Option<Draft> {
    count(Counter::OffCpu, 1);
    let Some(draft) = Draft::claim(&OFF_CPU_SCRATCH) else {
        count(Counter::Lost, 1);
        return None;
    };
    let header = unsafe { &mut *draft.bytes().cast::<SampleHeader>() };
    stack::fill_ids(header, pid_tgid, thread.since_ns);
    header.flags = sample_flags::OFF_CPU | sample_flags::IN_KERNEL;
    header.off_cpu_state = thread.state;
    header.off_cpu_ns = thread.resumed_ns.saturating_sub(thread.since_ns);
    Some(draft)
}

/// Copies the kernel stack of `thread` after the first `len` bytes of the record at `sample`;
/// returns the record's new length.
unsafe fn append_kernel_stack(sample: *mut u8, len: usize, thread: &OffCpuThread) -> usize {
    let header = unsafe { &mut *sample.cast::<SampleHeader>() };
    let len_frames = thread.kernel_stack_len.min(MAX_STACK_DEPTH as u32);
    let skip = thread.kernel_stack_skip.min(MAX_TRACEPOINT_FRAMES as u32);
    if len_frames <= skip {
        return len;
    }
    // Masked, so that the verifier sees the size bounded from below as well (at most 127).
    let frames = ((len_frames - skip) & 0x7f) as usize;
    let skip = skip as usize;
    // Bounded where the verifier can see it: the record's frames end within its scratch buffer.
    let at = len.min(SAMPLE_HEADER_SIZE + profiler_common::MAX_STACK_COPY + 8 * MAX_STACK_DEPTH);
    let dst = unsafe { core::slice::from_raw_parts_mut(sample.add(at), frames * 8) };
    let src = unsafe { thread.kernel_stack.as_ptr().add(skip) }.cast::<u8>();
    if frames == 0 || unsafe { bpf_probe_read_kernel_buf(src, dst) }.is_err() {
        return at;
    }
    header.kernel_stack_len = frames as u32;
    at + frames * 8
}
