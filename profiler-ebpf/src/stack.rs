//! Recording a user stack: ids, registers, a page-wise copy of the top of the stack, the
//! frame-pointer chain and the kernel stack, laid out as `profiler_common` documents.
//!
//! A record is built in a per-CPU [`Scratch`] buffer, then exactly its length is reserved in the
//! ring and copied there: the BPF stack is only 512 bytes, and a ring reservation must be of a
//! size known before the stack is read.
use core::{ffi::c_void, mem::size_of, ptr};

use aya_ebpf::{
    EbpfContext,
    bindings::{
        BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE,
        bpf_dynptr, pt_regs,
    },
    helpers::{
        bpf_get_current_comm, bpf_get_smp_processor_id, bpf_probe_read_kernel,
        generated::{
            bpf_dynptr_write, bpf_get_current_task_btf, bpf_get_stack, bpf_ringbuf_discard_dynptr,
            bpf_ringbuf_reserve_dynptr, bpf_ringbuf_submit_dynptr, bpf_task_pt_regs,
        },
    },
    macros::map,
    maps::{Array, LruHashMap, RingBuf},
};
use profiler_common::{
    AllocationHeader, FramePointers, MAX_RUNTIME_FRAMES_BYTES, MAX_SAMPLE_SIZE, MAX_STACK_COPY,
    MAX_STACK_DEPTH, RuntimeTrailer, SAMPLE_HEADER_SIZE, STACK_PAGE_SIZE, SampleHeader, frames_offset,
    runtimes::{RUNTIME_REGISTERS, RuntimeKind, RuntimeProcess, RuntimeWalk, UserRegister},
    sample_flags,
};

use crate::{memory::read_user, runtimes, setting};

/// Where each thread's stack mapping ends (tid -> address), as userspace learned from earlier
/// records: the copy stops there instead of reading whatever is mapped above the stack.
#[map(name = "STACK_ENDS")]
static STACK_ENDS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);

#[unsafe(no_mangle)]
static STACK_COPY_CAP: u32 = 32 * 1024;
#[unsafe(no_mangle)]
static FRAME_POINTERS: u32 = FramePointers::WhenCopyShort as u32;

/// Lowest privilege level bits of a saved code segment: 3 means the CPU was in user mode.
pub const USER_MODE_RPL: u64 = 3;
const STACK_BYTES: u32 = (MAX_STACK_DEPTH * size_of::<u64>()) as u32;
const PAGE: usize = STACK_PAGE_SIZE;
/// Room for the longest record (an allocation header, then a sample), and a page more: the
/// last read of the copy is bounded by the cap only.
pub const SCRATCH_BYTES: usize = size_of::<AllocationHeader>() + MAX_SAMPLE_SIZE + PAGE;

/// A CPU's buffer for the record being built. Userspace sizes the arrays of them to the number
/// of CPUs.
#[repr(C)]
pub struct Scratch {
    /// Bumped by every program run that starts a record here. A uprobe program can be
    /// preempted, and another one run on the same CPU in between: a changed value at the end
    /// says the bytes are no longer this run's.
    claim: u64,
    /// The record's length so far, when it is handed over to a runtime's walker: a tail call
    /// passes nothing but the context.
    handed_over_len: u64,
    bytes: [u8; SCRATCH_BYTES],
}

/// A record being built in this CPU's scratch buffer.
pub struct Draft {
    scratch: *mut Scratch,
    claim: u64,
}

/// Why a record did not reach the ring.
pub enum Dropped {
    /// The ring had no room.
    RingFull,
    /// The scratch buffer was taken over by another run on this CPU while this one was
    /// preempted.
    Overwritten,
}

impl Draft {
    /// Claims this CPU's buffer in `scratch`; `None` only if the map is smaller than the
    /// number of CPUs.
    pub fn claim(scratch: &Array<Scratch>) -> Option<Self> {
        let scratch = scratch.get_ptr_mut(unsafe { bpf_get_smp_processor_id() })?;
        let claim = unsafe { (*scratch).claim }.wrapping_add(1);
        unsafe { (*scratch).claim = claim };
        Some(Self { scratch, claim })
    }

    /// Takes up this CPU's record in `scratch` where the program that began it handed it over
    /// ([`runtimes::hand_over`]); with the length it had then.
    pub fn resume(scratch: &Array<Scratch>) -> Option<(Self, usize)> {
        let scratch = scratch.get_ptr_mut(unsafe { bpf_get_smp_processor_id() })?;
        let (claim, len) = unsafe { ((*scratch).claim, (*scratch).handed_over_len) };
        Some((Self { scratch, claim }, len as usize))
    }

    /// Notes the record's length for the program it is handed over to.
    pub fn set_handed_over_len(&self, len: usize) {
        unsafe { (*self.scratch).handed_over_len = len as u64 };
    }

    /// The buffer, from its start.
    pub fn bytes(&self) -> *mut u8 {
        unsafe { (&raw mut (*self.scratch).bytes).cast() }
    }

    /// Sends the first `len` bytes to `ring` (`len` is bounded to the buffer here, which the
    /// verifier needs to see).
    pub fn send(self, ring: &RingBuf, len: usize) -> Result<(), Dropped> {
        let len = len.min(SCRATCH_BYTES) as u32;
        let ring_ptr = ptr::from_ref(ring).cast_mut().cast::<c_void>();
        let mut record = bpf_dynptr { __opaque: [0; 2] };
        // The dynptr must be released whether or not the reservation succeeded.
        if unsafe { bpf_ringbuf_reserve_dynptr(ring_ptr, len, 0, &mut record) } < 0 {
            unsafe { bpf_ringbuf_discard_dynptr(&mut record, 0) };
            return Err(Dropped::RingFull);
        }
        let written = unsafe { bpf_dynptr_write(&record, 0, self.bytes().cast(), len, 0) };
        if written < 0 || unsafe { (*self.scratch).claim } != self.claim {
            unsafe { bpf_ringbuf_discard_dynptr(&mut record, 0) };
            return Err(Dropped::Overwritten);
        }
        unsafe { bpf_ringbuf_submit_dynptr(&mut record, wakeup_flag(ring)) };
        Ok(())
    }
}

/// What the user stack copy found, for the caller's counters.
pub enum CopyOutcome {
    /// The copy reaches the top of the stack (or there is no stack to copy).
    Complete,
    /// The copy stopped at the cap while the stack went on.
    Truncated,
    /// Not even the first page was readable.
    Unreadable,
    /// No copy is taken (a cap of 0).
    NotCopied,
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
fn wakeup_flag(ring: &RingBuf) -> u64 {
    let queued = ring.query(BPF_RB_AVAIL_DATA as u64);
    let size = ring.query(BPF_RB_RING_SIZE as u64);
    if queued >= size / 4 { BPF_RB_FORCE_WAKEUP as u64 } else { BPF_RB_NO_WAKEUP as u64 }
}

/// Fills the ids, time and command name, and zeroes the rest.
pub fn fill_ids(h: &mut SampleHeader, pid_tgid: u64, time_ns: u64) {
    h.tgid = (pid_tgid >> 32) as u32;
    h.tid = pid_tgid as u32;
    h.cpu = unsafe { bpf_get_smp_processor_id() };
    h.time_ns = time_ns;
    h.comm = bpf_get_current_comm().unwrap_or_default();
    h.flags = 0;
    (h.user_ip, h.user_sp, h.user_bp) = (0, 0, 0);
    h.stack_copy_len = 0;
    h.user_stack_len = 0;
    h.kernel_stack_len = 0;
    h.off_cpu_state = 0;
    h.off_cpu_ns = 0;
    h.runtime = RuntimeTrailer::default();
}

/// The user registers saved when the current thread entered the kernel (none for a kernel
/// thread: its saved frame is not from user mode).
pub fn fill_saved_user_regs(h: &mut SampleHeader) {
    let saved = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const pt_regs;
    if saved.is_null() {
        return;
    }
    if let Ok(saved) = unsafe { bpf_probe_read_kernel(saved) }
        && saved.cs & 3 == USER_MODE_RPL
    {
        h.flags |= sample_flags::USER_REGS;
        take_user_regs(h, &saved);
    }
}

/// The user registers of `regs` that a sample's header keeps: the instruction, stack and frame
/// pointers, and those runtimes need ([`RUNTIME_REGISTERS`]).
pub fn take_user_regs(h: &mut SampleHeader, regs: &pt_regs) {
    (h.user_ip, h.user_sp, h.user_bp) = (regs.rip, regs.rsp, regs.rbp);
    h.runtime.registers = RUNTIME_REGISTERS.map(|register| match register {
        UserRegister::R13 => regs.r13,
        UserRegister::R15 => regs.r15,
    });
}

/// Takes the native stacks of a sample whose header (ids and registers) is filled in, `sample`
/// being the record's start in a scratch buffer: the copy of the user stack, then, where wanted,
/// the frame-pointer chain and the kernel stack. Returns the record's length and what the copy
/// found. The frames of a runtime walked here come after them, and after any kernel stack the
/// caller adds ([`runtimes::hand_over`], then [`append_runtime_frames`]).
pub fn take_native_stacks(ctx: &impl EbpfContext, sample: *mut u8, kernel: bool) -> (usize, CopyOutcome) {
    let h = unsafe { &mut *sample.cast::<SampleHeader>() };
    let cap = stack_copy_cap();
    let outcome = if cap == 0 {
        CopyOutcome::NotCopied
    } else {
        unsafe { copy_user_stack(h, sample.add(SAMPLE_HEADER_SIZE), cap) }
    };
    // Bounded again where the verifier can see it.
    let mut end = frames_offset((h.stack_copy_len as usize).min(MAX_STACK_COPY));
    if wants_frame_pointers(&outcome) {
        h.user_stack_len = unsafe { get_stack(ctx, sample.add(end), BPF_F_USER_STACK as u64) };
        end += 8 * h.user_stack_len as usize;
    }
    if kernel {
        h.kernel_stack_len = unsafe { get_stack(ctx, sample.add(end), 0) };
        end += 8 * h.kernel_stack_len as usize;
    }
    (end, outcome)
}

/// Walks the current thread's frames of runtime `kind` with `walk` (when its process runs it) into
/// the record at `sample`, whose first `end` bytes are its header and native stacks; returns its
/// new length.
pub fn append_runtime_frames(
    sample: *mut u8,
    end: usize,
    kind: RuntimeKind,
    walk: impl FnOnce(&RuntimeProcess, u32, *mut u8) -> (RuntimeWalk, u32),
) -> usize {
    let h = unsafe { &mut *sample.cast::<SampleHeader>() };
    // Bounded again where the verifier can see it: the runtime's frames fit behind.
    let end = end.min(frames_offset(MAX_STACK_COPY) + 2 * STACK_BYTES as usize);
    runtimes::walk(h, unsafe { sample.add(end) }, kind, walk);
    end + (h.runtime.frames_bytes as usize).min(MAX_RUNTIME_FRAMES_BYTES)
}

/// The kernel's frame-pointer walk repeats what the copy holds when the copy reaches the top of
/// the stack; it is taken only when userspace will use it.
fn wants_frame_pointers(outcome: &CopyOutcome) -> bool {
    match setting(&FRAME_POINTERS) {
        mode if mode == FramePointers::Always as u32 => true,
        mode if mode == FramePointers::WhenCopyShort as u32 => !matches!(outcome, CopyOutcome::Complete),
        _ => false,
    }
}

/// `bpf_get_stack` into `frames` (room for MAX_STACK_DEPTH entries); returns the frame count.
unsafe fn get_stack(ctx: &impl EbpfContext, frames: *mut u8, flags: u64) -> u32 {
    let bytes = unsafe { bpf_get_stack(ctx.as_ptr(), frames.cast(), STACK_BYTES, flags) };
    if bytes <= 0 { 0 } else { (bytes as u32 / size_of::<u64>() as u32).min(MAX_STACK_DEPTH as u32) }
}

/// Copies user memory upwards from the stack pointer into `copy` (room for `cap` bytes and a
/// page more), when `h` has user registers: up to the cap, or to where userspace said this
/// thread's stack ends (`STACK_ENDS`: the end of its mapping, or of its outermost frame once
/// an unwind reached it).
///
/// Page by page: `bpf_probe_read_user` fails for a whole range as soon as one page of it is
/// unmapped, and cannot fault pages in. The first read runs to the end of sp's page; an
/// unreadable page after it is the top of the stack.
unsafe fn copy_user_stack(h: &mut SampleHeader, copy: *mut u8, cap: usize) -> CopyOutcome {
    if h.flags & sample_flags::USER_REGS == 0 {
        return CopyOutcome::Complete;
    }
    let sp = h.user_sp;
    let stack_left = match unsafe { STACK_ENDS.get(h.tid) } {
        Some(&end) if end > sp => end - sp,
        _ => u64::MAX,
    };
    let limit = stack_left.min(cap as u64) as usize;
    let first = (PAGE - (sp as usize & (PAGE - 1))).min(limit);
    if unsafe { read_user(copy, first, sp) }.is_err() {
        return CopyOutcome::Unreadable;
    }
    let mut copied = first;
    for _ in 0..MAX_STACK_COPY / PAGE {
        // Bounded where the verifier can see it: `copy` has a page of room past the cap.
        if copied >= limit || copied >= MAX_STACK_COPY {
            break;
        }
        let len = (limit - copied).min(PAGE);
        if unsafe { read_user(copy.add(copied), len, sp + copied as u64) }.is_err() {
            break;
        }
        copied += len;
    }
    h.stack_copy_len = copied as u32;
    if copied < cap || stack_left <= cap as u64 {
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
