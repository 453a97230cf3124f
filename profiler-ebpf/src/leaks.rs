//! `profiler leaks`: uprobes on the allocator's entry points and uretprobes on their returns.
//!
//! Blocks not freed yet live in `OUTSTANDING`, keyed by (tgid, address): frees are matched
//! here, in the order the threads make them, whatever userspace keeps up with. The stack of each
//! followed allocation goes to userspace through the `ALLOCATIONS` ring; losing one there costs
//! that block its stack, never its bytes.
use core::{
    intrinsics::{AtomicOrdering, atomic_xadd},
    mem::size_of,
    ptr::read_volatile,
};

use aya_ebpf::{
    EbpfContext as _,
    bindings::BPF_F_NO_PREALLOC,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_prandom_u32, bpf_ktime_get_ns, generated::bpf_get_attach_cookie,
    },
    macros::{map, uprobe, uretprobe},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray, RingBuf},
    programs::{ProbeContext, RetProbeContext},
};
use profiler_common::{
    AllocFunction, Allocation, AllocationHeader, AllocationKey, LeakCounter, SampleHeader,
    runtimes::{RuntimeKind, RuntimeProcess, RuntimeWalk},
    sample_flags,
};

use crate::{
    memory, runtimes, setting,
    stack::{self, Draft, Dropped, Scratch},
    stopped,
};

/// Allocation records. `profiler leaks` sets the real size at load time; `record` leaves it a page.
#[map(name = "ALLOCATIONS")]
static ALLOCATIONS: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Where each CPU builds its allocation record. Userspace sets one entry per CPU.
#[map(name = "ALLOCATION_SCRATCH")]
static ALLOCATION_SCRATCH: Array<Scratch> = Array::with_max_entries(1, 0);

/// Blocks followed and not freed yet. Userspace sets the capacity; entries are allocated as
/// they come, so an idle tracker costs no memory.
#[map(name = "OUTSTANDING")]
static OUTSTANDING: HashMap<AllocationKey, Allocation> =
    HashMap::with_max_entries(1 << 20, BPF_F_NO_PREALLOC);

/// The allocator call each thread is in, between its uprobe and its uretprobe. (A thread that
/// dies inside the allocator leaves its entry, which a later thread with its tid overwrites:
/// nesting is only believed a few pages deep.)
#[map(name = "CALLS")]
static CALLS: HashMap<u64, Call> = HashMap::with_max_entries(65536, BPF_F_NO_PREALLOC);

/// Each thread's last call to a release function, to tell an `operator delete` that hands its
/// block on to `free` (a tail call) from two frees. Preallocated (LRU maps are), so kept small:
/// the least recently used threads make room.
#[map(name = "LAST_RELEASE")]
static LAST_RELEASE: LruHashMap<u64, Release> = LruHashMap::with_max_entries(4096, 0);

#[map(name = "LEAK_COUNTERS")]
static LEAK_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(LeakCounter::COUNT, 0);

/// Bytes of followed blocks outstanding now, over all threads and CPUs.
#[map(name = "HEAP_BYTES")]
static HEAP_BYTES: Array<u64> = Array::with_max_entries(1, 0);

/// The most `HEAP_BYTES` each CPU has seen; userspace takes the maximum. Per CPU because the
/// eBPF instruction set this is built for has atomic adds but no compare-and-swap.
#[map(name = "PEAK_HEAP_BYTES")]
static PEAK_HEAP_BYTES: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[unsafe(no_mangle)]
static SAMPLE_EVERY: u32 = 1;

const ALLOCATION_HEADER_SIZE: usize = size_of::<AllocationHeader>();
/// How much deeper than its caller an allocator's call to itself runs, at most.
const NESTING_BYTES: u64 = 64 * 1024;

/// An allocator call in progress.
#[repr(C)]
#[derive(Clone, Copy)]
struct Call {
    /// The stack pointer at entry (pointing at the return address): tells this call from calls
    /// the allocator makes to itself, which run deeper, and its return from theirs.
    entry_sp: u64,
    function: u64,
    size: u64,
    /// posix_memalign: where the allocator stores the pointer.
    out_ptr: u64,
    /// realloc: the block it was given, released at entry (so that a thread reusing it at once
    /// is not confused with it) and restored if the call fails.
    old_addr: u64,
    old: Allocation,
    has_old: u32,
    /// Followed (always, or one call in `SAMPLE_EVERY`).
    followed: u32,
}

/// A call to a release function.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
struct Release {
    entry_sp: u64,
    addr: u64,
}

fn count(counter: LeakCounter, n: u64) {
    if let Some(value) = LEAK_COUNTERS.get_ptr_mut(counter as u32) {
        // Atomic even on a per-CPU slot: a preempted probe may resume after another one ran.
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(value, n) };
    }
}

/// Outstanding bytes go up, and this CPU's peak with them.
fn heap_grew(bytes: u64) {
    let Some(outstanding) = HEAP_BYTES.get_ptr_mut(0) else {
        return;
    };
    // An aligned 8-byte load is one instruction: a value the counter really had.
    let now = unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(outstanding, bytes);
        read_volatile(outstanding)
    };
    if let Some(peak) = PEAK_HEAP_BYTES.get_ptr_mut(0)
        && unsafe { *peak } < now
    {
        unsafe { *peak = now };
    }
}

fn heap_shrank(bytes: u64) {
    if let Some(outstanding) = HEAP_BYTES.get_ptr_mut(0) {
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(outstanding, bytes.wrapping_neg()) };
    }
}

#[uprobe]
pub fn alloc_enter(ctx: ProbeContext) -> u32 {
    if stopped() {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let sp = unsafe { (*ctx.regs).rsp };
    if let Some(outer) = unsafe { CALLS.get(pid_tgid) }
        && outer.entry_sp >= sp
        && outer.entry_sp - sp < NESTING_BYTES
    {
        // The allocator calling itself (memalign -> malloc, realloc(NULL) -> malloc), or jumping
        // to itself from the same stack pointer (a tail call: operator new -> malloc): the outer
        // call is the one the program made.
        return 0;
    }
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let Some(function) = AllocFunction::from_cookie(cookie) else {
        return 0;
    };
    let arg = |n: usize| ctx.arg::<u64>(n).unwrap_or(0);
    // calloc's product may overflow: then the call fails and the size is never used.
    let (size, out_ptr, old_addr) = match function {
        AllocFunction::Malloc | AllocFunction::Valloc | AllocFunction::Pvalloc => (arg(0), 0, 0),
        AllocFunction::Calloc => (arg(0).wrapping_mul(arg(1)), 0, 0),
        AllocFunction::Realloc => (arg(1), 0, arg(0)),
        AllocFunction::Reallocarray => (arg(1).wrapping_mul(arg(2)), 0, arg(0)),
        AllocFunction::PosixMemalign => (arg(2), arg(0), 0),
        AllocFunction::AlignedAlloc | AllocFunction::Memalign => (arg(1), 0, 0),
    };
    count(LeakCounter::AllocCalls, 1);
    let mut call = Call {
        entry_sp: sp,
        function: cookie,
        size,
        out_ptr,
        old_addr,
        old: Allocation { size: 0, time_ns: 0 },
        has_old: 0,
        followed: u32::from(sampled()),
    };
    let tgid = (pid_tgid >> 32) as u32;
    if old_addr != 0
        && let Some(old) = release(tgid, old_addr)
    {
        (call.old, call.has_old) = (old, 1);
    }
    let _ = CALLS.insert(pid_tgid, call, 0);
    0
}

fn sampled() -> bool {
    let every = setting(&SAMPLE_EVERY);
    every <= 1 || unsafe { bpf_get_prandom_u32() } % every == 0
}

#[uretprobe]
pub fn alloc_return(ctx: RetProbeContext) -> u32 {
    if stopped() {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(&call) = (unsafe { CALLS.get(pid_tgid) }) else {
        return 0;
    };
    let regs = unsafe { &*ctx.regs };
    // Back in the caller, the return address popped: only the outer call's return matches.
    if regs.rsp != call.entry_sp.wrapping_add(8) {
        return 0;
    }
    let _ = CALLS.remove(pid_tgid);
    let tgid = (pid_tgid >> 32) as u32;
    let returned: u64 = ctx.ret();
    let addr = if call.function == AllocFunction::PosixMemalign as u64 {
        if returned != 0 { 0 } else { read_pointer(call.out_ptr) }
    } else {
        returned
    };
    if addr == 0 {
        // realloc(ptr, 0) frees and may return NULL; any other NULL is a failure, and a failed
        // realloc leaves the old block as it was.
        if call.size != 0 || call.old_addr == 0 {
            count(LeakCounter::Failed, 1);
            if call.has_old != 0 {
                restore(tgid, call.old_addr, call.old);
            }
        }
        return 0;
    }
    if call.followed == 0 {
        return 0;
    }
    let time_ns = unsafe { bpf_ktime_get_ns() };
    let key = AllocationKey { tgid, _pad: 0, addr };
    if OUTSTANDING.insert(key, Allocation { size: call.size, time_ns }, 0).is_err() {
        count(LeakCounter::TableFull, 1);
        return 0;
    }
    count(LeakCounter::Tracked, 1);
    count(LeakCounter::TrackedBytes, call.size);
    heap_grew(call.size);
    record_stack(&ctx, pid_tgid, time_ns, AllocationHeader { addr, size: call.size });
    0
}

fn read_pointer(user_addr: u64) -> u64 {
    let mut value = 0u64;
    match unsafe { memory::read_user((&raw mut value).cast(), size_of::<u64>(), user_addr) } {
        Ok(()) => value,
        Err(_) => 0,
    }
}

/// The allocation record: the block, then a sample taken where the allocator returned.
fn record_stack(ctx: &RetProbeContext, pid_tgid: u64, time_ns: u64, allocation: AllocationHeader) {
    let Some(draft) = Draft::claim(&ALLOCATION_SCRATCH) else {
        count(LeakCounter::StacksLost, 1);
        return;
    };
    let record = draft.bytes();
    unsafe { record.cast::<AllocationHeader>().write_unaligned(allocation) };
    let sample = unsafe { record.add(ALLOCATION_HEADER_SIZE) };
    let header = unsafe { &mut *sample.cast::<SampleHeader>() };
    stack::fill_ids(header, pid_tgid, time_ns);
    let regs = unsafe { &*ctx.regs };
    header.flags = sample_flags::USER_REGS;
    stack::take_user_regs(header, regs);
    // A short copy only shortens the stack; the sampler's counters have no leak analogue.
    let (len, _) = stack::take_native_stacks(ctx, sample, false);
    runtimes::hand_over(ctx, &ALLOC_RETURN_WALKERS, &draft, len);
    send_allocation(draft, len);
}

/// Sends the allocation record in `draft`, whose sample is `sample_len` bytes long.
fn send_allocation(draft: Draft, sample_len: usize) {
    let len = ALLOCATION_HEADER_SIZE + sample_len;
    match draft.send(&ALLOCATIONS, len) {
        Ok(()) => count(LeakCounter::RingBytes, len as u64),
        Err(Dropped::RingFull | Dropped::Overwritten) => count(LeakCounter::StacksLost, 1),
    }
}

/// The runtime walkers of [`alloc_return`], by [`RuntimeKind`] (`runtimes::walkers!`), once
/// loaded.
#[map(name = "ALLOC_RETURN_WALKERS")]
static ALLOC_RETURN_WALKERS: ProgramArray = ProgramArray::with_max_entries(RuntimeKind::COUNT, 0);

/// The walker of runtime `kind`, tail-called by [`alloc_return`]: adds the frames `walk` reads
/// to the allocation's sample and sends the record.
pub(crate) fn resume(
    kind: RuntimeKind,
    walk: impl FnOnce(&RuntimeProcess, u32, *mut u8) -> (RuntimeWalk, u32),
) {
    if let Some((draft, len)) = Draft::resume(&ALLOCATION_SCRATCH) {
        let sample = unsafe { draft.bytes().add(ALLOCATION_HEADER_SIZE) };
        let len = stack::append_runtime_frames(sample, len, kind, walk);
        send_allocation(draft, len);
    }
}

#[uprobe]
pub fn free_enter(ctx: ProbeContext) -> u32 {
    if stopped() {
        return 0;
    }
    let addr: u64 = ctx.arg(0).unwrap_or(0);
    if addr == 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let call = Release { entry_sp: unsafe { (*ctx.regs).rsp }, addr };
    // A block we never saw allocated (before the tracker started, or not sampled) is ignored.
    let released = release((pid_tgid >> 32) as u32, addr).is_some();
    // The same block from the same stack pointer, and nothing left to release: the release
    // function tail-called another one (operator delete -> free), still one call. (A block
    // allocated again in between would have been released.)
    let handed_on = !released && unsafe { LAST_RELEASE.get(pid_tgid) }.is_some_and(|last| *last == call);
    if !handed_on {
        count(LeakCounter::FreeCalls, 1);
        let _ = LAST_RELEASE.insert(pid_tgid, call, 0);
    }
    0
}

/// Forgets a followed block given back to the allocator, and returns what it was.
fn release(tgid: u32, addr: u64) -> Option<Allocation> {
    let key = AllocationKey { tgid, _pad: 0, addr };
    let block = *unsafe { OUTSTANDING.get(key) }?;
    // Two threads freeing the same block (a double free): only one removes it.
    OUTSTANDING.remove(key).ok()?;
    count(LeakCounter::Released, 1);
    count(LeakCounter::ReleasedBytes, block.size);
    heap_shrank(block.size);
    Some(block)
}

fn restore(tgid: u32, addr: u64, block: Allocation) {
    let key = AllocationKey { tgid, _pad: 0, addr };
    if OUTSTANDING.insert(key, block, 0).is_ok() {
        count(LeakCounter::Released, 0u64.wrapping_sub(1));
        count(LeakCounter::ReleasedBytes, 0u64.wrapping_sub(block.size));
        heap_grew(block.size);
    }
}
