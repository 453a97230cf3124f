//! `record --off-cpu` and `--wall`: spans of followed threads off the CPU.
//!
//! A context switch is frequent and most spans are short, so a switch does only what every
//! switch needs, on the threads' own task-local storage (no hashing), and what a long span
//! needs is paid for once it is known to be long:
//!
//! - `sched_switch` (a BTF tracepoint, run by the thread leaving, `prev`): when a followed
//!   thread leaves, writes when and why (blocked, or runnable and preempted) on the thread. The
//!   same call sees the thread coming in (`next`): if it was away shorter than the threshold,
//!   that is all (the whole cost of a short span: two task-storage lookups and a clock read per
//!   switch). Otherwise the span goes into the thread table, whose entry is made once per
//!   thread and then written in place: whether it left inside a system call, and its kernel
//!   stack, taken from where it still waits (`bpf_get_task_stack` on a thread not running);
//!   the span is marked back.
//! - `sys_exit`, in the context of a thread returning from a system call: a span marked back is
//!   sent there, with the user registers and stack copy of the call, which are as the thread
//!   left them. Any other return costs a task-storage lookup.
//! - `off_cpu_stacks`, a task iterator userspace runs when it counts the spans still open (at a
//!   window's end, at the end): puts the spans of followed threads still away long enough into
//!   the thread table, with the kernel stacks they wait in, and notes those away since before
//!   sampling started that no switch showed.
//!
//! A span that does not end in a system call's return (a wait for a CPU, a page fault, a kernel
//! thread) is sent at once from `sched_switch` without a user stack: a wait for a CPU shows as
//! `[runqueue]`. A span marked back whose thread leaves the CPU again before the call returns is
//! sent then, from its own context.
use core::{
    ffi::c_void,
    intrinsics::{AtomicOrdering, atomic_xadd},
};

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_NOEXIST, pt_regs},
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_buf,
        generated::{bpf_get_current_task_btf, bpf_get_task_stack, bpf_task_pt_regs},
    },
    macros::{btf_map, btf_tracepoint, map, raw_tracepoint},
    maps::{Array, HashMap, PerCpuArray, ProgramArray},
    programs::{BtfTracePointContext, RawTracePointContext},
};
use profiler_common::{
    Counter, MAX_STACK_DEPTH, OFF_CPU_THREADS_MAX, OFF_CPU_USER_SHARE, OffCpuState, OffCpuThread,
    SAMPLE_HEADER_SIZE, SampleHeader, TASK_COMM_LEN, frames_offset,
    runtimes::{RuntimeKind, RuntimeProcess, RuntimeWalk},
    sample_flags,
};

use crate::{
    runtimes,
    sample::{self, count, task_ids, wanted},
    setting,
    stack::{self, Draft, Scratch, USER_MODE_RPL},
    stopped,
    task_storage::TaskStorage,
};

/// Followed threads that have been away long enough since sampling started, by thread id: an
/// entry is made the first time a thread's span is (it comes back from a long span, or the task
/// iterator finds it waiting long; ~1 KiB, no preallocation), written in place after that and
/// removed as the thread exits. `since_ns` is 0 while the thread has no span to send.
#[map(name = "OFF_CPU_THREADS")]
static OFF_CPU_THREADS: HashMap<u32, OffCpuThread> =
    HashMap::with_max_entries(OFF_CPU_THREADS_MAX, aya_ebpf::bindings::BPF_F_NO_PREALLOC);

/// What a switch needs of a thread, kept on it from the first time it is seen switching (or
/// found by the task iterator): whether it is followed (a thread not followed then costs a
/// switch or a system call's return one lookup on its own task), and, if so, since when and why
/// it is away. Whether a process is followed does not change once sampling started (userspace
/// adds processes before, the kernel their children as they are forked, and those are new
/// threads).
#[btf_map(name = "OFF_CPU_TASKS")]
static OFF_CPU_TASKS: TaskStorage<Switching> = TaskStorage::new();

#[derive(Clone, Copy)]
#[repr(C)]
struct Switching {
    followed: u32,
    /// The [`OffCpuState`] it left in.
    state: u32,
    /// When it left; 0 while on the CPU.
    since_ns: u64,
    /// Nonzero while its span, back and long enough, waits in [`OFF_CPU_THREADS`] to be sent at
    /// its system call's return (or as it leaves again before).
    pending: u32,
    padding: u32,
}

impl Switching {
    fn followed(followed: bool) -> Self {
        Self { followed: u32::from(followed), state: 0, since_ns: 0, pending: 0, padding: 0 }
    }
}

/// What is kept on `task`, if anything (nothing on a thread not seen switching yet).
fn kept_on(task: *mut c_void) -> Option<&'static mut Switching> {
    OFF_CPU_TASKS.get_ptr_mut(task).map(|kept| unsafe { &mut *kept })
}

/// What is kept on `task`, a thread of process `tgid`, made if it had nothing (the filter
/// looked up once); `None` when the kernel has no room.
fn switching(task: *mut c_void, tgid: u32) -> Option<&'static mut Switching> {
    match kept_on(task) {
        Some(kept) => Some(kept),
        None => {
            let kept = OFF_CPU_TASKS.get_or_insert(task, &mut Switching::followed(wanted(tgid)))?;
            Some(unsafe { &mut *kept })
        }
    }
}

/// The clock, read at most once per program run (`now` is 0 until then).
fn clock(now: &mut u64) -> u64 {
    if *now == 0 {
        *now = unsafe { bpf_ktime_get_ns() };
    }
    *now
}

/// Entries of [`OFF_CPU_THREADS`] each user's threads hold, when the whole system is followed:
/// none may take more than [`OFF_CPU_USER_SHARE`], so that one user's threads, however many,
/// leave room for everyone else's.
#[map(name = "OFF_CPU_USERS")]
static OFF_CPU_USERS: HashMap<u32, u64> = HashMap::with_max_entries(16384, 0);

/// Where each CPU builds a thread's first entry (too big for the BPF stack).
#[map(name = "OFF_CPU_NOTE")]
static OFF_CPU_NOTE: PerCpuArray<OffCpuThread> = PerCpuArray::with_max_entries(1, 0);

/// Where the task iterator builds an entry: not in [`OFF_CPU_NOTE`], as `sched_switch` may
/// preempt it on its CPU. One iterator runs at a time (userspace's).
#[map(name = "ITERATOR_NOTE")]
static ITERATOR_NOTE: Array<OffCpuThread> = Array::with_max_entries(1, 0);

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
static TASK_STATE_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_ON_CPU_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static SCHEDULE_ADDR: u64 = 0;
#[unsafe(no_mangle)]
static TASK_REAL_CRED_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static CRED_EUID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static CRED_USER_NS_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static USER_NS_LEVEL_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static USER_NS_PARENT_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static USER_NS_OWNER_OFFSET: u32 = 0;

/// `TASK_DEAD` in a task's state: it leaves the CPU for good.
const TASK_DEAD: u64 = 0x80;

const KERNEL_STACK_BYTES: u32 = (MAX_STACK_DEPTH * 8) as u32;
/// `execve` and `execveat`: a thread returns from them into a new program, whose stack says
/// nothing of where it waited.
const EXEC_SYSCALLS: [u64; 2] = [59, 322];

/// BTF tracepoint `sched_switch(bool preempt, struct task_struct *prev, struct task_struct
/// *next, unsigned int prev_state)`, run by `prev`. A BTF tracepoint rather than a raw one: its
/// `next` is a task pointer the verifier knows, whose kernel stack can be taken.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    if stopped() || setting(&OFF_CPU) == 0 {
        return 0;
    }
    let mut now = 0;
    let next: *mut c_void = ctx.arg(2);
    if !next.is_null() {
        came_back(next, &mut now);
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let prev_state = ctx.arg::<u64>(3) & 0xffff_ffff;
    if prev_state & TASK_DEAD != 0 {
        // An exiting thread: gone, not waiting. Before the filter: its process may have left
        // it already (`forget_exit` runs as the last thread exits, before its last switch).
        remove(pid_tgid as u32);
        return 0;
    }
    let Some(prev) = switching(current_task(), (pid_tgid >> 32) as u32) else { return 0 };
    if prev.followed == 0 {
        return 0;
    }
    let preempt: u64 = ctx.arg(0);
    left(&ctx, pid_tgid, prev, OffCpuState::at_switch(preempt & 1 != 0, prev_state), clock(&mut now));
    0
}

/// The current thread leaves the CPU: a span of it still unsent goes now (it is in its own
/// context), then the new one is noted on it.
fn left(ctx: &BtfTracePointContext, pid_tgid: u64, prev: &mut Switching, state: OffCpuState, now: u64) {
    if prev.pending != 0 {
        prev.pending = 0;
        if let Some(thread) = OFF_CPU_THREADS.get_ptr_mut(pid_tgid as u32) {
            // Without runtime frames: the verifier checks a runtime's walk once per program
            // that makes it, and this one would double sched_switch's load time; these are the
            // spans of threads that came back inside a system call and leave again before it
            // returns (a wait retried), rare beside those sent at the return.
            send(ctx, pid_tgid, unsafe { &mut *thread }, UserStack::Native);
        }
    }
    (prev.since_ns, prev.state) = (now, state as u32);
}

/// The running task, as a pointer the verifier knows.
fn current_task() -> *mut c_void {
    unsafe { bpf_get_current_task_btf() }.cast()
}

/// Notes in `thread` that `task`, of process `tgid`, is away since `since_ns`, and why (an
/// [`OffCpuState`]); not back yet, its kernel stack not taken. Whether it left inside a system
/// call is read from its registers saved on entering the kernel, unchanged while it is away.
fn note(thread: &mut OffCpuThread, task: *mut c_void, tgid: u32, state: u32, since_ns: u64) {
    thread.since_ns = since_ns;
    thread.resumed_ns = 0;
    thread.tgid = tgid;
    thread.state = state;
    thread.in_syscall = u32::from(in_syscall(task));
    (thread.kernel_stack_len, thread.kernel_stack_skip) = (0, 0);
}

/// The entry of `tid` (of `task`) in the thread table, made from `scratch` if it has none.
fn entry(tid: u32, task: *mut c_void, scratch: *mut OffCpuThread) -> Option<&'static mut OffCpuThread> {
    if let Some(thread) = OFF_CPU_THREADS.get_ptr_mut(tid) {
        return Some(unsafe { &mut *thread });
    }
    let scratch = unsafe { &mut *scratch };
    scratch.since_ns = 0;
    insert(tid, scratch, task);
    OFF_CPU_THREADS.get_ptr_mut(tid).map(|thread| unsafe { &mut *thread })
}

/// Takes the kernel stack of `task`, a thread off the CPU, into `thread`: where it waits. A
/// wait for a CPU shows as `[runqueue]`: the scheduler's frames are not walked for it.
///
/// The kernel leaves the scheduler's own functions out of the stack of a thread not running
/// (`schedule`, `schedule_timeout`, `do_nanosleep`, mutex slow paths: all of `.sched.text`), so
/// `__schedule` is put back as the innermost frame: a blocked stack ends there, as one taken by
/// the thread itself as it leaves would.
fn take_kernel_stack(task: *mut c_void, thread: &mut OffCpuThread) {
    if thread.state == OffCpuState::Runnable as u32 {
        return;
    }
    let schedule = setting(&SCHEDULE_ADDR);
    thread.kernel_stack[0] = schedule;
    let waiting = unsafe { thread.kernel_stack.as_mut_ptr().add(1) }.cast();
    let bytes = unsafe { bpf_get_task_stack(task.cast(), waiting, KERNEL_STACK_BYTES - 8, 0) };
    let frames = if bytes > 0 { bytes as u32 / 8 } else { 0 };
    thread.kernel_stack_len = if frames == 0 { 0 } else { (frames + 1).min(MAX_STACK_DEPTH as u32) };
    // Without `__schedule`'s address (hidden in /proc/kallsyms), its slot is skipped.
    thread.kernel_stack_skip = u32::from(schedule == 0);
}

/// Makes `thread` the entry of `tid` (of `task`), unless it has one already (the task iterator
/// may have made it on another CPU meanwhile: that one stays). A failure for want of room is
/// counted, and so is a thread whose user holds its share of the table. The user is the task's
/// as the entry is made, and stays the entry's: the one its place is given back to.
#[allow(clippy::needless_borrows_for_generic_args)] // by value would copy 1 KiB onto the 512-byte BPF stack
fn insert(tid: u32, thread: &mut OffCpuThread, task: *mut c_void) {
    let share = if system_wide() {
        thread.uid = task_user(task);
        let Some(held) = user_share(thread.uid) else {
            count(Counter::OffCpuOverShare, 1);
            return;
        };
        // Taken before the entry is made, given back if it is not: the check and the add are
        // not one step, so a share may be passed by as many threads as there are CPUs.
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(held, 1) };
        Some(held)
    } else {
        None
    };
    let made = match OFF_CPU_THREADS.insert(tid, &*thread, u64::from(BPF_NOEXIST)) {
        Err(EEXIST) => false,
        Err(_) => {
            count(Counter::OffCpuUnnoted, 1);
            false
        }
        Ok(()) => true,
    };
    if let (Some(held), false) = (share, made) {
        give_back(held);
    }
}

/// Removes the entry of `tid` (an exiting thread), giving its place back to its user's share.
fn remove(tid: u32) {
    let Some(uid) = (unsafe { OFF_CPU_THREADS.get(tid) }).map(|thread| thread.uid) else { return };
    if OFF_CPU_THREADS.remove(tid).is_ok()
        && system_wide()
        && let Some(held) = OFF_CPU_USERS.get_ptr_mut(uid)
    {
        give_back(held);
    }
}

/// Gives a place back to a user's count, which never goes below zero (a count that wrapped
/// would lock the user out).
fn give_back(held: *mut u64) {
    if unsafe { core::ptr::read_volatile(held) } > 0 {
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(held, 1u64.wrapping_neg()) };
    }
}

/// The count of entries `user`'s threads hold, if it has room for one more.
fn user_share(user: u32) -> Option<*mut u64> {
    if OFF_CPU_USERS.get_ptr_mut(user).is_none() {
        // A user with no entry yet (made on another CPU meanwhile: found below); a full table
        // of users is a share with no room. The zero by value, on the stack: a reference to a
        // constant is one to `.rodata`, where LLVM may merge it with a load-time setting that
        // is zero only at build time.
        let _ = OFF_CPU_USERS.insert(user, 0u64, u64::from(BPF_NOEXIST));
    }
    let held = OFF_CPU_USERS.get_ptr_mut(user)?;
    (unsafe { *held } < u64::from(OFF_CPU_USER_SHARE)).then_some(held)
}

/// Whether the whole system is followed (then users share the thread table).
fn system_wide() -> bool {
    setting(&sample::FILTER_BY_TGID) == 0
}

/// User namespaces a task's is nested in, at most (the kernel's limit is 32).
const MAX_USER_NAMESPACE_DEPTH: u32 = 33;

/// The user `task` counts as: its effective uid (`real_cred->euid`), or, in a user namespace,
/// the user who made the outermost one below the host's (its `owner`): however many uids of
/// its own (subordinate ones) a user's namespaces map, they are one user. 0 when unreadable.
fn task_user(task: *mut c_void) -> u32 {
    let read_at = |base: *const u8, offset: &'static u32| unsafe { base.add(setting(offset) as usize) };
    let cred = read_at(task.cast(), &TASK_REAL_CRED_OFFSET).cast::<*const u8>();
    let Ok(cred) = (unsafe { bpf_probe_read_kernel(cred) }) else { return 0 };
    let euid = unsafe { bpf_probe_read_kernel(read_at(cred, &CRED_EUID_OFFSET).cast::<u32>()) }.unwrap_or(0);
    let Ok(mut namespace) =
        (unsafe { bpf_probe_read_kernel(read_at(cred, &CRED_USER_NS_OFFSET).cast::<*const u8>()) })
    else {
        return euid;
    };
    for _ in 0..MAX_USER_NAMESPACE_DEPTH {
        let level = unsafe { bpf_probe_read_kernel(read_at(namespace, &USER_NS_LEVEL_OFFSET).cast::<i32>()) };
        match level {
            Ok(0) | Err(_) => return euid,
            Ok(1) => {
                let owner = read_at(namespace, &USER_NS_OWNER_OFFSET).cast::<u32>();
                return unsafe { bpf_probe_read_kernel(owner) }.unwrap_or(euid);
            }
            Ok(_) => {
                let parent = read_at(namespace, &USER_NS_PARENT_OFFSET).cast::<*const u8>();
                match unsafe { bpf_probe_read_kernel(parent) } {
                    Ok(parent) => namespace = parent,
                    Err(_) => return euid,
                }
            }
        }
    }
    euid
}

/// The map update failed: the entry is there already.
const EEXIST: i32 = -17;

/// Whether `task` is inside a system call: its registers saved on entering the kernel are a
/// user's (a kernel thread's are not), and their `orig_ax` is a call number.
fn in_syscall(task: *mut c_void) -> bool {
    let regs = unsafe { bpf_task_pt_regs(task.cast()) } as *const pt_regs;
    if regs.is_null() {
        return false;
    }
    // `orig_rax`, `rip` and `cs` follow each other: one read.
    let saved = unsafe { bpf_probe_read_kernel(core::ptr::addr_of!((*regs).orig_rax).cast::<[u64; 3]>()) };
    saved.is_ok_and(|[nr, _, cs]| (nr as i64) >= 0 && cs & 3 == USER_MODE_RPL)
}

/// `next` comes back onto the CPU (still in `prev`'s context). A thread not followed, or back
/// from a short span, costs the lookup of what is kept on it (and the clock, for the second).
fn came_back(next: *mut c_void, now: &mut u64) {
    let Some(next_kept) = kept_on(next) else { return came_back_unseen(next, now) };
    if next_kept.followed == 0 || next_kept.since_ns == 0 {
        return;
    }
    let since = core::mem::replace(&mut next_kept.since_ns, 0);
    let now = clock(now);
    if long_enough(next_kept.state, now.saturating_sub(since), true) {
        back_from_long_span(next, next_kept, since, now);
    }
}

/// Whether a span of `away` ns in `state` is recorded (counting a short one as such when
/// `count_short`).
fn long_enough(state: u32, away: u64, count_short: bool) -> bool {
    if away < setting(&MIN_OFF_CPU_NS) {
        if count_short {
            count(Counter::ShortOffCpu, 1);
        }
        return false;
    }
    state != OffCpuState::Runnable as u32 || setting(&RUNQUEUE) != 0
}

/// `next` comes back from a span long enough to record, begun at `since`: its entry in the
/// thread table gets the span, marked back, and the kernel stack it waited in. A span with no
/// system call to return from (or a wait for a CPU, whose stack says nothing) is sent now,
/// without a user stack; any other at the call's return.
fn back_from_long_span(next: *mut c_void, next_kept: &mut Switching, since: u64, now: u64) {
    let Ok((tid, tgid)) = (unsafe { task_ids(next.cast()) }) else { return };
    let Some(scratch) = OFF_CPU_NOTE.get_ptr_mut(0) else { return };
    let Some(thread) = entry(tid, next, scratch) else { return };
    note(thread, next, tgid, next_kept.state, since);
    thread.resumed_ns = now;
    take_kernel_stack(next, thread);
    if thread.in_syscall == 0 || thread.state == OffCpuState::Runnable as u32 {
        let pid_tgid = (u64::from(tgid) << 32) | u64::from(tid);
        send_without_user_stack(next, pid_tgid, thread);
        (thread.since_ns, thread.resumed_ns) = (0, 0);
    } else {
        next_kept.pending = 1;
    }
}

/// A thread coming back with nothing kept on it: one that left before sampling started (or one
/// created since, running for the first time). A followed one away since before is recorded
/// from the start.
fn came_back_unseen(next: *mut c_void, now: &mut u64) {
    let Ok((_, tgid)) = (unsafe { task_ids(next.cast()) }) else { return };
    let Some(next_kept) = switching(next, tgid) else { return };
    if next_kept.followed == 0 {
        return;
    }
    let now = clock(now);
    let Some(started) = away_since_start(next, now) else { return };
    next_kept.state = OffCpuState::Sleeping as u32;
    back_from_long_span(next, next_kept, started, now);
}

/// When sampling started, if `task` (a followed thread) was created before and, at `now`, has
/// been away longer than the threshold since then.
fn away_since_start(task: *mut c_void, now: u64) -> Option<u64> {
    let started = match STARTED_NS.get(0) {
        Some(&started) if started != 0 && started < now => started,
        _ => return None,
    };
    if now - started < setting(&MIN_OFF_CPU_NS) {
        return None;
    }
    let start_time =
        unsafe { task.cast::<u8>().add(setting(&TASK_START_TIME_OFFSET) as usize) }.cast::<u64>();
    let born_before = unsafe { bpf_probe_read_kernel(start_time) }.is_ok_and(|born| born < started);
    born_before.then_some(started)
}

/// Task iterator run by userspace before it counts the spans still open: takes the kernel
/// stack of each followed thread still away that has none yet, and notes the followed threads
/// away since before sampling started (none of their switches was seen: without this, a thread
/// blocked all along would not be in the profile).
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub extern "C" fn off_cpu_stacks(ctx: *mut TaskIterContext) -> i32 {
    let task = unsafe { (*ctx).task };
    if task.is_null() {
        return 0;
    }
    let Ok((tid, tgid)) = (unsafe { task_ids(task.cast()) }) else { return 0 };
    match kept_on(task) {
        Some(kept) => {
            if kept.followed != 0 && kept.since_ns != 0 {
                still_away(task, tid, tgid, kept);
            }
        }
        None if wanted(tgid) => away_all_along(task, tid, tgid),
        None => {}
    }
    0
}

/// Puts the span of `task`, a followed thread that left at `kept.since_ns`, into the thread
/// table with the kernel stack it waits in, if it is still away and long enough for its switch
/// back to find the same (once there, its span is counted until then).
fn still_away(task: *mut c_void, tid: u32, tgid: u32, kept: &Switching) {
    let now = unsafe { bpf_ktime_get_ns() };
    if !long_enough(kept.state, now.saturating_sub(kept.since_ns), false) || on_cpu(task) {
        return;
    }
    let Some(scratch) = ITERATOR_NOTE.get_ptr_mut(0) else { return };
    let Some(thread) = entry(tid, task, scratch) else { return };
    if thread.since_ns == kept.since_ns && (thread.resumed_ns != 0 || thread.kernel_stack_len != 0) {
        return;
    }
    note(thread, task, tgid, kept.state, kept.since_ns);
    take_kernel_stack(task, thread);
}

/// Whether `task` is running: its stack is not one it waits in, and its state may be one it set
/// on its way to waiting.
fn on_cpu(task: *mut c_void) -> bool {
    let on_cpu = unsafe { task.cast::<u8>().add(setting(&TASK_ON_CPU_OFFSET) as usize) }.cast::<i32>();
    unsafe { bpf_probe_read_kernel(on_cpu) }.is_ok_and(|on_cpu| on_cpu != 0)
}

/// Notes `task`, a thread of a followed process not seen switching, if it waits (not running,
/// nor runnable) since before sampling started: on the thread, as if it had left as sampling
/// started, and in the thread table.
fn away_all_along(task: *mut c_void, tid: u32, tgid: u32) {
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(started) = away_since_start(task, now) else { return };
    if on_cpu(task) {
        return;
    }
    let state = unsafe { task.cast::<u8>().add(setting(&TASK_STATE_OFFSET) as usize) }.cast::<u32>();
    let state = match unsafe { bpf_probe_read_kernel(state) } {
        Ok(state) if state != 0 && u64::from(state) & TASK_DEAD == 0 => {
            OffCpuState::at_switch(false, state.into())
        }
        _ => return,
    };
    let Some(kept) = switching(task, tgid) else { return };
    if kept.since_ns == 0 {
        // Not over a span a switch noted meanwhile on another CPU: that one is newer.
        (kept.since_ns, kept.state) = (started, state as u32);
    }
    still_away(task, tid, tgid, kept);
}

/// The context of a task iterator (`struct bpf_iter__task`).
#[repr(C)]
pub struct TaskIterContext {
    meta: *mut c_void,
    /// Null at the end of the iteration.
    task: *mut c_void,
}

/// Raw tracepoint `sys_exit(struct pt_regs *regs, long ret)`, run by the returning thread.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn syscall_exit(ctx: RawTracePointContext) -> i32 {
    if stopped() || setting(&OFF_CPU) == 0 {
        return 0;
    }
    // Only a followed thread's span is ever pending.
    let Some(kept) = kept_on(current_task()) else { return 0 };
    if kept.pending == 0 {
        return 0;
    }
    kept.pending = 0;
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(thread) = OFF_CPU_THREADS.get_ptr_mut(pid_tgid as u32) else { return 0 };
    let thread = unsafe { &mut *thread };
    if thread.resumed_ns != 0 {
        let regs: *const pt_regs = ctx.arg(0);
        let exec =
            unsafe { bpf_probe_read_kernel(&(*regs).orig_rax) }.is_ok_and(|nr| EXEC_SYSCALLS.contains(&nr));
        let user_stack = if exec { UserStack::None } else { UserStack::WithRuntime };
        send(&ctx, pid_tgid, thread, user_stack);
    }
    0
}

/// The runtime walkers of [`syscall_exit`], by [`RuntimeKind`] (`runtimes::walkers!`), once
/// loaded.
#[map(name = "SYSCALL_EXIT_WALKERS")]
static SYSCALL_EXIT_WALKERS: ProgramArray = ProgramArray::with_max_entries(RuntimeKind::COUNT, 0);

/// The walker of runtime `kind`, tail-called by [`syscall_exit`]: adds the frames `walk` reads
/// to the span and sends it.
pub(crate) fn resume(
    kind: RuntimeKind,
    walk: impl FnOnce(&RuntimeProcess, u32, *mut u8) -> (RuntimeWalk, u32),
) {
    if let Some((draft, len)) = Draft::resume(&OFF_CPU_SCRATCH) {
        let len = stack::append_runtime_frames(draft.bytes(), len, kind, walk);
        sample::send_draft(draft, len);
    }
}

/// What a span sent in its thread's context carries of its user side.
#[derive(Clone, Copy, PartialEq, Eq)]
enum UserStack {
    /// Nothing (the thread just ran exec: its old stack is gone).
    None,
    /// Its registers and stack copy.
    Native,
    /// Those, and its runtime's frames.
    WithRuntime,
}

/// Sends the span of `thread`, in its own context, and ends it: its user registers (those of
/// the system call), stack copy and runtime frames as `user_stack` says, and the kernel stack it
/// waited in.
fn send(ctx: &impl EbpfContext, pid_tgid: u64, thread: &mut OffCpuThread, user_stack: UserStack) {
    let draft = begin_span(pid_tgid, thread);
    // Ended before the record is handed over: a tail call does not come back.
    (thread.since_ns, thread.resumed_ns) = (0, 0);
    let Some(draft) = draft else { return };
    let record = draft.bytes();
    if user_stack != UserStack::None {
        stack::fill_saved_user_regs(unsafe { &mut *record.cast::<SampleHeader>() });
    }
    let (len, _) = stack::take_native_stacks(ctx, record, false);
    let len = unsafe { append_kernel_stack(record, len, thread) };
    // The runtime's frames come after the kernel stack, as in every record.
    if user_stack == UserStack::WithRuntime {
        runtimes::hand_over(ctx, &SYSCALL_EXIT_WALKERS, &draft, len);
    }
    sample::send_draft(draft, len);
}

/// Sends the span of `thread` (not the current one) with its kernel stack alone.
fn send_without_user_stack(task: *mut c_void, pid_tgid: u64, thread: &OffCpuThread) {
    let Some(draft) = begin_span(pid_tgid, thread) else { return };
    let record = draft.bytes();
    let header = unsafe { &mut *record.cast::<SampleHeader>() };
    // The ids took the current thread's name: this is another one's.
    let comm = unsafe { task.cast::<u8>().add(setting(&TASK_COMM_OFFSET) as usize) };
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
    let skip = thread.kernel_stack_skip.min(1);
    if len_frames <= skip {
        if thread.state != OffCpuState::Runnable as u32 {
            count(Counter::OffCpuNoKernelStack, 1);
        }
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
