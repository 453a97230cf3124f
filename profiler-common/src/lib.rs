//! Types shared by the eBPF programs (`profiler-ebpf`) and userspace (`profiler`).
//!
//! Everything here is `#[repr(C)]` and `no_std`: the kernel side writes these layouts into the
//! ring buffer and maps, and userspace reads them back byte for byte. With the `user` feature
//! the records and map values derive `bytemuck::Pod`, whose derive refuses a layout with padding:
//! padding is spelled out as `_pad` fields.
//!
//! # The sample record
//!
//! Each perf cpu-clock sample that passes the filter becomes one ring-buffer record, as long as
//! what was taken: a fixed [`SampleHeader`], then the bytes of user stack copied, then the
//! frame-pointer user stack and the kernel stack, as many frames as each has:
//!
//! ```text
//! offset                       size                          content
//! 0                            size_of SampleHeader          SampleHeader (see its fields)
//! SAMPLE_HEADER_SIZE           stack_copy_len                copy of user memory [user_sp, user_sp + stack_copy_len)
//! + pad8(stack_copy_len)       8 * user_stack_len            frame-pointer user stack, innermost first
//! + 8 * user_stack_len         8 * kernel_stack_len          kernel stack, innermost first
//! + 8 * kernel_stack_len       runtime.frames_bytes          the runtime's frame records
//! ```
//!
//! `pad8` rounds up to a multiple of 8, so that the frames are 8-byte aligned; [`sample_size`]
//! gives the whole length. A runtime's frames are there when the process runs a runtime that
//! userspace registered in `RUNTIME_PROCESSES` and whose frames the kernel walks (CPython: the
//! interpreter keeps its frames in heap memory, which changes as soon as the thread runs again,
//! so they are read at sample time); [`RuntimeTrailer`] says whose they are and what the walk
//! found. The copy is taken page by page, upwards from the user stack
//! pointer, and stops at the first page that cannot be read (the top of the stack), at the end
//! of the thread's stack mapping when known (`STACK_ENDS`), or at the cap
//! ([`globals::STACK_COPY_CAP`]), whichever comes first.
//!
//! The program builds the record in a per-CPU scratch buffer and reserves exactly its length in
//! the ring (a dynptr reservation): a shallow stack costs the ring, the copy and the reader a
//! few hundred bytes, not the cap.
//!
//! # The allocation record (`profiler leaks`)
//!
//! Each allocation the leak tracker follows becomes one record in the `ALLOCATIONS` ring buffer:
//! an [`AllocationHeader`] followed by a sample record as above, taken where the allocator
//! returned to its caller (no kernel stack):
//!
//! ```text
//! offset                       size                          content
//! 0                            size_of AllocationHeader      AllocationHeader
//! size_of AllocationHeader     sample_size(..)               sample record
//! ```
//!
//! The block itself is kept in the `OUTSTANDING` map until it is freed, under the same
//! (tgid, address) and with the same `time_ns` as the record, which is how userspace finds the
//! stack of a block still outstanding at the end.
#![no_std]

pub mod runtimes;

pub use runtimes::{MAX_RUNTIME_FRAMES_BYTES, RuntimeTrailer};

/// Deepest kernel or frame-pointer user stack recorded, in frames. Equals the kernel's default
/// `kernel.perf_event_max_stack`, the most `bpf_get_stack` returns without tuning.
pub const MAX_STACK_DEPTH: usize = 127;

/// Length of a task's command name, including the trailing NUL.
pub const TASK_COMM_LEN: usize = 16;

/// The unit of the user stack copy. `bpf_probe_read_user` fails for a whole range as soon as one
/// page of it is unmapped, so the copy proceeds one page at a time.
pub const STACK_PAGE_SIZE: usize = 4096;

/// Largest stack copy the eBPF program supports, in bytes.
pub const MAX_STACK_COPY: usize = 64 * 1024;

/// The fixed part of a sample record. Little-endian, as written by the kernel.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleHeader {
    /// Process id (the kernel's tgid).
    pub tgid: u32,
    /// Thread id (the kernel's pid).
    pub tid: u32,
    /// CPU the sample was taken on.
    pub cpu: u32,
    /// Bit set of [`sample_flags`].
    pub flags: u32,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC, in nanoseconds.
    pub time_ns: u64,
    /// The thread's command name, NUL-padded.
    pub comm: [u8; TASK_COMM_LEN],
    /// User-mode instruction pointer, stack pointer and frame pointer (rbp) at the sample, or at
    /// the last entry into the kernel when the sample hit kernel mode. Zero when
    /// [`sample_flags::USER_REGS`] is not set.
    pub user_ip: u64,
    pub user_sp: u64,
    pub user_bp: u64,
    /// Bytes of user stack copied after the header.
    pub stack_copy_len: u32,
    /// Frames of the frame-pointer user stack and of the kernel stack after the copy, each at
    /// most [`MAX_STACK_DEPTH`].
    pub user_stack_len: u32,
    pub kernel_stack_len: u32,
    /// With [`sample_flags::OFF_CPU`]: why the thread was off the CPU, an [`OffCpuState`].
    pub off_cpu_state: u32,
    /// With [`sample_flags::OFF_CPU`]: how long the thread was off the CPU, from `time_ns`, in
    /// nanoseconds. The record is taken when it comes back, in its own context, with the stack
    /// it left at.
    pub off_cpu_ns: u64,
    /// What a language runtime adds: its frames read at sample time, and registers of its own.
    pub runtime: RuntimeTrailer,
}

/// Size of [`SampleHeader`]: where the stack copy starts.
pub const SAMPLE_HEADER_SIZE: usize = core::mem::size_of::<SampleHeader>();

/// Where the frames start after a stack copy of `stack_copy_len` bytes, from the start of the
/// sample record.
pub const fn frames_offset(stack_copy_len: usize) -> usize {
    SAMPLE_HEADER_SIZE + stack_copy_len.next_multiple_of(8)
}

/// Length of a sample record.
pub const fn sample_size(
    stack_copy_len: usize,
    user_stack_len: usize,
    kernel_stack_len: usize,
    runtime_frames_bytes: usize,
) -> usize {
    frames_offset(stack_copy_len) + 8 * (user_stack_len + kernel_stack_len) + runtime_frames_bytes
}

/// The longest sample record.
pub const MAX_SAMPLE_SIZE: usize =
    sample_size(MAX_STACK_COPY, MAX_STACK_DEPTH, MAX_STACK_DEPTH, MAX_RUNTIME_FRAMES_BYTES);

// The sizes ARCHITECTURE.md quotes.
const _: () = assert!(SAMPLE_HEADER_SIZE == 112);

/// Bits of [`SampleHeader::flags`].
pub mod sample_flags {
    /// `user_ip`, `user_sp` and `user_bp` hold the thread's user registers.
    pub const USER_REGS: u32 = 1 << 0;
    /// The sample interrupted kernel mode; the user registers are those saved at kernel entry.
    pub const IN_KERNEL: u32 = 1 << 1;
    /// The stack copy stopped at the cap while the stack went on.
    pub const STACK_COPY_TRUNCATED: u32 = 1 << 2;
    /// Not a cpu-clock sample: a span off the CPU (`off_cpu_ns`, `off_cpu_state`).
    pub const OFF_CPU: u32 = 1 << 3;
}

/// Why a thread was off the CPU ([`SampleHeader::off_cpu_state`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OffCpuState {
    /// Blocked, interruptibly (`S`: sleeps, waits on futexes, sockets, pipes).
    Sleeping = 1,
    /// Blocked, uninterruptibly (`D`: disk I/O, some locks).
    Uninterruptible = 2,
    /// Runnable, waiting for a CPU (preempted, or woken and not yet run).
    Runnable = 3,
}

impl OffCpuState {
    /// The state of a task that `sched_switch` switches out, from its `preempt` flag and its
    /// `prev_state` (the kernel's `TASK_*` bits: 0 is running, `TASK_UNINTERRUPTIBLE` is 2).
    pub const fn at_switch(preempt: bool, prev_state: u64) -> Self {
        const TASK_UNINTERRUPTIBLE: u64 = 2;
        if preempt || prev_state == 0 {
            Self::Runnable
        } else if prev_state & TASK_UNINTERRUPTIBLE != 0 {
            Self::Uninterruptible
        } else {
            Self::Sleeping
        }
    }
}

/// When the kernel walks the user stack's frame-pointer chain ([`globals::FRAME_POINTERS`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FramePointers {
    /// Never: userspace unwinds the copy alone (`--call-graph dwarf`).
    Never = 0,
    /// When the copy does not reach the top of the stack, where DWARF unwinding would stop
    /// early (`--call-graph auto`). A copy that does reach it holds the whole chain already.
    WhenCopyShort = 1,
    /// Always (`--call-graph fp`, without a copy).
    Always = 2,
}

/// Per-CPU event counters, indexes into the `COUNTERS` map.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Every time the program ran.
    Seen = 0,
    /// Samples dropped by the pid filter, idle, or the profiler itself.
    Filtered = 1,
    /// Samples lost because the ring buffer was full.
    Lost = 2,
    /// Samples whose stack copy stopped at the cap.
    StackTruncated = 3,
    /// Samples with user registers whose stack copy could not read even the first page.
    StackUnreadable = 4,
    /// Processes forked by followed ones that could not join the filter: it was full.
    FilterFull = 5,
    /// Bytes of the samples sent through the ring.
    RingBytes = 6,
    /// Spans off the CPU shorter than the threshold: not recorded.
    ShortOffCpu = 7,
    /// Spans off the CPU recorded (sent or lost).
    OffCpu = 8,
    /// Followed threads that left the CPU without being noted: the thread table was full, or
    /// the kernel had no memory for its entry. Their spans are missing.
    OffCpuUnnoted = 9,
    /// Spans off the CPU (not waits for a CPU) whose kernel stack the kernel would not give:
    /// recorded without kernel frames.
    OffCpuNoKernelStack = 10,
    /// Threads (system-wide) that left the CPU without being noted because their user held
    /// [`OFF_CPU_USER_SHARE`] entries of the thread table already. Their spans are missing.
    OffCpuOverShare = 11,
}

impl Counter {
    pub const COUNT: u32 = 12;
}

/// Entries of the `OFF_CPU_THREADS` table.
pub const OFF_CPU_THREADS_MAX: u32 = 16384;

/// Entries of `OFF_CPU_THREADS` one user's threads may hold when the whole system is followed:
/// a quarter, so that no user's processes take every slot from the others'.
pub const OFF_CPU_USER_SHARE: u32 = OFF_CPU_THREADS_MAX / 4;

/// What an allocation record has in front of its sample record.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocationHeader {
    /// The address the allocator returned.
    pub addr: u64,
    /// The bytes asked for (`nmemb * size` for calloc).
    pub size: u64,
}

/// Value of the `OFF_CPU_THREADS` map: a followed thread that has left the CPU since sampling
/// started, and its span not sent yet, if any.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffCpuThread {
    /// `bpf_ktime_get_ns()` when it left; 0 while it is on the CPU with no span to send.
    pub since_ns: u64,
    /// When it came back; 0 while it is still off the CPU.
    pub resumed_ns: u64,
    /// The thread's process.
    pub tgid: u32,
    /// An [`OffCpuState`].
    pub state: u32,
    /// Nonzero when it left inside a system call: its span is sent at the call's return, where
    /// its user stack is as it left it.
    pub in_syscall: u32,
    /// Valid entries of `kernel_stack`: 0 until the span is known to be long enough (as the
    /// thread comes back, or when userspace counts the spans still open).
    pub kernel_stack_len: u32,
    /// Leading entries of `kernel_stack` to leave out: 1 when `__schedule`'s address, put
    /// first, is not known (0).
    pub kernel_stack_skip: u32,
    /// The user whose share of the table the entry counts in, as it was made (see the eBPF
    /// side's `task_user`): set only when the whole system is followed.
    pub uid: u32,
    /// Where it waits, in the kernel (`__schedule` under the function that waited), innermost
    /// first.
    pub kernel_stack: [u64; MAX_STACK_DEPTH],
}

/// Key of the `OUTSTANDING` map: a block of a process.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AllocationKey {
    pub tgid: u32,
    pub _pad: u32,
    pub addr: u64,
}

/// Value of the `OUTSTANDING` map: a block not freed yet.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allocation {
    pub size: u64,
    /// `bpf_ktime_get_ns()` when the allocator returned; equal to the `time_ns` of the block's
    /// allocation record.
    pub time_ns: u64,
}

// aya reads and writes map keys and values as plain bytes.
// SAFETY: what aya::Pod asks is what the bytemuck::Pod derive checks: no padding, and every bit
// pattern valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for AllocationKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for Allocation {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for OffCpuThread {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for KernelNames {}

/// Addresses the kernel names in one run of [`programs::NAME_KERNEL_ADDRESSES`]: its arguments
/// (of the 12 a run takes, as many as keep [`KernelNames`] a page).
pub const KERNEL_NAMES_PER_RUN: usize = 8;

/// Bytes of a kernel function's name and place in [`KernelNames`], its NUL included: the
/// kernel's own limit of a name (`KSYM_NAME_LEN`, 512 since Linux 6.1); a longer text is cut.
pub const KERNEL_NAME_LEN: usize = 512;

/// Value of the `KERNEL_NAMES` map: what [`programs::NAME_KERNEL_ADDRESSES`] made of the
/// addresses it was run with, each NUL-terminated: the function's name and the address's place
/// in it (`name+0xOFFSET/0xSIZE`) followed by ` [module]` for a module's, and the address in
/// hex (`0x...`) where the kernel knows no function.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy)]
pub struct KernelNames {
    pub names: [[u8; KERNEL_NAME_LEN]; KERNEL_NAMES_PER_RUN],
}

/// The allocator functions the leak tracker probes; the attach cookie of `alloc_enter` tells
/// which one a call is, hence where its arguments are.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocFunction {
    /// `malloc(size)`
    Malloc = 0,
    /// `calloc(nmemb, size)`
    Calloc = 1,
    /// `realloc(ptr, size)`
    Realloc = 2,
    /// `reallocarray(ptr, nmemb, size)`
    Reallocarray = 3,
    /// `posix_memalign(&ptr, alignment, size)`: returns 0 and stores the pointer.
    PosixMemalign = 4,
    /// `aligned_alloc(alignment, size)`
    AlignedAlloc = 5,
    /// `memalign(alignment, size)`
    Memalign = 6,
    /// `valloc(size)`
    Valloc = 7,
    /// `pvalloc(size)`
    Pvalloc = 8,
}

impl AllocFunction {
    pub const ALL: [AllocFunction; 9] = [
        Self::Malloc,
        Self::Calloc,
        Self::Realloc,
        Self::Reallocarray,
        Self::PosixMemalign,
        Self::AlignedAlloc,
        Self::Memalign,
        Self::Valloc,
        Self::Pvalloc,
    ];

    /// The function from an attach cookie.
    pub const fn from_cookie(cookie: u64) -> Option<Self> {
        if cookie < Self::ALL.len() as u64 { Some(Self::ALL[cookie as usize]) } else { None }
    }

    /// The C symbol.
    pub const fn symbol(self) -> &'static str {
        match self {
            Self::Malloc => "malloc",
            Self::Calloc => "calloc",
            Self::Realloc => "realloc",
            Self::Reallocarray => "reallocarray",
            Self::PosixMemalign => "posix_memalign",
            Self::AlignedAlloc => "aligned_alloc",
            Self::Memalign => "memalign",
            Self::Valloc => "valloc",
            Self::Pvalloc => "pvalloc",
        }
    }
}

/// Per-CPU counters of the leak tracker, indexes into the `LEAK_COUNTERS` map.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeakCounter {
    /// Calls to an allocation function (nested calls inside the allocator not counted).
    AllocCalls = 0,
    /// Calls to free with a non-null pointer.
    FreeCalls = 1,
    /// Allocation calls that returned no memory.
    Failed = 2,
    /// Blocks followed (all of them, or one in `--sample-every`), and their bytes.
    Tracked = 3,
    TrackedBytes = 4,
    /// Followed blocks given back (free, or realloc), and their bytes.
    Released = 5,
    ReleasedBytes = 6,
    /// Blocks not followed because the `OUTSTANDING` map was full.
    TableFull = 7,
    /// Followed blocks whose stack record did not fit in the ring buffer.
    StacksLost = 8,
    /// Bytes of the allocation records sent through the ring.
    RingBytes = 9,
}

impl LeakCounter {
    pub const COUNT: u32 = 10;
}

/// Names of the maps in the eBPF object.
pub mod maps {
    /// `RingBuf` of sample records.
    pub const SAMPLES: &str = "SAMPLES";
    /// `HashMap<u32 tgid, u8>`: the processes to sample when filtering is on.
    pub const TGID_FILTER: &str = "TGID_FILTER";
    /// `Array<u32>` of one entry: nonzero stops every program (sampling and tracking).
    pub const CONTROL: &str = "CONTROL";
    /// `PerCpuArray<u64>` indexed by [`crate::Counter`].
    pub const COUNTERS: &str = "COUNTERS";
    /// `LruHashMap<u32 tid, u64>`: end address of each thread's stack mapping, filled in by
    /// userspace; the stack copy stops there.
    pub const STACK_ENDS: &str = "STACK_ENDS";
    /// `RingBuf` of allocation records.
    pub const ALLOCATIONS: &str = "ALLOCATIONS";
    /// `HashMap<AllocationKey, Allocation>`: blocks followed and not freed yet.
    pub const OUTSTANDING: &str = "OUTSTANDING";
    /// `PerCpuArray<u64>` indexed by [`crate::LeakCounter`].
    pub const LEAK_COUNTERS: &str = "LEAK_COUNTERS";
    /// `Array<u64>` of one entry: bytes of followed blocks outstanding now.
    pub const HEAP_BYTES: &str = "HEAP_BYTES";
    /// `PerCpuArray<u64>` of one entry: the most `HEAP_BYTES` each CPU saw.
    pub const PEAK_HEAP_BYTES: &str = "PEAK_HEAP_BYTES";
    /// `Array` of one scratch buffer per CPU where sample records are built; userspace sizes it
    /// to the number of CPUs (one entry when unused).
    pub const SAMPLE_SCRATCH: &str = "SAMPLE_SCRATCH";
    /// The same for allocation records.
    pub const ALLOCATION_SCRATCH: &str = "ALLOCATION_SCRATCH";
    /// The same for off-CPU records.
    pub const OFF_CPU_SCRATCH: &str = "OFF_CPU_SCRATCH";
    /// `HashMap<u32 tid, OffCpuThread>`: followed threads off the CPU now, or back and their
    /// span not sent yet.
    pub const OFF_CPU_THREADS: &str = "OFF_CPU_THREADS";
    /// `HashMap<u32 uid, u32>`: entries of `OFF_CPU_THREADS` each user's threads hold, when the
    /// whole system is followed.
    pub const OFF_CPU_USERS: &str = "OFF_CPU_USERS";
    /// `HashMap<u32 tgid, RuntimeProcess>`: processes whose runtime's frames the kernel walks,
    /// filled in by userspace as it finds their runtime.
    pub const RUNTIME_PROCESSES: &str = "RUNTIME_PROCESSES";
    /// `ProgramArray`s indexed by [`crate::runtimes::RuntimeKind`]: the walkers of each runtime
    /// [`super::programs::SAMPLE`], [`super::programs::SYSCALL_EXIT`] and
    /// [`super::programs::ALLOC_RETURN`] hand a record of one of its processes over to, set by
    /// userspace once it has loaded them.
    pub const SAMPLE_WALKERS: &str = "SAMPLE_WALKERS";
    pub const SYSCALL_EXIT_WALKERS: &str = "SYSCALL_EXIT_WALKERS";
    pub const ALLOC_RETURN_WALKERS: &str = "ALLOC_RETURN_WALKERS";
    /// `Array<u64>` of one entry: when sampling started (`bpf_ktime_get_ns()`), set by
    /// userspace. A thread off the CPU since before is counted from then.
    pub const STARTED_NS: &str = "STARTED_NS";
    /// `Array<KernelNames>` of one entry, in the `kernel-names` object: where
    /// [`super::programs::NAME_KERNEL_ADDRESSES`] writes the names it made.
    pub const KERNEL_NAMES: &str = "KERNEL_NAMES";
}

/// Names of the programs in the eBPF object.
pub mod programs {
    /// perf_event program attached to one cpu-clock event per CPU.
    pub const SAMPLE: &str = "sample";
    /// raw tracepoint `task_newtask`: adds forked children of filtered processes to the filter.
    pub const FOLLOW_FORK: &str = "follow_fork";
    /// raw tracepoint `sched_process_exit`: takes a process out of the filter when its last
    /// thread exits, so that the filter never fills up with the dead and a pid used again by an
    /// unrelated process is not sampled.
    pub const FORGET_EXIT: &str = "forget_exit";
    /// BTF tracepoint `sched_switch`: notes when and why a followed thread leaves the CPU, and
    /// when the one coming in comes back (and, when it was away long enough, where it waited).
    pub const SCHED_SWITCH: &str = "sched_switch";
    /// task iterator: takes the kernel stacks of followed threads still off the CPU.
    pub const OFF_CPU_STACKS: &str = "off_cpu_stacks";
    /// raw tracepoint `sys_exit`: sends the span off the CPU of a thread back from a system call
    /// it blocked in, with its user stack, in its own context.
    pub const SYSCALL_EXIT: &str = "syscall_exit";
    /// uprobe on each allocation function (the attach cookie is an [`crate::AllocFunction`]).
    pub const ALLOC_ENTER: &str = "alloc_enter";
    /// uretprobe on each allocation function.
    pub const ALLOC_RETURN: &str = "alloc_return";
    /// uprobe on `free`.
    pub const FREE_ENTER: &str = "free_enter";
    /// Raw tracepoint program of the `kernel-names` object, never attached: userspace runs it
    /// (`BPF_PROG_TEST_RUN`) with up to [`crate::KERNEL_NAMES_PER_RUN`] kernel addresses as its
    /// arguments, and it has the kernel name them (`%pS`) into `KERNEL_NAMES`.
    pub const NAME_KERNEL_ADDRESSES: &str = "name_kernel_addresses";
}

/// Read-only globals set when the program is loaded (`.rodata`, frozen, so the verifier sees
/// them as constants).
pub mod globals {
    /// `u32`: nonzero when only the processes in `TGID_FILTER` are sampled.
    pub const FILTER_BY_TGID: &str = "FILTER_BY_TGID";
    /// `u32`: nonzero when children forked by a filtered process join the filter.
    pub const FOLLOW_FORKS: &str = "FOLLOW_FORKS";
    /// `u32`: the profiler's own tgid, never sampled.
    pub const PROFILER_TGID: &str = "PROFILER_TGID";
    /// `u32`: stack copy cap in bytes: 0 for no copy, else a multiple of
    /// [`crate::STACK_PAGE_SIZE`] between one page and [`crate::MAX_STACK_COPY`].
    pub const STACK_COPY_CAP: &str = "STACK_COPY_CAP";
    /// `u32`: byte offset of `tgid` in the kernel's `struct task_struct` (from its BTF).
    pub const TASK_TGID_OFFSET: &str = "TASK_TGID_OFFSET";
    /// `u32`: byte offset of `comm` in `struct task_struct`.
    pub const TASK_COMM_OFFSET: &str = "TASK_COMM_OFFSET";
    /// `u64`: the address of the kernel's `__schedule`, the innermost frame of a blocked
    /// thread's kernel stack (0 when hidden).
    pub const SCHEDULE_ADDR: &str = "SCHEDULE_ADDR";
    /// `u32`: byte offset of `start_time` (`CLOCK_MONOTONIC` ns) in `struct task_struct`.
    pub const TASK_START_TIME_OFFSET: &str = "TASK_START_TIME_OFFSET";
    /// `u32`: byte offset of `__state` in `struct task_struct`.
    pub const TASK_STATE_OFFSET: &str = "TASK_STATE_OFFSET";
    /// `u32`: byte offset of `on_cpu` (nonzero while it runs) in `struct task_struct`.
    pub const TASK_ON_CPU_OFFSET: &str = "TASK_ON_CPU_OFFSET";
    /// `u32`: byte offset of `signal` (the thread group's `struct signal_struct *`) in
    /// `struct task_struct`.
    pub const TASK_SIGNAL_OFFSET: &str = "TASK_SIGNAL_OFFSET";
    /// `u32`: byte offset of `live` (the group's live threads, an `atomic_t`) in
    /// `struct signal_struct`.
    pub const SIGNAL_LIVE_OFFSET: &str = "SIGNAL_LIVE_OFFSET";
    /// `u32`: byte offset of `real_cred` (`const struct cred *`) in `struct task_struct`.
    pub const TASK_REAL_CRED_OFFSET: &str = "TASK_REAL_CRED_OFFSET";
    /// `u32`: byte offset of `euid` (a `kuid_t`) in `struct cred`.
    pub const CRED_EUID_OFFSET: &str = "CRED_EUID_OFFSET";
    /// `u32`: byte offset of `user_ns` (`struct user_namespace *`) in `struct cred`.
    pub const CRED_USER_NS_OFFSET: &str = "CRED_USER_NS_OFFSET";
    /// `u32`: byte offsets of `level` (`int`), `parent` and `owner` (a `kuid_t`) in
    /// `struct user_namespace`.
    pub const USER_NS_LEVEL_OFFSET: &str = "USER_NS_LEVEL_OFFSET";
    pub const USER_NS_PARENT_OFFSET: &str = "USER_NS_PARENT_OFFSET";
    pub const USER_NS_OWNER_OFFSET: &str = "USER_NS_OWNER_OFFSET";
    /// `u32`: a [`crate::FramePointers`]: when the kernel walks the user frame-pointer chain.
    pub const FRAME_POINTERS: &str = "FRAME_POINTERS";
    /// `u32`: byte offset of `thread.fsbase` in `struct task_struct`: a user thread's FS base,
    /// which glibc's `pthread_self()` (and so CPython's `thread_id`) is.
    pub const TASK_FSBASE_OFFSET: &str = "TASK_FSBASE_OFFSET";
    /// `u32`: nonzero to record spans off the CPU (`--off-cpu`, `--wall`).
    pub const OFF_CPU: &str = "OFF_CPU";
    /// `u32`: nonzero to record waits for a CPU (runnable) too (`--wall`).
    pub const RUNQUEUE: &str = "RUNQUEUE";
    /// `u64`: spans off the CPU shorter than this are not recorded, in nanoseconds.
    pub const MIN_OFF_CPU_NS: &str = "MIN_OFF_CPU_NS";
    /// `u32`: the leak tracker follows one allocation in this many, chosen at random (1: all).
    pub const SAMPLE_EVERY: &str = "SAMPLE_EVERY";
}
