//! Kernel side of the profiler: one perf_event program run by a cpu-clock event on every CPU.
//!
//! Per sample it filters by process, then writes one fixed-size ring-buffer record (layout in
//! `profiler_common`): ids, comm, the kernel stack, the frame-pointer user stack, the user
//! registers and a page-wise copy of the top of the user stack. Helpers write straight into the
//! ring-buffer reservation: the BPF stack is only 512 bytes.
#![no_std]
#![no_main]

use core::{mem::size_of, ptr::read_volatile};

use aya_ebpf::{
    EbpfContext as _,
    bindings::{
        BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE, pt_regs,
    },
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_kernel,
        generated::{bpf_get_current_task_btf, bpf_get_stack, bpf_probe_read_user, bpf_task_pt_regs},
    },
    macros::{map, perf_event, raw_tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::{PerfEventContext, RawTracePointContext},
};
use profiler_common::{
    Counter, MAX_STACK_COPY, MAX_STACK_DEPTH, STACK_PAGE_SIZE, SampleHeader, sample_flags,
};

/// Ring buffer of sample records. Userspace sets the real size at load time.
#[map(name = "SAMPLES")]
static SAMPLES: RingBuf = RingBuf::with_byte_size(16 * 1024 * 1024, 0);

#[map(name = "TGID_FILTER")]
static TGID_FILTER: HashMap<u32, u8> = HashMap::with_max_entries(8192, 0);

/// Where each thread's stack mapping ends (tid -> address), as userspace learned from earlier
/// samples: the copy stops there instead of reading whatever is mapped above the stack.
#[map(name = "STACK_ENDS")]
static STACK_ENDS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);

/// Index 0: nonzero once userspace has stopped the recording. Checking a flag lets the
/// recording end at once; detaching the perf events waits for the kernel (tens of ms).
#[map(name = "CONTROL")]
static CONTROL: Array<u32> = Array::with_max_entries(1, 0);

#[map(name = "COUNTERS")]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

// Load-time settings (see `profiler_common::globals`). They live in `.rodata`, which the loader
// freezes, so the verifier treats them as constants: that is what lets the record size depend on
// STACK_COPY_CAP.
#[unsafe(no_mangle)]
static FILTER_BY_TGID: u32 = 0;
#[unsafe(no_mangle)]
static FOLLOW_FORKS: u32 = 0;
#[unsafe(no_mangle)]
static PROFILER_TGID: u32 = 0;
#[unsafe(no_mangle)]
static STACK_COPY_CAP: u32 = 32 * 1024;
#[unsafe(no_mangle)]
static TASK_TGID_OFFSET: u32 = 0;

const HEADER_SIZE: usize = size_of::<SampleHeader>();
const STACK_BYTES: u32 = (MAX_STACK_DEPTH * size_of::<u64>()) as u32;
const PAGE: usize = STACK_PAGE_SIZE;
/// Lowest privilege level bits of the saved code segment: 3 means the CPU was in user mode.
const USER_MODE_RPL: u64 = 3;
const CLONE_THREAD: u64 = 0x0001_0000;

fn count(counter: Counter) {
    if let Some(value) = COUNTERS.get_ptr_mut(counter as u32) {
        // Per-CPU slot and the program does not nest on a CPU: a plain add is enough.
        unsafe { *value += 1 };
    }
}

fn setting(global: &'static u32) -> u32 {
    // A volatile read keeps the compiler from folding in the build-time default.
    unsafe { read_volatile(global) }
}

#[perf_event]
pub fn sample(ctx: PerfEventContext) -> u32 {
    if CONTROL.get(0).is_some_and(|&stopped| stopped != 0) {
        return 0;
    }
    count(Counter::Seen);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if !wanted(tgid) {
        count(Counter::Filtered);
        return 0;
    }
    let cap = stack_copy_cap();
    let Some(mut record) = SAMPLES.reserve_bytes(HEADER_SIZE + cap, 0) else {
        count(Counter::Lost);
        return 0;
    };
    let header = record.as_mut_ptr().cast::<SampleHeader>();
    unsafe {
        fill_header(&ctx, header, pid_tgid);
        if cap != 0 {
            copy_user_stack(header, record.as_mut_ptr().add(HEADER_SIZE), cap);
        }
    }
    record.submit(wakeup_flag());
    0
}

/// Waking the reader costs more than the rest of the program (an irq_work and a context switch
/// per sample). Userspace drains the ring on a timer instead; only a ring a quarter full wakes it.
fn wakeup_flag() -> u64 {
    let queued = SAMPLES.query(BPF_RB_AVAIL_DATA as u64);
    let size = SAMPLES.query(BPF_RB_RING_SIZE as u64);
    if queued >= size / 4 { BPF_RB_FORCE_WAKEUP as u64 } else { BPF_RB_NO_WAKEUP as u64 }
}

/// 0 (no copy: frame-pointer call graphs) or whole pages, at most MAX_STACK_COPY.
fn stack_copy_cap() -> usize {
    match setting(&STACK_COPY_CAP) as usize {
        0 => 0,
        cap => cap.clamp(PAGE, MAX_STACK_COPY) & !(PAGE - 1),
    }
}

fn wanted(tgid: u32) -> bool {
    if tgid == 0 || tgid == setting(&PROFILER_TGID) {
        return false;
    }
    setting(&FILTER_BY_TGID) == 0 || unsafe { TGID_FILTER.get(tgid) }.is_some()
}

/// Fills everything but the stack copy. `header` points into the ring-buffer reservation.
unsafe fn fill_header(ctx: &PerfEventContext, header: *mut SampleHeader, pid_tgid: u64) {
    let h = unsafe { &mut *header };
    h.tgid = (pid_tgid >> 32) as u32;
    h.tid = pid_tgid as u32;
    h.cpu = unsafe { bpf_get_smp_processor_id() };
    h.time_ns = unsafe { bpf_ktime_get_ns() };
    h.comm = bpf_get_current_comm().unwrap_or_default();
    h.stack_copy_len = 0;
    h._reserved = 0;

    let regs = unsafe { &(*ctx.ctx).regs };
    let in_user_mode = regs.cs & 3 == USER_MODE_RPL;
    // A sample taken in user mode has no kernel stack: skip the walk.
    h.kernel_stack_len = if in_user_mode {
        0
    } else {
        frames(unsafe { bpf_get_stack(ctx.as_ptr(), h.kernel_stack.as_mut_ptr().cast(), STACK_BYTES, 0) })
    };
    let user = unsafe {
        bpf_get_stack(ctx.as_ptr(), h.user_stack.as_mut_ptr().cast(), STACK_BYTES, BPF_F_USER_STACK as u64)
    };
    h.user_stack_len = frames(user);

    if in_user_mode {
        h.flags = sample_flags::USER_REGS;
        (h.user_ip, h.user_sp, h.user_bp) = (regs.rip, regs.rsp, regs.rbp);
        return;
    }
    // Kernel mode: the user registers are the ones saved when the thread entered the kernel.
    h.flags = sample_flags::IN_KERNEL;
    (h.user_ip, h.user_sp, h.user_bp) = (0, 0, 0);
    let saved = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const pt_regs;
    if saved.is_null() {
        return;
    }
    let Ok(saved) = (unsafe { bpf_probe_read_kernel(saved) }) else {
        return;
    };
    // Kernel threads have no user context: their saved frame is not from user mode.
    if saved.cs & 3 == USER_MODE_RPL {
        h.flags |= sample_flags::USER_REGS;
        (h.user_ip, h.user_sp, h.user_bp) = (saved.rip, saved.rsp, saved.rbp);
    }
}

fn frames(bytes_or_error: i64) -> u32 {
    if bytes_or_error <= 0 {
        0
    } else {
        (bytes_or_error as u32 / size_of::<u64>() as u32).min(MAX_STACK_DEPTH as u32)
    }
}

/// Copies user memory upwards from the stack pointer into `copy` (room for `cap` bytes, at least
/// a page).
///
/// The first read runs to the end of sp's page (variable size, offset 0); then whole pages follow
/// (constant size, bounded offset); a last page-sized read ending exactly at `cap` fills the rest
/// (constant size and offset, overlapping bytes already copied). The verifier accepts a variable
/// size or a variable offset into ring-buffer memory, not both. Stops at the first unreadable
/// page: the top of the stack.
unsafe fn copy_user_stack(header: *mut SampleHeader, copy: *mut u8, cap: usize) {
    let h = unsafe { &mut *header };
    if h.flags & sample_flags::USER_REGS == 0 {
        return;
    }
    let sp = h.user_sp;
    let stack_left = match unsafe { STACK_ENDS.get(h.tid) } {
        Some(&end) if end > sp => end - sp,
        _ => u64::MAX,
    };
    let limit = stack_left.min(cap as u64) as usize;
    let first = PAGE - (sp as usize & (PAGE - 1));
    if unsafe { read_user(copy, first, sp) }.is_err() {
        count(Counter::StackUnreadable);
        return;
    }
    let mut copied = first;
    for _ in 0..MAX_STACK_COPY / PAGE {
        if copied > cap - PAGE || copied >= limit {
            break;
        }
        let dst = unsafe { copy.add(copied) };
        if unsafe { read_user(dst, PAGE, sp + copied as u64) }.is_err() {
            h.stack_copy_len = copied as u32;
            return;
        }
        copied += PAGE;
    }
    if copied >= limit && limit < cap {
        // The thread's stack ends here.
        h.stack_copy_len = copied as u32;
        return;
    }
    if copied < cap {
        let tail = cap - PAGE;
        let dst = unsafe { copy.add(tail) };
        if unsafe { read_user(dst, PAGE, sp + tail as u64) }.is_err() {
            h.stack_copy_len = copied as u32;
            return;
        }
        copied = cap;
    }
    h.stack_copy_len = copied as u32;
    if stack_left <= cap as u64 {
        return;
    }
    // The stack may end exactly at the cap; one more byte tells whether it goes on.
    let mut probe = 0u8;
    let more = unsafe { read_user(&mut probe, 1, sp + cap as u64) }.is_ok();
    if more {
        h.flags |= sample_flags::STACK_COPY_TRUNCATED;
        count(Counter::StackTruncated);
    }
}

unsafe fn read_user(dst: *mut u8, len: usize, src: u64) -> Result<(), i64> {
    let ret = unsafe { bpf_probe_read_user(dst.cast(), len as u32, src as *const _) };
    if ret < 0 { Err(ret) } else { Ok(()) }
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
    let tgid = unsafe { task.add(setting(&TASK_TGID_OFFSET) as usize) }.cast::<i32>();
    if let Ok(child) = unsafe { bpf_probe_read_kernel(tgid) } {
        let _ = TGID_FILTER.insert(child as u32, 1, 0);
    }
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
