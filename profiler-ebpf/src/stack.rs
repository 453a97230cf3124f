//! Recording a user stack into a ring-buffer record: ids, the frame-pointer chain, and a
//! page-wise copy of the top of the stack. Helpers write straight into the ring-buffer
//! reservation: the BPF stack is only 512 bytes.
use core::mem::size_of;

use aya_ebpf::{
    EbpfContext,
    bindings::{
        BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE,
    },
    helpers::{
        bpf_get_current_comm, bpf_get_smp_processor_id,
        generated::{bpf_get_stack, bpf_probe_read_user},
    },
    macros::map,
    maps::{LruHashMap, RingBuf},
};
use profiler_common::{MAX_STACK_COPY, MAX_STACK_DEPTH, STACK_PAGE_SIZE, SampleHeader, sample_flags};

use crate::setting;

/// Where each thread's stack mapping ends (tid -> address), as userspace learned from earlier
/// records: the copy stops there instead of reading whatever is mapped above the stack.
#[map(name = "STACK_ENDS")]
static STACK_ENDS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);

#[unsafe(no_mangle)]
static STACK_COPY_CAP: u32 = 32 * 1024;

pub const HEADER_SIZE: usize = size_of::<SampleHeader>();
pub const STACK_BYTES: u32 = (MAX_STACK_DEPTH * size_of::<u64>()) as u32;
const PAGE: usize = STACK_PAGE_SIZE;

/// What went wrong in a stack copy, for the caller's counters.
pub enum CopyOutcome {
    Complete,
    /// The copy stopped at the cap while the stack went on.
    Truncated,
    /// Not even the first page was readable.
    Unreadable,
}

/// 0 (no copy: frame-pointer call graphs) or whole pages, at most MAX_STACK_COPY.
pub fn stack_copy_cap() -> usize {
    match setting(&STACK_COPY_CAP) as usize {
        0 => 0,
        cap => cap.clamp(PAGE, MAX_STACK_COPY) & !(PAGE - 1),
    }
}

/// Waking the reader costs more than the rest of a program run (an irq_work and a context
/// switch per record). Userspace drains the ring on a timer instead; only a ring a quarter full
/// wakes it.
pub fn wakeup_flag(ring: &RingBuf) -> u64 {
    let queued = ring.query(BPF_RB_AVAIL_DATA as u64);
    let size = ring.query(BPF_RB_RING_SIZE as u64);
    if queued >= size / 4 { BPF_RB_FORCE_WAKEUP as u64 } else { BPF_RB_NO_WAKEUP as u64 }
}

/// Fills the ids, time and command name, and empties the stacks. `header` points into a
/// ring-buffer reservation.
pub fn fill_ids(h: &mut SampleHeader, pid_tgid: u64, time_ns: u64) {
    h.tgid = (pid_tgid >> 32) as u32;
    h.tid = pid_tgid as u32;
    h.cpu = unsafe { bpf_get_smp_processor_id() };
    h.time_ns = time_ns;
    h.comm = bpf_get_current_comm().unwrap_or_default();
    h.flags = 0;
    h.kernel_stack_len = 0;
    h.user_stack_len = 0;
    h.stack_copy_len = 0;
    h._reserved = 0;
}

/// The frame-pointer walk of the user stack, from the user registers of `ctx`.
pub fn fill_user_stack(ctx: &impl EbpfContext, h: &mut SampleHeader) {
    let user = unsafe {
        bpf_get_stack(ctx.as_ptr(), h.user_stack.as_mut_ptr().cast(), STACK_BYTES, BPF_F_USER_STACK as u64)
    };
    h.user_stack_len = frames(user);
}

pub fn frames(bytes_or_error: i64) -> u32 {
    if bytes_or_error <= 0 {
        0
    } else {
        (bytes_or_error as u32 / size_of::<u64>() as u32).min(MAX_STACK_DEPTH as u32)
    }
}

/// Copies user memory upwards from the stack pointer into `copy` (room for `cap` bytes, at least
/// a page), when `h` has user registers.
///
/// The first read runs to the end of sp's page (variable size, offset 0); then whole pages follow
/// (constant size, bounded offset); a last page-sized read ending exactly at `cap` fills the rest
/// (constant size and offset, overlapping bytes already copied). The verifier accepts a variable
/// size or a variable offset into ring-buffer memory, not both. Stops at the first unreadable
/// page: the top of the stack.
pub unsafe fn copy_user_stack(h: &mut SampleHeader, copy: *mut u8, cap: usize) -> CopyOutcome {
    if h.flags & sample_flags::USER_REGS == 0 {
        return CopyOutcome::Complete;
    }
    let sp = h.user_sp;
    let stack_left = match unsafe { STACK_ENDS.get(h.tid) } {
        Some(&end) if end > sp => end - sp,
        _ => u64::MAX,
    };
    let limit = stack_left.min(cap as u64) as usize;
    let first = PAGE - (sp as usize & (PAGE - 1));
    if unsafe { read_user(copy, first, sp) }.is_err() {
        return CopyOutcome::Unreadable;
    }
    let mut copied = first;
    for _ in 0..MAX_STACK_COPY / PAGE {
        if copied > cap - PAGE || copied >= limit {
            break;
        }
        let dst = unsafe { copy.add(copied) };
        if unsafe { read_user(dst, PAGE, sp + copied as u64) }.is_err() {
            h.stack_copy_len = copied as u32;
            return CopyOutcome::Complete;
        }
        copied += PAGE;
    }
    if copied >= limit && limit < cap {
        // The thread's stack ends here.
        h.stack_copy_len = copied as u32;
        return CopyOutcome::Complete;
    }
    if copied < cap {
        let tail = cap - PAGE;
        let dst = unsafe { copy.add(tail) };
        if unsafe { read_user(dst, PAGE, sp + tail as u64) }.is_err() {
            h.stack_copy_len = copied as u32;
            return CopyOutcome::Complete;
        }
        copied = cap;
    }
    h.stack_copy_len = copied as u32;
    if stack_left <= cap as u64 {
        return CopyOutcome::Complete;
    }
    // The stack may end exactly at the cap; one more byte tells whether it goes on.
    let mut probe = 0u8;
    if unsafe { read_user(&mut probe, 1, sp + cap as u64) }.is_ok() {
        h.flags |= sample_flags::STACK_COPY_TRUNCATED;
        return CopyOutcome::Truncated;
    }
    CopyOutcome::Complete
}

pub unsafe fn read_user(dst: *mut u8, len: usize, src: u64) -> Result<(), i64> {
    let ret = unsafe { bpf_probe_read_user(dst.cast(), len as u32, src as *const _) };
    if ret < 0 { Err(ret) } else { Ok(()) }
}
