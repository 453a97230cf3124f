//! Go's goroutine labels, read at sample time: the labels of the goroutine a thread runs change
//! as soon as it runs another, so userspace could not read them later. And the goroutine's stack,
//! when the thread has left it for its own: Go's frames are otherwise on the native stack.
//!
//! From the thread pointer (offsets from userspace, per process, in `RUNTIME_PROCESSES`): the
//! thread's current `g` in its static TLS block, its thread `g.m`, the user goroutine `m.curg`
//! the thread runs (`g` itself may be the thread's scheduling or signal stack), and `g.labels`.
//! Up to Go 1.23 that is a `map[string]string`, whose buckets are read in `bpf_loop` steps; from
//! 1.24, a slice of key-value pairs. Every read goes through `bpf_probe_read_user`, every walk is
//! bounded: a goroutine with garbage labels costs failed reads, never more.
//!
//! A thread on its scheduling stack (`g` is `m.g0`) while it runs a goroutine is there for the
//! goroutine (C code it called, the runtime's work on its behalf): the goroutine's stack, from
//! where it stopped (`g.sched`), is copied after the labels, as much of it as of a thread's stack
//! (none with frame-pointer call graphs, which do not unwind copies).
use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{helpers::generated::bpf_loop, macros::map, maps::PerCpuArray};
use profiler_common::runtimes::{
    ProcessRecord, RuntimeProcess, RuntimeWalk,
    go::{
        GOROUTINE_BYTES_OFFSET, GoLabel, GoLabels, GoLabelsLayout, GoProcess, GoSample, GoroutineStack,
        LABELS_HEADER_BYTES, MAX_GO_LABEL_BYTES, MAX_GO_LABELS, MAX_GOROUTINE_STACK_BYTES,
    },
};

use super::{
    fields::{bounded, byte, field, read_u64, walk_of},
    thread::thread_local,
};
use crate::{memory::read_user, stack::stack_copy_cap};

/// A Go string header: pointer, then length.
const STRING_BYTES: usize = 16;
/// Slots of a classic map bucket.
const BUCKET_SLOTS: usize = 8;
/// A bucket of a classic `map[string]string`: the slots' top hashes, their keys, their values,
/// then the overflow bucket's address.
const BUCKET_BYTES: usize = BUCKET_SLOTS + 2 * BUCKET_SLOTS * STRING_BYTES + size_of::<u64>();
const BUCKET_KEYS: usize = BUCKET_SLOTS;
const BUCKET_VALUES: usize = BUCKET_KEYS + BUCKET_SLOTS * STRING_BYTES;
const BUCKET_OVERFLOW: usize = BUCKET_VALUES + BUCKET_SLOTS * STRING_BYTES;
/// `hmap.flags` (then `hmap.B`, log2 of the buckets) and `hmap.buckets`.
const HMAP_FLAGS: u64 = 8;
const HMAP_BUCKETS: u64 = 16;
/// A slot whose top hash is below this is empty (or evacuated, which a map of labels, built
/// once, never is): Go's `minTopHash`.
const MIN_TOP_HASH: u8 = 5;
/// Buckets read at most, overflow buckets included. A set of up to 8 labels fits in one bucket,
/// of up to 13 in two: a set needing more is cut (more than `MAX_GO_LABELS` anyway).
const MAX_BUCKETS: u32 = 4;
/// Bytes of an element of a 1.24+ label slice: key and value strings.
const PAIR_BYTES: u64 = 2 * STRING_BYTES as u64;

/// Where a CPU reads a map bucket.
#[map(name = "GO_READS")]
static GO_READS: PerCpuArray<[u8; BUCKET_BYTES]> = PerCpuArray::with_max_entries(1, 0);

/// `g.stack.hi`, the top of a goroutine's stack, the same in every release.
const G_STACK_HI: u64 = 8;
/// `m.g0`, the thread's scheduling stack's `g`, first in every release.
const M_G0: u64 = 0;

/// Reads the labels of the goroutine the current thread of `process` runs into `out` (room for
/// a [`GoSample`]), and its stack if the thread left it for its own; returns the outcome and the
/// bytes written: the labels up to the last one, or all of them and the stack as far as copied.
pub fn walk(process: &RuntimeProcess, _tid: u32, out: *mut u8) -> (RuntimeWalk, u32) {
    let Some(go) = GoProcess::of_runtime(process) else { return (RuntimeWalk::ReadError, 0) };
    let sample = out.cast::<GoSample>();
    let (labels, goroutine) = unsafe { (&raw mut (*sample).labels, &raw mut (*sample).goroutine) };
    unsafe {
        (*labels).count = 0;
        (*labels).truncated = 0;
        (*goroutine).sp = 0;
    }
    let outcome = match thread(go).and_then(|thread| {
        copy_left_goroutine(go, &thread, goroutine);
        read_labels(go, thread.curg, labels)
    }) {
        Ok(()) => RuntimeWalk::Complete,
        Err(outcome) => outcome,
    };
    let len = match unsafe { ((*goroutine).sp, (*goroutine).len) } {
        (0, _) => {
            LABELS_HEADER_BYTES as u32 + count(labels).min(MAX_GO_LABELS as u32) * size_of::<GoLabel>() as u32
        }
        (_, len) => GOROUTINE_BYTES_OFFSET as u32 + len.min(MAX_GOROUTINE_STACK_BYTES as u32),
    };
    (outcome, len)
}

/// A thread of Go's: its current `g`, its `m`, and the goroutine it runs (0: none).
struct Thread {
    g: u64,
    m: u64,
    curg: u64,
}

fn thread(go: &GoProcess) -> Result<Thread, RuntimeWalk> {
    let g = thread_local(go.g_offset).ok_or(RuntimeWalk::ReadError)?;
    if g == 0 {
        // A thread Go did not start (C code's, in a program with cgo).
        return Err(RuntimeWalk::NotItsThread);
    }
    let m = read_u64(g + u64::from(go.g_m)).ok_or(RuntimeWalk::ReadError)?;
    let curg = read_u64(m + u64::from(go.m_curg)).ok_or(RuntimeWalk::ReadError)?;
    Ok(Thread { g, m, curg })
}

/// Copies the stack of the goroutine `thread` runs into `goroutine` when the thread is on its
/// scheduling stack (not on its signal stack, where the goroutine's `sched` is stale: it was
/// interrupted, not left). A stack that cannot be read is sent with no bytes.
fn copy_left_goroutine(go: &GoProcess, thread: &Thread, goroutine: *mut GoroutineStack) {
    let cap = stack_copy_cap() as u64;
    if cap == 0 || thread.curg == 0 || thread.g == thread.curg || read_u64(thread.m + M_G0) != Some(thread.g)
    {
        return;
    }
    let sched = thread.curg + u64::from(go.g_sched);
    let (Some(sp), Some(pc), Some(bp), Some(hi)) = (
        read_u64(sched),
        read_u64(sched + 8),
        read_u64(sched + u64::from(go.gobuf_bp)),
        read_u64(thread.curg + G_STACK_HI),
    ) else {
        return;
    };
    if sp == 0 || sp >= hi {
        return;
    }
    let whole = hi - sp;
    let len = core::hint::black_box(whole.min(cap)).min(MAX_GOROUTINE_STACK_BYTES as u64) as usize;
    let copied = unsafe { read_user((&raw mut (*goroutine).bytes).cast(), len, sp) }.is_ok();
    unsafe {
        (*goroutine).pc = pc;
        (*goroutine).bp = bp;
        (*goroutine).len = if copied { len as u32 } else { 0 };
        (*goroutine).truncated = u32::from(whole > len as u64);
        (*goroutine).sp = sp;
    }
}

/// Reads the labels of the goroutine `curg` (0: none) into `labels`.
fn read_labels(go: &GoProcess, curg: u64, labels: *mut GoLabels) -> Result<(), RuntimeWalk> {
    if curg == 0 {
        // The scheduler, or the garbage collector's own work: no goroutine, no labels.
        return Ok(());
    }
    let set = read_u64(curg + u64::from(go.g_labels)).ok_or(RuntimeWalk::ReadError)?;
    match set {
        0 => Ok(()),
        set if go.labels_layout == GoLabelsLayout::Slice as u32 => read_slice(set, labels),
        set => read_map(set, labels),
    }
}

/// The state of a read of a label set, between its steps.
struct Read {
    labels: *mut GoLabels,
    /// The slice's elements; the map's buckets.
    start: u64,
    /// The slice's length; the map's main buckets.
    len: u64,
    /// The map's main bucket being read, and the next bucket to read (0: the next main one).
    main: u64,
    next: u64,
    /// A [`RuntimeWalk`]: `Complete` once the whole set is read.
    outcome: u32,
}

/// Reads the labels of a 1.24+ label set, a slice at `set`.
fn read_slice(set: u64, labels: *mut GoLabels) -> Result<(), RuntimeWalk> {
    let start = read_u64(set).ok_or(RuntimeWalk::ReadError)?;
    let len = read_u64(set + 8).ok_or(RuntimeWalk::ReadError)?;
    let mut read = Read { labels, start, len, main: 0, next: 0, outcome: RuntimeWalk::Complete as u32 };
    let step: unsafe extern "C" fn(u64, *mut c_void) -> i64 = slice_step;
    unsafe { bpf_loop(MAX_GO_LABELS as u32, step as *mut c_void, (&raw mut read).cast(), 0) };
    if len > MAX_GO_LABELS as u64 {
        unsafe { (*labels).truncated = 1 };
    }
    outcome(&read)
}

/// `bpf_loop`'s callback: the label at `index` of the slice of `read`. Returns 1 to stop.
unsafe extern "C" fn slice_step(index: u64, read: *mut c_void) -> i64 {
    let read = unsafe { &mut *read.cast::<Read>() };
    if index >= read.len {
        return 1;
    }
    let mut pair = [0u64; 4];
    let at = read.start + index * PAIR_BYTES;
    if unsafe { read_user(pair.as_mut_ptr().cast(), size_of::<[u64; 4]>(), at) }.is_err()
        || add_label(read.labels, [pair[0], pair[1]], [pair[2], pair[3]]).is_err()
    {
        read.outcome = RuntimeWalk::ReadError as u32;
        return 1;
    }
    0
}

/// Reads the labels of an up to 1.23 label set, a pointer to a map at `set`.
fn read_map(set: u64, labels: *mut GoLabels) -> Result<(), RuntimeWalk> {
    let hmap = read_u64(set).ok_or(RuntimeWalk::ReadError)?;
    if hmap == 0 {
        return Ok(());
    }
    let count = read_u64(hmap).ok_or(RuntimeWalk::ReadError)?;
    // `hmap.B`, after the one-byte `hmap.flags`.
    let log_buckets = read_u64(hmap + HMAP_FLAGS).ok_or(RuntimeWalk::ReadError)? >> 8 & 0xff;
    let buckets = read_u64(hmap + HMAP_BUCKETS).ok_or(RuntimeWalk::ReadError)?;
    if buckets == 0 {
        return Ok(());
    }
    let len = 1 << log_buckets.min(MAX_BUCKETS.ilog2() as u64);
    let mut read =
        Read { labels, start: buckets, len, main: 0, next: buckets, outcome: RuntimeWalk::Truncated as u32 };
    let step: unsafe extern "C" fn(u64, *mut c_void) -> i64 = map_step;
    unsafe { bpf_loop(MAX_BUCKETS * BUCKET_SLOTS as u32, step as *mut c_void, (&raw mut read).cast(), 0) };
    if count > u64::from(self::count(labels)) {
        unsafe { (*labels).truncated = 1 };
    }
    match outcome(&read) {
        // Buckets left unread, or more labels than a record holds: what was read stands.
        Err(RuntimeWalk::Truncated) => Ok(()),
        outcome => outcome,
    }
}

/// `bpf_loop`'s callback: slot `index % 8` of the bucket being read of the map of `read`, which
/// is read first at slot 0. Returns 1 to stop.
unsafe extern "C" fn map_step(index: u64, read: *mut c_void) -> i64 {
    let read = unsafe { &mut *read.cast::<Read>() };
    let Some(bucket) = GO_READS.get_ptr_mut(0) else { return 1 };
    let bucket = unsafe { &mut *bucket };
    let slot = (index % BUCKET_SLOTS as u64) as u32;
    if slot == 0 {
        if read.next == 0 {
            read.main += 1;
            if read.main >= read.len {
                read.outcome = RuntimeWalk::Complete as u32;
                return 1;
            }
            read.next = read.start + read.main * BUCKET_BYTES as u64;
        }
        if unsafe { read_user(bucket.as_mut_ptr(), BUCKET_BYTES, read.next) }.is_err() {
            read.outcome = RuntimeWalk::ReadError as u32;
            return 1;
        }
        read.next = field(bucket, BUCKET_OVERFLOW as u32).unwrap_or(0);
    }
    if byte(bucket, slot).is_none_or(|top| top < MIN_TOP_HASH) {
        return 0;
    }
    let string = |at: usize| {
        let at = at as u32 + slot * STRING_BYTES as u32;
        Some([field(bucket, at)?, field(bucket, at + 8)?])
    };
    let (Some(key), Some(value)) = (string(BUCKET_KEYS), string(BUCKET_VALUES)) else { return 1 };
    match add_label(read.labels, key, value) {
        Ok(()) => 0,
        Err(outcome) => {
            read.outcome = outcome as u32;
            1
        }
    }
}

/// Adds the label of `key` and `value` (Go strings: address and length) to `labels`;
/// `Truncated` when the record is full.
fn add_label(labels: *mut GoLabels, key: [u64; 2], value: [u64; 2]) -> Result<(), RuntimeWalk> {
    let at = bounded(count(labels), MAX_GO_LABELS - 1).ok_or(RuntimeWalk::Truncated)?;
    let label = unsafe { (&raw mut (*labels).labels).cast::<GoLabel>().add(at) };
    unsafe {
        (*label).key_len = key[1].min(u64::from(u32::MAX)) as u32;
        (*label).value_len = value[1].min(u64::from(u32::MAX)) as u32;
        read_string((&raw mut (*label).key).cast(), key)?;
        read_string((&raw mut (*label).value).cast(), value)?;
        core::ptr::write_volatile(&raw mut (*labels).count, at as u32 + 1);
    }
    Ok(())
}

/// Copies the first [`MAX_GO_LABEL_BYTES`] bytes at most of the Go string `string` to `to`.
unsafe fn read_string(to: *mut u8, [at, len]: [u64; 2]) -> Result<(), RuntimeWalk> {
    let len = core::hint::black_box(len).min(MAX_GO_LABEL_BYTES as u64) as usize;
    unsafe { read_user(to, len, at) }.map_err(|_| RuntimeWalk::ReadError)
}

/// Labels written so far. Kept in the record, out of the verifier's sight: counted in a register,
/// it would make each step a state of its own for each possible count.
fn count(labels: *mut GoLabels) -> u32 {
    unsafe { core::ptr::read_volatile(&raw const (*labels).count) }
}

fn outcome(read: &Read) -> Result<(), RuntimeWalk> {
    match walk_of(read.outcome) {
        Some(RuntimeWalk::Complete) => Ok(()),
        outcome => Err(outcome.unwrap_or(RuntimeWalk::ReadError)),
    }
}
