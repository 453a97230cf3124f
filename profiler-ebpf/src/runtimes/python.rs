//! Python frames, read at sample time: the interpreter keeps them in heap memory (frame objects
//! up to 3.10, `_PyInterpreterFrame`s in per-thread chunks from 3.11), which changes as soon as
//! the thread runs again, so userspace could not read them later.
//!
//! From `_PyRuntime` (its address and the version's offsets come from userspace, per process, in
//! `RUNTIME_PROCESSES`): the main interpreter, its list of thread states, the one whose
//! `thread_id` is the sampled thread's FS base (glibc's `pthread_self()`), its current frame, then
//! `f_back`/`previous` outwards. Each frame becomes a [`PythonFrame`]: its code object's address,
//! where it was in the code, and the code's first line (which tells userspace whether the address
//! still holds the same code object when it reads it). Every read goes through
//! `bpf_probe_read_user`: a target with a garbage `_PyRuntime` costs failed reads, never more
//! than the bounded walks below.
use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{
    helpers::generated::bpf_loop,
    macros::map,
    maps::{LruHashMap, PerCpuArray},
};
use profiler_common::runtimes::{
    ProcessRecord, RuntimeProcess, RuntimeWalk,
    python::{MAX_PYTHON_FRAMES, PythonFrame, PythonOffsets, PythonProcess, PythonRuns, python_frame_flags},
};

use super::{
    fields::{bounded, byte, field, read_u64, walk_of},
    thread::thread_pointer,
};
use crate::memory::read_user;

/// Each thread's Python thread state, as last found (checked again at every sample).
#[map(name = "PYTHON_THREADS")]
static PYTHON_THREADS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);

/// Where a CPU reads a thread state, a frame and a code object.
#[repr(C)]
pub struct Reads {
    thread: [u8; PythonOffsets::THREAD_BYTES as usize],
    frame: [u8; PythonOffsets::MAX_FRAME_BYTES as usize],
    code: [u8; PythonOffsets::CODE_BYTES as usize],
    /// Frames written so far. Kept here, out of the verifier's sight: counted in a register, it
    /// would make each iteration of the walk a state of its own for each possible count.
    written: u32,
}

#[map(name = "PYTHON_READS")]
static PYTHON_READS: PerCpuArray<Reads> = PerCpuArray::with_max_entries(1, 0);

/// Thread states looked at before giving up on finding the sampled thread's.
const MAX_THREADS: u32 = 256;
/// `_PyInterpreterFrame.owner` of a shim frame a call of the eval loop puts on the C stack
/// (`FRAME_OWNED_BY_CSTACK`, 3.12+).
const OWNED_BY_CSTACK: u8 = 3;

/// The low bits of a frame's code object pointer that are not the address (3.14's stack
/// references are tagged; earlier versions' pointers have them clear).
const CODE_TAG_BITS: u64 = 7;

/// Walks the Python frames of thread `tid` (the current one) of `process` into `frames` (room
/// for [`MAX_PYTHON_FRAMES`]); returns the outcome and the bytes of records written.
pub fn walk(process: &RuntimeProcess, tid: u32, frames: *mut u8) -> (RuntimeWalk, u32) {
    let (Some(process), Some(reads)) = (PythonProcess::of_runtime(process), PYTHON_READS.get_ptr_mut(0))
    else {
        return (RuntimeWalk::ReadError, 0);
    };
    let reads = unsafe { &mut *reads };
    let (walk, len) = match current_frame(process, tid, reads) {
        Ok(frame) => walk_frames(process, frame, reads, frames),
        Err(walk) => (walk, 0),
    };
    (walk, len.min(MAX_PYTHON_FRAMES as u32) * size_of::<PythonFrame>() as u32)
}

/// The innermost frame of the current thread (0 when it runs no Python code).
fn current_frame(process: &PythonProcess, tid: u32, reads: &mut Reads) -> Result<u64, RuntimeWalk> {
    let offsets = &process.offsets;
    let fsbase = thread_pointer().ok_or(RuntimeWalk::ReadError)?;
    read_thread_state(process, tid, fsbase, reads)?;
    let frame = field(&reads.thread, offsets.thread_frame).ok_or(RuntimeWalk::ReadError)?;
    if offsets.cframe_current_frame == PythonOffsets::NONE || frame == 0 {
        return Ok(frame);
    }
    read_u64(frame + offsets.cframe_current_frame as u64).ok_or(RuntimeWalk::ReadError)
}

/// Reads into `reads.thread` the thread state of the thread whose FS base is `fsbase`: the one
/// cached for `tid` if it still is that thread's (glibc reuses a dead thread's descriptor, and so
/// its FS base, for a new thread), else the one found in the interpreter's list.
fn read_thread_state(
    process: &PythonProcess,
    tid: u32,
    fsbase: u64,
    reads: &mut Reads,
) -> Result<(), RuntimeWalk> {
    let offsets = &process.offsets;
    if let Some(&cached) = unsafe { PYTHON_THREADS.get(tid) }
        && read_thread(cached, reads)
        && field(&reads.thread, offsets.thread_id) == Some(fsbase)
    {
        return Ok(());
    }
    let interpreter =
        read_u64(process.runtime + offsets.runtime_main_interpreter as u64).ok_or(RuntimeWalk::ReadError)?;
    let first = read_u64(interpreter + offsets.interpreter_threads as u64).ok_or(RuntimeWalk::ReadError)?;
    let mut search =
        Search { offsets, reads, fsbase, next: first, outcome: RuntimeWalk::NotItsThread as u32 };
    let step: unsafe extern "C" fn(u64, *mut c_void) -> i64 = search_step;
    unsafe { bpf_loop(MAX_THREADS, step as *mut c_void, (&raw mut search).cast(), 0) };
    match walk_of(search.outcome) {
        Some(RuntimeWalk::Complete) => {
            let _ = PYTHON_THREADS.insert(tid, search.next, 0);
            Ok(())
        }
        outcome => Err(outcome.unwrap_or(RuntimeWalk::ReadError)),
    }
}

/// A search of the interpreter's thread list, between its steps.
struct Search<'a> {
    offsets: &'a PythonOffsets,
    reads: &'a mut Reads,
    fsbase: u64,
    /// The next thread state to look at; the one found, once found.
    next: u64,
    /// A [`RuntimeWalk`]: `Complete` when found.
    outcome: u32,
}

/// `bpf_loop`'s callback: looks at one thread state of `search`. Returns 1 to stop.
unsafe extern "C" fn search_step(_index: u64, search: *mut c_void) -> i64 {
    let search = unsafe { &mut *search.cast::<Search>() };
    if search.next == 0 {
        return 1;
    }
    if !read_thread(search.next, search.reads) {
        search.outcome = RuntimeWalk::ReadError as u32;
        return 1;
    }
    if field(&search.reads.thread, search.offsets.thread_id) == Some(search.fsbase) {
        search.outcome = RuntimeWalk::Complete as u32;
        return 1;
    }
    match field(&search.reads.thread, search.offsets.thread_next) {
        Some(next) => {
            search.next = next;
            0
        }
        None => {
            search.outcome = RuntimeWalk::ReadError as u32;
            1
        }
    }
}

/// Follows the frames from `frame` outwards, writing a record for each one that runs a code
/// object. One step per frame in `bpf_loop`: the verifier checks a step once, where a loop in the
/// program would be checked once per iteration and per path through it.
fn walk_frames(
    process: &PythonProcess,
    frame: u64,
    reads: &mut Reads,
    frames: *mut u8,
) -> (RuntimeWalk, u32) {
    set_written(reads, 0);
    let mut walk = Walk { process, reads, frames, frame, outcome: RuntimeWalk::Truncated as u32 };
    let step: unsafe extern "C" fn(u64, *mut c_void) -> i64 = step;
    unsafe { bpf_loop(MAX_PYTHON_FRAMES as u32 + 1, step as *mut c_void, (&raw mut walk).cast(), 0) };
    let outcome = walk_of(walk.outcome).unwrap_or(RuntimeWalk::ReadError);
    (outcome, written(walk.reads))
}

/// The state of a walk, between its steps.
struct Walk<'a> {
    process: &'a PythonProcess,
    reads: &'a mut Reads,
    /// Where the records go (room for [`MAX_PYTHON_FRAMES`]).
    frames: *mut u8,
    /// The next frame to read (0: none).
    frame: u64,
    /// A [`RuntimeWalk`], once it is known.
    outcome: u32,
}

/// `bpf_loop`'s callback: one frame of the walk in `walk`. Returns 1 to stop.
unsafe extern "C" fn step(_index: u64, walk: *mut c_void) -> i64 {
    let walk = unsafe { &mut *walk.cast::<Walk>() };
    match read_frame(walk) {
        Ok(()) => 0,
        Err(outcome) => {
            walk.outcome = outcome as u32;
            1
        }
    }
}

/// Reads the next frame of `walk`, and writes its record if it runs a code object; `Err` ends
/// the walk with that outcome.
fn read_frame(walk: &mut Walk) -> Result<(), RuntimeWalk> {
    let (process, reads) = (walk.process, &mut *walk.reads);
    let offsets = &process.offsets;
    if walk.frame == 0 {
        return Err(RuntimeWalk::Complete);
    }
    let size = offsets.frame_bytes.min(PythonOffsets::MAX_FRAME_BYTES) as usize;
    unsafe { read_user(reads.frame.as_mut_ptr(), size, walk.frame) }.map_err(|_| RuntimeWalk::ReadError)?;
    let back = field(&reads.frame, offsets.frame_back).ok_or(RuntimeWalk::ReadError)?;
    // Objects are 8-byte aligned: 3.14's `f_executable` (a `_PyStackRef`) keeps tags there.
    let code = field(&reads.frame, offsets.frame_code).ok_or(RuntimeWalk::ReadError)? & !CODE_TAG_BITS;
    let instr = field(&reads.frame, offsets.frame_instr).ok_or(RuntimeWalk::ReadError)?;
    walk.frame = back;
    let len = written(reads) as usize;
    if offsets.runs == PythonRuns::EntryShim as u32
        && byte(&reads.frame, offsets.frame_owner) == Some(OWNED_BY_CSTACK)
    {
        // A shim: the frames since the last one were one call of the eval loop.
        return end_run(walk, len);
    }
    let run_end = run_ends_here(offsets, &reads.frame);
    // Not a code object (3.13's `f_executable` may be None): no Python location.
    let Some(first_line) = code_first_line(process, code, reads) else { return Ok(()) };
    let at = bounded(len as u32, MAX_PYTHON_FRAMES - 1).ok_or(RuntimeWalk::Truncated)?;
    let flags = if run_end { python_frame_flags::RUN_END } else { 0 };
    let record = PythonFrame { code, instr, first_line, flags };
    unsafe { walk.frames.add(at * size_of::<PythonFrame>()).cast::<PythonFrame>().write_unaligned(record) };
    set_written(reads, at as u32 + 1);
    Ok(())
}

/// Whether the frame read into `frame` is the last of its run, where the version marks it on the
/// frame itself (3.12+ marks it with the shim frame that follows).
fn run_ends_here(offsets: &PythonOffsets, frame: &[u8; PythonOffsets::MAX_FRAME_BYTES as usize]) -> bool {
    match offsets.runs {
        runs if runs == PythonRuns::OnePerCall as u32 => true,
        runs if runs == PythonRuns::EntryFlag as u32 => byte(frame, offsets.frame_is_entry).unwrap_or(0) != 0,
        _ => false,
    }
}

fn written(reads: &Reads) -> u32 {
    unsafe { core::ptr::read_volatile(&reads.written) }
}

fn set_written(reads: &mut Reads, count: u32) {
    unsafe { core::ptr::write_volatile(&mut reads.written, count) }
}

/// The first line of the code object at `code`, if it is one.
fn code_first_line(process: &PythonProcess, code: u64, reads: &mut Reads) -> Option<u32> {
    if code == 0 || unsafe { read_user(reads.code.as_mut_ptr(), reads.code.len(), code) }.is_err() {
        return None;
    }
    const OB_TYPE: u32 = 8;
    if field(&reads.code, OB_TYPE)? != process.code_type {
        return None;
    }
    Some(field(&reads.code, process.offsets.code_first_line)? as u32)
}

/// Ends the run of the eval loop call whose frames are the last ones written. A call whose frames
/// are all gone (the sample caught it popping its last one) still has its native frame: its run
/// is an empty record (no code object) that only ends it.
fn end_run(walk: &mut Walk, len: usize) -> Result<(), RuntimeWalk> {
    if len > 0 {
        let last = bounded(len as u32 - 1, MAX_PYTHON_FRAMES - 1).ok_or(RuntimeWalk::Truncated)?;
        let record = unsafe { walk.frames.add(last * size_of::<PythonFrame>()).cast::<PythonFrame>() };
        if unsafe { (*record).flags } & python_frame_flags::RUN_END == 0 {
            unsafe { (*record).flags |= python_frame_flags::RUN_END };
            return Ok(());
        }
    }
    let at = bounded(len as u32, MAX_PYTHON_FRAMES - 1).ok_or(RuntimeWalk::Truncated)?;
    let empty = PythonFrame { code: 0, instr: 0, first_line: 0, flags: python_frame_flags::RUN_END };
    unsafe { walk.frames.add(at * size_of::<PythonFrame>()).cast::<PythonFrame>().write_unaligned(empty) };
    set_written(walk.reads, at as u32 + 1);
    Ok(())
}

fn read_thread(tstate: u64, reads: &mut Reads) -> bool {
    unsafe { read_user(reads.thread.as_mut_ptr(), reads.thread.len(), tstate) }.is_ok()
}
